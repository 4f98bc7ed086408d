r"""Module 2, Part 4 — shards of the training set and one worker's ``H`` local steps.

Each of the ``k`` workers owns a shard ``(X_k, y_k)`` of the training set and, between two
communications, runs ``H`` steps of its inner optimizer on minibatches of its own shard only.

*IID* shards are a random partition: every shard sees every class in about the same proportion.
*Non-IID* shards follow the label-skew recipe of Hsu et al. 2019: for every class ``c`` draw worker
proportions :math:`p_c \sim \mathrm{Dir}(\alpha \mathbf 1_k)` and deal that class's examples out
accordingly. Small :math:`\alpha` (0.1) gives each worker a few dominant classes; large
:math:`\alpha` (100) approaches IID. DiLoCo's own experiments run on non-IID shards.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from trainsys._validation import (
    describe,
    require_axis_match,
    require_float_array,
    require_generator,
    require_int,
    require_real,
)
from trainsys.diloco.adamw import AdamWState, adamw_step, require_beta, validate_adamw_state
from trainsys.diloco.model import (
    Params,
    cross_entropy_loss,
    model_backward,
    model_forward,
    validate_labels,
    validate_model_params,
)

Shard = tuple[np.ndarray, np.ndarray]

INNER_HP_KEYS: tuple[str, ...] = ("optimizer", "lr", "beta1", "beta2", "eps", "weight_decay", "batch_size")
"""The keys of an inner hyper-parameter dict ``hp`` (:data:`DEFAULT_INNER_HP`)."""

DEFAULT_INNER_HP: dict[str, object] = {
    "optimizer": "adamw", "lr": 3e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "batch_size": 32,
}
"""DiLoCo's inner AdamW (betas (0.9, 0.95), weight decay 0.1) with a learning rate for this small MLP."""

MAX_DIRICHLET_DRAWS = 100
"""Attempts :func:`noniid_shard_dataset` makes before giving up on giving every worker an example."""


def validate_inner_hp(hp: object) -> dict[str, object]:
    """Require an inner hyper-parameter dict with exactly :data:`INNER_HP_KEYS`.

    ``optimizer`` is ``"adamw"`` or ``"sgd"`` (plain SGD, used to show that ``H = 1`` is data
    parallelism); ``lr > 0``; betas in ``[0, 1)``; ``eps > 0``; ``weight_decay >= 0``; ``batch_size >= 1``.
    """
    if not isinstance(hp, Mapping):
        raise TypeError(f"hp must be a dict with keys {list(INNER_HP_KEYS)}, got {describe(hp)}")
    if set(hp) != set(INNER_HP_KEYS):
        missing, unexpected = sorted(set(INNER_HP_KEYS) - set(hp)), sorted(map(str, set(hp) - set(INNER_HP_KEYS)))
        raise ValueError(f"hp must have exactly the keys {sorted(INNER_HP_KEYS)}; missing {missing}, "
                         f"unexpected {unexpected}")
    if hp["optimizer"] not in ("adamw", "sgd"):
        raise ValueError(f"hp['optimizer'] must be 'adamw' or 'sgd', got {hp['optimizer']!r}")
    require_real("hp['lr']", hp["lr"], strictly_positive=True)
    require_beta("hp['beta1']", hp["beta1"])
    require_beta("hp['beta2']", hp["beta2"])
    require_real("hp['eps']", hp["eps"], strictly_positive=True)
    require_real("hp['weight_decay']", hp["weight_decay"], minimum=0.0)
    require_int("hp['batch_size']", hp["batch_size"], minimum=1)
    return dict(hp)


def validate_shard(name: str, shard: object, params: Mapping | None = None) -> Shard:
    """Require ``(X_k: (n_k, d_in) float, y_k: (n_k,) int)`` with ``n_k >= 1``.

    With ``params``, also the model's input width and labels in ``[0, C)`` for its ``C`` outputs.
    """
    if not isinstance(shard, (tuple, list)) or len(shard) != 2:
        raise TypeError(f"{name} must be a pair (X_k, y_k), got {describe(shard)}")
    X = require_float_array(f"{name}[0]", shard[0], ndim=2)
    C = None
    if params is not None:
        L = validate_model_params(params)
        require_axis_match(f"{name}[0]", X, 1, "params['W0']", params["W0"], 0, "input-feature")
        C = params[f"b{L - 1}"].shape[0]
    y = validate_labels(f"{name}[1]", shard[1], X.shape[0], C)
    if X.shape[0] == 0:
        raise ValueError(f"{name} must hold at least one example, got an empty shard")
    return X, y


def _validate_dataset(X: object, y: object, num_workers: object) -> tuple[np.ndarray, np.ndarray, int]:
    X = require_float_array("X", X, ndim=2)
    y = validate_labels("y", y)
    require_axis_match("X", X, 0, "y", y, 0, "example")
    k = require_int("num_workers", num_workers, minimum=1, maximum=max(X.shape[0], 1))
    if X.shape[0] == 0:
        raise ValueError("X must hold at least one example, got 0")
    return X, y, k


# --- Lesson 16 -------------------------------------------------------------------------------------
def iid_shard_dataset(X: np.ndarray, y: np.ndarray, num_workers: int, rng: np.random.Generator) -> list[Shard]:
    """A random partition into ``num_workers`` shards ``[(X_k, y_k), ...]`` whose sizes differ by at most one.

    One permutation of the ``n`` indices is drawn from ``rng`` and cut with ``np.array_split`` (the
    first ``n mod k`` shards get one more example); each shard keeps its examples in the order of ``X``
    (its indices sorted). Shards are disjoint, cover every example, and are copies.
    Raises ``ValueError`` when ``num_workers < 1`` or ``> n`` (a worker with no data).
    """
    X, y, k = _validate_dataset(X, y, num_workers)
    rng = require_generator("rng", rng)
    parts = np.array_split(rng.permutation(X.shape[0]), k)
    return [(X[np.sort(idx)], y[np.sort(idx)]) for idx in parts]  # (n_k, d_in), (n_k,)


# --- Lesson 17 -------------------------------------------------------------------------------------
def noniid_shard_dataset(
    X: np.ndarray, y: np.ndarray, num_workers: int, rng: np.random.Generator, alpha: float
) -> list[Shard]:
    r"""Label-skewed shards: each class dealt out in proportions :math:`p_c \sim \mathrm{Dir}(\alpha\mathbf 1_k)`.

    For each class present in ``y``, in increasing order: shuffle its indices (``rng.permutation``),
    draw ``p = rng.dirichlet(alpha * ones(k))``, and cut at ``floor(cumsum(p)[:-1] * n_c)``, worker
    ``i`` taking the ``i``-th piece. If some worker ends with no example the whole deal is redrawn
    (same ``rng``, up to :data:`MAX_DIRICHLET_DRAWS` times, then ``ValueError``). Each shard keeps its
    examples in the order of ``X``. Raises ``ValueError`` for ``alpha <= 0`` or ``num_workers`` outside ``[1, n]``.
    """
    X, y, k = _validate_dataset(X, y, num_workers)
    rng = require_generator("rng", rng)
    alpha = require_real("alpha", alpha, strictly_positive=True)
    for _ in range(MAX_DIRICHLET_DRAWS):
        pieces: list[list[np.ndarray]] = [[] for _ in range(k)]
        for c in np.unique(y):
            idx = rng.permutation(np.flatnonzero(y == c))  # (n_c,)
            p = rng.dirichlet(np.full(k, alpha))  # (k,), sums to 1
            cuts = (np.cumsum(p)[:-1] * len(idx)).astype(int)  # (k - 1,)
            for i, part in enumerate(np.split(idx, cuts)):
                pieces[i].append(part)
        owned = [np.sort(np.concatenate(parts)) for parts in pieces]
        if min(len(o) for o in owned) > 0:
            return [(X[o], y[o]) for o in owned]
    raise ValueError(f"alpha = {alpha} with {k} workers left some worker without data in {MAX_DIRICHLET_DRAWS} "
                     "draws; use a larger alpha or fewer workers")


# --- Lesson 18 -------------------------------------------------------------------------------------
def sample_worker_batch(shard: Shard, batch_size: int, rng: np.random.Generator) -> Shard:
    """A minibatch ``(X_b: (batch_size, d_in), y_b: (batch_size,))`` drawn uniformly from the shard.

    Indices ``rng.integers(0, n_k, size=batch_size)`` — with replacement, i.i.d. from the shard's
    examples (the stochastic-gradient model; any ``batch_size >= 1`` works, even above ``n_k``).
    ``X_b[i]`` and ``y_b[i]`` come from the same example. ``rng`` is advanced; the shard is not mutated.
    """
    X, y = validate_shard("shard", shard)
    batch_size = require_int("batch_size", batch_size, minimum=1)
    rng = require_generator("rng", rng)
    idx = rng.integers(0, X.shape[0], size=batch_size)  # (batch_size,)
    return X[idx], y[idx]


def inner_optimizer_step(params: Params, grads: Params, state: AdamWState, hp: Mapping) -> tuple[Params, AdamWState]:
    r"""``hp["optimizer"]``'s step: :func:`~trainsys.diloco.adamw.adamw_step`, or SGD with decoupled decay.

    SGD: :math:`\theta(1-\eta\lambda) - \eta g`; its state keeps ``m``, ``v`` untouched and only counts steps.
    """
    if hp["optimizer"] == "adamw":
        return adamw_step(params, grads, state, hp["lr"], hp["beta1"], hp["beta2"], hp["eps"], hp["weight_decay"])
    decay = 1.0 - hp["lr"] * hp["weight_decay"]
    new = {k: (params[k] * decay - hp["lr"] * grads[k]).astype(params[k].dtype, copy=False) for k in params}
    return new, {"step": int(state["step"]) + 1, "m": state["m"], "v": state["v"]}


# --- Lesson 19 -------------------------------------------------------------------------------------
def local_train_step(
    params: Params, opt_state: AdamWState, batch: Shard, hp: Mapping
) -> tuple[Params, AdamWState, float]:
    """One inner step on one minibatch: forward, loss, backward, inner optimizer step.

    ``batch = (X_b, y_b)``; ``hp`` an inner hyper-parameter dict (:data:`INNER_HP_KEYS`;
    ``batch_size`` is not used here). Returns ``(new_params, new_opt_state, loss)`` with ``loss`` the
    minibatch's mean cross-entropy *before* the step. Nothing is mutated.
    """
    hp = validate_inner_hp(hp)
    validate_adamw_state(opt_state, params, "opt_state")
    X_b, y_b = validate_shard("batch", batch, params)
    logits, cache = model_forward(params, X_b)  # (batch, C)
    loss = cross_entropy_loss(logits, y_b)
    grads = model_backward(params, cache, y_b)
    new_params, new_state = inner_optimizer_step(params, grads, opt_state, hp)
    return new_params, new_state, loss


# --- Lesson 20 -------------------------------------------------------------------------------------
def run_inner_steps(
    params: Params, opt_state: AdamWState, shard: Shard, H: int, hp: Mapping, rng: np.random.Generator
) -> tuple[Params, AdamWState, np.ndarray]:
    """One worker's ``H`` inner steps, each :func:`sample_worker_batch` then :func:`local_train_step`.

    Batches of ``hp["batch_size"]`` rows. Returns ``(params_H, opt_state_H, losses)`` with
    ``losses: (H,)`` float64, the minibatch loss of each step before it was taken. ``rng`` (this
    worker's own generator) is advanced by ``H`` draws; ``params``, ``opt_state`` and ``shard`` are
    not mutated. Raises ``ValueError`` for ``H < 1`` and for labels outside the model's classes.
    """
    H = require_int("H", H, minimum=1)
    hp = validate_inner_hp(hp)
    validate_adamw_state(opt_state, params, "opt_state")
    shard = validate_shard("shard", shard, params)
    rng = require_generator("rng", rng)
    losses = np.empty(H, dtype=np.float64)
    for t in range(H):
        batch = sample_worker_batch(shard, hp["batch_size"], rng)
        params, opt_state, losses[t] = local_train_step(params, opt_state, batch, hp)
    return params, opt_state, losses


def shard_label_counts(shards: Sequence[Shard], n_classes: int) -> np.ndarray:
    """``(k, n_classes)`` table of how many examples of each class each shard holds (for the skew figures)."""
    n_classes = require_int("n_classes", n_classes, minimum=1)
    return np.stack([np.bincount(validate_shard(f"shards[{i}]", s)[1], minlength=n_classes)
                     for i, s in enumerate(shards)])
