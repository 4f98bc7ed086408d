"""Module 3, Part 6: the experiments reproduce the paper's directions on the synthetic task (small, seeded)."""

from __future__ import annotations

import numpy as np
import pytest

from trainsys.fedavg import experiments as ex
from trainsys.fedavg import server

# the default task (3,200 training examples, 40 clients of 80) with fewer rounds, to keep CI fast
QUICK = {"rounds": 25}


def test_m3_21_centralized_baseline_shares_data_and_init_and_communicates_nothing() -> None:
    central = ex.train_centralized_baseline({**QUICK, "rounds": 5})
    fedavg = server.run_fedavg({**QUICK, "rounds": 5})
    assert central["initial_test_accuracy"] == fedavg["initial_test_accuracy"]  # same data, split and model
    assert central["seeds"] == fedavg["seeds"]
    assert central["bytes_communicated"]["total"] == 0
    assert central["final_test_accuracy"] > 0.85  # five epochs over everything: near the ceiling
    assert central["final_test_accuracy"] > fedavg["final_test_accuracy"]


def test_m3_22_23_iid_and_non_iid_runs_differ_only_in_the_partition() -> None:
    iid = ex.run_fedavg_iid({**QUICK, "rounds": 3, "partition": "shards"})
    non = ex.run_fedavg_non_iid({**QUICK, "rounds": 3})
    assert iid["config"]["partition"] == "iid" and non["config"]["partition"] == "shards"
    assert iid["initial_test_accuracy"] == non["initial_test_accuracy"]
    assert iid["client_sizes"] == non["client_sizes"] == [80] * 40
    assert [h["selected"] for h in iid["history"]] == [h["selected"] for h in non["history"]]
    assert ex.run_fedavg_non_iid({**QUICK, "rounds": 2, "partition": "dirichlet"})["config"]["partition"] == "dirichlet"


def test_m3_24_gap_is_a_paired_difference_with_sample_spread() -> None:
    iid = [[0.5, 0.7], [0.6, 0.9], [0.4, 0.8]]
    non = [[0.3, 0.6], [0.5, 0.5], [0.4, 0.4]]
    gap = ex.compute_non_iid_gap([{"history": [{"test_accuracy": a} for a in r]} for r in iid],
                                 [{"history": [{"test_accuracy": a} for a in r]} for r in non])
    diff = np.array(iid) - np.array(non)
    np.testing.assert_allclose(gap["gap_mean"], diff.mean(0))
    np.testing.assert_allclose(gap["gap_std"], diff.std(0, ddof=1))
    assert gap["final_gap_mean"] == pytest.approx(diff[:, -1].mean())
    assert gap["mean_gap"] == pytest.approx(diff.mean())
    assert gap["rounds"] == [1, 2] and gap["num_seeds"] == 3
    with pytest.raises(ValueError, match="non_iid_history"):
        ex.compute_non_iid_gap([{"test_accuracy": 0.5}], [{"test_accuracy": 0.5}, {"test_accuracy": 0.6}])


def test_m3_24_non_iid_data_opens_a_gap() -> None:
    seeds = (0, 1)
    iid = [ex.run_fedavg_iid({**QUICK, "seed": s}) for s in seeds]
    non = [ex.run_fedavg_non_iid({**QUICK, "seed": s}) for s in seeds]
    gap = ex.compute_non_iid_gap(iid, non)
    assert gap["mean_gap"] > 0.04  # measured ≈ 0.10 over 25 rounds with these seeds
    assert sum(g > 0 for g in gap["gap_mean"]) >= 20


def test_m3_25_more_local_epochs_reach_the_target_in_fewer_rounds_on_iid_data() -> None:
    record = ex.rounds_to_target_vs_local_epochs({"rounds": 30}, [1, 5], target=0.7, seeds=(0, 1))
    assert record["num_reached"] == {1: 2, 5: 2}
    assert record["mean_rounds"][5] < 0.5 * record["mean_rounds"][1]  # measured 5.5 vs 22
    assert set(record["accuracy_curves"]) == {1, 5} and len(record["accuracy_curves"][1]) == 2
    assert record["bytes_communicated"] > 0 and record["wall_time_s"] > 0


def test_m3_26_client_fraction_costs_bytes_in_proportion_and_helps_non_iid() -> None:
    record = ex.accuracy_vs_client_fraction({**QUICK, "rounds": 15, "partition": "shards"}, [0.025, 0.5],
                                            seeds=(0, 1))
    assert record["clients_per_round"] == {0.025: 1, 0.5: 20}
    assert record["bytes_per_round"][0.5] == 20 * record["bytes_per_round"][0.025]
    assert record["mean"][0.5] > record["mean"][0.025] + 0.1  # measured 0.60 vs 0.38: one non-IID client lurches
    assert set(record["std"]) == {0.025, 0.5}


def test_m3_25_rounds_to_target_is_the_first_round_at_or_above() -> None:
    history = [{"test_accuracy": a} for a in (0.2, 0.5, 0.49, 0.8)]
    assert ex.rounds_to_target(history, 0.5) == 2
    assert ex.rounds_to_target(history, 0.9) is None
    assert ex.mean_and_spread([3.0]) == (3.0, 0.0)


BAD = [
    (ex.rounds_to_target_vs_local_epochs, (QUICK, [], 0.5), ValueError, "epochs_list"),
    (ex.rounds_to_target_vs_local_epochs, (QUICK, [1, 1], 0.5), ValueError, "epochs_list"),
    (ex.rounds_to_target_vs_local_epochs, (QUICK, [0], 0.5), ValueError, "epochs_list"),
    (ex.rounds_to_target_vs_local_epochs, (QUICK, [1], 0.0), ValueError, "target"),
    (ex.accuracy_vs_client_fraction, (QUICK, [0.0]), ValueError, "fractions"),
    (ex.accuracy_vs_client_fraction, (QUICK, [0.5], []), ValueError, "seeds"),
    (ex.train_centralized_baseline, ({"lr": 0.0},), ValueError, "lr"),
    (ex.run_fedavg_iid, ({"num_clients": 0},), ValueError, "num_clients"),
    (ex.run_fedavg_non_iid, ({"fraction": 1.5},), ValueError, "fraction"),
]


@pytest.mark.parametrize(("fn", "args", "error", "argument"), BAD, ids=[f"{b[0].__name__}-{b[3]}" for b in BAD])
def test_m3_part6_bad_input_names_the_argument(fn, args, error, argument) -> None:
    with pytest.raises(error, match=argument):
        fn(*args)
