"""Checks behind the hidden tests of Module 1, Part 1 (lessons 1–10: the MLP core).

Each ``check_<function>(fn)`` runs the student's ``fn`` beside :mod:`trainsys.memtrain.mlp` on
seeded cases — ordinary sizes, edge sizes (batch 1, width 1), square shapes that expose a transposed
matrix, float32 and float64 — then on invalid inputs it must reject. It returns a one-line summary or
raises ``AssertionError`` naming the case and the difference.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from trainsys.grading._harness import (
    fixed as _args,
    BAD,
    Args,
    assert_array,
    assert_array_dict,
    assert_scalar,
    assert_tuple,
    rng_for,
    run_cases,
)
from trainsys.memtrain import mlp as ref



def _normal(seed: int, shape: tuple[int, ...], dtype: type = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)




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

    def compare(label: str, got: Any, expected: tuple[np.ndarray, np.ndarray]) -> None:
        X, Y = assert_tuple(label, "the result (X, Y)", got, 2)
        assert_array(label, "X", X, expected[0], rtol=1e-5, atol=1e-6)
        assert_array(label, "Y", Y, expected[1], rtol=1e-5, atol=1e-6)

    invalid = [
        ("n = 0", BAD, "n", lambda: ((0, 3, 2, rng_for(0, 1)), {})),
        ("n = 2.5", BAD, "n", lambda: ((2.5, 3, 2, rng_for(0, 1)), {})),
        ("d_in = -1", BAD, "d_in", lambda: ((4, -1, 2, rng_for(0, 1)), {})),
        ("d_out = 0", BAD, "d_out", lambda: ((4, 3, 0, rng_for(0, 1)), {})),
        ("rng = 42 (a seed, not a Generator)", BAD, "rng", lambda: ((4, 3, 2, 42), {})),
        ("noise_std = -0.1", BAD, "noise_std", lambda: ((4, 3, 2, rng_for(0, 1)), {"noise_std": -0.1})),
    ]
    return run_cases("make_synthetic_regression_batch", fn, ref.make_synthetic_regression_batch, cases, compare, invalid)


# --- Lesson 2 --------------------------------------------------------------------------------------
def check_init_mlp_params(fn: Callable[..., Any]) -> str:
    """Keys, shapes, float32, zero biases, He scale √(2/d_in) for W1 and √(1/d_hidden) for W2, draw order."""
    sizes = [(3, 5, 2), (1, 1, 1), (16, 32, 4), (6, 6, 6), (300, 400, 3)]

    def case(i: int, d_in: int, d_hidden: int, d_out: int) -> Callable[[], Args]:
        return lambda: ((d_in, d_hidden, d_out, rng_for(i, 202)), {})

    cases = [(f"d_in={a}, d_hidden={b}, d_out={c}", case(i, a, b, c)) for i, (a, b, c) in enumerate(sizes)]

    def compare(label: str, got: Any, expected: dict[str, np.ndarray]) -> None:
        assert_array_dict(label, "params", got, expected, rtol=1e-5, atol=1e-7)

    invalid = [
        ("d_hidden = 0", BAD, "d_hidden", lambda: ((3, 0, 2, rng_for(0, 2)), {})),
        ("d_in = 3.0 (a float)", BAD, "d_in", lambda: ((3.0, 4, 2, rng_for(0, 2)), {})),
        ("d_out = -2", BAD, "d_out", lambda: ((3, 4, -2, rng_for(0, 2)), {})),
        ("rng = None", BAD, "rng", lambda: ((3, 4, 2, None), {})),
    ]
    return run_cases("init_mlp_params", fn, ref.init_mlp_params, cases, compare, invalid)


# --- Lesson 3 --------------------------------------------------------------------------------------
def check_linear_forward(fn: Callable[..., Any]) -> str:
    """``X @ W + b`` on rectangular, square, batch-1 and float64 inputs; shape errors raise."""
    shapes = [(4, 3, 2, np.float32), (1, 5, 3, np.float32), (3, 3, 3, np.float32), (6, 1, 1, np.float32),
              (7, 4, 5, np.float64)]

    def case(i: int, n: int, d_in: int, d_out: int, dtype: type) -> Callable[[], Args]:
        return _args(_normal(10 * i, (n, d_in), dtype), _normal(10 * i + 1, (d_in, d_out), dtype),
                     _normal(10 * i + 2, (d_out,), dtype))

    cases = [(f"X {(n, a)}, W {(a, b)}, {np.dtype(t).name}", case(i, n, a, b, t))
             for i, (n, a, b, t) in enumerate(shapes)]

    def compare(label: str, got: Any, expected: np.ndarray) -> None:
        assert_array(label, "Z", got, expected)

    X, W, b = _normal(1, (4, 3)), _normal(2, (3, 2)), _normal(3, (2,))
    invalid = [
        ("X is 1-D", BAD, "X", _args(X[0], W, b)),
        ("W has 4 input rows for X with 3 features", BAD, "W", _args(X, _normal(4, (4, 2)), b)),
        ("b has 3 entries for 2 outputs", BAD, "b", _args(X, W, _normal(5, (3,)))),
        ("b has shape (1, 2)", BAD, "b", _args(X, W, b.reshape(1, 2))),
    ]
    return run_cases("linear_forward", fn, ref.linear_forward, cases, compare, invalid)


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
    ]

    def compare(label: str, got: Any, expected: np.ndarray) -> None:
        assert_array(label, "A", got, expected, exact=True)

    invalid = [
        ("integer array", BAD, "Z", _args(np.array([[1, -2]]))),
        ("a Python list", BAD, "Z", _args([[1.0, -2.0]])),
    ]
    return run_cases("relu_forward", fn, ref.relu_forward, cases, compare, invalid)


# --- Lesson 5 --------------------------------------------------------------------------------------
def check_mlp_forward(fn: Callable[..., Any]) -> str:
    """Output and the cache {X, Z1, A1} on several sizes, with non-zero biases."""
    sizes = [(5, 3, 4, 2), (1, 2, 3, 1), (4, 4, 4, 4), (8, 6, 16, 3)]

    def case(i: int, n: int, d_in: int, d_h: int, d_out: int) -> Callable[[], Args]:
        return _args(_params(d_in, d_h, d_out, 50 + i), _normal(60 + i, (n, d_in)))

    cases = [(f"batch={n}, d_in={a}, d_hidden={h}, d_out={o}", case(i, n, a, h, o))
             for i, (n, a, h, o) in enumerate(sizes)]

    def compare(label: str, got: Any, expected: tuple[np.ndarray, dict[str, np.ndarray]]) -> None:
        Y_hat, cache = assert_tuple(label, "the result (Y_hat, cache)", got, 2)
        assert_array(label, "Y_hat", Y_hat, expected[0])
        assert_array_dict(label, "cache", cache, expected[1])

    p = _params(3, 4, 2, 7)
    missing = {k: v for k, v in p.items() if k != "b2"}
    invalid = [
        ("X has 5 features, W1 expects 3", BAD, "X", _args(p, _normal(8, (2, 5)))),
        ("params without 'b2'", BAD, "b2", _args(missing, _normal(9, (2, 3)))),
    ]
    return run_cases("mlp_forward", fn, ref.mlp_forward, cases, compare, invalid)


# --- Lesson 6 --------------------------------------------------------------------------------------
def check_mse_loss_and_grad(fn: Callable[..., Any]) -> str:
    """Mean over batch and outputs, the factor 2, the sign, float32 gradient, shape errors."""
    shapes = [(4, 3), (1, 1), (10, 1), (3, 3), (32, 8)]

    def case(i: int, n: int, d: int) -> Callable[[], Args]:
        return _args(_normal(70 + i, (n, d)), _normal(80 + i, (n, d)))

    cases = [(f"Y_hat and Y of shape {(n, d)}", case(i, n, d)) for i, (n, d) in enumerate(shapes)]
    cases.append(("a perfect prediction (loss 0)", _args(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))))

    def compare(label: str, got: Any, expected: tuple[float, np.ndarray]) -> None:
        loss, grad = assert_tuple(label, "the result (loss, dY_hat)", got, 2)
        assert_scalar(label, "loss", loss, expected[0], rtol=1e-5, atol=1e-7)
        assert_array(label, "dY_hat", grad, expected[1])

    invalid = [
        ("shapes (4, 3) and (4, 2)", BAD, "Y", _args(_normal(1, (4, 3)), _normal(2, (4, 2)))),
        ("1-D Y_hat", BAD, "Y_hat", _args(_normal(1, (4,)), _normal(2, (4,)))),
    ]
    return run_cases("mse_loss_and_grad", fn, ref.mse_loss_and_grad, cases, compare, invalid)


# --- Lesson 7 --------------------------------------------------------------------------------------
def check_linear_backward(fn: Callable[..., Any]) -> str:
    """dX = dOut Wᵀ, dW = Xᵀ dOut, db = Σ dOut on rectangular and square shapes."""
    shapes = [(4, 3, 2), (1, 5, 3), (3, 3, 3), (6, 1, 1), (2, 4, 4)]

    def case(i: int, n: int, d_in: int, d_out: int) -> Callable[[], Args]:
        return _args(_normal(90 + i, (n, d_out)), _normal(100 + i, (n, d_in)), _normal(110 + i, (d_in, d_out)))

    cases = [(f"batch={n}, d_in={a}, d_out={b}", case(i, n, a, b)) for i, (n, a, b) in enumerate(shapes)]

    def compare(label: str, got: Any, expected: tuple[np.ndarray, ...]) -> None:
        dX, dW, db = assert_tuple(label, "the result (dX, dW, db)", got, 3)
        assert_array(label, "dX", dX, expected[0])
        assert_array(label, "dW", dW, expected[1])
        assert_array(label, "db", db, expected[2])

    dOut, X, W = _normal(1, (4, 2)), _normal(2, (4, 3)), _normal(3, (3, 2))
    invalid = [
        ("dOut has 5 rows, X has 4", BAD, "dOut", _args(_normal(4, (5, 2)), X, W)),
        ("W is (2, 3), expected (3, 2)", BAD, "W", _args(dOut, X, W.T.copy())),
    ]
    return run_cases("linear_backward", fn, ref.linear_backward, cases, compare, invalid)


# --- Lesson 8 --------------------------------------------------------------------------------------
def check_relu_backward(fn: Callable[..., Any]) -> str:
    """The mask is ``Z > 0``: zero gradient where ``Z`` is exactly 0, whatever the sign of ``dA``."""
    Z = np.array([[-1.0, 0.0, 2.0, -0.0], [3.0, -2.0, 0.0, 1e-20]], dtype=np.float32)
    dA = np.array([[5.0, 7.0, -1.0, 2.0], [-4.0, 6.0, -3.0, 9.0]], dtype=np.float32)
    z_rand = _normal(120, (6, 5))
    z_rand[z_rand < -0.8] = 0.0
    cases = [
        ("hand-made Z with exact zeros", _args(dA, Z)),
        ("(6, 5) with many exact zeros", _args(_normal(121, (6, 5)), z_rand)),
        ("(1, 1), Z = 0", _args(np.array([[2.5]], np.float32), np.zeros((1, 1), np.float32))),
        ("(3, 4) float64, negative dA", _args(-np.abs(_normal(122, (3, 4), np.float64)), _normal(123, (3, 4), np.float64))),
    ]

    def compare(label: str, got: Any, expected: np.ndarray) -> None:
        assert_array(label, "dZ", got, expected, exact=True)

    invalid = [
        ("dA (2, 3) and Z (3, 2)", BAD, "Z", _args(_normal(1, (2, 3)), _normal(2, (3, 2)))),
        ("integer Z", BAD, "Z", _args(_normal(1, (2, 2)), np.zeros((2, 2), dtype=np.int64))),
    ]
    return run_cases("relu_backward", fn, ref.relu_backward, cases, compare, invalid)


# --- Lesson 9 --------------------------------------------------------------------------------------
def check_first_linear_backward(fn: Callable[..., Any]) -> str:
    """(dW, db) of the first layer: Xᵀ dOut and the batch sum — and nothing else returned."""
    shapes = [(4, 3, 5), (1, 2, 3), (3, 3, 3), (7, 1, 4)]

    def case(i: int, n: int, d_in: int, d_h: int) -> Callable[[], Args]:
        return _args(_normal(130 + i, (n, d_h)), _normal(140 + i, (n, d_in)))

    cases = [(f"batch={n}, d_in={a}, d_hidden={h}", case(i, n, a, h)) for i, (n, a, h) in enumerate(shapes)]

    def compare(label: str, got: Any, expected: tuple[np.ndarray, np.ndarray]) -> None:
        dW, db = assert_tuple(label, "the result (dW, db)", got, 2)
        assert_array(label, "dW", dW, expected[0])
        assert_array(label, "db", db, expected[1])

    invalid = [
        ("dOut has 3 rows, X has 4", BAD, "X", _args(_normal(1, (3, 5)), _normal(2, (4, 2)))),
        ("X is 1-D", BAD, "X", _args(_normal(1, (4, 5)), _normal(2, (4,)))),
    ]
    return run_cases("first_linear_backward", fn, ref.first_linear_backward, cases, compare, invalid)


# --- Lesson 10 -------------------------------------------------------------------------------------
def check_mlp_backward(fn: Callable[..., Any]) -> str:
    """All four gradients, including rows where Z1 is exactly 0 (zero input rows, zero biases)."""

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

    def compare(label: str, got: Any, expected: dict[str, np.ndarray]) -> None:
        assert_array_dict(label, "grads", got, expected)

    p = _params(3, 4, 2, 7)
    _, cache = ref.mlp_forward(p, _normal(8, (5, 3)))
    invalid = [
        ("dY_hat has 4 rows, the cache 5", BAD, "dY_hat", _args(p, cache, _normal(9, (4, 2)))),
        ("cache without 'Z1'", BAD, "Z1", _args(p, {k: v for k, v in cache.items() if k != "Z1"}, _normal(9, (5, 2)))),
    ]
    return run_cases("mlp_backward", fn, ref.mlp_backward, cases, compare, invalid)
