"""Module 3, beyond the lessons: FedAvg with drop-outs, stragglers and over-selection (``fedavg/faults.py``)."""

from __future__ import annotations

import copy
import math
import statistics

import numpy as np
import pytest
import torch

from trainsys.fedavg import faults, server
from trainsys.fedavg.client import train_client_locally
from trainsys.fedavg.state import aggregate_weighted_average, load_model_state

SMALL = {"num_examples": 400, "d_in": 8, "n_classes": 4, "d_hidden": 16, "num_clients": 8, "fraction": 0.5,
         "rounds": 8, "batch_size": 10, "lr": 0.1}
EVALUATE = server.evaluate_accuracy  # the real one, before any test wraps it
ROUND_KEYS = ("round", "test_accuracy", "train_loss", "selected", "local_steps", "bytes_up", "bytes_down")


def _capture_states(monkeypatch, module) -> list[dict[str, torch.Tensor]]:
    """Wrap ``module.evaluate_accuracy`` so that every evaluated model's state is recorded (initial, then per round)."""
    states = []

    def spy(model, dataset):
        states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return EVALUATE(model, dataset)

    monkeypatch.setattr(module, "evaluate_accuracy", spy)
    return states


def _assert_states_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert list(a) == list(b)
    for key in a:
        assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("overrides", [{}, {"partition": "shards", "batch_size": None, "epochs": 2},
                                       {"momentum": 0.9, "fraction": 0.3, "partition": "dirichlet"}])
def test_no_faults_is_bitwise_run_fedavg(monkeypatch, overrides) -> None:
    config = {**SMALL, **overrides}
    want_states = _capture_states(monkeypatch, server)
    want = server.run_fedavg(config)
    got_states = _capture_states(monkeypatch, faults)
    got = faults.run_fedavg_with_faults(config, straggler=faults.LogNormalLatency(3.0, 2.0))  # irrelevant here
    for key in ("config", "client_sizes", "initial_test_accuracy", "final_test_accuracy", "bytes_communicated"):
        assert got[key] == want[key], key
    assert {k: got["seeds"][k] for k in want["seeds"]} == want["seeds"]
    assert [{k: h[k] for k in ROUND_KEYS} for h in got["history"]] == want["history"]  # floats compared exactly
    assert all(h["reported"] == h["selected"] and h["aggregated"] == len(h["selected"]) for h in got["history"])
    assert len(got_states) == len(want_states) == config["rounds"] + 1
    for a, b in zip(got_states, want_states):
        _assert_states_equal(a, b)


def _replay_round(config, template, start_state, round_info, train, partition):
    """The reporters' models, retrained by hand from the round's starting state and recorded seeds."""
    states, counts = [], []
    for k in round_info["reported"]:
        net = load_model_state(copy.deepcopy(template), start_state)
        seed = round_info["client_seeds"][round_info["selected"].index(k)]
        result = train_client_locally(net, train, partition[k], config["epochs"], config["batch_size"], config["lr"],
                                      seed)
        states.append({k2: v.detach().clone() for k2, v in net.state_dict().items()})
        counts.append(result["num_samples"])
    return states, counts


def test_round_aggregates_the_reporters_renormalised_over_them(monkeypatch) -> None:
    config = {**SMALL, "partition": "dirichlet", "epochs": 1}  # unequal n_k, so the weights matter
    captured = _capture_states(monkeypatch, faults)
    record = faults.run_fedavg_with_faults(config, dropout_rate=0.4, deadline=1.5)
    validated = server.validate_fedavg_config(config)
    train, _, template, seeds = server.prepare_run(validated)
    partition = server.make_partition(validated, train, seeds["partition"])
    partial = 0
    for t, info in enumerate(record["history"], start=1):
        if info["kept_global_model"]:
            _assert_states_equal(captured[t], captured[t - 1])
            continue
        states, counts = _replay_round(config, template, captured[t - 1], info, train, partition)
        _assert_states_equal(captured[t], aggregate_weighted_average(states, counts))
        if info["aggregated"] < len(info["selected"]):
            partial += 1
            # The mistake: weights n_k / (sum over the *selected*) — shrinks the model by the missing share.
            selected_total = sum(record["client_sizes"][k] for k in info["selected"])
            assert selected_total > sum(counts)
            wrong = {key: sum(n / selected_total * s[key].double() for n, s in zip(counts, states))
                     for key in states[0]}
            assert max(float((wrong[key] - captured[t][key].double()).abs().max()) for key in wrong) > 1e-2
    assert partial >= 3  # the check above ran on rounds where someone was missing


def test_seeded_runs_are_reproducible_and_seeds_matter() -> None:
    kwargs = {"dropout_rate": 0.3, "deadline": 1.2, "overselect": 0.5}
    a, b = (faults.run_fedavg_with_faults(SMALL, **kwargs) for _ in range(2))
    a.pop("wall_time_s"), b.pop("wall_time_s")
    assert a == b
    c = faults.run_fedavg_with_faults({**SMALL, "seed": 1}, **kwargs)
    assert [h["dropped"] for h in c["history"]] != [h["dropped"] for h in a["history"]]
    assert a["seeds"]["faults"] == 5 and c["seeds"]["faults"] == 6
    assert a["faults"] == {"dropout_rate": 0.3, "deadline": 1.2, "overselect": 0.5,
                           "straggler": {"median_s": 1.0, "sigma": 0.5}, "clients_per_round": 4,
                           "selected_per_round": 6}


def test_round_with_no_reporter_keeps_the_global_model(monkeypatch) -> None:
    captured = _capture_states(monkeypatch, faults)
    record = faults.run_fedavg_with_faults(SMALL, deadline=1e-6)  # P(T <= 1e-6) = Φ(ln(1e-6)/0.5) ≈ 1e-168
    assert all(h["kept_global_model"] and h["aggregated"] == 0 and h["reported"] == [] for h in record["history"])
    assert all(h["late"] == h["selected"] and h["train_loss"] is None and h["bytes_up"] == 0 for h in record["history"])
    for state in captured[1:]:
        _assert_states_equal(state, captured[0])
    assert record["final_test_accuracy"] == record["initial_test_accuracy"]
    mixed = faults.run_fedavg_with_faults({**SMALL, "rounds": 12}, dropout_rate=0.8)  # some rounds empty, some not
    kept = [h["kept_global_model"] for h in mixed["history"]]
    assert any(kept) and not all(kept)
    assert all(h["dropped"] == h["selected"] for h in mixed["history"] if h["kept_global_model"])


def _partition_of_selected(h) -> None:
    parts = [h["reported"], h["dropped"], h["late"], h["surplus"]]
    assert sorted(sum(parts, [])) == h["selected"] and all(p == sorted(p) for p in parts)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_overselection_caps_the_aggregate_and_brings_more_reports(seed) -> None:
    config = {**SMALL, "rounds": 10, "seed": seed}
    plain = faults.run_fedavg_with_faults(config, dropout_rate=0.5, deadline=1.5)
    over = faults.run_fedavg_with_faults(config, dropout_rate=0.5, deadline=1.5, overselect=1.0)
    m = plain["faults"]["clients_per_round"]
    assert m == 4 and over["faults"]["selected_per_round"] == 8
    for h in plain["history"] + over["history"]:
        _partition_of_selected(h)
        assert h["aggregated"] == len(h["reported"]) <= m and len(h["local_steps"]) == h["aggregated"]
        assert h["surplus"] == [] or h["aggregated"] == m  # surplus only once the round is full
    assert all(len(h["selected"]) == 8 for h in over["history"])
    assert sum(h["aggregated"] for h in over["history"]) >= sum(h["aggregated"] for h in plain["history"])
    # common random numbers: a client selected in both runs has the same fate in the same round
    for hp, ho in zip(plain["history"], over["history"]):
        both = set(hp["selected"]) & set(ho["selected"])
        assert {k for k in both if k in hp["dropped"]} == {k for k in both if k in ho["dropped"]}
        assert {k for k in both if k in hp["late"]} == {k for k in both if k in ho["late"]}


def test_more_dropout_drops_a_superset_of_clients() -> None:
    low = faults.run_fedavg_with_faults(SMALL, dropout_rate=0.3)
    high = faults.run_fedavg_with_faults(SMALL, dropout_rate=0.6)
    for hl, hh in zip(low["history"], high["history"]):
        assert hl["selected"] == hh["selected"] and set(hl["dropped"]) <= set(hh["dropped"])
    def total(run):
        return sum(len(h["dropped"]) for h in run["history"])

    assert total(high) > total(low)


@pytest.mark.parametrize(("m", "r", "K", "want"), [(4, 0.0, 40, 4), (4, 0.1, 40, 5), (10, 0.1, 100, 11),
                                                   (10, 0.3, 100, 13), (4, 1.5, 40, 10), (4, 1.5, 8, 8)])
def test_overselected_count(m, r, K, want) -> None:
    assert faults.overselected_count(m, r, K) == want  # 1.1 * 10 = 11.000000000000002 must give 11, not 12


def test_lognormal_latency_against_numpy_and_its_closed_form_tail() -> None:
    law = faults.LogNormalLatency(median_s=2.0, sigma=0.7)
    z = np.random.default_rng(0).standard_normal(200_000)
    times = law.times(z)
    oracle = np.random.default_rng(0).lognormal(mean=math.log(2.0), sigma=0.7, size=200_000)  # numpy's sampler
    # median * exp(sigma z) vs exp(log(median) + sigma z): exp's argument (~4 at most) is rounded within
    # 4 u, exp and the product add a few ulps: ~8 u = 9e-16 relative; rtol 1e-12 is far above it
    np.testing.assert_allclose(times, oracle, rtol=1e-12)
    assert abs(float(np.median(times)) - 2.0) < 0.02
    for d in (0.5, 2.0, 3.0, 8.0):
        p = law.tail(d)
        assert p == pytest.approx(1 - statistics.NormalDist().cdf(math.log(d / 2.0) / 0.7), abs=1e-12)
        assert abs(float((times > d).mean()) - p) < 5 * math.sqrt(p * (1 - p) / times.size) + 1e-9
    assert faults.LogNormalLatency(1.0, 0.0).tail(0.5) == 1.0 and faults.LogNormalLatency(1.0, 0.0).tail(2.0) == 0.0


def test_late_share_in_a_run_follows_the_latency_tail() -> None:
    law = faults.LogNormalLatency(median_s=1.0, sigma=0.8)
    record = faults.run_fedavg_with_faults({**SMALL, "fraction": 1.0, "rounds": 40, "num_examples": 200},
                                           deadline=1.5, straggler=law)
    selected = sum(len(h["selected"]) for h in record["history"])  # 320 client-rounds, nobody drops
    late = sum(len(h["late"]) for h in record["history"])
    p = law.tail(1.5)  # ≈ 0.306
    assert abs(late / selected - p) < 4 * math.sqrt(p * (1 - p) / selected)


def _min_binomial_moments(n: int, cap: int, q: float) -> tuple[float, float]:
    """Mean and variance of min(cap, X) for X ~ Binomial(n, q)."""
    pmf = [math.comb(n, j) * q**j * (1 - q) ** (n - j) for j in range(n + 1)]
    mean = sum(min(cap, j) * w for j, w in enumerate(pmf))
    return mean, sum((min(cap, j) - mean) ** 2 * w for j, w in enumerate(pmf))


@pytest.mark.parametrize(("p", "deadline", "selected"), [(0.3, None, 4), (0.6, 1.5, 10), (0.0, 0.8, 6)])
def test_fates_give_the_binomial_number_of_reports(p, deadline, selected) -> None:
    """The fault mechanism alone, 4000 rounds: reporters per round = min(m, Bin(m', (1 - p) P(T <= deadline)))."""
    law, rng, sel_rng = faults.LogNormalLatency(), np.random.default_rng(0), np.random.default_rng(1)
    counts, dropped = [], 0
    for _ in range(4000):
        chosen = sorted(int(k) for k in sel_rng.choice(40, size=selected, replace=False))
        drops, times = faults.draw_client_fates(rng, 40, p, law)
        fates = faults.sort_out_reports(chosen, drops, times, 4, deadline)
        counts.append(len(fates["reported"]))
        dropped += len(fates["dropped"])
    q = (1 - p) * (1.0 if deadline is None else 1 - law.tail(deadline))
    mean, var = _min_binomial_moments(selected, 4, q)
    assert abs(statistics.mean(counts) - mean) < 4 * math.sqrt(var / 4000)
    assert abs(dropped / (4000 * selected) - p) < 4 * math.sqrt(p * (1 - p) / (4000 * selected)) + 1e-12


def test_experiment_accuracy_vs_dropout_with_and_without_overselection() -> None:
    """Pathological non-IID (2 shards each), K = 40, m = 4, 30 rounds, two seeds; r = 1.5 (m' = 10).

    Measured: accuracy 0.671 / 0.593 / 0.490 at drop-out 0 / 0.3 / 0.6 without over-selection,
    0.668 / 0.646 / 0.608 with it (reporters per round 4 / 3.25 / 1.82 and 4 / 4 / 3.17).
    """
    rows = faults.dropout_experiment()
    acc = {(r["dropout_rate"], r["overselect"]): r["accuracy"] for r in rows}
    agg = {(r["dropout_rate"], r["overselect"]): r["reporters"] for r in rows}
    assert {(r["overselect"], r["selected"]) for r in rows} == {(0.0, 4), (1.5, 10)}
    assert agg[0.0, 0.0] == agg[0.0, 1.5] == 4.0
    # per round min(4, Bin(m', 1 - p)) clients: m' = 4 without over-selection, 10 with; 60 rounds -> within 4 SE
    for p in (0.3, 0.6):
        for r, selected in ((0.0, 4), (1.5, 10)):
            mean, var = _min_binomial_moments(selected, 4, 1 - p)
            assert abs(agg[p, r] - mean) < 4 * math.sqrt(var / 60), (p, r, agg[p, r], mean)
    assert agg[0.3, 1.5] > agg[0.3, 0.0] + 0.7 and agg[0.6, 1.5] > agg[0.6, 0.0] + 1.2
    # accuracy: drop-outs hurt, over-selection restores most of it
    assert acc[0.6, 0.0] < acc[0.0, 0.0] - 0.08
    assert acc[0.6, 1.5] > acc[0.6, 0.0] + 0.05
    assert acc[0.6, 1.5] > acc[0.0, 0.0] - 0.1 and acc[0.3, 1.5] > acc[0.0, 0.0] - 0.05


def test_experiment_deadline_trades_rounds_for_shorter_rounds() -> None:
    """IID, K = 40, m = 4, log-normal report times (median 1 s, σ 0.5), target 70% test accuracy, seeds 0, 1.

    Measured (rounds to target per seed · simulated seconds to target per seed · reporters per round):

    ========  ==================================  ==================================
    deadline  m' = 4                              m' = 8 (r = 1)
    ========  ==================================  ==================================
    none      21, 23 · 30.8, 42.7 s · 4.00        21, 23 · 20.6, 22.4 s · 4.00
    1.5 s     21, 22 · 27.6, 30.3 s · 3.20        21, 23 · 20.6, 22.3 s · 3.99
    1.0 s     23, 28 · 22.4, 27.5 s · 2.13        22, 22 · 20.1, 19.8 s · 3.48
    0.7 s     30, 34 · 20.9, 23.8 s · 1.00        23, 24 · 16.1, 16.5 s · 1.83
    ========  ==================================  ==================================

    Without a deadline a round waits for its slowest client (the mean of the largest of 4 log-normal
    times is 1.75 s); a deadline cuts the wait and costs reports, hence rounds; over-selection buys the
    reports back with clients whose work is thrown away (m' − m per round).
    """
    law = faults.LogNormalLatency()
    rows = {(r["deadline"], r["overselect"]): r for r in faults.deadline_experiment()}
    for (d, r), row in rows.items():
        assert row["selected"] == (4 if r == 0 else 8) and None not in row["rounds_to_target"], row
        # reporters per round: min(4, Bin(m', P(T <= d))), 80 rounds -> within 4 SE
        q = 1.0 if d is None else 1 - law.tail(d)
        mean, var = _min_binomial_moments(row["selected"], 4, q)
        assert abs(row["reporters"] - mean) <= 4 * math.sqrt(var / 80), (d, r, row["reporters"], mean)
        if d is not None:
            assert row["round_seconds"] <= d + 1e-12  # a round never outlasts its deadline
    mean = {key: statistics.mean(row["seconds_to_target"]) for key, row in rows.items()}
    rounds = {key: statistics.mean(row["rounds_to_target"]) for key, row in rows.items()}
    assert rounds[0.7, 0.0] > rounds[None, 0.0] + 5  # a tight deadline costs rounds …
    assert mean[0.7, 0.0] < mean[None, 0.0] - 10  # … and still saves time: no waiting for the slowest
    for d in (None, 1.5, 1.0, 0.7):  # over-selection is faster at every deadline
        assert mean[d, 1.0] < mean[d, 0.0] - 1.0, (d, mean[d, 1.0], mean[d, 0.0])
    assert min(mean, key=mean.get) == (0.7, 1.0)


@pytest.mark.parametrize(("kwargs", "error", "argument"), [
    ({"dropout_rate": 1.0}, ValueError, "dropout_rate"),
    ({"dropout_rate": -0.1}, ValueError, "dropout_rate"),
    ({"dropout_rate": True}, ValueError, "dropout_rate"),
    ({"dropout_rate": "0.1"}, ValueError, "dropout_rate"),
    ({"deadline": 0.0}, ValueError, "deadline"),
    ({"deadline": -1}, ValueError, "deadline"),
    ({"deadline": math.inf}, ValueError, "deadline"),
    ({"deadline": "1"}, TypeError, "deadline"),
    ({"overselect": -0.5}, ValueError, "overselect"),
    ({"overselect": math.nan}, ValueError, "overselect"),
    ({"overselect": None}, TypeError, "overselect"),
    ({"straggler": (1.0, 0.5)}, TypeError, "straggler"),
])
def test_bad_arguments_are_named(kwargs, error, argument) -> None:
    with pytest.raises(error, match=argument):
        faults.run_fedavg_with_faults({**SMALL, "rounds": 1}, **kwargs)


@pytest.mark.parametrize(("kwargs", "error", "argument"), [
    ({"median_s": 0.0}, ValueError, "median_s"), ({"median_s": math.inf}, ValueError, "median_s"),
    ({"sigma": -0.1}, ValueError, "sigma"), ({"sigma": "1"}, TypeError, "sigma"),
])
def test_bad_latency_fields_are_named(kwargs, error, argument) -> None:
    with pytest.raises(error, match=argument):
        faults.LogNormalLatency(**kwargs)


def test_bad_config_is_refused_by_the_config_check() -> None:
    with pytest.raises(ValueError, match="fraction"):
        faults.run_fedavg_with_faults({**SMALL, "fraction": 0.0})
