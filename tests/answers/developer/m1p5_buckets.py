"""Mutants for Module 1, Part 5, Lesson 30: the gradient-bucketing mistakes the notebook names."""

from __future__ import annotations

import numpy as np

from trainsys.memtrain import buckets as ref

REFERENCE = "trainsys.memtrain.buckets"


def _buckets(order: str = "reverse", first_cap: bool = True, close: str = "reached"):
    """Bucketing with one deliberate mistake; the defaults are the correct rule."""

    def wrong(grads, bucket_cap_bytes, first_bucket_cap_bytes=None):
        ref.bucket_gradients(grads, bucket_cap_bytes, first_bucket_cap_bytes)  # validation
        keys = list(grads) if order == "forward" else list(grads)[::-1]
        first = first_bucket_cap_bytes if (first_cap and first_bucket_cap_bytes is not None) else bucket_cap_bytes
        groups, current, filled = [], [], 0
        for key in keys:
            limit = first if not groups else bucket_cap_bytes
            size = grads[key].nbytes
            if close == "before exceeding" and current and filled + size > limit:
                groups.append(current)
                current, filled = [], 0
            current.append(key)
            filled += size
            if close == "reached" and filled >= limit or close == "passed" and filled > limit:
                groups.append(current)
                current, filled = [], 0
        if current:
            groups.append(current)
        out = []
        for group in groups:
            flat = np.concatenate([grads[k].reshape(-1) for k in group])
            out.append({"keys": group, "flat": flat, "bytes": int(flat.nbytes)})
        return out

    return wrong


MUTANTS = {
    "bucket_gradients": [
        ("fills buckets in forward parameter order (DDP goes in reverse: last layers' gradients come first)",
         _buckets(order="forward")),
        ("ignores first_bucket_cap_bytes", _buckets(first_cap=False)),
        ("closes a bucket before a gradient would exceed the cap (keeps buckets under it; DDP adds, then closes)",
         _buckets(close="before exceeding")),
        ("closes a bucket only once it passes the cap (> instead of >=)", _buckets(close="passed")),
    ],
}
