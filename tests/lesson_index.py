"""The course's one index of lessons: from a lesson key (``m2p5.22``) to every place the lesson lives.

Nothing here is typed by hand; every entry is derived from the files that already have to say it:

- key, part and graded function: the source notebook's path and its answer cell's ``grade_id``
  (:func:`trainsys.syllabus.lesson_key`);
- release: the same path under ``notebooks/``;
- reference: the ``from trainsys… import …`` that the Checkpoint's ``own_or_reference(fn, reference)`` calls;
- check: the ``check_<function>`` the hidden-test cell calls, and the ``trainsys.grading`` module that defines it
  (read with ``ast``, so building the index imports neither torch nor any check);
- answers: the modules of the one answer registry (``tests/answers``: ``developer``, ``blind``, ``clauses``) that
  write or name the function's answers — read from its records (:func:`answers`);
- tests: the ``tests/test_*.py`` files whose code names the function.

The package holds the reference code and the checks and knows nothing of its tests; this module, beside the
tests, joins the two. ``tests/test_lesson_index.py`` checks that every key reaches all its places, and
``tests/conftest.py`` marks every test with its part (``pytest -m m2p5``).
"""

from __future__ import annotations

import ast
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

from tests.answers import PACKAGES, records
from trainsys.notebook import HIDDEN_CHECK
from trainsys.syllabus import lesson_key

ROOT = Path(__file__).resolve().parents[1]
OWN_OR_REFERENCE = re.compile(r"own_or_reference\((\w+),\s*(\w+)\)")
ANSWER_PACKAGES = tuple(f"tests.answers.{package}" for package in PACKAGES)


@dataclass(frozen=True)
class Lesson:
    """One lesson's places. Paths are relative to the repository root; modules are dotted names."""

    key: str  # m2p5.22
    part: str  # m2p5 (the pytest marker)
    function: str  # update_outer_momentum (the graded function, the answer cell's grade_id)
    source: Path  # solutions/m2p5-outer-nesterov/22_update_outer_momentum.ipynb
    release: Path  # notebooks/m2p5-outer-nesterov/22_update_outer_momentum.ipynb
    reference: str  # trainsys.diloco.outer.update_outer_momentum
    check: str  # trainsys.grading.diloco_optim.check_update_outer_momentum


def _code_cells(nb: dict) -> list[str]:
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def _imported_names(sources: list[str]) -> dict[str, str]:
    """``local name → module.name`` for every ``from trainsys… import`` in the cells that parse as Python."""
    names = {}
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:  # a cell with IPython syntax (%magic) imports nothing we need
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("trainsys"):
                names.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
    return names


@functools.cache
def check_modules(root: Path = ROOT) -> dict[str, str]:
    """``check_<function> → trainsys.grading.<module>``: the top-level ``def check_*`` of every grading module."""
    found = {}
    for path in sorted((root / "src" / "trainsys" / "grading").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("check_"):
                found[node.name] = f"trainsys.grading.{path.stem}"
    return found


def _lesson(path: Path, root: Path) -> Lesson:
    where = path.relative_to(root)
    nb = json.loads(path.read_text())
    answers = [c["metadata"]["nbgrader"]["grade_id"] for c in nb["cells"]
               if c["metadata"].get("nbgrader", {}).get("solution")]
    if len(answers) != 1:
        raise ValueError(f"{where}: expected one answer cell (nbgrader solution), found {answers}")
    function = answers[0]
    code = _code_cells(nb)
    checks = [m[1] for source in code for m in [HIDDEN_CHECK.search(source)] if m]
    if checks != [function]:
        raise ValueError(f"{where}: the hidden-test cell should call check_{function}, calls {checks}")
    calls = [m for source in code for m in OWN_OR_REFERENCE.findall(source) if m[0] == function]
    if len(calls) != 1:
        raise ValueError(f"{where}: expected one own_or_reference({function}, <reference>) call, found {calls}")
    reference = _imported_names(code).get(calls[0][1])
    if reference is None:
        raise ValueError(f"{where}: {calls[0][1]} (the Checkpoint's reference) is not imported from trainsys")
    check_module = check_modules(root).get(f"check_{function}")
    if check_module is None:
        raise ValueError(f"{where}: no trainsys.grading module defines check_{function}")
    key = lesson_key(path)
    return Lesson(key, key.split(".")[0], function, where, Path("notebooks", *where.parts[1:]), reference,
                  f"{check_module}.check_{function}")


@functools.cache
def lessons(root: Path = ROOT) -> dict[str, Lesson]:
    """Every lesson of ``root/solutions``, by key, in course order. Raises ``ValueError`` on a duplicate key,
    or a notebook that does not name its answer, check or reference as the module docstring says."""
    index: dict[str, Lesson] = {}
    for path in sorted((root / "solutions").glob("*/*.ipynb")):
        lesson = _lesson(path, root)
        if lesson.key in index:
            raise ValueError(f"lesson key {lesson.key} is used by {index[lesson.key].source} and {lesson.source}")
        index[lesson.key] = lesson
    return index


@functools.cache
def by_function(root: Path = ROOT) -> dict[str, Lesson]:
    """The same lessons by graded function name (a name is graded by one lesson only)."""
    out: dict[str, Lesson] = {}
    for lesson in lessons(root).values():
        if lesson.function in out:
            raise ValueError(f"{lesson.function} is graded by {out[lesson.function].key} and {lesson.key}")
        out[lesson.function] = lesson
    return out


@functools.cache
def answers() -> dict[str, dict[str, tuple[str, ...]]]:
    """``function → {package: (module, …)}``: the modules of each ``tests.answers`` subpackage that write one of
    the function's answers or name it as a clause witness, in module-name order. Imports the registry."""
    found: dict[str, dict[str, list[str]]] = {}
    for answer in records():
        places = found.setdefault(answer.function, {package: [] for package in ANSWER_PACKAGES})
        for module in (answer.module, *sorted(answer.witnessed_in)):
            modules = places[module.rsplit(".", 1)[0]]
            if module not in modules:
                modules.append(module)
    return {f: {package: tuple(sorted(modules)) for package, modules in places.items()}
            for f, places in sorted(found.items())}


@functools.cache
def _names_in(path: Path) -> frozenset[str]:
    """Every identifier a Python file uses: names, attributes, imported names."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.add(node.name.rsplit(".", 1)[-1])
    return frozenset(names)


def files_naming(function: str, root: Path = ROOT) -> list[Path]:
    """The test files (``tests/test_*.py``) whose code names ``function``, relative to ``root``."""
    return [p.relative_to(root) for p in sorted((root / "tests").glob("test_*.py")) if function in _names_in(p)]


def places(key: str) -> dict[str, object]:
    """Everything about lesson ``key`` in one dictionary: the :class:`Lesson` fields, its answers and its tests.
    Raises ``KeyError`` naming the known keys' range when ``key`` is not a lesson."""
    index = lessons()
    if key not in index:
        raise KeyError(f"key must be a lesson key such as {next(iter(index))}, got {key!r}")
    lesson = index[key]
    return {**lesson.__dict__, "answers": answers().get(lesson.function, {}),
            "tests": files_naming(lesson.function)}
