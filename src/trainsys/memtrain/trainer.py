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
- stage 2: **executed** — the gradient is sharded, so each micro-batch's backward reduce-scatters every
  layer's gradient as soon as it is made (a worker never holds a full gradient: its shard and one layer),
  then Adam on the worker's shard and an all-gather of the new parameter shards:
  :math:`(M+1)(N-1)s\,b` with ``M`` micro-batches per worker (a skipped step sends the reduce-scatters only,
  :math:`M(N-1)s\,b`: they happen during the backward passes, before anyone knows);
- stage 3: **executed** — the parameters live only as shards; before each layer's forward in every
  micro-batch the layer is all-gathered and freed after use, again before its backward (with
  checkpointing, a segment's layers are gathered together for its rebuild and backward), then the layer's
  gradient is reduce-scattered; the updated shards stay put: :math:`3M(N-1)s\,b`, skipped or not
  (:math:`3(N-1)s\,b` for ``M = 1``, the paper's :math:`3\Psi`).

Reducing after every micro-batch is what a sharded gradient forces: "For zero stage 2 (and 3), gradient
reduction is required after every backward because of gradient partitioning. Each rank retains only the
accumulated gradients of its partition" (DeepSpeed maintainer, deepspeedai/DeepSpeed issue #2252, 2022); the
engine communicates "during non gradient accumulation boundaries as well" at stage ≥ 2 and refuses ``no_sync``
there (``deepspeed/runtime/engine.py``, ``DeepSpeedEngine.allreduce_gradients`` and ``no_sync``), whereas
stages 0–1 keep a full local gradient and exchange once per step.

Stages 2 and 3 send every message through :func:`~trainsys.memtrain.zero_stages.send_message` and count
the bytes from that log. The workers run one after the other; each owner adds the pieces it receives into
its gradient shard, so with ``M = 1`` the sum is stage 1's ((g_0 + g_1) + …)/N and stages 1–3 give
bit-identical runs; with ``M > 1`` the same ``N M`` float32 terms are summed in another order (stages 2 and 3
still agree bit for bit with each other). With float32 compute every configuration follows the plain
single-worker baseline to float rounding; float16 compute follows it within float16's resolution.
:func:`train` returns a run record: the validated config, the seed, per-step losses, bytes communicated, the
per-worker memory report, the measured peak of the first step (of the whole simulation: every worker lives
in this one process) and each worker's measured peak.

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
times) and each worker's peak bytes in the first step, measured one worker at a time
(``peak_memory_bytes`` cannot nest, so this is a separate pass on the first step's shards before the step
itself runs): the ``tracemalloc`` peak of its forward and backward passes (activations, gathered layers, its
gradient accumulator or the layer gradients it reduce-scatters, the messages it sends) plus the bytes it holds
from before (parameters or their shard, Adam moments or their shard, its gradient shard). It falls with the
stage as Lesson 39's table does: for the lesson's all-on run (4 workers, ``M = 2``, segments of 2) about
279k, 196k, 172k and 155k bytes at stages 0–3. Step 0 runs under ``tracemalloc``, which traces every
allocation: its recorded time is several times the others'.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from trainsys._validation import require_int, require_keys, require_real
from trainsys.memtrain import zero
from trainsys.memtrain import zero_stages as zs
from trainsys.memtrain.accumulation import micro_batch_bounds
from trainsys.memtrain.checkpointing import init_deep_mlp_params, validate_layer_widths
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
    """The layers in the compute dtype: the float32 master itself (no copy) or its float16 copy."""
    L = len(params) // 2
    return [{"W": params[f"W{l}"].astype(dtype, copy=False), "b": params[f"b{l}"].astype(dtype, copy=False)}
            for l in range(L)]


class _ShardedExchange:
    """ZeRO-2/3 (the sharded gradient, and at stage 3 the sharded parameters) for one step of all workers.

    Owner ``j`` accumulates its gradient shard ``(s,)`` float32 in ``shards[j]``; a worker's pass hands each layer's
    gradient of each micro-batch to :meth:`reduce_scatter`, which sends the pieces of the layer's range ``R_l`` that
    other workers own through :func:`~trainsys.memtrain.zero_stages.send_message` and adds them into the owners'
    shards (its own piece stays). At stage 3 :meth:`gather` all-gathers layers from the owners' parameter shards
    (``S_j`` of the padded float32 master) into fresh buffers, dropped by the caller after use. Every message goes
    into ``log``. The workers run one after the other, so an owner's shard sums worker by worker and, within a
    worker, micro-batch by micro-batch; with ``M = 1`` that is the worker order of
    :func:`~trainsys.memtrain.zero.reduce_scatter_mean`.
    """

    def __init__(self, params: Mapping[str, np.ndarray], c: Mapping, batch: int, log: list[dict]) -> None:
        self.lay = zs.zero_layout(c["layer_widths"], c["num_workers"])
        self.flat = _padded(params, self.lay) if c["zero_stage"] == 3 else None  # (P,): the owners' shards
        self.owners = [zs.ZeroWorker(j) for j in range(self.lay.num_workers)]
        self.shards = [np.zeros(self.lay.shard, np.float32) for _ in self.owners]  # N x (s,)
        self.factor = np.float32(c["num_workers"] / batch)  # worker k's gradient is (N / batch) S_k
        self.dtype = np.float16 if c["precision"] == "mixed" else np.float32
        self.log, self.rank = log, 0

    def gather(self, ls: Sequence[int], phase: str) -> dict[int, dict[str, np.ndarray]]:
        """Stage 3: layers ``ls`` all-gathered for worker ``rank``, in the compute dtype (a fresh buffer each)."""
        out = {}
        for l in ls:
            lo, w_stop, b_stop, hi = self.lay.layers[l]
            buf = np.empty(hi - lo, np.float32)  # (|R_l|,): the layer, padding included for the last one
            zs.gather_to_(self.rank, self.owners, self.lay, lo, hi, lambda owner: (self.flat, 0), buf, lo, self.log,
                          step=0, phase=phase, layer=l)
            w_in, w_out = self.lay.layer_widths[l], self.lay.layer_widths[l + 1]
            out[l] = {"W": buf[:w_stop - lo].reshape(w_in, w_out).astype(self.dtype, copy=False),
                      "b": buf[w_stop - lo:b_stop - lo].astype(self.dtype, copy=False)}
        return out

    def reduce_scatter(self, l: int, dW: np.ndarray, db: np.ndarray, scale: float) -> None:
        """Layer ``l``'s gradient of one micro-batch (scaled by ``scale``, compute dtype), unscaled in float32 and
        weighted by ``N / batch``, sent piece by piece to the owners of ``R_l`` and added into their shards."""
        lo, w_stop, b_stop, hi = self.lay.layers[l]
        flat = np.zeros(hi - lo, np.float32)  # (|R_l|,); the padding has gradient 0
        flat[:w_stop - lo] = (dW.astype(np.float32) / np.float32(scale)).reshape(-1) * self.factor
        flat[w_stop - lo:b_stop - lo] = (db.astype(np.float32) / np.float32(scale)) * self.factor
        zs.reduce_scatter_add_(self.rank, self.owners, self.lay, lo, hi, flat, lo,
                               lambda owner: (self.shards[owner.rank], self.lay.shard_range(owner.rank)[0]), self.log,
                               step=0, phase="gradient reduce-scatter", layer=l)

    def mean_shards(self) -> list[np.ndarray]:
        """Each owner's shard of the mean gradient over workers: its sum divided by ``N`` (new arrays)."""
        return [shard / np.float32(len(self.owners)) for shard in self.shards]


def _worker_gradient(params: dict, X: np.ndarray, Y: np.ndarray, c: dict, scale: float,
                     exchange: _ShardedExchange | None = None) -> tuple[dict | None, float]:
    """One worker's passes over its micro-batches (:func:`~trainsys.memtrain.zero_stages.layer_by_layer_pass`,
    checkpointed with ``segment_size``); returns ``(accumulator or None, Σ of its per-example losses)``.

    Without ``exchange`` (stages 0–1) each layer's gradient is unscaled into a float32 accumulator shaped like
    ``params``, returned: Σ over the worker's examples of the per-example loss gradient. With it (stages 2–3, worker
    ``exchange.rank``) each layer's gradient goes to :meth:`_ShardedExchange.reduce_scatter` as soon as it is made;
    at stage 3 each layer is all-gathered just before its forward and again before its backward unit (a checkpoint
    segment's layers together, for its rebuild) and freed after use.
    """
    dtype = np.float16 if c["precision"] == "mixed" else np.float32
    stage3 = exchange is not None and exchange.flat is not None
    held = None if stage3 else dict(enumerate(_layers(params, dtype)))
    acc = None if exchange is not None else {key: np.zeros_like(value) for key, value in params.items()}
    loss_sum = 0.0

    def fetch(ls: Sequence[int], phase: str) -> dict[int, dict[str, np.ndarray]]:
        return exchange.gather(ls, phase) if stage3 else {l: held[l] for l in ls}

    def emit(l: int, dW: np.ndarray, db: np.ndarray) -> None:
        if exchange is None:
            acc[f"W{l}"] += dW.astype(np.float32) / np.float32(scale)  # unscale in float32
            acc[f"b{l}"] += db.astype(np.float32) / np.float32(scale)
        else:
            exchange.reduce_scatter(l, dW, db, scale)

    for start, stop in micro_batch_bounds(len(X), c["num_micro_batches"]):
        y = Y[start:stop]  # (rows, d_out)

        def loss_gradient(Y_hat: np.ndarray) -> np.ndarray:
            nonlocal loss_sum
            diff = Y_hat.astype(np.float32) - y  # (rows, d_out), float32
            loss_sum += float(np.sum(diff.astype(np.float64) ** 2)) / y.shape[1]
            return (diff * (2.0 * scale / y.shape[1])).astype(dtype)  # gradient of scale · Σ per-example losses

        zs.layer_by_layer_pass(X[start:stop].astype(dtype), len(params) // 2, fetch, lambda l: None, loss_gradient,
                               emit, c["segment_size"])
    return acc, loss_sum


def _padded(tree: Mapping[str, np.ndarray], lay: zs.ZeroLayout) -> np.ndarray:
    """``tree`` flattened (key order ``W0, b0, W1, …`` = the layout's) and zero-padded to ``P``: ``(P,)`` float32."""
    flat = np.zeros(lay.padded, np.float32)
    flat[:lay.psi] = flatten_params(tree)
    return flat


def _sharded_adam(params: dict, grad_shards: list[np.ndarray], states: list[dict], hp: dict, stage: int,
                  lay: zs.ZeroLayout, log: list[dict]) -> tuple[dict, list[dict]]:
    """Adam on each worker's shard; at stage 2 the updated shards are all-gathered (logged, one receiver at a time:
    every receiver gets the same vector, worker 0's is kept), at stage 3 they stay where they are (the returned
    master is their concatenation, an observer's view)."""
    flat = _padded(params, lay)
    owners, new_states = [], []
    for k, (grad, state) in enumerate(zip(grad_shards, states)):
        a, b = lay.shard_range(k)
        shard, new_state = zero.local_shard_adam_update(flat[a:b], grad, state, hp)
        owners.append(zs.ZeroWorker(k))
        owners[-1].hold("parameters", "shard", shard)
        new_states.append(new_state)
    del flat
    if stage == 2:
        new_flat = None
        for k in range(lay.num_workers):
            received = np.empty(lay.padded, np.float32)  # (P,): worker k's full parameters
            zs.gather_to_(k, owners, lay, 0, lay.padded,
                          lambda w: (w.get("parameters", "shard"), lay.shard_range(w.rank)[0]), received, 0, log,
                          step=0, phase="parameter all-gather", layer=None)
            new_flat = received if new_flat is None else new_flat
    else:
        new_flat = np.concatenate([w.get("parameters", "shard") for w in owners])
    return unflatten_params(new_flat[:lay.psi], params), new_states


def _held_bytes(k: int, params: dict, states: Any, c: dict, exchange: _ShardedExchange | None) -> int:
    """Bytes worker ``k`` holds from before its pass: its parameters (all, or at stage 3 its shard ``s``), its Adam
    moments (all, or their shard) and at stages 2–3 its gradient shard."""
    stage = c["zero_stage"]
    parameters = 4 * exchange.lay.shard if stage == 3 else sum(p.nbytes for p in params.values())
    optimizer = zero.optimizer_state_bytes(states[k] if stage >= 1 else states)
    return parameters + optimizer + (exchange.shards[k].nbytes if exchange is not None else 0)


def _worker_peaks(params: dict, states: Any, scaler: dict, X: np.ndarray, Y: np.ndarray, c: dict) -> list[int]:
    """Each worker's peak bytes in its step, one worker at a time: the ``tracemalloc`` peak of its pass
    (:func:`_worker_gradient`: activations, the gathered layers, its gradient accumulator or the layer gradients it
    reduce-scatters, the messages it sends) plus :func:`_held_bytes` (what it holds from before the pass)."""
    scale = float(scaler["scale"]) if c["precision"] == "mixed" else 1.0
    exchange = _ShardedExchange(params, c, len(X), []) if c["zero_stage"] >= 2 else None  # outside the measurement
    peaks = []
    for k, (X_k, Y_k) in enumerate(shard_dataset_across_workers(X, Y, c["num_workers"])):
        if exchange is not None:
            exchange.rank = k
        with np.errstate(over="ignore", invalid="ignore"):
            _, peak = peak_memory_bytes(_worker_gradient, params, X_k, Y_k, c, scale, exchange)
        peaks.append(int(peak) + _held_bytes(k, params, states, c, exchange))
    return peaks


def train_step(params: dict, states: Any, scaler: dict, X: np.ndarray, Y: np.ndarray, c: dict, lr: float
               ) -> tuple[dict, Any, dict, dict]:
    """One step on the batch ``(X, Y)`` with learning rate ``lr``; returns new params, optimizer state(s),
    scaler and step info (new objects: the inputs are left as they are)."""
    N, batch, stage = c["num_workers"], len(X), c["zero_stage"]
    scale = float(scaler["scale"]) if c["precision"] == "mixed" else 1.0
    log: list[dict] = []  # stages 2 and 3: every message of the step
    exchange = _ShardedExchange(params, c, batch, log) if stage >= 2 else None
    worker_grads, loss_sum = [], 0.0
    for k, (X_k, Y_k) in enumerate(shard_dataset_across_workers(X, Y, N)):
        if exchange is not None:
            exchange.rank = k
        with np.errstate(over="ignore", invalid="ignore"):  # float16 overflow is detected below, not warned
            grads, losses = _worker_gradient(params, X_k, Y_k, c, scale, exchange)
        if exchange is None:
            worker_grads.append({k: g * np.float32(N / batch) for k, g in grads.items()})  # mean over workers = ḡ
        loss_sum += losses
    if exchange is not None:  # reduce-scattered during the backward passes, before anyone knows whether to skip
        exchange.flat = None  # the gathers are over; the owners' parameter shards are read again by Adam
        with np.errstate(over="ignore", invalid="ignore"):
            grad_shards = exchange.mean_shards()
        exchange.shards = None
        finite = all(np.all(np.isfinite(g)) for g in grad_shards)
    else:
        finite = all(np.all(np.isfinite(g)) for grads in worker_grads for g in grads.values())
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
        params, states = _sharded_adam(params, grad_shards, states, hp, stage, exchange.lay, log)
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
    ``measured_peak_bytes_per_worker`` (N ints, module docstring), ``examples_per_second``, ``rollbacks`` (``{"step",
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
            worker_peaks = _worker_peaks(params, states, scaler, Xb, Yb, c)
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
