"""Checks behind the hidden tests of Module 2, Part 1 (lessons 1–6: the MLP classifier).

Depths from 1 to 4 layers, square widths that expose a transposed matrix, batch 1, float32 and
float64, non-zero biases, logits of ±1e4 that overflow any softmax computed without subtracting the
row maximum, rows whose scales differ by 1e4 (a global maximum underflows them), exact zeros before
a ReLU, labels at both ends of their range.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from trainsys.diloco import model as ref
from trainsys.grading._harness import (
    assert_peak_within,
    assert_unchanged,
    fixed as _args,
    BAD,
    Args,
    CheckFailure,
    assert_array,
    assert_array_dict,
    assert_scalar,
    assert_tuple,
    passed,
    rng_for,
    run_cases,
)

__all__ = [
    "check_init_model_params",
    "check_relu",
    "check_model_forward",
    "check_softmax",
    "check_cross_entropy_loss",
    "check_model_backward",
]

CLAUSES = {
    "init_model_params": {
        "depth is a knob": ("sizes=[1, 1]",),
        "keys, in order": ("sizes=[3, 5, 2]",),
        "draw order": ("sizes=[3, 5, 2]",),
        "mutation": ("sizes=[3, 5, 2]",),
        "failure modes": ("sizes = [4]", "a zero width", "a width True", "a width 4.0", "sizes a NumPy array",
                          "rng = None", "rng = np.random.RandomState(0)"),
        "size": ("sizes=[3, 5, 2]",),
        "metric that proves it correct": ("sizes=[3, 5, 2]",),
    },
    "relu": {
        "special values": ("hand-made values incl. ±0, ±inf and NaN",),
        "mutation": ("tiny and subnormal values", "(2, 3) with no negative entry"),
        "failure modes": ("integer array", "a Python list"),
        "what the forward pass will rely on": ("tiny and subnormal values",),
        "metric that proves it correct": ("tiny and subnormal values", "hand-made values incl. ±0, ±inf and NaN",
                                          "(3, 2, 5) float64"),
    },
    "model_forward": {
        "keys": ("sizes=[3, 5, 2], batch=4",),
        "mutation": ("sizes=[3, 5, 2], batch=4",),
        "failure modes": ("X has 5 features", "X is 1-D", "X an integer array", "params without 'b1'",
                          "params with an extra key 'gamma0'", "params['W1'] of 5 rows", "params['b0'] of shape (1,)"),
        "memory": ("sizes=[3, 5, 2], batch=4",),
        "metric that proves it correct": ("sizes=[3, 5, 2], batch=4", "a NaN in X"),
    },
    "softmax": {
        "range": ("logits of ±1e4",),
        "mutation": ("(4, 5) standard normal",),
        "failure modes": ("1-D logits", "integer logits", "a nested Python list"),
        "metric that proves it correct": ("(4, 5) standard normal", "logits of ±1e4"),
    },
    "cross_entropy_loss": {
        "range": ("logits of ±1e4", "rows at +1e4 and -1e4"),
        "precision": ("two float32 losses of 3e38",),
        "mutation": ("(6, 4) standard normal",),
        "failure modes": ("a label equal to the number of classes", "a negative label", "float labels",
                          "2 labels for 3 examples", "empty logits", "1-D logits"),
        "metric that proves it correct": ("(6, 4) standard normal",),
    },
    "model_backward": {
        "keys": ("sizes=[3, 5, 2], batch=4",),
        "what is read": ("params['W0'] changed after the forward pass", "memory: the gradient is not sent down to X"),
        "convention at 0": ("sizes=[3, 5, 2], batch=4", "zero input rows and zero first bias"),
        "mutation": ("sizes=[3, 5, 2], batch=4",),
        "failure modes": ("a label out of range", "a negative label", "4 labels for 5 examples",
                          "cache with an extra key 'A2'", "params without 'b0'"),
        "metric that proves it correct": ("sizes=[3, 5, 2], batch=4",),
    },
}
"""The case labels that enforce each clause of each lesson's contract (see ``trainsys.grading.clauses``)."""


def _normal(seed: int, shape: tuple[int, ...], dtype: type = np.float32, std: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * std).astype(dtype)


def _params(sizes: list[int], seed: int, dtype: type = np.float32) -> dict[str, np.ndarray]:
    """Parameters with non-zero biases (a forgotten bias changes the result)."""
    rng = np.random.default_rng(seed)
    p = ref.init_model_params(sizes, rng)
    for l in range(len(sizes) - 1):
        p[f"b{l}"] = (rng.standard_normal(sizes[l + 1]) * 0.3).astype(np.float32)
    return {k: v.astype(dtype) for k, v in p.items()}


def _labels(seed: int, n: int, n_classes: int) -> np.ndarray:
    y = np.random.default_rng(seed).integers(0, n_classes, n)
    y[0], y[-1] = 0, n_classes - 1  # both ends of the range
    return y


NETS = [([3, 5, 2], 4), ([4, 4, 4, 4], 3), ([2, 3], 1), ([5, 7, 6, 3], 6), ([6, 8, 8, 8, 4], 5)]
"""(sizes, batch): 1 to 4 layers, square and rectangular, batch 1."""


# --- Lesson 1 --------------------------------------------------------------------------------------
def check_init_model_params(fn: Callable[..., Any]) -> str:
    """Keys W0, b0, …; shapes; float32; He √(2/fan_in) before a ReLU, √(1/fan_in) at the output; draw order."""
    sizes = [[3, 5, 2], [1, 1], [4, 4, 4, 4], [16, 32, 32, 10], [300, 200, 3]]
    cases = [(f"sizes={s}", (lambda i, s: lambda: ((list(s), rng_for(i, 2001)), {}))(i, s))
             for i, s in enumerate(sizes)]
    cases.append(("sizes as a tuple", lambda: (((6, 9, 4), rng_for(9, 2001)), {})))
    cases.append(("sizes of NumPy integers", lambda: (([np.int64(5), np.int32(3), np.int64(2)], rng_for(10, 2001)),
                                                      {})))
    factories = dict(cases)

    def compare(label: str, got: Any, expected: dict, inputs: Args) -> None:
        # One float64 product rounded once to float32 (the reference); casting the draw to float32 first and
        # scaling in float32 rounds twice: at most 2 eps32 = 2.4e-7 relative apart. rtol 1e-6 leaves a factor
        # of 4; atol 0 (the biases are exact zeros, and no weight is near the float32 underflow).
        assert_array_dict(label, "params", got, expected, rtol=1e-6, atol=0.0)
        if list(got) != list(expected):
            raise CheckFailure(f"[{label}] params has the keys in the order {list(got)}; the contract's order is "
                               f"{list(expected)} (each layer's weight, then its bias)")
        ref_args, ref_kwargs = factories[label]()
        ref.init_model_params(*ref_args, **ref_kwargs)
        if inputs[0][1].bit_generator.state != ref_args[1].bit_generator.state:
            raise CheckFailure(f"[{label}] the caller's rng must be advanced by exactly the weights' draws "
                               "(sum of sizes[l] * sizes[l+1] normals); its state after the call differs from the "
                               "reference's (a draw skipped or added, or drawn from a copy of rng)")

    rng = lambda: rng_for(0, 1)  # noqa: E731
    invalid = [
        ("sizes = [4] (no output layer)", BAD, "sizes", lambda: (([4], rng()), {})),
        ("a zero width", BAD, "sizes", lambda: (([3, 0, 2], rng()), {})),
        ("a width True", BAD, "sizes", lambda: (([3, True, 2], rng()), {})),
        ("a width 4.0 (a float)", BAD, "sizes", lambda: (([3, 4.0, 2], rng()), {})),
        ("sizes a NumPy array", (TypeError,), "sizes", lambda: ((np.array([3, 4, 2]), rng()), {})),
        ("sizes a string", (TypeError,), "sizes", lambda: (("342", rng()), {})),
        ("rng = 0 (a seed, not a Generator)", (TypeError,), "rng", lambda: (([3, 4, 2], 0), {})),
        ("rng = None", (TypeError,), "rng", lambda: (([3, 4, 2], None), {})),
        ("rng = np.random.RandomState(0) (the legacy generator)", (TypeError,), "rng",
         lambda: (([3, 4, 2], np.random.RandomState(0)), {})),
    ]
    # sizes is compared strictly after the call (its length too): "sizes is read, never written"
    return run_cases("init_model_params", fn, ref.init_model_params, cases, compare, invalid,
                     compare_with_inputs=True, unchanged=assert_unchanged)


# --- Lesson 2 --------------------------------------------------------------------------------------
def check_relu(fn: Callable[..., Any]) -> str:
    """``max(x, 0)`` on any rank, dtype kept, NaN propagated (a diverged run must stay visible)."""
    special = np.array([[-2.0, -0.0, 0.0, 1e-30, np.nan], [-1e-30, 7.0, -np.inf, np.inf, -0.25]], np.float32)
    tiny = np.array([1e-45, -1e-45, 3e-39, -3e-39, 1.2e-38, 1e-30, -1e-30, 0.0], np.float32)
    cases = [
        # the mask identity 1[relu(x) > 0] = 1[x > 0] the backward pass relies on, where it is easiest to lose
        ("tiny and subnormal values (relu(x) > 0 exactly where x > 0)", _args(tiny)),
        ("hand-made values incl. ±0, ±inf and NaN", _args(special)),
        ("(4, 6) float32", _args(_normal(1, (4, 6)))),
        ("(1, 1) negative", _args(np.array([[-3.0]], np.float32))),
        ("(3, 2, 5) float64", _args(_normal(2, (3, 2, 5), np.float64))),
        ("(7,) float16", _args(_normal(3, (7,), np.float16))),
        ("(2, 3) with no negative entry (the result is still a new array)",
         _args(np.abs(_normal(4, (2, 3))) + np.float32(0.5))),
    ]

    def compare(label: str, got: Any, expected: np.ndarray, inputs: Args) -> None:
        x = inputs[0][0]
        if isinstance(got, np.ndarray) and got.shape == x.shape and not np.array_equal(got > 0, x > 0):
            i = int(np.argmax((got > 0) != (x > 0)))
            raise CheckFailure(f"[{label}] relu(x) > 0 must hold exactly where x > 0 (the backward pass reads the "
                               f"ReLU mask off the activation); at flat index {i}, x = {x.flat[i]!r} and relu(x) = "
                               f"{got.flat[i]!r}")
        # exact: max(x, 0) copies or zeroes each entry, no rounding is involved
        assert_array(label, "relu(x)", got, expected, exact=True)
        if np.shares_memory(got, x):
            raise CheckFailure(f"[{label}] relu(x) shares memory with x; it must be a new array (x is never "
                               "returned or written, even when nothing is negative)")

    invalid = [
        # the contract: "A Python list or an integer array raises TypeError naming x"
        ("integer array", (TypeError,), "x", _args(np.array([1, -2]))),
        ("a Python list", (TypeError,), "x", _args([1.0, -2.0])),
        ("a Python float", BAD, "x", _args(-1.5)),
        ("a complex array", BAD, "x", _args(np.array([1 + 1j, -2 + 0j]))),
        ("a boolean array", BAD, "x", _args(np.array([True, False]))),
    ]
    return run_cases("relu", fn, ref.relu, cases, compare, invalid, compare_with_inputs=True)


# --- Lesson 3 --------------------------------------------------------------------------------------
def check_model_forward(fn: Callable[..., Any]) -> str:
    """Logits and the cache {A0 = X itself, A1, …, logits} for 1 to 4 layers, float32 and float64."""
    cases = [(f"sizes={s}, batch={n}", _args(_params(s, 10 + i), _normal(20 + i, (n, s[0]))))
             for i, (s, n) in enumerate(NETS)]
    cases.append(("float64 parameters and input", _args(_params([3, 4, 2], 30, np.float64),
                                                        _normal(31, (5, 3), np.float64))))
    X_nan = _normal(32, (3, 4))
    X_nan[1, 2] = np.nan  # a diverged input: NaN pre-activations must stay NaN through the ReLU
    cases.append(("a NaN in X (relu keeps NaN: the cache must show it)", _args(_params([4, 5, 5, 3], 33), X_nan)))

    def compare(label: str, got: Any, expected: tuple, inputs: Args) -> None:
        logits, cache = assert_tuple(label, "the result (logits, cache)", got, 2)
        assert_array(label, "logits", logits, expected[0])
        assert_array_dict(label, "cache", cache, expected[1])
        if not np.shares_memory(cache["A0"], inputs[0][1]):
            raise CheckFailure(f"[{label}] cache['A0'] must be X itself, not a copy (X already exists)")
        if cache.get("logits") is not logits:
            raise CheckFailure(f"[{label}] cache['logits'] must be the same array as the returned logits, "
                               "not a copy (the backward pass reads it; a copy doubles its memory)")

    p = _params([3, 4, 2], 7)
    X = _normal(9, (2, 3))
    invalid = [
        ("X has 5 features, W0 expects 3", BAD, "X", _args(p, _normal(8, (2, 5)))),
        ("X is 1-D", BAD, "X", _args(p, _normal(8, (3,)))),
        ("X an integer array", BAD, "X", _args(p, np.ones((2, 3), dtype=np.int64))),
        ("params without 'b1'", BAD, "params", _args({k: v for k, v in p.items() if k != "b1"}, X)),
        ("params with an extra key 'gamma0'", BAD, "params", _args({**p, "gamma0": np.ones(4, np.float32)}, X)),
        ("params['W1'] of 5 rows after W0's 4 columns (shapes do not chain)", BAD, "params",
         _args({**p, "W1": np.ones((5, 2), np.float32)}, X)),
        ("params['b0'] of shape (1,) for W0's 4 columns (it would broadcast)", BAD, "params",
         _args({**p, "b0": np.ones(1, np.float32)}, X)),
    ]
    return run_cases("model_forward", fn, ref.model_forward, cases, compare, invalid, compare_with_inputs=True)


# --- Lesson 4 --------------------------------------------------------------------------------------
def check_softmax(fn: Callable[..., Any]) -> str:
    """Row-wise, max-subtracted: finite at ±1e4, rows of very different scales, float32 and float64."""
    huge = np.array([[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4], [5e3, 5e3, -5e3]], np.float32)
    scales = np.array([[1e4, 1e4 - 1.0, 1e4 - 3.0], [-1e4, -1e4 + 2.0, -1e4 + 1.0]], np.float32)
    cases = [
        ("(4, 5) standard normal", _args(_normal(40, (4, 5)))),
        ("logits of ±1e4 (exp overflows without the max)", _args(huge)),
        ("rows at +1e4 and -1e4 (a global max underflows the second)", _args(scales)),
        ("one example, one class", _args(np.array([[3.5]], np.float32))),
        ("(3, 3) float64", _args(_normal(41, (3, 3), np.float64, 10.0))),
        ("(2, 7) with a large common offset", _args(_normal(42, (2, 7)) + np.float32(800.0))),
    ]

    def compare(label: str, got: Any, expected: np.ndarray) -> None:
        if expected.dtype == np.float32:
            # float32 (eps32 = 1.2e-7): each probability is the exp of an exactly shifted logit over a sum of
            # <= 7 terms, a few eps32 from another correct order; the log-softmax route, exp((z - m) - log sum),
            # rounds once more on a value of size <= ~10, another ~10 eps32. rtol 1e-5 covers both with a margin;
            # atol 1e-7 for entries that underflow toward 0 (e^-20 and below)
            assert_array(label, "probabilities", got, expected, rtol=1e-5, atol=1e-7)
        else:
            # float64: the harness's default (rtol 1e-10, atol 1e-12), ~1e5 eps64 for logits up to ~40
            assert_array(label, "probabilities", got, expected)

    invalid = [
        ("1-D logits", BAD, "logits", _args(_normal(1, (4,)))),
        ("integer logits", BAD, "logits", _args(np.array([[1, 2]]))),
        ("a nested Python list", BAD, "logits", _args([[1.0, 2.0], [0.5, -1.0]])),
    ]
    return run_cases("softmax", fn, ref.softmax, cases, compare, invalid)


# --- Lesson 5 --------------------------------------------------------------------------------------
def check_cross_entropy_loss(fn: Callable[..., Any]) -> str:
    """Mean over the batch by log-sum-exp: finite and exact at ±1e4, batch 1, two classes, float64."""
    huge = np.array([[1e4, -1e4, 0.0], [-1e4, 1e4, 0.0], [0.0, 0.0, 1e4]], np.float32)
    cases = [
        ("(6, 4) standard normal", _args(_normal(50, (6, 4)), _labels(51, 6, 4))),
        ("logits of ±1e4, some labels on the -1e4 logit", _args(huge, np.array([1, 0, 2]))),
        ("batch of 1", _args(_normal(52, (1, 5)), np.array([4]))),
        ("two classes, batch 9", _args(_normal(53, (9, 2), std=3.0), _labels(54, 9, 2))),
        ("float64, scale 30", _args(_normal(55, (5, 3), np.float64, 30.0), _labels(56, 5, 3))),
        ("every label the same class", _args(_normal(57, (4, 3)), np.full(4, 2))),
        # a maximum over the whole batch pushes the second row 2e4 down: its exponentials underflow to 0
        ("rows at +1e4 and -1e4 (each row's own maximum)",
         _args(np.array([[1e4, 1e4 - 1.0, 1e4 - 3.0], [-1e4, -1e4 + 2.0, -1e4 + 1.0]], np.float32), np.array([1, 0]))),
        # two per-example losses of 3e38 are finite in float32, their float32 sum is not: the mean is
        # accumulated in float64
        ("two float32 losses of 3e38 (their float32 sum overflows)",
         _args(np.array([[0.0, -3e38], [-3e38, 0.0]], np.float32), np.array([1, 0]))),
        ("int32 labels", _args(_normal(58, (5, 3)), np.array([0, 2, 1, 1, 2], dtype=np.int32))),
    ]

    # Each per-example term is computed in the logits' dtype: m + log Σ e^(z - m) - z_y loses about an ulp of
    # the largest |z| (float32 at 1e4: 1e-3) where log Σ e^(z - m) - (z_y - m) loses nothing; both are correct.
    # atol: 4 such ulps (eps of the logits' dtype times the largest |z|), plus 1e-6 for losses near 0.
    atol = {name: 1e-6 + 4 * float(np.max(np.abs(make()[0][0]))) * float(np.finfo(make()[0][0].dtype).eps)
            for name, make in cases}

    # rtol: each term is a log-sum-exp of <= 5 values in the logits' dtype, a few eps from another correct
    # formula (float32: eps 1.2e-7 -> 1e-5 leaves a margin of ~20; float64: eps 2.2e-16 -> 1e-12).
    rtol = {name: 1e-5 if make()[0][0].dtype == np.float32 else 1e-12 for name, make in cases}

    def compare(label: str, got: Any, expected: float) -> None:
        assert_scalar(label, "loss", got, expected, rtol=rtol[label], atol=atol[label])
        if type(got) is not float:
            raise CheckFailure(f"[{label}] the loss must be a Python float (float(...)), got {type(got).__name__}")

    logits = _normal(1, (3, 4))
    invalid = [
        ("a label equal to the number of classes", (ValueError,), "y", _args(logits, np.array([0, 4, 1]))),
        ("a negative label", (ValueError,), "y", _args(logits, np.array([0, -1, 1]))),
        ("float labels", BAD, "y", _args(logits, np.array([0.0, 1.0, 2.0]))),
        ("boolean labels", BAD, "y", _args(logits, np.array([True, False, True]))),
        ("labels as a Python list", BAD, "y", _args(logits, [0, 1, 2])),
        ("labels of shape (3, 1)", BAD, "y", _args(logits, np.array([[0], [1], [2]]))),
        ("2 labels for 3 examples", BAD, "y", _args(logits, np.array([0, 1]))),
        ("integer logits", BAD, "logits", _args(np.array([[1, 2], [3, 4]]), np.array([0, 1]))),
        ("empty logits (0 examples)", BAD, "logits", _args(np.zeros((0, 3), np.float32), np.zeros(0, np.int64))),
        ("1-D logits", BAD, "logits", _args(logits[0].copy(), np.array([1]))),
    ]
    return run_cases("cross_entropy_loss", fn, ref.cross_entropy_loss, cases, compare, invalid)


# --- Lesson 6 --------------------------------------------------------------------------------------
def check_model_backward(fn: Callable[..., Any]) -> str:
    """Every layer's gradients, incl. exact zeros before a ReLU, batch 1, 1 to 4 layers, float64."""

    def case(i: int, sizes: list[int], n: int, zero_rows: bool = False, dtype: type = np.float32) -> Callable[[], Args]:
        params = _params(sizes, 60 + i, dtype)
        X = _normal(70 + i, (n, sizes[0]), dtype)
        if zero_rows:
            params["b0"][:] = 0.0
            X[::2] = 0.0  # Z0 is exactly 0 on these rows: the ReLU convention at 0 decides
        _, cache = ref.model_forward(params, X)
        return _args(params, cache, _labels(80 + i, n, sizes[-1]))

    def stale_w0() -> Args:
        (params, cache, y), kwargs = case(9, [5, 6, 4, 3], 7)()
        return (({**params, "W0": -params["W0"]}, cache, y), kwargs)

    cases = [(f"sizes={s}, batch={n}", case(i, s, n)) for i, (s, n) in enumerate(NETS)]
    cases.append(("zero input rows and zero first bias", case(7, [4, 6, 3], 6, zero_rows=True)))
    cases.append(("float64", case(8, [3, 5, 5, 2], 4, dtype=np.float64)))
    # "Never W0": the masks and the logits are read from the cache, so W0's values cannot change the result
    cases.append(("params['W0'] changed after the forward pass (W0 is never read: the cache holds A1 and the logits)",
                  stale_w0))

    def compare(label: str, got: Any, expected: dict) -> None:
        assert_array_dict(label, "grads", got, expected)
        if list(got) != list(expected):
            raise CheckFailure(f"[{label}] grads has the keys in the order {list(got)}; the contract asks for "
                               f"params' order {list(expected)}")

    p = _params([3, 4, 2], 7)
    _, cache = ref.model_forward(p, _normal(8, (5, 3)))
    y = np.array([0, 1, 1, 0, 1])
    invalid = [
        # the contract: "labels out of range or of the wrong length (naming y)"; the lesson allows ValueError/TypeError
        ("a label out of range", BAD, "y", _args(p, cache, np.array([0, 1, 2, 0, 1]))),
        ("a negative label", BAD, "y", _args(p, cache, np.array([0, 1, -1, 0, 1]))),
        ("float labels", BAD, "y", _args(p, cache, y.astype(np.float64))),
        ("4 labels for 5 examples", BAD, "y", _args(p, cache, np.array([0, 1, 0, 1]))),
        ("cache without 'logits'", BAD, "cache", _args(p, {k: v for k, v in cache.items() if k != "logits"}, y)),
        ("cache with an extra key 'A2'", BAD, "cache", _args(p, {**cache, "A2": cache["A1"]}, y)),
        ("params without 'b0'", BAD, "params", _args({k: v for k, v in p.items() if k != "b0"}, cache, y)),
    ]
    count = run_cases("model_backward", fn, ref.model_backward, cases, compare, invalid, count_only=True)
    _check_backward_memory(fn)
    return passed("model_backward", count + 1)


def _check_backward_memory(fn: Callable[..., Any]) -> None:
    """No gradient with respect to X: with a wide input, an (n, d_in) array is far larger than everything else."""
    n, sizes = 512, [4096, 16, 4]  # X is 8 MiB in float32; grads['W0'] is 256 KiB
    params = _params(sizes, 90)
    X = _normal(91, (n, sizes[0]))
    _, cache = ref.model_forward(params, X)
    y = _labels(92, n, sizes[-1])
    label = f"memory: the gradient is not sent down to X (batch={n}, sizes={sizes}, X is {X.nbytes >> 20} MiB)"
    # The reference holds the gradients (~260 KiB) and (n, 16)-sized temporaries. Twice that plus 1 MiB of slack
    # (allocator; the sandbox measures the resident set) is still far below the 8 MiB of one (n, d_in) array:
    # G @ W0.T, or the mask X > 0 (2 MiB) with it.
    assert_peak_within(fn, label, ref.model_backward, (params, cache, y), 2, 2**20,
                       "an array as large as X was allocated — stop the loop at layer 0: the gradient is not sent "
                       "through W0 (W0 is never read)")
