"""Mutants for lesson 40 (the full loop): the composition mistakes the notebook names."""

from __future__ import annotations

import time

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


def _equal_average_step(params, states, scaler, X, Y, c, lr):
    """Averages the workers' MEAN gradients equally: wrong when shards are uneven."""
    N = c["num_workers"]
    original = ref._worker_gradient

    def mean_gradient(params_, X_k, Y_k, c_, scale, exchange=None):
        if exchange is not None:  # stages 2-3: each contribution weighted by batch / (N n_k) more
            factor = exchange.factor
            exchange.factor = np.float32(factor * len(X) / (N * len(X_k)))
            try:
                return original(params_, X_k, Y_k, c_, scale, exchange)
            finally:
                exchange.factor = factor
        grads, losses = original(params_, X_k, Y_k, c_, scale)
        return {k: g * np.float32(len(X) / (N * len(X_k))) for k, g in grads.items()}, losses

    ref._worker_gradient = mean_gradient
    try:
        return _real_step(params, states, scaler, X, Y, c, lr)
    finally:
        ref._worker_gradient = original


def _bytes_whole_gradient_step(params, states, scaler, X, Y, c, lr):
    """Counts the whole gradient as sent by every worker, instead of 2(N-1)/N of it."""
    params, states, scaler, info = _real_step(params, states, scaler, X, Y, c, lr)
    psi = sum(p.size for p in params.values())
    return params, states, scaler, {**info, "bytes": 4 * psi if c["num_workers"] > 1 else 0}


def _stage_bytes_step(rule):
    """The reference step with the bytes of stages 2 and 3 counted by a wrong ``rule(info, c, psi, s)``."""

    def step(params, states, scaler, X, Y, c, lr):
        params_, states_, scaler_, info = _real_step(params, states, scaler, X, Y, c, lr)
        if c["zero_stage"] >= 2:
            psi = sum(p.size for p in params.values())
            info = {**info, "bytes": rule(info, c, psi, -(-psi // c["num_workers"]))}
        return params_, states_, scaler_, info

    return step


def _ring_bytes(info, c, psi, s):
    """ZeRO-2 and -3 billed as the ring: stage 3's gathers forgotten."""
    return max(ref.ring_bytes_per_worker(psi, c["num_workers"], 4)) if c["num_workers"] > 1 else 0


def _reduced_once(info, c, psi, s):
    """Stages 2-3 bill one reduce-scatter per step, as if a full gradient were accumulated over the micro-batches
    (stage 2: 2(N-1)s, stage 3: (2M+1)(N-1)s): the gradient is sharded, so every micro-batch reduce-scatters."""
    N, M = c["num_workers"], c["num_micro_batches"]
    return ((2 * M + 1) if c["zero_stage"] == 3 else (1 if info["skipped"] else 2)) * (N - 1) * s * 4


def _gathers_once(info, c, psi, s):
    """Stage 3 gathers the layers once per step for the forward and once for the backward, whatever M."""
    N, M = c["num_workers"], c["num_micro_batches"]
    return ((M + 2) if c["zero_stage"] == 3 else (M if info["skipped"] else M + 1)) * (N - 1) * s * 4


def _all_gather_when_skipped(info, c, psi, s):
    """Stage 2 bills its all-gather on a skipped step too."""
    N, M = c["num_workers"], c["num_micro_batches"]
    return (3 * M if c["zero_stage"] == 3 else M + 1) * (N - 1) * s * 4


def _own_gradient_step(params, states, scaler, X, Y, c, lr):
    """Each step uses worker 0's gradient only: no exchange at all."""
    N = c["num_workers"]
    shards = ref.shard_dataset_across_workers(X, Y, N)
    X0, Y0 = shards[0]
    return _real_step(params, states, scaler, X0, Y0, {**c, "num_workers": 1}, lr) if N > 1 else \
        _real_step(params, states, scaler, X, Y, c, lr)


def _report_ignores_zero(config=None):
    """The memory report of the unsharded setup, whatever the ZeRO stage."""
    run = ref.train(config)
    run["memory_report"] = ref.memory_report({**{k: run["config"][k] for k in (
        "layer_widths", "batch", "num_micro_batches", "segment_size", "precision", "num_workers")}, "zero_stage": 0})
    return run


_real_step = ref.train_step


def _loop(*, lower_lr=True, restore=True, stop=True, against="smallest", snapshot="current", skip_is_bad=False,
          restore_states=True, restore_scaler=True, throughput_steps="run", peaks="list"):
    """The reference loop (``ref.train``'s, written out) with one of its rollback or metric rules changed."""

    def wrong(config=None):
        c = ref.validate_train_config(config)
        w = c["layer_widths"]
        X, Y = ref.make_synthetic_regression_batch(c["n"], w[0], w[-1], np.random.default_rng(c["seed"]))
        layers = ref.init_deep_mlp_params(w, np.random.default_rng(c["seed"] + 2))
        params = {f"{k}{l}": layer[k] for l, layer in enumerate(layers) for k in ("W", "b")}
        states = ref.zero.init_sharded_adam_states(params, c["num_workers"]) if c["zero_stage"] >= 1 \
            else ref.zero.init_adam_state(params)
        scaler = ref.init_loss_scaler(init_scale=2.0**6, growth_interval=50)
        order = np.random.default_rng(c["seed"] + 1)
        per_epoch = c["n"] // c["batch"]
        history, rollbacks, stopped, peak, worker_peaks = [], [], None, None, None
        lr, smallest, last = c["lr"], np.inf, np.inf
        last_good = previous_good = (params, states, scaler)
        for step in range(c["steps"]):
            if step % per_epoch == 0:
                permutation = order.permutation(c["n"])
            rows = permutation[(step % per_epoch) * c["batch"]:(step % per_epoch + 1) * c["batch"]]
            Xb, Yb = X[rows], Y[rows]
            if peak is None:
                worker_peaks = ref._worker_peaks(params, states, scaler, Xb, Yb, c)
                tic = time.perf_counter()
                (new_params, new_states, new_scaler, info), peak = ref.peak_memory_bytes(
                    ref.train_step, params, states, scaler, Xb, Yb, c, lr)
                if peaks == "one number":
                    worker_peaks = max(worker_peaks)
            else:
                tic = time.perf_counter()
                new_params, new_states, new_scaler, info = ref.train_step(params, states, scaler, Xb, Yb, c, lr)
            loss = info["loss"]
            base = smallest if against == "smallest" else last
            good = np.isfinite(loss) and loss <= c["explode_factor"] * base and not (skip_is_bad and info["skipped"])
            if good:
                if snapshot == "current":
                    last_good = (params, states, scaler)
                else:  # one good step behind
                    last_good, previous_good = previous_good, (params, states, scaler)
                smallest, last = min(smallest, loss), loss
                params, states, scaler = new_params, new_states, new_scaler
            else:
                if restore:
                    params = last_good[0]
                    states = last_good[1] if restore_states else new_states
                    scaler = last_good[2] if restore_scaler else new_scaler
                else:
                    params, states, scaler = new_params, new_states, new_scaler
                reason = "non-finite loss" if not np.isfinite(loss) else "exploding loss"
                if stop and len(rollbacks) == c["max_retries"]:
                    stopped = f"stopped at step {step}: {reason}"
                else:
                    lr = lr * c["lr_backoff"] if lower_lr else lr
                    rollbacks.append({"step": step, "reason": reason, "lr": lr})
            history.append({"step": step, **info, "scale": float(scaler["scale"]) if c["precision"] == "mixed"
                            else 1.0, "seconds": time.perf_counter() - tic})
            if stopped is not None:
                break
        examples = c["batch"] * (len(history) if throughput_steps == "run" else c["steps"])
        report = {k: c[k] for k in ("layer_widths", "batch", "num_micro_batches", "segment_size", "precision",
                                    "num_workers", "zero_stage")}
        return {"config": c, "seeds": {"data": c["seed"], "order": c["seed"] + 1, "init": c["seed"] + 2},
                "history": history, "losses": [h["loss"] for h in history],
                "bytes_communicated_per_worker": sum(h["bytes"] for h in history),
                "memory_report": ref.memory_report(report), "measured_first_step_peak_bytes_all_workers": peak,
                "measured_peak_bytes_per_worker": worker_peaks,
                "examples_per_second": examples / sum(h["seconds"] for h in history),
                "rollbacks": rollbacks, "stopped": stopped, "final_params": params, "wall_time_s": 1.0}

    return wrong


def _seconds_missing(config=None):
    """Right run, but the history entries carry no wall time."""
    run = ref.train(config)
    for h in run["history"]:
        del h["seconds"]
    return run

MUTANTS = {
    "train": [
        ("averages the workers' mean gradients equally (uneven shards weighted wrong)", _with_step(_equal_average_step)),
        ("counts the whole gradient as sent by each worker", _with_step(_bytes_whole_gradient_step)),
        ("bills ZeRO-2 and -3 as the ring (stage 3's parameter gathers forgotten)", _with_step(_stage_bytes_step(_ring_bytes))),
        ("ZeRO-3 gathers once per step, not before every micro-batch", _with_step(_stage_bytes_step(_gathers_once))),
        ("ZeRO-2/3 reduce-scatter once per step, not after every micro-batch",
         _with_step(_stage_bytes_step(_reduced_once))),
        ("ZeRO-2 bills the all-gather on a skipped step", _with_step(_stage_bytes_step(_all_gather_when_skipped))),
        ("steps on worker 0's gradient only (forgets the all-reduce)", _with_step(_own_gradient_step)),
        ("memory report that ignores the ZeRO stage", _report_ignores_zero),
        ("rolls back but does not lower the learning rate", _loop(lower_lr=False)),
        ("lowers the learning rate without restoring the last good state", _loop(restore=False)),
        ("never stops: rolls back forever, max_retries ignored", _loop(stop=False)),
        ("judges a loss against the last loss, not the smallest", _loop(against="last")),
        ("restores the state from before the last good step (one good step behind)", _loop(snapshot="behind")),
        ("counts a float16 skip as a rollback", _loop(skip_is_bad=True)),
        ("restores the weights but keeps the bad step's Adam state", _loop(restore_states=False)),
        ("restores weights and Adam state but keeps the halved loss scale", _loop(restore_scaler=False)),
        ("throughput over the configured steps, not the steps run", _loop(throughput_steps="config")),
        ("one peak for all workers: an int, not a list of N", _loop(peaks="one number")),
        ("history entries without seconds", _seconds_missing),
    ],
}
