"""Module 2's fault extension on torch.distributed (gloo) against ``train_diloco_with_faults``, and replica checks.

Three torchrun launches: (a) a schedule of absences plus a stale worker with 1/(1+s) weights, compared
round by round with the simulation (it also serves as the no-fault fingerprint run); (b) a flipped
bit on one of 2 ranks, checked every 2 rounds, with ``--on-mismatch stop``; (c) 3 ranks with seeded
absences (``--miss-prob``) and a skipped outer step, where the majority names the faulty rank. The
option parsers' errors are tested without launching.
"""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from trainsys.diloco.faults import train_diloco_with_faults
from trainsys.distributed.diloco import _faults, _injected_fault, parse_absent, parse_staleness
from trainsys.distributed.launch import run

pytestmark = pytest.mark.slow
MODULE = "trainsys.distributed.diloco"


def _config(workers: int, rounds: int, inner_steps: int, seed: int = 0) -> dict:
    return {"num_workers": workers, "rounds": rounds, "inner_steps": inner_steps, "seed": seed, "progress": False}


def _fault_columns(history: list[dict]) -> list[tuple]:
    """Per round: arrived, missed, stale, weights, outer_step_applied, worker_steps (JSON's str keys made int)."""
    return [(h["arrived"], h["missed"], {int(k): v for k, v in h["stale"].items()},
             {int(k): v for k, v in h["weights"].items()}, h["outer_step_applied"], h["worker_steps"])
            for h in history]


def test_schedule_and_staleness_follow_the_simulation_and_raise_no_detection() -> None:
    # Round 2: worker 1 absent; round 4: nobody (θ and the momentum kept); worker 1 one round late from
    # round 2 on, weighted 1/(1+s): weights 2/3, 1/3 in rounds 3, 5, 6.
    schedule, staleness = {2: [1], 4: [0, 1]}, {1: 1}
    job = run(MODULE, 2, "--rounds", "6", "--inner-steps", "5", "--absent", "2:1;4:0,1", "--staleness", "1:1",
              "--stale-weighting", "inverse", "--fingerprint-every", "2", timeout=240)
    sim = train_diloco_with_faults(_config(2, 6, 5), schedule=schedule, staleness=staleness,
                                   stale_weighting="inverse")
    assert _fault_columns(job["history"]) == [
        (h["arrived"], h["missed"], h["stale"], h["weights"], h["outer_step_applied"], h["worker_steps"])
        for h in sim["history"]]
    assert [h["outer_step_applied"] for h in job["history"]] == [True, True, True, False, True, True]
    assert _fault_columns(job["history"])[2][3] == {0: pytest.approx(2 / 3), 1: pytest.approx(1 / 3)}
    # float32 in both, all-reduce order and torch's kernels only: ~3e-8 observed; dropping the staleness
    # or the weights moves the losses by > 1e-2.
    np.testing.assert_allclose([h["heldout_loss"] for h in job["history"]],
                               [h["heldout_loss"] for h in sim["history"]], rtol=1e-5)
    assert job["history"][3]["heldout_loss"] == job["history"][2]["heldout_loss"]  # no arrival: θ kept exactly
    assert job["faults"] == {"miss_prob": 0.0, "schedule": {"2": [1], "4": [0, 1]}, "staleness": {"1": 1},
                             "stale_weighting": "inverse"}
    assert job["fault_seed"] == sim["seeds"]["fault_seed"]
    # Checks after rounds 2, 4, 6 found identical replicas: absences and staleness keep them in step.
    assert job["fault"] is None and job["detections"] == [] and job["stopped_at"] is None


def test_flipped_bit_is_detected_at_the_first_check_at_or_after_it_and_stops_both_ranks() -> None:
    # Rank 1 flips the lowest bit of its W0 after round r's outer step; checks after rounds 2, 4, 6. The
    # flip is put on a check round on purpose: a lowest-bit flip at round 3 was measured to be rounded
    # away by round 4's outer step (θ enters θ − η(θ − θ̄ + μb') as (1 − η(1+μ))θ = −0.33θ, so the 1-ulp
    # gap becomes a third of an ulp), and the check after round 4 then found identical replicas.
    r = 4
    job = run(MODULE, 2, "--rounds", "6", "--inner-steps", "5", "--fault", f"flip:1:{r}",
              "--fingerprint-every", "2", "--on-mismatch", "stop", timeout=240)
    assert job["fault"] == {"kind": "flip", "rank": 1, "round": r}
    # The check after round 2 agreed (no detection before r; "round" 3 = the first round after it); the
    # one after round 4 is the first at or after r. With 2 ranks the two digests tie 1–1: there is no
    # majority, so minority_workers names both ranks — the check knows *that* the replicas diverged, not
    # which one is wrong.
    assert job["detections"] == [{"round": 3, "detected_at": 4, "workers": [0, 1]}]
    assert job["stopped_at"] == 4 and [h["round"] for h in job["history"]] == [1, 2, 3, 4]  # both left at 4
    # Rank 0's model is the simulation's (no fault arguments: train_diloco's run); the flip is on rank 1.
    sim = train_diloco_with_faults(_config(2, 6, 5))
    np.testing.assert_allclose([h["heldout_loss"] for h in job["history"]],
                               [h["heldout_loss"] for h in sim["history"][:r]], rtol=1e-5)


def test_three_ranks_with_seeded_absences_name_the_rank_that_skipped_its_outer_step() -> None:
    # miss_prob 0.3, seed 0, 3 workers: the fault generator makes worker 1 miss round 1 and workers 1, 2
    # round 4. Rank 2 joins round 2's all-reduce but keeps its global model.
    job = run(MODULE, 3, "--rounds", "4", "--inner-steps", "5", "--miss-prob", "0.3", "--fault", "skip:2:2",
              "--fingerprint-every", "1", timeout=240)
    sim = train_diloco_with_faults(_config(3, 4, 5), miss_prob=0.3)
    assert [h["missed"] for h in sim["history"]] == [[1], [], [], [1, 2]]
    assert _fault_columns(job["history"]) == [
        (h["arrived"], h["missed"], h["stale"], h["weights"], h["outer_step_applied"], h["worker_steps"])
        for h in sim["history"]]
    # Rank 0's copy is the simulation's through round 2 (rank 2's skip changes only rank 2's copy); from
    # round 3 rank 2 trains from its stale copy and the average moves.
    np.testing.assert_allclose([h["heldout_loss"] for h in job["history"][:2]],
                               [h["heldout_loss"] for h in sim["history"][:2]], rtol=1e-5)
    # With 3 ranks the 2–1 majority singles out rank 2; --on-mismatch record goes on, and the missed
    # outer step (a whole step, not a rounding) keeps rank 2 apart at every later check.
    assert job["detections"] == [{"round": 2, "detected_at": t, "workers": [2]} for t in (2, 3, 4)]
    assert job["stopped_at"] is None and len(job["history"]) == 4


@pytest.mark.parametrize("spec, message", [
    ("", "--absent must be ROUND:W,W;ROUND:W"),
    ("3", "entry '3' of '3' has no ROUND:W,… pair"),
    ("3:", "entry '3:' of '3:' has no ROUND:W,… pair"),
    ("x:1", "'x' is not an integer in 'x:1'"),
    ("2:1;4:0,a", "'a' is not an integer in '2:1;4:0,a'"),
    ("2:1;2:0", "--absent names round 2 twice in '2:1;2:0'"),
])
def test_absent_parser_errors_name_the_option_the_form_and_the_input(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match="--absent") as info:
        parse_absent(spec)
    assert message in str(info.value)


@pytest.mark.parametrize("spec, message", [
    ("", "--staleness must be W:S,W:S"),
    ("1", "entry '1' of '1' has no W:S pair"),
    ("1:a", "'a' is not an integer in '1:a'"),
    ("1:1,1:2", "--staleness names worker 1 twice in '1:1,1:2'"),
])
def test_staleness_parser_errors_name_the_option_the_form_and_the_input(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match="--staleness") as info:
        parse_staleness(spec)
    assert message in str(info.value)


def _args(**kw) -> argparse.Namespace:
    return argparse.Namespace(**{"rounds": 4, "miss_prob": 0.0, "absent": None, "staleness": None,
                                 "stale_weighting": "none", **kw})


def test_parsed_options_are_the_simulation_arguments_and_validate_faults_checks_ranges() -> None:
    assert parse_absent(" 2:1 ; 4:0,1 ") == {2: [1], 4: [0, 1]}
    assert parse_staleness("1:2, 0:0") == {1: 2, 0: 0}
    assert _faults(_args(absent="2:1", staleness="1:1", stale_weighting="inverse"), 2) == (
        0.0, {2: frozenset({1})}, {1: 1}, "inverse")
    for kw, message in [({"absent": "5:0"}, "schedule's round keys must be <= 4"),
                        ({"absent": "2:2"}, "schedule[2][0] must be <= 1"),
                        ({"absent": "2:1,1"}, "schedule[2] must not repeat a worker id"),
                        ({"absent": "2:1", "miss_prob": 0.5}, "schedule and miss_prob exclude each other"),
                        ({"staleness": "1:-1"}, "staleness[1] must be >= 0"),
                        ({"miss_prob": 1.0}, "miss_prob must be in [0, 1)")]:
        with pytest.raises(ValueError) as info:
            _faults(_args(**kw), 2)
        assert message in str(info.value) and "--absent gives schedule" in str(info.value)
    with pytest.raises(ValueError, match=r"needs a round with an outer step, in \[1, 4\], got 0"):
        _injected_fault("flip:1:0", 2, 4)
    with pytest.raises(ValueError, match="STEP must be 0"):
        _injected_fault("seed:1:2", 2, 4)
    with pytest.raises(ValueError, match=r"--fault step must be in \[0, 4\], got 5"):
        _injected_fault("skip:0:5", 2, 4)
    assert _injected_fault(None, 2, 4) is None
