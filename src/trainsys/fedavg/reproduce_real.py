r"""The two ``make reproduce`` sections of Module 3: FedAvg vs FedSGD on Fashion-MNIST and on Shakespeare.

Each section runs :func:`trainsys.fedavg.real.rounds_tables` and writes a record (:mod:`trainsys.evidence`)
whose ``figures`` hold the table the lessons and the book show, and whose ``extra`` holds every run's
per-round accuracy curve. ``quick=True`` re-runs the first rounds of a few settings for seed 0, compares
them with the record's curves (:func:`check_against_record`) and writes nothing.

**Tolerance of the quick check, derived.** The quick run repeats the recorded computation exactly (same
seeds, same code), so on the machine that wrote the record the accuracies are equal. Another CPU's BLAS
may sum the float32 dot products in another order: each logit then moves by about
``sqrt(d) · eps · |activations|`` per layer (``d ≤ 784`` terms, ``eps = 2^-24``), and the weights after a few
rounds of SGD by a few such units more — far below ``LOGIT_DELTA = 1e-3``. A test prediction can change only
if its two largest logits are closer than that, so the accuracy may differ by at most the fraction of test
examples whose top-two margin is below ``LOGIT_DELTA`` in the re-run model — counted in the check, per round.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

import torch

from trainsys.evidence import load_record, write_record
from trainsys.fedavg.real import (MCMAHAN_TABLE2_CNN_MNIST, SETTINGS, centralized_curve, fashion_mnist_config,
                                  format_rounds, rounds_tables, setting_label, shakespeare_config)
from trainsys.fedavg.server import FedAvgConfig, evaluate_accuracy, prepare_run, run_fedavg, with_overrides

LOGIT_DELTA = 1e-3
JOURNAL_DIR = Path(__file__).resolve().parents[3] / "_build" / "reproduce"
"""Finished runs of an interrupted ``make reproduce`` (JSON lines; ``make clean`` removes them)."""
SEEDS = (0, 1, 2)

# --- Fashion-MNIST -----------------------------------------------------------------------------------
FASHION_TARGET = 0.70
"""70 % test accuracy: the centralized 2NN passes it within its first epoch (SGD, B = 10; 81.6 % after it in a
pilot) and levels off near 86-87 % after a few (the record's ``centralized`` curve). Far below the paper's
near-ceiling targets (97 % for its 2NN on MNIST, 99 % for the CNN): FedSGD reaches it in 60-70 rounds (a pilot,
lr 0.3), so the whole table fits 15 minutes on two cores — and on the machine shared by every course author that
ran it, load average above 20 on 2 cores, within the time there was."""
FASHION_LR = {None: 0.3, 10: 0.05}
"""Learning rate by B: B = ∞ (full-batch steps) 0.3, B = 10 0.05 — one rate per B, not tuned per setting
as the paper does (a pilot on seed 0: lr 1.0 diverged for FedSGD, 0.3 reached 79 % in 150 rounds)."""
FASHION_EPOCH_BUDGET = {None: 100, 10: 10}
"""A run's round cap is this many local epochs divided by E, at least one round (B = ∞: 100, 20, 5 rounds for
E = 1, 5, 20; B = 10: 10, 2, 1): the same local computation for every setting of one B. A run that has not reached the target by its cap
is reported as not reached, and a speed-up against it as a lower bound."""
CENTRALIZED_EPOCHS = 3
QUICK_ROUNDS = 3


def fashion_rows() -> list[tuple[str, dict]]:
    """``[(label, overrides)]`` for Table 2's settings with the rates of :data:`FASHION_LR`."""
    return [(setting_label(m, e, b), {"epochs": e, "batch_size": b, "lr": FASHION_LR[b]}) for m, e, b in SETTINGS]


def ratio_cell(numerator: Mapping, denominator: Mapping) -> str | None:
    """``numerator``'s mean rounds over ``denominator``'s as ``"12.3×"``. A row whose runs never reached the target
    took more rounds than its cap: ``"> 12.3×"`` when that is the numerator (cap / mean), ``"< 12.3×"`` when it is
    the denominator (mean / cap); ``None`` when neither reached it."""
    if numerator["mean"] is None and denominator["mean"] is None:
        return None
    if numerator["mean"] is None:
        return f"> {numerator['cap'] / denominator['mean']:.1f}×"
    if denominator["mean"] is None:
        return f"< {numerator['mean'] / denominator['cap']:.1f}×"
    return f"{numerator['mean'] / denominator['mean']:.1f}×"


def refresh_figures(name: str) -> dict:
    """Recompute record ``name``'s figures from the runs it stores (``extra``) and rewrite only them.

    For a change of how a table is laid out: the runs, seeds, environment and wall time stay those of the run
    that made them. Returns the record.
    """
    from trainsys.evidence import RECORDS_DIR
    record = load_record(name)
    if name == "fedavg-fashion-mnist":
        figures = fashion_figures(record["extra"]["runs"], record["extra"]["centralized_curve"], len(record["seeds"]))
    elif name == "fedavg-shakespeare":
        figures = shakespeare_figures(record["extra"]["runs"], len(record["seeds"]), record["figures"]["data"])
    else:
        raise ValueError(f"name must be 'fedavg-fashion-mnist' or 'fedavg-shakespeare', got {name!r}")
    record["figures"] = figures
    path = RECORDS_DIR / f"{name}.json"
    path.write_text(json.dumps(record, indent=1, allow_nan=False) + "\n")
    return record


def fashion_figures(runs: Mapping[str, Mapping[str, Mapping]], central: Sequence[float], n_seeds: int) -> dict:
    """The record's figures from the per-run results ``runs[partition][label]`` (see :func:`~trainsys.fedavg.real.rounds_tables`)."""
    iid, non = runs["iid"], runs["shards"]
    paper_sgd = MCMAHAN_TABLE2_CNN_MNIST[("FedSGD", 1, None)]
    rows = []
    for method, e, b in SETTINGS:
        label = setting_label(method, e, b)
        paper = MCMAHAN_TABLE2_CNN_MNIST[(method, e, b)]
        rows.append([label, e * (600 // b if b else 1), format_rounds(iid[label], n_seeds),
                     ratio_cell(iid["FedSGD"], iid[label]), format_rounds(non[label], n_seeds),
                     ratio_cell(non["FedSGD"], non[label]), ratio_cell(non[label], iid[label]),
                     f"{paper[0]} ({paper_sgd[0] / paper[0]:.1f}×)", f"{paper[1]} ({paper_sgd[1] / paper[1]:.1f}×)"])
    return {
        "rounds": {"columns": ["setting", "u", "IID rounds", "IID speed-up", "non-IID rounds", "non-IID speed-up",
                               "non-IID / IID", "paper IID", "paper non-IID"],
                   "rows": rows,
                   "caption": (f"Fashion-MNIST, 2NN (199,210 parameters), K = 100, C = 0.1: rounds to "
                               f"{FASHION_TARGET:.0%} test accuracy, mean ± std over {n_seeds} seeds; u = local "
                               "updates per client per round; speed-up over FedSGD; non-IID / IID: the slowdown. "
                               "Paper: McMahan et al. 2017, Table 2 (CNN on MNIST, target 99%).")},
        "target": FASHION_TARGET,
        "mean_rounds": {p: {label: row["mean"] for label, row in r.items()} for p, r in runs.items()},
        "centralized": {"columns": ["epoch", "test accuracy"],
                        "rows": [[i + 1, a] for i, a in enumerate(central)], "formats": {"test accuracy": "{:.3f}"},
                        "caption": "The centralized 2NN (SGD, B = 10, lr 0.05, seed 0) on the union of the data."},
    }


def fashion_mnist_section(quick: bool = False, workers: int = 2) -> dict:
    """Rounds to 70 % on Fashion-MNIST, IID and pathological non-IID, FedSGD and FedAvg (Table 2's settings)."""
    if quick:
        return check_fashion_quick()
    start = time.perf_counter()
    JOURNAL_DIR.mkdir(parents=True, exist_ok=True)
    base = fashion_mnist_config()
    caps = {label: max(FASHION_EPOCH_BUDGET[o["batch_size"]] // o["epochs"], 1) for label, o in fashion_rows()}
    with multiprocessing.get_context("fork").Pool(1) as side:  # the centralized curve beside the federated runs
        pending = side.apply_async(centralized_curve, (with_overrides(base, batch_size=10, lr=FASHION_LR[10]),
                                                       CENTRALIZED_EPOCHS, 0))
        runs = rounds_tables({p: with_overrides(base, partition=p) for p in ("iid", "shards")}, fashion_rows(),
                             FASHION_TARGET, SEEDS, {"iid": caps, "shards": caps}, workers,
                             journal=JOURNAL_DIR / "fedavg-fashion-mnist.jsonl")
        central = pending.get()
    if central[0] < FASHION_TARGET:
        raise RuntimeError(f"the centralized 2NN reached {central[0]:.3f} after one epoch, below the target "
                           f"{FASHION_TARGET}; the target's justification no longer holds")
    from trainsys.fedavg.tasks import task_datasets
    return write_record("fedavg-fashion-mnist", datasets=task_datasets(base), config={
        "base": asdict(base), "settings": [list(s) for s in SETTINGS],
        "lr_by_batch": {str(k): v for k, v in FASHION_LR.items()},
        "round_caps": caps, "target": FASHION_TARGET,
        "partitions": {"iid": "random deal, 600 each", "shards": "sorted by label, 200 shards of 300, 2 each"}},
        seeds=list(SEEDS), figures=fashion_figures(runs, central, len(SEEDS)), wall_s=time.perf_counter() - start,
        extra={"runs": runs, "centralized_curve": central},
        notes=("Rounds to the target per run (the run stops there); FedSGD is E = 1, B = ∞. Learning rates are "
               "one per B, not tuned per setting as in the paper."))


def _margins_below(model: torch.nn.Module, test, delta: float) -> int:
    model.eval()
    with torch.no_grad():
        top2 = model(test.features).topk(2, dim=-1).values  # (n, 2) or (n, T, 2)
    return int(((top2[..., 0] - top2[..., 1]) < delta).sum())


def replay(config: FedAvgConfig, rounds: int) -> list[tuple[float, float]]:
    """``[(accuracy, tolerance)]`` for the first ``rounds`` rounds of ``config`` (seed as configured).

    The tolerance of round ``t`` is the fraction of test targets whose top-two logit margin is below
    :data:`LOGIT_DELTA` after that round (see the module docstring).
    """
    from trainsys.fedavg.server import make_partition, run_communication_round
    import numpy as np
    train, test, model, seeds = prepare_run(config)
    partition = make_partition(config, train, seeds["partition"])
    rng = np.random.default_rng(seeds["rounds"])
    out = []
    n = test.labels.numel()
    for _ in range(rounds):
        run_communication_round(model, train, partition, config.fraction, config.epochs, config.batch_size,
                                config.lr, rng, config.momentum)
        out.append((evaluate_accuracy(model, test), _margins_below(model, test, LOGIT_DELTA) / n))
    return out


def check_against_record(record: Mapping, partition: str, label: str, config: FedAvgConfig,
                         rounds: int = QUICK_ROUNDS) -> list[dict]:
    """Re-run seed 0 of ``label`` for ``rounds`` rounds; raise ``AssertionError`` where the accuracy differs from the
    record's curve by more than the derived tolerance. Returns the per-round comparison."""
    curve = record["extra"]["runs"][partition][label]["curves"][record["seeds"].index(0)]
    comparison = []
    for t, (accuracy, tol) in enumerate(replay(with_overrides(config, seed=0), rounds)):
        if t >= len(curve):
            break
        entry = {"round": t + 1, "measured": accuracy, "recorded": curve[t], "tolerance": tol + 1e-6}
        # + 1e-6: the record rounds accuracies to 6 decimals
        comparison.append(entry)
        if abs(accuracy - curve[t]) > entry["tolerance"]:
            raise AssertionError(f"{record['name']} {partition} {label} round {t + 1}: measured {accuracy:.6f}, "
                                 f"recorded {curve[t]:.6f}, tolerance {entry['tolerance']:.6f}")
    return comparison


def check_fashion_quick(settings: Sequence[str] = ("FedSGD", "FedAvg E=1, B=10"),
                        partitions: Sequence[str] = ("iid", "shards")) -> dict:
    """The CI version: seed 0's first rounds of ``settings`` on ``partitions``, checked against the record."""
    record = load_record("fedavg-fashion-mnist")
    overrides = dict(fashion_rows())
    checks = {f"{p} / {s}": check_against_record(record, p, s, fashion_mnist_config(partition=p, **overrides[s]))
              for p in partitions for s in settings}
    return {"name": "fedavg-fashion-mnist", "figures": {}, "checks": checks}


# --- Shakespeare ------------------------------------------------------------------------------------------
SHAKESPEARE_TARGET = 0.25
"""Next-character accuracy on the held-out sequences (the fraction of the 500 × 32 targets): above the 18 % of
always guessing a space (the model at initialisation) and the plateau near 27-28 % where the small model sat
for rounds 4-30 of a pilot FedAvg run (seed 0, lr 0.5), so a run that reaches it has learnt more than the
most frequent character."""
SHAKESPEARE_MODEL = {"hidden_layers": 1, "d_hidden": 32}
"""One GPT block of width 32 (4 heads), context 32: 16,064 parameters at the 71-character vocabulary."""
SHAKESPEARE_ROWS = (("FedSGD", {"epochs": 1, "batch_size": None, "lr": 0.5}),
                    ("FedAvg E=1, B=10", {"epochs": 1, "batch_size": 10, "lr": 0.5}))
SHAKESPEARE_CAPS = {"FedSGD": 40, "FedAvg E=1, B=10": 20}
"""Round caps (a pilot: FedSGD with lr 2.0 diverged; FedAvg passed 25 % at round 4). FedSGD's cap is what the
shared machine afforded: where no seed reached the target by then, the table says "> 40" and FedAvg's
speed-up is a lower bound."""
SHAKESPEARE_PARTITIONS = {"natural": "one client per (play, role)", "iid": "the same sequences dealt at random"}


def shakespeare_base() -> FedAvgConfig:
    """:func:`shakespeare_config` with the model of :data:`SHAKESPEARE_MODEL` (C = 0.01: 5 of 453 roles a round)."""
    return shakespeare_config(**SHAKESPEARE_MODEL, test_sequences=500)


def shakespeare_figures(runs: Mapping[str, Mapping[str, Mapping]], n_seeds: int, facts: Mapping) -> dict:
    """The record's figures from the per-run results ``runs[partition][label]``."""
    rows = []
    for label, _ in SHAKESPEARE_ROWS:
        nat, iid = runs["natural"][label], runs["iid"][label]
        rows.append([label, format_rounds(nat, n_seeds), ratio_cell(runs["natural"]["FedSGD"], nat),
                     format_rounds(iid, n_seeds), ratio_cell(runs["iid"]["FedSGD"], iid), ratio_cell(nat, iid)])
    return {
        "rounds": {"columns": ["setting", "by role: rounds", "by role: speed-up", "IID: rounds", "IID: speed-up",
                               "by role / IID"],
                   "rows": rows,
                   "caption": (f"Shakespeare, {facts['clients']} clients (one per play and role with ≥ 2,000 "
                               f"characters), 5 per round (C = 0.01), a {facts['parameters']:,}-parameter GPT: "
                               f"rounds to {SHAKESPEARE_TARGET:.0%} next-character accuracy on held-out text, mean ± std "
                               f"over {n_seeds} seeds; speed-up over FedSGD.")},
        "target": SHAKESPEARE_TARGET,
        "mean_rounds": {p: {label: row["mean"] for label, row in r.items()} for p, r in runs.items()},
        "data": {k: v for k, v in facts.items() if k != "vocabulary"},
    }


def shakespeare_section(quick: bool = False, workers: int = 2) -> dict:
    """Rounds to the target on Shakespeare by role and on an IID reshuffle, FedSGD vs FedAvg."""
    from trainsys.fedavg.model import count_parameters
    from trainsys.fedavg.tasks import build_task_model, load_task, task_datasets
    base = shakespeare_base()
    if quick:
        record = load_record("fedavg-shakespeare")
        label, overrides = SHAKESPEARE_ROWS[1]
        checks = {p: check_against_record(record, p, label, with_overrides(base, partition=p, **overrides))
                  for p in SHAKESPEARE_PARTITIONS}
        return {"name": "fedavg-shakespeare", "figures": {}, "checks": checks}
    start = time.perf_counter()
    JOURNAL_DIR.mkdir(parents=True, exist_ok=True)
    facts = {**load_task(base).facts, "parameters": count_parameters(build_task_model(base, 0))}
    runs = rounds_tables({p: with_overrides(base, partition=p) for p in SHAKESPEARE_PARTITIONS}, SHAKESPEARE_ROWS,
                         SHAKESPEARE_TARGET, SEEDS, {p: SHAKESPEARE_CAPS for p in SHAKESPEARE_PARTITIONS}, workers,
                         journal=JOURNAL_DIR / "fedavg-shakespeare.jsonl")
    return write_record("fedavg-shakespeare", datasets=task_datasets(base), config={
        "base": asdict(base), "rows": [[label, o] for label, o in SHAKESPEARE_ROWS], "caps": SHAKESPEARE_CAPS,
        "target": SHAKESPEARE_TARGET, "partitions": SHAKESPEARE_PARTITIONS}, seeds=list(SEEDS),
        figures=shakespeare_figures(runs, len(SEEDS), facts), wall_s=time.perf_counter() - start,
        extra={"runs": runs, "vocabulary": facts["vocabulary"]},
        notes=("Token-level next-character accuracy over 500 held-out sequences of 32 characters drawn once from "
               "the clients' last 20 % of text; a run stops at the target or its cap."))
