"""Checks behind the hidden tests of Module 1, Part 1 (lessons 1–10: the MLP core).

Each ``check_<function>(fn)`` runs the student's ``fn`` beside :mod:`trainsys.memtrain.mlp` on
seeded cases — ordinary sizes, edge sizes (batch 1, width 1), square shapes that expose a transposed
matrix, float32 and float64 — then on invalid inputs it must reject. It returns a one-line summary or
raises ``AssertionError`` naming the case and the difference.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from trainsys.grading._harness import (
    assert_peak_within,
    fixed as _args,
    BAD,
    Args,
    CheckFailure,
    _expect_refusal,
    assert_array,
    assert_array_dict,
    assert_scalar,
    assert_tuple,
    assert_within_rounding,
    expect_raises,
    expect_raises_naming_any,
    passed,
    quiet,
    rng_for,
    run_cases,
)
from trainsys.memtrain import mlp as ref

TE = (TypeError,)
"""The contract says TypeError (a wrong type: a float or ``True`` for a size, an integer array)."""
VE = (ValueError,)
"""The contract says ValueError (a legal type with an illegal value or shape)."""

# float32 has a 24-bit significand: one unit in the last place is at most 2**-23 of the value.
F32_ULP = 2.0**-23

__all__ = [
    "check_make_synthetic_regression_batch",
    "check_init_mlp_params",
    "check_linear_forward",
    "check_relu_forward",
    "check_mlp_forward",
    "check_mse_loss_and_grad",
    "check_linear_backward",
    "check_relu_backward",
    "check_first_linear_backward",
    "check_mlp_backward",
]

CLAUSES = {
    "make_synthetic_regression_batch": {
        "draw order": ("n=8, d_in=3, d_out=2, noise_std=0.1",),
        "dtype": ("n=8, d_in=3, d_out=2, noise_std=0.1",),
        "mutation": ("generator state after",),
        "failure modes": ("n = 0", "n = 2.5", "n = True", "d_in = 4.0", "noise_std = nan",
                          "rng = np.random.RandomState(0)"),
        "metric that proves it correct": ("n=8, d_in=3, d_out=2, noise_std=0.1",),
    },
    "init_mlp_params": {
        "arguments": ("d_in = 3.0", "d_out = True", "rng = np.random.RandomState(0)"),
        "layout": ("d_in=3, d_hidden=5, d_out=2",),
        "draw order": ("d_in=3, d_hidden=5, d_out=2", "generator state after"),
        "failure modes": ("d_hidden = 0", "d_out = -2", "rng = None", "rng = 7"),
        "size": ("d_in=3, d_hidden=5, d_out=2",),
        "metric that proves it correct": ("d_in=3, d_hidden=5, d_out=2",),
    },
    "linear_forward": {
        "dtype": ("float32 X with float64 W and b", "float64 X with float32 W and b", "integer X", "integer W",
                  "X as a Python list"),
        "mutation": ("X (3, 3), W (3, 3), float32",),
        "failure modes": ("X is 1-D", "W has 4 input rows", "b has 3 entries", "b has shape (1, 2)",
                          "b has shape (1,) for 2 outputs"),
        "metric that proves it correct": ("X (4, 3), W (3, 2), float32",),
    },
    "relu_forward": {
        "legal range": ("NaN and ±inf",),
        "mutation": ("hand-made values", "no negative entry"),
        "rank": ("(3, 2, 5) float64",),
        "failure modes": ("integer array", "boolean array", "a Python list"),
        "metric that proves it correct": ("hand-made values",),
    },
    "mlp_forward": {
        "dtype": ("integer W1", "integer X", "float64 parameters and X"),
        "mutation": ("batch=5, d_in=3, d_hidden=4, d_out=2",),
        "failure modes": ("X has 5 features", "params without 'b2'", "params with an extra key 'W3'",
                          "b1 has 3 entries", "params as a list"),
        "metric that proves it correct": ("batch=5, d_in=3, d_hidden=4, d_out=2",),
    },
    "mse_loss_and_grad": {
        "the mean is over batch *and* outputs": ("Y_hat and Y of shape (4, 3)",),
        "precision": ("Y_hat and Y of shape (4, 3)", "float32 Y_hat, float64 Y", "entries ±(1 + 2**-12)"),
        "mutation": ("Y_hat and Y of shape (4, 3)",),
        "failure modes": ("shapes (4, 3) and (4, 2)", "Y of shape (4, 1)", "1-D Y_hat", "integer Y",
                          "Y as a Python list"),
        "metric that proves it correct": ("Y_hat and Y of shape (4, 3)",),
    },
    "linear_backward": {
        "dtype": ("batch=4, d_in=3, d_out=2, float32", "batch=5, d_in=4, d_out=3, float64", "integer X"),
        "mutation": ("batch=4, d_in=3, d_out=2, float32",),
        "failure modes": ("dOut has 5 rows, X has 4", "W is (2, 3), expected (3, 2)", "dOut is 1-D"),
        "metric that proves it correct": ("batch=4, d_in=3, d_out=2, float32",),
    },
    "relu_backward": {
        "dtype": ("float32 dA, float64 Z",),
        "convention at zero": ("hand-made Z with exact zeros",),
        "mutation": ("hand-made Z with exact zeros", "every gate open"),
        "failure modes": ("dA (2, 3) and Z (3, 2)", "dA (2, 3) and Z (1, 3)", "integer Z", "boolean Z",
                          "NaN and ±inf in dA"),
        "metric that proves it correct": ("hand-made Z with exact zeros",),
    },
    "first_linear_backward": {
        "what is not an input": ("batch=4, d_in=3, d_hidden=5",),
        "what is not an output": ("batch=4, d_in=3, d_hidden=5", "memory: batch=8192"),
        "dtype": ("batch=4, d_in=3, d_hidden=5", "batch=5, d_in=4, d_hidden=3, float64"),
        "failure modes": ("dOut has 3 rows, X has 4", "dOut is 1-D", "integer X", "X as a Python list"),
        "metric that proves it correct": ("batch=4, d_in=3, d_hidden=5",),
    },
    "mlp_backward": {
        "keys": ("batch=5, d_in=3, d_hidden=4, d_out=2",),
        "which weights are read": ("cache of other W1 and b1",),
        "dtype": ("batch=5, d_in=3, d_hidden=4, d_out=2", "batch=1, d_in=2, d_hidden=3, d_out=1", "integer dY_hat"),
        "failure modes": ("dY_hat has 4 rows", "cache without 'Z1'", "b1 has 3 entries", "params without 'b1'",
                          "dY_hat has 3 columns", "cache['X'] has 5 rows"),
        "metric that proves it correct": ("batch=5, d_in=3, d_hidden=4, d_out=2",
                                          "batch=6, d_in=3, d_hidden=5, d_out=2, zero rows in X"),
    },
}
"""The case labels that enforce each clause of each lesson's contract (see ``trainsys.grading.clauses``)."""


def _normal(seed: int, shape: tuple[int, ...], dtype: type = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)




def _with_rng_state(function: Callable[..., Any], rng_index: int) -> Callable[..., Any]:
    """The reference, returning also its generator's state after the call (argument ``rng_index``)."""

    def reference(*args: Any, **kwargs: Any) -> tuple[Any, dict]:
        return function(*args, **kwargs), args[rng_index].bit_generator.state

    return reference


def _assert_rng_advanced(label: str, rng: Any, state: dict, draws: str) -> None:
    """The caller's generator itself (not a copy) must have advanced exactly as the reference's did."""
    if not isinstance(rng, np.random.Generator) or rng.bit_generator.state != state:
        raise CheckFailure(f"[generator state after {label}] the generator must advance by exactly {draws} draws "
                           "(the contract's draw order, every draw made even when it is multiplied by 0, and made "
                           "on the caller's rng, not on a copy), but its state after the call differs from the "
                           "reference's")


def _assert_new_array(label: str, what: str, got: np.ndarray, **inputs: np.ndarray) -> None:
    for name, array in inputs.items():
        if isinstance(array, np.ndarray) and np.shares_memory(got, array):
            raise CheckFailure(f"[{label}] {what} shares memory with the input {name}; the contract says it is a new "
                               f"array (returning {name} itself, or a view of it, lets a later in-place update of one "
                               "change the other)")


def _expect_raises_naming_word(fn: Callable[..., Any], case: str, errors: tuple[type[BaseException], ...],
                               word: str, *args: Any) -> None:
    """Like ``expect_raises``, but the message must name ``word`` as a word: for a one-letter argument such as
    ``b``, NumPy's own "operands could not be broadcast ..." contains the letter without naming anything."""
    pattern = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(word)}(?![A-Za-z0-9_])")

    def unnamed(message: str) -> str | None:
        return None if pattern.search(message) else (
            f"does not name the argument {word!r} (as a word of its own: the letter inside NumPy's "
            "'broadcast' does not say which argument is wrong)")

    _expect_refusal(fn, case, errors, unnamed, args, {})


def _params(d_in: int, d_hidden: int, d_out: int, seed: int, dtype: type = np.float32) -> dict[str, np.ndarray]:
    """Parameters with non-zero biases, so that a forgotten bias shows up in the result."""
    rng = np.random.default_rng(seed)
    return {
        "W1": rng.standard_normal((d_in, d_hidden)).astype(dtype),
        "b1": rng.standard_normal(d_hidden).astype(dtype) * 0.5,
        "W2": rng.standard_normal((d_hidden, d_out)).astype(dtype),
        "b2": rng.standard_normal(d_out).astype(dtype) * 0.5,
    }


# --- Lesson 1 --------------------------------------------------------------------------------------
def check_make_synthetic_regression_batch(fn: Callable[..., Any]) -> str:
    """Shapes, float32, the draw order (teacher, X, noise) and the teacher's 1/√d_in scale."""
    sizes = [(8, 3, 2, 0.1), (1, 1, 1, 0.1), (64, 16, 4, 0.0), (5, 7, 3, 0.5), (200, 2, 1, 1.0)]

    def case(i: int, n: int, d_in: int, d_out: int, noise: float) -> Callable[[], Args]:
        return lambda: ((n, d_in, d_out, rng_for(i, 101)), {"noise_std": noise})

    cases = [
        (f"n={n}, d_in={d_in}, d_out={d_out}, noise_std={s}", case(i, n, d_in, d_out, s))
        for i, (n, d_in, d_out, s) in enumerate(sizes)
    ]
    cases.append(("default noise_std", lambda: ((10, 4, 3, rng_for(9, 101)), {})))

    cases.append(("n=64, d_in=64, d_out=4: long dot products", case(len(sizes), 64, 64, 4, 0.1)))

    def compare(label: str, got: Any, expected: tuple, inputs: Args) -> None:
        (X_ref, Y_ref), state = expected
        X, Y = assert_tuple(label, "the result (X, Y)", got, 2)
        # X is a cast of the float64 draws: exact. Y is computed in float64 and cast once, so any float64
        # arrangement of X @ W* + noise_std * E rounds to the reference's float32 (at most 1 unit in the
        # last place where float64 round-off lands on a float32 rounding boundary); float32 arithmetic is
        # off by tens of units wherever the sum cancels.
        assert_array(label, "X", X, X_ref, exact=True)
        try:
            assert_array(label, "Y", Y, Y_ref, rtol=F32_ULP, atol=0.0)
        except CheckFailure as failure:
            if "differs from the reference" not in str(failure):
                raise
            raise CheckFailure(f"{failure} — compute Y in float64 and cast to float32 once, at the end") from None
        n, d_in, d_out = inputs[0][:3]
        _assert_rng_advanced(label, inputs[0][3], state, f"d_in*d_out + n*d_in + n*d_out = {d_in * d_out + n * d_in + n * d_out}")

    invalid = [
        ("n = 0", VE, "n", lambda: ((0, 3, 2, rng_for(0, 1)), {})),
        ("n = 2.5", TE, "n", lambda: ((2.5, 3, 2, rng_for(0, 1)), {})),
        ("n = True (a bool is not a size)", TE, "n", lambda: ((True, 3, 2, rng_for(0, 1)), {})),
        ("d_in = 4.0 (an integral float is still not an int)", TE, "d_in", lambda: ((4, 4.0, 2, rng_for(0, 1)), {})),
        ("d_in = -1", VE, "d_in", lambda: ((4, -1, 2, rng_for(0, 1)), {})),
        ("d_out = 0", VE, "d_out", lambda: ((4, 3, 0, rng_for(0, 1)), {})),
        ("rng = 42 (a seed, not a Generator)", TE, "rng", lambda: ((4, 3, 2, 42), {})),
        ("rng = None", TE, "rng", lambda: ((4, 3, 2, None), {})),
        ("noise_std = -0.1", VE, "noise_std", lambda: ((4, 3, 2, rng_for(0, 1)), {"noise_std": -0.1})),
        ("noise_std = nan", VE, "noise_std", lambda: ((4, 3, 2, rng_for(0, 1)), {"noise_std": float("nan")})),
        ("noise_std = inf", VE, "noise_std", lambda: ((4, 3, 2, rng_for(0, 1)), {"noise_std": float("inf")})),
    ]
    count = run_cases("make_synthetic_regression_batch", fn, _with_rng_state(ref.make_synthetic_regression_batch, 3),
                      cases, compare, invalid, compare_with_inputs=True, count_only=True)
    with quiet():
        expect_raises(fn, "rng = np.random.RandomState(0) (the legacy generator)", TE, "rng",
                      4, 3, 2, np.random.RandomState(0))
    count += 1
    return passed("make_synthetic_regression_batch", count)


# --- Lesson 2 --------------------------------------------------------------------------------------
def check_init_mlp_params(fn: Callable[..., Any]) -> str:
    """Keys, shapes, float32, zero biases, He scale √(2/d_in) for W1 and √(1/d_hidden) for W2, draw order."""
    sizes = [(3, 5, 2), (1, 1, 1), (16, 32, 4), (6, 6, 6), (300, 400, 3)]

    def case(i: int, d_in: int, d_hidden: int, d_out: int) -> Callable[[], Args]:
        return lambda: ((d_in, d_hidden, d_out, rng_for(i, 202)), {})

    cases = [(f"d_in={a}, d_hidden={b}, d_out={c}", case(i, a, b, c)) for i, (a, b, c) in enumerate(sizes)]

    def compare(label: str, got: Any, expected: tuple, inputs: Args) -> None:
        params_ref, state = expected
        # Exact: the draws are float64, scaled in float64 and cast once, so every float64 arrangement of
        # the scale rounds to the same float32 (a 1-ulp float64 difference lands on a float32 rounding
        # boundary with probability about 2**-29 per entry). Casting the draws to float32 before scaling
        # rounds twice and is off by one unit in the last place in about a third of the entries.
        try:
            assert_array_dict(label, "params", got, params_ref, exact=True)
        except CheckFailure as failure:
            if "differs from the reference" not in str(failure):
                raise
            raise CheckFailure(f"{failure} — draw in float64, scale in float64, then cast to float32 once") from None
        d_in, d_hidden, d_out = inputs[0][:3]
        _assert_rng_advanced(label, inputs[0][3], state, f"d_in*d_hidden + d_hidden*d_out = {d_in * d_hidden + d_hidden * d_out}")

    invalid = [
        ("d_hidden = 0", VE, "d_hidden", lambda: ((3, 0, 2, rng_for(0, 2)), {})),
        ("d_in = 3.0 (a float)", TE, "d_in", lambda: ((3.0, 4, 2, rng_for(0, 2)), {})),
        ("d_out = -2", VE, "d_out", lambda: ((3, 4, -2, rng_for(0, 2)), {})),
        ("d_out = True (a bool is not a width)", TE, "d_out", lambda: ((3, 4, True, rng_for(0, 2)), {})),
        ("rng = None", TE, "rng", lambda: ((3, 4, 2, None), {})),
        ("rng = 7 (a seed)", TE, "rng", lambda: ((3, 4, 2, 7), {})),
    ]
    count = run_cases("init_mlp_params", fn, _with_rng_state(ref.init_mlp_params, 3), cases, compare, invalid,
                      compare_with_inputs=True, count_only=True)
    with quiet():
        expect_raises(fn, "rng = np.random.RandomState(0) (the legacy generator)", TE, "rng",
                      3, 4, 2, np.random.RandomState(0))
    count += 1
    return passed("init_mlp_params", count)


# --- Lesson 3 --------------------------------------------------------------------------------------
def check_linear_forward(fn: Callable[..., Any]) -> str:
    """``X @ W + b`` on rectangular, square, batch-1 and float64 inputs; shape errors raise, naming the argument
    (``b`` as a word: NumPy's "could not be broadcast" does not name it)."""
    shapes = [(4, 3, 2, np.float32), (1, 5, 3, np.float32), (3, 3, 3, np.float32), (6, 1, 1, np.float32),
              (7, 4, 5, np.float64)]

    def case(i: int, n: int, d_in: int, d_out: int, dtype: type) -> Callable[[], Args]:
        return _args(_normal(10 * i, (n, d_in), dtype), _normal(10 * i + 1, (d_in, d_out), dtype),
                     _normal(10 * i + 2, (d_out,), dtype))

    cases = [(f"X {(n, a)}, W {(a, b)}, {np.dtype(t).name}", case(i, n, a, b, t))
             for i, (n, a, b, t) in enumerate(shapes)]
    # NumPy promotion decides the dtype: float32 with float64 gives float64, whichever operand is wider.
    cases += [
        ("float32 X with float64 W and b (promotes to float64)",
         _args(_normal(11, (4, 3)), _normal(12, (3, 2), np.float64), _normal(13, (2,), np.float64))),
        ("float64 X with float32 W and b (promotes to float64)",
         _args(_normal(14, (3, 2), np.float64), _normal(15, (2, 5)), _normal(16, (5,)))),
    ]

    def compare(label: str, got: Any, expected: np.ndarray, inputs: Args) -> None:
        # d_in products summed and a bias added, in any order: 2·γ_{d_in+1} of |X| |W| + |b| (trainsys.tolerance)
        X, W, b = (np.asarray(a, np.float64) for a in inputs[0])
        assert_within_rounding(label, "Z", got, expected, np.abs(X) @ np.abs(W) + np.abs(b), X.shape[1] + 1)

    X, W, b = _normal(1, (4, 3)), _normal(2, (3, 2)), _normal(3, (2,))
    invalid = [
        ("X is 1-D", VE, "X", _args(X[0], W, b)),
        ("W has 4 input rows for X with 3 features", VE, "W", _args(X, _normal(4, (4, 2)), b)),
        ("integer X", TE, "X", _args(np.arange(12).reshape(4, 3), W, b)),
        ("integer W", TE, "W", _args(X, np.ones((3, 2), dtype=np.int64), b)),
        ("X as a Python list of floats", TE, "X", _args(X.tolist(), W, b)),
    ]
    count = run_cases("linear_forward", fn, ref.linear_forward, cases, compare, invalid, count_only=True,
                      compare_with_inputs=True)
    bias = [
        ("b has 3 entries for 2 outputs", _normal(5, (3,))),
        ("b has shape (1, 2)", b.reshape(1, 2)),
        ("b has shape (1,) for 2 outputs (it would broadcast)", b[:1].copy()),
    ]
    with quiet():
        for label, bad_b in bias:
            _expect_raises_naming_word(fn, label, VE, "b", X, W, bad_b)
    return passed("linear_forward", count + len(bias))


# --- Lesson 4 --------------------------------------------------------------------------------------
def check_relu_forward(fn: Callable[..., Any]) -> str:
    """``max(Z, 0)`` with exact zeros and negatives, any rank, float32/float64, input untouched."""
    special = np.array([[-2.0, -0.0, 0.0, 1e-30, 3.5], [-1e-30, 7.0, -7.0, 0.25, -0.25]], dtype=np.float32)
    cases = [
        ("hand-made values incl. ±0 and tiny numbers", _args(special)),
        ("(4, 6) float32", _args(_normal(41, (4, 6)))),
        ("(1, 1) negative", _args(np.array([[-3.0]], dtype=np.float32))),
        ("(3, 2, 5) float64", _args(_normal(42, (3, 2, 5), np.float64))),
        ("(10,) float16", _args(_normal(43, (10,), np.float16))),
        ("no negative entry (A is still a new array)", _args(np.abs(_normal(44, (3, 4))) + 0.5)),
        ("NaN and ±inf (NaN stays NaN)",
         _args(np.array([[np.nan, -np.inf, np.inf], [-1.0, np.nan, 2.0]], dtype=np.float32))),
    ]

    def compare(label: str, got: Any, expected: np.ndarray, inputs: Args) -> None:
        # exact: every entry of A is a copy of an entry of Z or a zero, no rounding in any dtype
        assert_array(label, "A", got, expected, exact=True)
        _assert_new_array(label, "A", got, Z=inputs[0][0])

    invalid = [
        ("integer array", TE, "Z", _args(np.array([[1, -2]]))),
        # the contract names TypeError for a list and for an integer array; for the other non-float dtypes it
        # names no error type, so either refusal is accepted
        ("boolean array", BAD, "Z", _args(np.array([[True, False]]))),
        ("complex array", BAD, "Z", _args(np.array([[1.0 + 1.0j, -2.0]]))),
        ("a Python list", TE, "Z", _args([[1.0, -2.0]])),
    ]
    return run_cases("relu_forward", fn, ref.relu_forward, cases, compare, invalid, compare_with_inputs=True)


# --- Lesson 5 --------------------------------------------------------------------------------------
def check_mlp_forward(fn: Callable[..., Any]) -> str:
    """Output and the cache {X, Z1, A1} on several sizes, with non-zero biases, float32 and float64."""
    sizes = [(5, 3, 4, 2), (1, 2, 3, 1), (4, 4, 4, 4), (8, 6, 16, 3)]

    def case(i: int, n: int, d_in: int, d_h: int, d_out: int) -> Callable[[], Args]:
        return _args(_params(d_in, d_h, d_out, 50 + i), _normal(60 + i, (n, d_in)))

    cases = [(f"batch={n}, d_in={a}, d_hidden={h}, d_out={o}", case(i, n, a, h, o))
             for i, (n, a, h, o) in enumerate(sizes)]
    # "floating point throughout": float64 parameters and input stay float64, output and cache alike
    cases.append(("float64 parameters and X (float64 throughout)",
                  _args(_params(5, 6, 3, 58, np.float64), _normal(68, (7, 5), np.float64))))

    def compare(label: str, got: Any, expected: tuple[np.ndarray, dict[str, np.ndarray]], inputs: Args) -> None:
        Y_hat, cache = assert_tuple(label, "the result (Y_hat, cache)", got, 2)
        # the forward on absolute values bounds every rounding of Z1 (d_in + 1) and Y_hat (+ d_hidden + 2)
        from trainsys.tolerance import relu_chain_magnitudes

        params, X = inputs[0]
        W1, b1, W2, b2 = (np.abs(np.asarray(params[k], np.float64)) for k in ("W1", "b1", "W2", "b2"))
        M_Z1 = np.abs(np.asarray(X, np.float64)) @ W1 + b1
        M_Y, _ = relu_chain_magnitudes([W1, W2], [b1, b2], X, np.zeros(expected[0].shape))
        k_Z1, k_Y = W1.shape[0] + 1, W1.shape[0] + W2.shape[0] + 4
        assert_within_rounding(label, "Y_hat", Y_hat, expected[0], M_Y, k_Y)
        if not isinstance(cache, dict) or set(cache) != set(expected[1]):
            assert_array_dict(label, "cache", cache, expected[1])  # the type and keys message
        assert_within_rounding(label, "cache['X']", cache["X"], expected[1]["X"], 0.0, 0)
        assert_within_rounding(label, "cache['Z1']", cache["Z1"], expected[1]["Z1"], M_Z1, k_Z1)
        assert_within_rounding(label, "cache['A1']", cache["A1"], expected[1]["A1"], M_Z1, k_Z1)
        if cache["X"] is not inputs[0][1]:
            raise CheckFailure(f"[{label}] cache['X'] must be the caller's X itself (a reference, not a copy): "
                               "a copy doubles the memory of the input batch for nothing")

    p = _params(3, 4, 2, 7)
    missing = {k: v for k, v in p.items() if k != "b2"}
    extra = {**p, "W3": _normal(10, (2, 2))}
    short_b1 = {**p, "b1": p["b1"][:3].copy()}
    short_b2 = {**p, "b2": p["b2"][:1].copy()}
    int_W1 = {**p, "W1": np.ones((3, 4), dtype=np.int64)}
    invalid = [
        ("X has 5 features, W1 expects 3", VE, "X", _args(p, _normal(8, (2, 5)))),
        ("params without 'b2'", VE, "b2", _args(missing, _normal(9, (2, 3)))),
        ("params with an extra key 'W3'", VE, "W3", _args(extra, _normal(9, (2, 3)))),
        ("b1 has 3 entries, W1 has 4 columns", VE, "b1", _args(short_b1, _normal(9, (2, 3)))),
        ("b2 has 1 entry, W2 has 2 columns", VE, "b2", _args(short_b2, _normal(9, (2, 3)))),
        ("integer W1", TE, "W1", _args(int_W1, _normal(9, (2, 3)))),
        ("integer X", TE, "X", _args(p, np.ones((2, 3), dtype=np.int64))),
        ("params as a list of four arrays (not a dict)", TE, "params",
         _args([p["W1"], p["b1"], p["W2"], p["b2"]], _normal(9, (2, 3)))),
    ]
    return run_cases("mlp_forward", fn, ref.mlp_forward, cases, compare, invalid, compare_with_inputs=True)


# --- Lesson 6 --------------------------------------------------------------------------------------
def check_mse_loss_and_grad(fn: Callable[..., Any]) -> str:
    """Mean over batch and outputs, the factor 2, the sign, float32 gradient, shape errors."""
    shapes = [(4, 3), (1, 1), (10, 1), (3, 3), (32, 8)]

    def case(i: int, n: int, d: int) -> Callable[[], Args]:
        return _args(_normal(70 + i, (n, d)), _normal(80 + i, (n, d)))

    cases = [(f"Y_hat and Y of shape {(n, d)}", case(i, n, d)) for i, (n, d) in enumerate(shapes)]
    cases.append(("a perfect prediction (loss 0)", _args(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))))
    cases.append(("float32 Y_hat, float64 Y (dY_hat keeps Y_hat's dtype)",
                  _args(_normal(86, (5, 3)), _normal(87, (5, 3), np.float64))))
    # Y = 0 makes the difference exact in any dtype, and (1 + 2**-12)**2 = 1 + 2**-11 + 2**-24 is exact in
    # float64 but rounds in float32: a loss accumulated in float32 is off by about 6e-8 relative, one
    # accumulated in float64 by at most 64 * 2**-53 (its sum has 64 terms).
    signs = np.where(np.random.default_rng(88).random((16, 4)) < 0.5, -1.0, 1.0)
    exact_case = "entries ±(1 + 2**-12), Y = 0 (squares exact only in float64)"
    cases.append((exact_case, _args((signs * (1 + 2.0**-12)).astype(np.float32), np.zeros((16, 4), np.float32))))

    def compare(label: str, got: Any, expected: tuple[float, np.ndarray], inputs: Args) -> None:
        loss, grad = assert_tuple(label, "the result (loss, dY_hat)", got, 2)
        if type(loss) is not float:
            raise CheckFailure(f"[{label}] loss must be a Python float, got {type(loss).__module__}.{type(loss).__name__}"
                               " (convert with float(...))")
        if label == exact_case:
            # float64 accumulation of 64 exact squares is off by at most 64 * 2**-53 ≈ 7e-15 relative → rtol
            # 1e-13; a float32 one is off by about 6e-8 relative, 600 times more. No atol: the loss is ≈ 1.
            try:
                assert_scalar(label, "loss", loss, expected[0], rtol=1e-13, atol=0.0)
            except CheckFailure as failure:
                raise CheckFailure(f"{failure} — square and accumulate in float64") from None
        else:
            # Here the loss compares the formula (float64 accumulation is the case above's business): a correct
            # answer may form Y_hat - Y in float32 (rounded, 2**-24 relative) or in float64 (exact), so the
            # squares differ by up to 2 * 2**-24 ≈ 1.2e-7 relative; rtol 1e-5 is far from any formula error
            # (a factor, a mean over the wrong count) and atol 1e-7 covers the perfect prediction's loss 0.
            assert_scalar(label, "loss", loss, expected[0], rtol=1e-5, atol=1e-7)
        # 2/N (Y_hat - Y): the subtraction, 2/N and the product: 3 roundings of 2/N (|Y_hat| + |Y|)
        Y_hat, Y = (np.abs(np.asarray(a, np.float64)) for a in inputs[0])
        assert_within_rounding(label, "dY_hat", grad, expected[1], 2 / Y.size * (Y_hat + Y), 3)

    invalid = [
        ("shapes (4, 3) and (4, 2)", VE, "Y", _args(_normal(1, (4, 3)), _normal(2, (4, 2)))),
        ("Y of shape (4, 1) for Y_hat (4, 3) (it would broadcast)", VE, "Y",
         _args(_normal(1, (4, 3)), _normal(2, (4, 1)))),
        ("1-D Y_hat", VE, "Y_hat", _args(_normal(1, (4,)), _normal(2, (4,)))),
        ("integer Y", TE, "Y", _args(_normal(1, (4, 3)), np.ones((4, 3), dtype=np.int64))),
        ("integer Y_hat", TE, "Y_hat", _args(np.ones((4, 3), dtype=np.int64), _normal(1, (4, 3)))),
        ("Y as a Python list of floats", TE, "Y", _args(_normal(1, (2, 3)), _normal(2, (2, 3)).tolist())),
    ]
    return run_cases("mse_loss_and_grad", fn, ref.mse_loss_and_grad, cases, compare, invalid, compare_with_inputs=True)


# --- Lesson 7 --------------------------------------------------------------------------------------
def check_linear_backward(fn: Callable[..., Any]) -> str:
    """dX = dOut Wᵀ, dW = Xᵀ dOut, db = Σ dOut on rectangular and square shapes."""
    shapes = [(4, 3, 2, np.float32), (1, 5, 3, np.float32), (3, 3, 3, np.float32), (6, 1, 1, np.float32),
              (2, 4, 4, np.float32), (5, 4, 3, np.float64)]

    def case(i: int, n: int, d_in: int, d_out: int, dtype: type) -> Callable[[], Args]:
        return _args(_normal(90 + i, (n, d_out), dtype), _normal(100 + i, (n, d_in), dtype),
                     _normal(110 + i, (d_in, d_out), dtype))

    cases = [(f"batch={n}, d_in={a}, d_out={b}, {np.dtype(t).name}", case(i, n, a, b, t))
             for i, (n, a, b, t) in enumerate(shapes)]

    def compare(label: str, got: Any, expected: tuple[np.ndarray, ...], inputs: Args) -> None:
        dX, dW, db = assert_tuple(label, "the result (dX, dW, db)", got, 3)
        # each a sum in any order: dX over d_out, dW and db over the batch (trainsys.tolerance)
        G, X, W = (np.abs(np.asarray(a, np.float64)) for a in inputs[0])
        assert_within_rounding(label, "dX", dX, expected[0], G @ W.T, G.shape[1])
        assert_within_rounding(label, "dW", dW, expected[1], X.T @ G, G.shape[0])
        assert_within_rounding(label, "db", db, expected[2], G.sum(axis=0), G.shape[0])

    dOut, X, W = _normal(1, (4, 2)), _normal(2, (4, 3)), _normal(3, (3, 2))
    invalid = [
        ("dOut has 5 rows, X has 4", VE, "dOut", _args(_normal(4, (5, 2)), X, W)),
        ("W is (2, 3), expected (3, 2)", VE, "W", _args(dOut, X, W.T.copy())),
        ("dOut is 1-D", VE, "dOut", _args(dOut[0], X[:1], W)),
        ("X is 1-D", VE, "X", _args(dOut[:1], X[0], W)),
        ("integer X (the contract's dtype is floating point)", BAD, "X",
         _args(dOut, np.ones((4, 3), dtype=np.int64), W)),
    ]
    return run_cases("linear_backward", fn, ref.linear_backward, cases, compare, invalid, compare_with_inputs=True)


# --- Lesson 8 --------------------------------------------------------------------------------------
def check_relu_backward(fn: Callable[..., Any]) -> str:
    """The mask is ``Z > 0``: zero gradient where ``Z`` is exactly 0, whatever the sign of ``dA``."""
    Z = np.array([[-1.0, 0.0, 2.0, -0.0], [3.0, -2.0, 0.0, 1e-20]], dtype=np.float32)
    dA = np.array([[5.0, 7.0, -1.0, 2.0], [-4.0, 6.0, -3.0, 9.0]], dtype=np.float32)
    z_rand = _normal(120, (6, 5))
    z_rand[z_rand < -0.8] = 0.0
    nan_dA = np.array([[np.nan, np.nan, 1.0], [np.inf, -np.inf, np.nan]], dtype=np.float32)
    nan_Z = np.array([[-1.0, 2.0, 0.0], [-3.0, 1.0, 0.0]], dtype=np.float32)
    cases = [
        ("hand-made Z with exact zeros", _args(dA, Z)),
        ("(6, 5) with many exact zeros", _args(_normal(121, (6, 5)), z_rand)),
        ("(1, 1), Z = 0", _args(np.array([[2.5]], np.float32), np.zeros((1, 1), np.float32))),
        ("(3, 4) float64, negative dA", _args(-np.abs(_normal(122, (3, 4), np.float64)), _normal(123, (3, 4), np.float64))),
        ("NaN and ±inf in dA, closed and open gates (open: passed through; closed: NaN or 0)", _args(nan_dA, nan_Z)),
        ("float32 dA, float64 Z (dZ keeps dA's dtype)", _args(_normal(124, (4, 3)), _normal(125, (4, 3), np.float64))),
        ("every gate open (dZ is still a new array)", _args(_normal(126, (3, 5)), np.abs(_normal(127, (3, 5))) + 0.5)),
    ]

    def compare(label: str, got: Any, expected: np.ndarray, inputs: Args) -> None:
        dA, Z = inputs[0]
        if isinstance(got, np.ndarray) and got.shape == expected.shape:
            # A closed gate with a non-finite dA: the contract accepts NaN (dA * 0, the solution) and 0
            # (torch's threshold_backward, np.where(Z > 0, dA, 0)); open gates pass NaN and ±inf through.
            torch_zero = ~(Z > 0) & ~np.isfinite(dA) & (got == 0)
            expected = np.where(torch_zero, got, expected).astype(expected.dtype)
        # exact: dA times 0 or 1 rounds nothing in any dtype (the contract's "any difference at all is a bug")
        assert_array(label, "dZ", got, expected, exact=True)
        _assert_new_array(label, "dZ", got, dA=dA, Z=Z)

    invalid = [
        ("dA (2, 3) and Z (3, 2)", VE, ("dA", "Z"), _args(_normal(1, (2, 3)), _normal(2, (3, 2)))),
        ("dA (2, 3) and Z (1, 3) (they would broadcast)", VE, ("dA", "Z"), _args(_normal(1, (2, 3)), _normal(2, (1, 3)))),
        ("integer Z", TE, "Z", _args(_normal(1, (2, 2)), np.zeros((2, 2), dtype=np.int64))),
        ("boolean Z (a precomputed mask)", TE, "Z", _args(_normal(1, (2, 2)), np.ones((2, 2), dtype=bool))),
    ]
    return run_cases("relu_backward", fn, ref.relu_backward, cases, compare, invalid, compare_with_inputs=True)


# --- Lesson 9 --------------------------------------------------------------------------------------
def check_first_linear_backward(fn: Callable[..., Any]) -> str:
    """(dW, db) of the first layer: Xᵀ dOut and the batch sum — and nothing else returned."""
    shapes = [(4, 3, 5, np.float32), (1, 2, 3, np.float32), (3, 3, 3, np.float32), (7, 1, 4, np.float32),
              (5, 4, 3, np.float64)]

    def case(i: int, n: int, d_in: int, d_h: int, dtype: type) -> Callable[[], Args]:
        return _args(_normal(130 + i, (n, d_h), dtype), _normal(140 + i, (n, d_in), dtype))

    cases = [(f"batch={n}, d_in={a}, d_hidden={h}" + (", float64" if t is np.float64 else ""), case(i, n, a, h, t))
             for i, (n, a, h, t) in enumerate(shapes)]

    def compare(label: str, got: Any, expected: tuple[np.ndarray, np.ndarray], inputs: Args) -> None:
        dW, db = assert_tuple(label, "the result (dW, db)", got, 2)
        # batch sums in any order (trainsys.tolerance)
        G, X = (np.abs(np.asarray(a, np.float64)) for a in inputs[0])
        assert_within_rounding(label, "dW", dW, expected[0], X.T @ G, G.shape[0])
        assert_within_rounding(label, "db", db, expected[1], G.sum(axis=0), G.shape[0])

    invalid = [
        ("dOut has 3 rows, X has 4", VE, ("dOut", "X"), _args(_normal(1, (3, 5)), _normal(2, (4, 2)))),
        ("X is 1-D", VE, "X", _args(_normal(1, (4, 5)), _normal(2, (4,)))),
        ("dOut is 1-D", VE, "dOut", _args(_normal(1, (4,)), _normal(2, (4, 2)))),
        ("integer X", TE, "X", _args(_normal(1, (4, 5)), np.ones((4, 2), dtype=np.int64))),
        ("integer dOut", TE, "dOut", _args(np.ones((4, 5), dtype=np.int64), _normal(2, (4, 2)))),
        ("X as a Python list", TE, "X", _args(_normal(1, (2, 5)), [[1.0, 2.0], [3.0, 4.0]])),
    ]
    count = run_cases("first_linear_backward", fn, ref.first_linear_backward, cases, compare, invalid, count_only=True,
                      compare_with_inputs=True)
    _check_no_dx(fn)
    return passed("first_linear_backward", count + 1)


def _check_no_dx(fn: Callable[..., Any]) -> None:
    """The peak must not hold a (batch, d_in) array: dX is neither returned nor computed."""
    n, d_in, d_hidden = 8192, 256, 4  # X is 8 MiB in float32; dW and db together are 4 KiB
    X, dOut = _normal(190, (n, d_in)), _normal(191, (n, d_hidden))
    label = f"memory: batch={n}, d_in={d_in}, d_hidden={d_hidden} (X is {X.nbytes >> 20} MiB)"
    # The reference holds dW and db (about 5 KiB). Twice that plus 1 MiB of slack (allocator and the OS
    # measurement in the sandbox) is still far below the 8 MiB a (batch, d_in) array such as dX needs.
    assert_peak_within(fn, label, ref.first_linear_backward, (dOut, X), 2, 2**20,
                       f"an array as large as X ({X.nbytes / 2**20:.0f} MiB) was allocated — do not compute dX, and "
                       "do not copy X")


# --- Lesson 10 -------------------------------------------------------------------------------------
def check_mlp_backward(fn: Callable[..., Any]) -> str:
    """All four gradients, including rows where Z1 is exactly 0 (zero input rows, zero biases), from a cache
    of other W1 and b1 than the params passed (only W2 is read), each a new array."""

    def case(i: int, n: int, d_in: int, d_h: int, d_out: int, zero_rows: bool) -> Callable[[], Args]:
        params = _params(d_in, d_h, d_out, 150 + i)
        X = _normal(160 + i, (n, d_in))
        if zero_rows:
            params["b1"][:] = 0.0
            X[::2] = 0.0  # Z1 is exactly 0 on these rows: the ReLU convention at 0 decides db1
        _, cache = ref.mlp_forward(params, X)
        dY = _normal(170 + i, (n, d_out))
        return _args(params, cache, dY)

    sizes = [(5, 3, 4, 2, False), (1, 2, 3, 1, False), (4, 4, 4, 4, False), (6, 3, 5, 2, True)]
    cases = [(f"batch={n}, d_in={a}, d_hidden={h}, d_out={o}" + (", zero rows in X" if z else ""),
              case(i, n, a, h, o, z)) for i, (n, a, h, o, z) in enumerate(sizes)]

    def other_weights() -> Args:
        """The cache of a forward pass with other W1, b1 (and b2) than the ones passed: the contract reads only
        W2 in arithmetic, so the gradients are those of the cache, whatever W1, b1 and b2 hold."""
        params = _params(3, 5, 2, 180)
        _, cache = ref.mlp_forward(params, _normal(181, (6, 3)))
        other = _params(3, 5, 2, 182)
        passed_params = {"W1": other["W1"], "b1": other["b1"], "W2": params["W2"], "b2": other["b2"]}
        return (passed_params, cache, _normal(183, (6, 2))), {}

    cases.append(("cache of other W1 and b1 than the params passed (only W2 is read)", other_weights))

    def compare(label: str, got: Any, expected: dict[str, np.ndarray], inputs: Args) -> None:
        params, cache, dY_hat = inputs[0]
        if not isinstance(got, dict) or set(got) != set(expected):
            assert_array_dict(label, "grads", got, expected)  # the type and keys message
        # the cache is given: only the backward rounds — dA1 over d_out (+ the mask), then the batch sums
        G = np.abs(np.asarray(dY_hat, np.float64))
        A1, X = (np.abs(np.asarray(cache[k], np.float64)) for k in ("A1", "X"))
        G1 = G @ np.abs(np.asarray(params["W2"], np.float64)).T  # (batch, d_hidden), gates open: an upper bound
        n, d_out = G.shape
        for key, magnitude, k in (("W2", A1.T @ G, n), ("b2", G.sum(axis=0), n),
                                  ("W1", X.T @ G1, d_out + 1 + n), ("b1", G1.sum(axis=0), d_out + 1 + n)):
            assert_within_rounding(label, f"grads[{key!r}]", got[key], expected[key], magnitude, k)
        arrays = {**{f"params[{k!r}]": v for k, v in params.items()},
                  **{f"cache[{k!r}]": v for k, v in cache.items()}, "dY_hat": dY_hat}
        for key in got:
            _assert_new_array(label, f"grads[{key!r}]", got[key], **arrays)

    p = _params(3, 4, 2, 7)
    _, cache = ref.mlp_forward(p, _normal(8, (5, 3)))
    short_b1 = {**p, "b1": p["b1"][:3].copy()}
    short_b2 = {**p, "b2": np.concatenate([p["b2"], p["b2"]])}
    int_W2 = {**p, "W2": np.ones((4, 2), dtype=np.int64)}
    _, small = ref.mlp_forward(p, _normal(8, (4, 3)))
    mixed_cache = {"X": cache["X"], "Z1": small["Z1"], "A1": small["A1"]}  # Z1, A1 of another batch of 4
    invalid = [
        ("dY_hat has 4 rows, the cache 5", VE, "dY_hat", _args(p, cache, _normal(9, (4, 2)))),
        ("cache without 'Z1'", VE, "Z1", _args(p, {k: v for k, v in cache.items() if k != "Z1"}, _normal(9, (5, 2)))),
        ("b1 has 3 entries for 4 hidden units", VE, "b1", _args(short_b1, cache, _normal(9, (5, 2)))),
        ("b2 has 4 entries for 2 outputs", VE, "b2", _args(short_b2, cache, _normal(9, (5, 2)))),
        # the contract's dtype is floating point; it names no error type for an integer array, so either is accepted
        ("integer dY_hat (the contract's dtype is floating point)", BAD, "dY_hat",
         _args(p, cache, np.ones((5, 2), dtype=np.int64))),
        ("integer W2 (the contract's dtype is floating point)", BAD, "W2", _args(int_W2, cache, _normal(9, (5, 2)))),
        ("params without 'b1' (b1 is only read to check shapes, but it must be there)", VE, "b1",
         _args({k: v for k, v in p.items() if k != "b1"}, cache, _normal(9, (5, 2)))),
    ]
    count = run_cases("mlp_backward", fn, ref.mlp_backward, cases, compare, invalid, compare_with_inputs=True,
                      count_only=True)
    with quiet():
        # the contract asks for an error naming dY_hat (not linear_backward's 'dOut', nor NumPy's matmul error)
        expect_raises(fn, "dY_hat has 3 columns, W2 has 2", VE, "dY_hat", *_args(p, cache, _normal(9, (5, 3)))()[0])
        expect_raises_naming_any(fn, "cache['X'] has 5 rows, cache['Z1'] and cache['A1'] 4, dY_hat 5", VE,
                                 ("dY_hat", "X", "Z1", "A1", "cache"), *_args(p, mixed_cache, _normal(9, (5, 2)))()[0])
    return passed("mlp_backward", count + 2)
