"""Witnesses: for each clause of each lesson's contract, wrong answers that break that clause.

``tests/clauses/<check module>.py`` maps a graded function to its clauses (the keys of the check
module's ``CLAUSES``) and each clause to a list of ``(description, wrong answer)`` pairs. A witness
must fail the check at one of the cases the check declares for that clause, and every declared case
must be where at least one witness fails: so each declared case is shown to catch its clause being
broken. Witnesses already written as mutants (``tests/mutants``, ``tests/redteam``) are named with
:func:`existing` rather than copied.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

Witness = tuple[str, Callable[..., Any]]


def _mutant_modules() -> list:
    modules = []
    for package in ("tests.mutants", "tests.redteam"):
        root = importlib.import_module(package)
        modules += [importlib.import_module(f"{package}.{m.name}") for m in pkgutil.iter_modules(root.__path__)
                    if not m.name.startswith("_")]
    return modules


def existing(function: str, description: str) -> Witness:
    """The mutant of ``function`` (developers' or red team's) whose description starts with ``description``.

    Raises ``LookupError`` when none or more than one matches, so a renamed mutant cannot silently
    drop a witness.
    """
    found = [(desc, fn) for module in _mutant_modules()
             for desc, fn in getattr(module, "MUTANTS", {}).get(function, [])
             if desc.startswith(description)]
    if len(found) != 1:
        raise LookupError(f"existing({function!r}, {description!r}): expected one mutant whose description starts "
                          f"so, found {len(found)}: {[d for d, _ in found][:5]}")
    return found[0]


def all_witnesses() -> dict[str, dict[str, list[Witness]]]:
    """Every module's ``WITNESSES``, merged: function → clause key → witnesses."""
    merged: dict[str, dict[str, list[Witness]]] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for function, clauses in module.WITNESSES.items():
            if function in merged:
                raise ValueError(f"WITNESSES[{function!r}] appears in two modules of tests.clauses")
            merged[function] = clauses
    return merged


def clause_problems(function: str, clause: str, cases: tuple[str, ...], witnesses: list[Witness]) -> list[str]:
    """What is wrong with ``clause`` of ``function``'s check: empty list when every witness fails the check
    at one of ``cases`` and every one of ``cases`` is where some witness fails."""
    import trainsys.grading as grading
    from trainsys.grading.clauses import failing_case

    if not witnesses:
        return [f"{function} · {clause}: no witness (a wrong answer that breaks this clause)"]
    check = getattr(grading, f"check_{function}")
    problems, hit = [], set()
    for description, wrong in witnesses:
        try:
            check(wrong)
        except AssertionError as failure:
            message = str(failure)
            label = failing_case(message, cases)
            if label is None:
                problems.append(f"{function} · {clause}: witness {description!r} failed at a case not declared for "
                                f"this clause: {message[:200]}")
            hit.add(label)
        else:
            problems.append(f"{function} · {clause}: witness {description!r} passed the check")
    unshown = [c for c in cases if c not in hit]
    if unshown:
        problems.append(f"{function} · {clause}: no witness fails at the declared case(s) {unshown}")
    return problems
