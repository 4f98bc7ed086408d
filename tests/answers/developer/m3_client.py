"""Mutants for Module 3, Part 3 (lessons 7–10: local client training): the mistakes the notebooks name."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from trainsys.fedavg import client as ref

REFERENCE = "trainsys.fedavg.client"


def _batches(variant: str):
    def wrong(dataset, indices, batch_size, seed):
        ref.make_client_batches(dataset, indices, batch_size, seed)  # validation
        n = indices.numel()
        size = n if batch_size is None else batch_size
        if variant == "no_shuffle":
            order = indices
        elif variant == "global_rng":
            order = indices[torch.randperm(n)]
        elif variant == "with_replacement":
            order = indices[torch.randint(0, n, (n,), generator=torch.Generator().manual_seed(seed))]
        else:
            order = indices[torch.randperm(n, generator=torch.Generator().manual_seed(seed))]
        chunks = list(torch.split(order, size))
        if variant == "drop_last" and len(chunks) > 1 and chunks[-1].numel() < size:
            chunks = chunks[:-1]
        return [(dataset.features[c], dataset.labels[c]) for c in chunks]

    return wrong


def _loss(variant: str):
    def wrong(model, batch):
        ref.compute_batch_loss(model, batch)  # validation
        X, y = batch
        logits = model(X)
        if variant == "sum":
            return F.cross_entropy(logits, y, reduction="sum")
        if variant == "double_softmax":
            return F.cross_entropy(torch.softmax(logits, dim=1), y)
        if variant == "item":
            return F.cross_entropy(logits, y).item()
        return F.nll_loss(logits, y)  # forgets the log-softmax

    return wrong


def _step(variant: str):
    def wrong(model, batch, lr):
        ref.require_lr("lr", lr)
        if variant != "no_zero_grad":
            model.zero_grad(set_to_none=True)
        loss = ref.compute_batch_loss(model, batch)
        loss.backward()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if variant == "weights_only" and not name.endswith("weight"):
                    continue
                p.add_(p.grad, alpha=lr if variant == "ascent" else -lr)
        if variant == "loss_after":
            with torch.no_grad():
                return float(ref.compute_batch_loss(model, batch))
        return loss.item()

    return wrong


_SHARED_OPTIMIZER: list = []


def _train(variant: str):
    def wrong(model, dataset, indices, epochs, batch_size, lr, seed, momentum=0.0):
        model.train()
        if variant == "shared_optimizer":
            if not _SHARED_OPTIMIZER:  # created once, on the first model it ever saw
                _SHARED_OPTIMIZER.append(torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum))
            opt = _SHARED_OPTIMIZER[0]
        else:
            opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
        data_idx = torch.arange(len(dataset)) if variant == "all_data" else indices
        losses, steps = [], 0
        for epoch in range(1 if variant == "one_epoch" else epochs):
            total, means = 0.0, []
            epoch_seed = seed if variant == "same_shuffle" else seed + epoch
            for X, y in ref.make_client_batches(dataset, data_idx, batch_size, epoch_seed):
                opt.zero_grad(set_to_none=True)
                loss = ref.compute_batch_loss(model, (X, y))
                loss.backward()
                opt.step()
                total += loss.item() * len(y)
                means.append(loss.item())
                steps += 1
            losses.append(sum(means) / len(means) if variant == "mean_of_means" else total / data_idx.numel())
        return {"epoch_losses": losses, "num_steps": steps, "num_samples": int(indices.numel())}

    return wrong


MUTANTS = {
    "make_client_batches": [
        ("drops the last, short batch", _batches("drop_last")),
        ("no shuffle: batches in index order", _batches("no_shuffle")),
        ("shuffles with torch's global generator", _batches("global_rng")),
        ("samples batches with replacement", _batches("with_replacement")),
    ],
    "compute_batch_loss": [
        ("sums the per-example losses instead of averaging", _loss("sum")),
        ("applies softmax before cross_entropy (a double softmax)", _loss("double_softmax")),
        ("returns loss.item(): no graph to differentiate", _loss("item")),
        ("nll_loss on raw logits (no log-softmax)", _loss("nll_on_logits")),
    ],
    "local_sgd_step": [
        ("never clears .grad: gradients accumulate across steps", _step("no_zero_grad")),
        ("gradient ascent: w + lr * grad", _step("ascent")),
        ("returns the loss after the update", _step("loss_after")),
        ("updates the weights but not the biases", _step("weights_only")),
    ],
    "train_client_locally": [
        ("one epoch whatever E says", _train("one_epoch")),
        ("the same shuffle every epoch (seed not advanced)", _train("same_shuffle")),
        ("trains on the whole dataset, not the client's indices", _train("all_data")),
        ("reuses one optimizer across calls (bound to the first model, its momentum carried over)",
         _train("shared_optimizer")),
        ("epoch loss = mean of batch means (a short last batch weighs too much)", _train("mean_of_means")),
    ],
}
