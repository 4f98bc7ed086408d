"""Mutants for Module 1, Part 2 (lessons 11–14): the accumulation mistakes the notebooks name."""

from __future__ import annotations

import numpy as np

from trainsys.memtrain import accumulation as ref
from trainsys.memtrain import mlp

REFERENCE = "trainsys.memtrain.accumulation"


def _split_remainder_last(X, Y, M):
    ref.split_into_micro_batches(X, Y, M)
    size = len(X) // M
    bounds = [(i * size, (i + 1) * size if i < M - 1 else len(X)) for i in range(M)]
    return [(X[a:b], Y[a:b]) for a, b in bounds]


def _split_drop_remainder(X, Y, M):
    ref.split_into_micro_batches(X, Y, M)
    size = len(X) // M
    return [(X[i * size:(i + 1) * size], Y[i * size:(i + 1) * size]) for i in range(M)]


def _split_copies(X, Y, M):
    return [(x.copy(), y.copy()) for x, y in ref.split_into_micro_batches(X, Y, M)]


def _acc_alias(acc, grads):
    if acc is None:
        ref.accumulate_gradients(None, grads)
        return dict(grads)
    return ref.accumulate_gradients(acc, grads)


def _acc_new_dict(acc, grads):
    if acc is None:
        return ref.accumulate_gradients(None, grads)
    ref.require_same_tree("acc", acc, "grads", grads)
    return {k: acc[k] + grads[k] for k in acc}


def _acc_overwrite(acc, grads):
    fresh = ref.accumulate_gradients(None, grads)
    if acc is None:
        return fresh
    ref.require_same_tree("acc", acc, "grads", grads)
    for k in acc:
        acc[k][...] = grads[k]
    return acc


def _scale_divide(acc, scale):
    ref.scale_accumulated_gradients({k: v.copy() for k, v in acc.items()}, scale)
    for k in acc:
        acc[k] /= scale
    return acc


def _scale_weights_only(acc, scale):
    ref.scale_accumulated_gradients({k: v.copy() for k, v in acc.items()}, scale)
    for k in ("W1", "W2"):
        acc[k] *= scale
    return acc


def _scale_new_dict(acc, scale):
    ref.scale_accumulated_gradients({k: v.copy() for k, v in acc.items()}, scale)
    return {k: v * scale for k, v in acc.items()}


def _step(variant: str):
    def wrong(params, X, Y, num_micro_batches, lr):
        ref.grad_accumulation_step(params, X, Y, num_micro_batches, lr)  # validation
        parts = ref.split_into_micro_batches(X, Y, num_micro_batches)
        n, M = len(X), len(parts)
        acc, losses, current = None, [], {k: v.copy() for k, v in params.items()}
        caches = []
        for X_i, Y_i in parts:
            Y_hat, cache = mlp.mlp_forward(current, X_i)
            loss, dY = mlp.mse_loss_and_grad(Y_hat, Y_i)
            losses.append((loss, len(X_i)))
            if variant == "keep_all":
                caches.append((cache, dY * len(X_i)))
                continue
            if variant in ("mean_of_means", "sequential"):
                g = mlp.mlp_backward(current, cache, dY)
            else:
                g = mlp.mlp_backward(current, cache, dY * len(X_i))
            if variant == "sequential":
                current = mlp.sgd_step(current, {k: v / M for k, v in g.items()}, lr)
                continue
            acc = ref.accumulate_gradients(acc, g)
        for cache, dY in caches:
            acc = ref.accumulate_gradients(acc, mlp.mlp_backward(current, cache, dY))
        if variant == "sequential":
            return current, sum(l * k for l, k in losses) / n
        scale = {"mean_of_means": 1.0 / M, "no_scale": 1.0, "keep_all": 1.0 / n}[variant]
        new = mlp.sgd_step(current, ref.scale_accumulated_gradients(acc, scale), lr)
        loss = np.mean([l for l, _ in losses]) if variant == "mean_of_means" else sum(l * k for l, k in losses) / n
        return new, float(loss)

    return wrong


MUTANTS = {
    "split_into_micro_batches": [
        ("puts the whole remainder in the last micro-batch", _split_remainder_last),
        ("drops the remainder (n mod M examples never seen)", _split_drop_remainder),
        ("copies each micro-batch instead of slicing", _split_copies),
    ],
    "accumulate_gradients": [
        ("acc=None returns the caller's arrays (aliasing)", _acc_alias),
        ("allocates a new dict on every call instead of adding in place", _acc_new_dict),
        ("overwrites the sum with the latest gradients", _acc_overwrite),
    ],
    "scale_accumulated_gradients": [
        ("divides by scale instead of multiplying", _scale_divide),
        ("scales the weights but forgets the biases", _scale_weights_only),
        ("returns a scaled copy and leaves acc unscaled", _scale_new_dict),
    ],
    "grad_accumulation_step": [
        ("mean of per-micro-batch means (the 2024 transformers bug)", _step("mean_of_means")),
        ("sums the micro-batch gradients but never scales them", _step("no_scale")),
        ("updates the parameters after every micro-batch (that is SGD on micro-batches)", _step("sequential")),
        ("runs every forward first, keeping all micro-batches' activations alive", _step("keep_all")),
    ],
}
