"""Every answer of the one registry (``tests/answers``) against its hidden check, each checked exactly once.

Per record (id ``<lesson key> <function>: <description>``): a wrong answer is rejected with a message that names
its case (``[<label>…``), at a case its check module's ``CLAUSES`` declares for each clause it breaks; a right
answer passes. Per graded function: the reference passes; every clause of the lesson's contract is declared,
witnessed, and each declared case is where some witness fails; enough answers of each kind. A record's check
runs at most once per session: its outcome is cached, and the per-record and per-function tests read the cache,
so ``pytest -m m2p5`` or ``-k`` runs only what it selects and nothing runs twice. ``OPEN`` records are strict
expected failures. The last test runs what was not selected yet and counts the calls. The cache lives in one
process: under pytest-xdist this file stays on one worker (``--dist loadfile``, as ``make test`` runs it).
"""

from __future__ import annotations

import importlib
import types
from collections import Counter
from pathlib import Path

import pytest

import trainsys.grading as grading
from tests.answers import Answer, Outcome, build_records, check, coverage_problems, existing, problems, records, \
    references
from tests.lesson_index import by_function
from trainsys.grading.clauses import declared_clauses, stated_clauses
from trainsys.syllabus import lesson_key

ROOT = Path(__file__).resolve().parents[1]
RECORDS = records()
DECLARED = declared_clauses()
LESSONS = sorted(ROOT.glob("solutions/*/*.ipynb"))
STATED = dict(stated_clauses(path) for path in LESSONS)
KEYS = {function: lesson.key for function, lesson in by_function().items()}  # test ids start with the lesson key
CHECKS = sorted(n[len("check_"):] for n in grading.__all__ if n.startswith("check_"))
LEAST = {"developer wrong": 2, "blind wrong": 3, "right": 2}  # answers every graded function needs, per kind

_OUTCOMES: dict[tuple[str, str], Outcome] = {}
CALLS: Counter[tuple[str, str]] = Counter()  # (function, description) → calls of its check this session


def outcome(answer: Answer) -> Outcome:
    """The check's outcome for ``answer``, run on first request only."""
    if answer.key not in _OUTCOMES:
        CALLS[answer.key] += 1
        _OUTCOMES[answer.key] = check(answer)
    return _OUTCOMES[answer.key]


def _function_id(function: str) -> str:
    return f"{KEYS.get(function, '?')} {function}"


def _record_param(answer: Answer):
    marks = [pytest.mark.xfail(strict=True, reason=f"OPEN: {answer.open}")] if answer.open else []
    return pytest.param(answer, id=f"{_function_id(answer.function)}: {answer.description}", marks=marks)


@pytest.mark.parametrize("answer", [_record_param(a) for a in RECORDS])
def test_answer_gets_its_verdict(answer: Answer) -> None:
    result = outcome(answer)
    if result.error is not None:
        raise result.error
    found = problems(answer, result, DECLARED.get(answer.function, {}))
    assert not found, "\n".join(found)


@pytest.mark.parametrize("name", CHECKS, ids=[_function_id(n) for n in CHECKS])
def test_reference_passes_its_check(name: str) -> None:
    assert name in references(), f"check_{name} has no developer module (tests/answers/developer) with its mutants"
    reference = getattr(importlib.import_module(references()[name]), name)
    assert "passed" in getattr(grading, f"check_{name}")(reference)


@pytest.mark.parametrize("name", CHECKS, ids=[_function_id(n) for n in CHECKS])
def test_graded_function_has_enough_answers(name: str) -> None:
    mine = [a for a in RECORDS if a.function == name]
    counts = {"developer wrong": sum(1 for a in mine if a.module.startswith("tests.answers.developer.")),
              "blind wrong": sum(1 for a in mine if a.origin == "blind" and a.verdict == "wrong"),
              "right": sum(1 for a in mine if a.verdict == "right")}
    few = {kind: n for kind, n in counts.items() if n < LEAST[kind]}
    assert not few, f"{name} has too few answers: {few}; every graded function needs at least {LEAST}"


@pytest.mark.parametrize("lesson", LESSONS, ids=[f"{lesson_key(p)} {p.stem[3:]}" for p in LESSONS])
def test_every_stated_clause_is_declared(lesson: Path) -> None:
    function, stated = stated_clauses(lesson)
    declared = DECLARED.get(function, {})
    missing = [key for key in stated if key not in declared]
    unstated = [key for key in declared if key not in stated]
    assert not missing, f"{function}: clauses stated in {lesson.name} with no case in CLAUSES: {missing}"
    assert not unstated, f"{function}: CLAUSES declares clauses {lesson.name} does not state: {unstated}"


def test_no_declaration_or_answer_without_a_lesson() -> None:
    assert not sorted(set(DECLARED) - set(STATED)), "CLAUSES for functions no lesson states a contract for"
    witnessed = {a.function for a in RECORDS if a.clauses}
    assert not sorted(witnessed - set(STATED)), "witnesses for functions no lesson states a contract for"
    assert not sorted({a.function for a in RECORDS} - set(CHECKS)), "answers to functions trainsys.grading does not check"


@pytest.mark.parametrize("function", sorted(STATED), ids=[_function_id(f) for f in sorted(STATED)])
def test_every_clause_has_a_witness_failing_at_its_cases(function: str) -> None:
    witnesses = {a: outcome(a) for a in RECORDS if a.function == function and a.clauses}
    found = coverage_problems(function, DECLARED.get(function, {}), witnesses)
    assert not found, "\n".join(found)


def test_registry_yields_each_answer_once() -> None:
    keys = [a.key for a in RECORDS]
    assert len(keys) == len(set(keys)), [k for k, n in Counter(keys).items() if n > 1]
    assert all(a.verdict in ("wrong", "right") and a.origin in ("developer", "blind") for a in RECORDS)
    assert all(not a.clauses or a.verdict == "wrong" for a in RECORDS), "a right answer carries a clause"
    # a witness named with existing(...) is the answer it names: its clause is on that record, written once
    named = [a for a in RECORDS if a.clauses and not a.module.startswith("tests.answers.clauses.")]
    assert named, "no clause witness names an existing answer; existing(...) is how the clause modules do so"
    for answer in named:
        assert existing(answer.function, answer.description) == (answer.description, answer.fn)
        assert answer.witnessed_in and all(m.startswith("tests.answers.clauses.") for m in answer.witnessed_in)
    with pytest.raises(LookupError, match="'no answer is described so'"):
        existing("update_outer_momentum", "no answer is described so")


def _module(name: str, **tables) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(tables)
    return module


def test_build_records_merges_witnesses_and_refuses_duplicates() -> None:
    def one(x):  # distinct answers for the fake modules
        return x

    def two(x):
        return x

    def three(x):
        return x

    developer = _module("tests.answers.developer.fake", REFERENCE="trainsys.fake",
                        MUTANTS={"f": [("wrong one", one)]})
    blind = _module("tests.answers.blind.m9p9", MUTANTS={"f": [("wrong two", two)]},
                    ALTERNATIVES={"f": [("right one", three)]}, OPEN={"f": {"wrong two": "no case yet"}},
                    DISPUTED={"f": [("allowed", "the contract allows it")]})
    written = (("in place", one), ("in place", one))  # the same written witness under two clauses: one record
    clauses = _module("tests.answers.clauses.fake", WITNESSES={"f": {
        "a": [("wrong one", one), written[0]], "b": [("wrong one", one), written[1]]}})
    built = {a.description: a for a in build_records([developer], [blind], [clauses])}
    assert sorted(built) == ["in place", "right one", "wrong one", "wrong two"]  # DISPUTED is kept out
    assert built["wrong one"].clauses == {"a", "b"} and built["wrong one"].module == developer.__name__
    assert built["wrong one"].witnessed_in == {clauses.__name__}
    assert built["in place"].clauses == {"a", "b"} and built["in place"].origin == "developer"
    assert built["in place"].module == clauses.__name__
    assert built["wrong two"].open == "no case yet" and built["right one"].verdict == "right"

    twice = _module("tests.answers.blind.m9p8", MUTANTS={"f": [("wrong one", two)]})
    with pytest.raises(ValueError, match="tests.answers.developer.fake.*tests.answers.blind.m9p8"):
        build_records([developer], [twice], [])
    clash = _module("tests.answers.clauses.clash", WITNESSES={"f": {"a": [("wrong one", two)]}})
    with pytest.raises(ValueError, match="tests.answers.developer.fake.*tests.answers.clauses.clash"):
        build_records([developer], [], [clash])
    right = _module("tests.answers.clauses.right", WITNESSES={"f": {"a": [("right one", three)]}})
    with pytest.raises(ValueError, match="right answer"):
        build_records([], [blind], [right])
    stale = _module("tests.answers.blind.m9p7", MUTANTS={}, OPEN={"f": {"gone": "reason"}})
    with pytest.raises(ValueError, match=r"m9p7\.OPEN names answers the module does not have: \[\('f', 'gone'\)\]"):
        build_records([], [stale], [])
    with pytest.raises(TypeError, match=r"fake\.MUTANTS\['f'\]: expected \(non-empty description, callable\)"):
        build_records([_module("tests.answers.developer.fake", MUTANTS={"f": [("no function", None)]})], [], [])


def test_every_record_checked_exactly_once() -> None:
    """Runs the records no earlier test selected, then: each record's check ran once, and no other call."""
    for answer in RECORDS:
        outcome(answer)
    assert len(CALLS) == len(RECORDS), f"{len(CALLS)} answers checked, the registry holds {len(RECORDS)}"
    twice = sorted(key for key, n in CALLS.items() if n != 1)
    assert not twice, f"answers checked more than once: {twice[:5]}"
    print(f"{len(RECORDS)} records, {sum(CALLS.values())} check calls")
