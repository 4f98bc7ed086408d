r"""Module 1, Part 5, Lesson 28 — ring all-reduce, simulated message by message.

``N`` workers sit on a ring; worker ``k`` only ever sends to worker ``(k + 1) mod N``. Each worker's
array (``S`` bytes, ``n`` elements) is flattened and cut into ``N`` chunks by ``np.array_split``'s rule
(:func:`ring_chunk_bounds`: with ``n = qN + r`` chunks ``0 … r−1`` hold ``q + 1`` elements and the rest
``q``; chunks are empty when ``n < N``). Then, with steps numbered ``s = 0, 1, …``:

- **reduce-scatter**, ``N − 1`` steps: at step ``s`` worker ``k`` sends chunk ``(k − s) mod N``; the
  receiver **adds** it into its own copy of that chunk. After step ``N − 2`` worker ``k`` holds the full
  sum of chunk ``(k + 1) mod N``, which it divides by ``N`` (once: the mean, not the sum, is gathered);
- **all-gather**, ``N − 1`` steps: at step ``N − 1 + s`` worker ``k`` sends chunk ``(k + 1 − s) mod N``;
  the receiver **replaces** its copy with it.

Every worker sends ``2(N − 1)`` messages; worker ``k`` sends every chunk but ``(k + 1) mod N`` in the
first phase and every chunk but ``(k + 2) mod N`` in the second, so with ``c_j`` the size of chunk ``j``
and ``b`` bytes per element it sends exactly

.. math::

    \text{bytes}_k = b\,\bigl(2n - c_{(k+1) \bmod N} - c_{(k+2) \bmod N}\bigr) \quad (N \ge 2),\qquad
    \text{bytes}_k = 0 \quad (N = 1),

which is :math:`2\frac{N-1}{N}S` when ``N`` divides ``n`` and at most :math:`2(N-1)\lceil n/N\rceil b`
otherwise — independent of ``N`` for large ``N``: the ring is bandwidth-optimal (Patarasuk & Yuan 2009;
NCCL's bus bandwidth ``busbw = algbw · 2(N−1)/N``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trainsys._validation import describe, require_float_array, require_int

PHASES: tuple[str, str] = ("reduce-scatter", "all-gather")
"""The two phases of the ring, in order, as they appear in the log's ``"phase"`` field."""

LOG_KEYS: tuple[str, ...] = ("step", "phase", "sender", "receiver", "chunk", "bytes")
"""The keys of one message of the communication log."""


def validate_worker_arrays(worker_arrays: object) -> list[np.ndarray]:
    """Require a non-empty list (or tuple) of float arrays of one shape and one dtype; return it as a list."""
    if not isinstance(worker_arrays, (list, tuple)):
        raise TypeError(f"worker_arrays must be a list of arrays (one per worker), got {describe(worker_arrays)}")
    if len(worker_arrays) == 0:
        raise ValueError("worker_arrays must hold one array per worker, got an empty list")
    arrays = [require_float_array(f"worker_arrays[{k}]", a) for k, a in enumerate(worker_arrays)]
    for k, a in enumerate(arrays[1:], start=1):
        if a.shape != arrays[0].shape or a.dtype != arrays[0].dtype:
            raise ValueError(f"worker_arrays[{k}] must have the shape and dtype of worker_arrays[0] "
                             f"({arrays[0].shape}, {arrays[0].dtype}), got {describe(a)}")
    return arrays


def ring_chunk_bounds(numel: int, num_workers: int) -> list[tuple[int, int]]:
    """``[(start, stop)]`` of the ``N`` chunks of a flat array of ``numel`` elements (``np.array_split``'s rule).

    With ``numel = qN + r``, chunk ``j`` has ``q + 1`` elements for ``j < r`` and ``q`` otherwise; chunks
    are contiguous, in order, and may be empty when ``numel < N``.
    """
    numel = require_int("numel", numel, minimum=0)
    N = require_int("num_workers", num_workers, minimum=1)
    q, r = divmod(numel, N)
    bounds, start = [], 0
    for j in range(N):
        stop = start + q + (1 if j < r else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


# --- Lesson 28 -------------------------------------------------------------------------------------
def ring_all_reduce_mean(worker_arrays: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list[dict]]:
    r"""Mean all-reduce over a ring of ``N = len(worker_arrays)`` simulated workers.

    ``worker_arrays``: ``N`` float arrays of one shape and dtype (``ValueError`` otherwise; an empty list
    too). Returns ``(results, log)``:

    - ``results``: ``N`` new arrays of the input shape and dtype, all equal (bit for bit) to the mean
      :math:`\frac1N\sum_k a_k`; equal to :func:`~trainsys.memtrain.data_parallel.all_reduce_mean` up
      to rounding, since each chunk is summed in ring order starting at worker ``j`` for chunk ``j``;
    - ``log``: one dict per message, ordered by step then sender, with keys :data:`LOG_KEYS`:
      ``"step"`` (0 … 2N−3, numbered across both phases), ``"phase"`` (:data:`PHASES`), ``"sender"``
      ``k``, ``"receiver"`` ``(k + 1) mod N``, ``"chunk"`` (the index of the chunk sent, see the module
      docstring) and ``"bytes"`` (that chunk's element count × itemsize; 0 for an empty chunk).

    ``N = 1`` sends no message and returns a copy. The inputs are not mutated: each worker works on
    its own flat copy, and each message is a copy of a chunk taken before any receiver of that step
    writes (all sends of one step happen at once).
    """
    arrays = validate_worker_arrays(worker_arrays)
    N, shape, itemsize = len(arrays), arrays[0].shape, arrays[0].itemsize
    buffers = [a.reshape(-1).copy() for a in arrays]  # N × (n,): each worker's own flat copy
    bounds = ring_chunk_bounds(buffers[0].size, N)
    log: list[dict] = []
    for step in range(2 * (N - 1)):
        phase = PHASES[0] if step < N - 1 else PHASES[1]
        s = step if phase == PHASES[0] else step - (N - 1)
        sends = []
        for k in range(N):
            chunk = (k - s) % N if phase == PHASES[0] else (k + 1 - s) % N
            lo, hi = bounds[chunk]
            sends.append((k, (k + 1) % N, chunk, buffers[k][lo:hi].copy()))  # the message on the wire
        for sender, receiver, chunk, payload in sends:
            lo, hi = bounds[chunk]
            if phase == PHASES[0]:
                buffers[receiver][lo:hi] += payload  # reduce: add
            else:
                buffers[receiver][lo:hi] = payload  # gather: replace
            log.append({"step": step, "phase": phase, "sender": sender, "receiver": receiver,
                        "chunk": chunk, "bytes": int(payload.nbytes)})
        if step == N - 2:  # end of reduce-scatter: worker k owns the full sum of chunk (k + 1) mod N
            for k in range(N):
                lo, hi = bounds[(k + 1) % N]
                buffers[k][lo:hi] /= buffers[k].dtype.type(N)
    return [b.reshape(shape) for b in buffers], log


def bytes_sent_per_worker(log: Sequence[dict], num_workers: int) -> list[int]:
    """Total ``"bytes"`` of the messages each worker sent, from a ring log: ``[bytes of worker 0, …]``."""
    N = require_int("num_workers", num_workers, minimum=1)
    if not isinstance(log, (list, tuple)):
        raise TypeError(f"log must be a list of message dicts, got {describe(log)}")
    sent = [0] * N
    for i, message in enumerate(log):
        if not isinstance(message, dict) or not {"sender", "bytes"} <= set(message):
            raise ValueError(f"log[{i}] must be a dict with at least 'sender' and 'bytes', got {describe(message)}")
        sender = require_int(f"log[{i}]['sender']", message["sender"], minimum=0, maximum=N - 1)
        sent[sender] += require_int(f"log[{i}]['bytes']", message["bytes"], minimum=0)
    return sent


def ring_bytes_per_worker(numel: int, num_workers: int, itemsize: int) -> list[int]:
    r"""The exact bytes each worker sends in :func:`ring_all_reduce_mean` (no simulation needed).

    :math:`b\,(2n - c_{(k+1) \bmod N} - c_{(k+2) \bmod N})` for ``N ≥ 2``, 0 for ``N = 1`` (module
    docstring). Equals :math:`2(N-1)/N \cdot n b` when ``N`` divides ``n``.
    """
    numel = require_int("numel", numel, minimum=0)
    N = require_int("num_workers", num_workers, minimum=1)
    b = require_int("itemsize", itemsize, minimum=1)
    if N == 1:
        return [0]
    sizes = [hi - lo for lo, hi in ring_chunk_bounds(numel, N)]
    return [b * (2 * numel - sizes[(k + 1) % N] - sizes[(k + 2) % N]) for k in range(N)]
