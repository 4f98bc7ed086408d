"""Module 1, Part 2: gradient accumulation against the full-batch step, torch, and tracemalloc."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainsys.tolerance import mse_gradient_bound, rounding_bound, sgd_update_bound
from trainsys.memtrain import accumulation as acc
from trainsys.memtrain import mlp
from trainsys.memtrain.measure import peak_memory_bytes


def _problem(n: int, dtype=np.float32, seed: int = 0):
    X, Y = mlp.make_synthetic_regression_batch(n, 6, 3, np.random.default_rng(seed))
    params = mlp.init_mlp_params(6, 16, 3, np.random.default_rng(seed + 1))
    return {k: v.astype(dtype) for k, v in params.items()}, X.astype(dtype), Y.astype(dtype)


def _full_batch_step(params, X, Y, lr):
    Y_hat, cache = mlp.mlp_forward(params, X)
    loss, dY = mlp.mse_loss_and_grad(Y_hat, Y)
    return mlp.sgd_step(params, mlp.mlp_backward(params, cache, dY), lr), loss


def _assert_step_within_bound(got, want, params, X, Y, lr, M) -> None:
    """theta - lr g from two correct float64 computations: the gradients within mse_gradient_bound (plus M
    roundings: the micro-batch sums and the scaling), then the product and the subtraction, relative to
    |theta| + lr |g|."""
    Ws, bs = [params["W1"], params["W2"]], [params["b1"], params["b2"]]
    bounds = mse_gradient_bound(Ws, bs, X, Y, np.float64, extra_roundings=M + 1)
    for key, (l, part) in zip(mlp.PARAM_KEYS, [(0, "W"), (0, "b"), (1, "W"), (1, "b")], strict=True):
        bound = sgd_update_bound(params[key], (params[key] - want[key]) / lr, bounds[l][part], lr, np.float64)
        assert np.all(np.abs(got[key] - want[key]) <= bound), f"{key} beyond the derived bound"


def test_m1_11_split_covers_every_example_once_in_order() -> None:
    for n in range(1, 30):
        X = np.arange(n, dtype=np.float32)[:, None]
        for M in range(1, n + 1):
            parts = acc.split_into_micro_batches(X, X, M)
            sizes = [len(x) for x, _ in parts]
            assert len(parts) == M and max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
            np.testing.assert_array_equal(np.concatenate([x for x, _ in parts]), X)
            assert all(np.shares_memory(x, X) for x, _ in parts)


@pytest.mark.parametrize(("n", "M"), [(12, 1), (12, 4), (10, 3), (10, 4), (7, 7), (97, 8)])
def test_m1_14_accumulated_step_equals_full_batch_step_in_float64(n: int, M: int) -> None:
    params, X, Y = _problem(n, np.float64)
    got, loss = acc.grad_accumulation_step(params, X, Y, M, lr=0.1)
    want, want_loss = _full_batch_step(params, X, Y, 0.1)
    # float64 losses: M partial sums of positive squares add M + 1 roundings to the full mean's (relative)
    assert abs(loss - want_loss) <= rounding_bound(want_loss, n + 2 * M + 4, np.float64)
    _assert_step_within_bound(got, want, params, X, Y, 0.1, M)


@pytest.mark.parametrize(("n", "M"), [(10, 3), (97, 8), (256, 16)])
def test_m1_14_float32_difference_is_rounding_only(n: int, M: int) -> None:
    # Reordering a sum of n float32 terms moves it by at most about n * eps32 * sum|terms| (Higham);
    # the accumulated and full-batch gradients are two such orders, so their difference is bounded by
    # 2 * n * eps32 * sum_i |per-example gradient| / n = 2 * eps32 * sum_i |g_i|.
    params, X, Y = _problem(n, np.float32)
    lr = 1.0
    got, _ = acc.grad_accumulation_step(params, X, Y, M, lr=lr)
    want, _ = _full_batch_step(params, X, Y, lr)
    eps = np.finfo(np.float32).eps
    per_example = [mlp.mlp_backward(params, mlp.mlp_forward(params, X[i:i + 1])[1],
                                     mlp.mse_loss_and_grad(mlp.mlp_forward(params, X[i:i + 1])[0], Y[i:i + 1])[1])
                   for i in range(n)]
    for key in mlp.PARAM_KEYS:
        abs_sum = sum(np.abs(g[key].astype(np.float64)) for g in per_example) / n
        bound = 2 * n * eps * abs_sum + 4 * eps * np.abs(params[key])  # + rounding of the update itself
        assert np.all(np.abs(got[key].astype(np.float64) - want[key]) <= bound + 1e-12), key


def test_m1_14_mean_of_means_differs_on_uneven_micro_batches() -> None:
    params, X, Y = _problem(10, np.float64)
    parts = acc.split_into_micro_batches(X, Y, 3)  # sizes 4, 3, 3
    means = [mlp.mlp_backward(params, mlp.mlp_forward(params, x)[1],
                              mlp.mse_loss_and_grad(mlp.mlp_forward(params, x)[0], y)[1]) for x, y in parts]
    mean_of_means = {k: sum(g[k] for g in means) / 3 for k in mlp.PARAM_KEYS}
    Y_hat, cache = mlp.mlp_forward(params, X)
    full = mlp.mlp_backward(params, cache, mlp.mse_loss_and_grad(Y_hat, Y)[1])
    assert max(np.max(np.abs(mean_of_means[k] - full[k])) for k in mlp.PARAM_KEYS) > 1e-4


def test_m1_14_matches_torch_gradient_accumulation() -> None:
    params, X, Y = _problem(10, np.float64)
    t = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    for x, y in acc.split_into_micro_batches(X, Y, 3):
        y_hat = torch.relu(torch.tensor(x) @ t["W1"] + t["b1"]) @ t["W2"] + t["b2"]
        # the fix of the 2024 bug: divide each micro-batch's summed loss by the TOTAL element count
        (((y_hat - torch.tensor(y)) ** 2).sum() / Y.size).backward()
    got, _ = acc.grad_accumulation_step(params, X, Y, 3, lr=0.5)
    _assert_step_within_bound(got, {k: params[k] - 0.5 * t[k].grad.numpy() for k in params}, params, X, Y, 0.5, 3)


def test_m1_14_peak_memory_falls_like_one_over_m_and_matches_the_estimate() -> None:
    X, Y = mlp.make_synthetic_regression_batch(4096, 32, 2, np.random.default_rng(3))
    params = mlp.init_mlp_params(32, 256, 2, np.random.default_rng(4))
    peaks = {}
    for M in (1, 2, 4, 8):
        _, peaks[M] = peak_memory_bytes(acc.grad_accumulation_step, params, X, Y, M, 0.01)
        estimate = acc.estimate_accumulation_peak_bytes(4096, 32, 256, 2, M)
        assert abs(estimate - peaks[M]) <= 0.05 * peaks[M], (M, estimate, peaks[M])
    for M in (2, 4, 8):
        assert peaks[M] / peaks[1] == pytest.approx(1 / M, rel=0.15)


BAD = [
    (acc.split_into_micro_batches, (np.ones((4, 2)), np.ones((4, 1)), 0), ValueError, "num_micro_batches"),
    (acc.split_into_micro_batches, (np.ones((4, 2)), np.ones((4, 1)), 5), ValueError, "num_micro_batches"),
    (acc.split_into_micro_batches, (np.ones((4, 2)), np.ones((3, 1)), 2), ValueError, "Y"),
    (acc.accumulate_gradients, ({"W": np.ones(2)}, {"V": np.ones(2)}), ValueError, "grads"),
    (acc.accumulate_gradients, ({"W": np.ones(2)}, {"W": np.ones(3)}), ValueError, "W"),
    (acc.scale_accumulated_gradients, ({"W": np.ones(2)}, 0.0), ValueError, "scale"),
    (acc.grad_accumulation_step, (*_problem(4), 2, 0.0), ValueError, "lr"),
]


@pytest.mark.parametrize(("fn", "args", "error", "argument"), BAD, ids=[f"{b[0].__name__}-{b[3]}" for b in BAD])
def test_m1_part2_bad_input_names_the_argument(fn, args, error, argument) -> None:
    with pytest.raises(error, match=argument):
        fn(*args)
