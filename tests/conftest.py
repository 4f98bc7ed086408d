"""Part markers: every test carries the marker of each course part it tests, so ``pytest -m m2p5`` runs one part.

The parts and their graded functions come from the lesson index (``tests/lesson_index.py``); a test gets a part's
marker (``m<module>p<part>``) when

- its file is named for the part (``test_m1p2_accumulation.py``), or it is a cell of a lesson notebook in the part's
  folder (``solutions/m1p2-gradient-accumulation/…``, run by nbval);
- its name gives module and lesson numbers (``test_m2_13_14_scale_and_subtract…`` → lessons 13 and 14 of module 2);
- its parameter ids name the part (``m2p5…``, ``m2p5-outer-nesterov``, ``book/m2/p5_…``) or a graded function of the part
  (``update_outer_momentum``);
- or, for the rest, its own code names a graded function of the part.

The markers are registered here, so ``--strict-markers`` accepts them.

Each lesson notebook runs once per session (``tests/run_once.py``, registered here), in a kernel forked from a
warm process (``tests/kernels.py``, registered here).
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from tests import kernels, run_once, suite_time
from tests.lesson_index import lessons
from tests.suite_time import pytest_runtest_logreport, pytest_sessionstart, pytest_terminal_summary  # noqa: F401

PART = re.compile(r"(?<![a-z0-9])(m\d+p\d+)(?![0-9])")
BOOK_PAGE = re.compile(r"\bm(\d+)/p(\d+)_")  # book/m2/p3_param_utilities.md is part m2p3's page
LESSON_NUMBERS = re.compile(r"^test_m(\d+)((?:_\d\d)+)(?:_|$)")


@functools.cache
def _index() -> tuple[dict[str, str], dict[tuple[int, int], str], re.Pattern[str]]:
    """``function → part``, ``(module, lesson number) → part`` and a regex matching any graded function as a word."""
    index = lessons()
    by_function = {lesson.function: lesson.part for lesson in index.values()}
    by_number = {(int(lesson.part[1:].split("p")[0]), int(key.split(".")[1])): lesson.part
                 for key, lesson in index.items()}
    words = re.compile(r"(?<![A-Za-z])(" + "|".join(sorted(map(re.escape, by_function), key=len, reverse=True))
                       + r")(?![A-Za-z0-9_])")
    return by_function, by_number, words


@functools.cache
def _names_by_test(path: Path) -> dict[str, frozenset[str]]:
    """``test function (or Class.method) → identifiers its body uses`` for one test file."""
    out = {}
    tree = ast.parse(path.read_text())
    for node in tree.body:
        members = [(node.name, node)] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else \
            [(f"{node.name}.{m.name}", m) for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))] \
            if isinstance(node, ast.ClassDef) else []
        for name, function in members:
            out[name] = frozenset(n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(function)
                                  if isinstance(n, (ast.Name, ast.Attribute)))
    return out


def parts_of(item: pytest.Item) -> set[str]:
    """The course parts a collected test tests (the module docstring's rules)."""
    by_function, by_number, words = _index()
    known = set(by_function.values())
    path = Path(str(item.fspath))
    named = path.stem + (" " + path.parent.name if path.suffix == ".ipynb" else "")  # a lesson's part folder
    parts = {p for p in PART.findall(named) if p in known}
    function = getattr(item, "originalname", item.name)
    numbered = LESSON_NUMBERS.match(function)
    if numbered:
        module = int(numbered[1])
        parts |= {by_number[(module, int(n))] for n in numbered[2].split("_")[1:] if (module, int(n)) in by_number}
    ids = item.name[len(function):]
    parts |= {p for p in PART.findall(ids) + [f"m{m}p{n}" for m, n in BOOK_PAGE.findall(ids)] if p in known}
    parts |= {by_function[f] for f in words.findall(ids)}
    if not parts and path.suffix == ".py":
        owner = item.cls.__name__ + "." + function if getattr(item, "cls", None) else function
        parts |= {by_function[n] for n in _names_by_test(path).get(owner, ()) if n in by_function}
    return parts


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(run_once, "trainsys-run-each-lesson-once")
    config.pluginmanager.register(kernels, "trainsys-forked-kernels")
    for part in sorted({lesson.part for lesson in lessons().values()}):
        config.addinivalue_line("markers", f"{part}: the tests of course part {part} (tests/conftest.py assigns it)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    suite_time.longest_first(items)
    for item in items:
        for part in sorted(parts_of(item)):
            item.add_marker(getattr(pytest.mark, part))
