"""Module 2, Part 1 (lessons 1–6) and the data set, against independent oracles.

Oracles: torch (``nn.Linear`` stacks, ``softmax``, ``cross_entropy``, autograd), central finite
differences in float64, closed forms (the loss at ±1e4, He statistics), and training curves (an MLP
learns the data set, a linear model cannot fit it as well).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainsys.tolerance import assert_within_rounding, cross_entropy_gradient_bound, gamma, relu_chain_magnitudes
from trainsys.diloco import model
from trainsys.diloco.loop import train_synchronous_baseline


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _torch_net(params: dict[str, np.ndarray]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.tensor(params[f"W{l}"], requires_grad=True), torch.tensor(params[f"b{l}"], requires_grad=True))
            for l in range(model.num_layers(params))]


def _torch_logits(layers, X: np.ndarray) -> torch.Tensor:
    A = torch.tensor(X)
    for l, (W, b) in enumerate(layers):
        A = A @ W + b
        if l < len(layers) - 1:
            A = torch.relu(A)
    return A


# --- Lesson 1 --------------------------------------------------------------------------------------
def test_m2_01_init_model_params_has_he_statistics_and_zero_biases() -> None:
    p = model.init_model_params([300, 400, 500, 10], _rng(1))
    assert list(p) == ["W0", "b0", "W1", "b1", "W2", "b2"]
    assert {k: v.shape for k, v in p.items()} == {"W0": (300, 400), "b0": (400,), "W1": (400, 500), "b1": (500,),
                                                  "W2": (500, 10), "b2": (10,)}
    assert all(v.dtype == np.float32 for v in p.values())
    assert p["W0"].std() == pytest.approx(np.sqrt(2 / 300), rel=0.02)
    assert p["W1"].std() == pytest.approx(np.sqrt(2 / 400), rel=0.02)
    assert p["W2"].std() == pytest.approx(np.sqrt(1 / 500), rel=0.05)
    assert not any(p[f"b{l}"].any() for l in range(3))
    again = model.init_model_params([300, 400, 500, 10], _rng(1))
    assert all(np.array_equal(p[k], again[k]) for k in p)


# --- Lessons 2 and 3 -------------------------------------------------------------------------------
def test_m2_02_relu_matches_torch_and_keeps_dtype() -> None:
    for dtype in (np.float16, np.float32, np.float64):
        x = np.array([[-1.0, 0.0, 2.5, np.nan, -np.inf]], dtype=dtype)
        got = model.relu(x)
        assert got.dtype == dtype and not np.shares_memory(got, x)
        np.testing.assert_array_equal(got, torch.relu(torch.tensor(x)).numpy())


@pytest.mark.parametrize("sizes", [[5, 3], [6, 8, 4], [4, 7, 7, 7, 3]])
def test_m2_03_model_forward_matches_torch(sizes: list[int]) -> None:
    params = {k: v.astype(np.float64) for k, v in model.init_model_params(sizes, _rng(2)).items()}
    params = {k: v + 0.1 if k.startswith("b") else v for k, v in params.items()}
    X = _rng(3).standard_normal((9, sizes[0]))
    logits, cache = model.model_forward(params, X)
    # two float64 forwards, any summation order: 2 gamma_k of the absolute pass (trainsys.tolerance)
    Ws, bs = [params[f"W{l}"] for l in range(len(sizes) - 1)], [params[f"b{l}"] for l in range(len(sizes) - 1)]
    M_z, _ = relu_chain_magnitudes(Ws, bs, X, np.zeros((len(X), sizes[-1])))
    assert_within_rounding(logits, _torch_logits(_torch_net(params), X).detach().numpy(), M_z,
                           sum(d + 2 for d in sizes[:-1]), np.float64, "logits")
    assert set(cache) == {f"A{l}" for l in range(len(sizes) - 1)} | {"logits"} and cache["A0"] is X


# --- Lesson 4 --------------------------------------------------------------------------------------
def test_m2_04_softmax_matches_torch_and_is_finite_at_1e4() -> None:
    z = np.array([[1e4, -1e4, 0.0], [-1e4, -1e4 + 1.0, -1e4 + 3.0], [0.1, 0.2, 0.3]], dtype=np.float32)
    p = model.softmax(z)
    assert np.all(np.isfinite(p)) and p.dtype == np.float32
    # float32 softmax of rows whose shifts are exact (Sterbenz) or tiny: the shift (1 rounding), exp (~2 ulps),
    # the sum of J = 3 and the division put each p within gamma_7 p; the row sums within gamma_10 of 1
    J = z.shape[1]
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=gamma(J + 7, np.float32))
    p64 = np.exp(z.astype(np.float64) - z.max(axis=1, keepdims=True))
    assert_within_rounding(p, torch.softmax(torch.tensor(z), dim=1).numpy(), p64 / p64.sum(axis=1, keepdims=True),
                           J + 4, np.float32, "softmax")
    with np.errstate(over="ignore", invalid="ignore"):  # the naive formula is what the lesson warns about
        naive = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    assert np.isnan(naive).any()


def test_m2_04_softmax_is_invariant_to_a_per_row_shift() -> None:
    z = _rng(4).standard_normal((5, 6))
    shift = _rng(5).standard_normal((5, 1)) * 100
    # z + shift rounds each logit by up to u |z + shift|, which exp turns into that relative error of p (the
    # normalisation at most doubles it); softmax's own roundings add ~8 u: rtol = 2 (2 u max|z + shift| + 8 u)
    u = 2.0**-53
    rtol = 2 * (2 * u * float(np.max(np.abs(z + shift))) + 8 * u)
    np.testing.assert_allclose(model.softmax(z + shift), model.softmax(z), rtol=rtol)


# --- Lesson 5 --------------------------------------------------------------------------------------
def test_m2_05_cross_entropy_matches_torch() -> None:
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 1e-6)):
        z = (_rng(6).standard_normal((16, 5)) * 4).astype(dtype)
        y = _rng(7).integers(0, 5, 16)
        want = torch.nn.functional.cross_entropy(torch.tensor(z), torch.tensor(y)).item()
        assert model.cross_entropy_loss(z, y) == pytest.approx(want, rel=tol)


def test_m2_05_cross_entropy_at_1e4_is_finite_and_exact() -> None:
    z = np.array([[1e4, -1e4, 0.0], [1e4, -1e4, 0.0]], dtype=np.float32)
    # label 1 sits 2e4 below the maximum; label 0 is the maximum: losses 2e4 and ~0, mean 1e4
    assert model.cross_entropy_loss(z, np.array([1, 0])) == pytest.approx(1e4, rel=1e-7)
    z_torch = torch.nn.functional.cross_entropy(torch.tensor(z), torch.tensor([1, 0])).item()
    assert model.cross_entropy_loss(z, np.array([1, 0])) == pytest.approx(z_torch, rel=1e-6)


# --- Lesson 6 --------------------------------------------------------------------------------------
@pytest.mark.parametrize("sizes", [[4, 3], [4, 6, 3], [3, 5, 5, 4]])
def test_m2_06_model_backward_matches_finite_differences(sizes: list[int]) -> None:
    params = {k: v.astype(np.float64) + (0.05 if k.startswith("b") else 0.0)
              for k, v in model.init_model_params(sizes, _rng(8)).items()}
    X = _rng(9).standard_normal((7, sizes[0]))
    y = _rng(10).integers(0, sizes[-1], 7)
    grads = model.model_backward(params, model.model_forward(params, X)[1], y)
    h = 1e-6
    for key, value in params.items():
        numeric = np.zeros_like(value)
        for idx in np.ndindex(value.shape):
            plus = {k: v.copy() for k, v in params.items()}
            minus = {k: v.copy() for k, v in params.items()}
            plus[key][idx] += h
            minus[key][idx] -= h
            numeric[idx] = (model.cross_entropy_loss(model.model_forward(plus, X)[0], y)
                            - model.cross_entropy_loss(model.model_forward(minus, X)[0], y)) / (2 * h)
        # as in M1 Lesson 10's test: float64 central differences err by <= gamma_k |L| / h (~7e-9 for k <= 60,
        # |L| < 1) from rounding, ~1e-13 from truncation away from ReLU kinks
        np.testing.assert_allclose(grads[key], numeric, rtol=1e-6, atol=1e-8, err_msg=key)


def test_m2_06_model_backward_matches_torch_autograd_in_float32() -> None:
    params = model.init_model_params([6, 16, 16, 4], _rng(11))
    X = _rng(12).standard_normal((32, 6)).astype(np.float32)
    y = _rng(13).integers(0, 4, 32)
    layers = _torch_net(params)
    torch.nn.functional.cross_entropy(_torch_logits(layers, X), torch.tensor(y)).backward()
    grads = model.model_backward(params, model.model_forward(params, X)[1], y)
    # the derived bound of two float32 computations (trainsys.tolerance.cross_entropy_gradient_bound)
    bounds = cross_entropy_gradient_bound([params[f"W{l}"] for l in range(3)], [params[f"b{l}"] for l in range(3)],
                                          X, y, np.float32)
    for l, (W, b) in enumerate(layers):
        for part, ours, theirs in (("W", grads[f"W{l}"], W.grad.numpy()), ("b", grads[f"b{l}"], b.grad.numpy())):
            bound = bounds[l][part]
            excess = np.abs(ours.astype(np.float64) - theirs) - bound
            assert np.all(excess <= 0), f"d{part}{l}: beyond the derived bound by up to {excess.max():.3g}"
        assert grads[f"W{l}"].dtype == np.float32


# --- Data ------------------------------------------------------------------------------------------
def test_m2_data_is_balanced_deterministic_and_float32() -> None:
    X, y = model.make_classification_data(1003, 8, 5, _rng(14))
    assert X.shape == (1003, 8) and X.dtype == np.float32 and y.dtype == np.int64
    counts = np.bincount(y, minlength=5)
    assert counts.max() - counts.min() <= 1
    X2, y2 = model.make_classification_data(1003, 8, 5, _rng(14))
    assert np.array_equal(X, X2) and np.array_equal(y, y2)


def test_m2_data_needs_a_hidden_layer_and_training() -> None:
    # two clusters per class: a linear classifier cannot separate them as well as an MLP
    base = {"n_examples": 2400, "num_workers": 2, "inner_steps": 50, "rounds": 6, "progress": False}
    mlp = train_synchronous_baseline(base)
    linear = train_synchronous_baseline({**base, "hidden_sizes": ()})
    assert mlp["initial"]["heldout_accuracy"] < 0.3  # chance is 1/8
    assert mlp["history"][-1]["heldout_accuracy"] > 0.85
    assert mlp["history"][-1]["heldout_accuracy"] > linear["history"][-1]["heldout_accuracy"] + 0.1


def test_m2_data_heldout_split_is_disjoint_and_covering() -> None:
    X = np.arange(40, dtype=np.float32).reshape(20, 2)
    y = np.arange(20) % 3
    X_tr, y_tr, X_ho, y_ho = model.split_heldout(X, y, 0.25, _rng(15))
    assert len(X_ho) == 5 and len(X_tr) == 15
    assert sorted(np.concatenate([X_tr[:, 0], X_ho[:, 0]])) == sorted(X[:, 0])
    np.testing.assert_array_equal(y_tr, (X_tr[:, 0] // 2).astype(int) % 3)  # rows and labels stay paired


BAD = [
    (model.init_model_params, ([4], _rng()), ValueError, "sizes"),
    (model.init_model_params, ([4, 0, 2], _rng()), ValueError, "sizes"),
    (model.init_model_params, ([4, 2], 7), TypeError, "rng"),
    (model.relu, (np.array([1, -1]),), TypeError, "x"),
    (model.softmax, (np.ones(3, np.float32),), ValueError, "logits"),
    (model.cross_entropy_loss, (np.ones((2, 3), np.float32), np.array([0, 3])), ValueError, "y"),
    (model.cross_entropy_loss, (np.ones((2, 3), np.float32), np.array([0, -1])), ValueError, "y"),
    (model.cross_entropy_loss, (np.ones((2, 3), np.float32), np.array([0.0, 1.0])), TypeError, "y"),
    (model.model_forward, (model.init_model_params([3, 2], _rng()), np.ones((2, 4), np.float32)), ValueError, "X"),
    (model.model_forward, ({"W0": np.ones((3, 2), np.float32)}, np.ones((2, 3), np.float32)), ValueError, "params"),
    (model.split_heldout, (np.ones((4, 2), np.float32), np.zeros(4, np.int64), 0.01, _rng()), ValueError,
     "heldout_fraction"),
    (model.make_classification_data, (10, 2, 1, _rng()), ValueError, "n_classes"),
]


@pytest.mark.parametrize(("fn", "args", "error", "argument"), BAD, ids=[f"{b[0].__name__}-{b[3]}" for b in BAD])
def test_m2_part1_bad_input_names_the_argument(fn, args, error, argument) -> None:
    with pytest.raises(error, match=argument):
        fn(*args)
