r"""Module 2, Part 6 — the DiLoCo training loop and the synchronous baseline it is measured against.

Algorithm 1 of Douillard et al. 2023, for ``T`` rounds:

.. math::

    \theta_k \leftarrow \text{InnerOpt}^{H}(\theta^{(t-1)}; D_k)\ \ (k = 1..K),\qquad
    \Delta^{(t)} = \theta^{(t-1)} - \tfrac1K\textstyle\sum_k \theta_k,\qquad
    \theta^{(t)} = \text{OuterOpt}(\theta^{(t-1)}, \Delta^{(t)}).

Each worker keeps its own AdamW state from round to round (never averaged, never reset). The
baseline spends the same compute — ``K`` workers, ``T · H`` steps each, one minibatch per worker per
step — but all-reduces the gradients after **every** step and applies one AdamW to their mean.

Both trainers return a *run record*: the validated config, every seed, per-round
metrics, wall time and the bytes communicated, counted from the arrays the workers hand to the
all-reduce (one parameter-sized tree per worker per communication). Bytes per inner step differ by
exactly ``H`` by construction; the records show what that costs in held-out quality.

Both trainers take an optional ``task``: ``None`` is the MLP classifier of Parts 1–5 (NumPy forward and
backward, one worker after another); a :class:`~trainsys.diloco.language_model.LanguageModelTask` trains
the course's GPT on text instead. The task supplies the run (data, θ⁽⁰⁾, generators), the workers' inner
steps, the baseline's gradients and the held-out metrics; the rounds, the pseudo-gradient, the outer
Nesterov step, the baseline's all-reduce and AdamW, and the byte count are this file's, for both.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from trainsys._validation import describe, require_generator, require_int, require_real
from trainsys.diloco.adamw import AdamWState, init_adamw_state, require_beta, validate_adamw_state
from trainsys.diloco.evaluation import classification_accuracy, evaluate_heldout_loss
from trainsys.diloco.model import (
    Params,
    cross_entropy_loss,
    init_model_params,
    make_classification_data,
    model_backward,
    model_forward,
    split_heldout,
)
from trainsys.diloco.outer import (
    OuterState,
    compute_outer_gradient,
    init_outer_optimizer,
    nesterov_outer_step,
    require_momentum,
    validate_outer_state,
)
from trainsys.diloco.params import average_params, clone_params, params_nbytes
from trainsys.diloco.sharding import (
    inner_optimizer_step,
    iid_shard_dataset,
    noniid_shard_dataset,
    run_inner_steps,
    sample_worker_batch,
    validate_inner_hp,
    validate_shard,
)


@dataclass(frozen=True)
class DiLoCoConfig:
    """Everything a run depends on. Defaults: a small problem that trains in about a second on one core.

    Data: ``n_examples`` points of ``make_classification_data`` (``d_in``, ``n_classes``,
    ``clusters_per_class``, ``class_sep``) from ``data_seed``; ``heldout_fraction`` held out first;
    the rest dealt to ``num_workers`` shards, ``"iid"`` or ``"noniid"`` (Dirichlet ``dirichlet_alpha``).
    Model: ``[d_in, *hidden_sizes, n_classes]``. DiLoCo: ``rounds`` (T) of ``inner_steps`` (H).
    Inner optimizer: ``inner_optimizer`` (``"adamw"`` or ``"sgd"``), ``inner_lr``, ``beta1``,
    ``beta2``, ``eps``, ``weight_decay``, ``batch_size`` per worker. Outer: ``outer_lr``,
    ``outer_momentum`` (Nesterov). ``seed`` drives initialisation and batch sampling.
    ``progress``: a tqdm bar over rounds — ``True``/``False``, or ``None`` for "only on a terminal".
    """

    n_examples: int = 2400
    d_in: int = 16
    n_classes: int = 8
    clusters_per_class: int = 2
    class_sep: float = 1.0
    heldout_fraction: float = 0.25
    sharding: str = "iid"
    dirichlet_alpha: float = 0.5
    data_seed: int = 0
    hidden_sizes: tuple[int, ...] = (64,)
    num_workers: int = 4
    inner_steps: int = 20
    rounds: int = 10
    inner_optimizer: str = "adamw"
    inner_lr: float = 3e-3
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1
    batch_size: int = 32
    outer_lr: float = 0.7
    outer_momentum: float = 0.9
    seed: int = 0
    progress: bool | None = None


CONFIG_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(DiLoCoConfig))


def config_fields(config: object, kind: type) -> dict:
    """The fields of dataclass ``kind`` as a dict: the defaults overridden by ``config`` (an instance of
    ``kind``, a dict of some of its fields, or ``None``). Raises ``TypeError`` for another type and
    ``ValueError`` naming unknown keys. Shared by :func:`validate_config` and the language model's config."""
    if config is None:
        config = {}
    if isinstance(config, kind):
        config = dataclasses.asdict(config)
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a {kind.__name__} or a dict of its fields, got {describe(config)}")
    fields = [f.name for f in dataclasses.fields(kind)]
    unknown = sorted(map(str, set(config) - set(fields)))
    if unknown:
        raise ValueError(f"config has unknown keys {unknown}; the fields are {fields}")
    return {**dataclasses.asdict(kind()), **config}


def check_optimizer_fields(c: dict) -> None:
    """Check (and normalise in place) the inner AdamW/SGD, outer Nesterov and progress fields of a config
    dict, raising ``TypeError``/``ValueError`` naming ``config['<field>']``."""
    name = "config[{!r}]".format
    if c["inner_optimizer"] not in ("adamw", "sgd"):
        raise ValueError(f"{name('inner_optimizer')} must be 'adamw' or 'sgd', got {c['inner_optimizer']!r}")
    for key in ("inner_lr", "eps", "outer_lr"):
        c[key] = require_real(name(key), c[key], strictly_positive=True)
    c["weight_decay"] = require_real(name("weight_decay"), c["weight_decay"], minimum=0.0)
    c["beta1"], c["beta2"] = require_beta(name("beta1"), c["beta1"]), require_beta(name("beta2"), c["beta2"])
    c["outer_momentum"] = require_momentum(c["outer_momentum"], name("outer_momentum"))
    if c["progress"] is not None and not isinstance(c["progress"], bool):
        raise TypeError(f"{name('progress')} must be True, False or None, got {describe(c['progress'])}")


def validate_config(config: DiLoCoConfig | Mapping | None = None) -> DiLoCoConfig:
    """A :class:`DiLoCoConfig` from a config, a dict of overrides of the defaults, or ``None``.

    Every field is checked up front, before any data is made: unknown keys, ``inner_steps`` (H) < 1,
    ``num_workers`` (k) < 1 or above the number of training examples, ``dirichlet_alpha <= 0``,
    a sharding other than ``"iid"``/``"noniid"``, and so on raise ``TypeError``/``ValueError`` naming
    the field as ``config['<field>']``.
    """
    c = config_fields(config, DiLoCoConfig)
    name = "config[{!r}]".format
    for key, low in (("n_examples", 2), ("d_in", 1), ("n_classes", 2), ("clusters_per_class", 1), ("num_workers", 1),
                     ("inner_steps", 1), ("rounds", 1), ("batch_size", 1), ("data_seed", 0), ("seed", 0)):
        c[key] = require_int(name(key), c[key], minimum=low)
    c["class_sep"] = require_real(name("class_sep"), c["class_sep"], minimum=0.0)
    c["heldout_fraction"] = require_real(name("heldout_fraction"), c["heldout_fraction"], strictly_positive=True)
    c["dirichlet_alpha"] = require_real(name("dirichlet_alpha"), c["dirichlet_alpha"], strictly_positive=True)
    if c["sharding"] not in ("iid", "noniid"):
        raise ValueError(f"{name('sharding')} must be 'iid' or 'noniid', got {c['sharding']!r}")
    hidden = c["hidden_sizes"]
    if isinstance(hidden, (str, bytes)) or not isinstance(hidden, Sequence):
        raise TypeError(f"{name('hidden_sizes')} must be a tuple of widths, got {describe(hidden)}")
    c["hidden_sizes"] = tuple(require_int(f"{name('hidden_sizes')}[{i}]", h, minimum=1) for i, h in enumerate(hidden))
    check_optimizer_fields(c)
    n_held = int(round(c["heldout_fraction"] * c["n_examples"]))
    n_train = c["n_examples"] - n_held
    if not 1 <= n_held < c["n_examples"]:
        raise ValueError(f"{name('heldout_fraction')} must leave examples on both sides, got {c['heldout_fraction']}")
    if c["num_workers"] > n_train:
        raise ValueError(f"{name('num_workers')} must be <= the {n_train} training examples, got {c['num_workers']}")
    return DiLoCoConfig(**c)


def inner_hp(config: DiLoCoConfig) -> dict[str, object]:
    """The inner hyper-parameter dict (:data:`~trainsys.diloco.sharding.INNER_HP_KEYS`) of a config."""
    return {"optimizer": config.inner_optimizer, "lr": config.inner_lr, "beta1": config.beta1,
            "beta2": config.beta2, "eps": config.eps, "weight_decay": config.weight_decay,
            "batch_size": config.batch_size}


def derived_seed(seed: int, *path: int) -> int:
    """A 32-bit seed for one role of a run (``(0,)`` initialisation, ``(1, k)`` worker ``k``), from ``SeedSequence``."""
    return int(np.random.SeedSequence([seed, *path]).generate_state(1)[0])


def setup_run(config: DiLoCoConfig | Mapping | None) -> dict[str, object]:
    """Everything both trainers share, made in a fixed order from the validated config.

    ``data_rng = default_rng(data_seed)`` makes the data set, then the held-out split (before anything
    is fitted), then the shards. The initial parameters come from ``derived_seed(seed, 0)`` and worker
    ``k``'s batches from ``derived_seed(seed, 1, k)``. Returns ``{"config", "seeds", "X_train",
    "y_train", "X_heldout", "y_heldout", "shards", "params", "worker_rngs"}``.
    """
    cfg = validate_config(config)
    data_rng = np.random.default_rng(cfg.data_seed)
    X, y = make_classification_data(cfg.n_examples, cfg.d_in, cfg.n_classes, data_rng,
                                    clusters_per_class=cfg.clusters_per_class, class_sep=cfg.class_sep)
    X_train, y_train, X_held, y_held = split_heldout(X, y, cfg.heldout_fraction, data_rng)
    if cfg.sharding == "iid":
        shards = iid_shard_dataset(X_train, y_train, cfg.num_workers, data_rng)
    else:
        shards = noniid_shard_dataset(X_train, y_train, cfg.num_workers, data_rng, cfg.dirichlet_alpha)
    seeds = {"data_seed": cfg.data_seed, "seed": cfg.seed, "init_seed": derived_seed(cfg.seed, 0),
             "worker_seeds": [derived_seed(cfg.seed, 1, k) for k in range(cfg.num_workers)]}
    params = init_model_params([cfg.d_in, *cfg.hidden_sizes, cfg.n_classes], np.random.default_rng(seeds["init_seed"]))
    return {"config": cfg, "seeds": seeds, "X_train": X_train, "y_train": y_train, "X_heldout": X_held,
            "y_heldout": y_held, "shards": shards, "params": params,
            "worker_rngs": [np.random.default_rng(s) for s in seeds["worker_seeds"]]}


def _progress(cfg: DiLoCoConfig, desc: str) -> tqdm:
    return tqdm(total=cfg.rounds, desc=desc, unit="round", leave=False,
                disable=None if cfg.progress is None else not cfg.progress)


def _metrics(run: Mapping, params: Params) -> dict[str, float]:
    task = run.get("task")
    if task is not None:
        return task.evaluate(run, params)
    return {"heldout_loss": evaluate_heldout_loss(params, run["X_heldout"], run["y_heldout"]),
            "heldout_accuracy": classification_accuracy(params, run["X_heldout"], run["y_heldout"])}


def _logged(run: Mapping, r: int) -> bool:
    task = run.get("task")
    return task is None or task.log_round(run, r)


def _entry(run: Mapping, params: Params, r: int, steps: int, train_loss: float, sent: int, total: int) -> dict:
    return {"round": r, "steps": steps, "train_loss": train_loss, **_metrics(run, params),
            "bytes_communicated": sent, "cumulative_bytes": total}


def _setup(config: object, task: object) -> dict[str, object]:
    return setup_run(config) if task is None else task.setup_run(config)


def _record(algorithm: str, run: Mapping, params: Params, history: list, initial: dict, start: float) -> dict:
    cfg = run["config"]
    return {"algorithm": algorithm, "config": dataclasses.asdict(cfg), "seeds": run["seeds"], "initial": initial,
            "history": history, "final_params": params, "wall_time_s": time.perf_counter() - start,
            "shard_sizes": run["shard_sizes"] if "shard_sizes" in run else [len(s[1]) for s in run["shards"]],
            "examples_processed": cfg.num_workers * cfg.rounds * cfg.inner_steps * cfg.batch_size}


def _initial(run: Mapping) -> dict[str, float]:
    return _metrics(run, run["params"])


# --- Lesson 25 -------------------------------------------------------------------------------------
def diloco_round(
    global_params: Params,
    outer_state: OuterState,
    worker_states: Sequence[AdamWState],
    shards: Sequence[tuple[np.ndarray, np.ndarray]],
    rngs: Sequence[np.random.Generator],
    *,
    H: int,
    inner_hp: Mapping,
    outer_lr: float,
    outer_momentum: float,
) -> tuple[Params, OuterState, list[AdamWState], dict[str, object]]:
    """One communication round of DiLoCo for ``k = len(shards)`` workers.

    Worker ``k`` (in order 0, 1, …): a clone of ``global_params``, its own ``worker_states[k]``,
    ``run_inner_steps`` on ``shards[k]`` with ``rngs[k]``. Then the one communication: the pseudo-gradient
    ``compute_outer_gradient(global_params, [θ_0, …])`` and ``nesterov_outer_step``. Returns
    ``(new_global, new_outer_state, new_worker_states, info)``: the workers' states are carried to
    the next round as they are (not averaged, not reset); ``info = {"train_loss": mean of the k·H
    minibatch losses, "worker_losses": (k, H) array, "bytes_communicated": Σ_k bytes of θ_k}`` — the
    bytes every worker hands to the all-reduce, once per worker. ``rngs`` are advanced; nothing else is mutated.
    """
    if isinstance(shards, Mapping) or not isinstance(shards, Sequence) or len(shards) == 0:
        raise TypeError(f"shards must be a non-empty list of (X_k, y_k) pairs, got {describe(shards)}")
    k = len(shards)
    for name, seq in (("worker_states", worker_states), ("rngs", rngs)):
        if isinstance(seq, Mapping) or not isinstance(seq, Sequence) or len(seq) != k:
            raise ValueError(f"{name} must be a list with one entry per shard ({k}), got {describe(seq)}"
                             + (f" of length {len(seq)}" if isinstance(seq, Sequence) else ""))
    validate_outer_state(outer_state, global_params)
    for i in range(k):
        validate_shard(f"shards[{i}]", shards[i])
        validate_adamw_state(worker_states[i], global_params, f"worker_states[{i}]")
        require_generator(f"rngs[{i}]", rngs[i])
    H = require_int("H", H, minimum=1)
    inner_hp = validate_inner_hp(inner_hp)
    require_real("outer_lr", outer_lr, strictly_positive=True)  # refused before any worker trains
    require_momentum(outer_momentum, "outer_momentum")
    new_workers, new_states, losses = [], [], []
    for i in range(k):
        theta, state, worker_losses = run_inner_steps(clone_params(global_params), worker_states[i], shards[i], H,
                                                      inner_hp, rngs[i])
        new_workers.append(theta)
        new_states.append(state)
        losses.append(worker_losses)
    new_global, new_outer, info = outer_round(global_params, outer_state, new_workers, np.stack(losses), outer_lr,
                                              outer_momentum)
    return new_global, new_outer, new_states, info


def outer_round(
    global_params: Params, outer_state: OuterState, workers: Sequence[Params], worker_losses: np.ndarray,
    outer_lr: float, outer_momentum: float,
) -> tuple[Params, OuterState, dict[str, object]]:
    """A round's communication, after the workers' inner steps: the pseudo-gradient and the Nesterov step.

    ``workers``: the ``k`` trees :math:`\theta_k`; ``worker_losses``: their ``(k, H)`` minibatch losses.
    Returns ``(new_global, new_outer_state, info)`` with :func:`diloco_round`'s ``info``.
    """
    sent = sum(params_nbytes(theta) for theta in workers)  # one tree per worker into the all-reduce
    outer_grad = compute_outer_gradient(global_params, list(workers))
    new_global, new_outer = nesterov_outer_step(global_params, outer_state, outer_grad, outer_lr, outer_momentum)
    info = {"train_loss": float(worker_losses.mean()), "worker_losses": worker_losses, "bytes_communicated": int(sent)}
    return new_global, new_outer, info


# --- Lesson 26 -------------------------------------------------------------------------------------
def train_diloco(config: DiLoCoConfig | Mapping | None, task: object | None = None) -> dict[str, object]:
    """DiLoCo for ``config.rounds`` rounds of ``config.inner_steps`` (H) inner steps: a run record.

    ``task=None``: the MLP (``config`` a :class:`DiLoCoConfig`); a
    :class:`~trainsys.diloco.language_model.LanguageModelTask`: the GPT (``config`` an ``LMConfig``; the
    workers' inner steps are the task's, the outer step this loop's; history entries every
    ``eval_every`` steps and at the last round, with ``heldout_perplexity`` as well).

    :func:`setup_run`, then one :func:`init_adamw_state` per worker and :func:`init_outer_optimizer`,
    then for ``r = 1..T`` a :func:`diloco_round` followed by the held-out evaluation. The record:
    ``{"algorithm": "diloco", "config": dict, "seeds", "initial": {"heldout_loss", "heldout_accuracy"},
    "history": [one dict per round with HISTORY_KEYS], "final_params", "wall_time_s", "shard_sizes",
    "examples_processed"}``; ``history[r-1]["steps"] = r·H`` inner steps per worker so far.
    """
    start = time.perf_counter()
    run = _setup(config, task)
    cfg: DiLoCoConfig = run["config"]
    params, outer_state = run["params"], init_outer_optimizer(run["params"])
    states = ([init_adamw_state(params) for _ in range(cfg.num_workers)] if task is None
              else task.init_worker_states(params, cfg.num_workers))
    hp, history, total = inner_hp(cfg), [], 0
    with _progress(cfg, "DiLoCo") as bar:
        for r in range(1, cfg.rounds + 1):
            if task is None:
                params, outer_state, states, info = diloco_round(
                    params, outer_state, states, run["shards"], run["worker_rngs"], H=cfg.inner_steps, inner_hp=hp,
                    outer_lr=cfg.outer_lr, outer_momentum=cfg.outer_momentum)
            else:
                workers, states, losses = task.inner_steps(run, params, states, cfg.inner_steps, hp)
                params, outer_state, info = outer_round(params, outer_state, workers, losses, cfg.outer_lr,
                                                        cfg.outer_momentum)
            total += info["bytes_communicated"]
            if _logged(run, r):
                history.append(_entry(run, params, r, r * cfg.inner_steps, info["train_loss"],
                                      info["bytes_communicated"], total))
            bar.update()
    return _record("diloco", run, params, history, _initial(run), start)


# --- Lesson 27 -------------------------------------------------------------------------------------
def train_synchronous_baseline(config: DiLoCoConfig | Mapping | None, task: object | None = None) -> dict[str, object]:
    """Synchronous data parallelism with the same data, seeds and compute as :func:`train_diloco`.

    ``T · H`` steps; at each step worker ``k`` (in order) draws a minibatch with ``rngs[k]`` from its
    shard and computes its gradient; the ``k`` gradients are all-reduced (:func:`average_params`; every
    worker's gradient tree is counted, once per worker) and one inner optimizer (AdamW, the config's
    hyper-parameters) steps the single model. Outer lr and momentum are unused. Metrics are logged
    every ``H`` steps (a "round"), so the record has the same layout as DiLoCo's, with
    ``"algorithm": "synchronous"`` and ``H`` times the bytes per round. ``task`` as in :func:`train_diloco`
    (the task computes the ``k`` gradients; the all-reduce and the AdamW step are this loop's).
    """
    start = time.perf_counter()
    run = _setup(config, task)
    cfg: DiLoCoConfig = run["config"]
    params, hp = run["params"], inner_hp(cfg)
    state, history, total = init_adamw_state(params), [], 0
    with _progress(cfg, "synchronous") as bar:
        for r in range(1, cfg.rounds + 1):
            losses, sent = [], 0
            for _ in range(cfg.inner_steps):
                grads = []
                if task is not None:
                    grads, step_losses = task.gradients(run, params)
                    losses.extend(step_losses)
                for shard, rng in zip(run["shards"], run["worker_rngs"]) if task is None else ():
                    X_b, y_b = sample_worker_batch(shard, cfg.batch_size, rng)
                    logits, cache = model_forward(params, X_b)  # (batch, C)
                    losses.append(cross_entropy_loss(logits, y_b))
                    grads.append(model_backward(params, cache, y_b))
                sent += sum(params_nbytes(g) for g in grads)  # one tree per worker into the all-reduce
                params, state = inner_optimizer_step(params, average_params(grads), state, hp)
            total += sent
            if _logged(run, r):
                history.append(_entry(run, params, r, r * cfg.inner_steps, float(np.mean(losses)), sent, total))
            bar.update()
    return _record("synchronous", run, params, history, _initial(run), start)
