"""Measuring memory the way the lessons do: with ``tracemalloc``, which sees every NumPy allocation.

NumPy reports its array buffers to Python's ``tracemalloc`` (domain 389417), so the peak of
``tracemalloc`` over a call is the peak of bytes held by arrays created during it — the number that
the memory estimates of Parts 2, 3 and 7 are compared with.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def peak_memory_bytes(fn: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[T, int]:
    """Call ``fn(*args, **kwargs)`` and return ``(result, peak)``.

    ``peak`` is the largest number of bytes allocated during the call and still held at that moment,
    counted from the start of the call (allocations made before it are not counted). A ``fn`` that runs in
    another process and offers ``fn.peak_memory(*args, **kwargs) -> (result, peak)`` (the grader's
    ``RemoteFunction``) is measured by that method instead. Raises
    ``RuntimeError`` when tracemalloc is already tracing (nested measurements would be wrong).
    """
    remote = getattr(fn, "peak_memory", None)
    if callable(remote):  # a function that runs in another process (the grader's sandboxed re-check): that
        return remote(*args, **kwargs)  # process's own peak, measured there — tracemalloc here sees none of it
    if tracemalloc.is_tracing():
        raise RuntimeError("peak_memory_bytes cannot run inside another tracemalloc measurement")
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start, _ = tracemalloc.get_traced_memory()
        result = fn(*args, **kwargs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak - start
