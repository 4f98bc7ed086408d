"""Red team, Module 3 Part 6 (experiments and analysis): wrong answers and correct alternatives written from the
release notebooks only."""
from __future__ import annotations

import dataclasses
import math
import numbers
import statistics
import time
from dataclasses import asdict
from collections.abc import Mapping

import numpy as np
import torch
from tqdm.auto import tqdm

from trainsys.fedavg.client import train_client_locally
from trainsys.fedavg.data import LabelledDataset
from trainsys.fedavg.server import (
    FedAvgConfig,
    evaluate_accuracy,
    prepare_run,
    run_fedavg,
    validate_fedavg_config,
    with_overrides,
)


_FIELDS = {f.name for f in dataclasses.fields(FedAvgConfig)}


def _is_int(x):
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _is_real(x):
    return isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_))


def _sample_std(values, ddof=1):
    if len(values) < 2:
        return 0.0
    return float(np.std(np.asarray(values, dtype=float), ddof=ddof))


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 21: train_centralized_baseline
# ----------------------------------------------------------------------------------------------------------------------

def _central(config, *, flaw=None):
    cfg = validate_fedavg_config(config)
    t0 = time.perf_counter()
    if flaw == "global_seed":
        torch.manual_seed(cfg.seed)
    train, test, model, seeds = prepare_run(cfg)
    if flaw == "with_test":
        train = LabelledDataset(torch.cat([train.features, test.features]), torch.cat([train.labels, test.labels]),
                                train.n_classes)
    idx = torch.arange(len(train))
    rng = np.random.default_rng(seeds["rounds"])
    initial = evaluate_accuracy(model, test)
    history = []
    E = cfg.epochs if flaw == "config_epochs" else 1
    for t in tqdm(range(1, cfg.rounds + 1), desc="centralized", disable=not cfg.progress):
        if flaw == "same_shuffle":
            seed_t = int(np.random.default_rng(seeds["rounds"]).integers(0, 2**31 - 1))
        else:
            seed_t = int(rng.integers(0, 2**31 - 1))
        out = train_client_locally(model, train, idx, E, cfg.batch_size, cfg.lr, seed_t,
                                   0.0 if flaw == "no_momentum" else cfg.momentum)
        acc = evaluate_accuracy(model, train if flaw == "train_accuracy" else test)
        history.append({"round": t, "test_accuracy": acc, "train_loss": out["epoch_losses"][0]})
    final = max(h["test_accuracy"] for h in history) if flaw == "best_final" else history[-1]["test_accuracy"]
    return {"kind": "centralized", "config": asdict(cfg), "seeds": seeds, "initial_test_accuracy": initial,
            "history": history, "final_test_accuracy": final,
            "bytes_communicated": {"up": 0, "down": 0, "total": 0}, "wall_time_s": float(time.perf_counter() - t0)}


def _mkc(flaw, doc):
    def train_centralized_baseline(config):
        return _central(config, flaw=flaw)
    train_centralized_baseline.__name__ = f"_central_{flaw}"
    train_centralized_baseline.__doc__ = doc
    return train_centralized_baseline


_central_with_test = _mkc("with_test", "trains on train + held-out")
_central_same_shuffle = _mkc("same_shuffle", "one shuffle seed for every epoch")
_central_train_accuracy = _mkc("train_accuracy", "training accuracy recorded")
_central_no_momentum = _mkc("no_momentum", "momentum not passed")
_central_config_epochs = _mkc("config_epochs", "config.epochs passes per 'round'")
_central_global_seed = _mkc("global_seed", "torch.manual_seed(config.seed)")
_central_best_final = _mkc("best_final", "final accuracy = best epoch")


def _central_alt_seeds_upfront(config):
    """All T epoch seeds drawn in one rng.integers(..., size=T) call (the same numbers as T scalar draws)."""
    cfg = validate_fedavg_config(config)
    started = time.perf_counter()
    train, test, model, seeds = prepare_run(cfg)
    epoch_seeds = np.random.default_rng(seeds["rounds"]).integers(0, 2**31 - 1, size=cfg.rounds).tolist()
    everyone = torch.arange(len(train), dtype=torch.int64)
    record = {"kind": "centralized", "config": asdict(cfg), "seeds": dict(seeds),
              "initial_test_accuracy": evaluate_accuracy(model, test), "history": []}
    for t, seed_t in enumerate(epoch_seeds, start=1):
        result = train_client_locally(model, train, everyone, 1, cfg.batch_size, cfg.lr, int(seed_t), cfg.momentum)
        record["history"].append({"round": t, "test_accuracy": evaluate_accuracy(model, test),
                                  "train_loss": result["epoch_losses"][0]})
    record["final_test_accuracy"] = record["history"][-1]["test_accuracy"]
    record["bytes_communicated"] = {"up": 0, "down": 0, "total": 0}
    record["wall_time_s"] = time.perf_counter() - started
    return record


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 22: run_fedavg_iid
# ----------------------------------------------------------------------------------------------------------------------

def _iid(config, *, flaw=None):
    if flaw == "as_given":
        return run_fedavg(config)
    if flaw == "fresh_default":
        cfg = validate_fedavg_config(config)
        return run_fedavg({"partition": "iid", "seed": cfg.seed})
    if flaw == "drop_unknown" and isinstance(config, Mapping):
        config = {k: v for k, v in config.items() if k in _FIELDS}
    if flaw == "mutate_dict" and isinstance(config, dict):
        config["partition"] = "iid"
        return run_fedavg(config)
    cfg = with_overrides(config, partition="iid")
    if flaw == "reset_unused":
        defaults = FedAvgConfig()
        cfg = with_overrides(cfg, shards_per_client=defaults.shards_per_client, alpha=defaults.alpha)
    if flaw == "quiet":
        cfg = with_overrides(cfg, progress=False)
    if flaw == "seed_offset":
        cfg = with_overrides(cfg, seed=cfg.seed + 1)
    return run_fedavg(cfg)


def _mki(flaw, doc):
    def run_fedavg_iid(config):
        return _iid(config, flaw=flaw)
    run_fedavg_iid.__name__ = f"_iid_{flaw}"
    run_fedavg_iid.__doc__ = doc
    return run_fedavg_iid


_iid_as_given = _mki("as_given", "run_fedavg(config)")
_iid_fresh_default = _mki("fresh_default", "a fresh default config with the caller's seed")
_iid_reset_unused = _mki("reset_unused", "shards_per_client and alpha reset to the defaults")
_iid_drop_unknown = _mki("drop_unknown", "unknown keys silently dropped")
_iid_mutate_dict = _mki("mutate_dict", "writes partition='iid' into the caller's dict")
_iid_quiet = _mki("quiet", "progress forced off")
_iid_seed_offset = _mki("seed_offset", "the IID arm runs with seed + 1")


def _iid_alt_replace(config):
    """dataclasses.replace on a FedAvgConfig, a merged copy for a dict; run_fedavg validates either."""
    if isinstance(config, FedAvgConfig):
        return run_fedavg(dataclasses.replace(validate_fedavg_config(config), partition="iid"))
    if isinstance(config, Mapping):
        return run_fedavg({**config, "partition": "iid"})
    return run_fedavg(with_overrides(config, partition="iid"))


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 23: run_fedavg_non_iid
# ----------------------------------------------------------------------------------------------------------------------

def _non(config, *, flaw=None):
    if flaw == "as_given":
        return run_fedavg(config)
    if flaw == "mutate_dict" and isinstance(config, dict):
        cfg = validate_fedavg_config(config)
        if cfg.partition == "iid":
            config["partition"] = "shards"
        return run_fedavg(config)
    cfg = validate_fedavg_config(config)
    if flaw == "always_shards":
        part = "shards"
    elif flaw == "always_dirichlet":
        part = "dirichlet"
    else:
        part = "shards" if cfg.partition == "iid" else cfg.partition
    overrides = {"partition": part}
    if flaw == "paper_shards" and cfg.partition == "iid":
        overrides["shards_per_client"] = 2
    if flaw == "reset_alpha" and part == "shards":
        overrides["alpha"] = FedAvgConfig().alpha
    if flaw == "quiet":
        overrides["progress"] = False
    return run_fedavg(with_overrides(cfg, **overrides))


def _mkn(flaw, doc):
    def run_fedavg_non_iid(config):
        return _non(config, flaw=flaw)
    run_fedavg_non_iid.__name__ = f"_non_{flaw}"
    run_fedavg_non_iid.__doc__ = doc
    return run_fedavg_non_iid


_non_as_given = _mkn("as_given", "run_fedavg(config)")
_non_always_shards = _mkn("always_shards", "shards whatever was asked")
_non_always_dirichlet = _mkn("always_dirichlet", "Dirichlet whatever was asked")
_non_mutate_dict = _mkn("mutate_dict", "writes partition='shards' into the caller's dict")
_non_paper_shards = _mkn("paper_shards", "IID becomes shards with shards_per_client forced to 2")
_non_reset_alpha = _mkn("reset_alpha", "alpha reset to the default for a shards run")
_non_quiet = _mkn("quiet", "progress forced off")


def _non_alt_branches(config):
    """Explicit branches; dataclasses.replace on the validated config."""
    cfg = validate_fedavg_config(config)
    if cfg.partition in ("shards", "dirichlet"):
        return run_fedavg(cfg)
    return run_fedavg(dataclasses.replace(cfg, partition="shards"))


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 24: compute_non_iid_gap
# ----------------------------------------------------------------------------------------------------------------------

def _rows(arg, name, *, flaw=None):
    if isinstance(arg, Mapping):
        runs = [arg]
    elif isinstance(arg, (list, tuple)) and arg and isinstance(arg[0], Mapping) and "test_accuracy" in arg[0]:
        runs = [arg]
    elif isinstance(arg, (list, tuple)) and arg:
        runs = list(arg)
    else:
        raise ValueError(f"{'non_iid_history' if flaw == 'blame_non' else name} must be a run, a history or a "
                         f"non-empty list of runs")
    rows = []
    for run in runs:
        if isinstance(run, Mapping):
            if "history" not in run:
                raise ValueError(f"{name}: a run record needs a 'history'")
            hist = run["history"]
        else:
            hist = run
        if not isinstance(hist, (list, tuple)) or (len(hist) == 0 and flaw != "empty_inner_ok"):
            raise ValueError(f"{name}: a history must be a non-empty list of rounds")
        row = []
        for r in hist:
            if flaw == "key_error":
                row.append(float(r["test_accuracy"]))
                continue
            if not isinstance(r, Mapping) or "test_accuracy" not in r:
                raise ValueError(f"{name}: a round without 'test_accuracy'")
            row.append(float(r["test_accuracy"]))
        rows.append(row)
    if flaw == "ragged_numpy":
        return np.array(rows, dtype=float)
    if len({len(r) for r in rows}) != 1:
        raise ValueError(f"{'non_iid_history' if flaw == 'blame_non' else name}: runs of different lengths")
    return np.array(rows, dtype=float)


def _gap(iid_history, non_iid_history, *, flaw=None):
    A = _rows(iid_history, "iid_history", flaw=flaw)
    B = _rows(non_iid_history, "non_iid_history", flaw=flaw)
    if flaw == "truncate":
        T = min(A.shape[1], B.shape[1])
        A, B = A[:, :T], B[:, :T]
    if A.shape != B.shape:
        raise ValueError(f"non_iid_history has {B.shape[0]} seeds x {B.shape[1]} rounds, iid_history "
                         f"{A.shape[0]} x {A.shape[1]}")
    g = B - A if flaw == "sign" else A - B
    S, T = g.shape
    mean = g.mean(axis=0)
    if flaw == "population_std":
        std = g.std(axis=0)
    elif flaw == "unpaired_std":
        std = np.sqrt(A.std(axis=0, ddof=1) ** 2 + B.std(axis=0, ddof=1) ** 2) if S > 1 else np.zeros(T)
    else:
        std = g.std(axis=0, ddof=1) if S > 1 else np.zeros(T)
    final_mean = float(mean[-1])
    if flaw == "best_rounds":
        final_mean = float((A.max(axis=1) - B.max(axis=1)).mean())
    out = {"rounds": list(range(1, T + 1)), "gap_mean": mean.tolist(), "gap_std": std.tolist(),
           "final_gap_mean": final_mean, "final_gap_std": float(std[-1]), "mean_gap": float(g.mean()),
           "num_seeds": int(S)}
    if flaw == "numpy_scalars":
        out.update(final_gap_mean=mean[-1], final_gap_std=std[-1], mean_gap=g.mean(), num_seeds=np.int64(S))
    return out


def _mkg(flaw, doc):
    def compute_non_iid_gap(iid_history, non_iid_history):
        return _gap(iid_history, non_iid_history, flaw=flaw)
    compute_non_iid_gap.__name__ = f"_gap_{flaw}"
    compute_non_iid_gap.__doc__ = doc
    return compute_non_iid_gap


_gap_sign = _mkg("sign", "non - iid")
_gap_truncate = _mkg("truncate", "truncated to the shorter run")
_gap_population_std = _mkg("population_std", "np.std with ddof=0")
_gap_unpaired_std = _mkg("unpaired_std", "spread of the arms combined, not of the paired differences")
_gap_best_rounds = _mkg("best_rounds", "final gap = best round minus best round")
_gap_key_error = _mkg("key_error", "a round without test_accuracy raises KeyError")
_gap_ragged_numpy = _mkg("ragged_numpy", "ragged runs left to NumPy's error")
_gap_numpy_scalars = _mkg("numpy_scalars", "NumPy scalars in the result")
_gap_blame_non = _mkg("blame_non", "every argument error names non_iid_history")
_gap_empty_inner_ok = _mkg("empty_inner_ok", "an empty history inside a list crashes later")


def _gap_alt_statistics(iid_history, non_iid_history):
    """Pure Python: statistics.fmean / statistics.stdev (sample spread) on the paired differences."""
    def table(arg, name):
        if isinstance(arg, dict) and "history" in arg:
            runs = [arg["history"]]
        elif isinstance(arg, list) and arg and isinstance(arg[0], dict) and "test_accuracy" in arg[0]:
            runs = [arg]
        elif isinstance(arg, (list, tuple)) and len(arg) > 0:
            runs = [r["history"] if isinstance(r, dict) and "history" in r else r for r in arg]
        else:
            raise ValueError(f"{name}: expected a run, a history, or a non-empty list of them")
        out = []
        for hist in runs:
            if not isinstance(hist, (list, tuple)) or not hist:
                raise ValueError(f"{name}: empty or malformed history")
            try:
                out.append([float(r["test_accuracy"]) for r in hist])
            except (KeyError, TypeError):
                raise ValueError(f"{name}: every round needs a test_accuracy") from None
        if any(len(r) != len(out[0]) for r in out):
            raise ValueError(f"{name}: runs of different lengths")
        return out

    iid = table(iid_history, "iid_history")
    non = table(non_iid_history, "non_iid_history")
    if len(iid) != len(non) or len(iid[0]) != len(non[0]):
        raise ValueError(f"non_iid_history: {len(non)} seeds x {len(non[0])} rounds against "
                         f"{len(iid)} x {len(iid[0])}")
    S, T = len(iid), len(iid[0])
    gaps = [[a - b for a, b in zip(ra, rb)] for ra, rb in zip(iid, non)]
    per_round = [[gaps[s][t] for s in range(S)] for t in range(T)]
    means = [statistics.fmean(col) for col in per_round]
    stds = [statistics.stdev(col) if S > 1 else 0.0 for col in per_round]
    return {"rounds": list(range(1, T + 1)), "gap_mean": means, "gap_std": stds, "final_gap_mean": means[-1],
            "final_gap_std": stds[-1], "mean_gap": statistics.fmean(means), "num_seeds": S}


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 25: rounds_to_target_vs_local_epochs
# ----------------------------------------------------------------------------------------------------------------------

def _check_seeds(seeds, *, flaw=None):
    if not isinstance(seeds, (list, tuple)) or len(seeds) == 0:
        raise ValueError("seeds must be a non-empty list of distinct ints >= 0")
    for s in seeds:
        if not _is_int(s):
            raise TypeError(f"seeds must hold integers, got {type(s).__name__}")
        if s < 0 and flaw != "negative_seeds":
            raise ValueError(f"seeds must be >= 0, got {s}")
    if flaw != "repeated_seeds" and len(set(seeds)) != len(seeds):
        raise ValueError("seeds must be distinct")
    return [int(s) for s in seeds]


def _r2t(config, epochs_list, target, seeds=(0, 1, 2), *, flaw=None):
    t0 = time.perf_counter()
    cfg = validate_fedavg_config(config)
    kinds = (list,) if flaw == "list_only" else (list, tuple)
    if not isinstance(epochs_list, kinds) or len(epochs_list) == 0:
        raise ValueError("epochs_list must be a non-empty list of ints >= 1")
    for E in epochs_list:
        ok = isinstance(E, (int, np.integer)) if flaw == "bool_epochs" else _is_int(E)
        if not ok:
            raise TypeError(f"epochs_list must hold integers, got {type(E).__name__}")
        if E < 1:
            raise ValueError(f"epochs_list entries must be >= 1, got {E}")
    if len(set(epochs_list)) != len(epochs_list):
        raise ValueError("epochs_list has a repeated value")
    ok = isinstance(target, numbers.Real) if flaw == "bool_target" else _is_real(target)
    if not ok:
        raise TypeError(f"target must be a real number, got {type(target).__name__}")
    if flaw == "nan_target":
        if target <= 0 or target > 1:
            raise ValueError(f"target must be in (0, 1], got {target}")
    elif not 0 < target <= 1:
        raise ValueError(f"target must be in (0, 1], got {target}")
    seeds = _check_seeds(seeds, flaw=flaw)
    Es = list(epochs_list) if flaw != "epochs_as_given" else epochs_list
    Es_int = [int(E) for E in epochs_list]
    tgt = target if flaw == "target_as_given" else float(target)
    curves, rtt, total = {}, {}, 0
    for E in Es_int:
        curves[E], rtt[E] = [], []
        for s in seeds:
            seed = cfg.seed + s if flaw == "seed_offset" else s
            run = run_fedavg(with_overrides(cfg, epochs=E, seed=seed))
            curve = [h["test_accuracy"] for h in run["history"]]
            curves[E].append(curve)
            if flaw == "strict_gt":
                hit = next((t for t, a in enumerate(curve, start=1) if a > tgt), None)
            else:
                hit = next((t for t, a in enumerate(curve, start=1) if a >= tgt), None)
            rtt[E].append(hit)
            total += run["bytes_communicated"]["total"]
    num_reached, mean_rounds, std_rounds, fmean, fstd = {}, {}, {}, {}, {}
    for E in Es_int:
        hit = [r for r in rtt[E] if r is not None]
        num_reached[E] = len(hit)
        if hit:
            mean_rounds[E] = np.mean(hit) if flaw == "numpy_mean" else float(np.mean(hit))
            std_rounds[E] = _sample_std(hit, ddof=0 if flaw == "population_std" else 1)
        else:
            mean_rounds[E], std_rounds[E] = None, None
        finals = [c[-1] for c in curves[E]]
        fmean[E] = float(np.mean(finals))
        fstd[E] = _sample_std(finals)
    return {"kind": "rounds_to_target_vs_local_epochs", "config": asdict(cfg),
            "epochs_list": Es if flaw == "epochs_as_given" else Es_int, "target": tgt, "seeds": list(seeds),
            "rounds_to_target": rtt, "num_reached": num_reached, "mean_rounds": mean_rounds, "std_rounds": std_rounds,
            "final_accuracy_mean": fmean, "final_accuracy_std": fstd, "accuracy_curves": curves,
            "bytes_communicated": int(total), "wall_time_s": float(time.perf_counter() - t0)}


def _mkr(flaw, doc):
    def rounds_to_target_vs_local_epochs(config, epochs_list, target, seeds=(0, 1, 2)):
        return _r2t(config, epochs_list, target, seeds, flaw=flaw)
    rounds_to_target_vs_local_epochs.__name__ = f"_r2t_{flaw}"
    rounds_to_target_vs_local_epochs.__doc__ = doc
    return rounds_to_target_vs_local_epochs


_r2t_population_std = _mkr("population_std", "std_rounds with ddof=0")
_r2t_strict_gt = _mkr("strict_gt", "accuracy > target")
_r2t_negative_seeds = _mkr("negative_seeds", "negative seeds accepted")
_r2t_repeated_seeds = _mkr("repeated_seeds", "repeated seeds accepted")
_r2t_bool_epochs = _mkr("bool_epochs", "True accepted in epochs_list")
_r2t_bool_target = _mkr("bool_target", "target=True accepted")
_r2t_list_only = _mkr("list_only", "a tuple epochs_list refused")
_r2t_nan_target = _mkr("nan_target", "NaN target accepted")
_r2t_epochs_as_given = _mkr("epochs_as_given", "epochs_list returned as passed (a tuple stays a tuple)")
_r2t_target_as_given = _mkr("target_as_given", "target returned as passed (an int 1 stays an int)")
_r2t_seed_offset = _mkr("seed_offset", "runs seeded config.seed + s")
_r2t_numpy_mean = _mkr("numpy_mean", "mean_rounds are np.float64")


def _r2t_zero_based(config, epochs_list, target, seeds=(0, 1, 2)):
    rec = _r2t(config, epochs_list, target, seeds)
    for E, curves in rec["accuracy_curves"].items():
        rec["rounds_to_target"][E] = [next((t for t, a in enumerate(c) if a >= rec["target"]), None) for c in curves]
        hit = [r for r in rec["rounds_to_target"][E] if r is not None]
        rec["mean_rounds"][E] = float(np.mean(hit)) if hit else None
        rec["std_rounds"][E] = _sample_std(hit) if hit else None
    return rec


def _r2t_unreached_as_budget(config, epochs_list, target, seeds=(0, 1, 2)):
    rec = _r2t(config, epochs_list, target, seeds)
    T = rec["config"]["rounds"]
    for E, rounds in rec["rounds_to_target"].items():
        filled = [T if r is None else r for r in rounds]
        rec["mean_rounds"][E] = float(np.mean(filled))
        rec["std_rounds"][E] = _sample_std(filled)
    return rec


def _r2t_alt_seed_outer(config, epochs_list, target, seeds=(0, 1, 2)):
    """Seeds in the outer loop, E inside (the runs are independent); statistics module for the spreads."""
    started = time.perf_counter()
    cfg = validate_fedavg_config(config)
    if not isinstance(epochs_list, (list, tuple)) or not epochs_list:
        raise ValueError("epochs_list: expected a non-empty list")
    if any(isinstance(E, bool) or not isinstance(E, numbers.Integral) for E in epochs_list):
        raise TypeError("epochs_list: entries must be ints")
    if any(E < 1 for E in epochs_list) or len(set(epochs_list)) < len(epochs_list):
        raise ValueError("epochs_list: entries must be distinct and >= 1")
    if isinstance(target, bool) or not isinstance(target, numbers.Real):
        raise TypeError("target: expected a real number")
    if not (target > 0 and target <= 1):
        raise ValueError("target: must lie in (0, 1]")
    if not isinstance(seeds, (list, tuple)) or not seeds:
        raise ValueError("seeds: expected a non-empty sequence")
    if any(isinstance(s, bool) or not isinstance(s, numbers.Integral) for s in seeds):
        raise TypeError("seeds: entries must be ints")
    if any(s < 0 for s in seeds) or len(set(seeds)) < len(seeds):
        raise ValueError("seeds: entries must be distinct and >= 0")
    Es = [int(E) for E in epochs_list]
    curves = {E: [None] * len(seeds) for E in Es}
    total = 0
    for j, s in enumerate(seeds):
        for E in Es:
            run = run_fedavg(with_overrides(cfg, epochs=E, seed=int(s)))
            curves[E][j] = [h["test_accuracy"] for h in run["history"]]
            total += run["bytes_communicated"]["up"] + run["bytes_communicated"]["down"]
    tau = float(target)
    first = {E: [next((t + 1 for t in range(len(c)) if c[t] >= tau), None) for c in curves[E]] for E in Es}
    reached = {E: [r for r in first[E] if r is not None] for E in Es}
    sd = lambda xs: statistics.stdev(xs) if len(xs) > 1 else 0.0
    return {
        "kind": "rounds_to_target_vs_local_epochs",
        "config": asdict(cfg),
        "epochs_list": Es,
        "target": tau,
        "seeds": [int(s) for s in seeds],
        "rounds_to_target": first,
        "num_reached": {E: len(reached[E]) for E in Es},
        "mean_rounds": {E: (statistics.fmean(reached[E]) if reached[E] else None) for E in Es},
        "std_rounds": {E: (sd(reached[E]) if reached[E] else None) for E in Es},
        "final_accuracy_mean": {E: statistics.fmean(c[-1] for c in curves[E]) for E in Es},
        "final_accuracy_std": {E: sd([c[-1] for c in curves[E]]) for E in Es},
        "accuracy_curves": curves,
        "bytes_communicated": total,
        "wall_time_s": time.perf_counter() - started,
    }


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 26: accuracy_vs_client_fraction
# ----------------------------------------------------------------------------------------------------------------------

def _avf(config, fractions, seeds=(0, 1, 2), *, flaw=None):
    t0 = time.perf_counter()
    cfg = validate_fedavg_config(config)
    if not isinstance(fractions, (list, tuple)) or len(fractions) == 0:
        raise ValueError("fractions must be a non-empty list of reals in (0, 1]")
    for C in fractions:
        ok = isinstance(C, numbers.Real) if flaw == "bool_fraction" else _is_real(C)
        if not ok:
            raise TypeError(f"fractions must hold real numbers, got {type(C).__name__}")
        if flaw == "nan_fraction":
            if C <= 0 or C > 1:
                raise ValueError(f"fractions entries must be in (0, 1], got {C}")
        elif not 0 < C <= 1:
            raise ValueError(f"fractions entries must be in (0, 1], got {C}")
    if flaw != "repeated_fractions" and len(set(float(C) for C in fractions)) != len(fractions):
        raise ValueError("fractions has a repeated value")
    seeds = _check_seeds(seeds, flaw=flaw)
    Cs = list(fractions) if flaw == "fractions_as_given" else [float(C) for C in fractions]
    K = cfg.num_clients
    cpr, finals, means, stds, bpr, curves = {}, {}, {}, {}, {}, {}
    total = 0
    for C in Cs:
        if flaw == "raw_ceil":
            cpr[C] = max(math.ceil(C * K), 1)
        else:
            cpr[C] = max(math.ceil(round(C * K, 12)), 1)
        curves[C], finals[C] = [], []
        for s in seeds:
            seed = cfg.seed + s if flaw == "seed_offset" else s
            run = run_fedavg(with_overrides(cfg, fraction=C, seed=seed))
            curve = [h["test_accuracy"] for h in run["history"]]
            curves[C].append(curve)
            finals[C].append(curve[-1])
            first = run["history"][0]
            bpr[C] = first["bytes_up"] + first["bytes_down"]
            total += run["bytes_communicated"]["total"]
        means[C] = np.mean(finals[C]) if flaw == "numpy_mean" else float(np.mean(finals[C]))
        stds[C] = _sample_std(finals[C])
    return {"kind": "accuracy_vs_client_fraction", "config": asdict(cfg), "fractions": Cs, "seeds": list(seeds),
            "clients_per_round": cpr, "final_accuracy": finals, "mean": means, "std": stds, "bytes_per_round": bpr,
            "accuracy_curves": curves, "bytes_communicated": int(total),
            "wall_time_s": float(time.perf_counter() - t0)}


def _mkf(flaw, doc):
    def accuracy_vs_client_fraction(config, fractions, seeds=(0, 1, 2)):
        return _avf(config, fractions, seeds, flaw=flaw)
    accuracy_vs_client_fraction.__name__ = f"_avf_{flaw}"
    accuracy_vs_client_fraction.__doc__ = doc
    return accuracy_vs_client_fraction


_avf_raw_ceil = _mkf("raw_ceil", "clients_per_round from the raw ceiling")
_avf_fractions_as_given = _mkf("fractions_as_given", "fractions kept as passed (ints stay ints)")
_avf_repeated_fractions = _mkf("repeated_fractions", "repeated fractions accepted")
_avf_bool_fraction = _mkf("bool_fraction", "True accepted as a fraction")
_avf_nan_fraction = _mkf("nan_fraction", "NaN fraction slips through the range check")
_avf_negative_seeds = _mkf("negative_seeds", "negative seeds accepted")
_avf_seed_offset = _mkf("seed_offset", "runs seeded config.seed + s")
_avf_numpy_mean = _mkf("numpy_mean", "means are np.float64")


def _avf_best_round(config, fractions, seeds=(0, 1, 2)):
    rec = _avf(config, fractions, seeds)
    for C, curves in rec["accuracy_curves"].items():
        rec["final_accuracy"][C] = [max(c) for c in curves]
        rec["mean"][C] = float(np.mean(rec["final_accuracy"][C]))
        rec["std"][C] = _sample_std(rec["final_accuracy"][C])
    return rec


def _avf_population_std(config, fractions, seeds=(0, 1, 2)):
    rec = _avf(config, fractions, seeds)
    rec["std"] = {C: float(np.std(v)) for C, v in rec["final_accuracy"].items()}
    return rec


def _avf_truncated_clients(config, fractions, seeds=(0, 1, 2)):
    rec = _avf(config, fractions, seeds)
    K = rec["config"]["num_clients"]
    rec["clients_per_round"] = {C: int(C * K) for C in rec["fractions"]}
    return rec


def _avf_alt_from_runs(config, fractions, seeds=(0, 1, 2)):
    """clients_per_round read off the runs themselves (len of the first round's selection); statistics module."""
    started = time.perf_counter()
    cfg = validate_fedavg_config(config)
    if not isinstance(fractions, (list, tuple)) or not fractions:
        raise ValueError("fractions: expected a non-empty list")
    for C in fractions:
        if isinstance(C, bool) or not isinstance(C, numbers.Real):
            raise TypeError(f"fractions: {C!r} is not a real number")
        if not (C > 0 and C <= 1):
            raise ValueError(f"fractions: {C!r} is outside (0, 1]")
    Cs = [float(C) for C in fractions]
    if len(set(Cs)) != len(Cs):
        raise ValueError("fractions: repeated value")
    if not isinstance(seeds, (list, tuple)) or not seeds:
        raise ValueError("seeds: expected a non-empty sequence")
    if any(isinstance(s, bool) or not isinstance(s, numbers.Integral) for s in seeds):
        raise TypeError("seeds: entries must be ints")
    if any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise ValueError("seeds: entries must be distinct and >= 0")
    record = {"kind": "accuracy_vs_client_fraction", "config": asdict(cfg), "fractions": Cs,
              "seeds": [int(s) for s in seeds], "clients_per_round": {}, "final_accuracy": {}, "mean": {}, "std": {},
              "bytes_per_round": {}, "accuracy_curves": {}, "bytes_communicated": 0}
    for C in Cs:
        runs = [run_fedavg(with_overrides(cfg, fraction=C, seed=int(s))) for s in seeds]
        curves = [[h["test_accuracy"] for h in r["history"]] for r in runs]
        finals = [c[-1] for c in curves]
        record["clients_per_round"][C] = len(runs[0]["history"][0]["selected"])
        record["accuracy_curves"][C] = curves
        record["final_accuracy"][C] = finals
        record["mean"][C] = statistics.fmean(finals)
        record["std"][C] = statistics.stdev(finals) if len(finals) > 1 else 0.0
        record["bytes_per_round"][C] = runs[0]["history"][0]["bytes_up"] + runs[0]["history"][0]["bytes_down"]
        record["bytes_communicated"] += sum(r["bytes_communicated"]["total"] for r in runs)
    record["wall_time_s"] = time.perf_counter() - started
    return record


MUTANTS = {
    "train_centralized_baseline": [
        ("trains on train + held-out ('the union of the clients' data', held-out kept out)", _central_with_test),
        ("one shuffle seed for every epoch ('the t-th draw rng.integers(0, 2**31 - 1)')", _central_same_shuffle),
        ("records the training accuracy ('held-out, after the epoch')", _central_train_accuracy),
        ("momentum not passed ('batch_size, lr, momentum ... mu')", _central_no_momentum),
        ("config.epochs passes per 'round' ('Epoch t is one call train_client_locally(..., 1, B, ...)')",
         _central_config_epochs),
        ("torch.manual_seed(config.seed): global generator re-seeded ('Mutation: none')", _central_global_seed),
        ("final accuracy = best epoch ('history[-1][\"test_accuracy\"]')", _central_best_final),
    ],
    "run_fedavg_iid": [
        ("run_fedavg(config) as given ('partition replaced by \"iid\" whatever it was')", _iid_as_given),
        ("fresh default config with the caller's seed ('every other field kept as given')", _iid_fresh_default),
        ("shards_per_client / alpha reset to the defaults ('kept in the record's config')", _iid_reset_unused),
        ("unknown keys silently dropped ('an unknown key' raises)", _iid_drop_unknown),
        ("writes partition='iid' into the caller's dict ('Mutation: none')", _iid_mutate_dict),
        ("progress forced off ('every other field kept as given')", _iid_quiet),
        ("IID arm seeded seed + 1 ('the seed' kept; same data, split, w_0 and schedule)", _iid_seed_offset),
    ],
    "run_fedavg_non_iid": [
        ("run_fedavg(config) as given ('\"iid\" (the default) -> \"shards\"')", _non_as_given),
        ("always shards ('\"dirichlet\" kept')", _non_always_shards),
        ("always Dirichlet ('\"shards\" kept', IID -> shards)", _non_always_dirichlet),
        ("writes partition='shards' into the caller's dict ('Mutation: none')", _non_mutate_dict),
        ("IID -> shards with shards_per_client forced to 2 ('Keep shards_per_client ... untouched')", _non_paper_shards),
        ("alpha reset to the default for a shards run ('Keep ... alpha and every other field untouched')",
         _non_reset_alpha),
        ("progress forced off ('everything else as given')", _non_quiet),
    ],
    "compute_non_iid_gap": [
        ("non - iid ('positive when the non-IID run is behind')", _gap_sign),
        ("truncated to the shorter run ('differ in number of rounds' -> ValueError)", _gap_truncate),
        ("population spread ('sample standard deviation')", _gap_population_std),
        ("unpaired spread sqrt(s_iid^2 + s_non^2) ('standard deviation ... over seeds' of the paired g_{s,t})",
         _gap_unpaired_std),
        ("best round minus best round ('the gap at the last round')", _gap_best_rounds),
        ("a round without test_accuracy raises KeyError ('ValueError ... a round without test_accuracy')",
         _gap_key_error),
        ("ragged runs left to NumPy ('holds runs of different lengths' -> ValueError naming the argument)",
         _gap_ragged_numpy),
        ("NumPy scalars ('final_gap_mean float', 'num_seeds int')", _gap_numpy_scalars),
        ("every argument error names non_iid_history ('naming iid_history ... when that argument is empty')",
         _gap_blame_non),
        ("an empty history inside a list crashes with IndexError ('an empty history' -> ValueError)",
         _gap_empty_inner_ok),
    ],
    "rounds_to_target_vs_local_epochs": [
        ("rounds counted from 0 ('the first 1-based round')", _r2t_zero_based),
        ("unreached runs counted as config.rounds ('or None'; means over the seeds that reached it)",
         _r2t_unreached_as_budget),
        ("std_rounds with ddof=0 ('sample standard deviation')", _r2t_population_std),
        ("accuracy > target ('accuracy >= target')", _r2t_strict_gt),
        ("negative seeds accepted ('distinct ints >= 0')", _r2t_negative_seeds),
        ("repeated seeds accepted ('distinct')", _r2t_repeated_seeds),
        ("True accepted in epochs_list ('ints >= 1, not bool')", _r2t_bool_epochs),
        ("target=True accepted ('a real number, not bool')", _r2t_bool_target),
        ("a tuple epochs_list refused ('a non-empty list or tuple of ints')", _r2t_list_only),
        ("NaN target accepted ('target outside (0, 1]')", _r2t_nan_target),
        ("epochs_list returned as passed ('the list of ints')", _r2t_epochs_as_given),
        ("target returned as passed ('the float')", _r2t_target_as_given),
        ("runs seeded config.seed + s ('its epochs and seed are overridden')", _r2t_seed_offset),
        ("mean_rounds are np.float64 (Python floats in the record)", _r2t_numpy_mean),
    ],
    "accuracy_vs_client_fraction": [
        ("best round's accuracy ('after round T')", _avf_best_round),
        ("population spread ('sample standard deviation')", _avf_population_std),
        ("int(C * K) clients ('max(ceil(C K), 1)')", _avf_truncated_clients),
        ("raw ceiling: 0.07 of 100 -> 8 ('C K rounded to 12 decimals first')", _avf_raw_ceil),
        ("fractions kept as passed: 1 stays an int ('the list of floats', 'keyed by the fractions as floats')",
         _avf_fractions_as_given),
        ("repeated fractions accepted ('a repeated value')", _avf_repeated_fractions),
        ("True accepted as a fraction ('not bool')", _avf_bool_fraction),
        ("NaN fraction slips past 'C <= 0 or C > 1'; the later ValueError does not name fractions ('an entry outside "
         "(0, 1]' naming fractions)",
         _avf_nan_fraction),
        ("negative seeds accepted ('distinct ints >= 0')", _avf_negative_seeds),
        ("runs seeded config.seed + s ('its fraction and seed are overridden')", _avf_seed_offset),
        ("means are np.float64 (Python floats in the record)", _avf_numpy_mean),
    ],
}

ALTERNATIVES = {
    "train_centralized_baseline": [("all epoch seeds in one integers(size=T) draw", _central_alt_seeds_upfront)],
    "run_fedavg_iid": [("dataclasses.replace / dict merge", _iid_alt_replace)],
    "run_fedavg_non_iid": [("explicit branches + dataclasses.replace", _non_alt_branches)],
    "compute_non_iid_gap": [("statistics.fmean / stdev in pure Python", _gap_alt_statistics)],
    "rounds_to_target_vs_local_epochs": [("seeds outer loop, statistics module", _r2t_alt_seed_outer)],
    "accuracy_vs_client_fraction": [("clients per round read off the runs; statistics module", _avf_alt_from_runs)],
}


# ==========================================================================================================
# Second correct alternatives (issue 27), written blind from the release notebooks.
# ==========================================================================================================
def _gap_alt_numpy(iid_history, non_iid_history):
    """(S, T) matrices, NumPy means and ddof=1 spreads."""
    a, b = _rows(iid_history, "iid_history"), _rows(non_iid_history, "non_iid_history")
    if a.shape != b.shape:
        raise ValueError(f"non_iid_history has {b.shape[0]} seeds x {b.shape[1]} rounds, iid_history {a.shape}")
    g = a - b  # (S, T): positive when the non-IID run is behind
    S, T = g.shape
    std = g.std(axis=0, ddof=1) if S > 1 else np.zeros(T)
    return {"rounds": list(range(1, T + 1)), "gap_mean": g.mean(axis=0).tolist(), "gap_std": std.tolist(),
            "final_gap_mean": float(g[:, -1].mean()), "final_gap_std": float(std[-1]), "mean_gap": float(g.mean()),
            "num_seeds": int(S)}


ALTERNATIVES.setdefault("compute_non_iid_gap", []).append(("NumPy (S, T) matrices, std(ddof=1)", _gap_alt_numpy))


def _iid_alt_asdict_override(config):
    """The validated config as a dict with partition replaced, handed to run_fedavg."""
    return run_fedavg({**dataclasses.asdict(validate_fedavg_config(config)), "partition": "iid"})


def _non_alt_asdict_override(config):
    cfg = validate_fedavg_config(config)
    return run_fedavg({**dataclasses.asdict(cfg), "partition": "shards" if cfg.partition == "iid" else cfg.partition})


for _name, _entry in [
    ("run_fedavg_iid", ("asdict of the validated config, partition overridden", _iid_alt_asdict_override)),
    ("run_fedavg_non_iid", ("asdict of the validated config, 'iid' -> 'shards'", _non_alt_asdict_override)),
]:
    ALTERNATIVES.setdefault(_name, []).append(_entry)


# Second alternatives for lessons 21, 25 and 26 (issue 27), written blind from the release notebooks 21, 25, 26.
def _central_alt_while_loop(config):
    """time.time() clock, a while loop over epochs, one-argument integers(high) draws, n from the labels' shape;
    no progress bar (the record does not depend on it)."""
    cfg = validate_fedavg_config(config)
    started = time.time()
    train, test, model, seeds = prepare_run(cfg)
    rng = np.random.default_rng(seeds["rounds"])
    everyone = torch.arange(train.labels.shape[0])
    initial = evaluate_accuracy(model, test)
    history, epoch = [], 0
    while epoch < cfg.rounds:
        epoch += 1
        seed_t = int(rng.integers(2**31 - 1))  # low defaults to 0: the same stream as integers(0, 2**31 - 1)
        losses = train_client_locally(model, train, everyone, 1, cfg.batch_size, cfg.lr, seed_t,
                                      cfg.momentum)["epoch_losses"]
        history.append(dict(round=epoch, test_accuracy=evaluate_accuracy(model, test), train_loss=float(losses[-1])))
    return dict(kind="centralized", config=dataclasses.asdict(cfg), seeds=dict(seeds),
                initial_test_accuracy=initial, history=history, final_test_accuracy=history[-1]["test_accuracy"],
                bytes_communicated=dict(up=0, down=0, total=0), wall_time_s=float(time.time() - started))


def _alt_distinct_ints(value, name, minimum):
    """A non-empty sequence of distinct ints >= minimum (no bools), as a list; errors name `name`."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name} must be a sequence of ints, got {type(value).__name__}")
    items = list(value)
    if not items:
        raise ValueError(f"{name} must not be empty")
    for v in items:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"{name} entries must be ints, got {v!r}")
        if v < minimum:
            raise ValueError(f"{name} entries must be >= {minimum}, got {v}")
    if len(set(items)) != len(items):
        raise ValueError(f"{name} has repeated entries: {items}")
    return [int(v) for v in items]


def _r2t_alt_numpy_argmax(config, epochs_list, target, seeds=(0, 1, 2)):
    """Every run first into a dict keyed (E, seed); first round by np.argmax on a boolean array; NumPy stats."""
    t0 = time.perf_counter()
    cfg = validate_fedavg_config(config)
    E_values = _alt_distinct_ints(epochs_list, "epochs_list", 1)
    if isinstance(target, bool) or not isinstance(target, numbers.Real) or not 0 < target <= 1:
        raise ValueError(f"target must be a real in (0, 1], got {target!r}")
    seed_list = _alt_distinct_ints(seeds, "seeds", 0)
    runs = {(E, s): run_fedavg(with_overrides(cfg, epochs=E, seed=s)) for E in E_values for s in seed_list}
    curves, firsts, reached, means, stds, fmean, fstd = {}, {}, {}, {}, {}, {}, {}
    for E in E_values:
        acc = np.array([[h["test_accuracy"] for h in runs[E, s]["history"]] for s in seed_list])  # (S, T)
        ok = acc >= target
        firsts[E] = [int(np.argmax(row)) + 1 if row.any() else None for row in ok]
        hit = np.array([r for r in firsts[E] if r is not None], dtype=float)
        reached[E] = int(hit.size)
        means[E] = float(hit.mean()) if hit.size else None
        stds[E] = None if not hit.size else (float(hit.std(ddof=1)) if hit.size > 1 else 0.0)
        fmean[E] = float(acc[:, -1].mean())
        fstd[E] = float(acc[:, -1].std(ddof=1)) if len(seed_list) > 1 else 0.0
        curves[E] = [[float(a) for a in row] for row in acc]
    total = sum(h["bytes_up"] + h["bytes_down"] for run in runs.values() for h in run["history"])
    return {"kind": "rounds_to_target_vs_local_epochs", "config": dataclasses.asdict(cfg), "epochs_list": E_values,
            "target": float(target), "seeds": seed_list, "rounds_to_target": firsts, "num_reached": reached,
            "mean_rounds": means, "std_rounds": stds, "final_accuracy_mean": fmean, "final_accuracy_std": fstd,
            "accuracy_curves": curves, "bytes_communicated": int(total), "wall_time_s": time.perf_counter() - t0}


def _avf_alt_numpy_matrix(config, fractions, seeds=(0, 1, 2)):
    """Runs keyed (C, seed) in one comprehension; (S, T) NumPy matrix per C; bytes summed from the histories."""
    t0 = time.perf_counter()
    cfg = validate_fedavg_config(config)
    if isinstance(fractions, (str, bytes)) or not hasattr(fractions, "__iter__"):
        raise TypeError(f"fractions must be a list of reals, got {type(fractions).__name__}")
    Cs = list(fractions)
    if not Cs:
        raise ValueError("fractions must not be empty")
    for C in Cs:
        if isinstance(C, bool) or not isinstance(C, numbers.Real):
            raise TypeError(f"fractions entries must be reals, got {C!r}")
        if not 0 < C <= 1:
            raise ValueError(f"fractions entries must lie in (0, 1], got {C}")
    Cs = [float(C) for C in Cs]
    if len(set(Cs)) != len(Cs):
        raise ValueError(f"fractions has repeated entries: {Cs}")
    seed_list = _alt_distinct_ints(seeds, "seeds", 0)
    K = cfg.num_clients
    runs = {(C, s): run_fedavg(with_overrides(cfg, fraction=C, seed=s)) for C in Cs for s in seed_list}
    rec = {"kind": "accuracy_vs_client_fraction", "config": dataclasses.asdict(cfg), "fractions": Cs,
           "seeds": seed_list, "clients_per_round": {}, "final_accuracy": {}, "mean": {}, "std": {},
           "bytes_per_round": {}, "accuracy_curves": {}}
    for C in Cs:
        rec["clients_per_round"][C] = max(math.ceil(round(C * K, 12)), 1)
        acc = np.array([[h["test_accuracy"] for h in runs[C, s]["history"]] for s in seed_list])  # (S, T)
        rec["accuracy_curves"][C] = acc.tolist()
        rec["final_accuracy"][C] = acc[:, -1].tolist()
        rec["mean"][C] = float(acc[:, -1].mean())
        rec["std"][C] = float(acc[:, -1].std(ddof=1)) if acc.shape[0] > 1 else 0.0
        first = runs[C, seed_list[0]]["history"][0]
        rec["bytes_per_round"][C] = int(first["bytes_up"] + first["bytes_down"])
    rec["bytes_communicated"] = int(sum(h["bytes_up"] + h["bytes_down"] for r in runs.values() for h in r["history"]))
    rec["wall_time_s"] = float(time.perf_counter() - t0)
    return rec


for _name, _entry in [
    ("train_centralized_baseline",
     ("while loop, one-argument integers(high) draws, time.time(), no progress bar", _central_alt_while_loop)),
    ("rounds_to_target_vs_local_epochs",
     ("runs keyed (E, seed) first; np.argmax first hit; NumPy (S, T) stats; bytes summed per round",
      _r2t_alt_numpy_argmax)),
    ("accuracy_vs_client_fraction",
     ("runs keyed (C, seed) first; NumPy (S, T) stats; any iterable of seeds; bytes summed per round",
      _avf_alt_numpy_matrix)),
]:
    ALTERNATIVES.setdefault(_name, []).append(_entry)
