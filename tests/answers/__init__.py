"""The one registry of answers to the graded functions: every wrong and right answer, as :class:`Answer` records.

A record is one answer to one graded function ``f`` (checked by ``trainsys.grading.check_<f>``):

- ``function``, ``description``: the graded function and a one-line account of the answer; the pair is unique
  across the registry (two records with the same pair are an error naming both modules);
- ``fn``: the answer itself, called by the check as a student's function would be;
- ``verdict``: ``"wrong"`` (the check must raise ``AssertionError`` whose message starts ``[<case label>``) or
  ``"right"`` (the check must pass it);
- ``clauses``: the keys of the check module's ``CLAUSES[f]`` that this wrong answer breaks (empty when none is
  declared); it must fail at a case declared for each of them;
- ``origin``: ``"developer"`` (written knowing the reference and the check) or ``"blind"`` (written from the
  release notebooks alone: ``notebooks/<part>/*.ipynb``, never the checks nor the reference);
- ``module``: the dotted module it is written in; ``witnessed_in``: the clause modules that name it as a witness;
- ``open``: why the check does not catch it yet, or None. An open record is a strict expected failure: the day
  the check catches it, the test fails until the entry leaves ``OPEN``.

:func:`records` is the only loader (cached; ``tests/test_answers.py``, ``tests/bench.py`` and
``tests/lesson_index.py`` read it). It walks three subpackages, each module (a name without a leading ``_``)
written in its own format:

``tests/answers/developer/<mutants>.py`` — wrong answers by the developers, one module per reference module::

    REFERENCE = "trainsys.diloco.outer"          # the module holding the reference implementations
    MUTANTS = {"update_outer_momentum": [("forgets the momentum term", _forgets_momentum), ...]}

``tests/answers/blind/<part>.py`` (``m2p5.py``) — the blind red team's answers, one module per course part::

    MUTANTS = {"update_outer_momentum": [("adds lr * delta instead of subtracting", _wrong_sign), ...]}
    ALTERNATIVES = {"update_outer_momentum": [("one np.add per leaf, another order", _alt_add), ...]}  # right
    OPEN = {"update_outer_momentum": {"adds lr * delta instead of subtracting": "no case has lr != 1 yet"}}
    DISPUTED = {"update_outer_momentum": [("description", "why the lesson's contract allows it")]}

  ``DISPUTED`` answers are kept out of the registry: the lesson's contract allows them, so they are neither
  wrong nor checked to be right; the table records the judgement and its reason.

``tests/answers/clauses/<checks>.py`` (named for the check module, ``diloco_optim.py``) — per clause of the
lesson's contract, wrong answers that break it::

    from tests.answers.clauses import existing
    WITNESSES = {"update_outer_momentum": {
        "mutation": [("writes the new buffer into state in place", _mutates_state)],       # a new wrong record
        "sign": [existing("update_outer_momentum", "adds lr * delta")],                     # clause added to it
    }}

  A witness given by ``existing(function, description_prefix)`` is a mutant already written in ``developer`` or
  ``blind``: it adds its clause to THAT record (no second record, no second run). A witness written in place is
  a new wrong record (origin ``developer``, module the clause module) carrying its clause; the same written
  witness under two clauses is one record with both.

A new lesson's answers: at least two developer mutants in the ``developer`` module of its reference module (a
new module ``developer/<mutants>.py`` with ``REFERENCE`` for a new reference module); at least three blind wrong
answers and two right ones in ``blind/<part>.py``, written from the release notebook only; a witness for every
clause of ``CLAUSES[f]`` in ``clauses/<checks>.py``. ``tests/test_answers.py`` then checks every record once.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

PACKAGES = ("developer", "blind", "clauses")  # the subpackages of tests.answers, in loading order


@dataclass(frozen=True)
class Answer:
    """One answer to a graded function (the module docstring says what each field means)."""

    function: str
    description: str
    fn: Callable[..., Any] = dataclasses.field(repr=False, compare=False)
    verdict: Literal["wrong", "right"]
    clauses: frozenset[str]
    origin: Literal["developer", "blind"]
    module: str
    open: str | None = None
    witnessed_in: frozenset[str] = frozenset()

    @property
    def key(self) -> tuple[str, str]:
        """``(function, description)``: unique across the registry."""
        return self.function, self.description


@dataclass(frozen=True)
class Outcome:
    """What one call of ``check_<function>(answer)`` did: ``passed`` (it returned ``message``), or it raised
    ``AssertionError`` (``message`` its text, ``error`` None), or it raised anything else (``error``)."""

    passed: bool
    message: str
    error: BaseException | None = None


def _modules(package: str) -> list[ModuleType]:
    """The modules of ``tests.answers.<package>`` whose names do not start with ``_``, sorted by name."""
    root = importlib.import_module(f"{__name__}.{package}")
    return [importlib.import_module(f"{root.__name__}.{info.name}")
            for info in sorted(pkgutil.iter_modules(root.__path__), key=lambda i: i.name)
            if not info.name.startswith("_")]


def _table(module: ModuleType, name: str) -> Mapping[str, Any]:
    table = getattr(module, name, {})
    if not isinstance(table, Mapping):
        raise TypeError(f"{module.__name__}.{name} must be a dict keyed by graded function, got {type(table).__name__}")
    return table


def _pairs(module: ModuleType, table: str, function: str, entries: Any) -> list[tuple[str, Callable[..., Any]]]:
    """``entries`` checked to be a list of ``(description, callable)`` pairs."""
    where = f"{module.__name__}.{table}[{function!r}]"
    if not isinstance(entries, (list, tuple)):
        raise TypeError(f"{where} must be a list of (description, fn) pairs, got {type(entries).__name__}")
    for entry in entries:
        if (not isinstance(entry, tuple) or len(entry) != 2 or not isinstance(entry[0], str) or not entry[0]
                or not callable(entry[1])):
            raise TypeError(f"{where}: expected (non-empty description, callable) pairs, got {entry!r:.120}")
    return list(entries)


class _Builder:
    """Collects records in loading order and refuses a second record for a ``(function, description)``."""

    def __init__(self) -> None:
        self.by_key: dict[tuple[str, str], Answer] = {}

    def add(self, answer: Answer) -> None:
        if answer.key in self.by_key:
            first = self.by_key[answer.key]
            raise ValueError(f"two answers to {answer.function} are described {answer.description!r}: one in "
                             f"{first.module}, one in {answer.module}; descriptions must be unique per function")
        self.by_key[answer.key] = answer

    def written(self, developer: Iterable[ModuleType], blind: Iterable[ModuleType]) -> None:
        for module in developer:
            for function, entries in _table(module, "MUTANTS").items():
                for description, fn in _pairs(module, "MUTANTS", function, entries):
                    self.add(Answer(function, description, fn, "wrong", frozenset(), "developer", module.__name__))
        for module in blind:
            open_ = _table(module, "OPEN")
            found = set()
            for table, verdict in (("MUTANTS", "wrong"), ("ALTERNATIVES", "right")):
                for function, entries in _table(module, table).items():
                    for description, fn in _pairs(module, table, function, entries):
                        reason = open_.get(function, {}).get(description)
                        found.add((function, description))
                        self.add(Answer(function, description, fn, verdict, frozenset(), "blind", module.__name__,
                                        reason))
            stale = sorted((f, d) for f, reasons in open_.items() for d in reasons if (f, d) not in found)
            if stale:
                raise ValueError(f"{module.__name__}.OPEN names answers the module does not have: {stale}")

    def witnesses(self, clauses: Iterable[ModuleType]) -> None:
        for module in clauses:
            for function, by_clause in _table(module, "WITNESSES").items():
                if not isinstance(by_clause, Mapping):
                    raise TypeError(f"{module.__name__}.WITNESSES[{function!r}] must map clause keys to witnesses, "
                                    f"got {type(by_clause).__name__}")
                for clause, entries in by_clause.items():
                    for description, fn in _pairs(module, f"WITNESSES[{function!r}]", clause, entries):
                        self._witness(module.__name__, function, clause, description, fn)

    def _witness(self, module: str, function: str, clause: str, description: str, fn: Callable[..., Any]) -> None:
        known = self.by_key.get((function, description))
        if known is None:
            self.add(Answer(function, description, fn, "wrong", frozenset({clause}), "developer", module,
                            witnessed_in=frozenset({module})))
            return
        if known.fn is not fn:
            raise ValueError(f"two answers to {function} are described {description!r}: one in {known.module}, one "
                             f"in {module} (a witness of clause {clause!r}); name the first with existing(...) or "
                             f"describe the new one differently")
        if known.verdict != "wrong":
            raise ValueError(f"{module}: the witness {description!r} of {function}'s clause {clause!r} is a right "
                             f"answer in {known.module}; a witness must be a wrong answer")
        self.by_key[known.key] = dataclasses.replace(known, clauses=known.clauses | {clause},
                                                     witnessed_in=known.witnessed_in | {module})


def build_records(developer: Iterable[ModuleType], blind: Iterable[ModuleType],
                  clauses: Iterable[ModuleType]) -> tuple[Answer, ...]:
    """The records of the given modules (each in its subpackage's format), developer then blind then clause
    witnesses, each in its module's order. Raises ``ValueError`` on two records for one
    ``(function, description)`` (naming both modules), a stale ``OPEN`` entry or a witness that is a right
    answer, and ``TypeError`` on a table that is not in its format."""
    builder = _Builder()
    builder.written(developer, blind)
    builder.witnesses(clauses)
    return tuple(builder.by_key.values())


@functools.cache
def _written() -> dict[tuple[str, str], Answer]:
    """The developer and blind records, without clauses (what :func:`existing` looks up while ``clauses``
    modules are being imported)."""
    builder = _Builder()
    builder.written(_modules("developer"), _modules("blind"))
    return builder.by_key


@functools.cache
def records() -> tuple[Answer, ...]:
    """Every answer in ``tests/answers`` (the module docstring), once. Imports every answers module."""
    return build_records(_modules("developer"), _modules("blind"), _modules("clauses"))


@functools.cache
def references() -> dict[str, str]:
    """``function → module`` of its reference implementation: the ``REFERENCE`` of the developer module that
    holds the function's mutants."""
    found: dict[str, str] = {}
    for module in _modules("developer"):
        for function in _table(module, "MUTANTS"):
            found[function] = module.REFERENCE
    return found


def existing(function: str, description: str) -> tuple[str, Callable[..., Any]]:
    """The one wrong answer to ``function`` (developers' or blind) whose description starts with ``description``,
    as ``(description, fn)``: a clause witness that names an answer already written.

    Raises ``LookupError`` when none or more than one matches, so a renamed answer cannot silently drop a witness.
    """
    found = [(a.description, a.fn) for a in _written().values()
             if a.function == function and a.verdict == "wrong" and a.description.startswith(description)]
    if len(found) != 1:
        raise LookupError(f"existing({function!r}, {description!r}): expected one wrong answer whose description "
                          f"starts so, found {len(found)}: {[d for d, _ in found][:5]}")
    return found[0]


def check(answer: Answer) -> Outcome:
    """Run ``trainsys.grading.check_<answer.function>`` on ``answer.fn`` once and say what it did."""
    import trainsys.grading as grading

    run = getattr(grading, f"check_{answer.function}")
    try:
        message = run(answer.fn)
    except AssertionError as failure:
        return Outcome(False, str(failure))
    except Exception as error:  # noqa: BLE001 - reported by the caller as the answer's error
        return Outcome(False, f"{type(error).__name__}: {error}", error)
    return Outcome(True, str(message))


def problems(answer: Answer, outcome: Outcome, declared: Mapping[str, tuple[str, ...]]) -> list[str]:
    """What is wrong with ``outcome`` for ``answer`` (empty when nothing): a wrong answer must fail with a message
    naming its case (``[...``), at a case of ``declared[clause]`` for each of its clauses; a right one must pass.
    ``declared`` is the check module's ``CLAUSES[answer.function]``. An ``outcome.error`` is reported, not raised."""
    from trainsys.grading.clauses import failing_case

    name = f"{answer.function}: {answer.description!r}"
    if outcome.error is not None:
        return [f"{name}: the check raised {outcome.message[:300]} instead of AssertionError"]
    if answer.verdict == "right":
        return [] if outcome.passed and "passed" in outcome.message else \
            [f"{name} is right but the check rejected it: {outcome.message[:300]}"]
    if outcome.passed:
        return [f"{name} is wrong but the check passed it"]
    if not outcome.message.startswith("["):
        return [f"{name}: the failure message should name its case: {outcome.message[:300]}"]
    return [f"{name} breaks clause {clause!r} but failed at a case not declared for it: {outcome.message[:200]}"
            for clause in sorted(answer.clauses) if failing_case(outcome.message, declared.get(clause, ())) is None]


def clause_problems(function: str, clause: str, cases: tuple[str, ...], witnesses: Mapping[Answer, Outcome]) -> list[str]:
    """What is wrong with ``clause`` of ``function``'s check (empty when nothing): ``witnesses``, the check's
    outcomes for the records carrying ``clause``, must be non-empty, each fail at one of ``cases`` (the check
    module's ``CLAUSES[function][clause]``), and every one of ``cases`` must be where some witness fails."""
    from trainsys.grading.clauses import failing_case

    if not witnesses:
        return [f"{function} · {clause}: no witness (a wrong answer that breaks this clause)"]
    out, hit = [], set()
    for answer, outcome in witnesses.items():
        label = None if outcome.passed or outcome.error else failing_case(outcome.message, cases)
        if label is None:
            out.append(f"{function} · {clause}: witness {answer.description!r} "
                       f"{'passed the check' if outcome.passed else 'failed at a case not declared for this clause'}"
                       f"{'' if outcome.passed else ': ' + outcome.message[:200]}")
        hit.add(label)
    unshown = [c for c in cases if c not in hit]
    if unshown:
        out.append(f"{function} · {clause}: no witness fails at the declared case(s) {unshown}")
    return out


def coverage_problems(function: str, declared: Mapping[str, tuple[str, ...]],
                      outcomes: Mapping[Answer, Outcome]) -> list[str]:
    """What is wrong with ``function``'s clause coverage (empty when nothing): no witness carries a clause
    ``declared`` (its check module's ``CLAUSES[function]``) does not have, and :func:`clause_problems` of each
    declared clause. ``outcomes``: the check's outcome for (at least) each of ``function``'s witnesses."""
    mine = {a: o for a, o in outcomes.items() if a.function == function and a.clauses}
    stray = sorted({c for a in mine for c in a.clauses} - set(declared))
    out = [f"{function}: witnesses for clauses CLAUSES does not declare: {stray}"] if stray else []
    for clause, cases in declared.items():
        out += clause_problems(function, clause, cases, {a: o for a, o in mine.items() if clause in a.clauses})
    return out
