"""Module 1, Part 1 reference implementations against independent oracles.

Oracles: closed forms (statistics of the generators), central finite differences in float64, and
torch autograd on the same network. Test names carry the lesson number, so a failure names its lesson.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainsys.tolerance import assert_within_rounding, mse_gradient_bound, mse_loss_bound, rounding_bound
from trainsys.memtrain import mlp


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# --- Lesson 1 --------------------------------------------------------------------------------------
def test_m1_01_make_synthetic_regression_batch_shapes_dtype_and_determinism() -> None:
    X, Y = mlp.make_synthetic_regression_batch(50, 4, 3, _rng(1))
    assert X.shape == (50, 4) and Y.shape == (50, 3)
    assert X.dtype == Y.dtype == np.float32
    X2, Y2 = mlp.make_synthetic_regression_batch(50, 4, 3, _rng(1))
    assert np.array_equal(X, X2) and np.array_equal(Y, Y2)
    X3, _ = mlp.make_synthetic_regression_batch(50, 4, 3, _rng(2))
    assert not np.array_equal(X, X3)


def test_m1_01_noise_level_is_recovered_by_least_squares() -> None:
    # With many examples the least-squares residual std converges to noise_std.
    for noise in (0.0, 0.1, 0.5):
        X, Y = mlp.make_synthetic_regression_batch(20_000, 5, 2, _rng(3), noise_std=noise)
        coef, *_ = np.linalg.lstsq(X.astype(np.float64), Y.astype(np.float64), rcond=None)
        residual = Y - X @ coef
        assert residual.std() == pytest.approx(noise, abs=0.01)


def test_m1_01_targets_have_unit_variance_before_noise() -> None:
    X, Y = mlp.make_synthetic_regression_batch(20_000, 64, 1, _rng(4), noise_std=0.0)
    # Var(Y) = ||w*||^2 with w* ~ N(0, 1/d_in): close to 1 for d_in = 64 (std of ||w||^2 is sqrt(2/64))
    assert 0.5 < Y.var() < 1.5


# --- Lesson 2 --------------------------------------------------------------------------------------
def test_m1_02_init_mlp_params_matches_kaiming_statistics() -> None:
    p = mlp.init_mlp_params(400, 500, 300, _rng(5))
    assert {k: v.shape for k, v in p.items()} == {"W1": (400, 500), "b1": (500,), "W2": (500, 300), "b2": (300,)}
    assert all(v.dtype == np.float32 for v in p.values())
    assert p["W1"].std() == pytest.approx(np.sqrt(2 / 400), rel=0.01)
    assert p["W2"].std() == pytest.approx(np.sqrt(1 / 500), rel=0.01)
    assert not p["b1"].any() and not p["b2"].any()


def test_m1_02_he_init_keeps_relu_second_moment() -> None:
    # E[ReLU(z)^2] = Var(z)/2 = (2/d_in * d_in)/2 = 1 for unit-variance inputs.
    p = mlp.init_mlp_params(256, 512, 1, _rng(6))
    X = _rng(7).standard_normal((2000, 256)).astype(np.float32)
    A1 = mlp.relu_forward(mlp.linear_forward(X, p["W1"], p["b1"]))
    assert np.mean(A1.astype(np.float64) ** 2) == pytest.approx(1.0, rel=0.05)


# --- Lessons 3 and 4 -------------------------------------------------------------------------------
def test_m1_03_linear_forward_matches_torch_linear() -> None:
    X = _rng(8).standard_normal((6, 4)).astype(np.float32)
    lin = torch.nn.Linear(4, 3)
    with torch.no_grad():
        expected = lin(torch.from_numpy(X)).numpy()
    W, b = lin.weight.detach().numpy().T.copy(), lin.bias.detach().numpy()
    got = mlp.linear_forward(X, W, b)
    # 4 products summed and a bias added: 5 roundings in any order, relative to |X| |W| + |b| (trainsys.tolerance)
    assert_within_rounding(got, expected, np.abs(X) @ np.abs(W) + np.abs(b), 5, np.float32, "X @ W + b")
    assert got.dtype == np.float32


def test_m1_04_relu_forward_preserves_dtype_and_input() -> None:
    for dtype in (np.float16, np.float32, np.float64):
        Z = np.array([[-1.0, 0.0, 2.0], [np.nan, -0.0, 3.0]], dtype=dtype)
        before = Z.copy()
        A = mlp.relu_forward(Z)
        assert A.dtype == dtype
        np.testing.assert_array_equal(A, [[0.0, 0.0, 2.0], [np.nan, 0.0, 3.0]])
        np.testing.assert_array_equal(Z, before)


# --- Lessons 5 to 10: the whole network against torch autograd and finite differences --------------
def _torch_reference(params: dict[str, np.ndarray], X: np.ndarray, Y: np.ndarray):
    t = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in params.items()}
    x, y = torch.tensor(X, dtype=torch.float64), torch.tensor(Y, dtype=torch.float64)
    y_hat = torch.relu(x @ t["W1"] + t["b1"]) @ t["W2"] + t["b2"]
    loss = torch.nn.functional.mse_loss(y_hat, y)
    loss.backward()
    return float(loss.detach()), {k: v.grad.numpy() for k, v in t.items()}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_m1_10_mlp_backward_matches_torch_autograd(dtype) -> None:
    X, Y = mlp.make_synthetic_regression_batch(16, 5, 3, _rng(9))
    params = {k: v.astype(dtype) for k, v in mlp.init_mlp_params(5, 8, 3, _rng(10)).items()}
    params["b1"] = _rng(11).standard_normal(8).astype(dtype) * 0.1
    Y_hat, cache = mlp.mlp_forward(params, X.astype(dtype))
    loss, dY = mlp.mse_loss_and_grad(Y_hat, Y.astype(dtype))
    grads = mlp.mlp_backward(params, cache, dY)
    t_loss, t_grads = _torch_reference(params, X, Y)  # float64 from the same inputs: exact to ~k u64
    # Ours is computed in dtype. The path to dW1 chains the forward (d_in + 2, d_hidden + 2 roundings), the loss
    # gradient (2), the backward (d_out + 1) and the batch sum (n): k bounds every entry's roundings, relative to
    # the pass on absolute values with G = 2/(n d_out) (|Y_hat| + |Y|) (trainsys.tolerance, Higham Lemma 3.3).
    Ws, bs = [params["W1"], params["W2"]], [params["b1"], params["b2"]]
    bounds = mse_gradient_bound(Ws, bs, X, Y, dtype)
    assert abs(loss - t_loss) <= mse_loss_bound(Ws, bs, X, Y, dtype)
    for key, (l, part) in zip(mlp.PARAM_KEYS, [(0, "W"), (0, "b"), (1, "W"), (1, "b")], strict=True):
        assert grads[key].dtype == dtype and grads[key].shape == params[key].shape
        assert np.all(np.abs(grads[key] - t_grads[key]) <= bounds[l][part]), f"{key} beyond the derived bound"


def test_m1_10_mlp_backward_matches_central_finite_differences() -> None:
    X, Y = (a.astype(np.float64) for a in mlp.make_synthetic_regression_batch(7, 3, 2, _rng(12)))
    params = {k: v.astype(np.float64) for k, v in mlp.init_mlp_params(3, 6, 2, _rng(13)).items()}
    params["b1"] = _rng(14).standard_normal(6) * 0.3

    def loss_of(p: dict[str, np.ndarray]) -> float:
        return mlp.mse_loss_and_grad(mlp.mlp_forward(p, X)[0], Y)[0]

    Y_hat, cache = mlp.mlp_forward(params, X)
    grads = mlp.mlp_backward(params, cache, mlp.mse_loss_and_grad(Y_hat, Y)[1])
    h = 1e-6
    for key in mlp.PARAM_KEYS:
        fd = np.zeros_like(params[key])
        for idx in np.ndindex(params[key].shape):
            plus = {k: v.copy() for k, v in params.items()}
            minus = {k: v.copy() for k, v in params.items()}
            plus[key][idx] += h
            minus[key][idx] -= h
            fd[idx] = (loss_of(plus) - loss_of(minus)) / (2 * h)
        # central differences in float64, h = 1e-6: each loss carries <= gamma_60 |L| of rounding (~60 roundings
        # along its path), so the quotient errs by <= gamma_60 |L| / h = 6.7e-9 |L| (|L| < 1.5 here); the step
        # (theta + h) - (theta - h) rounds by <= 2 u |theta| / (2h) ~ 1e-10 relative; truncation h^2 |d3L| / 6
        # ~ 1e-13 away from ReLU kinks: atol 1e-8 and rtol 1e-6 cover them
        np.testing.assert_allclose(grads[key], fd, rtol=1e-6, atol=1e-8)


def test_m1_05_cache_holds_exactly_what_backward_needs() -> None:
    params = mlp.init_mlp_params(3, 4, 2, _rng(15))
    X = _rng(16).standard_normal((5, 3)).astype(np.float32)
    _, cache = mlp.mlp_forward(params, X)
    assert set(cache) == set(mlp.CACHE_KEYS)
    assert cache["X"] is X  # the input is kept, not copied


def test_m1_08_relu_backward_is_zero_at_zero_like_torch() -> None:
    z = torch.tensor([-1.0, 0.0, 2.0], requires_grad=True)
    torch.relu(z).backward(torch.ones(3))
    got = mlp.relu_backward(np.ones(3, np.float32), np.array([-1.0, 0.0, 2.0], np.float32))
    np.testing.assert_array_equal(got, z.grad.numpy())


def test_m1_09_first_linear_backward_equals_linear_backward_without_dx() -> None:
    G = _rng(17).standard_normal((4, 3))
    X = _rng(18).standard_normal((4, 5))
    W = _rng(19).standard_normal((5, 3))
    _, dW, db = mlp.linear_backward(G, X, W)
    dW1, db1 = mlp.first_linear_backward(G, X)
    np.testing.assert_array_equal(dW, dW1)
    np.testing.assert_array_equal(db, db1)


def test_m1_06_mse_matches_torch_and_reduces_over_all_entries() -> None:
    P = _rng(20).standard_normal((6, 4)).astype(np.float32)
    Y = _rng(21).standard_normal((6, 4)).astype(np.float32)
    t = torch.tensor(P, requires_grad=True)
    ref = torch.nn.functional.mse_loss(t, torch.tensor(Y))
    ref.backward()
    loss, grad = mlp.mse_loss_and_grad(P, Y)
    # torch's loss is a float32 mean of 24 squares (26 roundings with the subtraction and the division), ours a
    # float64 one: within gamma_26 of the positive sum. The gradient 2/N (P - Y): 3 roundings of 2/N (|P| + |Y|).
    assert abs(loss - float(ref.detach())) <= rounding_bound(loss, 26, np.float32)
    assert_within_rounding(grad, t.grad.numpy(), 2 / P.size * (np.abs(P) + np.abs(Y)), 3, np.float32, "dY_hat")
    assert isinstance(loss, float) and grad.dtype == np.float32


def test_m1_10_training_with_sgd_fits_the_teacher() -> None:
    X, Y = mlp.make_synthetic_regression_batch(256, 8, 2, _rng(22), noise_std=0.05)
    params = mlp.init_mlp_params(8, 32, 2, _rng(23))
    losses = []
    for _ in range(300):
        Y_hat, cache = mlp.mlp_forward(params, X)
        loss, dY = mlp.mse_loss_and_grad(Y_hat, Y)
        losses.append(loss)
        params = mlp.sgd_step(params, mlp.mlp_backward(params, cache, dY), lr=0.05)
    assert losses[-1] < 0.1 * losses[0]
    assert all(v.dtype == np.float32 for v in params.values())


# --- Bad input: every lesson function names the argument it rejects ----------------------------------
P = mlp.init_mlp_params(3, 4, 2, _rng(0))
X3 = np.ones((5, 3), np.float32)
BAD_INPUTS = [
    ("01", mlp.make_synthetic_regression_batch, (0, 3, 2, _rng()), {}, ValueError, "n"),
    ("01", mlp.make_synthetic_regression_batch, (4, 3.5, 2, _rng()), {}, TypeError, "d_in"),
    ("01", mlp.make_synthetic_regression_batch, (4, 3, 2, 7), {}, TypeError, "rng"),
    ("01", mlp.make_synthetic_regression_batch, (4, 3, 2, _rng()), {"noise_std": float("nan")}, ValueError, "noise_std"),
    ("01", mlp.make_synthetic_regression_batch, (True, 3, 2, _rng()), {}, TypeError, "n"),
    ("02", mlp.init_mlp_params, (3, 0, 2, _rng()), {}, ValueError, "d_hidden"),
    ("02", mlp.init_mlp_params, (3, 4, 2, None), {}, TypeError, "rng"),
    ("03", mlp.linear_forward, (X3, np.ones((4, 2), np.float32), np.ones(2, np.float32)), {}, ValueError, "W"),
    ("03", mlp.linear_forward, (X3, np.ones((3, 2), np.float32), np.ones(3, np.float32)), {}, ValueError, "b"),
    ("03", mlp.linear_forward, (X3.tolist(), np.ones((3, 2)), np.ones(2)), {}, TypeError, "X"),
    ("04", mlp.relu_forward, (np.array([1, -1]),), {}, TypeError, "Z"),
    ("05", mlp.mlp_forward, (P, np.ones((5, 4), np.float32)), {}, ValueError, "X"),
    ("05", mlp.mlp_forward, ({**P, "W2": P["W2"].T.copy()}, X3), {}, ValueError, "W2"),
    ("06", mlp.mse_loss_and_grad, (np.ones((2, 3)), np.ones((3, 2))), {}, ValueError, "Y"),
    ("07", mlp.linear_backward, (np.ones((4, 2)), X3, np.ones((3, 2))), {}, ValueError, "dOut"),
    ("08", mlp.relu_backward, (np.ones((2, 2)), np.ones((2, 3))), {}, ValueError, "Z"),
    ("09", mlp.first_linear_backward, (np.ones((4, 2)), X3), {}, ValueError, "X"),
    ("10", mlp.mlp_backward, (P, {"X": X3, "Z1": np.ones((5, 4))}, np.ones((5, 2))), {}, ValueError, "A1"),
    ("10", mlp.sgd_step, (P, P, -0.1), {}, ValueError, "lr"),
]


@pytest.mark.parametrize(("lesson", "fn", "args", "kwargs", "error", "argument"), BAD_INPUTS,
                         ids=[f"m1_{b[0]}_{b[1].__name__}_{b[5]}" for b in BAD_INPUTS])
def test_bad_input_names_the_argument(lesson, fn, args, kwargs, error, argument) -> None:
    with pytest.raises(error) as info:
        fn(*args, **kwargs)
    assert argument in str(info.value)
