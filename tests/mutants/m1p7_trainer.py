"""Mutants for lesson 40 (the full loop): the composition mistakes the notebook names."""

from __future__ import annotations

import numpy as np

from trainsys.memtrain import trainer as ref

REFERENCE = "trainsys.memtrain.trainer"


def _with_step(step):
    """The reference loop with its per-step function replaced (everything else unchanged)."""

    def wrong(config=None):
        original = ref.train_step
        ref.train_step = step
        try:
            return ref.train(config)
        finally:
            ref.train_step = original

    return wrong


def _equal_average_step(params, states, scaler, X, Y, c):
    """Averages the workers' MEAN gradients equally: wrong when shards are uneven."""
    N = c["num_workers"]
    original = ref._worker_gradient

    def mean_gradient(params_, X_k, Y_k, c_, scale):
        grads, losses = original(params_, X_k, Y_k, c_, scale)
        return {k: g * np.float32(len(X) / (N * len(X_k))) for k, g in grads.items()}, losses

    ref._worker_gradient = mean_gradient
    try:
        return _real_step(params, states, scaler, X, Y, c)
    finally:
        ref._worker_gradient = original


def _bytes_whole_gradient_step(params, states, scaler, X, Y, c):
    """Counts the whole gradient as sent by every worker, instead of 2(N-1)/N of it."""
    params, states, scaler, info = _real_step(params, states, scaler, X, Y, c)
    psi = sum(p.size for p in params.values())
    return params, states, scaler, {**info, "bytes": 4 * psi if c["num_workers"] > 1 else 0}


def _own_gradient_step(params, states, scaler, X, Y, c):
    """Each step uses worker 0's gradient only: no exchange at all."""
    N = c["num_workers"]
    shards = ref.shard_dataset_across_workers(X, Y, N)
    X0, Y0 = shards[0]
    return _real_step(params, states, scaler, X0, Y0, {**c, "num_workers": 1}) if N > 1 else \
        _real_step(params, states, scaler, X, Y, c)


def _report_ignores_zero(config=None):
    """The memory report of the unsharded setup, whatever the ZeRO stage."""
    run = ref.train(config)
    run["memory_report"] = ref.memory_report({**{k: run["config"][k] for k in (
        "layer_widths", "batch", "num_micro_batches", "segment_size", "precision", "num_workers")}, "zero_stage": 0})
    return run


_real_step = ref.train_step

MUTANTS = {
    "train": [
        ("averages the workers' mean gradients equally (uneven shards weighted wrong)", _with_step(_equal_average_step)),
        ("counts the whole gradient as sent by each worker", _with_step(_bytes_whole_gradient_step)),
        ("steps on worker 0's gradient only (forgets the all-reduce)", _with_step(_own_gradient_step)),
        ("memory report that ignores the ZeRO stage", _report_ignores_zero),
    ],
}
