"""Mutants for Module 3, Part 6 (lessons 21–26: experiments): the analysis mistakes the notebooks name."""

from __future__ import annotations


import time
from dataclasses import asdict

import numpy as np
import torch

from trainsys.fedavg import experiments as ref
from trainsys.fedavg.client import train_client_locally
from trainsys.fedavg.data import LabelledDataset
from trainsys.fedavg.server import FedAvgConfig, evaluate_accuracy, prepare_run, run_fedavg

REFERENCE = "trainsys.fedavg.experiments"


def _centralized(variant: str):
    def wrong(config):
        config = ref.validate_fedavg_config(config)
        start = time.perf_counter()
        train, test, model, seeds = prepare_run(config)
        if variant == "leak":  # "more data is better": the held-out examples join the training set
            train = LabelledDataset(torch.cat([train.features, test.features]),
                                    torch.cat([train.labels, test.labels]), train.n_classes)
        rng = np.random.default_rng(seeds["rounds"])
        initial, history = evaluate_accuracy(model, test), []
        first_seed = int(np.random.default_rng(seeds["rounds"]).integers(0, 2**31 - 1))
        for t in range(1, config.rounds + 1):
            seed_t = first_seed if variant == "same_shuffle" else int(rng.integers(0, 2**31 - 1))
            result = train_client_locally(model, train, torch.arange(len(train)), 1, config.batch_size, config.lr,
                                          seed_t, config.momentum)
            acc = evaluate_accuracy(model, train if variant == "train_accuracy" else test)
            history.append({"round": t, "test_accuracy": acc, "train_loss": result["epoch_losses"][0]})
        return {"kind": "centralized", "config": asdict(config), "seeds": seeds, "initial_test_accuracy": initial,
                "history": history, "final_test_accuracy": history[-1]["test_accuracy"],
                "bytes_communicated": {"up": 0, "down": 0, "total": 0}, "wall_time_s": time.perf_counter() - start}

    return wrong


def _iid_as_given(config):
    return run_fedavg(config)  # forgets to switch the partition to IID


def _iid_defaults(config):
    config = ref.validate_fedavg_config(config)
    return run_fedavg(FedAvgConfig(partition="iid", seed=config.seed))  # the other fields are lost


def _non_iid_as_given(config):
    return run_fedavg(config)


def _non_iid_always_shards(config):
    return run_fedavg(ref.with_overrides(config, partition="shards"))  # a Dirichlet request is ignored


def _non_iid_dirichlet(config):
    return run_fedavg(ref.with_overrides(config, partition="dirichlet"))


def _gap(variant: str):
    def wrong(iid_history, non_iid_history):
        if variant == "truncate":
            iid, non = ref._curves(iid_history, "iid_history"), ref._curves(non_iid_history, "non_iid_history")
            rounds = min(iid.shape[1], non.shape[1])
            iid, non = iid[:, :rounds], non[:, :rounds]
        else:
            ref.compute_non_iid_gap(iid_history, non_iid_history)  # validation
            iid, non = ref._curves(iid_history, "iid_history"), ref._curves(non_iid_history, "non_iid_history")
        gap = non - iid if variant == "reversed" else iid - non
        std = gap.std(axis=0, ddof=0) if variant == "ddof0" else np.array(
            [ref.mean_and_spread(gap[:, t])[1] for t in range(gap.shape[1])])
        final = iid.max(axis=1) - non.max(axis=1) if variant == "best" else gap[:, -1]
        return {"rounds": list(range(1, gap.shape[1] + 1)), "gap_mean": gap.mean(axis=0).tolist(),
                "gap_std": std.tolist(), "final_gap_mean": float(final.mean()),
                "final_gap_std": ref.mean_and_spread(final)[1] if variant != "ddof0" else float(final.std()),
                "mean_gap": float(gap.mean()), "num_seeds": int(gap.shape[0])}

    return wrong


def _epochs(variant: str):
    def wrong(config, epochs_list, target, seeds=ref.DEFAULT_SEEDS):
        record = ref.rounds_to_target_vs_local_epochs(config, epochs_list, target, seeds)
        config = ref.validate_fedavg_config(config)
        used_seeds = [config.seed] if variant == "one_seed" else list(seeds)
        curves = {}
        for e in epochs_list:
            overrides = {"seed": 0} if variant == "forget_epochs" else {"epochs": e}
            curves[e] = [ref.accuracy_curve(run_fedavg(ref.with_overrides(config, **{**overrides, "seed": s})), "run")
                         for s in used_seeds]
        reached = {}
        for e, runs in curves.items():
            if variant == "zero_based":
                reached[e] = [next((t for t, a in enumerate(c) if a >= target), None) for c in runs]
            else:
                reached[e] = [next((t for t, a in enumerate(c, start=1) if a >= target), None) for c in runs]
        counted = {e: [config.rounds if r is None else r for r in rs] if variant == "unreached_as_rounds"
                   else [r for r in rs if r is not None] for e, rs in reached.items()}
        record.update(rounds_to_target=reached, accuracy_curves=curves,
                      mean_rounds={e: float(np.mean(c)) if c else None for e, c in counted.items()},
                      num_reached={e: sum(r is not None for r in rs) for e, rs in reached.items()})
        return record

    return wrong


def _fractions(variant: str):
    def wrong(config, fractions, seeds=ref.DEFAULT_SEEDS):
        record = ref.accuracy_vs_client_fraction(config, fractions, seeds)
        config = ref.validate_fedavg_config(config)
        finals = {}
        for c in fractions:
            runs = [run_fedavg(ref.with_overrides(config, seed=s, **({} if variant == "forget_fraction"
                                                                      else {"fraction": c}))) for s in seeds]
            curves = [ref.accuracy_curve(r, "run") for r in runs]
            finals[c] = [max(cv) if variant == "best_round" else cv[-1] for cv in curves]
        record.update(final_accuracy=finals, mean={c: float(np.mean(v)) for c, v in finals.items()})
        if variant == "ddof0":
            record["std"] = {c: float(np.std(record["final_accuracy"][c])) for c in fractions}
        if variant == "floor_clients":
            record["clients_per_round"] = {c: int(c * config.num_clients) for c in fractions}
        return record

    return wrong


MUTANTS = {
    "train_centralized_baseline": [
        ("trains on the held-out examples too", _centralized("leak")),
        ("the same shuffle every epoch", _centralized("same_shuffle")),
        ("records the training accuracy as test_accuracy", _centralized("train_accuracy")),
    ],
    "run_fedavg_iid": [
        ("runs the config's partition as given", _iid_as_given),
        ("builds a default config and loses the caller's fields", _iid_defaults),
    ],
    "run_fedavg_non_iid": [
        ("runs the config's partition as given (IID stays IID)", _non_iid_as_given),
        ("always shards, even when Dirichlet is asked for", _non_iid_always_shards),
        ("always Dirichlet", _non_iid_dirichlet),
    ],
    "compute_non_iid_gap": [
        ("non-IID minus IID (the sign reversed)", _gap("reversed")),
        ("silently truncates to the shorter run", _gap("truncate")),
        ("population spread (ddof = 0) instead of the sample spread", _gap("ddof0")),
        ("final gap from the best accuracies instead of the last", _gap("best")),
    ],
    "rounds_to_target_vs_local_epochs": [
        ("counts rounds from 0", _epochs("zero_based")),
        ("never sets epochs: every E runs config.epochs", _epochs("forget_epochs")),
        ("one seed (config.seed) instead of the seeds given", _epochs("one_seed")),
        ("a run that never reaches the target counts as config.rounds", _epochs("unreached_as_rounds")),
    ],
    "accuracy_vs_client_fraction": [
        ("never sets fraction: every C runs config.fraction", _fractions("forget_fraction")),
        ("the best round's accuracy instead of the final one", _fractions("best_round")),
        ("population spread (ddof = 0)", _fractions("ddof0")),
        ("clients per round int(C * K), without the ceiling and the max", _fractions("floor_clients")),
    ],
}


