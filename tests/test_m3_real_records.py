"""The committed real-data records of Module 3 (make reproduce): what they hold, and a short re-run against them.

The re-run repeats seed 0's first rounds of two settings per partition (a few seconds each) and compares the
accuracies with the record's curves within the tolerance derived in :mod:`trainsys.fedavg.reproduce_real`
(the fraction of test targets whose top-two logit margin is below 1e-3 — the only predictions another BLAS
could flip).
"""

from __future__ import annotations

import pytest

from trainsys.data import fashion_mnist as fm
from trainsys.evidence import load_record
from trainsys.fedavg import reproduce_real as rr


@pytest.fixture(scope="module")
def fashion() -> dict:
    return load_record("fedavg-fashion-mnist")


@pytest.fixture(scope="module")
def shakespeare() -> dict:
    return load_record("fedavg-shakespeare")


def test_m3_25_fashion_record_names_its_data_seeds_and_environment(fashion: dict) -> None:
    assert {f["sha256"] for f in fashion["datasets"][0]["files"]} == set(fm.SHA256.values())
    assert fashion["seeds"] == [0, 1, 2] and fashion["environment"]["packages"]["torch"].startswith("2.13")
    assert len(fashion["environment"]["git"]["commit"]) == 40 and fashion["wall_s"] > 0
    runs = fashion["extra"]["runs"]
    for partition in ("iid", "shards"):
        for label, row in runs[partition].items():
            assert len(row["curves"]) == 3 and len(row["rounds"]) == 3
            for rounds, curve in zip(row["rounds"], row["curves"]):
                # a run stops at the first round that reaches the target, or at its cap without reaching it
                first = next((t for t, a in enumerate(curve, 1) if a >= rr.FASHION_TARGET), None)
                assert rounds == first and (rounds == len(curve) if rounds else len(curve) == row["cap"])


def test_m3_25_fashion_table_is_computed_from_the_runs_it_records(fashion: dict) -> None:
    rebuilt = rr.fashion_figures(fashion["extra"]["runs"], fashion["extra"]["centralized_curve"], 3)
    assert rebuilt["rounds"] == fashion["figures"]["rounds"]
    assert rebuilt["centralized"] == fashion["figures"]["centralized"]


def test_m3_24_shakespeare_table_is_computed_from_the_runs_it_records(shakespeare: dict) -> None:
    rebuilt = rr.shakespeare_figures(shakespeare["extra"]["runs"], 3, shakespeare["figures"]["data"])
    assert rebuilt["rounds"] == shakespeare["figures"]["rounds"]
    assert shakespeare["datasets"][0]["version"] == "3.0.0" and len(shakespeare["datasets"][0]["files"]) == 38


def test_m3_25_fashion_short_rerun_matches_its_record() -> None:
    result = rr.fashion_mnist_section(quick=True)
    assert len(result["checks"]) == 4 and all(len(c) == rr.QUICK_ROUNDS for c in result["checks"].values())


def test_m3_24_shakespeare_short_rerun_matches_its_record() -> None:
    result = rr.shakespeare_section(quick=True)
    assert set(result["checks"]) == {"natural", "iid"}
    assert all(len(c) == rr.QUICK_ROUNDS for c in result["checks"].values())
