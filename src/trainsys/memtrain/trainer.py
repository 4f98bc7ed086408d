r"""Module 1, Part 7, Lesson 40 — the full memory-aware training loop.

One Adam step of a deep MLP regression model, with every technique of the module switched by the
config and composed in the order a real trainer composes them:

.. code-block:: text

    batch ──shard──▶ N workers ──micro-batches──▶ checkpointed forward/backward (float16 with loss
    scaling, or float32) ──accumulate Σ over examples──▶ gradient exchange (ring all-reduce, or ZeRO's
    reduce-scatter + all-gather) ──▶ Adam on the float32 master (sharded state with ZeRO) ──▶ θ

Each worker's gradient is the sum over its examples, scaled by ``N / batch`` before the exchange, so
the mean over workers is the batch's mean gradient for any shard sizes. With float32 compute every
configuration follows the plain single-worker baseline to float rounding; float16 compute follows it
within float16's resolution. :func:`train` returns a run record: the validated config, the
seed, per-step losses, bytes communicated, the per-worker memory report and the measured peak of the
first step (of the whole simulation: every worker lives in this one process).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from trainsys._validation import require_int, require_keys, require_real
from trainsys.memtrain import zero
from trainsys.memtrain.accumulation import micro_batch_bounds
from trainsys.memtrain.checkpointing import (
    deep_mlp_backward,
    deep_mlp_forward,
    init_deep_mlp_params,
    mlp_backward_checkpointed,
    mlp_forward_checkpointed,
    validate_layer_widths,
)
from trainsys.memtrain.data_parallel import flatten_params, shard_dataset_across_workers, unflatten_params
from trainsys.memtrain.measure import peak_memory_bytes
from trainsys.memtrain.memory import memory_report
from trainsys.memtrain.mixed_precision import init_loss_scaler, update_loss_scale
from trainsys.memtrain.mlp import make_synthetic_regression_batch
from trainsys.memtrain.ring_allreduce import ring_all_reduce_mean, ring_bytes_per_worker

DEFAULTS: dict[str, Any] = {
    "layer_widths": [16, 64, 64, 64, 64, 4], "n": 512, "batch": 64, "steps": 40, "lr": 3e-3,
    "num_workers": 1, "num_micro_batches": 1, "segment_size": None, "precision": "fp32", "zero_stage": 0,
    "seed": 0, "progress": False,
}


def validate_train_config(config: Mapping | None) -> dict[str, Any]:
    """``DEFAULTS`` overridden by ``config``; every field checked, errors naming ``config['field']``."""
    config = dict(config or {})
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"config has unknown keys {unknown}; known keys are {sorted(DEFAULTS)}")
    c = {**DEFAULTS, **config}
    c["layer_widths"] = validate_layer_widths(c["layer_widths"])
    c["n"] = require_int("config['n']", c["n"], minimum=1)
    c["batch"] = require_int("config['batch']", c["batch"], minimum=1, maximum=c["n"])
    c["steps"] = require_int("config['steps']", c["steps"], minimum=1)
    c["lr"] = require_real("config['lr']", c["lr"], strictly_positive=True)
    c["num_workers"] = require_int("config['num_workers']", c["num_workers"], minimum=1, maximum=c["batch"])
    smallest_shard = c["batch"] // c["num_workers"]
    c["num_micro_batches"] = require_int("config['num_micro_batches']", c["num_micro_batches"], minimum=1,
                                         maximum=smallest_shard)
    if c["segment_size"] is not None:
        c["segment_size"] = require_int("config['segment_size']", c["segment_size"], minimum=1,
                                        maximum=len(c["layer_widths"]) - 1)
    if c["precision"] not in ("fp32", "mixed"):
        raise ValueError(f"config['precision'] must be 'fp32' or 'mixed', got {c['precision']!r}")
    if c["zero_stage"] not in (0, 1, 2, 3) or isinstance(c["zero_stage"], bool):
        raise ValueError(f"config['zero_stage'] must be one of 0, 1, 2, 3, got {c['zero_stage']!r}")
    c["seed"] = require_int("config['seed']", c["seed"], minimum=0)
    if not isinstance(c["progress"], (bool, np.bool_)):
        raise TypeError(f"config['progress'] must be True or False, got {c['progress']!r}")
    c["progress"] = bool(c["progress"])
    return c


def _layers(params: Mapping[str, np.ndarray], dtype: type) -> list[dict[str, np.ndarray]]:
    L = len(params) // 2
    return [{"W": params[f"W{l}"].astype(dtype), "b": params[f"b{l}"].astype(dtype)} for l in range(L)]


def _worker_gradient(params: dict, X: np.ndarray, Y: np.ndarray, c: dict, scale: float) -> tuple[dict, float]:
    """Σ over the worker's examples of the per-example loss gradient (float32), and Σ of the losses."""
    dtype = np.float16 if c["precision"] == "mixed" else np.float32
    layers = _layers(params, dtype)
    acc = {key: np.zeros_like(value) for key, value in params.items()}
    loss_sum = 0.0
    for start, stop in micro_batch_bounds(len(X), c["num_micro_batches"]):
        x, y = X[start:stop].astype(dtype), Y[start:stop]
        if c["segment_size"] is None:
            Y_hat, cache = deep_mlp_forward(layers, x)
        else:
            Y_hat, cache = mlp_forward_checkpointed(layers, x, c["segment_size"])
        diff = Y_hat.astype(np.float32) - y  # (rows, d_out), float32
        loss_sum += float(np.sum(diff.astype(np.float64) ** 2)) / y.shape[1]
        dY = (diff * (2.0 * scale / y.shape[1])).astype(dtype)  # gradient of scale · Σ per-example losses
        del Y_hat, diff
        grads = deep_mlp_backward(layers, cache, dY) if c["segment_size"] is None \
            else mlp_backward_checkpointed(layers, cache, dY)[0]
        for l, g in enumerate(grads):
            acc[f"W{l}"] += g["W"].astype(np.float32) / np.float32(scale)  # unscale in float32
            acc[f"b{l}"] += g["b"].astype(np.float32) / np.float32(scale)
        del cache, grads
    return acc, loss_sum


def train_step(params: dict, states: Any, scaler: dict, X: np.ndarray, Y: np.ndarray, c: dict
               ) -> tuple[dict, Any, dict, dict]:
    """One step on the batch ``(X, Y)``; returns new params, optimizer state(s), scaler and step info."""
    N, batch = c["num_workers"], len(X)
    scale = float(scaler["scale"]) if c["precision"] == "mixed" else 1.0
    worker_grads, loss_sum = [], 0.0
    for X_k, Y_k in shard_dataset_across_workers(X, Y, N):
        with np.errstate(over="ignore", invalid="ignore"):  # float16 overflow is detected below, not warned
            grads, losses = _worker_gradient(params, X_k, Y_k, c, scale)
        worker_grads.append({k: g * np.float32(N / batch) for k, g in grads.items()})  # mean over workers = ḡ
        loss_sum += losses
    finite = all(np.all(np.isfinite(g)) for grads in worker_grads for g in grads.values())
    psi = sum(p.size for p in params.values())
    sent = max(ring_bytes_per_worker(psi, N, 4)) if N > 1 else 0
    if c["precision"] == "mixed":
        scaler = update_loss_scale(scaler, not finite)
    if not finite:
        return params, states, scaler, {"loss": loss_sum / batch, "skipped": True, "bytes": sent}
    hp = {"lr": c["lr"], "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
    if c["zero_stage"] >= 1:  # reduce-scatter + sharded Adam + all-gather
        params, states = zero.zero_optimizer_step(params, worker_grads, states, hp)
    else:  # ring all-reduce, then unsharded Adam on every worker (identical: computed once here)
        flat, _ = ring_all_reduce_mean([flatten_params(g) for g in worker_grads])
        params, states = zero.adam_step(params, unflatten_params(flat[0], params), states, hp)
    return params, states, scaler, {"loss": loss_sum / batch, "skipped": False, "bytes": sent}


def train(config: Mapping | None = None) -> dict[str, Any]:
    """Train with the techniques ``config`` switches on; return the run record.

    ``config`` keys (defaults in ``DEFAULTS``): ``layer_widths``, ``n`` examples, ``batch`` per step,
    ``steps``, Adam ``lr``, ``num_workers``, ``num_micro_batches`` (per worker), ``segment_size`` (None:
    no checkpointing), ``precision`` ("fp32" | "mixed"), ``zero_stage`` (0–3; stages ≥ 1 shard Adam's
    state — the arithmetic of stages 2 and 3 is the same, only their memory differs), ``seed``,
    ``progress``. The data (seed ``seed``) and its order (one permutation per epoch, seed ``seed + 1``)
    do not depend on the techniques, so every configuration sees the same batches as the baseline.
    """
    c = validate_train_config(config)
    widths = c["layer_widths"]
    start_time = time.perf_counter()
    X, Y = make_synthetic_regression_batch(c["n"], widths[0], widths[-1], np.random.default_rng(c["seed"]))
    layers = init_deep_mlp_params(widths, np.random.default_rng(c["seed"] + 2))
    params = {f"{k}{l}": layer[k] for l, layer in enumerate(layers) for k in ("W", "b")}  # float32 master
    states = zero.init_sharded_adam_states(params, c["num_workers"]) if c["zero_stage"] >= 1 \
        else zero.init_adam_state(params)
    scaler = init_loss_scaler(init_scale=2.0**6, growth_interval=50)
    order = np.random.default_rng(c["seed"] + 1)
    batches_per_epoch = c["n"] // c["batch"]
    history: list[dict[str, Any]] = []
    peak = None
    for step in tqdm(range(c["steps"]), desc="train", disable=not c["progress"]):
        if step % batches_per_epoch == 0:
            permutation = order.permutation(c["n"])
        rows = permutation[(step % batches_per_epoch) * c["batch"]:(step % batches_per_epoch + 1) * c["batch"]]
        Xb, Yb = X[rows], Y[rows]
        if peak is None:  # measure the first step's peak allocation
            (params, states, scaler, info), peak = peak_memory_bytes(train_step, params, states, scaler, Xb, Yb, c)
        else:
            params, states, scaler, info = train_step(params, states, scaler, Xb, Yb, c)
        history.append({"step": step, **info, "scale": float(scaler["scale"]) if c["precision"] == "mixed" else 1.0})
    report_config = {k: c[k] for k in ("layer_widths", "batch", "num_micro_batches", "segment_size", "precision",
                                       "num_workers", "zero_stage")}
    return {
        "config": c,
        "seeds": {"data": c["seed"], "order": c["seed"] + 1, "init": c["seed"] + 2},
        "history": history,
        "losses": [h["loss"] for h in history],
        "bytes_communicated_per_worker": sum(h["bytes"] for h in history),
        "memory_report": memory_report(report_config),
        "measured_first_step_peak_bytes_all_workers": peak,
        "final_params": params,
        "wall_time_s": time.perf_counter() - start_time,
    }


def loss_curves_agree(run: Mapping, baseline: Mapping, rtol: float) -> float:
    """Largest relative difference between two runs' per-step losses; raises if above ``rtol``."""
    require_keys("run", run, tuple(run))
    a, b = np.asarray(run["losses"]), np.asarray(baseline["losses"])
    if a.shape != b.shape:
        raise ValueError(f"run and baseline must have the same number of steps, got {a.size} and {b.size}")
    worst = float(np.max(np.abs(a - b) / np.abs(b)))
    if worst > rtol:
        raise AssertionError(f"loss curves differ by {worst:.3g} relative (allowed {rtol:.3g})")
    return worst
