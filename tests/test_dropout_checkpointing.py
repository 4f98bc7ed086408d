"""Module 1, Part 3: dropout under checkpointing — replaying the generator's state, against torch and tracemalloc."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.utils.checkpoint import checkpoint

from trainsys.memtrain import checkpointing as ck
from trainsys.memtrain import dropout_checkpointing as dc
from trainsys.memtrain.measure import peak_memory_bytes
from trainsys.tolerance import assert_within_rounding, relu_chain_magnitudes

from tests.test_m1p3_checkpointing import _net as checkpointing_net

WIDTHS = [5, 12, 11, 12, 10, 12, 3]  # L = 6 layers, 5 dropout masks
SEED = 7


def _net(widths, n=9, seed=0, dtype=np.float64):
    """Part 3's test network (non-zero biases), and an upstream gradient for it."""
    params, X = checkpointing_net(widths, n=n, seed=seed, dtype=dtype)
    return params, X, np.random.default_rng([seed, 1]).standard_normal((n, widths[-1])).astype(dtype)


def _plain(params, X, dY, p, seed=SEED):
    rng = np.random.default_rng(seed)
    Y_hat, cache = dc.dropout_mlp_forward(params, X, p, rng)
    return Y_hat, cache, dc.dropout_mlp_backward(params, cache, dY), rng


def _checkpointed(params, X, dY, p, s, seed=SEED, replay=True):
    rng = np.random.default_rng(seed)
    Y_hat, ckpt = dc.dropout_mlp_forward_checkpointed(params, X, p, rng, s)
    grads, recomputed = dc.dropout_mlp_backward_checkpointed(params, ckpt, dY, rng, replay_rng_state=replay)
    return Y_hat, ckpt, grads, recomputed, rng


def _flat(grads):
    return np.concatenate([np.concatenate([g["W"].ravel(), g["b"].ravel()]) for g in grads]).astype(np.float64)


def _assert_grads_equal(got, want):
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g["W"], w["W"])
        np.testing.assert_array_equal(g["b"], w["b"])
        assert g["W"].dtype == w["W"].dtype


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("p", [0.0, 0.1, 0.5])
def test_checkpointed_gradients_equal_plain_bit_for_bit_and_leave_rng_where_the_plain_pass_does(dtype, p):
    params, X, dY = _net(WIDTHS, dtype=dtype)
    L = len(params)
    Y_plain, cache, plain, rng_plain = _plain(params, X, dY, p)
    assert cache["keep"][0].dtype == np.bool_ and len(cache["keep"]) == L - 1
    if p > 0:  # the masks drop something, and not everything
        assert 0 < sum(int((~m).sum()) for m in cache["keep"]) < sum(m.size for m in cache["keep"])
    for s in (1, 2, 4, L):
        Y_hat, ckpt, grads, recomputed, rng = _checkpointed(params, X, dY, p, s)
        np.testing.assert_array_equal(Y_hat, Y_plain)
        assert len(ckpt["boundaries"]) == len(ckpt["rng_states"]) == math.ceil(L / s)
        for k, b in enumerate(ckpt["boundaries"]):
            np.testing.assert_array_equal(b, cache["a"][k * s])
        assert recomputed == L - math.ceil(L / s)
        _assert_grads_equal(grads, plain)
        assert rng.bit_generator.state == rng_plain.bit_generator.state


def test_forward_draws_one_uniform_array_per_hidden_layer_whatever_p():
    params, X, _ = _net(WIDTHS)
    expected = np.random.default_rng(SEED)
    for w in WIDTHS[1:-1]:
        expected.random((X.shape[0], w))
    for p in (0.0, 0.5):
        rng = np.random.default_rng(SEED)
        dc.dropout_mlp_forward(params, X, p, rng)
        assert rng.bit_generator.state == expected.bit_generator.state


def test_recompute_with_the_recorded_state_reproduces_the_forward_masks_and_activations():
    params, X, dY = _net(WIDTHS)
    _, cache, _, _ = _plain(params, X, dY, 0.5)
    _, ckpt = dc.dropout_mlp_forward_checkpointed(params, X, 0.5, np.random.default_rng(SEED), 2)
    L = len(params)
    for k, (x_in, state) in enumerate(zip(ckpt["boundaries"], ckpt["rng_states"])):
        replay = np.random.default_rng()
        replay.bit_generator.state = state
        start, stop = 2 * k, min(2 * k + 2, L)
        got = dc.recompute_dropout_block(params, x_in, start, stop, 0.5, replay)
        assert got["a"][0] is x_in and len(got["a"]) == stop - start
        for g, want in zip(got["a"], cache["a"][start:stop], strict=True):
            np.testing.assert_array_equal(g, want)
        for g, want in zip(got["keep"], cache["keep"][start:min(stop, L - 1)], strict=True):
            np.testing.assert_array_equal(g, want)


def test_p_zero_is_the_plain_deep_mlp_bit_for_bit():
    params, X, dY = _net(WIDTHS, dtype=np.float32)
    Y_hat, _, grads, _ = _plain(params, X, dY, 0.0)
    Y_ref, cache = ck.deep_mlp_forward(params, X)
    np.testing.assert_array_equal(Y_hat, Y_ref)
    _assert_grads_equal(grads, ck.deep_mlp_backward(params, cache, dY))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fresh_masks_in_the_recompute_give_wrong_gradients_unless_p_is_zero(dtype):
    params, X, dY = _net(WIDTHS, dtype=dtype)
    L = len(params)
    for p in (0.0, 0.1, 0.5):
        _, _, plain, rng_plain = _plain(params, X, dY, p)
        for s in (1, 2, L):
            Y_hat, _, wrong, _, rng = _checkpointed(params, X, dY, p, s, replay=False)
            rel = np.linalg.norm(_flat(wrong) - _flat(plain)) / np.linalg.norm(_flat(plain))
            # the recompute drew one more array per recomputed hidden layer: the caller's generator moved on
            assert rng.bit_generator.state != rng_plain.bit_generator.state
            if p == 0.0:  # every mask is all ones, fresh or not: the mistake is about the masks alone
                _assert_grads_equal(wrong, plain)
            else:  # measured 0.35 … 2.6 on this net; float rounding would be ~1e-16 (float64) or ~1e-7 (float32)
                assert rel > 0.1, (p, s, rel)


def test_backward_restores_the_callers_state_even_when_it_fails():
    params, X, dY = _net(WIDTHS)
    rng = np.random.default_rng(SEED)
    _, ckpt = dc.dropout_mlp_forward_checkpointed(params, X, 0.5, rng, 2)
    after_forward = rng.bit_generator.state
    ckpt = dict(ckpt, boundaries=ckpt["boundaries"][:-1] + [np.ones((9, 7))])  # the last segment's rebuild fails
    with pytest.raises(ValueError, match="x_in"):
        dc.dropout_mlp_backward_checkpointed(params, ckpt, dY, rng)
    assert rng.bit_generator.state == after_forward


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_dropout_forward_and_backward_match_torch_dropout_given_its_mask(dtype):
    """torch's CPU dropout multiplies by a noise of 0 and fl(1/(1−p)); given its mask, ours is the same map."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        for p in (0.1, 1 / 3, 0.5, 0.9):
            h = (torch.rand(64, 33, dtype=dtype) + 0.5).requires_grad_(True)  # > 0: y == 0 exactly where dropped
            y = torch.nn.functional.dropout(h, p, training=True)
            g = torch.randn(64, 33, dtype=dtype)
            y.backward(g)
            keep = (y != 0).numpy()
            assert 0 < keep.sum() < keep.size
            np.testing.assert_array_equal(dc.dropout_backward(h.detach().numpy(), keep, p), y.detach().numpy())
            np.testing.assert_array_equal(dc.dropout_backward(g.numpy(), keep, p), h.grad.numpy())
    h = np.random.default_rng(1).random((64, 33)).astype(np.float32)
    out, keep = dc.dropout_forward(h, 0.3, np.random.default_rng(2))
    np.testing.assert_array_equal(out, dc.dropout_backward(h, keep, 0.3))  # dropout is its own adjoint
    assert out.dtype == np.float32


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gradients_match_torch_autograd_with_the_same_masks_as_constants(dtype):
    """Within the rounding bound of the whole chain, whatever order either side's BLAS sums in.

    Every path to dW_l passes through the forward matmuls (summation length d_in of each layer, plus the bias
    add, the ReLU-free mask product), the backward matmuls (d_out of each layer, plus the mask product) and
    the batch sum (n); Higham's Lemma 3.3 adds the lengths, so k = sum(d_in + 2) + sum(d_out + 1) + n bounds
    every gradient entry: |ours - torch's| <= 2 gamma_k |M| with M the same pass on absolute values."""
    params, X, dY = _net(WIDTHS, dtype=dtype)
    p = 0.5
    _, cache, plain, _ = _plain(params, X, dY, p)
    _, _, grads, _, _ = _checkpointed(params, X, dY, p, 2)
    layers = [(torch.tensor(q["W"], requires_grad=True), torch.tensor(q["b"], requires_grad=True)) for q in params]
    a = torch.tensor(X)
    for l, (W, b) in enumerate(layers):
        a = a @ W + b
        if l < len(layers) - 1:
            a = torch.relu(a) * torch.tensor(cache["keep"][l] * dtype(1 / (1 - p)))  # the forward's masks
    (a * torch.tensor(dY)).sum().backward()
    k = sum(w + 2 for w in WIDTHS[:-1]) + sum(w + 1 for w in WIDTHS[1:]) + len(X)
    _, mags = relu_chain_magnitudes([q["W"] for q in params], [q["b"] for q in params], X, dY,
                                    [m / (1 - p) for m in cache["keep"]])
    for l, (g, q, (W, b), m) in enumerate(zip(grads, plain, layers, mags, strict=True)):
        assert_within_rounding(g["W"], W.grad.numpy(), m["W"], k, dtype, f"dW[{l}]")
        assert_within_rounding(g["b"], b.grad.numpy(), m["b"], k, dtype, f"db[{l}]")
        np.testing.assert_array_equal(g["W"], q["W"])


def test_torch_checkpoint_replays_dropout_only_with_preserve_rng_state():
    """torch.utils.checkpoint stashes torch.get_rng_state() in the forward and sets it inside fork_rng for the
    recompute (torch/utils/checkpoint.py). With preserve_rng_state=False nothing is stashed: the recompute runs
    in the backward pass, after the forward's 5 draws, so it takes the *next* masks in the stream (the last
    segment first) and the generator ends 5 draws further on. The gradients then mix the loss of one network
    with the activations of another."""
    L, w, n, p, s = 6, 10, 7, 0.5, 2
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        linears = [torch.nn.Linear(w, w, dtype=torch.float64) for _ in range(L)]
        drops = [torch.nn.Dropout(p) for _ in range(L - 1)]
        X = torch.randn(n, w, dtype=torch.float64)
        seen: list[tuple[int, torch.Tensor, torch.Tensor]] = []
        for l, d in enumerate(drops):
            d.register_forward_hook(lambda _m, i, o, l=l: seen.append((l, i[0].detach(), o.detach())))

        def segment(a, lo, hi):
            for l in range(lo, hi):
                a = linears[l](a)
                a = drops[l](torch.relu(a)) if l < L - 1 else a
            return a

        def run(ckpt, preserve):
            for lin in linears:
                lin.zero_grad(set_to_none=True)
            seen.clear()
            torch.manual_seed(123)
            a = X
            for lo in range(0, L, s):
                a = (checkpoint(segment, a, lo, lo + s, use_reentrant=False, preserve_rng_state=preserve)
                     if ckpt else segment(a, lo, lo + s))
            a.square().sum().backward()
            grads = torch.cat([torch.cat([m.weight.grad.ravel(), m.bias.grad.ravel()]) for m in linears])
            return grads, torch.get_rng_state(), list(seen)

        plain, state_plain, seen_plain = run(False, True)
        kept, state_kept, seen_kept = run(True, True)
        fresh, state_fresh, seen_fresh = run(True, False)

        torch.manual_seed(123)  # what dropout draws on CPU: empty_like(h).bernoulli_(1 - p)
        draws = [torch.empty(n, w, dtype=torch.float64).bernoulli_(1 - p) for _ in range(2 * (L - 1))]
        state_after_10 = torch.get_rng_state()

    cpu_state = torch.get_rng_state()  # what checkpoint stashes per segment with preserve_rng_state=True
    assert cpu_state.dtype == torch.uint8 and cpu_state.numel() == 5056
    assert torch.equal(kept, plain) and torch.equal(state_kept, state_plain)
    assert len(seen_plain) == L - 1 and len(seen_kept) > L - 1 and len(seen_fresh) > L - 1

    def mask_matches(h, out, draw):
        live = h != 0
        return torch.equal((out != 0)[live], (draw != 0)[live])

    for l, h, out in seen_plain:  # the forward's masks are draws 0 … 4
        assert mask_matches(h, out, draws[l])
    for l, h, out in seen_kept[L - 1:]:  # preserve_rng_state=True: the recompute redraws the forward's masks
        assert mask_matches(h, out, draws[l])
    recompute_order = [l for lo in reversed(range(0, L, s)) for l in range(lo, min(lo + s, L - 1))]  # 4, 2, 3, 0, 1
    for l, h, out in seen_fresh[L - 1:]:  # preserve_rng_state=False: draws 5 … 9, last segment first
        assert mask_matches(h, out, draws[L - 1 + recompute_order.index(l)])
        assert not mask_matches(h, out, draws[l])
    rel = float((fresh - plain).norm() / plain.norm())
    assert rel > 0.1, rel  # measured ≈ 1.5
    assert torch.equal(state_fresh, state_after_10) and not torch.equal(state_fresh, state_plain)


def test_checkpointed_forward_keeps_only_boundaries_and_rng_states():
    """Float32, L = 32 layers of width 64, n = 512: one activation is ``A = 4 n w`` bytes, its mask ``n w``.

    While dropout runs on a hidden output the working set is ``h`` (A), the float64 uniforms (2A) and the
    mask (A/4): ``W = 13 n w``. Plain forward, at the last hidden layer: ``L − 2`` activations and masks are
    kept, peak ``(L − 2)·5 n w + 13 n w = 163 n w``. Checkpointed (s = 6): ``⌈L/s⌉ − 1 = 5`` boundaries beside
    ``X`` plus 6 generator states, peak ``5·4 n w + 13 n w = 33 n w`` (+ the states): a ratio of 163/33 ≈ 4.9.
    """
    L, w, n, s = 32, 64, 512, 6
    params, X, _ = _net([16] + [w] * (L - 1) + [4], n=n, seed=1, dtype=np.float32)
    (_, cache), plain = peak_memory_bytes(dc.dropout_mlp_forward, params, X, 0.5, np.random.default_rng(0))
    (_, ckpt), checkpointed = peak_memory_bytes(
        dc.dropout_mlp_forward_checkpointed, params, X, 0.5, np.random.default_rng(0), s)
    rng = np.random.default_rng(3)
    states, states_bytes = peak_memory_bytes(lambda: [rng.bit_generator.state for _ in range(64)])
    per_state = states_bytes / len(states)
    assert 100 < per_state < 1024, per_state  # a few hundred bytes (measured ≈ 400–520)

    kept_plain = sum(a.nbytes for a in cache["a"][1:]) + sum(m.nbytes for m in cache["keep"])
    assert kept_plain == (L - 1) * 5 * n * w
    kept_ckpt = sum(b.nbytes for b in ckpt["boundaries"][1:])
    assert kept_ckpt == (math.ceil(L / s) - 1) * 4 * n * w
    predicted_plain = (L - 2) * 5 * n * w + 13 * n * w
    predicted_ckpt = kept_ckpt + 13 * n * w + math.ceil(L / s) * per_state
    assert abs(plain - predicted_plain) <= 0.02 * predicted_plain, (plain, predicted_plain)
    assert abs(checkpointed - predicted_ckpt) <= 0.02 * predicted_ckpt, (checkpointed, predicted_ckpt)
    assert plain / checkpointed > 4.5, (plain, checkpointed)  # predicted 163 / 33 ≈ 4.94


def _bad_cases():
    params, X, dY = _net(WIDTHS)
    rng = np.random.default_rng(0)
    _, ckpt = dc.dropout_mlp_forward_checkpointed(params, X, 0.5, np.random.default_rng(0), 2)
    return [
        (dc.dropout_mlp_forward, (params, X, 1.0, rng), ValueError, "p"),
        (dc.dropout_mlp_forward, (params, X, -0.1, rng), ValueError, "p"),
        (dc.dropout_mlp_forward, (params, X, "0.5", rng), TypeError, "p"),
        (dc.dropout_mlp_forward, (params, X, 0.5, np.random.RandomState(0)), TypeError, "rng"),
        (dc.dropout_mlp_forward_checkpointed, (params, X, 0.5, rng, 0), ValueError, "segment_size"),
        (dc.dropout_mlp_forward_checkpointed, (params, X, 0.5, rng, 7), ValueError, "segment_size"),
        (dc.dropout_mlp_forward_checkpointed, (params, X, float("nan"), rng, 2), ValueError, "p"),
        (dc.dropout_mlp_forward_checkpointed, (params, X.T.copy(), 0.5, rng, 2), ValueError, "X"),
        (dc.dropout_backward, (np.ones((2, 3)), np.ones((2, 3)), 0.5), TypeError, "keep"),
        (dc.dropout_backward, (np.ones((2, 3)), np.ones((3, 2), bool), 0.5), ValueError, "keep"),
        (dc.recompute_dropout_block, (params, np.ones((9, 4)), 0, 2, 0.5, rng), ValueError, "x_in"),
        (dc.recompute_dropout_block, (params, X, 2, 2, 0.5, rng), ValueError, "stop"),
        (dc.dropout_mlp_backward_checkpointed, (params, ckpt, dY, np.random.Generator(np.random.Philox(0))),
         ValueError, "rng"),
        (dc.dropout_mlp_backward_checkpointed, (params, {**ckpt, "rng_states": ckpt["rng_states"][:2]}, dY, rng),
         ValueError, "rng_states"),
        (dc.dropout_mlp_backward_checkpointed, (params, {k: v for k, v in ckpt.items() if k != "p"}, dY, rng),
         ValueError, "ckpt_cache"),
        (dc.dropout_mlp_backward, (params, {"p": 0.5, "a": [X], "keep": []}, dY), ValueError, "cache"),
    ]


@pytest.mark.parametrize("case", range(len(_bad_cases())))
def test_bad_input_names_the_argument(case):
    fn, args, error, argument = _bad_cases()[case]
    with pytest.raises(error, match=rf"\b{argument}\b"):
        fn(*args)


def test_replay_flag_must_be_a_bool():
    params, X, dY = _net(WIDTHS)
    rng = np.random.default_rng(0)
    _, ckpt = dc.dropout_mlp_forward_checkpointed(params, X, 0.5, rng, 2)
    with pytest.raises(TypeError, match="replay_rng_state"):
        dc.dropout_mlp_backward_checkpointed(params, ckpt, dY, rng, replay_rng_state=1)


def test_recompute_block_activations_replays_through_recompute_dropout_block_on_any_bit_generator():
    """One home: ``checkpointing.recompute_block_activations(..., dropout=...)`` is ``recompute_dropout_block``
    on a new generator set to the recorded state, whatever NumPy bit generator recorded it (Philox here)."""
    params, X, _ = _net(WIDTHS)
    rng = np.random.Generator(np.random.Philox(11))
    _, ckpt = dc.dropout_mlp_forward_checkpointed(params, X, 0.5, rng, 4)
    after = rng.bit_generator.state
    for k, (x_in, state) in enumerate(zip(ckpt["boundaries"], ckpt["rng_states"])):
        start, stop = 4 * k, min(4 * k + 4, len(params))
        mine = np.random.Generator(np.random.Philox())
        mine.bit_generator.state = state
        want = dc.recompute_dropout_block(params, x_in, start, stop, 0.5, mine)
        got = ck.recompute_block_activations(params, x_in, start, stop, dropout={"p": 0.5, "rng_state": state})
        for key in ("a", "keep"):
            for g, w in zip(got[key], want[key], strict=True):
                np.testing.assert_array_equal(g, w)
    np.testing.assert_equal(rng.bit_generator.state, after)  # the forward's generator is not read or moved


def test_generator_from_state_is_a_new_generator_in_that_state():
    rng = np.random.default_rng(5)
    rng.random(3)
    state = rng.bit_generator.state
    replay = dc.generator_from_state("s", state)
    assert replay is not rng and replay.bit_generator is not rng.bit_generator
    np.testing.assert_array_equal(replay.random(8), rng.random(8))
    with pytest.raises(ValueError, match=r"s\['bit_generator'\]"):
        dc.generator_from_state("s", {"bit_generator": "Generator"})  # a numpy.random name, not a bit generator
