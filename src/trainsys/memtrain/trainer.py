r"""Module 1, Part 7, Lesson 40 — the full memory-aware training loop.

One Adam step of a deep MLP regression model, with every technique of the module switched by the
config and composed in the order a real trainer composes them:

.. code-block:: text

    batch ──shard──▶ N workers ──micro-batches──▶ checkpointed forward/backward (float16 with loss
    scaling, or float32) ──accumulate Σ over examples──▶ gradient exchange (ring all-reduce, or ZeRO's
    reduce-scatter + all-gather) ──▶ Adam on the float32 master (sharded state with ZeRO) ──▶ θ

Each worker's gradient is the sum over its examples, scaled by ``N / batch`` before the exchange, so
the mean over workers is the batch's mean gradient for any shard sizes.

**The exchange, by ZeRO stage** (Rajbhandari et al. 2020; :mod:`~trainsys.memtrain.zero_stages` derives
the byte counts). With :math:`s = \lceil\Psi/N\rceil` and float32 messages (:math:`b = 4`, also in mixed
precision: the gradients are exchanged unscaled in float32), the busiest worker sends per step

- stage 0: the ring all-reduce, ``max(ring_bytes_per_worker(Ψ, N, 4))``;
- stage 1: the same count (:func:`~trainsys.memtrain.zero.zero_optimizer_step`'s reduce-scatter and
  all-gather move what the ring moves);
- stage 2: **executed** — each layer's gradients reduce-scattered in backward order, Adam on the worker's
  shard, the new parameter shards all-gathered: :math:`2(N-1)s\,b` (a skipped step sends the
  reduce-scatter only, :math:`(N-1)s\,b`: it happens during the backward pass, before anyone knows);
- stage 3: **executed** — the parameters live only as shards; before every micro-batch's forward each
  worker all-gathers the layers, and again before its backward (recomputation included), then the
  reduce-scatter, and the updated shards stay put: :math:`(2M+1)(N-1)s\,b` with ``M`` micro-batches per
  worker, skipped or not (:math:`3(N-1)s\,b` for ``M = 1``, the paper's :math:`3\Psi`).

Stages 2 and 3 send every message through :func:`~trainsys.memtrain.zero_stages.send_message` and count
the bytes from that log. Their arithmetic is stage 1's operation for operation (reduction in worker order,
then the same Adam), so stages 1–3 give bit-identical runs. One simplification: the package's forward
takes the whole layer list, so a stage-3 worker gathers all layers before a forward (and a backward) and
frees them after it; gathering one layer at a time — the schedule whose memory is
:math:`\Psi/N` plus one layer — is :func:`~trainsys.memtrain.zero_stages.train_zero`'s, measured there. With float32 compute every
configuration follows the plain single-worker baseline to float rounding; float16 compute follows it
within float16's resolution. :func:`train` returns a run record: the validated config, the
seed, per-step losses, bytes communicated, the per-worker memory report and the measured peak of the
first step (of the whole simulation: every worker lives in this one process).

**Stop condition and rollback.** Large runs watch the loss for spikes and divergence, go back to
a state saved before the spike and go on with a lower learning rate or other data (Chowdhery et
al., 2022, PaLM, §5.1; Zhang et al., 2022, OPT, §2.5). The loop does this at every step. The loss
:math:`L_t` of step :math:`t` is measured before its update; with :math:`m_t` the smallest loss of
the steps accepted so far (:math:`m_0 = \infty`), the step is *good* when

.. math::

    L_t \text{ is finite} \quad\text{and}\quad L_t \le \kappa\, m_t \qquad (\kappa = \texttt{explode\_factor} > 1).

A good step's starting state (weights, Adam state(s), loss scaler) becomes the *last good state*
and the step proceeds; :math:`m_{t+1} = \min(m_t, L_t)`. A bad step's result is discarded: the
state becomes the last good state again (which undoes the update of the good step before, the one
that produced the bad state), :math:`\eta \leftarrow \beta\,\eta` with
:math:`\beta = \texttt{lr\_backoff} \in (0, 1)`, and the loop goes on with the next batch. After
``max_retries`` rollbacks a further bad step stops the run (weights: the last good state). Comparing
with the smallest loss, not the last one, also catches a loss that creeps up by less than
:math:`\kappa` per step. A float16 gradient overflow with a good loss stays a skipped step (the loss
scaler's business, Micikevicius et al., 2018), not a rollback. Nothing is copied for the snapshot:
every step returns new arrays and dicts (``adam_step``, ``zero_optimizer_step`` and
``update_loss_scale`` never mutate), so keeping references is enough.

**Stage metrics.** Each history entry records its wall time (``time.perf_counter``, a monotonic
clock); the record gives the throughput (examples of every step run over the sum of the step
times) and the ``tracemalloc`` peak of each worker's gradient computation in the first step,
measured one worker at a time (``peak_memory_bytes`` cannot nest, so this is a separate pass on the
first step's shards before the step itself runs). Step 0 runs under ``tracemalloc``, which traces every
allocation: its recorded time is several times the others'.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from trainsys._validation import require_int, require_keys, require_real
from trainsys.memtrain import zero
from trainsys.memtrain import zero_stages as zs
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
    "seed": 0, "progress": False, "max_retries": 3, "lr_backoff": 0.5, "explode_factor": 10.0,
}
ROLLBACK_REASONS = ("non-finite loss", "exploding loss")


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
    c["max_retries"] = require_int("config['max_retries']", c["max_retries"], minimum=0)
    c["lr_backoff"] = require_real("config['lr_backoff']", c["lr_backoff"], strictly_positive=True)
    if not c["lr_backoff"] < 1:
        raise ValueError(f"config['lr_backoff'] must be in (0, 1), got {c['lr_backoff']}")
    c["explode_factor"] = require_real("config['explode_factor']", c["explode_factor"])
    if not c["explode_factor"] > 1:
        raise ValueError(f"config['explode_factor'] must be > 1, got {c['explode_factor']}")
    return c


def _layers(params: Mapping[str, np.ndarray], dtype: type) -> list[dict[str, np.ndarray]]:
    L = len(params) // 2
    return [{"W": params[f"W{l}"].astype(dtype), "b": params[f"b{l}"].astype(dtype)} for l in range(L)]


def _worker_gradient(params: dict, X: np.ndarray, Y: np.ndarray, c: dict, scale: float,
                     gather: Callable[[str], list[dict[str, np.ndarray]]] | None = None) -> tuple[dict, float]:
    """Σ over the worker's examples of the per-example loss gradient (float32), and Σ of the losses.

    ``gather`` (ZeRO-3): ``phase → layers``, the worker's layers all-gathered from the owners' shards; called
    before every micro-batch's forward and again before its backward (each gathered copy is dropped after
    use). Without it the worker holds every layer.
    """
    dtype = np.float16 if c["precision"] == "mixed" else np.float32
    held = _layers(params, dtype) if gather is None else None
    acc = {key: np.zeros_like(value) for key, value in params.items()}
    loss_sum = 0.0
    for start, stop in micro_batch_bounds(len(X), c["num_micro_batches"]):
        x, y = X[start:stop].astype(dtype), Y[start:stop]
        layers = held if gather is None else gather("forward all-gather")
        if c["segment_size"] is None:
            Y_hat, cache = deep_mlp_forward(layers, x)
        else:
            Y_hat, cache = mlp_forward_checkpointed(layers, x, c["segment_size"])
        diff = Y_hat.astype(np.float32) - y  # (rows, d_out), float32
        loss_sum += float(np.sum(diff.astype(np.float64) ** 2)) / y.shape[1]
        dY = (diff * (2.0 * scale / y.shape[1])).astype(dtype)  # gradient of scale · Σ per-example losses
        del Y_hat, diff
        if gather is not None:
            del layers  # freed after the forward; the backward gathers its own copy
            layers = gather("backward all-gather")
        grads = deep_mlp_backward(layers, cache, dY) if c["segment_size"] is None \
            else mlp_backward_checkpointed(layers, cache, dY)[0]
        for l, g in enumerate(grads):
            acc[f"W{l}"] += g["W"].astype(np.float32) / np.float32(scale)  # unscale in float32
            acc[f"b{l}"] += g["b"].astype(np.float32) / np.float32(scale)
        del cache, grads, layers
    return acc, loss_sum


def _padded(tree: Mapping[str, np.ndarray], lay: zs.ZeroLayout) -> np.ndarray:
    """``tree`` flattened (key order ``W0, b0, W1, …`` = the layout's) and zero-padded to ``P``: ``(P,)`` float32."""
    flat = np.zeros(lay.padded, np.float32)
    flat[:lay.psi] = flatten_params(tree)
    return flat


def _stage3_gatherer(params: dict, c: dict, lay: zs.ZeroLayout, log: list[dict]
                     ) -> Callable[[int, str], list[dict[str, np.ndarray]]]:
    """ZeRO-3: ``(k, phase) → worker k's layers``, all-gathered layer by layer from the owners' shards.

    Owner ``j``'s shard is ``S_j`` of the padded float32 master; every piece that crosses to another worker
    goes through :func:`~trainsys.memtrain.zero_stages.send_message` into ``log`` (``(N-1)s`` elements sent
    by each owner per gather). The layers come back in the compute dtype.
    """
    flat = _padded(params, lay)
    owners = [zs.ZeroWorker(j) for j in range(lay.num_workers)]
    widths = lay.layer_widths
    dtype = np.float16 if c["precision"] == "mixed" else np.float32

    def gather(k: int, phase: str) -> list[dict[str, np.ndarray]]:
        buf = np.empty(lay.padded, np.float32)  # (P,): this worker's gathered copy
        layers = []
        for l, (lo, w_stop, b_stop, hi) in enumerate(lay.layers):
            zs.gather_to_(k, owners, lay, lo, hi, lambda owner: (flat, 0), buf, 0, log, step=0, phase=phase, layer=l)
            layers.append({"W": buf[lo:w_stop].reshape(widths[l], widths[l + 1]).astype(dtype),
                           "b": buf[w_stop:b_stop].astype(dtype)})
        return layers

    return gather


def _reduce_scatter_by_layer(worker_grads: list[dict], lay: zs.ZeroLayout, log: list[dict]) -> list[np.ndarray]:
    """ZeRO-2/3: each layer's gradients reduce-scattered in backward order; worker ``k`` keeps ``(s,)`` float32.

    :func:`~trainsys.memtrain.zero_stages.reduce_scatter_mean_` sums in worker order and divides by ``N``,
    the arithmetic of :func:`~trainsys.memtrain.zero.zero_optimizer_step`'s reduce-scatter.
    """
    workers = [zs.ZeroWorker(k) for k in range(lay.num_workers)]
    for w, grads in zip(workers, worker_grads):
        w.hold("gradients", "full", _padded(grads, lay))
        w.hold("gradients", "shard", np.zeros(lay.shard, np.float32))
    for l in range(len(lay.layers) - 1, -1, -1):
        lo, _, _, hi = lay.layers[l]
        zs.reduce_scatter_mean_(workers, lay, lo, hi, lambda w: (w.get("gradients", "full"), 0),
                                lambda w: (w.get("gradients", "shard"), lay.shard_range(w.rank)[0]), log, step=0,
                                phase="gradient reduce-scatter", layer=l)
    return [w.get("gradients", "shard") for w in workers]


def _sharded_adam(params: dict, grad_shards: list[np.ndarray], states: list[dict], hp: dict, stage: int,
                  lay: zs.ZeroLayout, log: list[dict]) -> tuple[dict, list[dict]]:
    """Adam on each worker's shard; at stage 2 the updated shards are all-gathered (logged), at stage 3 they
    stay where they are (the returned master is their concatenation, an observer's view)."""
    flat = _padded(params, lay)
    shards, new_states = [], []
    for k, (grad, state) in enumerate(zip(grad_shards, states)):
        a, b = lay.shard_range(k)
        shard, new_state = zero.local_shard_adam_update(flat[a:b], grad, state, hp)
        shards.append(shard)
        new_states.append(new_state)
    if stage == 2:
        workers = [zs.ZeroWorker(k) for k in range(lay.num_workers)]
        for w, shard in zip(workers, shards):
            w.hold("parameters", "shard", shard)
            w.hold("parameters", "full", np.empty(lay.padded, np.float32))
        zs.all_gather_(workers, lay, 0, lay.padded, lambda w: (w.get("parameters", "shard"), lay.shard_range(w.rank)[0]),
                       lambda w: (w.get("parameters", "full"), 0), log, step=0, phase="parameter all-gather", layer=None)
        new_flat = workers[0].get("parameters", "full")
    else:
        new_flat = np.concatenate(shards)
    return unflatten_params(new_flat[:lay.psi], params), new_states


def _worker_peaks(params: dict, scaler: dict, X: np.ndarray, Y: np.ndarray, c: dict) -> list[int]:
    """``tracemalloc`` peak (bytes) of each worker's gradient computation on its shard of ``(X, Y)``, one at a time."""
    scale = float(scaler["scale"]) if c["precision"] == "mixed" else 1.0
    gather = _stage3_gatherer(params, c, zs.zero_layout(c["layer_widths"], c["num_workers"]), []) \
        if c["zero_stage"] == 3 else None
    peaks = []
    for k, (X_k, Y_k) in enumerate(shard_dataset_across_workers(X, Y, c["num_workers"])):
        mine = None if gather is None else functools.partial(gather, k)
        with np.errstate(over="ignore", invalid="ignore"):
            _, peak = peak_memory_bytes(_worker_gradient, params, X_k, Y_k, c, scale, mine)
        peaks.append(int(peak))
    return peaks


def train_step(params: dict, states: Any, scaler: dict, X: np.ndarray, Y: np.ndarray, c: dict, lr: float
               ) -> tuple[dict, Any, dict, dict]:
    """One step on the batch ``(X, Y)`` with learning rate ``lr``; returns new params, optimizer state(s),
    scaler and step info (new objects: the inputs are left as they are)."""
    N, batch, stage = c["num_workers"], len(X), c["zero_stage"]
    scale = float(scaler["scale"]) if c["precision"] == "mixed" else 1.0
    log: list[dict] = []  # stages 2 and 3: every message of the step
    lay = zs.zero_layout(c["layer_widths"], N) if stage >= 2 else None
    gather = _stage3_gatherer(params, c, lay, log) if stage == 3 else None
    worker_grads, loss_sum = [], 0.0
    for k, (X_k, Y_k) in enumerate(shard_dataset_across_workers(X, Y, N)):
        with np.errstate(over="ignore", invalid="ignore"):  # float16 overflow is detected below, not warned
            grads, losses = _worker_gradient(params, X_k, Y_k, c, scale,
                                             None if gather is None else functools.partial(gather, k))
        worker_grads.append({k: g * np.float32(N / batch) for k, g in grads.items()})  # mean over workers = ḡ
        loss_sum += losses
    finite = all(np.all(np.isfinite(g)) for grads in worker_grads for g in grads.values())
    if stage >= 2:  # reduce-scattered during the backward pass, before anyone knows whether to skip
        with np.errstate(over="ignore", invalid="ignore"):
            grad_shards = _reduce_scatter_by_layer(worker_grads, lay, log)
    psi = sum(p.size for p in params.values())

    def sent() -> int:  # the busiest worker's bytes this step
        if stage >= 2:
            return max(zs.bytes_sent_per_worker_per_step(log, N, 1)[0])
        return max(ring_bytes_per_worker(psi, N, 4)) if N > 1 else 0

    if c["precision"] == "mixed":
        scaler = update_loss_scale(scaler, not finite)
    if not finite:
        return params, states, scaler, {"loss": loss_sum / batch, "skipped": True, "bytes": sent()}
    hp = {"lr": lr, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
    if stage >= 2:  # sharded Adam; stage 2 all-gathers the new parameters, stage 3 keeps them sharded
        params, states = _sharded_adam(params, grad_shards, states, hp, stage, lay, log)
    elif stage == 1:  # reduce-scatter + sharded Adam + all-gather
        params, states = zero.zero_optimizer_step(params, worker_grads, states, hp)
    else:  # ring all-reduce, then unsharded Adam on every worker (identical: computed once here)
        flat, _ = ring_all_reduce_mean([flatten_params(g) for g in worker_grads])
        params, states = zero.adam_step(params, unflatten_params(flat[0], params), states, hp)
    return params, states, scaler, {"loss": loss_sum / batch, "skipped": False, "bytes": sent()}


def train(config: Mapping | None = None) -> dict[str, Any]:
    """Train with the techniques ``config`` switches on; return the run record.

    ``config`` keys (defaults in ``DEFAULTS``): ``layer_widths``, ``n`` examples, ``batch`` per step,
    ``steps``, Adam ``lr``, ``num_workers``, ``num_micro_batches`` (per worker), ``segment_size`` (None:
    no checkpointing), ``precision`` ("fp32" | "mixed"), ``zero_stage`` (0–3; stages ≥ 1 shard Adam's
    state, stages 2 and 3 run their own exchange — module docstring), ``seed``,
    ``progress``, and the stop condition: ``max_retries`` (int ≥ 0), ``lr_backoff`` (in (0, 1)) and
    ``explode_factor`` (> 1) — see the module docstring; on a healthy run they change nothing. The data
    (seed ``seed``) and its order (one permutation per epoch, seed ``seed + 1``) do not depend on the
    techniques, so every configuration sees the same batches as the baseline.

    The record: ``config``, ``seeds``, ``history`` (one dict per step run: ``step``, ``loss`` before the
    step, ``skipped``, ``bytes`` — the busiest worker's, by stage (module docstring), on rolled-back steps
    too —, ``scale`` after the step and any rollback, ``seconds``), ``losses``,
    ``bytes_communicated_per_worker``, ``memory_report``, ``measured_first_step_peak_bytes_all_workers``,
    ``measured_peak_bytes_per_worker`` (N ints), ``examples_per_second``, ``rollbacks`` (``{"step",
    "reason", "lr"}`` each, ``lr`` after lowering), ``stopped`` (None or the reason, naming the step),
    ``final_params`` (the last good state's weights when stopped) and ``wall_time_s``.
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
    peak, worker_peaks, rollbacks, stopped = None, None, [], None
    lr, smallest = c["lr"], float("inf")
    last_good = (params, states, scaler)  # replaced at every good step; references suffice (nothing mutates)
    for step in tqdm(range(c["steps"]), desc="train", disable=not c["progress"]):
        if step % batches_per_epoch == 0:
            permutation = order.permutation(c["n"])
        rows = permutation[(step % batches_per_epoch) * c["batch"]:(step % batches_per_epoch + 1) * c["batch"]]
        Xb, Yb = X[rows], Y[rows]
        if peak is None:  # the first step: each worker's gradient alone, then the whole step
            worker_peaks = _worker_peaks(params, scaler, Xb, Yb, c)
            tic = time.perf_counter()
            (new_params, new_states, new_scaler, info), peak = peak_memory_bytes(
                train_step, params, states, scaler, Xb, Yb, c, lr)
        else:
            tic = time.perf_counter()
            new_params, new_states, new_scaler, info = train_step(params, states, scaler, Xb, Yb, c, lr)
        loss = info["loss"]
        if np.isfinite(loss) and loss <= c["explode_factor"] * smallest:  # good: its starting state is kept
            last_good = (params, states, scaler)
            smallest = min(smallest, loss)
            params, states, scaler = new_params, new_states, new_scaler
        else:  # bad: back to the last good state; a lower learning rate, or the end of the run
            params, states, scaler = last_good
            reason = ROLLBACK_REASONS[0] if not np.isfinite(loss) else ROLLBACK_REASONS[1]
            if len(rollbacks) == c["max_retries"]:
                stopped = (f"stopped at step {step}: {reason} ({loss!r}), no retries left "
                           f"(max_retries = {c['max_retries']})")
            else:
                lr *= c["lr_backoff"]
                rollbacks.append({"step": step, "reason": reason, "lr": lr})
        history.append({"step": step, **info, "scale": float(scaler["scale"]) if c["precision"] == "mixed" else 1.0,
                        "seconds": time.perf_counter() - tic})
        if stopped is not None:
            break
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
        "measured_peak_bytes_per_worker": worker_peaks,
        "examples_per_second": c["batch"] * len(history) / sum(h["seconds"] for h in history),
        "rollbacks": rollbacks,
        "stopped": stopped,
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
