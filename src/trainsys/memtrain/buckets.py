r"""Module 1, Part 5, Lesson 30 — gradient buckets: fewer, larger collectives, started early.

One all-reduce per parameter pays a fixed latency :math:`\alpha` per call; one all-reduce of the whole
gradient must wait until the backward pass has finished. PyTorch DDP (Li et al. 2020, "PyTorch
Distributed", VLDB) packs gradients into flat **buckets** and all-reduces a bucket as soon as all its
gradients exist. Backward produces gradients from the last layer to the first, so buckets are filled in
**reverse parameter order**: the first bucket holds the last layers and can start while the early
layers are still being differentiated. The time of one step's communication is roughly

.. math::

    T \approx B\,\alpha + \frac{2(N-1)}{N}\,\frac{S}{\beta}

for ``B`` buckets of ``S`` bytes in all at bandwidth :math:`\beta`: larger caps mean fewer latencies but
a later start. DDP's defaults: ``bucket_cap_mb = 25`` and a first bucket of 1 MiB (``reducer.hpp``:
``kDefaultBucketBytesCap``, ``kDefaultFirstBucketBytes``).

The filling rule is DDP's own (``torch.distributed._compute_bucket_assignment_by_size``, tested against
it in ``tests/test_m1p5_data_parallel.py``): walk the gradients in the order they become ready, **add**
each to the open bucket, and **close** the bucket as soon as its bytes reach or pass its limit
(``bytes >= limit``); the first bucket's limit is ``first_bucket_cap_bytes`` (if given), every later one
``bucket_cap_bytes``. A bucket may so overshoot its limit by its last tensor, and a tensor larger than
the limit closes the bucket it joins. With ``find_unused_parameters=False`` (the default) DDP starts with
a single bucket for all parameters and, after the first iteration, rebuilds its buckets by this rule in
the order the gradients became ready — for a sequential model the reverse of the parameter order, which
is the order :func:`bucket_gradients` uses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from trainsys._validation import describe, require_float_array, require_float_tree, require_int

BUCKET_KEYS: tuple[str, ...] = ("keys", "flat", "bytes")
"""The keys of one bucket dict."""

DDP_BUCKET_CAP_BYTES: int = 25 * 1024 * 1024
"""PyTorch DDP's default bucket cap (``bucket_cap_mb = 25``)."""

DDP_FIRST_BUCKET_CAP_BYTES: int = 1024 * 1024
"""PyTorch DDP's default first-bucket cap (1 MiB)."""


def gpt2_parameter_shapes(d: int = 768, layers: int = 12, vocab: int = 50257, context: int = 1024
                          ) -> dict[str, tuple[int, ...]]:
    """GPT-2's parameter tensors in ``named_parameters`` order (Radford et al. 2019; defaults: GPT-2 small,
    148 tensors, 124,439,808 parameters with the output layer tied to ``wte``): a realistic list of
    gradient sizes for bucketing."""
    d, layers = require_int("d", d, minimum=1), require_int("layers", layers, minimum=1)
    vocab, context = require_int("vocab", vocab, minimum=1), require_int("context", context, minimum=1)
    shapes: dict[str, tuple[int, ...]] = {"wte": (vocab, d), "wpe": (context, d)}
    for i in range(layers):
        shapes.update({f"h{i}.ln_1.w": (d,), f"h{i}.ln_1.b": (d,), f"h{i}.attn.c_attn.w": (d, 3 * d),
                       f"h{i}.attn.c_attn.b": (3 * d,), f"h{i}.attn.c_proj.w": (d, d), f"h{i}.attn.c_proj.b": (d,),
                       f"h{i}.ln_2.w": (d,), f"h{i}.ln_2.b": (d,), f"h{i}.mlp.c_fc.w": (d, 4 * d),
                       f"h{i}.mlp.c_fc.b": (4 * d,), f"h{i}.mlp.c_proj.w": (4 * d, d), f"h{i}.mlp.c_proj.b": (d,)})
    return {**shapes, "ln_f.w": (d,), "ln_f.b": (d,)}


def _caps(bucket_cap_bytes: object, first_bucket_cap_bytes: object) -> tuple[int, int]:
    cap = require_int("bucket_cap_bytes", bucket_cap_bytes, minimum=1)
    first = cap if first_bucket_cap_bytes is None else require_int("first_bucket_cap_bytes",
                                                                   first_bucket_cap_bytes, minimum=1)
    return cap, first


def assign_buckets(sizes_bytes: Sequence[int], bucket_cap_bytes: int, first_bucket_cap_bytes: int | None = None
                   ) -> list[list[int]]:
    """Group items of the given byte sizes, **in the order given**, into buckets by DDP's rule.

    Returns a list of buckets, each a list of item indices; every index appears once, in order.
    """
    cap, first = _caps(bucket_cap_bytes, first_bucket_cap_bytes)
    buckets: list[list[int]] = []
    current: list[int] = []
    filled = 0
    for i, size in enumerate(sizes_bytes):
        current.append(i)
        filled += size
        if filled >= (first if not buckets else cap):  # the open bucket is the first until one is closed
            buckets.append(current)
            current, filled = [], 0
    if current:
        buckets.append(current)
    return buckets


def _validate_grads(grads: object) -> Mapping[str, np.ndarray]:
    grads = require_float_tree("grads", grads)
    if not grads:
        raise ValueError("grads must hold at least one array, got an empty dict")
    dtypes = {value.dtype for value in grads.values()}
    if len(dtypes) != 1:
        raise ValueError(f"grads must have one dtype (a flat bucket has one), got {sorted(map(str, dtypes))}")
    return grads


def bucket_gradients(grads: Mapping[str, np.ndarray], bucket_cap_bytes: int,
                     first_bucket_cap_bytes: int | None = None) -> list[dict]:
    """Pack ``grads`` into flat buckets in **reverse** parameter order (the dict's key order, reversed).

    ``grads``: a non-empty dict of float arrays of one dtype (any shapes). ``bucket_cap_bytes`` and
    ``first_bucket_cap_bytes`` (default: the same cap) are integers ≥ 1 (``ValueError`` for ≤ 0,
    ``TypeError`` for non-integers). Returns a list of buckets in the order they are all-reduced, each
    ``{"keys": [key, …] (reverse parameter order), "flat": (numel_bucket,) new array, the raveled
    gradients concatenated in the order of "keys", "bytes": flat.nbytes}``. ``grads`` is not mutated.
    For an MLP ``{W1, b1, W2, b2}`` and a large cap: one bucket with keys ``["b2", "W2", "b1", "W1"]``.
    """
    grads = _validate_grads(grads)
    keys = list(grads)[::-1]  # reverse parameter order: the order backward produces them
    groups = assign_buckets([grads[key].nbytes for key in keys], bucket_cap_bytes, first_bucket_cap_bytes)
    buckets = []
    for group in groups:
        bucket_keys = [keys[i] for i in group]
        flat = np.concatenate([grads[key].reshape(-1) for key in bucket_keys])  # (numel_bucket,)
        buckets.append({"keys": bucket_keys, "flat": flat, "bytes": int(flat.nbytes)})
    return buckets


def unbucket_gradients(buckets: Sequence[Mapping], like: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Inverse of :func:`bucket_gradients`: a dict in ``like``'s key order, each array shaped like ``like[key]``.

    Every key of ``like`` must appear in exactly one bucket and every bucket's ``"flat"`` must have the
    total size of its keys (``ValueError`` otherwise). The results are new arrays in the buckets' dtype.
    """
    like = require_float_tree("like", like)
    if not isinstance(buckets, (list, tuple)):
        raise TypeError(f"buckets must be a list of bucket dicts, got {describe(buckets)}")
    found: dict[str, np.ndarray] = {}
    for b, bucket in enumerate(buckets):
        if not isinstance(bucket, Mapping) or set(bucket) != set(BUCKET_KEYS):
            raise ValueError(f"buckets[{b}] must be a dict with keys {list(BUCKET_KEYS)}, got {describe(bucket)}")
        flat = require_float_array(f"buckets[{b}]['flat']", bucket["flat"], ndim=1)
        offset = 0
        for key in bucket["keys"]:
            if key not in like or key in found:
                raise ValueError(f"buckets[{b}] key {key!r} is {'unknown' if key not in like else 'repeated'}")
            size = like[key].size
            found[key] = flat[offset:offset + size].reshape(like[key].shape).copy()  # like[key].shape
            offset += size
        if offset != flat.size:
            raise ValueError(f"buckets[{b}]['flat'] has {flat.size} elements, its keys need {offset}")
    missing = [key for key in like if key not in found]
    if missing:
        raise ValueError(f"buckets miss the keys {missing} of like")
    return {key: found[key] for key in like}


def collectives_per_step(params: Mapping[str, np.ndarray], bucket_caps_bytes: Sequence[int],
                         first_bucket_cap_bytes: int | None = None) -> list[int]:
    """The number of all-reduce calls per step (= buckets) for each cap in ``bucket_caps_bytes``.

    Computed from the parameters' sizes only (gradients have the parameters' shapes and dtype); for the
    lesson's plot of collectives against the cap. ``first_bucket_cap_bytes`` applies to every cap.
    """
    params = require_float_tree("params", params)
    if not isinstance(bucket_caps_bytes, (list, tuple)):
        raise TypeError(f"bucket_caps_bytes must be a list of caps in bytes, got {describe(bucket_caps_bytes)}")
    sizes = [value.nbytes for value in params.values()][::-1]  # reverse parameter order
    return [len(assign_buckets(sizes, cap, first_bucket_cap_bytes)) for cap in bucket_caps_bytes]
