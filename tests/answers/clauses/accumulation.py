"""Witnesses for Module 1, Part 2 (gradient accumulation): one wrong answer per broken clause and case."""

from __future__ import annotations

import numpy as np

from tests.answers.clauses import existing
from trainsys.memtrain import accumulation as ref
from trainsys.memtrain.mlp import mlp_backward, mlp_forward, mse_loss_and_grad, sgd_step


def _split_with_empty_micro_batches(X, Y, num_micro_batches):
    """Allows M = 0 by returning no micro-batch (an empty step)."""
    if num_micro_batches == 0:
        return []
    return ref.split_into_micro_batches(X, Y, num_micro_batches)


def _accumulate_in_grads_dtype(acc, grads):
    """In place, but the sum is formed in the gradients' dtype: float16 + float32 rounds to float16."""
    if acc is None:
        return ref.accumulate_gradients(None, grads)
    for key in acc:
        acc[key][...] = acc[key].astype(grads[key].dtype) + grads[key]
    return acc


def _scale_promoted(acc, scale):
    """Multiplies out of place by a float64 scale: the float32 buffers become new float64 arrays."""
    ref.scale_accumulated_gradients({k: v.copy() for k, v in acc.items()}, scale)  # validation
    for key in acc:
        acc[key] = acc[key] * np.float64(scale)
    return acc


def _scale_accepting_zero(acc, scale):
    """Refuses negative scales but lets 0 through (``1 // n`` erases the gradient silently)."""
    if scale == 0:
        for key in acc:
            acc[key] *= acc[key].dtype.type(0)
        return acc
    return ref.scale_accumulated_gradients(acc, scale)


def _step_updating_params_in_place(params, X, Y, num_micro_batches, lr):
    """The right numbers, but ``params`` itself is updated and returned."""
    new_params, loss = ref.grad_accumulation_step(params, X, Y, num_micro_batches, lr)
    for key in params:
        params[key][...] = new_params[key]
    return params, loss


def _step(params, X, Y, num_micro_batches, lr, *, keep_caches=False):
    """The reference's loop, written out so that one behaviour can be changed at a time."""
    n = X.shape[0]
    acc, loss_sum, kept = None, 0.0, []
    for X_i, Y_i in ref.split_into_micro_batches(X, Y, num_micro_batches):
        Y_hat, cache = mlp_forward(params, X_i)
        loss_i, dY_hat = mse_loss_and_grad(Y_hat, Y_i)
        dY_hat *= dY_hat.dtype.type(X_i.shape[0])
        acc = ref.accumulate_gradients(acc, mlp_backward(params, cache, dY_hat))
        loss_sum += loss_i * X_i.shape[0]
        if keep_caches:
            kept.append(cache)
        del Y_hat, cache, dY_hat
    grads = ref.scale_accumulated_gradients(acc, 1.0 / n)
    return {k: params[k] - params[k].dtype.type(lr) * grads[k] for k in params}, loss_sum / n


def _step_keeping_every_cache(params, X, Y, num_micro_batches, lr):
    """One accumulator, but every micro-batch's activations are kept in a list until the step ends."""
    ref.grad_accumulation_step(params, X, Y, num_micro_batches, lr)  # the contract's refusals
    return _step(params, X, Y, num_micro_batches, lr, keep_caches=True)


def _step_accepting_negative_lr(params, X, Y, num_micro_batches, lr):
    """Checks that lr is a finite real but not its sign: a negative lr climbs the loss."""
    if isinstance(lr, bool) or not np.isfinite(lr):
        raise TypeError(f"lr must be a finite real number, got {lr!r}")
    return _step(params, X, Y, num_micro_batches, lr)


WITNESSES = {
    "split_into_micro_batches": {
        "sizes": [existing("split_into_micro_batches", "puts the whole remainder in the last micro-batch")],
        "mutation": [existing("split_into_micro_batches", "copies each micro-batch instead of slicing")],
        "failure modes": [
            existing("split_into_micro_batches", "accepts num_micro_batches=True"),
            ("num_micro_batches = 0 gives an empty list", _split_with_empty_micro_batches),
            existing("split_into_micro_batches", "checks num_micro_batches before the Y row count"),
            existing("split_into_micro_batches", "accepts integer X/Y"),
        ],
        "metric that proves it correct": [existing("split_into_micro_batches", "drops the remainder")],
    },
    "accumulate_gradients": {
        "mutation": [existing("accumulate_gradients", "acc=None returns the caller's arrays"),
                     existing("accumulate_gradients", "allocates a new dict on every call")],
        "dtype": [existing("accumulate_gradients", "acc=None upcasts float16 gradients"),
                  ("the sum formed in the gradients' dtype", _accumulate_in_grads_dtype)],
        "failure modes": [
            existing("accumulate_gradients", "extra keys in grads silently ignored"),
            existing("accumulate_gradients", "accepts integer gradient arrays"),
            existing("accumulate_gradients", "accepts a broadcastable grads shape"),
            existing("accumulate_gradients", "validates shapes while adding"),
            existing("accumulate_gradients", "acc's own arrays not checked"),
        ],
        "metric that proves it correct": [existing("accumulate_gradients", "overwrites the sum with the latest")],
    },
    "scale_accumulated_gradients": {
        "mutation": [existing("scale_accumulated_gradients", "returns a scaled copy and leaves acc unscaled"),
                     existing("scale_accumulated_gradients", "scales only the W* keys")],
        "dtype": [("acc[key] = acc[key] * np.float64(scale): each array replaced by a float64 one", _scale_promoted)],
        "failure modes": [("scale = 0 accepted", _scale_accepting_zero),
                          existing("scale_accumulated_gradients", "accepts scale=True"),
                          existing("scale_accumulated_gradients", "no dtype check on acc")],
        "metric that proves it correct": [existing("scale_accumulated_gradients", "divides by scale")],
    },
    "grad_accumulation_step": {
        "mutation": [("params updated in place and returned", _step_updating_params_in_place)],
        "memory": [existing("grad_accumulation_step", "keeps all M gradient trees"),
                   ("every micro-batch's cache kept in a list", _step_keeping_every_cache)],
        "failure modes": [("a negative lr accepted", _step_accepting_negative_lr),
                          existing("grad_accumulation_step", "accepts lr=True")],
        "metric that proves it correct": [existing("grad_accumulation_step", "mean of per-micro-batch means"),
                                          existing("grad_accumulation_step", "updates the parameters after every")],
    },
}
