r"""Module 3, Part 1 — the classifier every client and the server share.

A two-layer perceptron on ``X: (batch, d_in)``:

.. math::

    \text{logits} = \mathrm{ReLU}(X W_1^\top + b_1)\, W_2^\top + b_2,\qquad
    W_1: (d_{hidden}, d_{in}),\ W_2: (n_{classes}, d_{hidden})

as an ``nn.Sequential`` so that its state-dict keys are fixed (``"0.weight"``, ``"0.bias"``,
``"2.weight"``, ``"2.bias"``): FedAvg averages state dicts key by key, so every copy of the model
must name its tensors alike. With ``batch_norm=True`` a ``BatchNorm1d`` sits between the first
layer and the ReLU, which brings float buffers (``running_mean``, ``running_var``) and an
**integer** buffer (``num_batches_tracked``, int64) into the state dict — the case that
:func:`trainsys.fedavg.state.aggregate_weighted_average` must handle explicitly.

The paper's MNIST "2NN" has two hidden layers of 200 units (199,210 parameters); the course keeps
one hidden layer of at most 64 units so that a whole experiment runs on a laptop CPU in seconds.
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import nn

from trainsys._validation import describe, require_int

MAX_SEED = 2**63 - 1
"""The largest seed ``torch.Generator.manual_seed`` accepts on every platform."""


def require_seed(name: str, value: object) -> int:
    """Require an integer seed in ``[0, 2**63 - 1]`` (what ``torch.Generator.manual_seed`` accepts)."""
    return require_int(name, value, minimum=0, maximum=MAX_SEED)


def make_generator(seed: int) -> torch.Generator:
    """A fresh CPU ``torch.Generator`` seeded with ``seed``: the only source of torch randomness here."""
    return torch.Generator().manual_seed(seed)


def require_module(name: str, value: object) -> nn.Module:
    """Require a ``torch.nn.Module``."""
    if not isinstance(value, nn.Module):
        raise TypeError(f"{name} must be a torch.nn.Module, got {describe(value)}")
    return value


def require_lr(name: str, value: object) -> float:
    """Require a finite learning rate > 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number > 0, got {describe(value)}")
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value}")
    return value


# --- Lesson 1 --------------------------------------------------------------------------------------
def build_mlp_classifier(
    d_in: int, d_hidden: int, n_classes: int, seed: int, batch_norm: bool = False
) -> nn.Sequential:
    r"""``Linear(d_in, d_hidden) → [BatchNorm1d(d_hidden)] → ReLU → Linear(d_hidden, n_classes)``, float32, CPU.

    Maps ``X: (batch, d_in)`` float32 to ``logits: (batch, n_classes)``. Initialisation is PyTorch's
    own default for ``nn.Linear`` — every weight and bias
    :math:`\sim \mathcal U(-1/\sqrt{\text{fan\_in}},\ 1/\sqrt{\text{fan\_in}})` — but drawn from
    ``torch.Generator().manual_seed(seed)``, never from the global generator, in this order:
    first layer's weight ``(d_hidden, d_in)``, its bias ``(d_hidden,)``, second layer's weight
    ``(n_classes, d_hidden)``, its bias ``(n_classes,)``. The same seed therefore gives the same
    model in every process and lesson, and the global RNG state is left untouched.

    State-dict keys: ``0.weight, 0.bias, 2.weight, 2.bias`` without batch norm;
    ``0.weight, 0.bias, 1.weight, 1.bias, 1.running_mean, 1.running_var, 1.num_batches_tracked,
    3.weight, 3.bias`` with it (BatchNorm starts at weight 1, bias 0, mean 0, variance 1, count 0).
    Raises ``TypeError``/``ValueError`` for non-integer or non-positive sizes (``n_classes >= 2``)
    and for a seed outside ``[0, 2**63 - 1]``.
    """
    d_in = require_int("d_in", d_in, minimum=1)
    d_hidden = require_int("d_hidden", d_hidden, minimum=1)
    n_classes = require_int("n_classes", n_classes, minimum=2)
    seed = require_seed("seed", seed)
    if not isinstance(batch_norm, bool):
        raise TypeError(f"batch_norm must be a bool, got {describe(batch_norm)}")

    # skip_init: nn.Linear's own initialisation would draw from (and advance) the global generator
    first = nn.utils.skip_init(nn.Linear, d_in, d_hidden)
    last = nn.utils.skip_init(nn.Linear, d_hidden, n_classes)
    generator = make_generator(seed)
    with torch.no_grad():
        for layer in (first, last):
            bound = 1.0 / math.sqrt(layer.in_features)
            nn.init.uniform_(layer.weight, -bound, bound, generator=generator)  # (out, in)
            nn.init.uniform_(layer.bias, -bound, bound, generator=generator)  # (out,)
    middle = [nn.BatchNorm1d(d_hidden)] if batch_norm else []
    return nn.Sequential(first, *middle, nn.ReLU(), last)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable scalars (the paper's 2NN: 199,210)."""
    return sum(p.numel() for p in require_module("model", model).parameters() if p.requires_grad)


def build_deep_mlp(sizes: list[int] | tuple[int, ...], seed: int) -> nn.Sequential:
    r"""``Linear(sizes[0], sizes[1]) → ReLU → … → Linear(sizes[-2], sizes[-1])``, float32, CPU, seeded.

    The paper's MNIST **2NN** is ``build_deep_mlp((784, 200, 200, 10), seed)``: two hidden layers of 200
    ReLU units, :math:`784\cdot200 + 200 + 200\cdot200 + 200 + 200\cdot10 + 10 = 199{,}210` parameters
    (McMahan et al. 2017, Sec. 3). Initialisation as :func:`build_mlp_classifier`: PyTorch's default
    :math:`\mathcal U(\pm 1/\sqrt{\text{fan\_in}})` drawn from ``torch.Generator().manual_seed(seed)``, layer
    by layer (weight, then bias); the global generator is untouched. State-dict keys ``0.weight, 0.bias,
    2.weight, 2.bias, 4.weight, …``. Raises for fewer than two sizes, a size < 1, or a bad seed.
    """
    if not isinstance(sizes, (list, tuple)) or len(sizes) < 2:
        raise ValueError(f"sizes must list at least an input and an output size, got {describe(sizes)}")
    sizes = [require_int(f"sizes[{i}]", s, minimum=1) for i, s in enumerate(sizes)]
    generator = make_generator(require_seed("seed", seed))
    layers: list[nn.Module] = []
    for d_in, d_out in zip(sizes[:-1], sizes[1:]):
        layer = nn.utils.skip_init(nn.Linear, d_in, d_out)
        bound = 1.0 / math.sqrt(d_in)
        with torch.no_grad():
            nn.init.uniform_(layer.weight, -bound, bound, generator=generator)  # (d_out, d_in)
            nn.init.uniform_(layer.bias, -bound, bound, generator=generator)  # (d_out,)
        layers += [layer, nn.ReLU()]
    return nn.Sequential(*layers[:-1])  # no ReLU after the output layer


class NextCharacterModel(nn.Module):
    """A character model for FedAvg: ``forward(ids: (B, T) int64) -> logits: (B, T, V)``.

    Wraps the course's small GPT (:class:`trainsys.models.gpt.GPT`), whose ``forward`` returns
    ``(logits, loss)``; FedAvg's client computes its own loss from the logits (``compute_batch_loss``,
    token-level cross-entropy). Built under ``torch.random.fork_rng`` with ``torch.manual_seed(seed)`` so
    that one seed gives one model and the caller's global generator is left as it was.
    """

    def __init__(self, vocab_size: int, context: int, n_layer: int, n_embd: int, seed: int,
                 n_head: int = 4) -> None:
        super().__init__()
        from trainsys.models.gpt import GPT, GPTConfig
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(require_seed("seed", seed))
            self.gpt = GPT(GPTConfig(vocab_size=vocab_size, context=context, n_layer=n_layer, n_head=n_head,
                                     n_embd=n_embd))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.gpt(ids, check_ids=False)[0]  # (B, T, V); ids are checked by the dataset's contract

