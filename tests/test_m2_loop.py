"""Module 2, Parts 4, 6 and 7 (lessons 16–20, 25–30) and the H sweep, against independent oracles.

Oracles: the algebra of the special cases (outer SGD lr 1 without momentum = FedAvg; ``H = 1`` with
inner SGD and outer lr 1 = synchronous data-parallel SGD, step for step), counting (bytes per step
differ by exactly ``H``; shards partition the data), torch's cross-entropy for the held-out loss,
label-skew statistics of the Dirichlet shards, and the reversed pseudo-gradient making training worse.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from trainsys.tolerance import assert_within_rounding
from trainsys.diloco import evaluation, experiment, loop, outer, sharding
from trainsys.diloco.adamw import init_adamw_state
from trainsys.diloco.model import init_model_params, make_classification_data, model_forward
from trainsys.diloco.params import average_params, params_nbytes, subtract_params

SMALL = {"n_examples": 400, "d_in": 6, "n_classes": 4, "hidden_sizes": (16,), "num_workers": 3, "inner_steps": 4,
         "rounds": 5, "batch_size": 8, "progress": False}


def _data(n: int = 200, C: int = 4, seed: int = 0):
    return make_classification_data(n, 5, C, np.random.default_rng(seed))


# --- Lessons 16–18 ---------------------------------------------------------------------------------
def _indices(shards, X) -> list[np.ndarray]:
    rows = {x.tobytes(): i for i, x in enumerate(X)}
    return [np.array([rows[x.tobytes()] for x in s[0]]) for s in shards]


@pytest.mark.parametrize("k", [1, 3, 7, 200])
def test_m2_16_iid_shards_partition_the_data(k: int) -> None:
    X, y = _data()
    shards = sharding.iid_shard_dataset(X, y, k, np.random.default_rng(1))
    idx = _indices(shards, X)
    assert sorted(np.concatenate(idx).tolist()) == list(range(200))
    sizes = [len(i) for i in idx]
    assert max(sizes) - min(sizes) <= 1
    assert all(np.array_equal(s[1], y[i]) for s, i in zip(shards, idx))


def test_m2_17_dirichlet_alpha_controls_label_skew() -> None:
    X, y = _data(2000, 5, 2)

    def mean_entropy(alpha: float) -> float:
        counts = sharding.shard_label_counts(sharding.noniid_shard_dataset(X, y, 8, np.random.default_rng(3), alpha), 5)
        p = counts / counts.sum(axis=1, keepdims=True)
        return float(np.mean(-np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0.0), axis=1)))

    skewed, mild, iid_like = mean_entropy(0.1), mean_entropy(1.0), mean_entropy(1000.0)
    assert skewed < mild < iid_like
    assert iid_like == pytest.approx(np.log(5), rel=0.02)  # uniform labels on every shard
    assert skewed < 0.6 * np.log(5)


def test_m2_17_noniid_shards_partition_and_are_never_empty() -> None:
    X, y = _data(60, 3, 4)
    for seed in range(10):
        shards = sharding.noniid_shard_dataset(X, y, 6, np.random.default_rng(seed), 0.05)
        idx = _indices(shards, X)
        assert sorted(np.concatenate(idx).tolist()) == list(range(60)) and min(map(len, idx)) >= 1


def test_m2_18_batches_are_uniform_pairs_from_the_shard() -> None:
    X, y = _data(10)
    Xb, yb = sharding.sample_worker_batch((X, y), 20000, np.random.default_rng(5))
    rows = _indices([(Xb, yb)], X)[0]
    np.testing.assert_array_equal(yb, y[rows])
    assert np.bincount(rows, minlength=10).min() > 1800  # about 2000 draws each


# --- Lessons 19–20 ---------------------------------------------------------------------------------
def test_m2_20_run_inner_steps_is_h_local_train_steps() -> None:
    X, y = _data()
    params = init_model_params([5, 8, 4], np.random.default_rng(6))
    hp = {**sharding.DEFAULT_INNER_HP, "batch_size": 7}
    got, state, losses = sharding.run_inner_steps(params, init_adamw_state(params), (X, y), 5, hp,
                                                  np.random.default_rng(7))
    rng, p, s, want = np.random.default_rng(7), params, init_adamw_state(params), []
    for _ in range(5):
        p, s, loss = sharding.local_train_step(p, s, sharding.sample_worker_batch((X, y), 7, rng), hp)
        want.append(loss)
    assert state["step"] == 5 and losses.shape == (5,)
    np.testing.assert_array_equal(losses, want)
    assert all(np.array_equal(got[k], p[k]) for k in p)


# --- Lesson 25 -------------------------------------------------------------------------------------
def _round_setup(k: int = 3, optimizer: str = "adamw"):
    run = loop.setup_run({**SMALL, "num_workers": k, "inner_optimizer": optimizer})
    hp = loop.inner_hp(run["config"])
    return run, hp, [init_adamw_state(run["params"]) for _ in range(k)]


def test_m2_25_outer_sgd_lr_1_no_momentum_is_parameter_averaging() -> None:
    run, hp, states = _round_setup()
    rngs = [np.random.default_rng(s) for s in run["seeds"]["worker_seeds"]]
    new, _, _, _ = loop.diloco_round(run["params"], outer.init_outer_optimizer(run["params"]), states, run["shards"],
                                     run["worker_rngs"], H=4, inner_hp=hp, outer_lr=1.0, outer_momentum=0.0)
    workers = [sharding.run_inner_steps(run["params"], init_adamw_state(run["params"]), s, 4, hp, r)[0]
               for s, r in zip(run["shards"], rngs)]
    fedavg = average_params(workers)
    # the workers train identically on both sides; what differs: Delta = theta - mean(theta_i) (the mean
    # rounded once, Delta once) and theta - 1 * Delta (once), relative to |theta| + |mean| + |Delta| <=
    # 2 (|theta| + |mean|): k = 3 roundings in float32 (trainsys.tolerance)
    theta = run["params"]
    for k in new:
        magnitude = 2 * (np.abs(theta[k].astype(np.float64)) + np.abs(fedavg[k].astype(np.float64)))
        assert_within_rounding(new[k], fedavg[k], magnitude, 3, np.float32, k)


def test_m2_25_inner_states_stay_per_worker_across_rounds() -> None:
    run, hp, states = _round_setup()
    params, outer_state = run["params"], outer.init_outer_optimizer(run["params"])
    for _ in range(2):
        params, outer_state, states, info = loop.diloco_round(params, outer_state, states, run["shards"],
                                                              run["worker_rngs"], H=4, inner_hp=hp, outer_lr=0.7,
                                                              outer_momentum=0.9)
    assert [s["step"] for s in states] == [8, 8, 8] and outer_state["step"] == 2
    assert not np.allclose(states[0]["m"]["W0"], states[1]["m"]["W0"])  # never averaged
    assert info["bytes_communicated"] == 3 * params_nbytes(params) and info["worker_losses"].shape == (3, 4)


# --- Lessons 26–27 ---------------------------------------------------------------------------------
def test_m2_26_h1_with_inner_sgd_and_outer_lr_1_is_synchronous_sgd_step_for_step() -> None:
    config = {**SMALL, "inner_steps": 1, "rounds": 12, "inner_optimizer": "sgd", "inner_lr": 0.1,
              "weight_decay": 0.0, "outer_lr": 1.0, "outer_momentum": 0.0}
    d, s = loop.train_diloco(config), loop.train_synchronous_baseline(config)
    for a, b in zip(d["history"], s["history"]):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)
        assert a["heldout_loss"] == pytest.approx(b["heldout_loss"], rel=1e-5)
        assert a["bytes_communicated"] == b["bytes_communicated"]
    for k in d["final_params"]:
        np.testing.assert_allclose(d["final_params"][k], s["final_params"][k], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("H", [1, 3, 7])
def test_m2_26_bytes_per_step_differ_by_exactly_h(H: int) -> None:
    config = {**SMALL, "inner_steps": H, "rounds": 2}
    d, s = loop.train_diloco(config), loop.train_synchronous_baseline(config)
    tree_bytes = params_nbytes(d["final_params"])
    assert all(e["bytes_communicated"] == 3 * tree_bytes for e in d["history"])  # k workers, once per round
    assert all(e["bytes_communicated"] == H * 3 * tree_bytes for e in s["history"])  # k workers, every step
    assert s["history"][-1]["cumulative_bytes"] == H * d["history"][-1]["cumulative_bytes"]
    assert d["examples_processed"] == s["examples_processed"] == 3 * 2 * H * 8  # equal compute


def test_m2_26_run_record_is_complete_and_reproducible() -> None:
    record = loop.train_diloco(SMALL)
    assert record["config"] == dataclasses.asdict(loop.validate_config(SMALL)) and record["algorithm"] == "diloco"
    seeds = record["seeds"]
    assert len(set(seeds["worker_seeds"])) == 3 and seeds["init_seed"] not in seeds["worker_seeds"]
    assert [e["round"] for e in record["history"]] == [1, 2, 3, 4, 5]
    assert [e["steps"] for e in record["history"]] == [4, 8, 12, 16, 20]
    assert set(record["history"][0]) == set(evaluation.HISTORY_KEYS) and record["wall_time_s"] > 0
    again = loop.train_diloco(SMALL)
    assert again["history"] == record["history"]
    assert all(np.array_equal(again["final_params"][k], record["final_params"][k]) for k in record["final_params"])


def test_m2_26_heldout_set_is_split_before_sharding() -> None:
    run = loop.setup_run(SMALL)
    held = {x.tobytes() for x in run["X_heldout"]}
    assert not any(x.tobytes() in held for s in run["shards"] for x in s[0])
    assert sum(len(s[1]) for s in run["shards"]) + len(held) == SMALL["n_examples"]


def test_m2_26_diloco_learns_and_stays_near_the_baseline() -> None:
    config = {"inner_steps": 10, "rounds": 20, "progress": False}
    d, s = loop.train_diloco(config), loop.train_synchronous_baseline(config)
    assert d["history"][-1]["heldout_accuracy"] > 0.85 and s["history"][-1]["heldout_accuracy"] > 0.85
    assert abs(d["history"][-1]["heldout_accuracy"] - s["history"][-1]["heldout_accuracy"]) < 0.05


def test_m2_24_reversed_pseudo_gradient_makes_training_worse(monkeypatch) -> None:
    config = {**SMALL, "inner_steps": 10, "rounds": 8}
    right = loop.train_diloco(config)
    monkeypatch.setattr(loop, "compute_outer_gradient",
                        lambda g, ws: subtract_params(average_params(ws), g))  # local minus original
    wrong = loop.train_diloco(config)
    assert wrong["history"][-1]["heldout_loss"] > right["history"][-1]["heldout_loss"] + 0.5


def test_m2_27_baseline_does_not_depend_on_how_steps_are_grouped() -> None:
    a = loop.train_synchronous_baseline({**SMALL, "inner_steps": 1, "rounds": 6})
    b = loop.train_synchronous_baseline({**SMALL, "inner_steps": 3, "rounds": 2})
    assert all(np.array_equal(a["final_params"][k], b["final_params"][k]) for k in a["final_params"])
    assert a["history"][2]["heldout_loss"] == b["history"][0]["heldout_loss"]


def test_m2_26_progress_bar_only_when_asked(capsys) -> None:
    loop.train_diloco({**SMALL, "rounds": 2})
    assert capsys.readouterr().err == ""
    loop.train_diloco({**SMALL, "rounds": 2, "progress": True})
    assert "DiLoCo" in capsys.readouterr().err


# --- Lessons 28–30 ---------------------------------------------------------------------------------
def test_m2_28_29_heldout_loss_and_accuracy_match_torch() -> None:
    params = init_model_params([5, 8, 4], np.random.default_rng(8))
    X, y = _data(50, 4, 9)
    logits = torch.tensor(model_forward(params, X)[0])
    assert evaluation.evaluate_heldout_loss(params, X, y) == pytest.approx(
        torch.nn.functional.cross_entropy(logits, torch.tensor(y)).item(), rel=1e-6)
    assert evaluation.classification_accuracy(params, X, y) == pytest.approx(
        (logits.argmax(dim=1) == torch.tensor(y)).double().mean().item(), abs=0)


def test_m2_30_savings_on_real_runs() -> None:
    config = {**SMALL, "inner_steps": 5, "rounds": 6}
    d = loop.train_diloco(config)
    s = loop.train_synchronous_baseline({**config, "inner_steps": 1, "rounds": 30})
    out = evaluation.communication_savings(d["history"], s["history"])
    assert out["bytes_per_step_ratio"] == 5.0
    assert out["ratio"] == out["sync_bytes"] / out["diloco_bytes"] and out["ratio"] > 1
    reached = [e["heldout_loss"] for e in d["history"] if e["round"] == out["diloco_round"]][0]
    assert reached <= out["target"]


def test_m2_sweep_reports_ratio_h_and_gaps_over_seeds() -> None:
    result = experiment.run_h_sweep({**SMALL, "inner_steps": 2, "rounds": 6}, [1, 3, 4], [0, 1], progress=False)
    assert [row["H"] for row in result["summary"]] == [1, 3, 4]
    assert [row["bytes_per_step_ratio"] for row in result["summary"]] == [1.0, 3.0, 4.0]
    assert len(result["baseline"]) == 2 and all(len(v) == 2 for v in result["diloco"].values())
    row = result["summary"][1]
    gaps = [d["history"][-1]["heldout_accuracy"] - b["history"][-1]["heldout_accuracy"]
            for d, b in zip(result["diloco"][3], result["baseline"])]
    assert row["accuracy_gap_mean"] == pytest.approx(np.mean(gaps)) and row["accuracy_gap_std"] >= 0
    assert "bytes/step" in experiment.format_h_sweep(result)
    with pytest.raises(ValueError, match="H_values"):
        experiment.run_h_sweep({**SMALL, "inner_steps": 2, "rounds": 6}, [5], [0])


BAD_CONFIGS = [
    ({"inner_steps": 0}, "inner_steps"), ({"inner_steps": -2}, "inner_steps"), ({"num_workers": 0}, "num_workers"),
    ({"num_workers": 301}, "num_workers"), ({"sharding": "noniid", "dirichlet_alpha": 0.0}, "dirichlet_alpha"),
    ({"sharding": "dirichlet"}, "sharding"), ({"hidden_sizes": (8, 0)}, "hidden_sizes"), ({"H": 3}, "H"),
    ({"outer_momentum": 1.0}, "momentum"), ({"inner_optimizer": "adam"}, "optimizer"),
]


@pytest.mark.parametrize(("override", "argument"), BAD_CONFIGS, ids=[b[1] for b in BAD_CONFIGS])
def test_m2_26_bad_config_is_refused_up_front(override: dict, argument: str) -> None:
    for trainer in (loop.train_diloco, loop.train_synchronous_baseline):
        with pytest.raises((TypeError, ValueError), match=argument):
            trainer({**SMALL, **override})


X_, Y_ = _data(12, 3, 1)
P_ = init_model_params([5, 4, 3], np.random.default_rng(0))
BAD = [
    (sharding.iid_shard_dataset, (X_, Y_, 13, np.random.default_rng()), ValueError, "num_workers"),
    (sharding.iid_shard_dataset, (X_, Y_, 0, np.random.default_rng()), ValueError, "num_workers"),
    (sharding.noniid_shard_dataset, (X_, Y_, 2, np.random.default_rng(), 0.0), ValueError, "alpha"),
    (sharding.sample_worker_batch, ((X_, Y_), 0, np.random.default_rng()), ValueError, "batch_size"),
    (sharding.run_inner_steps, (P_, init_adamw_state(P_), (X_, Y_), 0, sharding.DEFAULT_INNER_HP,
                                np.random.default_rng()), ValueError, "H"),
    (sharding.run_inner_steps, (P_, init_adamw_state(P_), (X_, Y_ + 1), 2, sharding.DEFAULT_INNER_HP,
                                np.random.default_rng()), ValueError, "shard"),
    (evaluation.evaluate_heldout_loss, (P_, X_, np.full(12, 3)), ValueError, "y"),
    (evaluation.classification_accuracy, (P_, X_, Y_[:5]), ValueError, "y"),
    (evaluation.communication_savings, ([], []), TypeError, "diloco_history"),
]


@pytest.mark.parametrize(("fn", "args", "error", "argument"), BAD, ids=[f"{b[0].__name__}-{b[3]}" for b in BAD])
def test_m2_parts_4_6_7_bad_input_names_the_argument(fn, args, error, argument) -> None:
    with pytest.raises(error, match=argument):
        fn(*args)
