"""Checks behind the hidden tests of Module 1, Part 4 (lessons 19–24: mixed precision).

Each ``check_<function>(fn)`` runs the student's ``fn`` beside
:mod:`trainsys.memtrain.mixed_precision` on cases at float16's edges — values past 65504, subnormals
and values that round to zero, ``nan`` and ``inf``, edge shapes — and on training steps that overflow,
that sit one clean step before the scale grows, and whose gradients underflow unless scaled. Results
must be new arrays (``np.shares_memory`` with an input fails the case) and inputs must be left alone.
"""

from __future__ import annotations

import contextlib
import io
import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from trainsys.grading._harness import (
    assert_peak_within,
    fixed as _args,
    BAD,
    Args,
    CheckFailure,
    assert_array,
    assert_array_dict,
    assert_scalar,
    assert_tuple,
    assert_within_rounding,
    call,
    passed,
    run_cases,
)
from trainsys.memtrain import mixed_precision as ref
from trainsys.memtrain.mlp import init_mlp_params, make_synthetic_regression_batch, mlp_forward

TE = (TypeError,)
"""The contract says TypeError (a wrong type: a bool, a string, an array, a non-float dtype or array)."""
VE = (ValueError,)
"""The contract says ValueError (a legal type with an illegal value)."""

__all__ = [
    "check_cast_to_half_precision",
    "check_has_non_finite_gradients",
    "check_make_master_params",
    "check_mixed_precision_step",
    "check_scale_loss",
    "check_unscale_gradients",
]

CLAUSES = {
    "cast_to_half_precision": {
        "rounding": ("float64 just past float16 midpoints",),
        "what counts as overflow": ("nan and ±inf in the input are not overflow", "float16's edges"),
        "underflow is silent": ("float16's edges",),
        "mutation and memory": ("already float16 (must still copy)", "parameter-like float32 dict"),
        "failure modes": ("tree holds an integer array", "dtype = np.int8", "dtype = np.float32"),
        "metric that proves it correct": ("float16's edges", "parameter-like float32 dict"),
    },
    "make_master_params": {
        "values by input dtype": ("float16 weights (widened exactly)", "float32 MLP parameters"),
        "mutation and memory": ("float32 MLP parameters",),
        "not only the mlp": ("not only the MLP",),
        "failure modes": ("params holds a boolean array", "params holds an integer array",
                          "params holds a Python list of floats", "params holds a complex array"),
        "metric that proves it correct": ("float16 weights (widened exactly)", "float16's extremes and nan"),
    },
    "scale_loss": {
        "non-finite losses pass through": ("a nan loss passes through", "an inf loss passes through"),
        "failure modes": ("scale = 0", "loss = True", "scale = True", "loss is a 0-d array"),
        "metric that proves it correct": ("loss 0.5, scale 2^16", "a float32 scale"),
    },
    "unscale_gradients": {
        "order of operations": ("float16 gradients scaled by 2^16",),
        "mutation": ("float16 gradients scaled by 2^16", "float32 gradients, scale 1024",
                     "scale 1.0 (still new arrays)"),
        "non-finite entries pass through": ("inf and nan pass through",),
        "0-d arrays stay arrays": ("a 0-d float16 gradient stays a 0-d array",),
        "failure modes": ("scale = nan", "scale = -1", "grads holds an integer array", "scale = True"),
        "metric that proves it correct": ("float16 gradients scaled by 2^16",),
    },
    "has_non_finite_gradients": {
        "edge cases": ("float16 extremes", "empty arrays"),
        "mutation": ("+inf in the first array",),
        "memory": ("memory: 8 finite float32 arrays",),
        "failure modes": ("an inf in grads['a'] before an integer grads['n']", "grads holds a boolean array"),
        "metric that proves it correct": ("nan in a middle array only", "-inf in the last array only",
                                          "float64 [1e308, 1e308]", "float16 [65504, 65504]"),
    },
    "mixed_precision_step": {
        "the scaler's fields": ("scale 2^24 overflows float16: skip, back off, reset the tracker",
                                "one clean step before growth",
                                "batch 32, d_in 4, d_hidden 16, d_out 8, default scaler",
                                "scale 2^127 at the growth interval"),
        "mutation": ("batch 32, d_in 4, d_hidden 16, d_out 8, default scaler", "default scaler, d_out 3"),
        "overflow is an outcome, not an error": ("default scaler, d_out 3",
                                                 "scale 2^24 overflows float16: no RuntimeWarning escapes"),
        "failure modes": ("master is float64", "scaler with an extra key 'momentum'", "scaler['growth_factor'] = 1.0",
                          "scaler['growth_tracker'] = growth_interval = 5", "lr = 0",
                          "a clean step with scaler['backoff_factor'] = 2"),
        "metrics that prove it correct": ("batch 32, d_in 4, d_hidden 16, d_out 8, default scaler", "tiny gradients",
                                          "default scaler, d_out 3"),
    },
}
"""The case labels that enforce each clause of each lesson's contract (see ``trainsys.grading.clauses``)."""

F16_EDGES = np.array([65504.0, 65519.0, 65520.0, 7e4, -1e5, 3e38, 2.0**-14, 2.0**-24, 2.0**-25, 3e-8, -1e-9, 0.5],
                     dtype=np.float32)
"""float16's edges: max, rounds down to max, the first overflow, beyond it (both signs), near float32's max,
min normal, min subnormal, half of it (rounds to 0), rounds up to 2^-24, rounds to -0."""


def _normal(seed: int, shape: tuple[int, ...], dtype: type = np.float32, std: float = 1.0) -> np.ndarray:
    return np.asarray(np.random.default_rng(seed).standard_normal(shape) * std).astype(dtype)




def _tree(seed: int, dtype: type = np.float32, std: float = 1.0) -> dict[str, np.ndarray]:
    """A parameter-like dict with rectangular, square, vector and 0-d entries."""
    shapes = {"W1": (4, 3), "b1": (3,), "W2": (3, 3), "b2": (1,), "s": ()}
    return {k: _normal(seed + i, shape, dtype, std) for i, (k, shape) in enumerate(shapes.items())}


def _no_shared_memory(case: str, what: str, got: Mapping, inputs: Mapping) -> None:
    """Fail when a result array is, or views, the caller's array: mutating it would change the input."""
    for key, value in got.items():
        if isinstance(value, np.ndarray) and key in inputs and np.shares_memory(value, inputs[key]):
            raise CheckFailure(f"[{case}] {what}[{key!r}] shares memory with the input array {key!r}; "
                               "return a new array (a copy), so that changing one never changes the other")


# --- Lesson 19 -------------------------------------------------------------------------------------
def check_cast_to_half_precision(fn: Callable[..., Any]) -> str:
    """float16 values exactly as ``astype`` rounds them, the overflow report, copies, dtype rules."""
    specials = np.array([[np.nan, np.inf, -np.inf, 1e5], [np.nan, 1.0, -70000.0, 0.0]], dtype=np.float32)
    cases = [
        ("parameter-like float32 dict", _args(_tree(1))),
        ("float16's edges (max, overflow, subnormals, underflow)", _args({"edges": F16_EDGES})),
        ("nan and ±inf in the input are not overflow", _args({"a": specials, "b": F16_EDGES[::-1].copy()})),
        ("float64 input beyond float16's range", _args({"w": np.array([1e300, -1e10, 1e-300, 65504.0, 1.0 / 3])})),
        ("large weights, std 3e4 (some overflow)", _args(_tree(2, std=3e4))),
        ("already float16 (must still copy)", _args(_tree(3, dtype=np.float16))),
        ("edge shapes (1, 1), (0, 3) and ()", _args({"x": np.full((1, 1), 1e6, np.float32),
                                                    "e": np.zeros((0, 3), np.float32),
                                                    "s": np.full((), 7e4, np.float32)})),
        ("an empty dict", _args({})),
        ("dtype given as the string 'float16'", _args(_tree(4), dtype="float16")),
        ("dtype given as np.dtype('float16')", _args({"edges": F16_EDGES}, np.dtype("float16"))),
        # One rounding from float64: 1 + 2**-11 + 2**-40 is just above the float16 midpoint between 1 and
        # 1 + 2**-10 (rounds up), but through float32 it lands exactly on the midpoint and ties to 1;
        # 65519.99999999 rounds down to 65504, but through float32 it becomes 65520 and overflows.
        ("float64 just past float16 midpoints (one rounding, not two via float32)",
         _args({"m": np.array([1 + 2.0**-11 + 2.0**-40, -(1 + 2.0**-11 + 2.0**-40), 65519.99999999,
                               2.0**-25 + 2.0**-60])})),
    ]

    def compare(label: str, got: Any, expected: tuple, inputs: Args) -> None:
        half, report = assert_tuple(label, "the result (half, overflow)", got, 2)
        # exact: one IEEE conversion to float16 (round to nearest, ties to even) has a single right answer
        assert_array_dict(label, "half", half, expected[0], exact=True)
        _no_shared_memory(label, "half", half, inputs[0][0])
        if not isinstance(report, Mapping) or set(report) != set(expected[1]):
            raise CheckFailure(f"[{label}] overflow must be a dict with one count per key {sorted(expected[1])}, "
                               f"got {report!r}")
        for key, count in expected[1].items():
            if isinstance(report[key], (bool, np.bool_)) or not isinstance(report[key], (int, np.integer)) \
                    or report[key] != count:
                raise CheckFailure(f"[{label}] overflow[{key!r}] is {report[key]!r}, expected {count} "
                                   "(entries finite before the cast and ±inf after)")

    t = _tree(5)
    invalid = [
        ("dtype = np.int8 (not a float)", TE, "dtype", _args(t, np.int8)),
        ("dtype = np.float32 (not half precision)", (ValueError,), "dtype", _args(t, np.float32)),
        ("dtype = 'float64'", (ValueError,), "dtype", _args(t, "float64")),
        ("tree is a list of arrays", BAD, "tree", _args([t["W1"]])),
        ("tree holds an integer array", BAD, "tree", _args({"n": np.arange(3)})),
    ]
    return run_cases("cast_to_half_precision", fn, ref.cast_to_half_precision, cases, compare, invalid,
                     compare_with_inputs=True)


# --- Lesson 20 -------------------------------------------------------------------------------------
def check_make_master_params(fn: Callable[..., Any]) -> str:
    """float32 copies of every array, from float16, float32 and float64, sharing no memory with the input."""
    mixed = {"h": _normal(10, (3, 2), np.float16), "f": _normal(11, (2, 2)), "d": _normal(12, (5,), np.float64)}
    cases = [
        ("float32 MLP parameters (a copy, not the same arrays)",
         _args(init_mlp_params(3, 4, 2, np.random.default_rng(7)))),
        ("not only the MLP: a float32 dict with other keys ('embed', 'norm.scale', 'head') and shapes",
         _args({"embed": _normal(15, (6, 4)), "norm.scale": _normal(16, (4,)), "head": _normal(17, (4, 2, 3))})),
        ("float16 weights (widened exactly)", _args(_tree(13, dtype=np.float16))),
        ("float64 weights (rounded to float32)", _args(_tree(14, dtype=np.float64))),
        ("mixed dtypes", _args(mixed)),
        ("edge shapes (1, 1), (0,) and ()", _args({"a": np.ones((1, 1), np.float32), "e": np.zeros(0, np.float32),
                                                 "s": np.ones((), np.float32)})),
        ("float16's extremes and nan", _args({"x": np.array([65504, -65504, 2**-24, np.nan, np.inf], np.float16)})),
    ]

    def compare(label: str, got: Any, expected: dict, inputs: Args) -> None:
        # exact: float16 → float32 is exact, float32 → float32 a copy, float64 → float32 one IEEE rounding
        assert_array_dict(label, "master", got, expected, exact=True)
        _no_shared_memory(label, "master", got, inputs[0][0])

    invalid = [
        ("params is a list", TE, "params", _args([np.ones(2, np.float32)])),
        ("params holds an integer array", TE, "params", _args({"W": np.ones((2, 2), dtype=np.int32)})),
        ("params holds a boolean array", TE, "params", _args({"mask": np.ones(3, dtype=bool)})),
        ("params holds a complex array", TE, "params", _args({"W": np.ones(2, dtype=np.complex64)})),
        ("params holds a Python list of floats", TE, "params", _args({"W": [1.0, 2.0]})),
    ]
    return run_cases("make_master_params", fn, ref.make_master_params, cases, compare, invalid,
                     compare_with_inputs=True)


# --- Lesson 21 -------------------------------------------------------------------------------------
def check_scale_loss(fn: Callable[..., Any]) -> str:
    """``loss · scale`` computed in full precision, for scales above and below 1; bad scales raise."""
    cases = [
        ("loss 0.5, scale 2^16", _args(0.5, 2.0**16)),
        ("loss 1.2345678, scale 2^16 (past float16's max)", _args(1.2345678, 2.0**16)),
        ("loss 3.0, scale 0.25 (after back-offs)", _args(3.0, 0.25)),
        ("loss 0.0", _args(0.0, 1024.0)),
        ("a float32 loss", _args(np.float32(0.1), 3.0)),
        ("scale 1.0", _args(2.5, 1.0)),
        ("a float32 scale: the product is still computed in float64", _args(0.1, np.float32(3.0))),
        ("an int loss and an int scale", _args(3, 1024)),
        ("an inf loss passes through", _args(float("inf"), 2.0**16)),
        ("a nan loss passes through", _args(float("nan"), 2.0**16)),
    ]

    def compare(label: str, got: Any, expected: float) -> None:
        if type(got) is not float:
            raise CheckFailure(f"[{label}] the scaled loss must be a Python float, got "
                               f"{type(got).__module__}.{type(got).__name__} (return float(loss) * float(scale))")
        if math.isnan(expected) or math.isinf(expected):
            if not (got == expected or (math.isnan(got) and math.isnan(expected))):
                raise CheckFailure(f"[{label}] the scaled loss is {got!r}, expected {expected!r}: a non-finite loss "
                                   "passes through (Lesson 23's check finds it), it is not an error here")
            return
        # float64, to the last bit: float(loss) * float(scale) is one correctly rounded product
        assert_scalar(label, "the scaled loss", got, expected, rtol=0.0, atol=0.0)

    invalid = [
        ("scale = 0", VE, "scale", _args(1.0, 0.0)),
        ("scale = -2", VE, "scale", _args(1.0, -2.0)),
        ("scale = inf", VE, "scale", _args(1.0, float("inf"))),
        ("scale = nan", VE, "scale", _args(1.0, float("nan"))),
        ("loss is a string", TE, "loss", _args("0.5", 2.0)),
        ("loss = True", TE, "loss", _args(True, 2.0)),
        ("scale = True", TE, "scale", _args(1.0, True)),
        ("scale is the string '2.0'", TE, "scale", _args(1.0, "2.0")),
        ("loss is a 0-d array", TE, "loss", _args(np.array(0.5), 2.0)),
    ]
    return run_cases("scale_loss", fn, ref.scale_loss, cases, compare, invalid)


# --- Lesson 22 -------------------------------------------------------------------------------------
def check_unscale_gradients(fn: Callable[..., Any]) -> str:
    """g / s as new float32 arrays, divided in float32 (no underflow or overflow), inf/nan passed through."""
    small16 = {"W": _normal(20, (4, 3), np.float16, std=1e-3), "b": _normal(21, (3,), np.float16, std=1e-2)}
    big16 = {"W": np.array([[60000.0, -65504.0], [30000.0, 1.0]], np.float16)}
    bad = {"W": np.array([[1.0, np.inf], [np.nan, -np.inf]], np.float16), "b": np.ones(2, np.float16)}
    cases = [
        ("float16 gradients scaled by 2^16 (underflow if divided in float16)", _args(small16, 2.0**16)),
        ("float16 gradients, scale 0.25 (overflow if divided in float16)", _args(big16, 0.25)),
        ("a 0-d float16 gradient stays a 0-d array (scale 2^10)",
         _args({"s": np.array(3.0, np.float16), "W": np.full((2, 2), 6.0, np.float16)}, 2.0**10)),
        ("float32 gradients, scale 1024", _args(_tree(22), 1024.0)),
        ("float64 gradients, scale 3 (not a power of two)", _args(_tree(23, dtype=np.float64), 3.0)),
        ("inf and nan pass through", _args(bad, 2.0**10)),
        ("edge shapes (1, 1), (0,) and ()", _args({"a": np.full((1, 1), 2.0, np.float16),
                                                 "e": np.zeros(0, np.float16), "s": np.ones((), np.float32)}, 8.0)),
        ("scale 1.0 (still new arrays)", _args(_tree(24), 1.0)),
        ("float32 gradients, scale 3 (float32 division, not float64)", _args({"W": _normal(26, (16, 16))}, 3.0)),
        ("float64 gradients, scale 0.1 (widen to float32 first)", _args({"W": _normal(27, (8, 8), np.float64)}, 0.1)),
    ]

    def compare(label: str, got: Any, expected: dict, inputs: Args) -> None:
        # To rounding: widening to float32 (one rounding for float64 input), np.float32(scale) (one) and the
        # division (one) put the solution within gamma_3 of the exact g/s; dividing in float64 and rounding
        # once, or multiplying by np.float32(1 / scale), also stay within it. Dividing in float16 does not:
        # it underflows or overflows (trainsys.tolerance, k = 3, magnitude |g/s|).
        grads, scale = inputs[0]
        if not isinstance(got, dict):
            raise CheckFailure(f"[{label}] grads must be a dict, got {type(got).__name__}")
        if set(got) != set(expected):
            raise CheckFailure(f"[{label}] grads must have exactly the keys {sorted(expected)}, got "
                               f"{sorted(map(str, got))}")
        try:
            for key, want in expected.items():
                exact = np.asarray(grads[key], np.float64) / float(scale)
                assert_within_rounding(label, f"grads[{key!r}]", got[key], want, np.abs(exact), 3)
        except CheckFailure as failure:
            raise CheckFailure(f"{failure} — widen each array to float32 first, then divide it by "
                               "np.float32(scale)") from None
        _no_shared_memory(label, "grads", got, grads)

    g = _tree(25, dtype=np.float16)
    invalid = [
        ("scale = 0", VE, "scale", _args(g, 0.0)),
        ("scale = -1", VE, "scale", _args(g, -1.0)),
        ("scale = inf", VE, "scale", _args(g, float("inf"))),
        ("scale = nan", VE, "scale", _args(g, float("nan"))),
        ("scale = True", TE, "scale", _args(g, True)),
        ("grads is an array, not a dict", TE, "grads", _args(g["W1"], 2.0)),
        ("grads holds an integer array", TE, "grads", _args({"n": np.arange(4)}, 2.0)),
    ]
    return run_cases("unscale_gradients", fn, ref.unscale_gradients, cases, compare, invalid,
                     compare_with_inputs=True)


# --- Lesson 23 -------------------------------------------------------------------------------------
def check_has_non_finite_gradients(fn: Callable[..., Any]) -> str:
    """True for +inf, -inf or nan in any array (not only the first), False for finite extremes."""

    def with_value(value: float, key: str, dtype: type = np.float32) -> dict[str, np.ndarray]:
        tree = _tree(30, dtype=dtype)
        tree[key] = tree[key].copy()
        tree[key].flat[-1] = value
        return tree

    cases = [
        ("all finite", _args(_tree(31))),
        ("float16 extremes ±65504, 2^-24 and -0 are finite",
         _args({"x": np.array([65504, -65504, 2**-24, -0.0], np.float16)})),
        ("+inf in the first array", _args(with_value(np.inf, "W1"))),
        ("-inf in the last array only", _args(with_value(-np.inf, "s"))),
        ("nan in a middle array only", _args(with_value(np.nan, "W2"))),
        ("nan in float16 gradients", _args(with_value(np.nan, "b1", np.float16))),
        ("-inf in a float64 bias", _args(with_value(-np.inf, "b2", np.float64))),
        ("an empty dict", _args({})),
        ("empty arrays", _args({"e": np.zeros((0, 3), np.float32), "f": np.zeros(0, np.float16)})),
        ("float16 [65504, 65504]: finite entries whose float16 sum is inf", _args({"x": np.full(2, 65504, np.float16)})),
        ("float64 [1e308, 1e308]: finite entries whose sum is inf", _args({"x": np.full(2, 1e308)})),
    ]

    def compare(label: str, got: Any, expected: bool) -> None:
        if not isinstance(got, (bool, np.bool_)):
            raise CheckFailure(f"[{label}] the result must be a bool, got {type(got).__name__}")
        if bool(got) != expected:
            raise CheckFailure(f"[{label}] returned {bool(got)}, expected {expected} (True iff an *entry* is "
                               "inf or nan: test the entries with np.isfinite, not a sum)")

    invalid = [
        ("grads is a list", TE, "grads", _args([np.ones(2, np.float32)])),
        ("grads holds an integer array", TE, "grads", _args({"n": np.arange(3)})),
        ("grads holds a boolean array", TE, "grads", _args({"mask": np.ones(3, dtype=bool)})),
        ("an inf in grads['a'] before an integer grads['n']: every value is checked first", TE, "n",
         _args({"a": np.array([np.inf], np.float32), "n": np.arange(3)})),
    ]
    count = run_cases("has_non_finite_gradients", fn, ref.has_non_finite_gradients, cases, compare, invalid,
                      count_only=True)
    # Memory: 8 arrays of 2**19 float32 entries (2 MiB each, 16 MiB together), all finite so every one is
    # inspected. The reference allocates one boolean temporary of the largest array (0.5 MiB) at a time;
    # a concatenated copy of the gradients needs 16 MiB more. Limit: twice the reference plus 1 MiB.
    tree = {f"g{i}": np.full(2**19, 0.5 + i, np.float32) for i in range(8)}
    label = "memory: 8 finite float32 arrays of 2 MiB each"
    assert_peak_within(fn, label, ref.has_non_finite_gradients, (tree,), 2, 2**20,
                       "check one array at a time — never a concatenated copy of all the gradients")
    return passed("has_non_finite_gradients", count + 1)


# --- Lesson 24 -------------------------------------------------------------------------------------
def _step_case(seed: int, n: int, d_in: int, d_hidden: int, d_out: int, scaler: dict, lr: float = 0.05,
               residual: float | None = None, nan_input: bool = False) -> Callable[[], Args]:
    """Master weights, a regression batch, a scaler and ``lr``. With ``residual``, the targets sit that
    far from the float16 prediction, so the loss gradients are tiny (they vanish in float16 unless scaled)."""
    master = init_mlp_params(d_in, d_hidden, d_out, np.random.default_rng([seed, 1]))
    master["b1"] += 0.1
    X, Y = make_synthetic_regression_batch(n, d_in, d_out, np.random.default_rng([seed, 2]))
    if residual is not None:
        half, _ = ref.cast_to_half_precision(master)
        Y_hat, _ = mlp_forward(half, X.astype(np.float16))
        Y = Y_hat.astype(np.float32) + residual * np.sign(_normal(seed, Y.shape))
    if nan_input:
        X[0, 0] = np.nan
    return _args(master, X, Y, scaler, lr)


def check_mixed_precision_step(fn: Callable[..., Any]) -> str:
    """The update, the loss, skip-and-back-off on overflow, growth at the interval, no mutation."""
    default = ref.init_loss_scaler()
    near_growth = {**ref.init_loss_scaler(2.0**10, growth_interval=3), "growth_tracker": 2}
    huge = {**ref.init_loss_scaler(2.0**24, growth_interval=10), "growth_tracker": 5}
    cases = [
        ("batch 32, d_in 4, d_hidden 16, d_out 8, default scaler: a clean step", _step_case(1, 32, 4, 16, 8, default)),
        ("default scaler, d_out 3: dW2 reaches 9e4 and overflows float16", _step_case(1, 16, 5, 8, 3, default)),
        ("scale 2^24 overflows float16: skip, back off, reset the tracker", _step_case(2, 16, 5, 8, 3, huge)),
        ("one clean step before growth (tracker 2 of interval 3): grows", _step_case(3, 8, 4, 6, 2, near_growth)),
        ("tiny gradients (2/(n·d)·1e-7) that underflow float16 unless scaled, lr 1e6",
         _step_case(4, 8, 4, 6, 2, ref.init_loss_scaler(2.0**16), lr=1e6, residual=1e-7)),
        ("scale 0.5 after back-offs, growth_interval 1",
         _step_case(5, 12, 3, 5, 4, ref.init_loss_scaler(0.5, 2.0, 0.25, 1))),
        ("square shapes 6×6×6, batch 6", _step_case(6, 6, 6, 6, 6, ref.init_loss_scaler(2.0**8))),
        ("batch 1, widths 1", _step_case(7, 1, 1, 1, 1, ref.init_loss_scaler(2.0**4, growth_interval=5))),
        ("a nan in X: skip and back off", _step_case(8, 8, 4, 6, 2, ref.init_loss_scaler(2.0**12, 4.0, 0.125),
                                                      nan_input=True)),
        # targets equal to the float16 prediction: zero gradients, a clean step even at the largest scale
        ("scale 2^127 at the growth interval: 2^128 overflows float32, so the scale stays (as GradScaler's)",
         _step_case(9, 8, 4, 6, 2, ref.init_loss_scaler(2.0**127, growth_interval=1), residual=0.0)),
    ]
    originals = {label: make for label, make in cases}

    def compare(label: str, got: Any, expected: tuple, inputs: Args) -> None:
        new_master, new_scaler, info = assert_tuple(label, "the result (new_master, new_scaler, info)", got, 3)
        (master, _, _, scaler, _), _ = originals[label]()
        # The weights are float32 (eps 1.2e-7; |w| < 2.5 here, so ~3e-7 absolute) and the steps reach 0.09;
        # the gradient behind a step carries float16 rounding (eps 9.8e-4), so two correct steps whose
        # float16 arithmetic runs in another order differ by ~1e-3 of a step, ≤ 1e-4 here → rtol 1e-4, atol 2e-4.
        assert_array_dict(label, "new_master", new_master, expected[0], rtol=1e-4, atol=2e-4)
        for key in master:  # the update itself, to 2 % of its size (it can be far below the weights' rounding)
            step = expected[0][key].astype(np.float64) - master[key]
            # float16 (eps 9.8e-4): the scaled loss gradient is cast once, then summed in float16 matmuls over
            # up to 32 examples and 16 hidden units; reordered, an entry moves by several eps (more where
            # terms cancel) → 2 % of the entry, or of the largest step for entries near zero. Forgetting to
            # unscale, or updating the float16 weights, is off by orders of magnitude.
            assert_array(label, f"the update new_master[{key!r}] - master[{key!r}]", new_master[key] - master[key],
                         step, rtol=0.02, atol=0.02 * float(np.max(np.abs(step), initial=0.0)), check_dtype=False)
        for key, value in new_master.items():
            if isinstance(value, np.ndarray) and key in master and np.shares_memory(value, inputs[0][0][key]):
                raise CheckFailure(f"[{label}] new_master[{key!r}] shares memory with master[{key!r}]: the step "
                                   "returns new arrays, even when it is skipped (return copies of the master, never "
                                   "the master's own arrays)")
        if inputs[0][3] != scaler:
            raise CheckFailure(f"[{label}] the function modified its input scaler in place; return a new dict")
        if not isinstance(new_scaler, Mapping) or set(new_scaler) != set(expected[1]):
            raise CheckFailure(f"[{label}] new_scaler must be a dict with keys {sorted(expected[1])}, "
                               f"got {new_scaler!r}")
        for key, value in expected[1].items():
            if new_scaler[key] != value:
                raise CheckFailure(f"[{label}] new_scaler[{key!r}] is {new_scaler[key]!r}, expected {value!r} "
                                   f"(the scaler was {scaler}; step skipped: {expected[2]['skipped']})")
            kind = int if key in ("growth_interval", "growth_tracker") else float
            if isinstance(new_scaler[key], bool) or not isinstance(new_scaler[key], kind):
                raise CheckFailure(f"[{label}] new_scaler[{key!r}] must be a Python {kind.__name__}, got "
                                   f"{type(new_scaler[key]).__module__}.{type(new_scaler[key]).__name__}")
        if not isinstance(info, Mapping) or not {"loss", "skipped", "scale_used"} <= set(info):
            raise CheckFailure(f"[{label}] info must be a dict with keys 'loss', 'skipped', 'scale_used', got {info!r}")
        if type(info["skipped"]) is not bool or info["skipped"] != expected[2]["skipped"]:
            raise CheckFailure(f"[{label}] info['skipped'] is {info['skipped']!r} of type "
                               f"{type(info['skipped']).__module__}.{type(info['skipped']).__name__}, "
                               f"expected the Python bool {expected[2]['skipped']}")
        if not isinstance(info["loss"], float):
            raise CheckFailure(f"[{label}] info['loss'] must be a Python float, got "
                               f"{type(info['loss']).__module__}.{type(info['loss']).__name__}")
        # exact: scale_used is the scaler's own scale, passed through (no arithmetic)
        assert_scalar(label, "info['scale_used']", info["scale_used"], expected[2]["scale_used"], rtol=0.0, atol=0.0)
        if np.isfinite(expected[2]["loss"]):
            # The loss of the float16 prediction, in float32 arithmetic (eps 1.2e-7): a mean of up to 256
            # squares summed pairwise or in float64 agrees to a few eps → rtol 1e-6; a loss from a separate
            # float32 forward pass differs by ~1e-4 (and by orders of magnitude in the tiny-residual case).
            assert_scalar(label, "info['loss'] (unscaled, from the float16 prediction)", info["loss"],
                          expected[2]["loss"], rtol=1e-6, atol=0.0)

    master, X, Y, scaler, lr = _step_case(9, 6, 3, 4, 2, ref.init_loss_scaler())()[0]
    master64 = {k: v.astype(np.float64) for k, v in master.items()}
    # With the default scale 2^16 this step overflows (it is skipped), so lr is never used: an answer that
    # validates lr only where the update reads it accepts lr = 0, nan or inf here. At scale 2^8 the same
    # step is clean and backoff_factor is never used: it must be validated all the same.
    clean_scaler = ref.init_loss_scaler(2.0**8)
    invalid = [
        ("master is float64", BAD, "master", _args(master64, X, Y, scaler, lr)),
        ("master without 'b2'", BAD, "b2", _args({k: v for k, v in master.items() if k != "b2"}, X, Y, scaler, lr)),
        ("X has 4 features, W1 expects 3", BAD, "X", _args(master, _normal(1, (6, 4)), Y, scaler, lr)),
        ("Y has 5 rows, X has 6", BAD, "Y", _args(master, X, Y[:5], scaler, lr)),
        ("scaler['scale'] = 0", BAD, "scale", _args(master, X, Y, {**scaler, "scale": 0.0}, lr)),
        ("scaler['backoff_factor'] = 2", BAD, "backoff_factor",
         _args(master, X, Y, {**scaler, "backoff_factor": 2.0}, lr)),
        ("scaler without 'growth_tracker'", BAD, "growth_tracker",
         _args(master, X, Y, {k: v for k, v in scaler.items() if k != "growth_tracker"}, lr)),
        ("scaler with an extra key 'momentum'", BAD, "momentum", _args(master, X, Y, {**scaler, "momentum": 0.9}, lr)),
        ("scaler['growth_factor'] = 1.0 (must be > 1)", BAD, "growth_factor",
         _args(master, X, Y, {**scaler, "growth_factor": 1.0}, lr)),
        ("scaler['growth_interval'] = 0", BAD, "growth_interval",
         _args(master, X, Y, {**scaler, "growth_interval": 0, "growth_tracker": 0}, lr)),
        ("scaler['growth_tracker'] = growth_interval = 5", BAD, "growth_tracker",
         _args(master, X, Y, {**scaler, "growth_interval": 5, "growth_tracker": 5}, lr)),
        ("lr = 0 (on a skipped step, where lr is never used: it is validated first)", BAD, "lr",
         _args(master, X, Y, scaler, 0.0)),
        ("lr = nan", BAD, "lr", _args(master, X, Y, scaler, float("nan"))),
        ("lr = inf", BAD, "lr", _args(master, X, Y, scaler, float("inf"))),
        ("a clean step with scaler['backoff_factor'] = 2: every field is validated before anything is computed",
         BAD, "backoff_factor", _args(master, X, Y, {**clean_scaler, "backoff_factor": 2.0}, lr)),
    ]
    count = run_cases("mixed_precision_step", fn, ref.mixed_precision_step, cases, compare, invalid,
                      compare_with_inputs=True, count_only=True)
    _check_no_warnings(fn, "scale 2^24 overflows float16: no RuntimeWarning escapes",
                       _step_case(2, 16, 5, 8, 3, huge))
    count += 1
    return passed("mixed_precision_step", count)


def _check_no_warnings(fn: Callable[..., Any], label: str, make: Callable[[], Args]) -> None:
    """The overflow is an outcome: under NumPy's default error state, the step must not warn about it."""
    args, kwargs = make()
    with warnings.catch_warnings(record=True) as caught, np.errstate(all="warn"), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("always")
        call(fn, label, *args, **kwargs)
    noisy = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    if noisy:
        raise CheckFailure(f"[{label}] the step emitted {len(noisy)} RuntimeWarning(s), e.g. {str(noisy[0].message)!r}: "
                           "run the float16 forward, backward and unscaling under "
                           "np.errstate(over='ignore', invalid='ignore') — the overflow is detected afterwards")
