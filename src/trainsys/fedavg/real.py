r"""McMahan et al.'s (2017) experiments on real data: Fashion-MNIST with the 2NN, Shakespeare by speaking role.

Everything here calls :func:`~trainsys.fedavg.server.run_fedavg` (the lessons' rounds, clients and
aggregation) on a real task (:mod:`trainsys.fedavg.tasks`) and summarises **rounds to a target test
accuracy** per setting over seeds: mean ± sample standard deviation (``ddof = 1``) over the seeds that
reached it, and the count that did. A run stops at its target (``stop_at``) or at its round cap.
The speed-up of a setting is FedSGD's mean rounds divided by its own (the paper's Table 2 column).

The paper's protocol (Sec. 3): ``K = 100`` clients of 600 examples; IID (a random deal) or pathological
non-IID (sorted by label, 200 shards of 300, two per client); ``C = 0.1``; FedSGD is ``E = 1, B = ∞``
(one full-batch gradient step per client per round); FedAvg adds local computation with ``E ∈ {1, 5, 20}``
and ``B ∈ {10, ∞}``.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path


from trainsys.fedavg.experiments import mean_and_spread, require_seeds
from trainsys.fedavg.server import FedAvgConfig, run_fedavg, validate_fedavg_config, with_overrides

SETTINGS: tuple[tuple[str, int, int | None], ...] = (
    ("FedSGD", 1, None), ("FedAvg", 1, 10), ("FedAvg", 5, None), ("FedAvg", 5, 10), ("FedAvg", 20, None),
    ("FedAvg", 20, 10))
"""The rows of Table 2: (method, E, B) with B = None for ∞."""

MCMAHAN_TABLE2_CNN_MNIST = {  # McMahan et al. 2017, Table 2 (CNN, MNIST, target 99%, C = 0.1): rounds
    ("FedSGD", 1, None): (626, 483), ("FedAvg", 5, None): (179, 1000), ("FedAvg", 1, 50): (65, 600),
    ("FedAvg", 20, None): (234, 672), ("FedAvg", 1, 10): (34, 350), ("FedAvg", 5, 50): (29, 334),
    ("FedAvg", 20, 50): (32, 426), ("FedAvg", 5, 10): (20, 229), ("FedAvg", 20, 10): (18, 173)}
"""(IID rounds, pathological non-IID rounds) per (method, E, B), read from the paper's Table 2."""


def fashion_mnist_config(**overrides: object) -> FedAvgConfig:
    """The paper's 2NN protocol on Fashion-MNIST: 60,000 training images, 784-200-200-10, K = 100, C = 0.1.

    ``lr = 0.05`` (B = 10) unless overridden; see :data:`FASHION_LR` for the rates the record uses.
    """
    base = dict(task="fashion-mnist", num_examples=60000, d_in=784, d_hidden=200, hidden_layers=2, n_classes=10,
                num_clients=100, fraction=0.1, shards_per_client=2, epochs=1, batch_size=10, lr=0.05,
                rounds=100, partition="iid")
    return validate_fedavg_config({**base, **overrides})


def shakespeare_config(**overrides: object) -> FedAvgConfig:
    """Shakespeare by role: every (play, role) with >= 2,000 characters a client, context 32, a 2-block GPT."""
    from trainsys.fedavg.tasks import _shakespeare
    context = int(overrides.get("context", 32))
    min_chars = int(overrides.get("min_chars", 2000))
    test_sequences = int(overrides.get("test_sequences", 2000))
    task = _shakespeare(context, min_chars, test_sequences)
    base = dict(task="shakespeare", num_examples=len(task.train), d_in=context, context=context,
                n_classes=task.train.n_classes, d_hidden=64, hidden_layers=2, num_clients=len(task.natural),
                fraction=0.01, epochs=1, batch_size=10, lr=0.5, rounds=50, partition="natural",
                min_chars=min_chars, test_sequences=test_sequences)
    return validate_fedavg_config({**base, **overrides})


TASK_NAMES = ("synthetic", "fashion-mnist", "shakespeare")


def task_config(task: str, **fields: object) -> FedAvgConfig:
    """The validated config of ``task`` with ``fields`` (a ``None`` value keeps the task's default).

    ``"synthetic"``: :class:`FedAvgConfig`'s defaults; ``"fashion-mnist"``: :func:`fashion_mnist_config`;
    ``"shakespeare"``: :func:`shakespeare_config`. Every engine (``run_fedavg``, the torchrun job, ``make
    federate``) builds its config here, so the same task and seed mean the same run. ``ValueError`` names ``task``.
    """
    fields = {k: v for k, v in fields.items() if v is not None}
    if task == "synthetic":
        return validate_fedavg_config(fields)
    if task == "fashion-mnist":
        return fashion_mnist_config(**fields)
    if task == "shakespeare":
        return shakespeare_config(**fields)
    raise ValueError(f"task must be one of {TASK_NAMES}, got {task!r}")


def setting_label(method: str, epochs: int, batch_size: int | None) -> str:
    """``"FedSGD"`` or ``"FedAvg E=5, B=10"`` (B = ∞ written out)."""
    return "FedSGD" if method == "FedSGD" else f"FedAvg E={epochs}, B={'∞' if batch_size is None else batch_size}"


def _run(job: tuple[dict, int]) -> dict[str, object]:
    overrides, seed = job
    config = validate_fedavg_config(overrides)
    cpu = time.process_time()
    record = run_fedavg(with_overrides(config, seed=seed))
    return {"seed": seed, "rounds_run": len(record["history"]),
            "reached": config.stop_at is not None and record["final_test_accuracy"] >= config.stop_at,
            "curve": [round(h["test_accuracy"], 6) for h in record["history"]],
            "wall_s": record["wall_time_s"], "cpu_s": time.process_time() - cpu,
            "bytes_total": record["bytes_communicated"]["total"]}


def _job_key(job: tuple[dict, int]) -> str:
    return json.dumps([job[0], job[1]], sort_keys=True)


def run_jobs(jobs: Sequence[tuple[dict, int]], workers: int, journal: str | Path | None = None) -> list[dict[str, object]]:
    """Run ``(config dict, seed)`` jobs with ``workers`` processes (1: in this process); results in job order.

    With ``journal`` (a JSON-lines file) every finished job is appended as it ends and jobs already there are
    not run again: an interrupted reproduction resumes where it stopped (same configs and seeds, same results).
    """
    done: dict[str, dict] = {}
    if journal is not None and Path(journal).is_file():
        for line in Path(journal).read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                done[entry["key"]] = entry["result"]
    todo = [job for job in jobs if _job_key(job) not in done]

    def keep(job: tuple[dict, int], result: dict) -> None:
        done[_job_key(job)] = result
        if journal is not None:
            with open(journal, "a") as handle:
                handle.write(json.dumps({"key": _job_key(job), "result": result}) + "\n")

    if workers <= 1 or len(todo) <= 1:
        for job in todo:
            keep(job, _run(job))
    else:
        with multiprocessing.get_context("fork").Pool(workers, maxtasksperchild=4) as pool:
            for job, result in zip(todo, pool.imap(_run, todo, chunksize=1)):
                keep(job, result)
    return [done[_job_key(job)] for job in jobs]


def job_cost(config: FedAvgConfig) -> float:
    """A rough cost of a run for ordering jobs (longest first): round cap × local updates per client per round."""
    return config.rounds * config.epochs * (config.num_examples / config.num_clients / config.batch_size
                                            if config.batch_size else 1.0)


def rounds_tables(
    bases: Mapping[str, FedAvgConfig | Mapping[str, object]],
    rows: Sequence[tuple[str, Mapping[str, object]]],
    target: float,
    seeds: Iterable[int],
    caps: Mapping[str, Mapping[str, int]],
    workers: int = 2,
    journal: str | Path | None = None,
) -> dict[str, dict[str, dict[str, object]]]:
    """Rounds to ``target`` for each base config (e.g. one per partition) × named row of overrides × seed.

    ``rows``: ``[(label, overrides)]``; ``caps[base name][label]``: the most rounds a run may take (a run that
    has not reached the target by then counts as not reached). All runs go to one pool of ``workers``
    processes, longest first (:func:`job_cost`). Returns ``{base name: {label: {"rounds": [per seed or None],
    "reached": n, "mean", "std" (over the seeds that reached; ``None`` if none), "final_accuracy": [...],
    "curves": [[per round] per seed], "wall_s", "cpu_s" (summed over seeds), "cap"}}}``. ``journal``: see :func:`run_jobs`.
    """
    seeds = require_seeds(list(seeds))
    jobs, keys = [], []
    for name, base in bases.items():
        base = validate_fedavg_config(base)
        for label, overrides in rows:
            config = with_overrides(base, **overrides, rounds=int(caps[name][label]), stop_at=float(target))
            for seed in seeds:
                jobs.append((asdict(config), seed))
                keys.append((name, label, job_cost(config)))
    order = sorted(range(len(jobs)), key=lambda i: -keys[i][2])
    done = run_jobs([jobs[i] for i in order], workers, journal)
    results = [None] * len(jobs)
    for i, result in zip(order, done):
        results[i] = result
    tables: dict[str, dict[str, dict[str, object]]] = {}
    for (name, label, _), result in zip(keys, results):
        row = tables.setdefault(name, {}).setdefault(label, {"rounds": [], "curves": [], "final_accuracy": [],
                                                             "wall_s": 0.0, "cap": int(caps[name][label])})
        row["rounds"].append(result["rounds_run"] if result["reached"] else None)
        row["curves"].append(result["curve"])
        row["final_accuracy"].append(result["curve"][-1])
        row["wall_s"] += result["wall_s"]
        row["cpu_s"] = row.get("cpu_s", 0.0) + result["cpu_s"]  # CPU seconds: the cost on an idle machine
    for table in tables.values():
        for row in table.values():
            hit = [r for r in row["rounds"] if r is not None]
            row["reached"] = len(hit)
            row["mean"], row["std"] = mean_and_spread(hit) if hit else (None, None)
    return tables


def speedup(baseline_mean: float | None, mean: float | None) -> float | None:
    """``baseline_mean / mean`` (FedSGD's rounds over a setting's), ``None`` if either is missing."""
    if baseline_mean is None or mean is None or mean <= 0:
        return None
    return baseline_mean / mean


def format_rounds(row: Mapping[str, object], n_seeds: int) -> str:
    """``"12.3 ± 1.5"`` over the seeds that reached; ``"> cap"`` when none did; ``"(2/3)"`` appended if some did not."""
    if row["mean"] is None:
        return f"> {row['cap']}"
    text = f"{row['mean']:.1f} ± {row['std']:.1f}"
    return text if row["reached"] == n_seeds else f"{text} ({row['reached']}/{n_seeds} reached; cap {row['cap']})"


def centralized_curve(config: FedAvgConfig, epochs: int, seed: int) -> list[float]:
    """Test accuracy after each of ``epochs`` epochs of minibatch SGD on the union of the clients' data."""
    from trainsys.fedavg.experiments import train_centralized_baseline
    record = train_centralized_baseline(with_overrides(config, rounds=epochs, seed=seed, stop_at=None))
    return [h["test_accuracy"] for h in record["history"]]
