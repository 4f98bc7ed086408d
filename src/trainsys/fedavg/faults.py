r"""Module 3, beyond the lessons — FedAvg when clients drop out or are too slow.

McMahan et al. (2017) assume every selected client reports. Production systems do not get that:
Bonawitz et al. (2019, "Towards Federated Learning at Scale: System Design", SysML,
arXiv:1902.01046) select *more* devices than the round needs, because a share of them drops out of
every round, and close the round once enough devices have reported (devices that report too late
are ignored). This file simulates that protocol on top of the lesson functions of ``server.py``,
``client.py`` and ``state.py`` (imported, never copied).

**The fault model** (seeded, reproducible). In round ``t`` every client ``k`` of the ``K`` gets a
fate from a generator of its own (``fault_seed = config.seed + 5``, independent of the training
draws): ``u_{t,k} ~ U[0, 1)`` and ``z_{t,k} ~ N(0, 1)``, ``K`` of each per round, drawn in that
order whatever is selected or configured (common random numbers: the same client is in the same
state at every ``dropout_rate`` and ``deadline``). A selected client

* **drops out** when ``u_{t,k} < p`` (``p = dropout_rate`` in ``[0, 1)``), and never reports;
* otherwise reports after :math:`T_{t,k} = \mathrm{median}\cdot e^{\sigma z_{t,k}}` simulated
  seconds — a **log-normal** latency (:class:`LogNormalLatency`). The choice is a modelling
  assumption, not from Bonawitz et al.: a positive, right-skewed time with a heavy upper tail
  (a few very slow devices), parameterised by its median so that the deadline reads as "a multiple of
  the typical client". Its tail is :math:`P(T > d) = \tfrac12\operatorname{erfc}\!\big(
  \ln(d/\mathrm{median}) / (\sigma\sqrt2)\big)` (tested against the sampler).

**The round.** :math:`m = \max(\lceil CK\rceil, 1)` (``clients_per_round``) is the number of reports
the round wants; with over-selection ``r >= 0`` the server selects
:math:`m' = \min(\lceil (1 + r)\, m\rceil, K)` clients (``select_clients`` with fraction ``m'/K``).
The reports arrive in order of ``T``; the round **closes** at the ``m``-th arrival or at the
``deadline``, whichever comes first (``deadline=None``: no deadline). Each selected client is then
exactly one of

* ``dropped`` — dropped out;
* ``late`` — arrived after the deadline;
* ``surplus`` — arrived before the deadline but after the ``m``-th report (the round had closed);
* ``reported`` — one of the first ``m`` arrivals before the deadline: the only ones aggregated.

With :math:`R_t` the reporters, :math:`w_{t+1} = \sum_{k\in R_t} \frac{n_k}{\sum_{j\in R_t} n_j}
w^k_{t+1}` — ``aggregate_weighted_average`` over the reporters, **renormalised over them**. Weighting
by :math:`n_k / \sum_{j \in S_t} n_j` (the selected) would shrink the model towards zero by the
dropped share. A round with no reporter keeps :math:`w_t` (``kept_global_model``).

Only the reporters are trained here (the others' models would be thrown away, and a client's result
depends only on ``w_t``, its data and its seed, so skipping them changes nothing). With
``dropout_rate=0, deadline=None, overselect=0`` every selected client reports and the run is
bitwise ``run_fedavg``'s: the training generator is drawn exactly as ``run_communication_round``
draws it (selection, then one seed per selected client) and the reporters are aggregated in
ascending id order, as the selected are there.
"""

from __future__ import annotations

import copy
import math
import numbers
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np
from torch import nn
from tqdm.auto import tqdm

from trainsys._validation import describe, require_real
from trainsys.fedavg.client import train_client_locally
from trainsys.fedavg.data import LabelledDataset
from trainsys.fedavg.partition import Partition
from trainsys.fedavg.server import (FedAvgConfig, clients_per_round, evaluate_accuracy, make_partition, prepare_run,
                                    select_clients, validate_fedavg_config)
from trainsys.fedavg.state import aggregate_weighted_average, clone_model_state, load_model_state, state_dict_bytes

FAULT_SEED_OFFSET = 5  # run_seeds uses seed + 0 … seed + 4


@dataclass(frozen=True)
class LogNormalLatency:
    r"""Client report time :math:`T = \mathrm{median}\cdot e^{\sigma Z}`, :math:`Z \sim N(0,1)`, in simulated seconds.

    ``median_s > 0`` is the median of ``T``; ``sigma >= 0`` the spread of ``ln T`` (``0``: every
    client takes exactly ``median_s``). Both finite; a bad value raises naming the field.
    """

    median_s: float = 1.0
    sigma: float = 0.5

    def __post_init__(self) -> None:
        require_real("median_s", self.median_s, strictly_positive=True)
        require_real("sigma", self.sigma, minimum=0.0)

    def times(self, z: np.ndarray) -> np.ndarray:
        """Report times from standard-normal draws ``z`` (any shape), float64."""
        return float(self.median_s) * np.exp(float(self.sigma) * np.asarray(z, dtype=np.float64))

    def tail(self, t: float) -> float:
        r""":math:`P(T > t) = \tfrac12\operatorname{erfc}(\ln(t/\mathrm{median}) / (\sigma\sqrt2))` for ``t > 0``."""
        if self.sigma == 0:
            return float(self.median_s > t)
        return 0.5 * math.erfc(math.log(t / self.median_s) / (self.sigma * math.sqrt(2.0)))


def require_dropout_rate(name: str, value: object) -> float:
    """A per-round drop-out probability in ``[0, 1)`` (``1`` would leave every round empty)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= float(value) < 1.0:
        raise ValueError(f"{name} must be a real number in [0, 1), got {describe(value)}")
    return float(value)


def require_deadline(name: str, value: object) -> float | None:
    """``None`` (wait for every client that does not drop) or a finite number of seconds > 0."""
    return None if value is None else require_real(name, value, strictly_positive=True)


def require_straggler(name: str, value: object) -> LogNormalLatency:
    """A :class:`LogNormalLatency` (its fields are checked when it is built)."""
    if not isinstance(value, LogNormalLatency):
        raise TypeError(f"{name} must be a LogNormalLatency(median_s, sigma), got {describe(value)}")
    return value


def overselected_count(m: int, overselect: float, num_clients: int) -> int:
    r""":math:`m' = \min(\lceil (1 + r) m \rceil, K)`, the product rounded to 12 decimals against float noise."""
    return min(math.ceil(round((1.0 + overselect) * m, 12)), num_clients)


def draw_client_fates(rng: np.random.Generator, num_clients: int, dropout_rate: float,
                      straggler: LogNormalLatency) -> tuple[np.ndarray, np.ndarray]:
    """One round's fate of **every** client: ``(drops: (K,) bool, times: (K,) float64 seconds)``.

    Draws ``rng.random(K)`` then ``rng.standard_normal(K)`` — always ``2K`` numbers, whatever the rate.
    """
    drops = rng.random(num_clients) < dropout_rate
    times = straggler.times(rng.standard_normal(num_clients))
    return drops, times


def sort_out_reports(selected: list[int], drops: np.ndarray, times: np.ndarray, wanted: int,
                     deadline: float | None) -> dict[str, object]:
    """Which selected clients reported, dropped, were late, or came after the round closed.

    The on-time arrivals (not dropped, ``times[k] <= deadline``) in order of arrival (ties by id);
    the first ``wanted`` are ``reported`` and the rest ``surplus``. Lists are ascending ids.
    ``round_time_s``: the ``wanted``-th arrival if there is one, else ``deadline`` if set, else the
    last arrival (``0.0`` with no arrival).
    """
    dropped = [k for k in selected if drops[k]]
    alive = [k for k in selected if not drops[k]]
    late = [k for k in alive if deadline is not None and times[k] > deadline]
    on_time = sorted((k for k in alive if deadline is None or times[k] <= deadline), key=lambda k: (times[k], k))
    reported, surplus = sorted(on_time[:wanted]), sorted(on_time[wanted:])
    if len(on_time) >= wanted:
        round_time = float(times[on_time[wanted - 1]])
    elif deadline is not None:
        round_time = deadline
    else:
        round_time = float(times[on_time[-1]]) if on_time else 0.0
    return {"reported": reported, "dropped": dropped, "late": late, "surplus": surplus, "round_time_s": round_time}


def draw_round(num_clients: int, fraction: float, rng: np.random.Generator, fault_rng: np.random.Generator, *,
               dropout_rate: float, deadline: float | None, overselect: float, straggler: LogNormalLatency
               ) -> tuple[list[int], dict[int, int], dict[str, object]]:
    r"""One round's draws, in their fixed order: ``(selected, seeds, fates)``.

    ``select_clients(K, m'/K, rng)`` with :math:`m = \max(\lceil CK\rceil, 1)` and ``m'`` =
    :func:`overselected_count`; ``rng.integers(0, 2**31 - 1, size=m')`` (client ``selected[i]`` trains
    with the ``i``-th seed: ``seeds`` maps id → seed) — as ``run_communication_round`` —; then
    :func:`draw_client_fates` from ``fault_rng`` and :func:`sort_out_reports` against ``m``. The
    simulation and the torch.distributed job (every rank, with generators seeded alike) call this one
    function, so they agree on every client's fate. Arguments are assumed validated.
    """
    m = clients_per_round(num_clients, fraction)
    m_sel = overselected_count(m, overselect, num_clients)
    selected = select_clients(num_clients, m_sel / num_clients, rng)
    if len(selected) != m_sel:  # clients_per_round(K, m'/K) == m' for every K the config allows
        raise RuntimeError(f"select_clients returned {len(selected)} clients, expected {m_sel}")
    seeds = dict(zip(selected, (int(s) for s in rng.integers(0, 2**31 - 1, size=m_sel))))
    drops, times = draw_client_fates(fault_rng, num_clients, dropout_rate, straggler)
    return selected, seeds, sort_out_reports(selected, drops, times, m, deadline)


def run_faulty_round(global_model: nn.Module, dataset: LabelledDataset, partition: Partition, config: FedAvgConfig,
                     rng: np.random.Generator, fault_rng: np.random.Generator, *, dropout_rate: float,
                     deadline: float | None, overselect: float, straggler: LogNormalLatency) -> dict[str, object]:
    """One round with faults, updating ``global_model`` in place when anyone reports.

    Order of draws: ``select_clients(K, m'/K, rng)``, ``rng.integers(0, 2**31 - 1, size=m')`` (client
    ``selected[i]`` trains with ``seeds[i]``) — as ``run_communication_round`` — then
    :func:`draw_client_fates` from ``fault_rng``. Arguments are assumed validated (see
    :func:`run_fedavg_with_faults`).
    """
    selected, seeds, fates = draw_round(len(partition), config.fraction, rng, fault_rng, dropout_rate=dropout_rate,
                                        deadline=deadline, overselect=overselect, straggler=straggler)
    m_sel = len(selected)

    states, counts, losses, steps = [], [], [], []
    for k in fates["reported"]:  # ascending ids, as run_communication_round aggregates the selected
        local = copy.deepcopy(global_model)  # the broadcast: every client starts from w_t
        result = train_client_locally(local, dataset, partition[k], config.epochs, config.batch_size, config.lr,
                                      seeds[k], config.momentum)
        states.append(clone_model_state(local))
        counts.append(result["num_samples"])
        losses.append(result["epoch_losses"][-1])
        steps.append(result["num_steps"])
    if states:  # renormalised over the reporters: n_k / sum_{j in R_t} n_j
        load_model_state(global_model, aggregate_weighted_average(states, counts))
    size = state_dict_bytes(global_model.state_dict())
    return {"selected": selected, "client_seeds": [seeds[k] for k in selected], **fates,
            "aggregated": len(states), "kept_global_model": not states, "num_samples": counts,
            "train_loss": sum(n * l for n, l in zip(counts, losses)) / sum(counts) if states else None,
            "local_steps": steps, "bytes_down": m_sel * size, "bytes_up": len(states) * size}


def run_fedavg_with_faults(
    config: FedAvgConfig | Mapping[str, object],
    *,
    dropout_rate: float = 0.0,
    deadline: float | None = None,
    overselect: float = 0.0,
    straggler: LogNormalLatency = LogNormalLatency(),
) -> dict[str, object]:
    """``run_fedavg`` with clients that drop out or report too late, and optional over-selection.

    Same data, split, partition, model and training generator as ``run_fedavg`` (``prepare_run``,
    ``make_partition``, ``run_seeds``), plus ``numpy.random.default_rng(config.seed + 5)`` for the
    faults. The record is ``run_fedavg``'s with ``"kind": "fedavg_faults"``, ``seeds["faults"]``, a
    ``"faults"`` entry (the arguments, ``clients_per_round`` ``m`` and ``selected_per_round`` ``m'``)
    and, in each round, besides ``round, test_accuracy, train_loss, selected, local_steps, bytes_up,
    bytes_down``: ``client_seeds``, ``reported``, ``dropped``, ``late``, ``surplus`` (ids),
    ``aggregated`` (``len(reported) <= m``), ``kept_global_model``, ``round_time_s``. ``train_loss``
    and ``local_steps`` cover the reporters (``None`` and ``[]`` in a round without any);
    ``bytes_down = m'·S`` (the broadcast reaches every selected client), ``bytes_up = aggregated·S``.

    Raises ``TypeError``/``ValueError`` naming the argument: ``dropout_rate`` outside ``[0, 1)``,
    ``deadline`` not ``None`` and not a finite number > 0, ``overselect`` negative or not finite,
    ``straggler`` not a :class:`LogNormalLatency`, or a bad config field.
    """
    config = validate_fedavg_config(config)
    dropout_rate = require_dropout_rate("dropout_rate", dropout_rate)
    deadline = require_deadline("deadline", deadline)
    overselect = require_real("overselect", overselect, minimum=0.0)
    straggler = require_straggler("straggler", straggler)
    start = time.perf_counter()
    train, test, model, seeds = prepare_run(config)
    seeds = {**seeds, "faults": config.seed + FAULT_SEED_OFFSET}
    partition = make_partition(config, train, seeds["partition"])
    rng, fault_rng = np.random.default_rng(seeds["rounds"]), np.random.default_rng(seeds["faults"])
    m = clients_per_round(len(partition), config.fraction)
    record: dict[str, object] = {
        "kind": "fedavg_faults", "config": asdict(config), "seeds": seeds,
        "faults": {"dropout_rate": dropout_rate, "deadline": deadline, "overselect": overselect,
                   "straggler": asdict(straggler), "clients_per_round": m,
                   "selected_per_round": overselected_count(m, overselect, len(partition))},
        "client_sizes": [int(p.numel()) for p in partition],
        "initial_test_accuracy": evaluate_accuracy(model, test)}
    history = []
    for t in tqdm(range(1, config.rounds + 1), desc=f"FedAvg+faults {config.partition}", disable=not config.progress):
        info = run_faulty_round(model, train, partition, config, rng, fault_rng, dropout_rate=dropout_rate,
                                deadline=deadline, overselect=overselect, straggler=straggler)
        info.pop("num_samples")
        history.append({"round": t, "test_accuracy": evaluate_accuracy(model, test), **info})
    up, down = sum(h["bytes_up"] for h in history), sum(h["bytes_down"] for h in history)
    record.update(history=history, final_test_accuracy=history[-1]["test_accuracy"],
                  bytes_communicated={"up": up, "down": down, "total": up + down},
                  wall_time_s=time.perf_counter() - start)
    return record


# --- the measured experiments (tests, ``make bench`` and the lessons run these) ----------------------------
def dropout_experiment(dropout_rates: tuple[float, ...] = (0.0, 0.3, 0.6), overselects: tuple[float, ...] = (0.0, 1.5),
                       seeds: tuple[int, ...] = (0, 1), config: Mapping[str, object] | None = None
                       ) -> list[dict[str, float]]:
    """Final test accuracy and reporters per round vs drop-out rate, with and without over-selection.

    ``config`` defaults to the pathological non-IID problem (``partition="shards"``, 30 rounds; K = 40,
    m = 4). One row per ``(dropout_rate, overselect)``: ``{"dropout_rate", "overselect", "selected",
    "accuracy", "reporters"}`` — means over ``seeds`` of the final accuracy and of the clients aggregated
    per round.
    """
    base = {"partition": "shards", "rounds": 30, **(config or {})}
    rows = []
    for p in dropout_rates:
        for r in overselects:
            runs = [run_fedavg_with_faults({**base, "seed": s}, dropout_rate=p, overselect=r) for s in seeds]
            rows.append({"dropout_rate": float(p), "overselect": float(r),
                         "selected": runs[0]["faults"]["selected_per_round"],
                         "accuracy": float(np.mean([run["final_test_accuracy"] for run in runs])),
                         "reporters": float(np.mean([h["aggregated"] for run in runs for h in run["history"]]))})
    return rows


def deadline_experiment(deadlines: tuple[float | None, ...] = (None, 1.5, 1.0, 0.7),
                        overselects: tuple[float, ...] = (0.0, 1.0), target: float = 0.7,
                        seeds: tuple[int, ...] = (0, 1), config: Mapping[str, object] | None = None,
                        straggler: LogNormalLatency = LogNormalLatency()) -> list[dict[str, object]]:
    """Rounds and simulated seconds to a target accuracy with stragglers, per deadline and over-selection.

    Every client reports after a log-normal time (median 1 s, σ = 0.5 by default); a round lasts until
    its ``m``-th report or the deadline. ``config`` defaults to the IID problem with 40 rounds. One row
    per ``(deadline, overselect)``: ``{"deadline", "overselect", "selected", "rounds_to_target",
    "seconds_to_target", "reporters", "round_seconds"}`` — per seed lists of the first round reaching ``target`` (``None``:
    never) and of the simulated time until then (the sum of the rounds' ``round_time_s``), and means over
    seeds and rounds of the clients aggregated and of a round's duration.
    """
    from trainsys.fedavg.experiments import rounds_to_target

    base = {"partition": "iid", "rounds": 40, **(config or {})}
    rows = []
    for d in deadlines:
        for r in overselects:
            runs = [run_fedavg_with_faults({**base, "seed": s}, deadline=d, overselect=r, straggler=straggler)
                    for s in seeds]
            reached = [rounds_to_target(run["history"], target) for run in runs]
            seconds = [None if t is None else float(sum(h["round_time_s"] for h in run["history"][:t]))
                       for t, run in zip(reached, runs)]
            rows.append({"deadline": d, "overselect": float(r), "selected": runs[0]["faults"]["selected_per_round"],
                         "rounds_to_target": reached,
                         "seconds_to_target": seconds,
                         "reporters": float(np.mean([h["aggregated"] for run in runs for h in run["history"]])),
                         "round_seconds": float(np.mean([h["round_time_s"] for run in runs for h in run["history"]]))})
    return rows
