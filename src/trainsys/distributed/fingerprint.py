"""Replica fingerprints on torch.distributed: the check of :mod:`trainsys.memtrain.divergence`, for real.

Every rank hashes its own copy of the parameters with
:func:`~trainsys.memtrain.divergence.parameter_fingerprint` (8 bytes of BLAKE2b over the exact bytes)
and the ranks exchange the digests with one ``all_gather`` of ``uint8`` tensors — data, never pickled
objects. Every rank then holds the same ``N`` digests and reaches the same verdict
(:func:`~trainsys.memtrain.divergence.minority_workers`).

Faults to detect are injected from the command line as ``KIND:RANK:STEP`` (:func:`parse_fault`):

- ``skip`` — rank ``RANK`` does not apply the update of step (or round) ``STEP``;
- ``flip`` — after that update, the lowest mantissa bit of the first parameter's first element flips on
  rank ``RANK`` (:func:`flip_lowest_bit_`), the smallest change a float32 can have;
- ``seed`` — rank ``RANK`` starts from weights drawn with another seed (``STEP`` must be 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from trainsys.memtrain.divergence import FINGERPRINT_BYTES, minority_workers, parameter_fingerprint

FAULT_KINDS: tuple[str, ...] = ("skip", "flip", "seed")
"""The faults :func:`parse_fault` accepts."""


@dataclass(frozen=True)
class Fault:
    """One injected fault: ``kind`` (one of :data:`FAULT_KINDS`) on ``rank`` at ``step``."""

    kind: str
    rank: int
    step: int


def parse_fault(spec: str, world_size: int, steps: int) -> Fault:
    """``"KIND:RANK:STEP"`` → :class:`Fault`; ``ValueError`` naming ``--fault`` and what was given otherwise."""
    parts = spec.split(":") if isinstance(spec, str) else []
    try:
        kind, rank, step = parts[0], int(parts[1]), int(parts[2])
        if len(parts) != 3:
            raise ValueError
    except (IndexError, ValueError):
        raise ValueError(f"--fault must be KIND:RANK:STEP with KIND in {FAULT_KINDS} and integers RANK, STEP; "
                         f"got {spec!r}") from None
    if kind not in FAULT_KINDS:
        raise ValueError(f"--fault kind must be one of {FAULT_KINDS}, got {kind!r}")
    if not 0 <= rank < world_size:
        raise ValueError(f"--fault rank must be in [0, {world_size - 1}] (the job has {world_size} ranks), got {rank}")
    if not 0 <= step < steps:
        raise ValueError(f"--fault step must be in [0, {steps - 1}], got {step}")
    if kind == "seed" and step != 0:
        raise ValueError(f"--fault seed:RANK:STEP changes the initial weights, so STEP must be 0, got {step}")
    return Fault(kind, rank, step)


def flip_lowest_bit_(tensor: torch.Tensor) -> None:
    """Flip the lowest mantissa bit of ``tensor``'s first element, in place (float32 only)."""
    if tensor.dtype != torch.float32:
        raise TypeError(f"tensor must be float32, got {tensor.dtype}")
    with torch.no_grad():
        flat = tensor.view(-1)
        flat[:1] = (flat[:1].view(torch.int32) ^ 1).view(torch.float32)


def gather_fingerprints(params: Mapping[str, np.ndarray]) -> list[bytes]:
    """Every rank's fingerprint of its ``params``, indexed by rank (an all-gather of ``N × 8`` bytes)."""
    mine = torch.tensor(list(parameter_fingerprint(params)), dtype=torch.uint8)  # (8,)
    gathered = [torch.zeros(FINGERPRINT_BYTES, dtype=torch.uint8) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, mine)
    return [bytes(t.tolist()) for t in gathered]


def check_replicas(params: Mapping[str, np.ndarray], step: int) -> dict[str, object] | None:
    """All-gather the fingerprints after ``step``; ``{"detected_at": step, "workers": [...]}`` if they differ."""
    workers = minority_workers(gather_fingerprints(params))
    return {"detected_at": step, "workers": workers} if workers else None
