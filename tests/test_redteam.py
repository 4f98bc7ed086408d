"""The blind red team's answers against the hidden checks: wrong answers rejected, correct ones accepted.

``tests/redteam/<part>.py`` holds answers written from the release notebooks alone (see its package
docstring). A module may list in ``OPEN`` the wrong answers its check does not catch yet, each with
the reason; those are strict expected failures, so fixing the check makes the test fail until the
entry is removed from ``OPEN``. ``DISPUTED`` answers (the lesson's contract allows them) are not run.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import tests.redteam as redteam
from tests.lesson_index import by_function
import trainsys.grading as grading

MODULES = [importlib.import_module(f"tests.redteam.{m.name}") for m in pkgutil.iter_modules(redteam.__path__)
           if not m.name.startswith("_")]


def _cases(kind: str) -> list:
    cases = []
    for module in MODULES:
        open_ = {(name, desc) for name, descs in getattr(module, "OPEN", {}).items() for desc in descs}
        for name, entries in getattr(module, kind).items():
            for desc, fn in entries:
                marks = [pytest.mark.xfail(strict=True, reason="OPEN: the check does not catch this yet")] \
                    if (name, desc) in open_ else []
                key = by_function()[name].key if name in by_function() else module.__name__.rsplit(".", 1)[1]
                cases.append(pytest.param(name, fn, id=f"{key} {name}: {desc[:80]}",
                                          marks=marks))
    return cases


@pytest.mark.parametrize(("name", "mutant"), _cases("MUTANTS"))
def test_red_team_mutant_is_rejected(name: str, mutant) -> None:
    with pytest.raises(AssertionError) as info:
        getattr(grading, f"check_{name}")(mutant)
    assert str(info.value).startswith("["), f"the failure message should name its case: {info.value}"


@pytest.mark.parametrize(("name", "alternative"), _cases("ALTERNATIVES"))
def test_red_team_alternative_is_accepted(name: str, alternative) -> None:
    assert "passed" in getattr(grading, f"check_{name}")(alternative)


def test_every_graded_function_has_red_team_answers() -> None:
    checks = {n[len("check_"):] for n in grading.__all__ if n.startswith("check_")}
    mutants = {name: len(entries) for m in MODULES for name, entries in m.MUTANTS.items()}
    alternatives = {name for m in MODULES for name in m.ALTERNATIVES}
    few = sorted(n for n in checks if mutants.get(n, 0) < 3)
    assert not few, f"graded functions with fewer than 3 red-team mutants: {few}"
    assert not sorted(checks - alternatives), f"no correct alternative for {sorted(checks - alternatives)}"
