r"""Module 1, Part 6 (extension) — ZeRO stages 0–3 executed, worker by worker, message by message.

:mod:`trainsys.memtrain.zero` shards Adam's state (stage 1) and :mod:`trainsys.memtrain.memory` only
*accounts* for stages 2 and 3. Here ``N`` simulated workers train Part 3's deep MLP with Adam (Kingma &
Ba 2015, in float32: memory.py's ``"fp32"`` precision) and really run each stage of Rajbhandari et al.
(2020), "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", §5:

- **stage 0** — every worker holds all parameters, gradients and Adam state; the gradients are
  averaged by a ring all-reduce (Patarasuk & Yuan 2009; the ring of
  :mod:`~trainsys.memtrain.ring_allreduce`) and every worker takes the same full Adam step;
- **stage 1** (:math:`P_{os}`) — Adam's ``m`` and ``v`` are sharded: one flat **reduce-scatter** of the
  gradients right after the backward pass, Adam on the worker's shard only, **all-gather** of the
  updated parameter shards;
- **stage 2** (:math:`P_{os+g}`) — as stage 1, but each worker keeps only its gradient shard: the
  gradients are reduce-scattered **layer by layer during the backward pass**, as each layer's are
  produced, and that layer's full gradient buffer is freed at once;
- **stage 3** (:math:`P_{os+g+p}`) — the parameters are sharded too: before a layer's forward its
  parameters are all-gathered, used and freed; again before its backward; then its gradients are
  reduce-scattered; each worker updates only its shard (no all-gather after the step).

Each worker's forward and backward passes are :func:`layer_by_layer_pass`, the one home of this schedule
(Lesson 40's :func:`~trainsys.memtrain.trainer.train` runs it too, with micro-batches, checkpointing and
float16); the simulation runs the workers one after the other, and a reduce-scatter adds each sender's pieces
into the owners' shards as they arrive (:func:`reduce_scatter_add_`), dividing by ``N`` once all have sent.

**Layout.** With :math:`\Psi` parameters the flat vector (layer 0's ``W`` raveled, then ``b``, then
layer 1, …) is padded with zeros to :math:`P = N s`, :math:`s = \lceil \Psi / N \rceil`, and worker
``k`` owns shard :math:`S_k = [ks, (k+1)s)` (:func:`~trainsys.memtrain.zero.partition_optimizer_state`'s
rule). Layer ``l`` occupies the flat range :math:`R_l`; the padding :math:`[\Psi, P)` is appended to the
last layer's range, so the ranges :math:`R_0, …, R_{L-1}` partition :math:`[0, P)` as the shards do.
Flat buffers (stage 0's gradients, stages 1–2's parameters and gradients) have ``P`` elements.

**Communication.** Every message goes through :func:`send_message`, which copies the payload and
logs ``(step, phase, layer, sender, receiver, bytes)``. A reduce-scatter over a range ``R`` sends, from
each worker ``j`` to each owner ``k ≠ j``, worker ``j``'s values on :math:`R \cap S_k`; an all-gather
sends :math:`R \cap S_j` from ``j`` to every other worker (empty pieces send nothing). Over ranges
that partition :math:`[0, P)` worker ``j`` therefore sends

.. math::

    \sum_l \sum_{k \ne j} |R_l \cap S_k| = (N-1)\,s \quad\text{(reduce-scatter)},\qquad
    \sum_l (N-1)\,|R_l \cap S_j| = (N-1)\,s \quad\text{(all-gather)},

and the ring sends :math:`2(N-1)` chunks of ``s`` (it runs on the padded gradient, so all its chunks
are equal). With :math:`b = 4` bytes per float32, every worker sends per step exactly

.. math::

    2(N-1)\,s\,b = 2\tfrac{N-1}{N} P b \ \ (\text{stages } 0, 1, 2),\qquad
    3(N-1)\,s\,b = 3\tfrac{N-1}{N} P b \ \ (\text{stage } 3),

i.e. :math:`2\frac{N-1}{N}\Psi b` and :math:`3\frac{N-1}{N}\Psi b` counted on the padded length ``P``
(padding travels: the last shard's messages carry it) — :func:`expected_bytes_sent_per_step`, equal
to :func:`trainsys.memtrain.memory.communication_bytes_per_step` with ``num_params = P``. Stage 3
re-gathers every layer before its backward, layer 0 and the last layer included, as the paper's
:math:`3\Psi` counts (§7.2, whose :math:`2\Psi` and :math:`3\Psi` drop the factor
:math:`\frac{N-1}{N}`); FSDP's ``reshard_after_forward=False`` (its default for the root module, per the
``torch.distributed.fsdp.fully_shard`` docstring) trades that gather for memory. The training loss is
read by the driver, not exchanged (a logging scalar, as in
:func:`~trainsys.memtrain.data_parallel.data_parallel_train_step`).

**Memory, measured.** Each :class:`ZeroWorker` holds its arrays by class (parameters, gradients,
optimizer states) and its peak is **tracked explicitly**: after every allocation the sum of the
``nbytes`` of the arrays it holds in each class is compared with that class's peak of the step (only
arrays that own their memory may be held, so a view is never counted twice). Not counted: activations
(Part 3's subject), the arithmetic's temporaries, message payloads in flight and the reduction's
shard-sized accumulator (communication buffers). :func:`scheduled_bytes_per_worker` predicts the
peaks exactly (padding included); :func:`accounted_bytes_per_worker` is memory.py's ``"fp32"``
accounting (4Ψ parameters, 4Ψ gradients, 8Ψ for ``m`` and ``v`` — the float32 arrays actually held, no
master copy) divided by ``N`` per stage, plus the one layer that stage 3 gathers and the one layer's
gradient that stages 2 and 3 hold while reducing it (the paper's "constant size buffers", §6.2):

=====  =====================  =====================  ==================
stage  parameters             gradients              optimizer states
=====  =====================  =====================  ==================
0      :math:`4\Psi`          :math:`4P`             :math:`8\Psi`
1      :math:`4P`             :math:`4P`             :math:`8s`
2      :math:`4P`             :math:`4(s + r)`       :math:`8s`
3      :math:`4(s + r)`       :math:`4(s + r)`       :math:`8s`
=====  =====================  =====================  ==================

(the scheduled bytes; :math:`r = \max_l |R_l|`, the largest layer with the padding counted in the last.)

**Numerics.** Worker ``k``'s output gradient is :math:`\frac{2N}{n d_{out}}(\hat Y_k - Y_k)`, so its
gradient is :math:`\frac{N}{n} S_k` (:mod:`~trainsys.memtrain.data_parallel`) and the mean over workers
is the batch's mean-loss gradient for any shard sizes. Stages 1–3 reduce every element as
:math:`((g_0 + g_1) + \dots + g_{N-1}) / N` (the order of
:func:`~trainsys.memtrain.zero.reduce_scatter_mean`) and update it with the same float32 operations,
so they agree **bit for bit** with each other and with :func:`~trainsys.memtrain.zero.zero_optimizer_step`.
Stage 0's ring sums chunk ``j`` in ring order from worker ``j``: the same ``N`` float32 terms in another
order. Each order's sum is within :math:`\gamma_{N-1}\sum_k |g_k|` of the exact one (Higham 2002,
*Accuracy and Stability of Numerical Algorithms*, §4.2; :math:`\gamma_m = mu/(1-mu)`,
:math:`u = 2^{-24}`), so the two means differ by at most :math:`2\gamma_{N-1}\frac1N\sum_k|g_k|` per
element: a relative :math:`\delta = 2(N-1)u` (:math:`3.6\cdot10^{-7}` at ``N = 4``) where the workers'
gradients agree in sign, and nothing at all for ``N ≤ 2`` (a sum of two terms has one order). Adam's
step :math:`\text{lr}\,\hat m/(\sqrt{\hat v}+\varepsilon)` is scale-free in ``g`` (for
:math:`|g| \gg \varepsilon`), so a relative gradient change ``δ`` moves the update by about
:math:`\text{lr}\,\delta`, and each run rounds :math:`\theta - \text{update}` once (:math:`\le u|\theta|`);
to first order, after ``T`` steps each parameter differs by at most
:math:`T(\text{lr}\,\delta + 2u|\theta|)`. The first loss is identical in every stage (same parameters,
no reduction yet); the tests hold the later ones to a relative :math:`T\delta` (measured gaps: at most
5% of it, and at most half of the parameter bound).

**Oracle.** ``torch.distributed.fsdp.fully_shard`` (FSDP2, the per-parameter rewrite of the FSDP of
Zhao et al. 2023) runs on CPU with the gloo backend in torch 2.13: ``tests/test_zero_stages.py`` starts
two processes with ``torch.multiprocessing.spawn`` and a ``file://`` rendezvous, and with one FSDP group
per layer and ``reshard_after_forward=True`` FSDP2 follows stage 3 to float32 rounding. It shards each
parameter on dim 0 (its docstring; the test checks that the shards' shapes follow ``torch.chunk``'s
rule) where ZeRO cuts one flat vector; Adam being elementwise, the arithmetic is the same.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from trainsys._validation import describe, require_float_array, require_int
from trainsys.memtrain.accumulation import micro_batch_bounds
from trainsys.memtrain.checkpointing import Layer, validate_deep_params, validate_layer_widths
from trainsys.memtrain.memory import compute_optimizer_memory_bytes
from trainsys.memtrain.mlp import first_linear_backward, linear_backward, linear_forward, relu_backward, relu_forward
from trainsys.memtrain.ring_allreduce import ring_chunk_bounds
from trainsys.memtrain.zero import TORCH_ADAM_DEFAULTS, validate_adam_hp

STAGES: tuple[int, ...] = (0, 1, 2, 3)
"""The ZeRO stages :func:`train_zero` runs."""

CLASSES: tuple[str, ...] = ("parameters", "gradients", "optimizer_states")
"""The classes of arrays a worker holds (memory.py's names), whose bytes are measured."""

LOG_KEYS: tuple[str, ...] = ("step", "phase", "layer", "sender", "receiver", "bytes")
"""The keys of one logged message. ``"layer"`` is ``None`` for a flat (whole-vector) collective."""

PHASES: dict[int, tuple[str, ...]] = {
    0: ("ring reduce-scatter", "ring all-gather"),
    1: ("gradient reduce-scatter", "parameter all-gather"),
    2: ("gradient reduce-scatter", "parameter all-gather"),
    3: ("forward all-gather", "backward all-gather", "gradient reduce-scatter"),
}
"""The phases each stage's messages are logged under."""

ITEMSIZE = 4
"""Bytes per element: the simulation trains in float32."""


# --- layout -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ZeroLayout:
    """Where every parameter lives in the padded flat vector, and who owns what (no arrays).

    ``psi``: Ψ, the number of parameters; ``shard``: ``s = ceil(Ψ/N)``; ``padded``: ``P = N s``;
    ``layers[l] = (lo, w_stop, b_stop, hi)``: layer ``l``'s ``W`` is flat ``[lo, w_stop)``, its ``b``
    ``[w_stop, b_stop)``, and its range ``R_l = [lo, hi)`` (``hi = b_stop`` except for the last layer,
    whose range takes the padding up to ``P``).
    """

    layer_widths: tuple[int, ...]
    num_workers: int
    psi: int
    shard: int
    padded: int
    layers: tuple[tuple[int, int, int, int], ...]

    def shard_range(self, k: int) -> tuple[int, int]:
        """Worker ``k``'s shard ``[k s, (k+1) s)`` of the padded flat vector."""
        return k * self.shard, (k + 1) * self.shard

    def pieces(self, lo: int, hi: int) -> list[tuple[int, int, int]]:
        """``(k, a, b)``: the non-empty intersections ``[a, b)`` of ``[lo, hi)`` with each shard ``S_k``."""
        out = []
        for k in range(self.num_workers):
            a, b = max(lo, k * self.shard), min(hi, (k + 1) * self.shard)
            if a < b:
                out.append((k, a, b))
        return out

    def largest_range(self) -> int:
        """``r = max_l |R_l|``: the largest layer range, padding counted in the last layer's."""
        return max(hi - lo for lo, _, _, hi in self.layers)


def zero_layout(layer_widths: Sequence[int], num_workers: int) -> ZeroLayout:
    """The :class:`ZeroLayout` of the deep MLP ``layer_widths`` over ``num_workers`` workers."""
    widths = validate_layer_widths(layer_widths)
    N = require_int("num_workers", num_workers, minimum=1)
    layers, offset = [], 0
    for w_in, w_out in zip(widths[:-1], widths[1:]):
        w_stop = offset + w_in * w_out
        layers.append((offset, w_stop, w_stop + w_out, w_stop + w_out))
        offset = w_stop + w_out
    psi = offset
    s = -(-psi // N)  # ceil(Ψ / N)
    lo, w_stop, b_stop, _ = layers[-1]
    layers[-1] = (lo, w_stop, b_stop, N * s)  # the padding belongs to the last layer's range
    return ZeroLayout(tuple(widths), N, psi, s, N * s, tuple(layers))


# --- accounting ---------------------------------------------------------------------------------------
def _require_stage(stage: object) -> int:
    return require_int("stage", stage, minimum=0, maximum=3)


def expected_bytes_sent_per_step(num_params: int, num_workers: int, stage: int, itemsize: int = ITEMSIZE) -> int:
    r"""Bytes every worker sends per step: :math:`c\,(N-1)\lceil\Psi/N\rceil b`, ``c = 3`` at stage 3, else 2.

    That is :math:`c\frac{N-1}{N}Pb` with ``P = N⌈Ψ/N⌉`` the padded length (module docstring); 0 for ``N = 1``.
    """
    psi = require_int("num_params", num_params, minimum=1)
    N = require_int("num_workers", num_workers, minimum=1)
    stage = _require_stage(stage)
    b = require_int("itemsize", itemsize, minimum=1)
    return (3 if stage == 3 else 2) * (N - 1) * (-(-psi // N)) * b


def scheduled_bytes_per_worker(layer_widths: Sequence[int], num_workers: int, stage: int) -> dict[str, int]:
    """The exact per-worker peak bytes of each class in :func:`train_zero`'s schedule (module docstring's table).

    Returns ``{"parameters", "gradients", "optimizer_states"}`` (ints, float32): padding and the
    in-flight layer buffers included, derived from the shapes alone.
    """
    lay = zero_layout(layer_widths, num_workers)
    stage = _require_stage(stage)
    s, P, r = lay.shard, lay.padded, lay.largest_range()
    params = {0: lay.psi, 1: P, 2: P, 3: s + r}[stage]
    grads = {0: P, 1: P, 2: s + r, 3: s + r}[stage]
    optim = 2 * (lay.psi if stage == 0 else s)
    return {"parameters": ITEMSIZE * params, "gradients": ITEMSIZE * grads, "optimizer_states": ITEMSIZE * optim}


def accounted_bytes_per_worker(layer_widths: Sequence[int], num_workers: int, stage: int) -> dict[str, float]:
    r"""memory.py's per-worker accounting in float32, plus the layer buffers the schedule needs.

    :func:`~trainsys.memtrain.memory.compute_optimizer_memory_bytes` with ``precision="fp32"``
    (parameters :math:`4\Psi`, gradients :math:`4\Psi`, Adam :math:`8\Psi`, divided by ``N`` from stages
    3, 2, 1 on) plus :math:`4\max_l n_l` (the largest layer's parameter count, unpadded) to the
    parameters at stage 3 (the gathered layer) and to the gradients at stages 2 and 3 (the layer being
    reduced). Returns ``{"parameters", "gradients", "optimizer_states", "total"}`` as floats.
    """
    lay = zero_layout(layer_widths, num_workers)
    stage = _require_stage(stage)
    terms = compute_optimizer_memory_bytes(lay.psi, "fp32", lay.num_workers, stage)
    layer = ITEMSIZE * max(b_stop - lo for lo, _, b_stop, _ in lay.layers)
    out = {"parameters": terms["parameters"] + (layer if stage == 3 else 0),
           "gradients": terms["gradients"] + (layer if stage >= 2 else 0),
           "optimizer_states": terms["optimizer_states"]}
    out["total"] = sum(out.values())
    return out


# --- workers and messages ---------------------------------------------------------------------------
@dataclass
class ZeroWorker:
    """One simulated worker: its rank, the arrays it owns by class, and the peak bytes of each class.

    Workers touch only their own arrays; values cross between workers only through
    :func:`send_message`. ``held[cls][name]`` is an array owning its memory; ``peak[cls]`` the largest
    ``Σ nbytes`` of class ``cls`` since the last :meth:`reset_peaks`; ``adam_steps`` the Adam updates taken.
    """

    rank: int
    held: dict[str, dict[str, np.ndarray]] = field(default_factory=lambda: {c: {} for c in CLASSES})
    peak: dict[str, int] = field(default_factory=lambda: {c: 0 for c in CLASSES})
    adam_steps: int = 0

    def hold(self, cls: str, name: str, array: np.ndarray) -> np.ndarray:
        """Keep ``array`` (which must own its memory) as ``held[cls][name]``, update the peak, return it."""
        if cls not in CLASSES:
            raise ValueError(f"cls must be one of {CLASSES}, got {cls!r}")
        if name in self.held[cls]:
            raise ValueError(f"worker {self.rank} already holds {cls}[{name!r}]")
        if not isinstance(array, np.ndarray) or not array.flags.owndata:
            raise ValueError(f"worker {self.rank} can hold only arrays owning their memory (a view would be "
                             f"counted twice), got {describe(array)} for {cls}[{name!r}]")
        self.held[cls][name] = array
        self.peak[cls] = max(self.peak[cls], self.held_bytes(cls))
        return array

    def release(self, cls: str, name: str) -> None:
        """Drop ``held[cls][name]``: the worker frees it."""
        del self.held[cls][name]

    def get(self, cls: str, name: str) -> np.ndarray:
        return self.held[cls][name]

    def held_bytes(self, cls: str) -> int:
        """``Σ nbytes`` of the arrays of class ``cls`` the worker holds now."""
        return sum(a.nbytes for a in self.held[cls].values())

    def reset_peaks(self) -> None:
        """Start a new measurement: each class's peak becomes what is held now."""
        self.peak = {c: self.held_bytes(c) for c in CLASSES}


def send_message(log: list[dict], payload: np.ndarray, *, step: int, phase: str, layer: int | None,
                 sender: int, receiver: int) -> np.ndarray:
    """The one message-passing function: return a copy of ``payload`` (what arrives) and log the message.

    Appends ``{"step", "phase", "layer", "sender", "receiver", "bytes"}`` (:data:`LOG_KEYS`) to ``log``,
    ``"bytes"`` being ``payload.nbytes``. A worker does not message itself (``ValueError``).
    """
    if sender == receiver:
        raise ValueError(f"sender and receiver must differ (a worker's own data does not travel), got {sender}")
    arrived = np.array(payload, copy=True)
    log.append({"step": step, "phase": phase, "layer": layer, "sender": sender, "receiver": receiver,
                "bytes": int(arrived.nbytes)})
    return arrived


Locator = Callable[[ZeroWorker], tuple[np.ndarray, int]]
"""``worker → (array, base)``: flat position ``x`` of the padded vector is ``array[x - base]``."""


def ring_all_reduce_mean_(workers: Sequence[ZeroWorker], buffer: Locator, log: list[dict], step: int) -> None:
    """In-place ring all-reduce (mean) of each worker's padded flat buffer, every message through :func:`send_message`.

    The schedule of :func:`~trainsys.memtrain.ring_allreduce.ring_all_reduce_mean` (same chunks, same
    sums, same division), run on the workers' own buffers: the results agree with it bit for bit.
    """
    N = len(workers)
    bufs = [buffer(w)[0] for w in workers]
    bounds = ring_chunk_bounds(bufs[0].size, N)
    reduce_phase, gather_phase = PHASES[0]
    for r in range(2 * (N - 1)):
        reducing = r < N - 1
        s = r if reducing else r - (N - 1)
        arrived = []
        for k in range(N):  # every send of a ring step happens before any receiver writes
            chunk = (k - s) % N if reducing else (k + 1 - s) % N
            lo, hi = bounds[chunk]
            arrived.append((chunk, send_message(log, bufs[k][lo:hi], step=step, layer=None, sender=k,
                                                receiver=(k + 1) % N,
                                                phase=reduce_phase if reducing else gather_phase)))
        for k, (chunk, payload) in enumerate(arrived):
            lo, hi = bounds[chunk]
            if reducing:
                bufs[(k + 1) % N][lo:hi] += payload
            else:
                bufs[(k + 1) % N][lo:hi] = payload
        if r == N - 2:  # worker k now holds the full sum of chunk (k + 1) mod N
            for k in range(N):
                lo, hi = bounds[(k + 1) % N]
                bufs[k][lo:hi] /= bufs[k].dtype.type(N)


def reduce_scatter_mean_(workers: Sequence[ZeroWorker], layout: ZeroLayout, lo: int, hi: int, source: Locator,
                         dest: Locator, log: list[dict], *, step: int, phase: str, layer: int | None) -> None:
    """Owner ``k`` of each piece ``[a, b) = [lo, hi) ∩ S_k`` receives every worker's values there; writes their mean.

    Summed in worker order ``((g_0 + g_1) + …) / N`` (:func:`~trainsys.memtrain.zero.reduce_scatter_mean`'s
    order); worker ``k``'s own piece does not travel. ``source``/``dest`` locate the flat positions in
    each worker's arrays.
    """
    N = len(workers)
    for k, a, b in layout.pieces(lo, hi):
        acc = None
        for j, worker in enumerate(workers):
            array, base = source(worker)
            piece = array[a - base:b - base]
            if j != k:
                piece = send_message(log, piece, step=step, phase=phase, layer=layer, sender=j, receiver=k)
            if acc is None:
                acc = piece.copy()  # the reduction's accumulator (a communication buffer)
            else:
                acc += piece
        out, base = dest(workers[k])
        out[a - base:b - base] = acc / acc.dtype.type(N)


def gather_to_(receiver: int, owners: Sequence[ZeroWorker], layout: ZeroLayout, lo: int, hi: int, source: Locator,
               out: np.ndarray, out_base: int, log: list[dict], *, step: int, phase: str, layer: int | None) -> None:
    """Worker ``receiver`` receives each owner ``j``'s piece ``[lo, hi) ∩ S_j`` into ``out`` (its own is copied locally).

    Flat position ``x`` lands at ``out[x - out_base]``; ``source`` locates the positions in the owners' arrays.
    """
    for j, a, b in layout.pieces(lo, hi):
        array, base = source(owners[j])
        piece = array[a - base:b - base]
        if j != receiver:
            piece = send_message(log, piece, step=step, phase=phase, layer=layer, sender=j, receiver=receiver)
        out[a - out_base:b - out_base] = piece


def all_gather_(workers: Sequence[ZeroWorker], layout: ZeroLayout, lo: int, hi: int, source: Locator, dest: Locator,
                log: list[dict], *, step: int, phase: str, layer: int | None) -> None:
    """Every worker receives each owner ``j``'s piece ``[lo, hi) ∩ S_j`` (its own is copied locally)."""
    for k, receiver in enumerate(workers):
        out, out_base = dest(receiver)
        gather_to_(k, workers, layout, lo, hi, source, out, out_base, log, step=step, phase=phase, layer=layer)


# --- arithmetic ---------------------------------------------------------------------------------------
def adam_update_(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, t: int, hp: Mapping[str, float]) -> None:
    """Adam step ``t`` in place on ``p``, ``m``, ``v`` — the float32 operations of
    :func:`~trainsys.memtrain.zero.local_shard_adam_update` in the same order (bit-identical results)."""
    b1, b2 = hp["beta1"], hp["beta2"]
    m *= b1
    m += (1 - b1) * g  # m = β1 m + (1 − β1) g
    g2 = (1 - b2) * g
    g2 *= g
    v *= b2
    v += g2  # v = β2 v + (1 − β2) g²
    denom = np.sqrt(v) / math.sqrt(1 - b2**t) + hp["eps"]
    update = m / denom
    update *= hp["lr"] / (1 - b1**t)
    p -= update


def _layer_views(flat: np.ndarray, base: int, layout: ZeroLayout, l: int) -> tuple[np.ndarray, np.ndarray]:
    """``(W_l, b_l)`` as views of ``flat`` (flat position ``x`` at ``flat[x − base]``)."""
    lo, w_stop, b_stop, _ = layout.layers[l]
    w_in, w_out = layout.layer_widths[l], layout.layer_widths[l + 1]
    return flat[lo - base:w_stop - base].reshape(w_in, w_out), flat[w_stop - base:b_stop - base]


def reduce_scatter_add_(sender: int, owners: Sequence[ZeroWorker], layout: ZeroLayout, lo: int, hi: int,
                        values: np.ndarray, base: int, dest: Locator, log: list[dict], *, step: int, phase: str,
                        layer: int | None) -> None:
    """Worker ``sender``'s values on ``[lo, hi)`` (``values[x - base]``) added into each owner's shard, piece by piece.

    Owner ``j`` receives the piece ``[lo, hi) ∩ S_j`` (the sender's own piece does not travel) and adds it where
    ``dest`` locates it. Run for every worker in turn, the owners' shards hold the sum in worker order; the
    caller divides by ``N`` once the last has sent (with zero-initialised shards: the arithmetic of
    :func:`reduce_scatter_mean_`, bit for bit).
    """
    for j, a, b in layout.pieces(lo, hi):
        piece = values[a - base:b - base]
        if j != sender:
            piece = send_message(log, piece, step=step, phase=phase, layer=layer, sender=sender, receiver=j)
        out, out_base = dest(owners[j])
        out[a - out_base:b - out_base] += piece


def layer_by_layer_pass(x: np.ndarray, num_layers: int,
                        fetch: Callable[[Sequence[int], str], dict[int, Layer]], release: Callable[[int], None],
                        loss_gradient: Callable[[np.ndarray], np.ndarray],
                        emit: Callable[[int, np.ndarray, np.ndarray], None], segment_size: int | None = None) -> None:
    r"""One worker's forward and backward pass over its rows ``x: (rows, w_0)``, one layer at a time.

    The schedule of ZeRO-3 (and of every stage: the hooks decide what a layer costs):

    - ``fetch(ls, phase) → {l: {"W", "b"}}`` the layers ``ls``, in the compute dtype: before layer ``l``'s forward
      (``phase = "forward all-gather"``) and before each backward unit (``"backward all-gather"``): one layer, or
      with ``segment_size`` a checkpoint segment, whose layers serve its rebuild and its backward;
    - ``release(l)`` when the pass is done with layer ``l``'s fetched copy: after its forward, after its backward
      (the pass drops its own references then);
    - ``loss_gradient(Ŷ) → ∂/∂Ŷ`` once, between the passes;
    - ``emit(l, dW, db)`` layer ``l``'s gradient as soon as it is made (layers ``L-1 … 0``), then dropped.

    Plain, the pass keeps every layer's input :math:`a_0 … a_{L-1}`; checkpointed (segments of ``segment_size``
    layers, Chen et al. 2016) it keeps each segment's first input and rebuilds the others in the backward. The
    layer operations are :func:`~trainsys.memtrain.checkpointing.deep_mlp_forward`'s and ``_backward``'s
    (``linear_forward``, ``relu_forward``, ``linear_backward``, ``first_linear_backward``, ``relu_backward``, in
    their order), so the gradients are theirs — and the checkpointed functions' — bit for bit.
    """
    L, seg = num_layers, segment_size

    def forward(layer: Layer, a: np.ndarray, l: int) -> np.ndarray:
        z = linear_forward(a, layer["W"], layer["b"])  # (rows, w_{l+1})
        return relu_forward(z) if l < L - 1 else z

    kept, a = [], x  # plain: every layer's input; checkpointed: each segment's first input
    for l in range(L):
        if seg is None or l % seg == 0:
            kept.append(a)
        layer = fetch([l], "forward all-gather")[l]
        a = forward(layer, a, l)
        del layer
        release(l)
    g = loss_gradient(a)  # (rows, d_out)
    del a
    units = [(l, l + 1) for l in range(L)] if seg is None else [(b, min(b + seg, L)) for b in range(0, L, seg)]
    for first, last in reversed(units):
        layers = fetch(range(first, last), "backward all-gather")
        inputs = kept if seg is None else [kept.pop()]
        if seg is not None:
            for l in range(first, last - 1):  # rebuild the segment's inputs from its first
                inputs.append(forward(layers[l], inputs[-1], l))
        for l in range(last - 1, first - 1, -1):
            a_l = inputs.pop()
            if l == 0:
                dW, db = first_linear_backward(g, a_l)  # (w_0, w_1), (w_1,)
            else:
                dA, dW, db = linear_backward(g, a_l, layers[l]["W"])  # dA: (rows, w_l)
                g = relu_backward(dA, a_l)  # mask 1[a_l > 0]
                del dA
            del layers[l], a_l
            release(l)
            emit(l, dW, db)
            del dW, db


# --- the simulation -----------------------------------------------------------------------------------
def step_batch(X: np.ndarray, Y: np.ndarray, batch_size: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """Step ``t``'s batch: rows ``[i B, (i+1) B)`` with ``i = t mod ⌊n/B⌋`` (in order, epoch after epoch)."""
    i = step % (X.shape[0] // batch_size)
    return X[i * batch_size:(i + 1) * batch_size], Y[i * batch_size:(i + 1) * batch_size]


def _validate(params: object, X: object, Y: object, stage: object, num_workers: object, steps: object,
              batch_size: object, hp: object) -> tuple:
    stage = _require_stage(stage)
    X = require_float_array("X", X, ndim=2)
    Y = require_float_array("Y", Y, ndim=2)
    for name, array in (("X", X), ("Y", Y)):
        if array.dtype != np.float32:
            raise TypeError(f"{name} must be float32 (the simulation trains in float32), got {describe(array)}")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X and Y must have the same number of rows, got {X.shape} and {Y.shape}")
    params = validate_deep_params(params, X)
    for l, layer in enumerate(params):
        for key in ("W", "b"):
            if layer[key].dtype != np.float32:
                raise TypeError(f"params[{l}][{key!r}] must be float32, got {describe(layer[key])}")
    if Y.shape[1] != params[-1]["W"].shape[1]:
        raise ValueError(f"Y.shape[1] ({Y.shape[1]}) must equal the network's output width "
                         f"({params[-1]['W'].shape[1]})")
    steps = require_int("steps", steps, minimum=1)
    batch_size = require_int("batch_size", batch_size, minimum=1, maximum=X.shape[0])
    N = require_int("num_workers", num_workers, minimum=1)
    if N > batch_size:
        raise ValueError(f"num_workers must be <= batch_size ({batch_size}): a worker without examples has no "
                         f"loss; got {N}")
    hp = validate_adam_hp(TORCH_ADAM_DEFAULTS if hp is None else hp)
    return params, X, Y, stage, N, steps, batch_size, hp


def train_zero(params: Sequence[Layer], X: np.ndarray, Y: np.ndarray, *, stage: int, num_workers: int, steps: int,
               batch_size: int, hp: Mapping[str, float] | None = None) -> dict:
    r"""Train the deep MLP ``params`` for ``steps`` Adam steps with ``num_workers`` simulated workers at ZeRO ``stage``.

    ``params``: Part 3's list of float32 layers ``{"W": (w_l, w_{l+1}), "b": (w_{l+1},)}`` (not mutated;
    every worker starts from its copy, or at stage 3 its shard, of it — setup sends nothing);
    ``X: (n, d_in)``, ``Y: (n, d_out)`` float32; step ``t`` uses :func:`step_batch` (``batch_size`` rows),
    split over the workers by :func:`~trainsys.memtrain.accumulation.micro_batch_bounds` (shard sizes
    differ by at most one); ``hp``: Adam's ``lr, beta1, beta2, eps`` (default ``torch.optim.Adam``'s).
    The loss is the MSE of Part 3 (mean over examples and outputs), recorded before each update.

    Returns ``{"stage", "num_workers", "layout", "losses", "final_params", "log", "workers",
    "peak_bytes", "bytes_sent_per_step"}``: ``losses[t]`` (float), ``final_params`` (a list of new layer
    dicts, read from worker 0 at stages 0–2 and from the shards at stage 3), ``log`` (every message),
    ``workers`` (the :class:`ZeroWorker` objects at the end), ``peak_bytes[k][cls]`` (worker ``k``'s
    largest bytes of class ``cls`` over the steps) and ``bytes_sent_per_step[t][k]``. Raises when
    ``stage`` is not 0–3, ``num_workers < 1`` or ``> batch_size``, ``steps < 1``, ``batch_size`` is not in
    ``1..n``, the arrays are not float32 or do not fit ``params``, or ``hp`` is invalid.
    """
    params, X, Y, stage, N, steps, B, hp = _validate(params, X, Y, stage, num_workers, steps, batch_size, hp)
    lay = zero_layout([params[0]["W"].shape[0]] + [layer["W"].shape[1] for layer in params], N)
    L, s, P = len(params), lay.shard, lay.padded
    init = np.zeros(P, np.float32)  # the initial flat parameters, padded (used only to initialise the workers)
    for l, layer in enumerate(params):
        W, b = _layer_views(init, 0, lay, l)
        W[...], b[...] = layer["W"], layer["b"]

    workers = [ZeroWorker(k) for k in range(N)]
    log: list[dict] = []
    for w in workers:
        a, b = lay.shard_range(w.rank)
        if stage == 0:
            w.hold("parameters", "full", init[:lay.psi].copy())
            w.hold("optimizer_states", "m", np.zeros(lay.psi, np.float32))
            w.hold("optimizer_states", "v", np.zeros(lay.psi, np.float32))
        else:
            if stage == 3:
                w.hold("parameters", "shard", init[a:b].copy())  # (s,): its own shard only
            else:
                w.hold("parameters", "full", init.copy())  # (P,): replicated, padded
            w.hold("optimizer_states", "m", np.zeros(s, np.float32))
            w.hold("optimizer_states", "v", np.zeros(s, np.float32))
    del init

    def params_of(w: ZeroWorker) -> tuple[np.ndarray, int]:
        return w.get("parameters", "full"), 0

    def shard_of(cls: str, name: str) -> Locator:
        return lambda w: (w.get(cls, name), lay.shard_range(w.rank)[0])

    def fetch(w: ZeroWorker, t: int) -> Callable[[Sequence[int], str], dict[int, Layer]]:
        def layers(ls: Sequence[int], phase: str) -> dict[int, Layer]:
            out = {}
            for l in ls:
                if stage == 3:  # all-gather R_l into a fresh buffer, held until release
                    lo, _, _, hi = lay.layers[l]
                    buf = w.hold("parameters", f"layer {l}", np.empty(hi - lo, np.float32))
                    gather_to_(w.rank, workers, lay, lo, hi, shard_of("parameters", "shard"), buf, lo, log, step=t,
                               phase=phase, layer=l)
                    out[l] = dict(zip(("W", "b"), _layer_views(buf, lo, lay, l)))
                else:
                    out[l] = dict(zip(("W", "b"), _layer_views(w.get("parameters", "full"), 0, lay, l)))
            return out
        return layers

    def release(w: ZeroWorker) -> Callable[[int], None]:
        return lambda l: w.release("parameters", f"layer {l}") if stage == 3 else None

    def emit(w: ZeroWorker, t: int) -> Callable[[int, np.ndarray, np.ndarray], None]:
        def gradient(l: int, dW: np.ndarray, db: np.ndarray) -> None:
            if stage <= 1:  # into the full gradient
                W_grad, b_grad = _layer_views(w.get("gradients", "full"), 0, lay, l)
                W_grad[...], b_grad[...] = dW, db
                return
            lo, _, _, hi = lay.layers[l]  # stages 2, 3: reduce-scatter this layer's gradients now, then free them
            buf = w.hold("gradients", "layer", np.zeros(hi - lo, np.float32))  # the padding has gradient 0
            W_grad, b_grad = _layer_views(buf, lo, lay, l)
            W_grad[...], b_grad[...] = dW, db
            reduce_scatter_add_(w.rank, workers, lay, lo, hi, buf, lo, shard_of("gradients", "shard"), log, step=t,
                                phase="gradient reduce-scatter", layer=l)
            w.release("gradients", "layer")
        return gradient

    losses, peaks = [], [{c: 0 for c in CLASSES} for _ in range(N)]
    for t in range(steps):
        Xb, Yb = step_batch(X, Y, B, t)
        bounds = micro_batch_bounds(B, N)
        for w in workers:
            w.reset_peaks()
            if stage <= 1:
                w.hold("gradients", "full", np.zeros(P, np.float32))
            else:
                w.hold("gradients", "shard", np.zeros(s, np.float32))

        # each worker's forward and backward (layer_by_layer_pass), one after the other; worker k's gradient is
        # (N / B) S_k, so the workers' mean is the batch's; the loss is read by the driver, not sent
        d_out, loss_sum = Yb.shape[1], 0.0
        for w, (a, b) in zip(workers, bounds):
            def loss_gradient(Y_hat: np.ndarray, y: np.ndarray = Yb[a:b]) -> np.ndarray:
                nonlocal loss_sum
                diff = Y_hat - y  # (n_k, d_out)
                loss_sum += float(np.sum(diff.astype(np.float64) ** 2)) / d_out
                return diff * (2.0 * N / (B * d_out))  # ∂/∂Ŷ_k of (N/B) · Σ over the worker's examples of ℓ_e
            layer_by_layer_pass(Xb[a:b], L, fetch(w, t), release(w), loss_gradient, emit(w, t))
        losses.append(loss_sum / B)
        if stage >= 2:  # every worker has sent: each shard holds the sum in worker order
            for w in workers:
                w.get("gradients", "shard")[...] /= np.float32(N)

        # gradient exchange (stages 0, 1) and Adam
        if stage == 0:
            ring_all_reduce_mean_(workers, lambda w: (w.get("gradients", "full"), 0), log, t)
        elif stage == 1:
            reduce_scatter_mean_(workers, lay, 0, P, lambda w: (w.get("gradients", "full"), 0),
                                 lambda w: (w.get("gradients", "full"), 0), log, step=t,
                                 phase="gradient reduce-scatter", layer=None)
        for w in workers:
            w.adam_steps += 1
            a, b = lay.shard_range(w.rank)
            m, v = w.get("optimizer_states", "m"), w.get("optimizer_states", "v")
            if stage == 0:
                p, grad = w.get("parameters", "full"), w.get("gradients", "full")[:lay.psi]
            elif stage == 1:
                p, grad = w.get("parameters", "full")[a:b], w.get("gradients", "full")[a:b]
            elif stage == 2:
                p, grad = w.get("parameters", "full")[a:b], w.get("gradients", "shard")
            else:
                p, grad = w.get("parameters", "shard"), w.get("gradients", "shard")
            adam_update_(p, grad, m, v, w.adam_steps, hp)
        if stage in (1, 2):
            all_gather_(workers, lay, 0, P, params_of, params_of, log, step=t, phase="parameter all-gather",
                        layer=None)
        for w in workers:
            w.release("gradients", "full" if stage <= 1 else "shard")
            for c in CLASSES:
                peaks[w.rank][c] = max(peaks[w.rank][c], w.peak[c])

    if stage == 3:  # read the shards (an observer's view, not a collective of the training)
        flat = np.concatenate([w.get("parameters", "shard") for w in workers])
    else:
        flat = workers[0].get("parameters", "full")
    final = [{key: array.copy() for key, array in zip(("W", "b"), _layer_views(flat, 0, lay, l))} for l in range(L)]
    return {"stage": stage, "num_workers": N, "layout": lay, "losses": losses, "final_params": final, "log": log,
            "workers": workers, "peak_bytes": peaks,
            "bytes_sent_per_step": bytes_sent_per_worker_per_step(log, N, steps)}


def bytes_sent_per_worker_per_step(log: Sequence[Mapping], num_workers: int, steps: int) -> list[list[int]]:
    """``out[t][k]``: the bytes worker ``k`` sent during step ``t``, summed from a :func:`send_message` log."""
    N = require_int("num_workers", num_workers, minimum=1)
    T = require_int("steps", steps, minimum=1)
    if not isinstance(log, (list, tuple)):
        raise TypeError(f"log must be a list of message dicts, got {describe(log)}")
    out = [[0] * N for _ in range(T)]
    for i, message in enumerate(log):
        if not isinstance(message, Mapping) or not set(LOG_KEYS) <= set(message):
            raise ValueError(f"log[{i}] must be a dict with the keys {LOG_KEYS}, got {describe(message)}")
        t = require_int(f"log[{i}]['step']", message["step"], minimum=0, maximum=T - 1)
        k = require_int(f"log[{i}]['sender']", message["sender"], minimum=0, maximum=N - 1)
        out[t][k] += require_int(f"log[{i}]['bytes']", message["bytes"], minimum=0)
    return out
