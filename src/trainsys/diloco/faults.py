r"""Module 2, extension — DiLoCo with workers that miss rounds and with stale pseudo-gradients.

Douillard et al. 2023 (arXiv 2311.08105) study a compute pool whose number of workers changes during
training ("adaptive compute"); this file simulates two faults of that kind — workers that miss rounds,
and workers whose pseudo-gradient arrives rounds late — on top of :mod:`trainsys.diloco.loop` (same
data, seeds and inner steps).

**Missing workers.** In round :math:`t` let :math:`A_t \subseteq \{0..N-1\}` be the workers that
arrive. An absent worker does no inner step that round — its compute is lost, its AdamW state and
batch generator are kept as they were — and the outer step averages over the arrivals only:

.. math::

    \Delta^{(t)} = \frac{1}{|A_t|}\sum_{i \in A_t} \big(\theta^{(t-1)} - \theta_i\big),
    \qquad \theta^{(t)} = \text{OuterOpt}(\theta^{(t-1)}, \Delta^{(t)}).

Dividing by :math:`N` instead would shrink the step by :math:`|A_t|/N` as if the absent workers had
reported "no change". When :math:`A_t = \emptyset` there is nothing to apply: :math:`\theta` and the
outer (momentum) state are kept and the round is recorded with ``"outer_step_applied": False``.

**Stale pseudo-gradients.** A worker with staleness :math:`s` started its ``H`` inner steps from the
global model of :math:`s` rounds earlier and reports :math:`s` rounds late, so in round :math:`t` it
contributes :math:`\Delta_i = \theta^{(t-1-s)} - \theta_i` with :math:`\theta_i =
\text{InnerOpt}^H(\theta^{(t-1-s)})`. In the first rounds, where :math:`t-1-s < 0`, it starts from
:math:`\theta^{(0)}`: its effective staleness is :math:`\min(s, t-1)`, recorded per round.

*What a stale pseudo-gradient points at, and why it harms.* :math:`-\Delta_i` points from
:math:`\theta^{(t-1-s)}` to the point :math:`\theta_i` the worker reached from there — a descent
direction *of the old model*. It is applied at :math:`\theta^{(t-1)}`: with outer lr 1 and no
momentum the update lands at

.. math::

    \theta^{(t-1)} - \Delta_i = \theta_i + \big(\theta^{(t-1)} - \theta^{(t-1-s)}\big),

the worker's point shifted by the progress the global model already made in the last :math:`s`
rounds. Near a common minimiser :math:`\theta^\star` (:math:`\theta_i \approx \theta^\star`) the
update overshoots :math:`\theta^\star` by exactly that progress: the :math:`s` rounds of descent are
counted twice, and more so with outer momentum, which already carries them. Far from it the
direction is the descent direction at a point that is no longer where the model is (the gradient
differs by about :math:`\nabla^2 L\,(\theta^{(t-1)} - \theta^{(t-1-s)})`). The implementation
writes the same sum with "re-based" worker models :math:`\tilde\theta_i = \theta_i + (\theta^{(t-1)} -
\theta^{(t-1-s)})` (fresh workers: :math:`\tilde\theta_i = \theta_i`), so that
:math:`\Delta^{(t)} = \theta^{(t-1)} - \sum_i w_i\tilde\theta_i = \sum_i w_i \Delta_i` (exact in real arithmetic;
in float32 a stale worker's :math:`\tilde\theta_i` costs two extra roundings, a fresh one none, so that with
no fault the arithmetic is exactly ``train_diloco``'s).

*Staleness-aware weighting.* The asynchronous-SGD remedy of Zhang, Gupta, Lian and Liu 2016
("Staleness-Aware Async-SGD for Distributed Deep Learning", IJCAI) divides the learning rate of each
gradient by its staleness. Here a fresh contribution has :math:`s = 0`, so we use :math:`1/(1+s)`:
weight 1 when fresh, decreasing as :math:`1/s` for large :math:`s`. As DiLoCo applies one combined
outer step we put it in the average and renormalise over the arrivals,

.. math::

    w_i = \frac{1/(1+s_i)}{\sum_{j \in A_t} 1/(1+s_j)}, \qquad
    \Delta^{(t)} = \sum_{i \in A_t} w_i \Delta_i ,

(``stale_weighting="inverse"``; ``"none"`` keeps :math:`w_i = 1/|A_t|`). Renormalising keeps the
outer step's scale when every arrival is equally stale — the weights then equal the uniform ones —
and moves weight from stale to fresh contributions otherwise: it reduces the double counting above,
it does not remove it. Whether it helps on a given problem has to be measured: on the course's default problem
(``tests/test_m2_faults.py``) it removes most of the damage.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np

from trainsys._validation import describe, require_int, require_real
from trainsys.diloco.adamw import init_adamw_state
from trainsys.diloco.loop import (
    DiLoCoConfig,
    _entry,
    _initial,
    _progress,
    _record,
    derived_seed,
    inner_hp,
    setup_run,
)
from trainsys.diloco.outer import init_outer_optimizer, nesterov_outer_step
from trainsys.diloco.params import Params, average_params, clone_params, params_nbytes, subtract_params
from trainsys.diloco.sharding import run_inner_steps

STALE_WEIGHTINGS: tuple[str, ...] = ("none", "inverse")
r"""``"none"``: :math:`w_i = 1/|A_t|`; ``"inverse"``: :math:`w_i \propto 1/(1+s_i)`, renormalised (Zhang 2016)."""

FAULT_HISTORY_KEYS: tuple[str, ...] = ("arrived", "missed", "stale", "weights", "outer_step_applied",
                                       "worker_steps")
"""Keys each round's entry holds on top of :data:`~trainsys.diloco.evaluation.HISTORY_KEYS`."""


def _worker_id(name: str, value: object, N: int) -> int:
    return require_int(name, value, minimum=0, maximum=N - 1)


def validate_faults(
    N: int, T: int, miss_prob: object, schedule: object, staleness: object, stale_weighting: object
) -> tuple[float, dict[int, frozenset[int]] | None, dict[int, int], str]:
    """Check the fault arguments for ``N`` workers and ``T`` rounds; errors name the argument.

    ``miss_prob``: a real in ``[0, 1)``. ``schedule``: ``None`` or ``{round in 1..T: [absent worker ids
    in 0..N-1]}`` (no repeats), not combined with ``miss_prob > 0``. ``staleness``: ``None`` or
    ``{worker id: s >= 0}``. ``stale_weighting``: one of :data:`STALE_WEIGHTINGS`. Returns them normalised.
    """
    p = require_real("miss_prob", miss_prob, minimum=0.0)
    if p >= 1.0:
        raise ValueError(f"miss_prob must be in [0, 1) (at 1 no worker ever arrives), got {p}")
    sched = None
    if schedule is not None:
        if not isinstance(schedule, Mapping):
            raise TypeError(f"schedule must be a dict {{round: [absent worker ids]}}, got {describe(schedule)}")
        if p > 0:
            raise ValueError(f"schedule and miss_prob exclude each other: got a schedule and miss_prob = {p}")
        sched = {}
        for r, absent in schedule.items():
            r_int = require_int("schedule's round keys", r, minimum=1, maximum=T)
            if isinstance(absent, (str, bytes, Mapping)) or not isinstance(absent, (Sequence, set, frozenset)):
                raise TypeError(f"schedule[{r}] must be a list of worker ids, got {describe(absent)}")
            ids = [_worker_id(f"schedule[{r}][{j}]", w, N) for j, w in enumerate(absent)]
            if len(set(ids)) != len(ids):
                raise ValueError(f"schedule[{r}] must not repeat a worker id, got {sorted(ids)}")
            sched[r_int] = frozenset(ids)
    stale: dict[int, int] = {}
    if staleness is not None:
        if not isinstance(staleness, Mapping):
            raise TypeError(f"staleness must be a dict {{worker id: rounds late}}, got {describe(staleness)}")
        for w, s in staleness.items():
            stale[_worker_id("staleness's worker keys", w, N)] = require_int(f"staleness[{w}]", s, minimum=0)
    if stale_weighting not in STALE_WEIGHTINGS:
        raise ValueError(f"stale_weighting must be one of {list(STALE_WEIGHTINGS)}, got {stale_weighting!r}")
    return p, sched, stale, str(stale_weighting)


def arrival_weights(stale: Sequence[int], stale_weighting: str) -> list[float] | None:
    r"""The outer weights of the arrivals with effective staleness ``stale``: ``None`` means uniform ``1/|A_t|``.

    No arrival: ``[]``.
    ``"inverse"``: :math:`w_i = (1+s_i)^{-1} / \sum_j (1+s_j)^{-1}`. With every ``s_i`` equal this is
    the uniform weighting, returned as ``None`` so that the arithmetic is exactly that of
    :func:`~trainsys.diloco.outer.compute_outer_gradient`.
    """
    if len(stale) == 0:
        return []
    if stale_weighting == "none" or len(set(stale)) == 1:
        return None
    raw = np.array([1.0 / (1.0 + s) for s in stale])
    return list(map(float, raw / raw.sum()))


def round_arrivals(t: int, num_workers: int, miss_prob: float, schedule: Mapping[int, frozenset[int]] | None,
                   staleness: Mapping[int, int], fault_rng: np.random.Generator
                   ) -> tuple[frozenset[int], list[int], dict[int, int]]:
    """Round ``t``'s absent workers, the arrivals (ascending) and each arrival's effective staleness.

    Without a schedule, ``fault_rng.random(N)`` is drawn (every round, whatever the probability) and the
    workers with ``u < miss_prob`` are absent; with one, ``schedule.get(t, ∅)``. An arrival's staleness is
    ``min(staleness.get(i, 0), t - 1)``. The arguments are those :func:`validate_faults` returns; the
    simulation and the torch.distributed job (every rank, with its own generator seeded alike) call this
    one function, so they agree on who arrives.
    """
    if schedule is None:
        absent = frozenset(np.flatnonzero(fault_rng.random(num_workers) < miss_prob).tolist())  # (N,) draws
    else:
        absent = schedule.get(t, frozenset())
    arrived = [i for i in range(num_workers) if i not in absent]
    return absent, arrived, {i: min(staleness.get(i, 0), t - 1) for i in arrived}


def train_diloco_with_faults(
    config: DiLoCoConfig | Mapping | None,
    *,
    miss_prob: float = 0.0,
    schedule: Mapping[int, Sequence[int]] | None = None,
    staleness: Mapping[int, int] | None = None,
    stale_weighting: str = "none",
) -> dict[str, object]:
    r""":func:`~trainsys.diloco.loop.train_diloco` with absent and stale workers: a run record.

    Round ``t = 1..T``: the absent workers are ``schedule.get(t, [])`` or, without a schedule, those
    with ``u < miss_prob`` for ``u = fault_rng.random(N)`` — ``fault_rng = default_rng(derived_seed(seed,
    2))``, drawn every round and used for nothing else, so the training draws are those of
    ``train_diloco``. Each arriving worker ``i`` (in order) runs ``run_inner_steps`` from a clone of
    :math:`\theta^{(t-1-s_i)}` (:math:`s_i` = ``min(staleness.get(i, 0), t - 1)``) with its own AdamW
    state and generator; absent ones keep both. Outer step: Nesterov on
    :math:`\theta^{(t-1)} - \sum_i w_i\tilde\theta_i` (module docstring) with :func:`arrival_weights`;
    no arrival keeps :math:`\theta` and the outer state. With no fault the arithmetic is that of
    ``train_diloco`` operation for operation, hence the same record bit for bit.

    Returns ``train_diloco``'s record with ``"algorithm": "diloco_faults"``, ``seeds["fault_seed"]``,
    ``"faults": {"miss_prob", "schedule", "staleness", "stale_weighting"}``, ``"examples_processed"``
    counting only the steps done, and per round, besides the usual keys (``"steps" = t·H`` rounds'
    worth; ``"train_loss"`` the mean over the arrivals' minibatches, NaN with none; the bytes of the
    arrivals' trees only): ``"arrived"``, ``"missed"`` (worker ids), ``"stale"`` ``{id: effective s > 0}``
    of the arrivals, ``"weights"`` ``{id: w_i}``, ``"outer_step_applied"`` and ``"worker_steps"``
    (inner steps each worker has done so far). Bad fault arguments are refused by :func:`validate_faults`.
    """
    start = time.perf_counter()
    run = setup_run(config)
    cfg: DiLoCoConfig = run["config"]
    N, T, H = cfg.num_workers, cfg.rounds, cfg.inner_steps
    p, sched, stale_of, weighting = validate_faults(N, T, miss_prob, schedule, staleness, stale_weighting)
    fault_seed = derived_seed(cfg.seed, 2)
    fault_rng = np.random.default_rng(fault_seed)
    params, outer_state = run["params"], init_outer_optimizer(run["params"])
    globals_so_far: list[Params] = [params]  # θ^(0), θ^(1), …: where stale workers start
    states = [init_adamw_state(params) for _ in range(N)]
    hp, history, total = inner_hp(cfg), [], 0
    worker_steps = [0] * N
    with _progress(cfg, "DiLoCo (faults)") as bar:
        for t in range(1, T + 1):
            absent, arrived, eff = round_arrivals(t, N, p, sched, stale_of, fault_rng)
            rebased, losses = [], []
            for i in arrived:
                base = globals_so_far[t - 1 - eff[i]]  # θ^(t-1-s)
                theta, states[i], worker_losses = run_inner_steps(clone_params(base), states[i], run["shards"][i], H,
                                                                  hp, run["worker_rngs"][i])
                worker_steps[i] += H
                losses.append(worker_losses)
                # θ̃_i = θ_i + (θ^(t-1) − θ^(t-1-s)), so that θ^(t-1) − θ̃_i = θ^(t-1-s) − θ_i = Δ_i
                rebased.append(theta if eff[i] == 0 else subtract_params(theta, subtract_params(base, params)))
            sent = sum(params_nbytes(theta) for theta in rebased)  # one tree per arrival into the all-reduce
            weights = arrival_weights([eff[i] for i in arrived], weighting)
            if arrived:
                outer_grad = subtract_params(params, average_params(rebased, weights))
                params, outer_state = nesterov_outer_step(params, outer_state, outer_grad, cfg.outer_lr,
                                                          cfg.outer_momentum)
            globals_so_far.append(params)
            total += sent
            train_loss = float(np.stack(losses).mean()) if losses else float("nan")  # (|A_t|, H)
            entry = _entry(run, params, t, t * H, train_loss, int(sent), total)
            w = weights if weights is not None else [1.0 / len(arrived)] * len(arrived)
            entry.update({"arrived": arrived, "missed": sorted(absent),
                          "stale": {i: eff[i] for i in arrived if eff[i] > 0},
                          "weights": dict(zip(arrived, w)), "outer_step_applied": bool(arrived),
                          "worker_steps": list(worker_steps)})
            history.append(entry)
            bar.update()
    record = _record("diloco_faults", run, params, history, _initial(run), start)
    record["seeds"] = {**record["seeds"], "fault_seed": fault_seed}
    record["faults"] = {"miss_prob": p, "schedule": None if sched is None else {r: sorted(a) for r, a in sched.items()},
                        "staleness": dict(stale_of), "stale_weighting": weighting}
    record["examples_processed"] = sum(worker_steps) * cfg.batch_size
    return record


# --- the measured experiments (tests, ``make bench`` and the lessons run these) ----------------------------
EXPERIMENT_CONFIG: dict[str, object] = {"rounds": 20, "inner_steps": 10, "progress": False}
"""The experiments' problem: the default DiLoCo config (4 IID workers) with T = 20 rounds of H = 10 steps."""


def even_absence_schedule(fraction: float, rounds: int, num_workers: int, seed: int) -> dict[int, list[int]]:
    """A schedule in which **each** worker misses exactly ``round(fraction · T)`` rounds, drawn at random.

    Every worker loses the same share of its compute, so the run does ``(1 - f)`` of the synchronous
    compute — what :func:`missed_rounds_experiment` gives the baseline. Drawn with
    ``default_rng(100 + seed)``: worker by worker, ``choice(1..T, size, replace=False)``.
    """
    fraction = require_real("fraction", fraction, minimum=0.0)
    if fraction > 1:
        raise ValueError(f"fraction must be in [0, 1] (a share of the rounds), got {fraction}")
    T = require_int("rounds", rounds, minimum=1)
    N = require_int("num_workers", num_workers, minimum=1)
    rng, schedule = np.random.default_rng(100 + require_int("seed", seed, minimum=0)), {}
    for w in range(N):
        for r in rng.choice(np.arange(1, T + 1), size=round(fraction * T), replace=False):
            schedule.setdefault(int(r), []).append(w)
    return schedule


def missed_rounds_experiment(fractions: Sequence[float] = (0.0, 0.25, 0.5), seeds: Sequence[int] = (0, 1, 2),
                             config: Mapping | None = None) -> list[dict[str, float]]:
    """Final held-out loss with each worker missing a fraction ``f`` of the rounds, vs synchronous training
    with the same lost compute (``round((1 - f) T)`` rounds' worth of steps), means over ``seeds``.

    Returns one row per fraction: ``{"fraction", "diloco", "synchronous", "examples"}`` (``examples``: the
    examples both processed, per seed — equal by construction, and checked).
    """
    from trainsys.diloco.loop import train_synchronous_baseline

    base = {**EXPERIMENT_CONFIG, **(config or {})}
    rows = []
    for f in fractions:
        diloco, sync, examples = [], [], None
        for seed in seeds:
            cfg = {**base, "seed": seed}
            T, N = cfg["rounds"], setup_run(cfg)["config"].num_workers
            rec = train_diloco_with_faults(cfg, schedule=even_absence_schedule(f, T, N, seed))
            syn = train_synchronous_baseline({**cfg, "rounds": round((1 - f) * T)})
            if syn["examples_processed"] != rec["examples_processed"]:
                raise AssertionError(f"unequal compute at fraction {f}: {syn['examples_processed']} vs "
                                     f"{rec['examples_processed']} examples")
            diloco.append(rec["history"][-1]["heldout_loss"])
            sync.append(syn["history"][-1]["heldout_loss"])
            examples = rec["examples_processed"]
        rows.append({"fraction": float(f), "diloco": float(np.mean(diloco)), "synchronous": float(np.mean(sync)),
                     "examples": int(examples)})
    return rows


def staleness_experiment(staleness: Sequence[int] = (0, 1, 2), stale_workers: Sequence[int] = (0, 1),
                         seeds: Sequence[int] = (0, 1, 2), config: Mapping | None = None) -> list[dict[str, float]]:
    """Final held-out loss when ``stale_workers`` report ``s`` rounds late, with uniform and ``1/(1+s)``
    weights (means over ``seeds``): one row ``{"staleness", "uniform", "inverse"}`` per ``s``."""
    base = {**EXPERIMENT_CONFIG, **(config or {})}
    rows = []
    for s in staleness:
        row: dict[str, float] = {"staleness": int(s)}
        for weighting, key in (("none", "uniform"), ("inverse", "inverse")):
            runs = [train_diloco_with_faults({**base, "seed": seed}, staleness={w: s for w in stale_workers},
                                             stale_weighting=weighting) for seed in seeds]
            row[key] = float(np.mean([r["history"][-1]["heldout_loss"] for r in runs]))
        rows.append(row)
    return rows
