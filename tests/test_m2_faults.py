"""Module 2 extension: DiLoCo with missing workers and stale pseudo-gradients, against oracles.

Oracles: ``train_diloco`` itself (no fault, staleness 0, a skipped round — bit for bit), rounds
recomputed by hand in float64 from the lesson functions (mean over the arrivals, never over N; the
stale worker started from the older global model; the 1/(1+s) weights), the fault generator's own
draws, and measured held-out losses over three seeds for the experiments.
"""

from __future__ import annotations

import numpy as np
import pytest

from trainsys.diloco import faults
from trainsys.diloco import loop
from trainsys.diloco.adamw import init_adamw_state
from trainsys.diloco.evaluation import HISTORY_KEYS
from trainsys.diloco.outer import init_outer_optimizer, nesterov_outer_step
from trainsys.diloco.sharding import run_inner_steps

SMALL = {"n_examples": 400, "d_in": 6, "n_classes": 4, "hidden_sizes": (16,), "num_workers": 4, "inner_steps": 4,
         "rounds": 5, "batch_size": 8, "progress": False}


def _same_params(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]) for k in a)


def _same_history(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        np.array_equal([x[key] for key in HISTORY_KEYS], [y[key] for key in HISTORY_KEYS], equal_nan=True)
        for x, y in zip(a, b))


@pytest.mark.parametrize("kwargs", [{}, {"miss_prob": 0.0}, {"schedule": {}}, {"staleness": {0: 0, 3: 0}},
                                    {"staleness": {0: 0, 1: 0, 2: 0, 3: 0}, "stale_weighting": "inverse"}])
def test_no_fault_is_train_diloco_bit_for_bit(kwargs: dict) -> None:
    ref = loop.train_diloco(SMALL)
    rec = faults.train_diloco_with_faults(SMALL, **kwargs)
    assert _same_params(rec["final_params"], ref["final_params"])
    assert _same_history(rec["history"], ref["history"]) and rec["initial"] == ref["initial"]
    assert rec["examples_processed"] == ref["examples_processed"] and rec["shard_sizes"] == ref["shard_sizes"]
    for r, entry in enumerate(rec["history"], start=1):
        assert set(entry) == set(HISTORY_KEYS) | set(faults.FAULT_HISTORY_KEYS)
        assert entry["arrived"] == [0, 1, 2, 3] and entry["missed"] == [] and entry["stale"] == {}
        assert entry["weights"] == {i: 0.25 for i in range(4)} and entry["outer_step_applied"]
        assert entry["worker_steps"] == [r * SMALL["inner_steps"]] * 4


def _by_hand_round(theta, outer_state, states, run, arrivals, cfg, weights=None, bases=None):
    """One outer step in float64: Δ = Σ_i w_i (base_i − θ_i), w_i = 1/|arrivals| unless given."""
    hp = loop.inner_hp(cfg)
    w = weights or {i: 1.0 / len(arrivals) for i in arrivals}
    delta = {k: np.zeros(v.shape) for k, v in theta.items()}
    for i in arrivals:
        base = theta if bases is None else bases[i]
        local, states[i], _ = run_inner_steps(base, states[i], run["shards"][i], cfg.inner_steps, hp,
                                              run["worker_rngs"][i])
        for k in delta:
            delta[k] += w[i] * (base[k].astype(np.float64) - local[k])
    delta = {k: v.astype(np.float32) for k, v in delta.items()}
    return nesterov_outer_step(theta, outer_state, delta, cfg.outer_lr, cfg.outer_momentum)


def test_outer_step_averages_the_arrivals_only_and_absent_workers_keep_their_state() -> None:
    cfg = loop.validate_config({**SMALL, "rounds": 2})
    schedule = {1: [1], 2: [0, 3]}
    rec = faults.train_diloco_with_faults(cfg, schedule=schedule)
    run = loop.setup_run(cfg)
    theta, outer_state = run["params"], init_outer_optimizer(run["params"])
    states = [init_adamw_state(theta) for _ in range(4)]
    theta, outer_state = _by_hand_round(theta, outer_state, states, run, [0, 2, 3], cfg)
    # worker 1 was absent in round 1: it starts round 2 with a fresh AdamW state and an unused generator
    assert states[1]["step"] == 0
    expected, _ = _by_hand_round(theta, outer_state, states, run, [1, 2], cfg)
    for k in expected:
        np.testing.assert_allclose(rec["final_params"][k], expected[k], rtol=1e-5, atol=1e-6)
    h1, h2 = rec["history"]
    assert (h1["arrived"], h1["missed"], h2["arrived"], h2["missed"]) == ([0, 2, 3], [1], [1, 2], [0, 3])
    assert h2["weights"] == {1: 0.5, 2: 0.5} and h2["worker_steps"] == [4, 4, 8, 4]
    assert h2["bytes_communicated"] == 2 * h1["bytes_communicated"] // 3
    # dividing by N = 4 instead (absent workers counted as "no change") is a different, wrong step
    run = loop.setup_run(cfg)
    theta, outer_state = run["params"], init_outer_optimizer(run["params"])
    states = [init_adamw_state(theta) for _ in range(4)]
    theta, outer_state = _by_hand_round(theta, outer_state, states, run, [0, 2, 3], cfg,
                                        weights={0: 0.25, 2: 0.25, 3: 0.25})
    wrong, _ = _by_hand_round(theta, outer_state, states, run, [1, 2], cfg, weights={1: 0.25, 2: 0.25})
    assert max(np.abs(rec["final_params"][k] - wrong[k]).max() for k in wrong) > 1e-3


def test_a_round_with_nobody_keeps_theta_and_the_outer_state() -> None:
    rec = faults.train_diloco_with_faults({**SMALL, "rounds": 3}, schedule={2: [3, 1, 0, 2]})
    h1, h2, _ = rec["history"]
    assert h2["arrived"] == [] and h2["missed"] == [0, 1, 2, 3] and not h2["outer_step_applied"]
    assert h2["weights"] == {} and h2["bytes_communicated"] == 0 and np.isnan(h2["train_loss"])
    assert (h2["heldout_loss"], h2["heldout_accuracy"]) == (h1["heldout_loss"], h1["heldout_accuracy"])
    # nothing moved in round 2 — θ, outer momentum, AdamW states, generators: round 3 is train_diloco's round 2
    ref = loop.train_diloco({**SMALL, "rounds": 2})
    assert _same_params(rec["final_params"], ref["final_params"])
    assert rec["history"][2]["heldout_loss"] == ref["history"][1]["heldout_loss"]
    assert rec["examples_processed"] == 2 * 4 * SMALL["inner_steps"] * SMALL["batch_size"]


def test_random_misses_are_seeded_and_drawn_from_their_own_generator() -> None:
    a = faults.train_diloco_with_faults(SMALL, miss_prob=0.4)
    b = faults.train_diloco_with_faults(SMALL, miss_prob=0.4)
    assert _same_params(a["final_params"], b["final_params"]) and _same_history(a["history"], b["history"])
    assert [h["missed"] for h in a["history"]] == [h["missed"] for h in b["history"]]
    rng = np.random.default_rng(loop.derived_seed(0, 2))
    assert a["seeds"]["fault_seed"] == loop.derived_seed(0, 2)
    expected = [np.flatnonzero(rng.random(4) < 0.4).tolist() for _ in range(SMALL["rounds"])]
    assert [h["missed"] for h in a["history"]] == expected and any(expected)
    # the same misses given as a schedule give the same run: the fault draws touch no training draw
    c = faults.train_diloco_with_faults(SMALL, schedule={r + 1: m for r, m in enumerate(expected)})
    assert _same_params(a["final_params"], c["final_params"])
    other = faults.train_diloco_with_faults({**SMALL, "seed": 1}, miss_prob=0.4)
    assert [h["missed"] for h in other["history"]] != expected


@pytest.mark.parametrize("weighting", ["none", "inverse"])
def test_stale_worker_starts_from_the_older_model_with_its_weight(weighting: str) -> None:
    cfg = loop.validate_config({**SMALL, "rounds": 3})
    rec = faults.train_diloco_with_faults(cfg, staleness={2: 1}, stale_weighting=weighting)
    run = loop.setup_run(cfg)
    theta, outer_state = run["params"], init_outer_optimizer(run["params"])
    states = [init_adamw_state(theta) for _ in range(4)]
    past = [theta]
    for t in (1, 2, 3):
        s = min(1, t - 1)  # worker 2 is one round late; in round 1 there is no older model
        raw = {i: 1.0 / (1 + (s if i == 2 else 0)) for i in range(4)} if weighting == "inverse" \
            else {i: 1.0 for i in range(4)}
        w = {i: raw[i] / sum(raw.values()) for i in range(4)}
        bases = {i: past[t - 1 - (s if i == 2 else 0)] for i in range(4)}
        theta, outer_state = _by_hand_round(theta, outer_state, states, run, [0, 1, 2, 3], cfg, w, bases)
        past.append(theta)
        entry = rec["history"][t - 1]
        assert entry["stale"] == ({2: 1} if t > 1 else {})
        assert entry["weights"] == pytest.approx(w, rel=1e-15)
    for k in theta:
        np.testing.assert_allclose(rec["final_params"][k], theta[k], rtol=1e-5, atol=1e-6)
    assert rec["history"][1]["weights"][2] == (pytest.approx(1 / 7) if weighting == "inverse" else 0.25)


def test_arrival_weights_are_inverse_staleness_renormalised() -> None:
    assert faults.arrival_weights([0, 1, 3], "inverse") == pytest.approx([4 / 7, 2 / 7, 1 / 7])
    assert faults.arrival_weights([2, 2], "inverse") is None  # equally stale: the uniform mean
    assert faults.arrival_weights([0, 5], "none") is None and faults.arrival_weights([], "inverse") == []


def test_even_absence_schedule_takes_the_same_share_from_every_worker() -> None:
    schedule = faults.even_absence_schedule(0.25, 20, 4, seed=0)
    assert all(sum(w in absent for absent in schedule.values()) == 5 for w in range(4))
    assert set(schedule) <= set(range(1, 21)) and schedule == faults.even_absence_schedule(0.25, 20, 4, seed=0)
    assert faults.even_absence_schedule(0.0, 20, 4, seed=0) == {}
    with pytest.raises(ValueError, match="fraction must be in"):
        faults.even_absence_schedule(1.5, 20, 4, seed=0)


def test_experiment_missed_rounds_against_synchronous_baseline_with_the_same_lost_compute() -> None:
    """Measured (mean final held-out loss over seeds 0–2; defaults, T = 20, H = 10, 4 IID workers):

    ======================  ======  ======  ======
    fraction missed          0       0.25    0.5
    DiLoCo, faults          0.283   0.304   0.426
    synchronous, (1-f)·T·H  0.263   0.303   0.392
    ======================  ======  ======  ======

    (per seed, DiLoCo at 0 / 0.25: 0.270 / 0.264, 0.274 / 0.332, 0.306 / 0.316). Missing a quarter of
    the rounds costs DiLoCo little; missing half costs it about as much as losing half the compute
    costs the baseline, slightly more (a mean over two arrivals is noisier, and the outer momentum
    carries the noise): on this problem DiLoCo does not turn the lost compute into a smaller loss.
    """
    rows = faults.missed_rounds_experiment()
    assert [r["examples"] for r in rows] == [4 * round((1 - f) * 20) * 10 * 32 for f in (0.0, 0.25, 0.5)]
    diloco = {r["fraction"]: r["diloco"] for r in rows}
    sync = {r["fraction"]: r["synchronous"] for r in rows}
    assert -0.01 < diloco[0.25] - diloco[0.0] < 0.06 and diloco[0.25] + 0.06 < diloco[0.5]
    assert sync[0.0] + 0.02 < sync[0.25] and sync[0.25] + 0.05 < sync[0.5]
    for frac in diloco:  # the same lost compute: DiLoCo is not better, and within 0.08 of the baseline
        assert -0.02 < diloco[frac] - sync[frac] < 0.08


def test_experiment_staleness_with_and_without_down_weighting() -> None:
    """Workers 0 and 1 of 4 are ``s`` rounds late. Measured (mean final held-out loss, seeds 0–2):

    ==========  ======  ======  ======
    s            0       1       2
    uniform     0.283   0.654   1.590
    1/(1+s)     0.283   0.370   0.498
    ==========  ======  ======  ======

    Staleness hurts a lot (the stale halves re-apply progress already made, amplified by the outer
    momentum 0.9), and the 1/(1+s) weighting of Zhang et al. 2016 removes most of the damage here.
    """
    rows = {r["staleness"]: r for r in faults.staleness_experiment()}
    uniform = {s: r["uniform"] for s, r in rows.items()}
    inverse = {s: r["inverse"] for s, r in rows.items()}
    assert uniform[0] == inverse[0]  # staleness 0 has uniform weights (bit-for-bit test above)
    assert uniform[0] + 0.2 < uniform[1] and uniform[1] + 0.4 < uniform[2]
    assert inverse[0] + 0.03 < inverse[1] and inverse[1] + 0.05 < inverse[2]
    assert inverse[1] + 0.15 < uniform[1] and inverse[2] + 0.5 < uniform[2]


@pytest.mark.parametrize("kwargs, error, argument", [
    ({"miss_prob": 1.0}, ValueError, "miss_prob"),
    ({"miss_prob": -0.1}, ValueError, "miss_prob"),
    ({"miss_prob": "0.2"}, TypeError, "miss_prob"),
    ({"schedule": [1, 2]}, TypeError, "schedule"),
    ({"schedule": {1: [4]}}, ValueError, "schedule[1][0]"),
    ({"schedule": {1: [0, 0]}}, ValueError, "schedule[1]"),
    ({"schedule": {0: [1]}}, ValueError, "schedule's round keys"),
    ({"schedule": {1: 2}}, TypeError, "schedule[1]"),
    ({"schedule": {1: [1]}, "miss_prob": 0.2}, ValueError, "schedule and miss_prob"),
    ({"staleness": {7: 1}}, ValueError, "staleness's worker keys"),
    ({"staleness": {1: -1}}, ValueError, "staleness[1]"),
    ({"staleness": {1: 1.5}}, TypeError, "staleness[1]"),
    ({"staleness": [1]}, TypeError, "staleness"),
    ({"stale_weighting": "sqrt"}, ValueError, "stale_weighting"),
])
def test_bad_fault_arguments_are_refused_naming_the_argument(kwargs: dict, error: type, argument: str) -> None:
    with pytest.raises(error) as info:
        faults.train_diloco_with_faults(SMALL, **kwargs)
    assert str(info.value).startswith(argument)
