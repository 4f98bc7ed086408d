"""Checks behind the hidden tests of Module 1, Part 3 (lessons 15–18: activation checkpointing).

Depths from 1 to 9 layers, segment sizes from 1 to L (including sizes that do not divide L), widths
that differ per layer so that an off-by-one boundary has the wrong shape or the wrong values, and a
float64 network (float64 must stay float64). Recomputed activations and the checkpointed gradients
must be bit-identical to the plain pass's; inputs (arrays, lists, dicts) are read only; memory is
measured against the reference's peak measured the same way. Lesson 16's rebuild with dropout must
replay the masks the package's dropout forward drew (``trainsys.memtrain.dropout_checkpointing``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from trainsys.grading._harness import (
    assert_peak_within,
    assert_unchanged,
    fixed as _fixed,
    BAD,
    Args,
    CheckFailure,
    assert_array,
    assert_tuple,
    passed,
    run_cases,
)
from trainsys.memtrain import checkpointing as ref
from trainsys.memtrain import dropout_checkpointing as dropout_ref

TE = (TypeError,)
"""The contract says TypeError (a float such as ``2.0``, or a ``bool``, where an integer is required)."""
VE = (ValueError,)
"""The contract says ValueError (a legal type with an illegal value or shape)."""

__all__ = [
    "check_mlp_forward_checkpointed",
    "check_recompute_block_activations",
    "check_mlp_backward_checkpointed",
    "check_estimate_checkpointing_memory_savings",
]

CLAUSES = {
    "mlp_forward_checkpointed": {
        "no copy of the input": ("L=4, widths=[3, 5, 4, 6, 2], batch=4, segment_size=1",),
        "dtype": ("float64 network", "L=4, widths=[3, 5, 4, 6, 2], batch=4, segment_size=1"),
        "mutation": ("L=4, widths=[3, 5, 4, 6, 2], batch=4, segment_size=1",),
        "failure modes": ("segment_size = 2.0", "segment_size = 0", "segment_size = True",
                          "params[1] with an extra key 'gamma'", "params[1]['W'] has 5 rows, layer 0 outputs 4"),
        "metric that proves it correct": ("L=4, widths=[3, 5, 4, 6, 2], batch=4, segment_size=1",
                                          "L=4, widths=[3, 5, 4, 6, 2], batch=4, segment_size=2",
                                          "memory: widths [16] + [128] * 12 + [4]"),
    },
    "recompute_block_activations": {
        "x_in comes back as it went in": ("widths=[3, 5, 4, 6, 2], start=0, stop=1",),
        "only inputs, only activations": ("widths=[3, 5, 4, 6, 2], start=0, stop=4",),
        "the layers that run": ("widths=[3, 5, 4, 6, 2], start=0, stop=1", "widths=[3, 5, 4, 6, 2], start=0, stop=4"),
        "dtype and mutation": ("float64 network", "widths=[3, 5, 4, 6, 2], start=0, stop=1"),
        "failure modes": ("start = 1.0, stop = 3.0", "integer x_in", "start = L = 3"),
        "metric that proves it correct": ("widths=[33, 129, 65, 257, 2], start=0, stop=4",
                                          "widths=[3, 5, 4, 6, 2], start=0, stop=1"),
        "replay": ("dropout p=0.5, widths=[3, 5, 4, 6, 2], start=0, stop=2",
                   "dropout p=0.5, widths=[3, 5, 4, 6, 2], start=2, stop=4",
                   "dropout p=0.3, widths=[4, 8, 8, 8, 8, 3], start=0, stop=3"),
    },
    "mlp_backward_checkpointed": {
        "schedule": ("memory: widths [16] + [128] * 12 + [4]", "memory: widths [2048, 16, 16, 4]"),
        "mutation": ("widths=[3, 5, 4, 6, 2], segment_size=1",),
        "failure modes": ("dY_hat with 3 rows for a batch of 2", "a boundary missing from the cache",
                          "segment_size = 5 > L = 3"),
        "metric that proves it correct": ("widths=[3, 5, 4, 6, 2], segment_size=1",),
    },
    "estimate_checkpointing_memory_savings": {
        "mutation": ("widths of 16 layers, batch=1024, segment_size=4", "memory: widths [64] + [512] * 8 + [8]"),
        "failure modes": ("segment_size = 0 and batch = 0", "segment_size = 2.0", "layer_widths holding 8.0"),
        "metric that proves it correct": ("widths of 16 layers, batch=1024, segment_size=4",
                                          "widths of 3 layers, batch=256, segment_size=1",
                                          "uneven widths where checkpointing costs memory"),
    },
}
"""The case labels that enforce each clause of each lesson's contract (see ``trainsys.grading.clauses``)."""



def _net(widths: list[int], n: int, seed: int) -> tuple[list[dict[str, np.ndarray]], np.ndarray]:
    rng = np.random.default_rng(seed)
    params = ref.init_deep_mlp_params(widths, rng)
    for layer in params:  # non-zero biases: a forgotten bias changes the values
        layer["b"] = rng.standard_normal(layer["b"].shape).astype(np.float32) * 0.1
    return params, rng.standard_normal((n, widths[0])).astype(np.float32)


def _net64(widths: list[int], n: int, seed: int) -> tuple[list[dict[str, np.ndarray]], np.ndarray]:
    """The network of :func:`_net` in float64 (parameters and input): float64 must stay float64."""
    params, X = _net(widths, n, seed)
    return [{k: v.astype(np.float64) for k, v in layer.items()} for layer in params], X.astype(np.float64)




NETS = [  # (widths, batch, segment sizes to try)
    ([3, 5, 4, 6, 2], 4, [1, 2, 3, 4]),
    ([4, 8, 8, 8, 8, 8, 8, 8, 8, 3], 6, [3, 4, 9]),
    ([2, 3], 1, [1]),
    ([5, 7, 6, 1], 3, [2]),
    # odd widths above the BLAS kernel's blocking: another summation order (a bias folded into the
    # product, einsum) changes the last bits here, so "bit for bit" means the same operations
    ([33, 129, 65, 257, 2], 7, [2]),
]


# Activations dominate: 12 hidden layers of width 128 on a batch of 2048, 1 MiB per activation; the
# parameters are 64 KiB per layer. Segments of 4 layers.
DEEP = ([16] + [128] * 12 + [4], 2048, 4)


def _array_list(label: str, what: str, got: Any, expected: list[np.ndarray]) -> None:
    if not isinstance(got, list) or len(got) != len(expected):
        kind = f"a list of {len(got)}" if isinstance(got, list) else type(got).__name__
        raise CheckFailure(f"[{label}] {what} must be a list of {len(expected)} arrays, got {kind}")
    for i, (g, e) in enumerate(zip(got, expected)):
        # exact: activations come from the same linear_forward / relu_forward calls as the plain pass, in
        # the network's own dtype — bit-identical by contract, not merely close
        assert_array(label, f"{what}[{i}]", g, e, exact=True)


# --- Lesson 15 -------------------------------------------------------------------------------------
def check_mlp_forward_checkpointed(fn: Callable[..., Any]) -> str:
    """Output bit-identical to the plain forward; boundaries a_0, a_s, a_2s, … and nothing else."""
    cases = []
    for i, (widths, n, sizes) in enumerate(NETS):
        for s in sizes:
            cases.append((f"L={len(widths) - 1}, widths={widths}, batch={n}, segment_size={s}", _fixed(*_net(widths, n, i), s)))
    cases.append(("float64 network: widths=[4, 6, 5, 3], batch=3, segment_size=2 (float64 stays float64)",
                  _fixed(*_net64([4, 6, 5, 3], 3, 7), 2)))

    def compare(label: str, got: Any, expected: tuple, inputs: Args) -> None:
        Y_hat, cache = assert_tuple(label, "the result (Y_hat, ckpt_cache)", got, 2)
        # exact: the contract's arithmetic is linear_forward's and relu_forward's, the same operations in the
        # same dtype as deep_mlp_forward, so every bit agrees (another kernel, e.g. einsum, does not)
        assert_array(label, "Y_hat", Y_hat, expected[0], exact=True)
        if not isinstance(cache, dict) or set(cache) != {"segment_size", "boundaries"}:
            raise CheckFailure(f"[{label}] ckpt_cache must be a dict with keys 'segment_size' and 'boundaries'")
        if cache["segment_size"] != expected[1]["segment_size"]:
            raise CheckFailure(f"[{label}] ckpt_cache['segment_size'] is {cache['segment_size']!r}")
        _array_list(label, "ckpt_cache['boundaries']", cache["boundaries"], expected[1]["boundaries"])
        if not np.shares_memory(cache["boundaries"][0], inputs[0][1]):
            raise CheckFailure(f"[{label}] boundaries[0] must be X itself, not a copy (X already exists)")

    params, X = _net([3, 4, 4, 2], 2, 9)
    extra = [dict(layer) for layer in params]
    extra[1]["gamma"] = np.ones(4, np.float32)
    broken = [dict(layer) for layer in params]
    broken[1] = {"W": np.ones((5, 4), np.float32), "b": np.zeros(4, np.float32)}  # layer 0 outputs 4, not 5
    invalid = [
        ("segment_size = 0", VE, "segment_size", _fixed(params, X, 0)),
        ("segment_size = 4 > L = 3", VE, "segment_size", _fixed(params, X, 4)),
        ("segment_size = 2.0", TE, "segment_size", _fixed(params, X, 2.0)),
        ("segment_size = True", TE, "segment_size", _fixed(params, X, True)),
        ("X with 5 features", VE, "X", _fixed(params, np.ones((2, 5), np.float32), 1)),
        ("integer X", BAD, "X", _fixed(params, np.ones((2, 3), np.int64), 1)),
        ("params[1] with an extra key 'gamma'", BAD, "params", _fixed(extra, X, 1)),
        ("params[1]['W'] has 5 rows, layer 0 outputs 4 (widths do not chain)", BAD, "params", _fixed(broken, X, 1)),
    ]
    count = run_cases("mlp_forward_checkpointed", fn, ref.mlp_forward_checkpointed, cases, compare, invalid,
                      compare_with_inputs=True, unchanged=assert_unchanged, count_only=True)
    widths, n, s = DEEP
    params, X = _net(widths, n, 60)
    # The reference holds the boundaries (1 MiB each, a_4 and a_8 here) plus the layer being run: about
    # 5 MiB. Appending each boundary before its segment runs holds one more for a while (6 MiB); keeping
    # every activation during the loop holds all 12 (13 MiB). Limit: 1.5 times plus 256 KiB.
    assert_peak_within(fn, f"memory: widths [16] + [128] * 12 + [4], batch={n}, segment_size={s}",
               ref.mlp_forward_checkpointed, (params, X, s), 1.5, 2**18,
               "activations that are not boundaries are kept alive during the pass; keep a reference only to "
               "the input of each segment and let every other activation go once the next layer has read it")
    return passed("mlp_forward_checkpointed", count + 1)


# --- Lesson 16 -------------------------------------------------------------------------------------
def check_recompute_block_activations(fn: Callable[..., Any]) -> str:
    """``[a_start, …, a_{stop−1}]`` bit-identical to the plain forward, ``x_in`` first and not copied."""
    cases = []
    for i, (widths, n, _) in enumerate(NETS):
        params, X = _net(widths, n, 20 + i)
        _, plain = ref.deep_mlp_forward(params, X)
        L = len(params)
        for start, stop in sorted({(0, L), (0, 1), (L - 1, L), (max(L - 3, 0), L - 1 if L > 1 else 1), (1 % L, L)}):
            if start < stop:
                cases.append((f"widths={widths}, start={start}, stop={stop}",
                              _fixed(params, plain["a"][start], start, stop)))
    params64, X64 = _net64([4, 6, 5, 3], 3, 27)
    cases.append(("float64 network: widths=[4, 6, 5, 3], start=0, stop=3 (float64 stays float64)",
                  _fixed(params64, X64, 0, 3)))

    def compare(label: str, got: Any, expected: dict, inputs: Args) -> None:
        if not isinstance(got, dict) or set(got) != {"a"}:
            raise CheckFailure(f"[{label}] must return a dict with the single key 'a'")
        _array_list(label, "result['a']", got["a"], expected["a"])
        if not np.shares_memory(got["a"][0], inputs[0][1]):
            raise CheckFailure(f"[{label}] result['a'][0] must be x_in itself (the boundary), not a copy")

    params, X = _net([3, 4, 4, 2], 2, 9)
    invalid = [
        ("start = stop = 1", BAD, "stop", _fixed(params, np.ones((2, 4), np.float32), 1, 1)),
        ("stop = 4 > L = 3", BAD, "stop", _fixed(params, X, 0, 4)),
        ("x_in with the wrong width for layer 1", VE, "x_in", _fixed(params, X, 1, 3)),
        ("start = L = 3 (start is out of [0, L-1], whatever stop is)", BAD, "start", _fixed(params, X, 3, 4)),
        ("start = -1: the bounds are checked before x_in's width", BAD, "start", _fixed(params, X, -1, 2)),
        ("start = 5: the bounds are checked before params[start] is read", BAD, "start", _fixed(params, X, 5, 6)),
        ("start = 1.0, stop = 3.0", TE, "start", _fixed(params, np.ones((2, 4), np.float32), 1.0, 3.0)),
        ("stop = 3.0", TE, "stop", _fixed(params, X, 0, 3.0)),
        ("integer x_in", BAD, "x_in", _fixed(params, np.ones((2, 3), np.int64), 0, 2)),
    ]
    count = run_cases("recompute_block_activations", fn, ref.recompute_block_activations, cases, compare, invalid,
                      compare_with_inputs=True, unchanged=assert_unchanged, count_only=True)
    return passed("recompute_block_activations", count + _check_replay(fn))


def _dropout_segments(widths: list[int], n: int, seed: int, p: float, s: int, dtype: type = np.float32) -> list:
    """``(params, start, stop, x_in, recorded state)`` of every segment of a checkpointed dropout forward."""
    params, X = _net64(widths, n, seed) if dtype is np.float64 else _net(widths, n, seed)
    _, ckpt = dropout_ref.dropout_mlp_forward_checkpointed(params, X, p, np.random.default_rng([seed, 1]), s)
    L = len(params)
    return [(params, k * s, min((k + 1) * s, L), x_in, state)
            for k, (x_in, state) in enumerate(zip(ckpt["boundaries"], ckpt["rng_states"]))]


def _check_replay(fn: Callable[..., Any]) -> int:
    """With ``dropout={"p", "rng_state"}``: the forward's masks replayed, activations and masks bit for bit.

    Run after the cases without dropout, so an answer without the keyword fails here and nowhere before.
    The reference is the package's, which rebuilds from the recorded state with the very draws of
    ``dropout_mlp_forward_checkpointed`` (one ``rng.random((n, w))`` per hidden layer, the top layer's
    included); a fresh generator, a mask drawn out of order or left out, or a missing or differently
    rounded ``1/(1 − p)`` changes ``keep`` or ``a``. ``p = 0.3`` makes ``1/(1−p)`` inexact in float32.
    """
    cases = []
    for widths, n, seed, p, s, dtype, picks in (
        ([3, 5, 4, 6, 2], 4, 70, 0.5, 2, np.float32, (0, 1)),
        ([4, 8, 8, 8, 8, 3], 6, 71, 0.3, 3, np.float32, (0, 1)),
        ([3, 5, 4, 6, 2], 5, 72, 0.5, 1, np.float32, (1,)),
        ([4, 6, 5, 3], 3, 73, 0.3, 2, np.float64, (0,)),
    ):
        segments = _dropout_segments(widths, n, seed, p, s, dtype)
        for k in picks:
            params, start, stop, x_in, state = segments[k]
            net = "float64 network " if dtype is np.float64 else ""
            cases.append((f"dropout p={p}, {net}widths={widths}, start={start}, stop={stop}",
                          _fixed(params, x_in, start, stop, dropout={"p": p, "rng_state": state})))
    fresh = dict(cases)

    def compare(label: str, got: Any, expected: dict, inputs: Args) -> None:
        if not isinstance(got, dict) or set(got) != {"a", "keep"}:
            raise CheckFailure(f"[{label}] with dropout, must return a dict with the keys 'a' and 'keep'")
        _array_list(label, "result['a']", got["a"], expected["a"])
        if not np.shares_memory(got["a"][0], inputs[0][1]):
            raise CheckFailure(f"[{label}] result['a'][0] must be x_in itself (the boundary), not a copy")
        keep = got["keep"]
        if not isinstance(keep, list) or len(keep) != len(expected["keep"]):
            kind = f"a list of {len(keep)}" if isinstance(keep, list) else type(keep).__name__
            raise CheckFailure(f"[{label}] result['keep'] must be a list of {len(expected['keep'])} masks (one per "
                               f"hidden layer of the block, the top layer's included when it is hidden), got {kind}")
        for i, (g, e) in enumerate(zip(keep, expected["keep"])):
            if not isinstance(g, np.ndarray) or g.dtype != np.bool_ or not np.array_equal(g, e):
                raise CheckFailure(f"[{label}] result['keep'][{i}] is not the forward's mask (a bool array drawn "
                                   "from a generator set to dropout['rng_state'], in layer order)")
        assert_unchanged(label, "dropout", fresh[label]()[1]["dropout"], inputs[1]["dropout"])

    params, X = _net([3, 4, 4, 2], 2, 9)
    state = np.random.default_rng(0).bit_generator.state
    invalid = [
        ("dropout with p = 1", VE, "p", _fixed(params, X, 0, 2, dropout={"p": 1.0, "rng_state": state})),
        ("dropout without 'rng_state'", BAD, "dropout", _fixed(params, X, 0, 2, dropout={"p": 0.5})),
    ]
    return run_cases("recompute_block_activations", fn, ref.recompute_block_activations, cases, compare, invalid,
                     compare_with_inputs=True, unchanged=assert_unchanged, count_only=True)


# --- Lesson 17 -------------------------------------------------------------------------------------
def check_mlp_backward_checkpointed(fn: Callable[..., Any]) -> str:
    """Gradients of every layer equal the plain backward's; ``L − ⌈L/s⌉`` layers recomputed."""
    cases = []
    for i, (widths, n, sizes) in enumerate(NETS):
        params, X = _net(widths, n, 40 + i)
        dY = np.random.default_rng(50 + i).standard_normal((n, widths[-1])).astype(np.float32)
        for s in sizes:
            _, ckpt = ref.mlp_forward_checkpointed(params, X, s)
            cases.append((f"widths={widths}, segment_size={s}", _fixed(params, ckpt, dY)))
    params64, X64 = _net64([4, 6, 5, 3], 3, 47)
    _, ckpt64 = ref.mlp_forward_checkpointed(params64, X64, 2)
    cases.append(("float64 network: widths=[4, 6, 5, 3], segment_size=2",
                  _fixed(params64, ckpt64, np.random.default_rng(57).standard_normal((3, 3)))))

    def compare(label: str, got: Any, expected: tuple) -> None:
        grads, count = assert_tuple(label, "the result (grads, recomputed_layers)", got, 2)
        if not isinstance(grads, list) or len(grads) != len(expected[0]):
            raise CheckFailure(f"[{label}] grads must be a list of {len(expected[0])} layer dicts")
        for l, (g, e) in enumerate(zip(grads, expected[0])):
            if not isinstance(g, dict) or set(g) != {"W", "b"}:
                raise CheckFailure(f"[{label}] grads[{l}] must be a dict with keys 'W' and 'b'")
            # exact: the contract's metric is np.array_equal with deep_mlp_backward — the same operations
            # (linear_backward, relu_backward, first_linear_backward) on bit-identical activations
            assert_array(label, f"grads[{l}]['W']", g["W"], e["W"], exact=True)
            assert_array(label, f"grads[{l}]['b']", g["b"], e["b"], exact=True)
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count != expected[1]:
            raise CheckFailure(f"[{label}] recomputed_layers is {count!r}, expected {expected[1]} (each segment "
                               "rebuilds its activations once; its last layer's output is the next boundary)")
        if type(count) is not int:
            raise CheckFailure(f"[{label}] recomputed_layers must be a Python int, got "
                               f"{type(count).__module__}.{type(count).__name__} (convert with int(...))")

    params, X = _net([3, 4, 4, 2], 2, 9)
    _, ckpt = ref.mlp_forward_checkpointed(params, X, 2)
    invalid = [
        ("dY_hat with 3 output columns for 2", VE, "dY_hat", _fixed(params, ckpt, np.ones((2, 3), np.float32))),
        ("dY_hat with 3 rows for a batch of 2 (a gradient from another batch)", VE, "dY_hat",
         _fixed(params, ckpt, np.ones((3, 2), np.float32))),
        ("a boundary missing from the cache", VE, "boundaries",
         _fixed(params, {"segment_size": 2, "boundaries": ckpt["boundaries"][:1]}, np.ones((2, 2), np.float32))),
        ("segment_size = 5 > L = 3 (one boundary, as ceil(3/5) = 1 would allow)", BAD, "segment_size",
         _fixed(params, {"segment_size": 5, "boundaries": ckpt["boundaries"][:1]}, np.ones((2, 2), np.float32))),
    ]
    count = run_cases("mlp_backward_checkpointed", fn, ref.mlp_backward_checkpointed, cases, compare, invalid,
                      unchanged=assert_unchanged, count_only=True)
    _check_backward_memory(fn)
    return passed("mlp_backward_checkpointed", count + 2)


def _check_backward_memory(fn: Callable[..., Any]) -> None:
    """One segment rebuilt at a time, dropped before the next; no gradient for the data.

    Deep network (``DEEP``): the boundaries are the caller's (not counted); the reference holds one
    rebuilt segment (3 activations of 1 MiB), the working set of one layer's backward step and the
    gradients made so far: about 8 MiB. A correct answer that rebuilds before dropping the previous
    segment, or inlines the arithmetic, measures 0.9 to 1.1 times that; keeping every rebuilt segment,
    rebuilding each segment from X or a plain pass needs 1.7 to 2 times. Limit: 1.3 times plus 256 KiB. Wide input (2048 features, 16 hidden): the reference needs about 0.4 MiB; a data gradient dX
    would be an 8 MiB (1024, 2048) array. Limit: twice the reference plus 1 MiB (small arrays, so a wider
    allowance for the allocator and the sandbox's measurement).
    """
    widths, n, s = DEEP
    params, X = _net(widths, n, 61)
    dY = np.random.default_rng(62).standard_normal((n, widths[-1])).astype(np.float32)
    _, ckpt = ref.mlp_forward_checkpointed(params, X, s)
    assert_peak_within(fn, f"memory: widths [16] + [128] * 12 + [4], batch={n}, segment_size={s}",
               ref.mlp_backward_checkpointed, (params, ckpt, dY), 1.3, 2**18,
               "more than one segment's activations are alive: rebuild a segment from its own boundary, "
               "back-propagate through it, and drop it before rebuilding the next")
    params, X = _net([2048, 16, 16, 4], 1024, 63)
    dY = np.random.default_rng(64).standard_normal((1024, 4)).astype(np.float32)
    _, ckpt = ref.mlp_forward_checkpointed(params, X, 3)
    assert_peak_within(fn, "memory: widths [2048, 16, 16, 4], batch=1024, segment_size=3 (a wide input)",
               ref.mlp_backward_checkpointed, (params, ckpt, dY), 2.0, 2**20,
               "an array as large as X was allocated: layer 0 needs only dW and db — use first_linear_backward, "
               "which does not compute the data gradient dX")


# --- Lesson 18 -------------------------------------------------------------------------------------
def check_estimate_checkpointing_memory_savings(fn: Callable[..., Any]) -> str:
    """Every entry of the estimate, on uniform and uneven widths, several depths and segment sizes."""
    configs = [([32] + [128] * 15 + [4], 1024, 4), ([32] + [128] * 15 + [4], 1024, 3), ([8, 64, 64, 1], 256, 1),
               ([16] + [64] * 24 + [2], 512, 5), ([10, 200, 50, 300, 20, 5], 64, 2), ([4, 4], 1, 1)]
    cases = [(f"widths of {len(w) - 1} layers, batch={n}, segment_size={s}", _fixed(w, n, s, 4))
             for w, n, s in configs]
    cases.append(("float16 bytes (bytes_per_elem=2)", _fixed([16] + [96] * 9 + [3], 300, 3, 2)))
    cases.append(("uneven widths where checkpointing costs memory (saved_bytes < 0)",
                  _fixed([10, 200, 50, 300, 20, 5], 32, 3, 4)))

    def compare(label: str, got: Any, expected: dict) -> None:
        if not isinstance(got, dict) or set(got) != set(expected):
            raise CheckFailure(f"[{label}] must return a dict with keys {sorted(expected)}")
        for key, value in expected.items():
            g = got[key]
            ok = isinstance(g, (int, float, np.integer, np.floating)) and not isinstance(g, (bool, np.bool_))
            if ok and key == "extra_compute_fraction":
                # float64 (eps 2.2e-16): one quotient of two exact integer sums, or a sum of up to 24 per-layer
                # quotients in another order (~24 eps) → rel_tol 1e-12; a wrong factor is off by >= 33%
                ok = math.isclose(float(g), float(value), rel_tol=1e-12, abs_tol=0.0)
            elif ok:
                # exact: bytes, layers and FLOPs are integer arithmetic on the widths (all below 2^53, so
                # exact even when carried in a float)
                ok = float(g) == float(value)
            if not ok:
                raise CheckFailure(f"[{label}] {key} is {g!r}, expected {value!r}")

    invalid = [
        ("segment_size = 0", BAD, "segment_size", _fixed([4, 8, 2], 16, 0, 4)),
        ("segment_size = 3 > L = 2", BAD, "segment_size", _fixed([4, 8, 2], 16, 3, 4)),
        ("batch = 0", BAD, "batch", _fixed([4, 8, 2], 0, 1, 4)),
        ("a single width", BAD, "layer_widths", _fixed([4], 16, 1, 4)),
        ("segment_size = 0 and batch = 0: segment_size is validated first", BAD, "segment_size",
         _fixed([4, 8, 2], 0, 0, 4)),
        ("batch = True (bools are refused)", TE, "batch", _fixed([4, 8, 2], True, 1, 4)),
        ("batch = 16.0", TE, "batch", _fixed([4, 8, 2], 16.0, 1, 4)),
        ("bytes_per_elem = 0", BAD, "bytes_per_elem", _fixed([4, 8, 2], 16, 1, 0)),
        ("bytes_per_elem = 4.0", TE, "bytes_per_elem", _fixed([4, 8, 2], 16, 1, 4.0)),
        ("segment_size = 2.0", TE, "segment_size", _fixed([4, 8, 8, 2], 16, 2.0, 4)),
        ("layer_widths holding 8.0", TE, "layer_widths", _fixed([4, 8.0, 2], 16, 1, 4)),
        ("layer_widths holding a width of 0", BAD, "layer_widths", _fixed([4, 0, 2], 16, 1, 4)),
    ]
    count = run_cases("estimate_checkpointing_memory_savings", fn, ref.estimate_checkpointing_memory_savings,
                      cases, compare, invalid, unchanged=assert_unchanged, count_only=True)
    # The estimate is arithmetic on integers: the reference's peak is its timelines' Python lists (under
    # 16 KiB). Here one activation of the network is 8 MiB (4096 × 512 float32), so an answer that builds
    # arrays of the network's size to count their bytes allocates at least that much. Limit: twice the
    # reference plus 2 MiB (the sandbox measures resident memory, whose allocator noise is well below that).
    widths = [64] + [512] * 8 + [8]
    assert_peak_within(fn, "memory: widths [64] + [512] * 8 + [8], batch=4096, segment_size=3 "
               "(no arrays of the network's size)", ref.estimate_checkpointing_memory_savings, (widths, 4096, 3, 4), 2.0, 2**21,
               "the estimate allocated arrays: compute every byte count from the widths, the batch and "
               "bytes_per_elem (integers), as checkpointing_memory_timeline does — never from arrays of "
               "the network's size")
    return passed("estimate_checkpointing_memory_savings", count + 1)
