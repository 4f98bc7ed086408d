r"""What a transformer's training step really holds, measured on CPU, tensor by tensor.

The transformer explorer (:mod:`trainsys.memtrain.transformer_memory`) *predicts* four classes of bytes per
worker (Rajbhandari et al. 2020, §3); this module *measures* them on the course's GPT
(:class:`trainsys.models.gpt.GPT`, explicit attention, pre-norm, 4× GELU MLP, tied head) so that every
prediction can carry its error:

- **activations** — every tensor autograd saves for backward, seen through
  ``torch.autograd.graph.saved_tensors_hooks``: each *storage* counts once (Q, K, V of one projection, a
  view and its base, the three linear layers reading one LayerNorm output share a storage), parameters and
  their views are excluded (they are parameters), and the 16-bit copies of weights that ``torch.autocast``
  makes for the linear layers are reported apart (``weight_copies``). ``stored`` is what is alive when the
  forward pass ends; ``transient`` is the largest amount saved *during* the backward pass by recomputation
  (``torch.utils.checkpoint``) that was not already stored — one layer's rebuilt tensors.
- **parameters, gradients, optimizer states** — the unique storages of ``model.parameters()``, of their
  ``.grad`` after ``backward`` and of ``optimizer.state`` after ``step`` (Adam: two moments and a 4-byte
  ``step`` per parameter tensor).

Precision: ``"fp32"`` or ``"autocast_bf16"`` (``torch.autocast("cpu", dtype=torch.bfloat16)``; the weights,
gradients and Adam state stay float32). Recomputation: ``"none"``; ``"selective"`` — the attention core
(:func:`~trainsys.models.gpt.causal_attention`: scores, mask, softmax, dropout, ·V) is checkpointed, so only
its inputs Q, K, V are stored; ``"full"`` — every block is checkpointed, only its input is stored. The
reentrant checkpoint is used because it stores its inputs with ``save_for_backward``, which the hooks see
(the non-reentrant one keeps them in a closure, invisible to them).

Per rank under ZeRO (:func:`measure_sharded`, gloo, 2–4 processes): stage 1 with
``torch.distributed.optim.ZeroRedundancyOptimizer`` (whole parameters assigned to ranks), stage 3 with
FSDP2's ``fully_shard`` (every parameter split along its first dimension, padded to a multiple of the
world size).
"""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
import tempfile
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from trainsys._validation import describe, require_int
from trainsys.models import gpt as gpt_module
from trainsys.models.gpt import GPT, GPTConfig

PRECISIONS = ("fp32", "autocast_bf16")
RECOMPUTE = ("none", "selective", "full")
STAGES = (1, 3)
_VIEW_FUNCTIONS = {"TBackward0", "PermuteBackward0", "ViewBackward0", "TransposeBackward0", "ExpandBackward0"}


def _choice(name: str, value: object, options: tuple) -> str:
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{name} must be one of {list(options)}, got {value!r}")
    return value


def _storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors`` (a tied weight or a view counts once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            local = t.to_local() if hasattr(t, "to_local") else t
            storage = local.untyped_storage()
            seen[storage.data_ptr() if storage.nbytes() else id(storage)] = storage.nbytes()
    return sum(seen.values())


def _is_weight_copy(t: torch.Tensor) -> bool:
    """True for autocast's cast of a parameter (``ToCopyBackward0`` straight after ``AccumulateGrad``)."""
    fn = t.grad_fn
    while fn is not None and fn.name() in _VIEW_FUNCTIONS:
        fn = fn.next_functions[0][0]
    if fn is None or fn.name() != "ToCopyBackward0":
        return False
    source = fn.next_functions[0][0]
    while source is not None and source.name() in _VIEW_FUNCTIONS:  # the tied head casts W.T, a view
        source = source.next_functions[0][0]
    return source is not None and hasattr(source, "variable")


class _Held:
    """What the pack hook returns: the saved tensor; its end of life tells the ledger the bytes are free."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


class SavedTensorLedger:
    """Counts the storages autograd saves, while they live: use as a context manager around forward *and*
    backward, and call :meth:`start_backward` between them.

    ``stored`` (after :meth:`start_backward`): ``{"activations": bytes, "weight_copies": bytes}`` alive at the
    end of the forward pass; ``transient``: the peak of bytes saved during backward in storages that were not
    already alive (recomputation). Storages of ``exclude`` (the parameters) are never counted.
    """

    def __init__(self, exclude: torch.nn.Module) -> None:
        self._exclude = {p.untyped_storage().data_ptr() for p in exclude.parameters()}
        self._live: dict[int, list] = {}  # storage pointer -> [bytes, holders alive, phase, kind]
        self.phase = "forward"
        self.stored: dict[str, int] = {}
        self.transient = 0
        self._transient_now = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda held: held.tensor)

    def __enter__(self) -> SavedTensorLedger:
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)

    def _pack(self, t: torch.Tensor) -> object:
        storage = t.untyped_storage()
        ptr, nbytes = storage.data_ptr(), storage.nbytes()
        if nbytes == 0 or ptr in self._exclude:
            return _Held(t)
        entry = self._live.get(ptr)
        if entry is None:
            kind = "weight_copies" if _is_weight_copy(t) else "activations"
            entry = self._live[ptr] = [nbytes, 0, self.phase, kind]
            if self.phase == "backward":
                self._transient_now += nbytes
                self.transient = max(self.transient, self._transient_now)
        entry[1] += 1
        held = _Held(t)
        weakref.finalize(held, self._release, ptr)
        return held

    def _release(self, ptr: int) -> None:
        entry = self._live.get(ptr)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            del self._live[ptr]
            if entry[2] == "backward":
                self._transient_now -= entry[0]

    def start_backward(self) -> None:
        """Freeze ``stored`` (what the forward pass left alive) and count what backward adds from now on."""
        self.stored = {"activations": 0, "weight_copies": 0}
        for nbytes, _, _, kind in self._live.values():
            self.stored[kind] += nbytes
        self.phase = "backward"


@contextmanager
def recomputation(model: GPT, mode: str) -> Iterator[None]:
    """Run ``model`` with activation recomputation ``mode`` (:data:`RECOMPUTE`) inside the block.

    ``"full"`` checkpoints every block's forward; ``"selective"`` checkpoints the attention core
    (:func:`trainsys.models.gpt.causal_attention`, looked up by the attention module at call time).
    """
    _choice("mode", mode, RECOMPUTE)
    checkpoint = functools.partial(torch.utils.checkpoint.checkpoint, use_reentrant=True)
    if mode == "full":
        for block in model.blocks:
            block.forward = functools.partial(checkpoint, type(block).forward.__get__(block))
    original = gpt_module.causal_attention
    if mode == "selective":
        def checkpointed(q, k, v, *, dropout: float = 0.0, training: bool = False):
            return checkpoint(functools.partial(original, dropout=dropout, training=training), q, k, v)
        gpt_module.causal_attention = checkpointed
    try:
        yield
    finally:
        gpt_module.causal_attention = original
        for block in model.blocks:
            block.__dict__.pop("forward", None)


def _batch(config: GPTConfig, batch_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, config.vocab_size, (batch_size, config.context + 1), generator=g)  # (B, T+1)
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()  # (B, T) inputs, (B, T) next tokens


def training_step(config: GPTConfig, batch_size: int, precision: str, seed: int = 0, device: str = "cpu"):
    """``(model, step)``: a seeded ``GPT(config)`` with Adam on ``device`` and a function running one step on a
    fixed ``(batch_size, context)`` batch — forward under autocast for ``"autocast_bf16"``, then
    ``between()``, backward, ``optimizer.step()`` and, with ``zero_grad``, ``zero_grad(set_to_none=True)``."""
    torch.manual_seed(seed)
    model = GPT(config).to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    idx, targets = (x.to(device) for x in _batch(config, batch_size, seed))

    def step(between=lambda: None, zero_grad: bool = True) -> None:
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=precision == "autocast_bf16"):
            _, loss = model(idx, targets)
        between()
        loss.backward()
        optimizer.step()
        if zero_grad:
            optimizer.zero_grad(set_to_none=True)

    step.optimizer = optimizer
    return model, step


def _require_config(config: object) -> GPTConfig:
    if not isinstance(config, GPTConfig):
        raise TypeError(f"config must be a trainsys.models.gpt.GPTConfig, got {describe(config)}")
    return config


def measure_step(config: GPTConfig, batch_size: int, precision: str = "fp32", recompute: str = "none",
                 seed: int = 0) -> dict[str, int]:
    """Bytes of one Adam training step of ``GPT(config)`` on a ``(batch_size, config.context)`` batch.

    Returns ``parameters``, ``gradients``, ``optimizer_states`` (unique storages), ``activations_stored``
    (saved for backward, alive when forward ends, weights' copies excluded), ``weight_copies`` (autocast's
    16-bit copies of weights saved for backward), ``activations_transient`` (recomputed during backward, at
    its peak) and ``activations`` (the sum of the last three). Seeded: the same call gives the same bytes.
    Raises ``TypeError``/``ValueError`` naming a bad argument.
    """
    _require_config(config)
    b = require_int("batch_size", batch_size, minimum=1)
    _choice("precision", precision, PRECISIONS)
    _choice("recompute", recompute, RECOMPUTE)
    model, step = training_step(config, b, precision, seed)
    with SavedTensorLedger(model) as ledger, recomputation(model, recompute):
        step(ledger.start_backward, zero_grad=False)
    optimizer = step.optimizer
    params = list(model.parameters())
    out = {"parameters": _storage_bytes(params), "gradients": _storage_bytes(p.grad for p in params),
           "optimizer_states": _storage_bytes(v for s in optimizer.state.values() for v in s.values()),
           "activations_stored": ledger.stored["activations"], "weight_copies": ledger.stored["weight_copies"],
           "activations_transient": ledger.transient}
    out["activations"] = out["activations_stored"] + out["weight_copies"] + out["activations_transient"]
    return out


# --- per rank under ZeRO-1 and FSDP2 (gloo) ---------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sharded_worker(rank: int, world_size: int, port: int, stage: int, config: dict, batch_size: int,
                    out_dir: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        cfg = GPTConfig(**config)
        torch.manual_seed(0)
        model = GPT(cfg).train()
        if stage == 1:
            from torch.distributed.optim import ZeroRedundancyOptimizer
            optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3)
            local_state = lambda: optimizer.optim.state  # noqa: E731 (this rank's shard of Adam)
        else:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard
            mesh = init_device_mesh("cpu", (world_size,))
            for block in model.blocks:
                fully_shard(block, mesh=mesh)
            fully_shard(model, mesh=mesh)
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
            local_state = lambda: optimizer.state  # noqa: E731
        idx, targets = _batch(cfg, batch_size, seed=rank)
        _, loss = model(idx, targets)
        loss.backward()
        optimizer.step()
        params = list(model.parameters())
        result = {"parameters": _storage_bytes(params), "gradients": _storage_bytes(p.grad for p in params),
                  "optimizer_states": _storage_bytes(v for s in local_state().values() for v in s.values())}
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def measure_sharded(config: GPTConfig, world_size: int, stage: int, batch_size: int = 2) -> list[dict[str, int]]:
    """Per-rank bytes of parameters, gradients and Adam state after one step under ZeRO ``stage`` (1 or 3).

    Starts ``world_size`` (2–4) processes on gloo (127.0.0.1, a free port). Stage 1:
    ``ZeroRedundancyOptimizer`` over Adam (gradients and parameters whole on every rank); stage 3: FSDP2's
    ``fully_shard`` on every block and the model (parameters, gradients and Adam state sharded). Returns one
    dict per rank. Raises ``ValueError``/``TypeError`` naming a bad argument, ``RuntimeError`` if a rank fails.
    """
    _require_config(config)
    n = require_int("world_size", world_size, minimum=2, maximum=4)
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {list(STAGES)}, got {stage!r}")
    b = require_int("batch_size", batch_size, minimum=1)
    fields = {k: getattr(config, k) for k in ("vocab_size", "context", "n_layer", "n_head", "n_embd", "dropout")}
    port = _free_port()
    with tempfile.TemporaryDirectory() as out:
        # Fresh interpreters (not multiprocessing's spawn, which re-imports the caller's __main__).
        procs = [subprocess.Popen([sys.executable, "-c", "import sys, json; from trainsys.memtrain.measured_memory "
                                   "import _sharded_worker as w; w(*json.loads(sys.argv[1]))",
                                   json.dumps([r, n, port, stage, fields, b, out])],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(n)]
        logs = []
        try:
            for proc in procs:
                logs.append(proc.communicate(timeout=300)[0])
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        failed = [(r, proc.returncode) for r, proc in enumerate(procs) if proc.returncode != 0]
        if failed:
            raise RuntimeError(f"ranks {failed} (rank, exit code) failed under ZeRO stage {stage}: {logs[failed[0][0]][-2000:]}")
        return [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(n)]


# --- the explorer against the measurement ---------------------------------------------------------------
CATEGORIES = ("parameters", "gradients", "optimizer_states", "activations")


def explorer_config(config: GPTConfig, batch_size: int, precision: str = "fp32", recompute: str = "none",
                    zero_stage: int = 0, num_workers: int = 1) -> dict:
    """The :func:`~trainsys.memtrain.transformer_memory.transformer_memory` configuration of ``GPT(config)``:
    GPT-2 style (LayerNorm, biases, GELU, learned positions, tied head), FFN ``4·n_embd``, no head sharing."""
    _require_config(config)
    arch = {"style": "gpt2", "num_layers": config.n_layer, "hidden_size": config.n_embd,
            "num_heads": config.n_head, "num_kv_heads": config.n_head, "ffn_size": 4 * config.n_embd,
            "vocab_size": config.vocab_size, "tied_embeddings": True, "max_positions": config.context}
    return {"model": "custom", "architecture": arch, "seq_len": config.context, "micro_batch_size": batch_size,
            "grad_accum_steps": 1, "num_workers": num_workers, "precision": precision, "recompute": recompute,
            "zero_stage": zero_stage, "device_gb": 80}


def relative_error(predicted: float, measured: float) -> float:
    """``(predicted − measured) / measured``; 0 when both are 0. Raises ``ValueError`` if only ``measured`` is 0."""
    if measured == 0:
        if predicted == 0:
            return 0.0
        raise ValueError(f"measured is 0 but predicted is {predicted}: no relative error exists")
    return (predicted - measured) / measured


def compare_step(config: GPTConfig, batch_size: int, precision: str = "fp32", recompute: str = "none",
                 seed: int = 0) -> dict:
    """Measure one step (:func:`measure_step`) and predict it (``transformer_memory`` with CPU dropout masks).

    Returns ``{"measured": {...}, "predicted": {category: bytes}, "error": {category: relative error}}`` for
    :data:`CATEGORIES`.
    """
    from trainsys.memtrain.transformer_memory import transformer_memory

    measured = measure_step(config, batch_size, precision, recompute, seed)
    predicted = transformer_memory(explorer_config(config, batch_size, precision, recompute), dropout_masks="dtype")
    pred = {c: predicted[c] for c in CATEGORIES}
    return {"measured": measured, "predicted": pred,
            "error": {c: relative_error(pred[c], measured[c]) for c in CATEGORIES}}


def zero1_partition(numels: list[int], world_size: int) -> list[list[int]]:
    """The tensors (their element counts) ``ZeroRedundancyOptimizer`` gives each rank: largest first, each to the
    rank with the fewest elements so far (the first such rank on a tie) — whole tensors, so a rank can hold more
    than :math:`1/N`. Its Adam state is then ``8·sum + 4·len`` bytes in fp32 (two moments, a ``step`` scalar)."""
    n = require_int("world_size", world_size, minimum=1)
    ranks: list[list[int]] = [[] for _ in range(n)]
    sizes = [0] * n
    for numel in sorted(numels, reverse=True):
        r = sizes.index(min(sizes))
        ranks[r].append(numel)
        sizes[r] += numel
    return ranks


def compare_sharded(config: GPTConfig, world_size: int, stage: int, batch_size: int = 2) -> dict:
    """Per-rank bytes under ZeRO ``stage`` (:func:`measure_sharded`) against the explorer's per-worker bytes.

    The error of each category is that of the fullest rank (the one that must fit). At stage 1 also
    ``partition_optimizer_states``: each rank's Adam bytes predicted from :func:`zero1_partition`."""
    from trainsys.memtrain.transformer_memory import transformer_memory

    ranks = measure_sharded(config, world_size, stage, batch_size)
    predicted = transformer_memory(explorer_config(config, batch_size, "fp32", "none", stage, world_size))
    states = CATEGORIES[:3]
    worst = {c: max(r[c] for r in ranks) for c in states}
    out = {"ranks": ranks, "measured": worst, "predicted": {c: predicted[c] for c in states},
           "error": {c: relative_error(predicted[c], worst[c]) for c in states}}
    if stage == 1:
        numels = [p.numel() for p in GPT(config).parameters()]
        out["partition_optimizer_states"] = [8 * sum(r) + 4 * len(r) for r in zero1_partition(numels, world_size)]
    return out


# --- the peak of a whole step (torch.profiler's memory timeline) ------------------------------------------
def measure_step_peak(config: GPTConfig, batch_size: int, precision: str = "fp32", recompute: str = "none",
                      seed: int = 0) -> dict:
    """The peak of live CPU bytes during one steady-state Adam step, with what was alive at that moment.

    One warm-up step creates Adam's state; the second step (forward, backward, ``step``,
    ``zero_grad(set_to_none=True)``) runs under ``torch.profiler.profile(profile_memory=True)``, whose memory
    timeline (``export_memory_timeline``; categories inferred by the profiler from the graph) gives the bytes
    of every allocation alive at every instant. Returns ``peak`` (bytes) and ``at_peak``: bytes per category
    (``parameter``, ``optimizer_state``, ``input``, ``temporary``, ``activation``, ``gradient``,
    ``autograd_detail`` — gradients of activations in flight —, ``unknown``) at the instant of the peak.
    """
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import _CATEGORY_TO_INDEX

    _require_config(config)
    b = require_int("batch_size", batch_size, minimum=1)
    _choice("precision", precision, PRECISIONS)
    _choice("recompute", recompute, RECOMPUTE)
    model, step = training_step(config, b, precision, seed)
    with recomputation(model, recompute):
        step()
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                     with_stack=True) as prof:
            step()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "timeline.json")
        prof.export_memory_timeline(str(path), "cpu")
        _, sizes = json.loads(path.read_text())  # per instant: [0, bytes per category in _CATEGORY_TO_INDEX order]
    totals = [sum(row) for row in sizes]
    at = sizes[max(range(len(totals)), key=totals.__getitem__)]
    names = {index: (category.name.lower() if category is not None else "unknown")
             for category, index in _CATEGORY_TO_INDEX.items()}
    return {"peak": max(totals), "at_peak": {names[i]: at[i + 1] for i in sorted(names)}}
