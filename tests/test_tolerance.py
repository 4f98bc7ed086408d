"""The derived rounding bound (trainsys.tolerance): it holds for float32 matrix products summed in any order,
and it is not so loose that an error one ulp per term beyond rounding, or a half-precision computation, passes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainsys.tolerance import (assert_within_rounding, gamma, reorder_tolerance, rounding_bound, unit_roundoff,
                                within_rounding)


def _orders(A: np.ndarray, B: np.ndarray) -> dict[str, np.ndarray]:
    """The same float32 product summed five ways: BLAS (NumPy), torch's kernel, sequential forwards and
    backwards over k, and NumPy's pairwise reduction of the products."""
    products = A[:, :, None] * B[None, :, :]  # (m, k, n) float32, each product rounded once
    forward = np.zeros((A.shape[0], B.shape[1]), np.float32)
    for i in range(A.shape[1]):
        forward = forward + products[:, i]
    backward = np.zeros_like(forward)
    for i in reversed(range(A.shape[1])):
        backward = backward + products[:, i]
    return {"numpy": A @ B, "torch": (torch.from_numpy(A) @ torch.from_numpy(B)).numpy(), "forward": forward,
            "backward": backward, "pairwise": products.sum(axis=1, dtype=np.float32)}


@pytest.mark.parametrize("k", [1, 7, 100, 1000])
def test_bound_holds_for_float32_products_in_every_summation_order(k: int) -> None:
    rng = np.random.default_rng(k)
    A = rng.standard_normal((6, k)).astype(np.float32)
    B = rng.standard_normal((k, 5)).astype(np.float32)
    M = np.abs(A).astype(np.float64) @ np.abs(B).astype(np.float64)
    exact = A.astype(np.float64) @ B.astype(np.float64)  # exact to ~k u64, far below the float32 bound
    results = _orders(A, B)
    for name, r in results.items():
        assert np.all(np.abs(r - exact) <= rounding_bound(M, k, np.float32, implementations=1)), name
        for other, s in results.items():
            assert_within_rounding(r, s, M, k, np.float32, f"{name} vs {other}")


def test_bound_relative_to_magnitudes_survives_cancellation() -> None:
    """A product that cancels to ~0: a bound relative to the result would reject correct answers."""
    rng = np.random.default_rng(5)
    A = rng.standard_normal((4, 200)).astype(np.float32)
    B = np.concatenate([np.ones((100, 3)), -np.ones((100, 3))]).astype(np.float32)
    A[:, 100:] = A[:, :100]  # every row cancels exactly in exact arithmetic
    M = np.abs(A).astype(np.float64) @ np.abs(B).astype(np.float64)
    results = _orders(A, B)
    for name, r in results.items():
        assert_within_rounding(r, np.zeros_like(r), M, 200, np.float32, name)


@pytest.mark.parametrize("k", [7, 100, 1000])
def test_bound_rejects_one_ulp_per_term_beyond_rounding(k: int) -> None:
    """Positive terms (no cancellation): an answer whose every term is off by its full rounding allowance
    plus one ulp is outside the bound — the bound is the worst case of rounding, not a loose margin."""
    rng = np.random.default_rng(k)
    terms = rng.uniform(0.5, 2.0, size=(8, k)).astype(np.float32)
    exact = terms.astype(np.float64).sum(axis=1)
    M = exact  # all terms positive
    allowance = 2 * gamma(k, np.float32) * terms.astype(np.float64)
    bad = exact + (allowance + np.spacing(terms).astype(np.float64)).sum(axis=1)
    assert not np.any(within_rounding(bad, exact, M, k, np.float32))
    at_edge = exact + allowance.sum(axis=1) * (1 - 1e-9)
    assert np.all(within_rounding(at_edge, exact, M, k, np.float32))


def test_bound_rejects_a_product_computed_in_half_precision() -> None:
    rng = np.random.default_rng(3)
    A = rng.standard_normal((6, 100)).astype(np.float32)
    B = rng.standard_normal((100, 5)).astype(np.float32)
    M = np.abs(A).astype(np.float64) @ np.abs(B).astype(np.float64)
    half = (A.astype(np.float16) @ B.astype(np.float16)).astype(np.float32)
    with pytest.raises(AssertionError, match="beyond the rounding bound"):
        assert_within_rounding(half, A @ B, M, 100, np.float32, "half")


def test_constants_and_refusals() -> None:
    assert unit_roundoff(np.float32) == 2.0**-24 and unit_roundoff(np.float64) == 2.0**-53
    assert gamma(0, np.float32) == 0.0 and gamma(10, np.float16) == pytest.approx(10 * 2.0**-11 / (1 - 10 * 2.0**-11))
    assert reorder_tolerance(np.float32, 100)["rtol"] == 2 * gamma(100, np.float32)
    with pytest.raises(ValueError, match="k"):
        gamma(3000, np.float16)
    with pytest.raises(ValueError, match="k"):
        gamma(-1, np.float32)
    with pytest.raises(TypeError, match="k"):
        gamma(2.0, np.float32)
    with pytest.raises(TypeError, match="dtype"):
        unit_roundoff(np.int64)
