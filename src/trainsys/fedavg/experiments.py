r"""Module 3, Part 6 — the paper's experiments at laptop scale, each returning a run record.

McMahan et al. 2017 measure **rounds of communication to reach a target accuracy**: on IID MNIST
the 2NN needs 316 rounds with one client per round and 87 with ``C = 0.1`` (Table 1, ``E = 1``,
``B = 10``); more local computation (larger ``E``, smaller ``B``) cuts rounds further, strongly on
IID data and less on pathological non-IID data (Table 2: CNN, ``C = 0.1``, 34 → 18 rounds IID,
350 → 173 non-IID from ``E = 1`` to ``E = 20``). The functions below reproduce the *directions*
on the synthetic task of :mod:`trainsys.fedavg.data`: a centralized ceiling, the IID/non-IID gap
per round, rounds to a target against ``E``, and accuracy against ``C``, over several seeds
(mean ± sample standard deviation, ``ddof = 1``).

Every function takes a :class:`~trainsys.fedavg.server.FedAvgConfig` (or a dict of overrides) and
returns a record with the validated config, the seeds, per-round metrics, wall time and bytes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict

import numpy as np
import torch
from tqdm.auto import tqdm

from trainsys._validation import describe, require_int
from trainsys.fedavg.client import train_client_locally
from trainsys.fedavg.model import require_seed
from trainsys.fedavg.server import (
    FedAvgConfig,
    clients_per_round,
    evaluate_accuracy,
    prepare_run,
    require_fraction,
    run_fedavg,
    validate_fedavg_config,
    with_overrides,
)

Config = FedAvgConfig | Mapping[str, object]
DEFAULT_SEEDS = (0, 1, 2)


def mean_and_spread(values: Sequence[float]) -> tuple[float, float]:
    """``(mean, sample standard deviation)``; the spread of a single value is ``0.0``."""
    arr = np.asarray(values, dtype=np.float64)
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else 0.0


def require_seeds(seeds: object) -> list[int]:
    """A non-empty list of distinct seeds."""
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence) or len(seeds) == 0:
        raise ValueError(f"seeds must be a non-empty list of integers, got {describe(seeds)}")
    checked = [require_seed(f"seeds[{i}]", s) for i, s in enumerate(seeds)]
    if len(set(checked)) != len(checked):
        raise ValueError(f"seeds must be distinct, got {checked}")
    return checked


def accuracy_curve(history: object, name: str) -> list[float]:
    """Test accuracy per round from a run record (``{"history": [...]}``) or a history list."""
    if isinstance(history, Mapping) and "history" in history:
        history = history["history"]
    if isinstance(history, (str, bytes)) or not isinstance(history, Sequence) or len(history) == 0:
        raise ValueError(f"{name} must be a run record or a non-empty list of per-round dicts, got {describe(history)}")
    if not all(isinstance(h, Mapping) and "test_accuracy" in h for h in history):
        raise ValueError(f"{name}: every round must be a dict with a 'test_accuracy' entry")
    return [float(h["test_accuracy"]) for h in history]


# --- Lesson 21 -------------------------------------------------------------------------------------
def train_centralized_baseline(config: Config) -> dict[str, object]:
    """The ceiling: the same model, data and seeds, trained on the **union** of the clients' data.

    Same ``prepare_run(config)`` (data, held-out split, initial model) as :func:`run_fedavg`; then
    ``config.rounds`` epochs of minibatch SGD (batch ``config.batch_size``, ``config.lr``,
    ``config.momentum``) over the whole training set, epoch ``t`` being one
    ``train_client_locally(model, train, all indices, 1, B, lr, seed_t, momentum)`` with
    ``seed_t = rng.integers(0, 2**31 - 1)`` drawn from ``numpy.random.default_rng(seeds["rounds"])``.
    One epoch per "round" (far more compute than a FedAvg round with ``C < 1``: an upper reference,
    not a fair race). Nothing is communicated. Record: ``{"kind": "centralized", "config", "seeds",
    "initial_test_accuracy", "history": [{"round", "test_accuracy", "train_loss"}], "final_test_accuracy",
    "bytes_communicated": {"up": 0, "down": 0, "total": 0}, "wall_time_s"}``.
    """
    config = validate_fedavg_config(config)
    start = time.perf_counter()
    train, test, model, seeds = prepare_run(config)
    everyone = torch.arange(len(train))  # (n_train,)
    rng = np.random.default_rng(seeds["rounds"])
    initial = evaluate_accuracy(model, test)
    history = []
    for t in tqdm(range(1, config.rounds + 1), desc="centralized", disable=not config.progress):
        seed_t = int(rng.integers(0, 2**31 - 1))
        result = train_client_locally(model, train, everyone, 1, config.batch_size, config.lr, seed_t,
                                      config.momentum)
        history.append({"round": t, "test_accuracy": evaluate_accuracy(model, test),
                        "train_loss": result["epoch_losses"][0]})
    return {"kind": "centralized", "config": asdict(config), "seeds": seeds, "initial_test_accuracy": initial,
            "history": history, "final_test_accuracy": history[-1]["test_accuracy"],
            "bytes_communicated": {"up": 0, "down": 0, "total": 0}, "wall_time_s": time.perf_counter() - start}


# --- Lesson 22 -------------------------------------------------------------------------------------
def run_fedavg_iid(config: Config) -> dict[str, object]:
    """:func:`run_fedavg` with ``partition="iid"`` (every other field as given)."""
    return run_fedavg(with_overrides(config, partition="iid"))


# --- Lesson 23 -------------------------------------------------------------------------------------
def run_fedavg_non_iid(config: Config) -> dict[str, object]:
    """:func:`run_fedavg` on label-skewed clients: the paper's shards, or Dirichlet if the config says so.

    ``partition="iid"`` (the default) becomes ``"shards"`` (``shards_per_client`` shards each);
    ``"shards"`` and ``"dirichlet"`` are kept. Data, split, model and round seeds are those of the IID
    run with the same ``config.seed``, so the two runs differ **only** in who holds which example.
    """
    config = validate_fedavg_config(config)
    return run_fedavg(with_overrides(config, partition="shards" if config.partition == "iid" else config.partition))


# --- Lesson 24 -------------------------------------------------------------------------------------
def compute_non_iid_gap(iid_history: object, non_iid_history: object) -> dict[str, object]:
    r"""Per-round accuracy gap :math:`g_t = a^{IID}_t - a^{non\text{-}IID}_t` (positive: non-IID is behind).

    Each argument is one run (a run record or its ``history`` list) or a list of runs, one per seed;
    runs are paired in order (same seed, same position). Returns ``{"rounds": [1..T], "gap_mean":
    [T floats], "gap_std": [T floats], "final_gap_mean", "final_gap_std", "mean_gap" (over rounds and
    seeds), "num_seeds"}`` — means over seeds, sample standard deviation (``0.0`` for one seed).
    ``ValueError`` naming ``non_iid_history`` when the round or seed counts differ (no silent truncation).
    """
    iid = _curves(iid_history, "iid_history")  # (S, T)
    non_iid = _curves(non_iid_history, "non_iid_history")  # (S', T')
    if iid.shape != non_iid.shape:
        raise ValueError(f"non_iid_history must match iid_history: {iid.shape[0]} runs of {iid.shape[1]} rounds "
                         f"vs {non_iid.shape[0]} runs of {non_iid.shape[1]} rounds")
    gap = iid - non_iid  # (S, T)
    stats = [mean_and_spread(gap[:, t]) for t in range(gap.shape[1])]
    return {"rounds": list(range(1, gap.shape[1] + 1)), "gap_mean": [m for m, _ in stats],
            "gap_std": [s for _, s in stats], "final_gap_mean": stats[-1][0], "final_gap_std": stats[-1][1],
            "mean_gap": float(gap.mean()), "num_seeds": int(gap.shape[0])}


def _curves(runs: object, name: str) -> np.ndarray:
    is_single = (isinstance(runs, Mapping) or
                 (isinstance(runs, Sequence) and len(runs) > 0 and isinstance(runs[0], Mapping)
                  and "test_accuracy" in runs[0]))
    curves = [accuracy_curve(runs, name)] if is_single else [
        accuracy_curve(r, f"{name}[{i}]") for i, r in enumerate(_non_empty_list(runs, name))]
    if len({len(c) for c in curves}) != 1:
        raise ValueError(f"{name}: every run must have the same number of rounds, got {[len(c) for c in curves]}")
    return np.asarray(curves, dtype=np.float64)


def _non_empty_list(value: object, name: str) -> Sequence:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) == 0:
        raise ValueError(f"{name} must be a run record, a history, or a list of run records, got {describe(value)}")
    return value


def rounds_to_target(history: object, target: float) -> int | None:
    """The first round (1-based) whose test accuracy is ``>= target``; ``None`` if never reached."""
    return next((t for t, a in enumerate(accuracy_curve(history, "history"), start=1) if a >= target), None)


def _distinct(name: str, values: list) -> list:
    if len(set(values)) != len(values):
        raise ValueError(f"{name} must not repeat a value, got {values}")
    return values


def _require_target(target: object) -> float:
    return require_fraction("target", target)


# --- Lesson 25 -------------------------------------------------------------------------------------
def rounds_to_target_vs_local_epochs(
    config: Config, epochs_list: Sequence[int], target: float, seeds: Sequence[int] = DEFAULT_SEEDS
) -> dict[str, object]:
    """Rounds of FedAvg to reach ``target`` test accuracy for each local epoch count ``E``, over seeds.

    For each ``E`` in ``epochs_list`` and each seed ``s``: ``run_fedavg(config with epochs=E, seed=s)``
    (partition, ``C``, ``B``, ``lr`` as in ``config``) and :func:`rounds_to_target`. Record:
    ``{"kind", "config", "epochs_list", "target", "seeds", "rounds_to_target": {E: [r or None per
    seed]}, "num_reached": {E}, "mean_rounds": {E: mean over the seeds that reached, or None},
    "std_rounds": {E}, "final_accuracy_mean": {E}, "final_accuracy_std": {E}, "accuracy_curves": {E:
    [[per round] per seed]}, "bytes_communicated": total over all runs, "wall_time_s"}``.
    A run that never reaches the target within ``config.rounds`` counts in ``num_reached`` only.
    """
    config = validate_fedavg_config(config)
    if isinstance(epochs_list, (str, bytes)) or not isinstance(epochs_list, Sequence) or len(epochs_list) == 0:
        raise ValueError(f"epochs_list must be a non-empty list of integers >= 1, got {describe(epochs_list)}")
    epochs_list = _distinct("epochs_list", [require_int(f"epochs_list[{i}]", e, minimum=1)
                                            for i, e in enumerate(epochs_list)])
    target = _require_target(target)
    seeds = require_seeds(seeds)
    return _sweep(config, "epochs", epochs_list, seeds, target,
                  {"kind": "rounds_to_target_vs_local_epochs", "epochs_list": epochs_list, "target": target})


# --- Lesson 26 -------------------------------------------------------------------------------------
def accuracy_vs_client_fraction(
    config: Config, fractions: Sequence[float], seeds: Sequence[int] = DEFAULT_SEEDS
) -> dict[str, object]:
    """Final test accuracy after ``config.rounds`` rounds for each client fraction ``C``, over seeds.

    For each ``C`` in ``fractions`` and each seed: ``run_fedavg(config with fraction=C, seed=s)``.
    Record: ``{"kind", "config", "fractions", "seeds", "clients_per_round": {C: max(ceil(C K), 1)},
    "final_accuracy": {C: [per seed]}, "mean": {C}, "std": {C}, "bytes_per_round": {C: bytes up and
    down of one round}, "accuracy_curves": {C: [[per round] per seed]}, "bytes_communicated",
    "wall_time_s"}``. Larger ``C`` costs proportionally more bytes per round.
    """
    config = validate_fedavg_config(config)
    if isinstance(fractions, (str, bytes)) or not isinstance(fractions, Sequence) or len(fractions) == 0:
        raise ValueError(f"fractions must be a non-empty list of numbers in (0, 1], got {describe(fractions)}")
    fractions = _distinct("fractions", [require_fraction(f"fractions[{i}]", c) for i, c in enumerate(fractions)])
    seeds = require_seeds(seeds)
    record = _sweep(config, "fraction", fractions, seeds, None,
                    {"kind": "accuracy_vs_client_fraction", "fractions": fractions})
    record["clients_per_round"] = {c: clients_per_round(config.num_clients, c) for c in fractions}
    return record


def _sweep(config: FedAvgConfig, field: str, values: list, seeds: list[int], target: float | None,
           record: dict[str, object]) -> dict[str, object]:
    """Run ``run_fedavg`` for every (value of ``field``, seed) and summarise per value."""
    start = time.perf_counter()
    curves: dict = {v: [] for v in values}
    reached: dict = {v: [] for v in values}
    per_round: dict = {}
    total_bytes = 0
    jobs = [(v, s) for v in values for s in seeds]
    for value, seed in tqdm(jobs, desc=f"sweep over {field}", disable=not config.progress):
        run = run_fedavg(with_overrides(config, **{field: value, "seed": seed, "progress": False}))
        curves[value].append(accuracy_curve(run, "run"))
        reached[value].append(rounds_to_target(run, target) if target is not None else None)
        total_bytes += run["bytes_communicated"]["total"]
        per_round[value] = run["history"][0]["bytes_up"] + run["history"][0]["bytes_down"]
    finals = {v: [c[-1] for c in curves[v]] for v in values}
    record.update(config=asdict(config), seeds=seeds, accuracy_curves=curves, bytes_communicated=total_bytes)
    if target is not None:
        hit = {v: [r for r in reached[v] if r is not None] for v in values}
        record.update(rounds_to_target=reached, num_reached={v: len(hit[v]) for v in values},
                      mean_rounds={v: mean_and_spread(hit[v])[0] if hit[v] else None for v in values},
                      std_rounds={v: mean_and_spread(hit[v])[1] if hit[v] else None for v in values},
                      final_accuracy_mean={v: mean_and_spread(finals[v])[0] for v in values},
                      final_accuracy_std={v: mean_and_spread(finals[v])[1] for v in values})
    else:
        record.update(final_accuracy=finals, mean={v: mean_and_spread(finals[v])[0] for v in values},
                      std={v: mean_and_spread(finals[v])[1] for v in values}, bytes_per_round=per_round)
    record["wall_time_s"] = time.perf_counter() - start
    return record
