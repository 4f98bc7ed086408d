"""Every graded function: the reference passes its hidden check and every mutant is rejected.

Mutant modules live in ``tests/mutants/`` (one per course part) and each maps a graded function's
name to ``[(description, mutant), ...]``; the reference is found in the module named by its
``REFERENCE`` attribute.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import trainsys.grading as grading
import tests.mutants as mutants_pkg
from tests.lesson_index import by_function

MODULES = [importlib.import_module(f"tests.mutants.{m.name}") for m in pkgutil.iter_modules(mutants_pkg.__path__)]
REFERENCES = {name: getattr(importlib.import_module(mod.REFERENCE), name) for mod in MODULES for name in mod.MUTANTS}
MUTANTS = [(name, desc, fn) for mod in MODULES for name, entries in mod.MUTANTS.items() for desc, fn in entries]
KEYS = {function: lesson.key for function, lesson in by_function().items()}  # test ids start with the lesson key
CHECKS = sorted(n[len("check_"):] for n in grading.__all__ if n.startswith("check_"))


@pytest.mark.parametrize("name", CHECKS, ids=[f"{KEYS.get(n, '?')} {n}" for n in CHECKS])
def test_reference_passes_its_check(name: str) -> None:
    assert name in REFERENCES, f"check_{name} has no mutants module entry"
    message = getattr(grading, f"check_{name}")(REFERENCES[name])
    assert "passed" in message


@pytest.mark.parametrize(("name", "description", "mutant"), MUTANTS, ids=[f"{KEYS.get(n, '?')} {n}: {d}" for n, d, _ in MUTANTS])
def test_mutant_is_rejected(name: str, description: str, mutant) -> None:
    with pytest.raises(AssertionError) as info:
        getattr(grading, f"check_{name}")(mutant)
    assert str(info.value).startswith("["), f"the failure message should name its case: {info.value}"


@pytest.mark.parametrize("name", CHECKS)
def test_every_graded_function_has_at_least_two_mutants(name: str) -> None:
    count = sum(1 for n, _, _ in MUTANTS if n == name)
    assert count >= 2, f"{name} has {count} mutants; every graded function needs at least two"
