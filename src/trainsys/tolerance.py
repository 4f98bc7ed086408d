"""Tolerances derived from the dtype and the computation, never tuned to one machine's BLAS.

Two correct implementations of the same formula may round differently: another summation order
(a BLAS kernel's blocking, pairwise vs sequential sums, torch vs NumPy), a fused multiply-add, a
division before or after the sum. What they cannot do is err by more than floating-point arithmetic
allows. The standard model (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §2.2)
says each operation is exact up to a factor ``1 + δ`` with ``|δ| ≤ u``, the unit roundoff
(``np.finfo(dtype).eps / 2``). A result formed by a chain of at most ``k`` roundings along every path,
such as a dot product of length ``k`` in *any* order (§3.1, eq. 3.4–3.5) or a matrix product chain
whose summation lengths add up to ``k`` (Lemma 3.3: ``(1+γ_a)(1+γ_b) ≤ 1+γ_{a+b}``), satisfies

    |computed − exact| ≤ γ_k · M,     γ_k = k·u / (1 − k·u),

elementwise, where ``M`` is the *same computation carried out on absolute values* (``|A|·|B|`` for a
product, ``Σ|x_i|`` for a sum). The bound is relative to ``M``, not to the result: cancellation can
make the result tiny (or zero) while every term, and so every rounding error, stays large. Two
correct implementations are then at most ``2·γ_k·M`` apart. This holds for every order of summation
and every blocking a BLAS may choose (Intel, AMD, ARM), because it assumes nothing about the order.

Underflow adds an absolute error of at most half the smallest subnormal spacing per rounding
(§2.1), so the bounds add ``k·smallest_subnormal`` per implementation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["unit_roundoff", "gamma", "rounding_bound", "within_rounding", "assert_within_rounding",
           "reorder_tolerance", "relu_chain_magnitudes", "cross_entropy_gradient_bound",
           "mse_gradient_bound", "mse_loss_bound", "sgd_update_bound", "AdamWRoundingBound"]


def _float_dtype(dtype: Any) -> np.dtype:
    """``dtype`` as a NumPy floating dtype; ``TypeError`` naming ``dtype`` for anything else."""
    dt = np.dtype(dtype) if isinstance(dtype, (np.dtype, type, str)) else None
    if dt is None or not np.issubdtype(dt, np.floating):
        raise TypeError(f"dtype must be a NumPy floating dtype, got {dtype!r}")
    return dt


def unit_roundoff(dtype: Any) -> float:
    """``u = eps / 2``: the largest relative error of one correctly rounded operation in ``dtype``
    (float16 4.9e-4, float32 6.0e-8, float64 1.1e-16). Raises ``TypeError`` for a non-floating dtype."""
    return float(np.finfo(_float_dtype(dtype)).eps) / 2


def gamma(k: int, dtype: Any) -> float:
    """``γ_k = k·u / (1 − k·u)``: the relative bound (to the magnitudes) of ``k`` chained roundings.

    ``k`` is the number of roundings along the longest path: the summation length of a dot product
    (``k`` terms: ``k − 1`` additions and the products), plus one for each further elementwise
    operation applied to it. Raises ``ValueError`` for ``k < 0`` or ``k·u ≥ 1`` (no bound exists:
    the computation is too long for the dtype) and ``TypeError`` for a non-integer ``k``.
    """
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an integer number of roundings, got {k!r}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    ku = int(k) * unit_roundoff(dtype)
    if ku >= 1:
        raise ValueError(f"k = {k} roundings in {np.dtype(dtype)}: k*u = {ku:.3g} >= 1, so no error bound exists")
    return ku / (1 - ku)


def rounding_bound(magnitude: Any, k: int, dtype: Any, *, implementations: int = 2) -> np.ndarray:
    """The largest difference, elementwise, between ``implementations`` correct answers (2: two
    answers to each other; 1: one answer to the exact value) of a computation with ``k`` roundings
    in ``dtype``, whose magnitude (the computation on absolute values) is ``magnitude``.

    Returns a float64 array shaped like ``magnitude``: ``implementations · (γ_k · magnitude +
    k · smallest subnormal)``.
    """
    dt = _float_dtype(dtype)
    mag = np.abs(np.asarray(magnitude, dtype=np.float64))
    return implementations * (gamma(k, dt) * mag + k * float(np.finfo(dt).smallest_subnormal))


def within_rounding(got: Any, expected: Any, magnitude: Any, k: int, dtype: Any) -> np.ndarray:
    """Boolean array: where ``got`` and ``expected`` (two correct computations) agree within
    :func:`rounding_bound`. NaN agrees with NaN, an infinity with the same infinity."""
    g = np.asarray(got, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    same_special = (np.isnan(g) & np.isnan(e)) | (np.isinf(g) & (g == e))
    with np.errstate(invalid="ignore"):
        close = np.abs(g - e) <= rounding_bound(magnitude, k, dtype)
    return same_special | close


def assert_within_rounding(got: Any, expected: Any, magnitude: Any, k: int, dtype: Any, what: str = "result") -> None:
    """Raise ``AssertionError`` naming ``what``, the worst entry and the bound when :func:`within_rounding`
    fails anywhere; shapes must match."""
    g = np.asarray(got)
    e = np.asarray(expected)
    if g.shape != e.shape:
        raise AssertionError(f"{what} has shape {g.shape}, expected {e.shape}")
    ok = within_rounding(g, e, magnitude, k, dtype)
    if not np.all(ok):
        err = np.where(ok, -1.0, np.abs(g.astype(np.float64) - e.astype(np.float64)))
        idx = np.unravel_index(int(np.nanargmax(np.where(np.isnan(err), np.inf, err))), g.shape) if g.shape else ()
        bound = rounding_bound(magnitude, k, dtype)
        raise AssertionError(f"{what}: {int((~ok).sum())} of {ok.size} entries beyond the rounding bound of {k} "
                             f"roundings in {np.dtype(dtype)}; worst at {tuple(int(i) for i in idx)}: got "
                             f"{float(g[idx])!r}, expected {float(e[idx])!r}, bound {float(np.broadcast_to(bound, g.shape)[idx]):.3g}")


def reorder_tolerance(dtype: Any, k: int, *, magnitude_over_result: float = 1.0,
                      smallest_magnitude: float = 0.0) -> dict[str, float]:
    """``{"rtol", "atol"}`` for APIs that compare ``|a − b| ≤ atol + rtol·|b|`` (``np.allclose``,
    ``torch.testing``), from :func:`rounding_bound` when the magnitude is not at hand elementwise.

    ``magnitude_over_result`` bounds ``M / |result|`` (1 when every term has one sign; the cancellation
    factor otherwise) and turns the bound relative to ``M`` into one relative to the result; entries
    whose result cancels towards 0 are covered by ``atol = 2·γ_k·smallest_magnitude``, where
    ``smallest_magnitude`` bounds ``M`` for such entries (e.g. the sum of ``|terms|``). Both also carry
    the underflow term.
    """
    g = gamma(k, dtype)
    tiny = k * float(np.finfo(_float_dtype(dtype)).smallest_subnormal)
    return {"rtol": 2 * g * float(magnitude_over_result), "atol": 2 * (g * float(smallest_magnitude) + tiny)}


def relu_chain_magnitudes(weights: list[np.ndarray], biases: list[np.ndarray], X: np.ndarray, G: np.ndarray,
                          scales: list[Any] | None = None) -> tuple[np.ndarray, list[dict[str, np.ndarray]]]:
    """The magnitudes ``M`` of a ReLU MLP's forward and backward pass: the same pass on absolute values, with
    every ReLU gate open (an upper bound that needs no forward value), in float64.

    The network is ``a_{l+1} = s_l ⊙ relu(a_l W_l + b_l)`` for the hidden layers (``s_l``: a dropout mask
    times ``1/(1-p)``, or 1 when ``scales`` is None) and ``ŷ = a_{L-1} W_{L-1} + b_{L-1}``; ``G = ∂L/∂ŷ``
    (``(n, d_out)``). Returns ``(M_ŷ (n, d_out), [{"W": M_dW_l, "b": M_db_l} for l = 0 … L-1])`` with
    ``M_dW_l = |a_l|ᵀ |G_l|`` and ``|G_{l-1}| = (|G_l| |W_l|ᵀ) ⊙ |s_{l-1}|``. Compare two correct passes
    with :func:`assert_within_rounding` and ``k`` the summation lengths along the path added up (Higham,
    Lemma 3.3): ``Σ (d_l + 2)`` over the forward layers, ``Σ (d_{l+1} + 1)`` over the backward, plus ``n``.
    """
    L = len(weights)
    if len(biases) != L or L < 1:
        raise ValueError(f"weights and biases must be two lists of the same length >= 1, got {L} and {len(biases)}")
    if scales is not None and len(scales) != L - 1:
        raise ValueError(f"scales must hold one entry per hidden layer ({L - 1}), got {len(scales)}")
    absW = [np.abs(np.asarray(W, np.float64)) for W in weights]
    acts = [np.abs(np.asarray(X, np.float64))]  # acts[l] = M of a_l, (n, d_l)
    for l in range(L):
        z = acts[-1] @ absW[l] + np.abs(np.asarray(biases[l], np.float64))
        if l < L - 1:
            z = z * (1.0 if scales is None else np.abs(np.asarray(scales[l], np.float64)))
        acts.append(z)
    g = np.abs(np.asarray(G, np.float64))
    grads: list[dict[str, np.ndarray]] = [{} for _ in range(L)]
    for l in range(L - 1, -1, -1):
        grads[l] = {"W": acts[l].T @ g, "b": g.sum(axis=0)}
        if l:
            g = g @ absW[l].T * (1.0 if scales is None else np.abs(np.asarray(scales[l - 1], np.float64)))
    return acts[-1], grads


def cross_entropy_gradient_bound(weights: list[np.ndarray], biases: list[np.ndarray], X: np.ndarray,
                                 labels: np.ndarray, dtype: Any) -> list[dict[str, np.ndarray]]:
    """How far apart, elementwise, two correct computations in ``dtype`` of the mean cross-entropy gradient of
    a ReLU MLP (``X (n, d_0)``, ``weights[l] (d_l, d_{l+1})``, integer ``labels (n,)``) may be: one dict
    ``{"W", "b"}`` of float64 bounds per layer.

    The logits of the two differ by at most ``δz = 2·γ_kf·M_z`` (``kf = Σ (d_l + 2)`` over the layers,
    :func:`relu_chain_magnitudes`); softmax is 1/2-Lipschitz in the max norm (its Jacobian's rows sum to
    ``2 p_i (1 - p_i) ≤ 1/2`` in absolute value) and rounds within ``γ_{J+4}·p`` (shift, exp, a sum of
    ``J``, a division); ``G = (p − onehot)/n`` adds two roundings. The backward then adds its own
    ``2·γ_kb·M`` (``kb = kf + Σ (d_{l+1} + 1) + n``) and carries ``δG`` through ``|a_l|ᵀ`` and ``|W_l|ᵀ``.
    """
    X64 = np.asarray(X, np.float64)
    n = X64.shape[0]
    M_z, _ = relu_chain_magnitudes(weights, biases, X64, np.zeros((n, np.asarray(weights[-1]).shape[1])))
    J = M_z.shape[1]
    sizes = [X64.shape[1]] + [np.asarray(W).shape[1] for W in weights]
    kf = sum(d + 2 for d in sizes[:-1])
    dz = rounding_bound(M_z, kf, dtype).max(axis=1, keepdims=True)
    z = X64
    for l, (W, b) in enumerate(zip(weights, biases)):
        z = z @ np.asarray(W, np.float64) + np.asarray(b, np.float64)
        z = np.maximum(z, 0) if l < len(weights) - 1 else z
    prob = np.exp(z - z.max(axis=1, keepdims=True))
    prob /= prob.sum(axis=1, keepdims=True)
    onehot = np.eye(J)[np.asarray(labels)]
    dG = (0.5 * dz + 2 * gamma(J + 4, dtype) * prob) / n + rounding_bound((prob + onehot) / n, 2, dtype)
    _, spread = relu_chain_magnitudes(weights, biases, X64, dG)
    _, mags = relu_chain_magnitudes(weights, biases, X64, (prob + onehot) / n)
    kb = kf + sum(d + 1 for d in sizes[1:]) + n
    return [{part: rounding_bound(mags[l][part], kb, dtype) + spread[l][part] for part in ("W", "b")}
            for l in range(len(weights))]


def mse_gradient_bound(weights: list[np.ndarray], biases: list[np.ndarray], X: np.ndarray, Y: np.ndarray,
                       dtype: Any, *, scale: float | None = None, extra_roundings: int = 0) -> list[dict[str, np.ndarray]]:
    """How far, elementwise, two correct computations in ``dtype`` of a ReLU MLP's gradient of the squared error
    may be, with ``G = scale·(ŷ − Y)`` (``scale`` defaults to the mean's ``2/Y.size``): one dict ``{"W", "b"}``
    of float64 bounds per layer, ``2·γ_k·M`` with ``M`` from :func:`relu_chain_magnitudes` (``|G| ≤
    scale·(M_ŷ + |Y|)``) and ``k = Σ (d_l + 2) + 2 + Σ (d_{l+1} + 1) + n`` (forward, the loss gradient's
    subtraction and scaling, backward, the batch sum), plus ``extra_roundings`` (e.g. ``M`` for a sum of
    ``M`` micro-batch gradients and its scaling)."""
    X64, Y64 = np.asarray(X, np.float64), np.asarray(Y, np.float64)
    scale = 2.0 / Y64.size if scale is None else float(scale)
    M_hat, _ = relu_chain_magnitudes(weights, biases, X64, np.zeros_like(Y64))
    _, mags = relu_chain_magnitudes(weights, biases, X64, scale * (M_hat + np.abs(Y64)))
    sizes = [X64.shape[1]] + [np.asarray(W).shape[1] for W in weights]
    k = sum(d + 2 for d in sizes[:-1]) + 2 + sum(d + 1 for d in sizes[1:]) + X64.shape[0] + int(extra_roundings)
    return [{part: rounding_bound(m[part], k, dtype) for part in ("W", "b")} for m in mags]


class AdamWRoundingBound:
    """A running bound on how far one correct Adam/AdamW (given gradients, so errors never feed back into them)
    may drift from the exact recursion, elementwise, by the standard model per operation (``wd = 0``: Adam):
    call :meth:`step` with each step's gradients (a dict of arrays); ``dp``, ``dm``, ``dv`` then hold the bounds
    for one implementation, ``2·dp`` etc. for two. The model:
    m rounds 3 times per step relative to beta1 |m| + (1 - beta1)|g|, v 4 times (g^2 too); the update
    m_hat / (sqrt(v_hat) + eps) carries m's and v's errors (first order: dm/c1/s + |m_hat| dv/c2 / (2 sqrt(v_hat) s^2))
    plus its own 5 roundings; p rounds 4 times relative to |p| + lr |u| and is decayed by (1 - lr wd)."""

    def __init__(self, p: dict, dtype: Any, lr: float, b1: float, b2: float, eps: float, wd: float = 0.0) -> None:
        self.dtype, self.lr, self.b1, self.b2, self.eps, self.wd = dtype, lr, b1, b2, eps, wd
        self.p = {k: v.astype(np.float64) for k, v in p.items()}
        zeros = {k: np.zeros(v.shape) for k, v in p.items()}
        self.m, self.v, self.Mm, self.Mv = dict(zeros), dict(zeros), dict(zeros), dict(zeros)
        self.dm, self.dv, self.dp, self.t = dict(zeros), dict(zeros), dict(zeros), 0

    def step(self, g: dict) -> None:
        """Advance the exact float64 recursion and the bounds by one step with gradients ``g``."""
        self.t += 1
        def gam(k: int) -> float:
            return gamma(k, self.dtype)

        c1, c2 = 1 - self.b1**self.t, 1 - self.b2**self.t
        for k, gk in g.items():
            g64 = gk.astype(np.float64)
            self.m[k] = self.b1 * self.m[k] + (1 - self.b1) * g64
            self.v[k] = self.b2 * self.v[k] + (1 - self.b2) * g64**2
            self.Mm[k] = self.b1 * self.Mm[k] + (1 - self.b1) * np.abs(g64)
            self.Mv[k] = self.b2 * self.Mv[k] + (1 - self.b2) * g64**2
            self.dm[k] = self.b1 * self.dm[k] + gam(3) * self.Mm[k]
            self.dv[k] = self.b2 * self.dv[k] + gam(4) * self.Mv[k]
            root = np.sqrt(self.v[k] / c2)
            s = root + self.eps
            upd = self.m[k] / c1 / s
            du = self.dm[k] / c1 / s + np.abs(self.m[k] / c1) * (self.dv[k] / c2) / (2 * root * s**2) + gam(5) * np.abs(upd)
            self.p[k] = self.p[k] * (1 - self.lr * self.wd) - self.lr * upd
            self.dp[k] = (1 - self.lr * self.wd) * self.dp[k] + self.lr * du + gam(4) * (np.abs(self.p[k]) + self.lr * np.abs(upd))


def sgd_update_bound(theta: np.ndarray, gradient: np.ndarray, gradient_bound: np.ndarray, lr: float,
                     dtype: Any) -> np.ndarray:
    """How far two correct ``θ − lr·g`` may be when their gradients are within ``gradient_bound`` of each other
    (``gradient``: either one): ``lr·gradient_bound`` plus the product's and the subtraction's roundings on each
    side, relative to ``|θ| + lr·(|g| + gradient_bound)``."""
    g = np.abs(np.asarray(gradient, np.float64)) + np.asarray(gradient_bound, np.float64)
    return lr * np.asarray(gradient_bound, np.float64) + rounding_bound(
        np.abs(np.asarray(theta, np.float64)) + lr * g, 2, dtype)


def mse_loss_bound(weights: list[np.ndarray], biases: list[np.ndarray], X: np.ndarray, Y: np.ndarray,
                   dtype: Any, *, extra_roundings: int = 0) -> float:
    """How far two correct computations of a ReLU MLP's mean squared error may be: the prediction in ``dtype``
    (each within ``δ = γ_kf·(M_ŷ + |Y|)`` of exact, ``kf = Σ (d_l + 2) + 1`` with the residual) moves each
    square by ``2|E|δ + δ²``; both sides then accumulate in float64 (``γ_{n·d_out + 2 + extra}`` of the loss).
    Returns twice the one-side bound (two implementations)."""
    X64, Y64 = np.asarray(X, np.float64), np.asarray(Y, np.float64)
    z = X64
    for l, (W, b) in enumerate(zip(weights, biases)):
        z = z @ np.asarray(W, np.float64) + np.asarray(b, np.float64)
        z = np.maximum(z, 0) if l < len(weights) - 1 else z
    M_hat, _ = relu_chain_magnitudes(weights, biases, X64, np.zeros_like(Y64))
    sizes = [X64.shape[1]] + [np.asarray(W).shape[1] for W in weights]
    delta = rounding_bound(M_hat + np.abs(Y64), sum(d + 2 for d in sizes[:-1]) + 1, dtype, implementations=1)
    E = np.abs(z - Y64)
    loss = float(np.mean(E**2))
    one_side = float(np.mean(2 * E * delta + delta**2)) + gamma(Y64.size + 2 + int(extra_roundings), np.float64) * loss
    return 2 * one_side
