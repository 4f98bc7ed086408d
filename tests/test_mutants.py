"""Every graded function: the reference passes its hidden check and every mutant is rejected."""

from __future__ import annotations

import pytest

import trainsys.grading as grading
from trainsys.memtrain import mlp
from tests.mutants import m1p1_mlp

REFERENCES = {name: getattr(mlp, name) for name in m1p1_mlp.MUTANTS}
MUTANTS = [(name, desc, fn) for name, entries in m1p1_mlp.MUTANTS.items() for desc, fn in entries]


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_reference_passes_its_check(name: str) -> None:
    message = getattr(grading, f"check_{name}")(REFERENCES[name])
    assert "passed" in message


@pytest.mark.parametrize(("name", "description", "mutant"), MUTANTS, ids=[f"{n}: {d}" for n, d, _ in MUTANTS])
def test_mutant_is_rejected(name: str, description: str, mutant) -> None:
    with pytest.raises(AssertionError) as info:
        getattr(grading, f"check_{name}")(mutant)
    assert str(info.value).startswith("["), f"the failure message should name its case: {info.value}"


def test_every_graded_function_has_at_least_two_mutants() -> None:
    checks = {n[len("check_"):] for n in grading.__all__ if n.startswith("check_")}
    counts = {name: len(m1p1_mlp.MUTANTS.get(name, [])) for name in checks}
    assert all(c >= 2 for c in counts.values()), counts
