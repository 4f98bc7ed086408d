"""Module 2, Parts 2, 3 and 5 (lessons 7–15, 21–24): AdamW, tree arithmetic and the outer optimizer.

Oracles: ``torch.optim.AdamW`` over 150 steps (float64 to 1e-12, float32 to rounding) and on real
training of the MLP; ``torch.optim.Adam(weight_decay=…)`` (Adam + L2) as the thing AdamW is not;
``torch.optim.SGD(momentum=0.9, nesterov=True)``; closed forms (the first bias-corrected step is
lr·sign(g); outer lr 1 without momentum is plain averaging; ``H = 1`` SGD's pseudo-gradient is lr·ḡ).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainsys.tolerance import AdamWRoundingBound, assert_within_rounding
from trainsys.diloco import adamw, model, outer
from trainsys.diloco import params as tree

SHAPES = {"W0": (5, 4), "b0": (4,), "W1": (4, 4), "b1": (4,)}


def _tree(seed: int, dtype: type = np.float64, std: float = 1.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: (rng.standard_normal(s) * std).astype(dtype) for k, s in SHAPES.items()}


def _torch_params(p: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.tensor(v, requires_grad=True) for k, v in p.items()}


# --- Lessons 7–10 ----------------------------------------------------------------------------------
def test_m2_07_init_adamw_state_is_zero_and_separate() -> None:
    p = _tree(0, np.float32)
    s = adamw.init_adamw_state(p)
    assert s["step"] == 0 and all(not s["m"][k].any() and not s["v"][k].any() for k in p)
    assert all(s["m"][k].dtype == np.float32 and not np.shares_memory(s["m"][k], s["v"][k]) for k in p)


def test_m2_08_moments_after_two_steps_match_the_closed_form() -> None:
    g1, g2 = _tree(1), _tree(2)
    s = adamw.update_moments(adamw.update_moments(adamw.init_adamw_state(g1), g1, 0.9, 0.95), g2, 0.9, 0.95)
    assert s["step"] == 2
    for k in g1:
        # float64, elementwise: each side rounds at most 5 times relative to the terms' magnitudes (trainsys.tolerance)
        assert_within_rounding(s["m"][k], 0.9 * 0.1 * g1[k] + 0.1 * g2[k],
                               0.09 * np.abs(g1[k]) + 0.1 * np.abs(g2[k]), 5, np.float64, f"m[{k!r}]")
        assert_within_rounding(s["v"][k], 0.95 * 0.05 * g1[k] ** 2 + 0.05 * g2[k] ** 2,
                               0.0475 * g1[k] ** 2 + 0.05 * g2[k] ** 2, 5, np.float64, f"v[{k!r}]")


def test_m2_09_bias_correction_recovers_g_at_step_1() -> None:
    g = _tree(3)
    s = adamw.update_moments(adamw.init_adamw_state(g), g, 0.9, 0.95)
    m_hat, v_hat = adamw.bias_correct_moments(s["m"], s["v"], s["step"], 0.9, 0.95)
    for k in g:
        # (1 - b) g / (1 - b): the product, the update's sum with 0 and the correction's division, 1 - b^1 itself
        assert_within_rounding(m_hat[k], g[k], np.abs(g[k]), 4, np.float64, f"m_hat[{k!r}]")
        assert_within_rounding(v_hat[k], g[k] ** 2, g[k] ** 2, 5, np.float64, f"v_hat[{k!r}]")


def test_m2_10_first_adam_step_moves_every_parameter_by_lr() -> None:
    # m_hat / sqrt(v_hat) = g / |g| at step 1: every coordinate moves by lr (up to eps), whatever |g|
    p, g = _tree(4), _tree(5, std=1e3)
    new, _ = adamw.adamw_step(p, g, adamw.init_adamw_state(p), lr=0.01, eps=1e-12, weight_decay=0.0)
    for k in p:
        np.testing.assert_allclose(new[k], p[k] - 0.01 * np.sign(g[k]), rtol=1e-10, atol=1e-12)


# --- Lesson 11 -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_m2_11_adamw_equals_torch_adamw_over_150_steps(dtype) -> None:
    p = _tree(6, dtype)
    t = _torch_params(p)
    opt = torch.optim.AdamW(list(t.values()), lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    state = adamw.init_adamw_state(p)
    bound = AdamWRoundingBound(p, dtype, 1e-2, 0.9, 0.95, 1e-8, 0.1)
    rng = np.random.default_rng(7)
    for _ in range(150):
        g = {k: rng.standard_normal(v.shape).astype(dtype) for k, v in p.items()}
        for k in t:
            t[k].grad = torch.tensor(g[k])
        opt.step()
        p, state = adamw.adamw_step(p, g, state, lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1)
        bound.step(g)
    assert state["step"] == 150
    for k in p:  # ours and torch's are each within the running bound of the exact recursion: 2x apart at most
        assert p[k].dtype == dtype
        for what, ours, theirs, err in (("p", p[k], t[k].detach().numpy(), bound.dp[k]),
                                        ("m", state["m"][k], opt.state[t[k]]["exp_avg"].numpy(), bound.dm[k]),
                                        ("v", state["v"][k], opt.state[t[k]]["exp_avg_sq"].numpy(), bound.dv[k])):
            excess = np.abs(ours.astype(np.float64) - theirs) - 2 * err
            assert np.all(excess <= 0), f"{what}[{k!r}] beyond the derived bound by {excess.max():.3g}"


def test_m2_11_adamw_trains_the_mlp_exactly_like_torch() -> None:
    p = {k: v.astype(np.float64) for k, v in model.init_model_params([6, 12, 4], np.random.default_rng(8)).items()}
    t = _torch_params(p)
    opt = torch.optim.AdamW(list(t.values()), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    X, y = model.make_classification_data(64, 6, 4, np.random.default_rng(9))
    X = X.astype(np.float64)
    state = adamw.init_adamw_state(p)
    for step in range(100):
        rows = slice(16 * (step % 4), 16 * (step % 4) + 16)
        opt.zero_grad()
        h = torch.relu(torch.tensor(X[rows]) @ t["W0"] + t["b0"])
        torch.nn.functional.cross_entropy(h @ t["W1"] + t["b1"], torch.tensor(y[rows])).backward()
        opt.step()
        grads = model.model_backward(p, model.model_forward(p, X[rows])[1], y[rows])
        p, state = adamw.adamw_step(p, grads, state, lr=3e-3)
    for k in p:
        np.testing.assert_allclose(p[k], t[k].detach().numpy(), rtol=1e-9, atol=1e-11)


def test_m2_11_adamw_is_not_adam_with_l2() -> None:
    p, g = _tree(10), _tree(11, std=5.0)
    t = _torch_params(p)
    opt = torch.optim.Adam(list(t.values()), lr=0.1, betas=(0.9, 0.95), weight_decay=0.5)  # L2 in the gradient
    state = adamw.init_adamw_state(p)
    for _ in range(3):
        for k in t:
            t[k].grad = torch.tensor(g[k])
        opt.step()
        p, state = adamw.adamw_step(p, g, state, lr=0.1, weight_decay=0.5)
    gap = max(np.max(np.abs(p[k] - t[k].detach().numpy())) for k in p)
    assert gap > 1e-3


def test_m2_11_decoupled_weight_decay_is_lr_scaled_shrinking() -> None:
    p = _tree(12)
    out = adamw.decoupled_weight_decay(p, 0.01, 0.1)
    for k in p:
        assert_within_rounding(out[k], p[k] * 0.999, np.abs(p[k]), 1, np.float64, k)  # one product each side
        assert not np.shares_memory(out[k], p[k])


# --- Lessons 12–15 ---------------------------------------------------------------------------------
def test_m2_12_clone_shares_no_memory() -> None:
    p = _tree(13, np.float32)
    c = tree.clone_params(p)
    c["W0"][0, 0] += 1.0
    assert p["W0"][0, 0] != c["W0"][0, 0] and all(c[k].dtype == p[k].dtype for k in p)


def test_m2_12_clone_is_bit_for_bit() -> None:
    # -0.0, a signalling NaN, a negative NaN with a payload, ±inf, a subnormal: a float64 round trip or x + 0.0
    # would change some of these bits (the Values clause)
    bits = np.array([0x80000000, 0x7F800001, 0xFFC00123, 0x7F800000, 0xFF800000, 0x00000001], np.uint32)
    special = {"f": bits.view(np.float32), "h": np.array([0x8000, 0x7C01, 0x0001], np.uint16).view(np.float16)}
    c = tree.clone_params(special)
    for k in special:
        assert c[k].tobytes() == special[k].tobytes() and c[k].dtype == special[k].dtype
        assert not np.shares_memory(c[k], special[k])


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_m2_13_scale_rounding_within_2u_and_exact_for_powers_of_two(dtype) -> None:
    x = np.random.default_rng(16).standard_normal(4096).astype(dtype)
    u = float(np.finfo(dtype).eps) / 2
    for c in (0.1, -1.3, 0.7, 3, 1e-3, np.float32(0.3), np.int64(-7)):
        exact = float(c) * x.astype(np.float64)  # float64: 2^-53 from exact, far below u
        got = tree.scale_params({"x": x}, c)["x"]
        normal = np.abs(exact) >= np.finfo(dtype).tiny  # the clause's bound holds in the normal range
        assert got.dtype == dtype
        assert np.max(np.abs(got.astype(np.float64) - exact)[normal] / np.abs(exact[normal])) <= 2 * u + u * u, c
    x = x[np.abs(x) > 1e-2]  # products by these powers of two stay in the normal range
    for c in (0.5, -2.0, 0.25, 8, -1.0, 2.0**-3):
        exact = (float(c) * x.astype(np.float64)).astype(dtype)  # representable: the cast rounds nothing
        np.testing.assert_array_equal(tree.scale_params({"x": x}, c)["x"], exact)


def test_m2_13_14_scale_and_subtract_are_key_by_key() -> None:
    a, b = _tree(14), _tree(15)
    s = tree.scale_params(a, -2.5)
    d = tree.subtract_params(a, b)
    for k in a:
        np.testing.assert_array_equal(s[k], -2.5 * a[k])
        np.testing.assert_array_equal(d[k], a[k] - b[k])
    with pytest.raises(ValueError, match="b0"):
        tree.subtract_params(a, {**b, "b0": b["b0"][None, :]})  # (1, 4) would broadcast against (4,)
    with pytest.raises(ValueError, match="keys"):
        tree.subtract_params(a, {**b, "extra": b["b0"]})


@pytest.mark.parametrize("k", [1, 2, 3, 5, 7, 9, 16])
def test_m2_15_mean_of_copies_is_that_tree_bit_for_bit(k: int) -> None:
    t = _tree(25, np.float32)
    mean = tree.average_params([t] * k)
    for key in t:
        assert mean[key].tobytes() == t[key].tobytes(), (k, key)


def test_m2_15_average_params_equals_numpy_average() -> None:
    trees = [_tree(20 + i) for i in range(5)]
    w = [3, 0, 1, 5, 2]
    got, uniform = tree.average_params(trees, w), tree.average_params(trees)
    for k in trees[0]:
        stack = np.stack([t[k] for t in trees])
        # two float64 weighted means of 5 terms (5 products, 4 sums, one division each; trainsys.tolerance)
        wa = np.asarray(w, np.float64) / sum(w)
        assert_within_rounding(got[k], np.average(stack, axis=0, weights=w), np.tensordot(wa, np.abs(stack), axes=1),
                               11, np.float64, k)
        assert_within_rounding(uniform[k], stack.mean(axis=0), np.abs(stack).mean(axis=0), 11, np.float64, k)


# --- Lessons 21–24 ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("lr", "momentum"), [(0.7, 0.9), (0.1, 0.5), (1.0, 0.0)])
def test_m2_23_nesterov_outer_step_equals_torch_sgd_nesterov(lr: float, momentum: float) -> None:
    p = _tree(30)
    t = _torch_params(p)
    opt = torch.optim.SGD(list(t.values()), lr=lr, momentum=momentum, nesterov=momentum > 0)
    state = outer.init_outer_optimizer(p)
    rng = np.random.default_rng(31)
    for _ in range(50):
        delta = {k: rng.standard_normal(v.shape) for k, v in p.items()}
        for k in t:
            t[k].grad = torch.tensor(delta[k])
        opt.step()
        p, state = outer.nesterov_outer_step(p, state, delta, lr, momentum)
    assert state["step"] == 50
    for k in p:
        np.testing.assert_allclose(p[k], t[k].detach().numpy(), rtol=1e-12, atol=1e-13)
        if momentum:
            np.testing.assert_allclose(state["momentum_buffer"][k], opt.state[t[k]]["momentum_buffer"].numpy(),
                                       rtol=1e-12, atol=1e-13)


def test_m2_23_nesterov_is_not_plain_momentum() -> None:
    p, delta = _tree(32), _tree(33)
    t = _torch_params(p)
    opt = torch.optim.SGD(list(t.values()), lr=0.7, momentum=0.9, nesterov=False)
    state = outer.init_outer_optimizer(p)
    for _ in range(2):
        for k in t:
            t[k].grad = torch.tensor(delta[k])
        opt.step()
        p, state = outer.nesterov_outer_step(p, state, delta, 0.7, 0.9)
    assert max(np.max(np.abs(p[k] - t[k].detach().numpy())) for k in p) > 0.1


def test_m2_24_outer_lr_1_without_momentum_is_fedavg() -> None:
    g = _tree(40, np.float32)
    workers = [_tree(41 + i, np.float32) for i in range(4)]
    delta = outer.compute_outer_gradient(g, workers)
    new, _ = outer.nesterov_outer_step(g, outer.init_outer_optimizer(g), delta, 1.0, 0.0)
    mean = tree.average_params(workers)
    for k in g:  # as in test_m2_loop: Delta, the mean inside it and theta - Delta, 3 float32 roundings
        magnitude = 2 * (np.abs(g[k].astype(np.float64)) + np.abs(mean[k].astype(np.float64)))
        assert_within_rounding(new[k], mean[k], magnitude, 3, np.float32, k)


def test_m2_24_pseudo_gradient_of_one_sgd_step_is_lr_times_the_mean_gradient() -> None:
    # original minus local: the sign of a gradient, so the outer step descends (torchft PR #233)
    g = _tree(50)
    grads = [_tree(51 + i) for i in range(3)]
    workers = [{k: g[k] - 0.1 * gr[k] for k in g} for gr in grads]
    delta = outer.compute_outer_gradient(g, workers)
    for k in g:  # g - (g - 0.1 gr) cancels: bound relative to |g| + 0.1 |gr| (the workers' own roundings), not the result
        magnitude = np.abs(g[k]) + 0.1 * np.mean([np.abs(gr[k]) for gr in grads], axis=0)
        assert_within_rounding(delta[k], 0.1 * np.mean([gr[k] for gr in grads], axis=0), magnitude, 8, np.float64, k)


BAD = [
    (adamw.update_moments, (adamw.init_adamw_state(_tree(0)), _tree(0), 1.0, 0.95), ValueError, "beta1"),
    (adamw.bias_correct_moments, (_tree(0), _tree(1), 0, 0.9, 0.95), ValueError, "step"),
    (adamw.adamw_param_step, (_tree(0), _tree(1), _tree(2), 1e-3, 0.0), ValueError, "eps"),
    (adamw.decoupled_weight_decay, (_tree(0), 1e-3, -1.0), ValueError, "weight_decay"),
    (adamw.adamw_step, (_tree(0), {"W0": np.ones((5, 4))}, adamw.init_adamw_state(_tree(0)), 1e-3), ValueError, "grads"),
    (tree.average_params, ([],), ValueError, "list_of_params"),
    (tree.average_params, ([_tree(0), _tree(1)], [1.0, -1.0]), ValueError, "weights"),
    (tree.average_params, ([_tree(0), _tree(1)], [1.0]), ValueError, "weights"),
    (tree.average_params, (_tree(0),), TypeError, "list_of_params"),
    (tree.average_params, ([_tree(0), {**_tree(1), "b0": np.ones(1)}],), ValueError, "b0"),
    (tree.average_params, ([_tree(0), _tree(1)], [1.0, float("nan")]), ValueError, "weights"),
    (tree.scale_params, (_tree(0), float("inf")), ValueError, "c"),
    (tree.scale_params, (_tree(0), True), TypeError, "c"),
    (tree.subtract_params, (_tree(0), {**_tree(1), "extra": np.ones(2)}), ValueError, "extra"),
    (adamw.decoupled_weight_decay, (list(_tree(0).values()), 1e-3, 0.1), TypeError, "params"),
    (outer.update_outer_momentum, (outer.init_outer_optimizer(_tree(0)), _tree(1), 1.0), ValueError, "momentum"),
    (outer.nesterov_outer_step, (_tree(0), outer.init_outer_optimizer(_tree(0)), _tree(1), 0.0, 0.9), ValueError, "lr"),
    (outer.compute_outer_gradient, (_tree(0), []), TypeError, "worker_params"),
    (outer.compute_outer_gradient, (_tree(0), [{"W0": np.ones((5, 4))}]), ValueError, "worker_params"),
    (outer.compute_outer_gradient, (_tree(0), [{**_tree(1), "b0": np.ones(1)}]), ValueError, "b0"),
    (outer.compute_outer_gradient, ({**_tree(0), "W0": np.ones((5, 4), np.int64)}, [_tree(1)]), TypeError,
     "global_params"),
]


@pytest.mark.parametrize(("fn", "args", "error", "argument"), BAD, ids=[f"{b[0].__name__}-{b[3]}" for b in BAD])
def test_m2_parts_2_3_5_bad_input_names_the_argument(fn, args, error, argument) -> None:
    with pytest.raises(error, match=argument):
        fn(*args)
