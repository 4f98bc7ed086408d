r"""Module 3, Part 3 — what one client does with the global model: ``E`` epochs of minibatch SGD.

Client ``k`` holds ``n_k`` examples and minimises its mean cross-entropy

.. math::

    F_k(w) = \frac{1}{n_k} \sum_{i \in P_k} \ell(w; x_i, y_i),\qquad
    \ell(w; x, y) = -\log \operatorname{softmax}(f_w(x))_y,

with plain SGD, :math:`w \leftarrow w - \eta \nabla \ell(w; b)`, on batches ``b`` of ``B`` examples,
reshuffled every epoch: :math:`u_k = E \lceil n_k / B \rceil` local updates per round (the paper's
:math:`E n_k / B`). ``B = None`` is the paper's :math:`B = \infty` (one batch of all ``n_k``
examples); with ``E = 1`` that client computes one full-batch gradient step — FedSGD.

A client keeps no state between rounds: its optimizer (with ``momentum > 0``) is created at the
start of :func:`train_client_locally` and discarded at its end.
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as F
from torch import nn

from trainsys._validation import describe, require_int
from trainsys.fedavg.data import LabelledDataset, require_dataset, require_indices
from trainsys.fedavg.model import make_generator, require_lr, require_module, require_seed

Batch = tuple[torch.Tensor, torch.Tensor]


def require_batch(name: str, value: object) -> Batch:
    """Require ``(X: (b, d_in) float, y: (b,) int64)`` with ``b >= 1`` rows in both."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"{name} must be a pair (X, y) of tensors, got {describe(value)}")
    X, y = value
    if not isinstance(X, torch.Tensor) or X.ndim != 2 or X.shape[0] == 0 \
            or not (X.is_floating_point() or X.dtype == torch.int64):
        raise ValueError(f"{name}[0] (X) must be a non-empty floating tensor of shape (batch, d_in) "
                         "(or int64 token ids (batch, context)), got "
                         f"{tuple(X.shape) if isinstance(X, torch.Tensor) else describe(X)}")
    sequence = X.dtype == torch.int64 and isinstance(y, torch.Tensor) and tuple(y.shape) == tuple(X.shape)
    if not isinstance(y, torch.Tensor) or (y.ndim != 1 and not sequence) or y.dtype != torch.int64:
        raise ValueError(f"{name}[1] (y) must be an int64 tensor of shape (batch,), got "
                         f"{(tuple(y.shape), y.dtype) if isinstance(y, torch.Tensor) else describe(y)}")
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"{name}: X has {X.shape[0]} rows but y has {y.shape[0]}; both are the batch axis")
    return X, y


def require_batch_size(name: str, value: object) -> int | None:
    """``None`` (the paper's B = ∞: one batch of everything) or an integer >= 1."""
    return None if value is None else require_int(name, value, minimum=1)


def require_momentum(name: str, value: object) -> float:
    """A heavy-ball momentum coefficient in ``[0, 1)`` (``0``: plain SGD, the paper's client)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= float(value) < 1.0:
        raise ValueError(f"{name} must be a real number in [0, 1), got {describe(value)}")
    return float(value)


# --- Lesson 7 --------------------------------------------------------------------------------------
def make_client_batches(
    dataset: LabelledDataset, indices: torch.Tensor, batch_size: int | None, seed: int
) -> list[Batch]:
    """One epoch of client batches: ``[(X_b: (b, d_in) float32, y_b: (b,) int64), ...]``.

    The client's ``indices`` (1-D int64, ``n_k`` of them) are shuffled by
    ``indices[torch.randperm(n_k, generator=torch.Generator().manual_seed(seed))]`` and cut into
    consecutive batches of ``batch_size``; the last batch holds the remainder ``n_k mod B`` when it is
    not zero (it is kept, not dropped: every example is seen once per epoch). ``batch_size=None`` or
    ``>= n_k`` gives one batch of all ``n_k`` examples (shuffled). The batches are gathered copies.
    Raises for an empty, repeated or out-of-range ``indices`` and for ``batch_size < 1``.
    """
    dataset = require_dataset("dataset", dataset)
    indices = require_indices("indices", indices, len(dataset))
    batch_size = require_batch_size("batch_size", batch_size)
    generator = make_generator(require_seed("seed", seed))
    order = indices[torch.randperm(indices.numel(), generator=generator)]  # (n_k,)
    size = indices.numel() if batch_size is None else batch_size
    return [(dataset.features[chunk], dataset.labels[chunk]) for chunk in torch.split(order, size)]


# --- Lesson 8 --------------------------------------------------------------------------------------
def compute_batch_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    r"""Mean cross-entropy of ``model`` on ``batch = (X: (b, d_in), y: (b,))``: a 0-d tensor with a graph.

    :math:`L = \frac1b \sum_i -\log\operatorname{softmax}(f(X)_i)_{y_i}` — ``F.cross_entropy`` on the raw
    logits (it applies the log-softmax itself, stably). For a character model (``X, y: (b, T)`` int64,
    logits ``(b, T, V)``) the mean runs over all ``b·T`` next-character targets. The result is differentiable (call
    ``.backward()`` on it); nothing is mutated (in training mode a BatchNorm layer updates its running
    statistics, as any forward does). Raises ``ValueError`` naming ``batch`` for malformed batches or
    labels outside ``[0, n_classes)``.
    """
    model = require_module("model", model)
    X, y = require_batch("batch", batch)
    logits = model(X)  # (b, n_classes), or (b, T, V) for a character model with y: (b, T)
    if logits.shape[:-1] != y.shape or logits.ndim != y.ndim + 1:
        raise ValueError(f"model must map (batch, d_in) to (batch, n_classes) (or token ids (batch, T) to "
                         f"(batch, T, V)), got {tuple(logits.shape)} for labels of shape {tuple(y.shape)}")
    if int(y.min()) < 0 or int(y.max()) >= logits.shape[-1]:
        raise ValueError(f"batch labels must lie in [0, {logits.shape[-1]}), got values from "
                         f"{int(y.min())} to {int(y.max())}")
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))  # () mean over every target


# --- Lesson 9 --------------------------------------------------------------------------------------
def local_sgd_step(model: nn.Module, batch: Batch, lr: float) -> float:
    r"""One plain SGD step on ``batch``, **in place**: :math:`w \leftarrow w - \eta\, \nabla_w L_{batch}(w)`.

    Clears every parameter's ``.grad`` first (``model.zero_grad(set_to_none=True)``: stale gradients
    from an earlier backward must not leak into this step), computes :func:`compute_batch_loss`,
    back-propagates, and subtracts ``lr * grad`` from every parameter that received a gradient (weights
    and biases alike, no momentum, no weight decay). Runs in the model's current mode. Mutates the
    model's parameters and their ``.grad``; returns the batch loss **before** the step, as a float.
    """
    model = require_module("model", model)
    lr = require_lr("lr", lr)
    model.zero_grad(set_to_none=True)
    loss = compute_batch_loss(model, batch)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p.add_(p.grad, alpha=-lr)
    return float(loss.detach())


# --- Lesson 10 -------------------------------------------------------------------------------------
def train_client_locally(
    model: nn.Module,
    dataset: LabelledDataset,
    indices: torch.Tensor,
    epochs: int,
    batch_size: int | None,
    lr: float,
    seed: int,
    momentum: float = 0.0,
) -> dict[str, object]:
    r"""Client training: ``epochs`` passes of minibatch SGD over the client's examples, **in place**.

    Puts ``model`` in training mode; epoch ``e`` (``0 … E-1``) uses the batches of
    :func:`make_client_batches` ``(dataset, indices, batch_size, seed + e)`` — a fresh shuffle each
    epoch. With ``momentum = 0`` (the paper) each batch is one :func:`local_sgd_step`; with
    ``momentum > 0`` a ``torch.optim.SGD(model.parameters(), lr, momentum)`` is created **for this
    call only** (clients are stateless: an optimizer carried over from another client or round would
    push this client along someone else's direction).

    Mutates ``model`` (parameters, ``.grad``, BatchNorm buffers, training mode). Returns
    ``{"epoch_losses": [E floats], "num_steps": E * ceil(n_k / B), "num_samples": n_k}`` where each
    epoch loss is the example-weighted mean of its batch losses,
    :math:`\sum_b |b| L_b / n_k` (each measured before its own step).
    Raises for ``epochs < 1``, ``batch_size < 1``, ``lr <= 0``, ``momentum`` outside ``[0, 1)``.
    """
    model = require_module("model", model)
    dataset = require_dataset("dataset", dataset)
    indices = require_indices("indices", indices, len(dataset))
    epochs = require_int("epochs", epochs, minimum=1)
    batch_size = require_batch_size("batch_size", batch_size)
    lr = require_lr("lr", lr)
    seed = require_seed("seed", seed)
    momentum = require_momentum("momentum", momentum)

    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=float(momentum)) if momentum > 0 else None
    epoch_losses, steps = [], 0
    for epoch in range(epochs):
        total = 0.0
        for batch in make_client_batches(dataset, indices, batch_size, seed + epoch):
            if optimizer is None:
                loss = local_sgd_step(model, batch, lr)
            else:
                optimizer.zero_grad(set_to_none=True)
                loss_t = compute_batch_loss(model, batch)
                loss_t.backward()
                optimizer.step()
                loss = float(loss_t.detach())
            total += loss * batch[1].shape[0]
            steps += 1
        epoch_losses.append(total / indices.numel())
    return {"epoch_losses": epoch_losses, "num_steps": steps, "num_samples": int(indices.numel())}


def local_update_count(num_samples: int, epochs: int, batch_size: int | None) -> int:
    r"""Local SGD steps of one client per round: :math:`u_k = E \lceil n_k / B \rceil` (``B = None``: ``E``)."""
    n = require_int("num_samples", num_samples, minimum=1)
    epochs = require_int("epochs", epochs, minimum=1)
    batch_size = require_batch_size("batch_size", batch_size)
    return epochs * (1 if batch_size is None else math.ceil(n / batch_size))
