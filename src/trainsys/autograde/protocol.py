"""What both ends of the student-process protocol agree on, besides the codec (:mod:`trainsys.autograde.wire`).

The grader (:mod:`trainsys.autograde.isolation`) starts a student process (:mod:`trainsys.autograde.student_side`)
and they exchange wire messages over its stdin/stdout, in this order:

1. grader → student: ``{"cells": [source, …], "names": [function, …]}`` (the grader serves one graded function;
   a test may serve several from one process); student → grader: ``{"ok", "error", "tampered"}`` once the cells
   have run (``ok``: every name is defined and callable);
2. per call, grader → student: ``{"name", "args", "kwargs", "generators"}`` (``name``: one of the names; plus
   ``"measure": True`` when the grader measures the call's memory: then ``{"ready"}`` ← , → ``{"tracemalloc"}``,
   ``{"done"}`` ← , → ``{"go"}`` around the call); student → grader: ``{"ok": True, "result", "args",
   "generators", "warnings"}`` or ``{"ok": False, "type", "message", "args"?, "generators"?}``.

``args`` after a call marks every object that was there before it (:class:`~trainsys.autograde.wire.Kept`);
a result refers to the caller's own objects by path (``Alias``, ``View``, ``Same``); a scalar with an autograd
graph travels as a dict tagged :data:`GRAPH_TAG`. Objects of :func:`shared_types` are the ones a call may
share with its arguments or update in place. Both ends carry the global generators (:func:`global_generators`).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from trainsys.autograde.wire import WireError

GRAPH_TAG = "__trainsys_graph__"  # the key that marks a scalar with its gradients


def shared_types() -> tuple[type, ...]:
    """Objects a function may return or update in place: containers, arrays, generators, torch objects."""
    types: tuple[type, ...] = (dict, list, np.ndarray, np.random.Generator, np.random.RandomState)
    torch = sys.modules.get("torch")
    if torch is not None:
        types += (torch.Tensor, torch.nn.Module, torch.Generator)
    return types


def global_generators() -> dict:
    """The global generators' states (NumPy's legacy one; torch's CPU one if torch is loaded), as wire data.

    A call carries them to the student's process and back, so that a check sees what the call did to the
    global generators (seeding them, drawing from them) exactly as it would in the kernel.
    """
    state = np.random.get_state()
    states: dict = {"numpy": [str(state[0]), state[1], int(state[2]), int(state[3]), float(state[4])]}
    if "torch" in sys.modules:
        states["torch"] = sys.modules["torch"].get_rng_state()
    return states


def set_global_generators(states: Any) -> None:
    """Set the global generators from :func:`global_generators`' data; ``WireError`` if it is not such data."""
    try:
        name, keys, pos, has_gauss, cached = states["numpy"]
        if type(keys) is not np.ndarray or keys.dtype != np.uint32 or keys.shape != (624,):
            raise ValueError("a NumPy state without 624 uint32 keys")
        np.random.set_state((str(name), keys, int(pos), int(has_gauss), float(cached)))
        if "torch" in states:
            import torch

            if not isinstance(states["torch"], torch.Tensor) or states["torch"].dtype != torch.uint8:
                raise ValueError("a torch state that is not a uint8 tensor")
            torch.set_rng_state(states["torch"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise WireError(f"invalid global generator states: {exc}") from None
