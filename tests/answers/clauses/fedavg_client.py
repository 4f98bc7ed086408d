"""Witnesses for Module 3, Part 3 (local client training): one wrong answer per broken clause and case.

New witnesses are the reference with one behaviour changed: an input or a global generator touched,
a validation that misses one input or raises the wrong type, a batch that is a view of the dataset.
"""

from __future__ import annotations

import torch

from tests.answers.clauses import existing
from trainsys.fedavg import client as ref
from trainsys.fedavg.model import require_lr


# --- Lesson 7 --------------------------------------------------------------------------------------
def _batches_shuffle_indices_in_place(dataset, indices, batch_size, seed):
    """Shuffles the caller's indices in place (indices[:] = indices[perm]) and cuts them: the right batches."""
    batches = ref.make_client_batches(dataset, indices, batch_size, seed)
    g = torch.Generator().manual_seed(seed)
    indices[:] = indices[torch.randperm(indices.numel(), generator=g)]
    return batches


def _batches_sliced_single_rows(dataset, indices, batch_size, seed):
    """For B = 1 each batch is the slice features[i:i+1] (no gather): a view of the dataset."""
    batches = ref.make_client_batches(dataset, indices, batch_size, seed)
    if batch_size != 1:
        return batches
    order = indices[torch.randperm(indices.numel(), generator=torch.Generator().manual_seed(seed))]
    return [(dataset.features[i:i + 1], dataset.labels[i:i + 1]) for i in order.tolist()]


def _batches_zero_batch_size_to_torch(dataset, indices, batch_size, seed):
    """No check on batch_size >= 1: torch.split(order, 0) refuses it with a RuntimeError naming nothing."""
    if type(batch_size) is int and batch_size < 1:
        order = indices[torch.randperm(indices.numel(), generator=torch.Generator().manual_seed(seed))]
        return [(dataset.features[c], dataset.labels[c]) for c in torch.split(order, batch_size)]
    return ref.make_client_batches(dataset, indices, batch_size, seed)


def _batches_repeats_ok(dataset, indices, batch_size, seed):
    """Checks dtype, emptiness and range but not repeats: a repeated example is served twice."""
    if isinstance(indices, torch.Tensor) and indices.ndim == 1 and indices.numel() != torch.unique(indices).numel():
        order = indices[torch.randperm(indices.numel(), generator=torch.Generator().manual_seed(seed))]
        size = indices.numel() if batch_size is None else batch_size
        return [(dataset.features[c], dataset.labels[c]) for c in torch.split(order, size)]
    return ref.make_client_batches(dataset, indices, batch_size, seed)


def _batches_flatten_2d(dataset, indices, batch_size, seed):
    """(n_k, 1) indices flattened instead of refused (the contract: not 1-D is a TypeError)."""
    if isinstance(indices, torch.Tensor) and indices.ndim == 2:
        indices = indices.flatten()
    return ref.make_client_batches(dataset, indices, batch_size, seed)


# --- Lesson 8 --------------------------------------------------------------------------------------
def _loss_backward_inside(model, batch):
    """Calls backward(retain_graph=True) 'to have the gradients ready': the model's .grad is written."""
    loss = ref.compute_batch_loss(model, batch)
    loss.backward(retain_graph=True)
    return loss


def _loss_value_error_for_model(model, batch):
    """ValueError 'model must be an nn.Module' (the contract: TypeError)."""
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return ref.compute_batch_loss(model, batch)


# --- Lesson 9 --------------------------------------------------------------------------------------
def _step_two_forwards(model, batch, lr):
    """Reports the loss from one forward pass and back-propagates a second one: BatchNorm statistics move twice."""
    lr = require_lr("lr", lr)
    with torch.no_grad():
        value = float(ref.compute_batch_loss(model, batch))
    model.zero_grad(set_to_none=True)
    ref.compute_batch_loss(model, batch).backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p.add_(p.grad, alpha=-lr)
    return value


def _step_model_unchecked(model, batch, lr):
    """Clears .grad through model.parameters() before any model check: a function raises AttributeError."""
    lr = require_lr("lr", lr)
    for p in model.parameters():
        p.grad = None
    return ref.local_sgd_step(model, batch, lr)


def _step_force_train_plain(model, batch, lr):
    """model.train() before the step, never restored: on a model without BatchNorm only the mode shows it."""
    model.train()
    return ref.local_sgd_step(model, batch, lr)


# --- Lesson 10 -------------------------------------------------------------------------------------
def _train_global_seed(model, dataset, indices, epochs, batch_size, lr, seed, momentum=0.0):
    """torch.manual_seed(seed) at the start 'for reproducibility': the right training, the global generator re-seeded."""
    result = ref.train_client_locally(model, dataset, indices, epochs, batch_size, lr, seed, momentum)
    torch.manual_seed(seed)
    return result


WITNESSES = {
    "make_client_batches": {
        "mutation": [
            existing("make_client_batches", "shuffles with torch's global generator"),
            existing("make_client_batches", "torch.randperm without generator"),
            ("the caller's indices shuffled in place", _batches_shuffle_indices_in_place),
            ("B = 1 batches sliced from the dataset (views)", _batches_sliced_single_rows),
        ],
        "failure modes": [
            ("batch_size = 0 left to torch.split", _batches_zero_batch_size_to_torch),
            existing("make_client_batches", "int32 indices accepted"),
            existing("make_client_batches", "negative indices wrap around"),
            ("repeated indices accepted", _batches_repeats_ok),
            ("(n_k, 1) indices flattened", _batches_flatten_2d),
            existing("make_client_batches", "batch_size=True accepted as 1"),
            existing("make_client_batches", "batch_size=3.0 accepted"),
            existing("make_client_batches", "no seed range check"),
            existing("make_client_batches", "dataset type not checked"),
        ],
        "metric that proves it correct": [
            existing("make_client_batches", "drops the last, short batch"),
            existing("make_client_batches", "drops the short last batch"),
            existing("make_client_batches", "no shuffle: batches in index order"),
            existing("make_client_batches", "samples batches with replacement"),
            existing("make_client_batches", "sampling with replacement"),
            existing("make_client_batches", "sorts indices before the permutation"),
            existing("make_client_batches", "B >= n_k or None: one batch in the given order"),
        ],
    },
    "compute_batch_loss": {
        "mutation": [
            existing("compute_batch_loss", "model.eval() before the forward"),
            existing("compute_batch_loss", "extra no_grad forward to learn C"),
            ("backward(retain_graph=True) inside", _loss_backward_inside),
        ],
        "failure modes": [
            existing("compute_batch_loss", "a [X, y] list refused"),
            existing("compute_batch_loss", "any callable accepted as model"),
            ("ValueError for a non-module model", _loss_value_error_for_model),
            existing("compute_batch_loss", "negative labels not refused"),
            existing("compute_batch_loss", "int32 labels cast"),
            existing("compute_batch_loss", "empty batch gives NaN"),
            existing("compute_batch_loss", "(X, y, extra) accepted"),
            existing("compute_batch_loss", "(b, 1) labels squeezed"),
        ],
        "metric that proves it correct": [
            existing("compute_batch_loss", "sums the per-example losses"),
            existing("compute_batch_loss", "reduction='sum'"),
            existing("compute_batch_loss", "applies softmax before cross_entropy"),
            existing("compute_batch_loss", "softmax before F.cross_entropy"),
            existing("compute_batch_loss", "nll_loss on raw logits"),
            existing("compute_batch_loss", "naive exp/sum softmax"),
            existing("compute_batch_loss", "returns loss.item(): no graph"),
            existing("compute_batch_loss", "returns loss.item() ('0-d"),
            existing("compute_batch_loss", "returns loss.detach()"),
            existing("compute_batch_loss", "loss returned in float64"),
        ],
    },
    "local_sgd_step": {
        "mutation": [
            existing("local_sgd_step", "updates the weights but not the biases"),
            existing("local_sgd_step", "updates weights only"),
            existing("local_sgd_step", "torch.autograd.grad: .grad not replaced"),
            existing("local_sgd_step", "clears .grad after the step"),
            existing("local_sgd_step", "never clears .grad ('each .grad"),
            existing("local_sgd_step", "forces model.train()"),
            ("model.train() on a model without BatchNorm", _step_force_train_plain),
            existing("local_sgd_step", "assumes every parameter has a .grad"),
            ("two forward passes: BatchNorm statistics updated twice", _step_two_forwards),
        ],
        "failure modes": [
            existing("local_sgd_step", "clears .grad before validating lr"),
            existing("local_sgd_step", "lr=True accepted"),
            existing("local_sgd_step", "lr=inf accepted"),
            ("a non-module model raises AttributeError", _step_model_unchecked),
        ],
        "metric that proves it correct": [
            existing("local_sgd_step", "gradient ascent: w + lr * grad"),
            existing("local_sgd_step", "gradient ascent ('theta"),
            existing("local_sgd_step", "returns the loss after the update ('L_b"),
            existing("local_sgd_step", "never clears .grad: gradients accumulate"),
        ],
    },
    "train_client_locally": {
        "mutation": [
            ("torch.manual_seed(seed) at the start", _train_global_seed),
            existing("train_client_locally", "reuses one optimizer across calls"),
            existing("train_client_locally", "one optimizer kept across calls"),
            existing("train_client_locally", "restores the caller's mode after training"),
        ],
        "failure modes": [
            existing("train_client_locally", "model.train() before validation"),
            existing("train_client_locally", "epochs=True accepted"),
            existing("train_client_locally", "NaN momentum passes"),
            existing("train_client_locally", "negative momentum accepted"),
            existing("train_client_locally", "lr not validated here"),
        ],
        "metric that proves it correct": [
            existing("train_client_locally", "one epoch whatever E says"),
            existing("train_client_locally", "one epoch whatever E ('E"),
            existing("train_client_locally", "the same shuffle every epoch"),
            existing("train_client_locally", "same shuffle every epoch ('epoch"),
            existing("train_client_locally", "trains on the whole dataset"),
            existing("train_client_locally", "trains on torch.arange(n)"),
            existing("train_client_locally", "epoch loss = mean of batch means (a short"),
            existing("train_client_locally", "epoch loss = mean of batch means ('per-epoch"),
            existing("train_client_locally", "a new optimizer every epoch"),
            existing("train_client_locally", "momentum path zero_grads after the step"),
            existing("train_client_locally", "momentum path reports the loss after each step"),
        ],
    },
}
