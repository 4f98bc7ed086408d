r"""A small character-level GPT, written out for the course in plain ``torch.nn``.

The model of Modules 1 and 2 when the data is text: token and position embeddings, ``n_layer``
pre-norm blocks (``x + Attn(LN(x))`` then ``x + MLP(LN(x))``), a final LayerNorm and an output head
that shares its weight with the token embedding (tied, Press & Wolf 2017). Sized for two CPU cores:
the default :class:`GPTConfig` of :func:`small_config` has about 0.1 M parameters.

Causal self-attention is written out, not delegated to ``F.scaled_dot_product_attention``:

.. math::

    S = \frac{Q K^\top}{\sqrt{d_h}} + M,\qquad P = \mathrm{softmax}(S),\qquad Y = \mathrm{dropout}(P)\, V,

with :math:`M_{ij} = -\infty` for :math:`j > i`. Autograd therefore saves exactly the tensors the
course's memory formulas count — :math:`Q, K, V`, the ``(B, n_head, T, T)`` probabilities :math:`P`
(and the dropout mask when ``dropout > 0``) — whereas the fused kernel saves only ``Q, K, V``, the
output and a ``(B, n_head, T)`` log-sum-exp and recomputes :math:`P` in the backward pass.

Parameters (``C = n_embd``, ``V = vocab_size``, ``T = context``, ``L = n_layer``; every Linear and
LayerNorm has a bias): :math:`VC + TC + L(12C^2 + 13C) + 2C` — see :func:`parameter_count`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from trainsys._validation import describe, require_int, require_real


@dataclass(frozen=True)
class GPTConfig:
    """Shape of a :class:`GPT`: vocabulary, context length ``T``, depth, heads, width ``C``, dropout.

    Raises ``TypeError``/``ValueError`` naming the field when a size is not a positive integer,
    ``n_embd`` is not divisible by ``n_head``, or ``dropout`` is outside ``[0, 1)``.
    """

    vocab_size: int
    context: int
    n_layer: int
    n_head: int
    n_embd: int
    dropout: float = 0.0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "context", "n_layer", "n_head", "n_embd"):
            require_int(f"GPTConfig.{name}", getattr(self, name), minimum=1)
        if self.n_embd % self.n_head != 0:
            raise ValueError(
                f"GPTConfig.n_embd must be divisible by n_head (each head gets n_embd // n_head channels), "
                f"got n_embd={self.n_embd}, n_head={self.n_head}"
            )
        dropout = require_real("GPTConfig.dropout", self.dropout, minimum=0.0)
        if dropout >= 1.0:
            raise ValueError(f"GPTConfig.dropout must be in [0, 1), got {dropout}")


def small_config(vocab_size: int, *, context: int = 64) -> GPTConfig:
    """The course's CPU-sized model: 2 layers, 4 heads, width 64 (≈ 0.1 M parameters for ~65 characters)."""
    return GPTConfig(vocab_size=vocab_size, context=context, n_layer=2, n_head=4, n_embd=64)


def parameter_count(config: GPTConfig) -> int:
    r"""Number of trainable parameters, :math:`VC + TC + L(12C^2 + 13C) + 2C` (tied head adds none).

    Per block: two LayerNorms (``4C``), the ``q, k, v`` and output projections (``4C^2 + 4C``) and
    the MLP ``C -> 4C -> C`` (``8C^2 + 5C``).
    """
    if not isinstance(config, GPTConfig):
        raise TypeError(f"config must be a GPTConfig, got {describe(config)}")
    V, T, L, C = config.vocab_size, config.context, config.n_layer, config.n_embd
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C


def causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, dropout: float = 0.0, training: bool = False
) -> torch.Tensor:
    r"""Masked softmax attention, :math:`\mathrm{dropout}(\mathrm{softmax}(QK^\top/\sqrt{d_h} + M))\,V`.

    ``q, k, v``: ``(B, n_head, T, d_h)`` float tensors of one shape; returns ``(B, n_head, T, d_h)``.
    Position ``i`` attends to positions ``j <= i`` only. Equals
    ``F.scaled_dot_product_attention(q, k, v, is_causal=True)`` up to rounding when ``dropout == 0``.
    """
    if q.dim() != 4 or q.shape != k.shape or q.shape != v.shape:
        raise ValueError(
            f"q, k, v must share one shape (B, n_head, T, d_h), got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    T, d_h = q.shape[-2], q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)  # (B, nh, T, T)
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)  # (T, T), True above the diagonal
    scores = scores.masked_fill(future, float("-inf"))  # (B, nh, T, T)
    probs = torch.softmax(scores, dim=-1)  # (B, nh, T, T)
    probs = F.dropout(probs, p=dropout, training=training)  # (B, nh, T, T)
    return probs @ v  # (B, nh, T, d_h)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention: separate ``q, k, v`` projections, :func:`causal_attention`, output projection."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        C = config.n_embd
        self.n_head = config.n_head
        self.dropout = config.dropout
        self.query = nn.Linear(C, C)
        self.key = nn.Linear(C, C)
        self.value = nn.Linear(C, C)
        self.proj = nn.Linear(C, C)
        self.resid_dropout = nn.Dropout(config.dropout)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, C) -> (B, n_head, T, C // n_head)``."""
        B, T, C = x.shape
        return x.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``(B, T, C)`` -> ``(B, T, C)``."""
        B, T, C = x.shape
        q = self.split_heads(self.query(x))  # (B, nh, T, hs)
        k = self.split_heads(self.key(x))  # (B, nh, T, hs)
        v = self.split_heads(self.value(x))  # (B, nh, T, hs)
        y = causal_attention(q, k, v, dropout=self.dropout, training=self.training)  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C), heads side by side
        return self.resid_dropout(self.proj(y))  # (B, T, C)


class MLP(nn.Module):
    """Position-wise ``C -> 4C -> GELU -> C``."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        C = config.n_embd
        self.fc = nn.Linear(C, 4 * C)
        self.proj = nn.Linear(4 * C, C)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``(B, T, C)`` -> ``(B, T, C)``."""
        h = F.gelu(self.fc(x))  # (B, T, 4C)
        return self.dropout(self.proj(h))  # (B, T, C)


class Block(nn.Module):
    """Pre-norm transformer block: ``x + Attn(LN1(x))``, then ``x + MLP(LN2(x))``."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``(B, T, C)`` -> ``(B, T, C)``."""
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Character-level GPT; ``forward(idx, targets=None) -> (logits, loss)``.

    Initialisation (GPT-2's): weights ``N(0, 0.02)``, the residual output projections ``N(0, 0.02/sqrt(2L))``,
    biases zero, LayerNorm ``(1, 0)``; logits are then small and the loss at init is close to ``ln V``.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise TypeError(f"config must be a GPTConfig, got {describe(config)}")
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.n_embd)
        self.position_embedding = nn.Embedding(config.context, config.n_embd)
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.apply(self._init_weights)
        for block in self.blocks:
            for proj in (block.attn.proj, block.mlp.proj):
                nn.init.normal_(proj.weight, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None, *, check_ids: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``idx``: ``(B, T)`` int64 token ids with ``T <= context``; ``targets``: ``(B, T)`` ids or ``None``.

        Returns ``logits`` ``(B, T, V)`` float32 and the mean cross-entropy over all ``B·T`` positions
        (``None`` without targets). Raises ``ValueError`` on a wrong rank, a too-long sequence, ids
        outside ``[0, V)`` or targets of another shape. ``check_ids=False`` skips the id range check, a
        data-dependent branch that ``torch.func.vmap`` cannot trace; the caller then guarantees the range.
        """
        if not isinstance(idx, torch.Tensor) or idx.dim() != 2 or idx.dtype != torch.long:
            raise ValueError(f"idx must be a (B, T) int64 tensor of token ids, got {_tensor_desc(idx)}")
        B, T = idx.shape
        if T > self.config.context:
            raise ValueError(f"idx has T={T} positions but the model's context is {self.config.context}")
        if check_ids and idx.numel() and not bool(((idx >= 0) & (idx < self.config.vocab_size)).all()):
            raise ValueError(f"idx holds ids outside [0, {self.config.vocab_size})")
        positions = torch.arange(T, device=idx.device)  # (T,)
        x = self.token_embedding(idx) + self.position_embedding(positions)  # (B, T, C)
        x = self.dropout(x)  # (B, T, C)
        for block in self.blocks:
            x = block(x)  # (B, T, C)
        x = self.ln_f(x)  # (B, T, C)
        logits = x @ self.token_embedding.weight.T  # (B, T, V), the head tied to the embedding
        if targets is None:
            return logits, None
        if not isinstance(targets, torch.Tensor) or tuple(targets.shape) != (B, T):
            raise ValueError(f"targets must be a ({B}, {T}) int64 tensor like idx, got {_tensor_desc(targets)}")
        loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))  # (), mean over B·T
        return logits, loss


def _tensor_desc(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    return describe(value)
