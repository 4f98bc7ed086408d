"""The course's small GPT (trainsys.models.gpt): size formula, causality, attention vs torch's fused kernel, loss at init."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from trainsys.models import GPT, GPTConfig, causal_attention, parameter_count, small_config

U32 = 2.0**-24  # float32 unit roundoff


@pytest.mark.parametrize(
    "config",
    [small_config(65), GPTConfig(vocab_size=11, context=7, n_layer=3, n_head=2, n_embd=6)],
)
def test_gpt_parameter_count_matches_the_formula(config: GPTConfig) -> None:
    model = GPT(config)
    assert sum(p.numel() for p in model.parameters()) == parameter_count(config)


def test_gpt_small_config_is_sized_for_a_cpu() -> None:
    assert 100_000 <= parameter_count(small_config(65)) <= 1_000_000


def test_gpt_is_causal_changing_a_later_token_leaves_earlier_logits_bit_identical() -> None:
    # Masked scores are exp(-inf) = 0 exactly and 0 * v_j = 0, so rows <= t see identical summands in
    # the same order (same shapes, same kernel): equality is exact, not approximate.
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=13, context=16, n_layer=2, n_head=2, n_embd=8)
    model = GPT(config).eval()
    idx = torch.randint(0, 13, (3, 16))
    t = 6
    changed = idx.clone()
    changed[:, t + 1] = (idx[:, t + 1] + 5) % 13
    with torch.no_grad():
        before, _ = model(idx)
        after, _ = model(changed)
    assert torch.equal(before[:, : t + 1], after[:, : t + 1])
    assert not torch.allclose(before[:, t + 1], after[:, t + 1])


def test_gpt_causal_attention_equals_torch_scaled_dot_product_attention() -> None:
    torch.manual_seed(1)
    B, H, T, d = 2, 3, 37, 8
    q, k, v = (torch.randn(B, H, T, d) for _ in range(3))
    ours = causal_attention(q, k, v)
    oracle = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    # Rounding bound in float32 (u = 2^-24): a score is a length-d dot product, error <= d u sum|q||k|/sqrt(d);
    # softmax turns a score error e into a relative probability error <= 2e + 4u; the output sums T
    # products p_j v_j, adding <= T u max|v|. Total <= u max|v| (T + 2 d s_max + 4), s_max = max sum|q||k|/sqrt(d).
    s_max = float((q.abs() @ k.abs().transpose(-2, -1)).max()) / math.sqrt(d)
    atol = U32 * float(v.abs().max()) * (T + 2 * d * s_max + 4)
    torch.testing.assert_close(ours, oracle, rtol=0.0, atol=atol)


def test_gpt_loss_at_init_is_close_to_ln_vocab() -> None:
    # Weights N(0, 0.02): a logit is LN(x) . w_v with |LN(x)| = sqrt(C), so its std is ~0.02 sqrt(C) = 0.16
    # for C = 64, adding ~std^2/2 = 0.013 to ln V; the tied head lifts the input token's own logit by
    # ~0.02 C / sqrt(2) = 0.9, adding ln(1 + (e^0.9 - 1)/V) ~ 0.02. 0.1 is three times the sum.
    torch.manual_seed(2)
    V = 65
    model = GPT(small_config(V))
    idx = torch.randint(0, V, (8, 64))
    targets = torch.randint(0, V, (8, 64))
    _, loss = model(idx, targets)
    assert abs(loss.item() - math.log(V)) < 0.1


def test_gpt_rejects_bad_input_with_a_clear_message() -> None:
    model = GPT(GPTConfig(vocab_size=5, context=4, n_layer=1, n_head=1, n_embd=4))
    with pytest.raises(ValueError, match="context is 4"):
        model(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="outside"):
        model(torch.full((1, 3), 7, dtype=torch.long))
    with pytest.raises(ValueError, match="int64"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="divisible"):
        GPTConfig(vocab_size=5, context=4, n_layer=1, n_head=3, n_embd=4)
    with pytest.raises(ValueError, match="dropout"):
        GPTConfig(vocab_size=5, context=4, n_layer=1, n_head=1, n_embd=4, dropout=1.0)
