r"""Module 1, Part 6 — ZeRO stage 1: each worker keeps and updates only its 1/N of Adam's state.

Adam (Kingma & Ba 2015; ``torch.optim.Adam`` with its defaults, no weight decay) keeps two arrays the
size of the parameters. With :math:`g_t` the gradient at step :math:`t = 1, 2, \dots`:

.. math::

    m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t,\quad v_t = \beta_2 v_{t-1} + (1-\beta_2) g_t^2,\quad
    \theta_t = \theta_{t-1} - \frac{\text{lr}}{1-\beta_1^t}\cdot
               \frac{m_t}{\sqrt{v_t}/\sqrt{1-\beta_2^t} + \varepsilon}.

Adam is elementwise, so the flat parameter vector can be cut into ``N`` contiguous shards and worker
``k`` can update shard ``k`` alone, with ``m`` and ``v`` for that shard only. One step (Rajbhandari et al.
2020, "ZeRO"): **reduce-scatter** the gradients (worker ``k`` receives the workers' mean gradient on its
shard), **local Adam** on the shard, **all-gather** the updated parameter shards. Communication equals
one all-reduce (reduce-scatter + all-gather, 2Ψ); optimizer memory per worker drops from
:math:`K\Psi` to :math:`K\Psi/N` (K = 12 bytes per parameter with mixed precision: fp32 master, m, v).

Flat order: :func:`flatten_params` / :func:`unflatten_params` (from
:mod:`trainsys.memtrain.data_parallel`, re-exported here): the dict's key order, each array raveled.
Padding rule (:func:`partition_optimizer_state`): the flat length ``Ψ`` is padded with zeros to
``N·s``, ``s = ceil(Ψ/N)``; worker ``k`` owns ``[k s, (k+1) s)``, so every shard has ``s`` elements and
the last worker(s) own the ``N s − Ψ`` padding positions, which stay 0 (their gradient, m and v are 0).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from trainsys._validation import (
    describe,
    require_float_array,
    require_float_tree,
    require_int,
    require_keys,
    require_real,
    require_same_shape,
    require_same_tree,
)
from trainsys.memtrain.data_parallel import flatten_params, unflatten_params

ADAM_HP_KEYS: tuple[str, ...] = ("lr", "beta1", "beta2", "eps")
"""The keys of an Adam hyper-parameter dict ``hp``."""

TORCH_ADAM_DEFAULTS: dict[str, float] = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
"""``torch.optim.Adam``'s defaults (``betas=(0.9, 0.999)``, ``weight_decay=0``)."""

STATE_KEYS: tuple[str, ...] = ("m", "v", "step")
"""The keys of an Adam state (whole, :func:`init_adam_state`, or one worker's shard)."""


def validate_adam_hp(hp: object) -> dict[str, float]:
    """Check ``hp``: exactly :data:`ADAM_HP_KEYS`, ``lr > 0``, ``0 ≤ beta1, beta2 < 1``, ``eps > 0``."""
    require_keys("hp", hp, ADAM_HP_KEYS)
    out = {"lr": require_real("hp['lr']", hp["lr"], strictly_positive=True),
           "eps": require_real("hp['eps']", hp["eps"], strictly_positive=True)}
    for key in ("beta1", "beta2"):
        beta = require_real(f"hp[{key!r}]", hp[key], minimum=0.0)
        if beta >= 1:
            raise ValueError(f"hp[{key!r}] must be < 1 (the moment would never forget), got {beta}")
        out[key] = beta
    return out


def state_dtype(dtype: np.dtype) -> np.dtype:
    """Adam's state dtype for parameters of ``dtype``: float32 for float16/float32, float64 for float64."""
    return np.result_type(dtype, np.float32)


# --- Lesson 31 -------------------------------------------------------------------------------------
def init_adam_state(params: Mapping[str, np.ndarray]) -> dict:
    """Adam's initial state: ``{"m": zeros tree, "v": zeros tree, "step": 0}``.

    ``m[key]`` and ``v[key]`` are new zero arrays of ``params[key]``'s shape, in float32 (float64 when the
    parameter is float64: :func:`state_dtype`) — the optimizer state stays in float32 even for float16
    parameters, the ``K = 12`` of ZeRO's accounting. ``m`` and ``v`` never share memory with each other or
    with ``params``; ``step`` is the Python int 0 (no update taken yet). ``params`` is not mutated.
    """
    params = require_float_tree("params", params)
    return {"m": {key: np.zeros(p.shape, state_dtype(p.dtype)) for key, p in params.items()},
            "v": {key: np.zeros(p.shape, state_dtype(p.dtype)) for key, p in params.items()},
            "step": 0}


# --- Lesson 32 -------------------------------------------------------------------------------------
def partition_optimizer_state(flat_numel: int, num_workers: int) -> list[tuple[int, int]]:
    """Contiguous, equal shards of the padded flat vector: ``[(k s, (k+1) s) for k in range(N)]``.

    ``s = ceil(flat_numel / N)``; the flat vector is padded with zeros to ``N s`` elements, so positions
    ``≥ flat_numel`` are padding: worker ``k`` owns the real elements ``[min(k s, Ψ), min((k+1) s, Ψ))``,
    and the last worker(s) own fewer real elements (possibly none when ``N > Ψ``), never more. Equal
    shards are what reduce-scatter and all-gather need. Raises when ``flat_numel < 1`` or
    ``num_workers < 1`` (``ValueError``) or either is not an integer (``TypeError``).
    """
    numel = require_int("flat_numel", flat_numel, minimum=1)
    N = require_int("num_workers", num_workers, minimum=1)
    s = -(-numel // N)  # ceil(numel / N)
    return [(k * s, (k + 1) * s) for k in range(N)]


def _validate_state_shard(state: object, shape: tuple[int, ...], name: str, expected: str
                          ) -> tuple[np.ndarray, np.ndarray, int]:
    require_keys(name, state, STATE_KEYS)
    m = require_float_array(f"{name}['m']", state["m"])
    v = require_float_array(f"{name}['v']", state["v"])
    for key, array in (("m", m), ("v", v)):
        if array.shape != shape:
            raise ValueError(f"{name}[{key!r}] must have shape {shape} ({expected}), got {array.shape}")
    return m, v, require_int(f"{name}['step']", state["step"], minimum=0)


# --- Lesson 33 -------------------------------------------------------------------------------------
def local_shard_adam_update(param_shard: np.ndarray, grad_shard: np.ndarray, state_shard: Mapping,
                            hp: Mapping[str, float]) -> tuple[np.ndarray, dict]:
    r"""One Adam step on one worker's shard, with bias correction (module docstring's equations).

    ``param_shard``, ``grad_shard``, ``state_shard["m"]``, ``state_shard["v"]``: float arrays of one
    shape (any shape; ``(s,)`` in ZeRO); ``state_shard["step"]``: the number of steps taken so far ``t−1``
    (an int ≥ 0); ``hp``: :data:`ADAM_HP_KEYS` (:func:`validate_adam_hp`). Returns
    ``(new_param_shard, new_state_shard)``: new arrays (``param_shard``'s dtype; ``m`` and ``v`` in their
    own dtype) and ``{"m", "v", "step": t}``. Nothing is mutated. The order of operations is
    ``torch.optim.Adam``'s (``denom = sqrt(v)/sqrt(1−β2^t) + eps``, ``step_size = lr/(1−β1^t)``).
    """
    p = require_float_array("param_shard", param_shard)
    g = require_float_array("grad_shard", grad_shard)
    require_same_shape("grad_shard", g, "param_shard", p)
    m, v, step = _validate_state_shard(state_shard, p.shape, "state_shard", "the shape of param_shard")
    hp = validate_adam_hp(hp)
    t = step + 1
    b1, b2 = hp["beta1"], hp["beta2"]
    m_new = (b1 * m + (1 - b1) * g).astype(m.dtype, copy=False)  # first moment, (s,)
    v_new = (b2 * v + (1 - b2) * g * g).astype(v.dtype, copy=False)  # second moment, (s,)
    step_size = hp["lr"] / (1 - b1**t)  # bias correction of m
    denom = np.sqrt(v_new) / math.sqrt(1 - b2**t) + hp["eps"]  # bias correction of v, then eps
    p_new = (p - step_size * (m_new / denom)).astype(p.dtype, copy=False)
    return p_new, {"m": m_new, "v": v_new, "step": t}


def adam_step(params: Mapping[str, np.ndarray], grads: Mapping[str, np.ndarray], state: Mapping,
              hp: Mapping[str, float]) -> tuple[dict[str, np.ndarray], dict]:
    """Unsharded Adam on a whole parameter dict (the baseline ZeRO must equal): new params, new state."""
    require_same_tree("params", params, "grads", grads)
    require_keys("state", state, STATE_KEYS)
    new_params, m, v = {}, {}, {}
    for key in params:
        shard = {"m": state["m"][key], "v": state["v"][key], "step": state["step"]}
        new_params[key], new = local_shard_adam_update(params[key], grads[key], shard, hp)
        m[key], v[key] = new["m"], new["v"]
    return new_params, {"m": m, "v": v, "step": state["step"] + 1}


# --- Lesson 34 -------------------------------------------------------------------------------------
def all_gather_param_shards(shards: Sequence[np.ndarray], flat_numel: int) -> np.ndarray:
    """Concatenate the ``N`` workers' parameter shards (``(s,)`` each, in worker order) and drop the padding.

    Returns a new 1-D array of the first ``flat_numel`` elements — the positions ``≥ flat_numel`` are
    padding by :func:`partition_optimizer_state`'s rule (never "strip trailing zeros": a real parameter
    can be 0). Raises unless the shards are 1-D float arrays of one length and dtype with
    ``ceil(flat_numel / N) == s``. Every worker would receive this same array; it is returned once.
    """
    if not isinstance(shards, (list, tuple)) or len(shards) == 0:
        raise ValueError(f"shards must be a non-empty list of 1-D arrays (one per worker), got {describe(shards)}")
    arrays = [require_float_array(f"shards[{k}]", a, ndim=1) for k, a in enumerate(shards)]
    for k, a in enumerate(arrays):
        if a.shape != arrays[0].shape or a.dtype != arrays[0].dtype:
            raise ValueError(f"shards[{k}] must match shards[0] ({arrays[0].shape}, {arrays[0].dtype}), "
                             f"got {describe(a)}")
    numel = require_int("flat_numel", flat_numel, minimum=1)
    s = arrays[0].size
    if partition_optimizer_state(numel, len(arrays))[0][1] != s:
        raise ValueError(f"flat_numel = {numel} over {len(arrays)} workers gives shards of "
                         f"{-(-numel // len(arrays))} elements, but the shards have {s}")
    return np.concatenate(arrays)[:numel].copy()  # (N s,) → (flat_numel,)


def reduce_scatter_mean(worker_flats: Sequence[np.ndarray], num_workers: int) -> list[np.ndarray]:
    """Worker ``k`` receives ``(Σ_j flat_j[k s:(k+1) s]) / N`` (summed in worker order): its shard of the mean.

    ``worker_flats``: ``N`` padded 1-D arrays of length ``N s``. Returns ``N`` new arrays of ``(s,)``.
    """
    N = require_int("num_workers", num_workers, minimum=1)
    if not isinstance(worker_flats, (list, tuple)) or len(worker_flats) != N:
        raise ValueError(f"worker_flats must be a list of {N} arrays, got {describe(worker_flats)}")
    s = worker_flats[0].size // N
    out = []
    for k in range(N):
        total = worker_flats[0][k * s:(k + 1) * s].copy()  # (s,)
        for flat in worker_flats[1:]:
            total += flat[k * s:(k + 1) * s]
        out.append(total / total.dtype.type(N))
    return out


def _padded_flat(tree: Mapping[str, np.ndarray], name: str, padded: int) -> np.ndarray:
    flat = flatten_params(tree, name)  # (Ψ,)
    return np.concatenate([flat, np.zeros(padded - flat.size, flat.dtype)])  # (N s,)


def init_sharded_adam_states(params: Mapping[str, np.ndarray], num_workers: int) -> list[dict]:
    """The ``N`` workers' initial state shards: ``{"m": zeros (s,), "v": zeros (s,), "step": 0}`` each."""
    flat = flatten_params(params)
    ranges = partition_optimizer_state(flat.size, num_workers)
    dtype = state_dtype(flat.dtype)
    return [{"m": np.zeros(b - a, dtype), "v": np.zeros(b - a, dtype), "step": 0} for a, b in ranges]


# --- Lesson 35 -------------------------------------------------------------------------------------
def zero_optimizer_step(params: Mapping[str, np.ndarray], worker_grads: Sequence[Mapping[str, np.ndarray]],
                        worker_states: Sequence[Mapping], hp: Mapping[str, float]
                        ) -> tuple[dict[str, np.ndarray], list[dict]]:
    r"""One ZeRO-1 Adam step across ``N = len(worker_grads)`` simulated workers.

    ``params``: the (replicated) parameter dict, one dtype; ``worker_grads[k]``: worker ``k``'s gradient
    dict, shaped like ``params`` and weighted so that the **mean** over workers is the step's gradient
    (equal shards: each worker's mean-loss gradient); ``worker_states[k]``: worker ``k``'s state shard
    ``{"m": (s,), "v": (s,), "step"}`` (:func:`init_sharded_adam_states`); ``hp``: :data:`ADAM_HP_KEYS`.

    1. reduce-scatter: worker ``k`` gets :math:`\bar g[k s:(k+1) s]`, :math:`\bar g = \frac1N\sum_j g_j`
       on the zero-padded flat gradients (:func:`reduce_scatter_mean`);
    2. local Adam on ``(θ_flat[k s:(k+1) s], ḡ_k, state_k)`` (:func:`local_shard_adam_update`);
    3. all-gather of the new shards, padding dropped (:func:`all_gather_param_shards`), unflattened.

    Returns ``(new_params, new_worker_states)`` — new arrays, nothing mutated — equal to unsharded Adam
    (:func:`adam_step` on the mean gradient; ``torch.optim.Adam``) to rounding. Raises when the lists'
    lengths differ, a gradient's keys or shapes differ from ``params``, or a state shard is not ``(s,)``.
    """
    if not isinstance(worker_grads, (list, tuple)) or len(worker_grads) == 0:
        raise ValueError(f"worker_grads must be a non-empty list of gradient dicts, got {describe(worker_grads)}")
    N = len(worker_grads)
    flat_params = flatten_params(params)  # (Ψ,) — validates params
    for k, grads in enumerate(worker_grads):
        require_same_tree("params", params, f"worker_grads[{k}]", grads)
    if not isinstance(worker_states, (list, tuple)) or len(worker_states) != N:
        raise ValueError(f"worker_states must be a list of {N} state shards (one per worker), "
                         f"got {describe(worker_states)}" + (f" of length {len(worker_states)}"
                                                            if isinstance(worker_states, (list, tuple)) else ""))
    ranges = partition_optimizer_state(flat_params.size, N)
    s, padded = ranges[0][1], ranges[-1][1]
    for k, state in enumerate(worker_states):
        _validate_state_shard(state, (s,), f"worker_states[{k}]",
                              f"ceil({flat_params.size}/{N}) = {s}: 1/N of the state")
    hp = validate_adam_hp(hp)
    theta = _padded_flat(params, "params", padded)  # (N s,)
    grad_shards = reduce_scatter_mean([_padded_flat(g, f"worker_grads[{k}]", padded)
                                       for k, g in enumerate(worker_grads)], N)  # N × (s,)
    new_shards, new_states = [], []
    for k, (a, b) in enumerate(ranges):  # each worker, on its own shard only
        p_k, state_k = local_shard_adam_update(theta[a:b], grad_shards[k], worker_states[k], hp)
        new_shards.append(p_k)
        new_states.append(state_k)
    flat_new = all_gather_param_shards(new_shards, flat_params.size)  # (Ψ,)
    return unflatten_params(flat_new, params), new_states


def optimizer_state_bytes(state: Mapping) -> int:
    """Bytes of the arrays of an Adam state, whole (trees) or one shard (arrays): ``Σ nbytes`` of m and v."""
    require_keys("state", state, STATE_KEYS)
    total = 0
    for key in ("m", "v"):
        part = state[key]
        arrays = part.values() if isinstance(part, Mapping) else [part]
        total += sum(require_float_array(f"state[{key!r}]", a).nbytes for a in arrays)
    return total


def optimizer_state_bytes_per_worker(worker_states: Sequence[Mapping]) -> list[int]:
    """:func:`optimizer_state_bytes` of each worker's shard: ``≈ 1/N`` of the unsharded state's (padding aside)."""
    if not isinstance(worker_states, (list, tuple)):
        raise TypeError(f"worker_states must be a list of state shards, got {describe(worker_states)}")
    return [optimizer_state_bytes(state) for state in worker_states]
