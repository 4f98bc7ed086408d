"""Every clause of every lesson's contract is enforced by a named case of its check.

The lesson states the clauses (bold labels in its Concepts section, read by
``trainsys.grading.clauses.stated_clauses``); the check module declares in ``CLAUSES`` the cases that
enforce each one; ``tests/clauses`` holds, per clause, wrong answers that break it, and each must fail
the check at a declared case of that clause.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clauses import all_witnesses, clause_problems
from trainsys.syllabus import lesson_key
from trainsys.grading.clauses import declared_clauses, stated_clauses

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted(ROOT.glob("solutions/*/*.ipynb"))
STATED = dict(stated_clauses(path) for path in LESSONS)
DECLARED = declared_clauses()
WITNESSES = all_witnesses()


@pytest.mark.parametrize("lesson", LESSONS, ids=[f"{lesson_key(p)} {p.stem[3:]}" for p in LESSONS])
def test_every_stated_clause_is_declared(lesson: Path) -> None:
    function, stated = stated_clauses(lesson)
    declared = DECLARED.get(function, {})
    missing = [key for key in stated if key not in declared]
    unstated = [key for key in declared if key not in stated]
    assert not missing, f"{function}: clauses stated in {lesson.name} with no case in CLAUSES: {missing}"
    assert not unstated, f"{function}: CLAUSES declares clauses {lesson.name} does not state: {unstated}"


def test_no_declaration_without_a_lesson() -> None:
    assert not sorted(set(DECLARED) - set(STATED)), "CLAUSES for functions no lesson states a contract for"
    assert not sorted(set(WITNESSES) - set(STATED)), "witnesses for functions no lesson states a contract for"


@pytest.mark.parametrize("function", sorted(STATED))
def test_every_clause_has_a_witness_failing_at_its_cases(function: str) -> None:
    declared = DECLARED.get(function, {})
    witnesses = WITNESSES.get(function, {})
    stray = sorted(set(witnesses) - set(declared))
    assert not stray, f"{function}: witnesses for clauses CLAUSES does not declare: {stray}"
    problems = [p for clause, cases in declared.items()
                for p in clause_problems(function, clause, cases, witnesses.get(clause, []))]
    assert not problems, "\n".join(problems)
