"""Module 1, Part 3: checkpointing against the plain pass, torch.utils.checkpoint and tracemalloc."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from torch.utils.checkpoint import checkpoint

from trainsys.tolerance import mse_gradient_bound
from trainsys.memtrain import checkpointing as ck
from trainsys.memtrain import mlp
from trainsys.memtrain.measure import peak_memory_bytes


def _net(widths, n=8, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    params = ck.init_deep_mlp_params(widths, rng)
    for layer in params:
        layer["b"] = (rng.standard_normal(layer["b"].shape) * 0.1).astype(np.float32)
    params = [{k: v.astype(dtype) for k, v in layer.items()} for layer in params]
    return params, rng.standard_normal((n, widths[0])).astype(dtype)


def test_m1_15_two_layer_case_equals_part_one() -> None:
    params, X = _net([3, 5, 2])
    p1 = {"W1": params[0]["W"], "b1": params[0]["b"], "W2": params[1]["W"], "b2": params[1]["b"]}
    Y_deep, cache = ck.deep_mlp_forward(params, X)
    Y_p1, cache1 = mlp.mlp_forward(p1, X)
    np.testing.assert_array_equal(Y_deep, Y_p1)
    dY = np.random.default_rng(1).standard_normal(Y_deep.shape).astype(np.float32)
    grads = ck.deep_mlp_backward(params, cache, dY)
    g1 = mlp.mlp_backward(p1, cache1, dY)  # masks from Z1 > 0 and from A1 > 0 agree exactly
    for l, (w, b) in enumerate((("W1", "b1"), ("W2", "b2"))):
        np.testing.assert_array_equal(grads[l]["W"], g1[w])
        np.testing.assert_array_equal(grads[l]["b"], g1[b])


@pytest.mark.parametrize("L", [1, 2, 5, 9])
def test_m1_17_checkpointed_gradients_are_bit_identical_for_every_segment_size(L: int) -> None:
    widths = [4] + [6 + l for l in range(L - 1)] + [3]
    params, X = _net(widths, n=5, seed=L)
    dY = np.random.default_rng(L).standard_normal((5, 3)).astype(np.float32)
    Y_plain, cache = ck.deep_mlp_forward(params, X)
    plain = ck.deep_mlp_backward(params, cache, dY)
    for s in range(1, L + 1):
        Y, ckpt = ck.mlp_forward_checkpointed(params, X, s)
        np.testing.assert_array_equal(Y, Y_plain)
        assert len(ckpt["boundaries"]) == math.ceil(L / s)
        grads, recomputed = ck.mlp_backward_checkpointed(params, ckpt, dY)
        assert recomputed == L - math.ceil(L / s)
        for g, p in zip(grads, plain):
            np.testing.assert_array_equal(g["W"], p["W"])
            np.testing.assert_array_equal(g["b"], p["b"])


def test_m1_16_recompute_is_bit_identical_to_the_plain_forward() -> None:
    params, X = _net([4, 7, 7, 7, 7, 2])
    _, cache = ck.deep_mlp_forward(params, X)
    for start in range(5):
        for stop in range(start + 1, 6):
            got = ck.recompute_block_activations(params, cache["a"][start], start, stop)["a"]
            assert got[0] is cache["a"][start]
            for g, want in zip(got, cache["a"][start:stop]):
                np.testing.assert_array_equal(g, want)


def test_m1_17_gradients_match_torch_utils_checkpoint() -> None:
    widths = [6, 10, 10, 10, 10, 10, 3]
    params, X = _net(widths, n=7, seed=3, dtype=np.float64)
    Y = np.random.default_rng(4).standard_normal((7, 3))
    layers = [(torch.tensor(p["W"], requires_grad=True), torch.tensor(p["b"], requires_grad=True)) for p in params]

    def block(a, lo, hi):
        for l in range(lo, hi):
            a = a @ layers[l][0] + layers[l][1]
            a = torch.relu(a) if l < len(layers) - 1 else a
        return a

    a = torch.tensor(X)
    for lo in range(0, 6, 2):
        a = checkpoint(block, a, lo, lo + 2, use_reentrant=False)
    torch.nn.functional.mse_loss(a, torch.tensor(Y)).backward()
    Y_hat, ckpt = ck.mlp_forward_checkpointed(params, X, 2)
    grads, _ = ck.mlp_backward_checkpointed(params, ckpt, (Y_hat - Y) * (2 / Y.size))
    # two float64 passes of the same chain, any summation order: trainsys.tolerance.mse_gradient_bound
    bounds = mse_gradient_bound([p["W"] for p in params], [p["b"] for p in params], X, Y, np.float64)
    for l, (g, (W, b)) in enumerate(zip(grads, layers)):
        for part, ours, theirs in (("W", g["W"], W.grad.numpy()), ("b", g["b"], b.grad.numpy())):
            assert np.all(np.abs(ours - theirs) <= bounds[l][part]), f"d{part}[{l}] beyond the derived bound"


@pytest.mark.parametrize(("L", "width", "batch"), [(16, 128, 1024), (9, 64, 2048), (25, 64, 1024), (6, 200, 512)])
def test_m1_18_estimate_agrees_with_tracemalloc_within_5_percent(L: int, width: int, batch: int) -> None:
    widths = [32] + [width] * (L - 1) + [4]
    params, X = _net(widths, n=batch, seed=L)
    Y = np.zeros((batch, 4), np.float32)
    for s in sorted({1, 2, 3, round(math.sqrt(L)), L // 2, L}):
        est = ck.estimate_checkpointing_memory_savings(widths, batch, s)
        _, measured = peak_memory_bytes(ck.checkpointed_forward_backward, params, X, Y, s)
        assert abs(est["checkpointed_peak_bytes"] - measured) <= 0.05 * measured, (s, est, measured)
    _, plain = peak_memory_bytes(ck.checkpointed_forward_backward, params, X, Y, None)
    assert abs(est["plain_peak_bytes"] - plain) <= 0.05 * plain


@pytest.mark.parametrize("L", [9, 16, 25, 36, 64])
def test_m1_18_optimal_segment_size_is_about_sqrt_L(L: int) -> None:
    est = ck.estimate_checkpointing_memory_savings([64] + [64] * (L - 1) + [64], 1024, 1)
    assert abs(est["optimal_segment_size"] - math.sqrt(L)) <= 1.5, est["optimal_segment_size"]


def test_m1_18_recompute_costs_less_than_one_forward() -> None:
    est = ck.estimate_checkpointing_memory_savings([64] * 17, 256, 4)
    assert est["recomputed_layers"] == 16 - 4
    assert est["extra_forward_flops"] == 12 * 2 * 256 * 64 * 64
    assert est["extra_compute_fraction"] == pytest.approx(12 / (3 * 16))


BAD = [
    (ck.mlp_forward_checkpointed, (*_net([3, 4, 2]), 0), ValueError, "segment_size"),
    (ck.mlp_forward_checkpointed, (*_net([3, 4, 2]), 3), ValueError, "segment_size"),
    (ck.recompute_block_activations, (_net([3, 4, 2])[0], np.ones((2, 3), np.float32), 1, 2), ValueError, "x_in"),
    (ck.estimate_checkpointing_memory_savings, ([4, 4], 8, 0), ValueError, "segment_size"),
    (ck.estimate_checkpointing_memory_savings, ([4], 8, 1), ValueError, "layer_widths"),
    (ck.init_deep_mlp_params, ([4, 0, 2], np.random.default_rng()), ValueError, "layer_widths"),
]


@pytest.mark.parametrize(("fn", "args", "error", "argument"), BAD, ids=[f"{b[0].__name__}-{b[3]}" for b in BAD])
def test_m1_part3_bad_input_names_the_argument(fn, args, error, argument) -> None:
    with pytest.raises(error, match=argument.replace("[", r"\[")):
        fn(*args)


def test_m1_16_replay_rebuilds_the_dropout_forwards_masks_and_activations_from_the_recorded_state() -> None:
    from trainsys.memtrain import dropout_checkpointing as dc

    params, X = _net([4, 7, 6, 7, 5, 2], n=6)
    L = len(params)
    for p in (0.0, 0.3, 0.5):
        _, plain = dc.dropout_mlp_forward(params, X, p, np.random.default_rng(3))
        for s in (1, 2, 3, L):
            _, ckpt = dc.dropout_mlp_forward_checkpointed(params, X, p, np.random.default_rng(3), s)
            for k, (x_in, state) in enumerate(zip(ckpt["boundaries"], ckpt["rng_states"])):
                start, stop = k * s, min(k * s + s, L)
                before = np.random.get_state()[1].copy()
                got = ck.recompute_block_activations(params, x_in, start, stop, dropout={"p": p, "rng_state": state})
                np.testing.assert_array_equal(np.random.get_state()[1], before)  # no other generator touched
                assert set(got) == {"a", "keep"} and got["a"][0] is x_in
                assert state == ckpt["rng_states"][k] and state is ckpt["rng_states"][k]
                assert len(got["keep"]) == min(stop, L - 1) - start  # the top mask when the top layer is hidden
                for g, want in zip(got["a"], plain["a"][start:stop], strict=True):
                    np.testing.assert_array_equal(g, want)
                for g, want in zip(got["keep"], plain["keep"][start:stop], strict=True):
                    assert g.dtype == np.bool_
                    np.testing.assert_array_equal(g, want)


def test_m1_16_without_dropout_the_result_is_unchanged() -> None:
    params, X = _net([4, 7, 6, 2])
    _, cache = ck.deep_mlp_forward(params, X)
    got = ck.recompute_block_activations(params, X, 0, 3, dropout=None)
    assert set(got) == {"a"} and len(got["a"]) == 3
    for g, want in zip(got["a"], cache["a"], strict=True):
        np.testing.assert_array_equal(g, want)


@pytest.mark.parametrize(("dropout", "error", "argument"), [
    ({"p": 1.0, "rng_state": np.random.default_rng(0).bit_generator.state}, ValueError, "dropout['p']"),
    ({"p": "0.5", "rng_state": np.random.default_rng(0).bit_generator.state}, TypeError, "dropout['p']"),
    ({"p": 0.5}, ValueError, "dropout"),
    ([0.5], TypeError, "dropout"),
    ({"p": 0.5, "rng_state": 7}, TypeError, "dropout['rng_state']"),
    ({"p": 0.5, "rng_state": {"bit_generator": "MT1993"}}, ValueError, "dropout['rng_state']"),
    ({"p": 0.5, "rng_state": {"bit_generator": "PCG64", "state": {}}}, ValueError, "dropout['rng_state']"),
])
def test_m1_16_bad_dropout_names_the_argument(dropout, error, argument) -> None:
    params, X = _net([3, 4, 4, 2])
    with pytest.raises(error, match=re.escape(argument)):
        ck.recompute_block_activations(params, X, 0, 2, dropout=dropout)
