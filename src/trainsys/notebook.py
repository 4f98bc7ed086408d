"""A lesson notebook's format: the one module that knows nbgrader's cells, grade ids and markers.

Every lesson is one nbgrader notebook, authored under ``solutions/`` (the *source*) and released under
``notebooks/`` by ``nbgrader generate_assignment`` (the *release*). Its graded cells are:

============  ===========================  ==================================================================
cell          nbgrader metadata            source
============  ===========================  ==================================================================
setup         ``grade_id`` ``setup``,      the lesson's imports (earlier lessons' functions from the package)
              locked, not graded
answer        ``solution``, ``grade_id``   the graded function; the source holds one :data:`BEGIN_SOLUTION` …
              = the function's name        :data:`END_SOLUTION` region, which the release replaces by a stub
visible tests ``grade``, ``grade_id``      tests the student reads and runs
              ``test_<function>_visible``
hidden tests  ``grade``, ``grade_id``      a :data:`BEGIN_HIDDEN` … :data:`END_HIDDEN` region calling
              ``test_<function>_hidden``   ``check_<function>(<function>)``; the release has the region removed
============  ===========================  ==================================================================

A *test cell* is a graded cell that is not an answer. It is **hidden** when its source holds the hidden-test
marker, or — in a release, where nbgrader removed the region — when its grade id ends in
:data:`HIDDEN_SUFFIX`; every other test cell is **visible** (:func:`is_hidden_test`, :func:`is_visible_test`).

Every function here takes a cell either as an ``nbformat.NotebookNode`` or as the raw JSON ``dict`` of a
notebook file (whose ``source`` may be a list of lines): submissions are read as raw JSON before nbformat
has validated them, so a cell's metadata may be anything and is never trusted to be a ``dict``. A cell that
is not a mapping raises ``TypeError`` naming the argument.

The cell builders at the end (:func:`setup_cell`, :func:`answer_cell`, :func:`visible_tests_cell`,
:func:`hidden_tests_cell`, :func:`write_lesson`) give each cell the metadata above, so no author writes
nbgrader JSON by hand.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from trainsys._validation import describe

# --------------------------------------------------------------------------------------------------
# Markers and grade ids
# --------------------------------------------------------------------------------------------------

BEGIN_SOLUTION = "### BEGIN SOLUTION"
END_SOLUTION = "### END SOLUTION"
BEGIN_HIDDEN = "### BEGIN HIDDEN TESTS"
END_HIDDEN = "### END HIDDEN TESTS"

SOLUTION_REGION = re.compile(r"### BEGIN SOLUTION(.*?)### END SOLUTION", re.S)
"""The solution region of an answer cell; group 1 is the reference answer between the markers."""
HIDDEN_REGION = re.compile(r"### BEGIN HIDDEN TESTS.*?(?:### END HIDDEN TESTS[^\n]*|\Z)", re.S)
"""A hidden-test region up to its end marker's line, or to the end of the cell when that marker is missing."""
HIDDEN_CHECK = re.compile(r"### BEGIN HIDDEN TESTS.*?\bcheck_(\w+)\(", re.S)
"""The first ``check_<function>(`` call inside a hidden-test region; group 1 is ``<function>``."""
CHECK_CALL = re.compile(r"check_(\w+)\((\w+)\)")
"""A hidden-test call ``check_<function>(<name>)``; group 2 is the name the student's function is bound to."""

SETUP_ID = "setup"
VISIBLE_SUFFIX = "_visible"
HIDDEN_SUFFIX = "_hidden"
SCHEMA_VERSION = 3  # nbgrader's cell metadata schema


def visible_test_id(function: str) -> str:
    """The grade id of ``function``'s visible test cell: ``test_<function>_visible``."""
    return f"test_{_name(function, 'function')}{VISIBLE_SUFFIX}"


def hidden_test_id(function: str) -> str:
    """The grade id of ``function``'s hidden test cell: ``test_<function>_hidden``."""
    return f"test_{_name(function, 'function')}{HIDDEN_SUFFIX}"


def _name(value: object, argument: str) -> str:
    if not isinstance(value, str) or not value.isidentifier():
        raise ValueError(f"{argument} must be a Python identifier (the graded function's name), got {describe(value)}")
    return value


# --------------------------------------------------------------------------------------------------
# Reading cells (NotebookNode or raw JSON)
# --------------------------------------------------------------------------------------------------


def _cell(cell: object) -> Mapping:
    if not isinstance(cell, Mapping):
        raise TypeError(f"cell must be a notebook cell (an nbformat NotebookNode or a JSON dict), got {describe(cell)}")
    return cell


def source(cell: Mapping) -> str:
    """The cell's source as one string (raw JSON stores it as a list of lines); ``""`` when it has none."""
    text = _cell(cell).get("source", "")
    return "".join(text) if isinstance(text, list) else str(text)


def is_code(cell: Mapping) -> bool:
    """Whether the cell is a code cell."""
    return _cell(cell).get("cell_type") == "code"


def has_nbgrader(cell: Mapping) -> bool:
    """Whether the cell carries nbgrader metadata (a ``dict`` under ``metadata["nbgrader"]``)."""
    metadata = _cell(cell).get("metadata")
    return isinstance(metadata, Mapping) and isinstance(metadata.get("nbgrader"), Mapping)


def nbgrader(cell: Mapping) -> Mapping:
    """The cell's nbgrader metadata (the live mapping, not a copy); an empty ``dict`` when the cell has none
    or when its metadata or nbgrader entry is not a mapping (hostile JSON)."""
    metadata = _cell(cell).get("metadata")
    meta = metadata.get("nbgrader") if isinstance(metadata, Mapping) else None
    return meta if isinstance(meta, Mapping) else {}


def drop_nbgrader(cell: Mapping) -> None:
    """Remove the cell's nbgrader entry (it becomes an ordinary cell); nothing when it has none."""
    metadata = _cell(cell).get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("nbgrader", None)


def grade_id(cell: Mapping) -> Any:
    """The cell's nbgrader grade id as stored (a string in a valid notebook; hostile JSON may hold anything),
    ``None`` when it has none."""
    return nbgrader(cell).get("grade_id")


def is_answer(cell: Mapping) -> bool:
    """Whether the cell is an answer (nbgrader ``solution``) cell."""
    return bool(nbgrader(cell).get("solution"))


def is_graded(cell: Mapping) -> bool:
    """Whether nbgrader scores the cell (``grade``)."""
    return bool(nbgrader(cell).get("grade"))


def is_setup(cell: Mapping) -> bool:
    """Whether the cell is the lesson's setup cell (grade id :data:`SETUP_ID`)."""
    return grade_id(cell) == SETUP_ID


def has_hidden_region(text: str) -> bool:
    """Whether ``text`` (a cell's source) holds the hidden-test marker."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a cell's source (str), got {describe(text)}")
    return BEGIN_HIDDEN in text


def is_test(cell: Mapping) -> bool:
    """Whether the cell is a test cell: graded, and not an answer."""
    return is_graded(cell) and not is_answer(cell)


def is_hidden_test(cell: Mapping) -> bool:
    """Whether the cell is a hidden-test cell: a test cell holding the hidden-test marker, or one whose grade id
    ends in :data:`HIDDEN_SUFFIX` (a release, where nbgrader removed the region)."""
    if not is_test(cell):
        return False
    ident = grade_id(cell)
    return has_hidden_region(source(cell)) or (isinstance(ident, str) and ident.endswith(HIDDEN_SUFFIX))


def is_visible_test(cell: Mapping) -> bool:
    """Whether the cell is a visible-test cell: a test cell that is not hidden (:func:`is_hidden_test`)."""
    return is_test(cell) and not is_hidden_test(cell)


def cells(nb: Mapping) -> list:
    """The notebook's cells that are mappings (raw JSON may hold anything in its cell list).
    Raises ``ValueError`` when ``nb`` has no cell list, ``TypeError`` when it is not a notebook mapping."""
    if not isinstance(nb, Mapping):
        raise TypeError(f"nb must be a notebook (an nbformat NotebookNode or a JSON dict), got {describe(nb)}")
    found = nb.get("cells", [])
    if not isinstance(found, list):
        raise ValueError(f"nb must hold a list of cells under 'cells', got {describe(found)}")
    return [cell for cell in found if isinstance(cell, Mapping)]


def code_cells(nb: Mapping) -> list:
    """The notebook's code cells, in order (see :func:`cells`)."""
    return [cell for cell in cells(nb) if is_code(cell)]


def answer_sources(nb: Mapping) -> dict[str, str]:
    """``grade_id → source`` of the notebook's answer cells (in a source notebook: the reference solutions)."""
    return {grade_id(cell): source(cell) for cell in cells(nb) if is_answer(cell)}


def replace_sources(nb: Mapping, by_grade_id: Mapping[str, str]) -> int:
    """Set the source of every cell whose grade id is a key of ``by_grade_id`` to its value (a submission's
    answers in a release); return how many cells changed. ``nb`` is changed in place."""
    if not isinstance(by_grade_id, Mapping):
        raise TypeError(f"by_grade_id must map grade ids to cell sources, got {describe(by_grade_id)}")
    changed = 0
    for cell in cells(nb):
        ident = grade_id(cell)
        if isinstance(ident, str) and ident in by_grade_id:
            cell["source"] = by_grade_id[ident]
            changed += 1
    return changed


def solution_body(text: str) -> str | None:
    """The text between an answer cell's solution markers; ``None`` when it has no solution region."""
    if not isinstance(text, str):
        raise TypeError(f"text must be an answer cell's source (str), got {describe(text)}")
    match = SOLUTION_REGION.search(text)
    return match.group(1) if match else None


def strip_hidden(text: str, notice: str) -> str:
    """``text`` with every hidden-test region (:data:`HIDDEN_REGION`) replaced by the line ``notice``."""
    if not isinstance(text, str) or not isinstance(notice, str):
        raise TypeError(f"text and notice must be str, got {describe(text)} and {describe(notice)}")
    return HIDDEN_REGION.sub(notice, text)


def hidden_check(text: str) -> str | None:
    """The function whose ``check_<function>(`` the hidden-test region of ``text`` calls first; ``None`` if none."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a hidden-test cell's source (str), got {describe(text)}")
    match = HIDDEN_CHECK.search(text)
    return match.group(1) if match else None


# --------------------------------------------------------------------------------------------------
# Cell builders (lesson authoring: ``make new-lesson``)
# --------------------------------------------------------------------------------------------------


def _metadata(ident: str, *, grade: bool, solution: bool, locked: bool, points: int | None = None) -> dict:
    meta = {"grade": grade, "grade_id": ident, "locked": locked, "schema_version": SCHEMA_VERSION,
            "solution": solution, "task": False}
    if points is not None:
        if isinstance(points, bool) or not isinstance(points, int) or points < 0:
            raise ValueError(f"points must be an integer >= 0, got {describe(points)}")
        meta["points"] = points
    return meta


def _text(value: object, argument: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{argument} must be str, got {describe(value)}")
    return value.strip("\n")


def markdown_cell(text: str) -> nbformat.NotebookNode:
    """A prose cell (MyST markdown, mathematics in ``$…$`` and ``$$…$$``)."""
    return new_markdown_cell(_text(text, "text"))


def code_cell(text: str, tags: Sequence[str] = ()) -> nbformat.NotebookNode:
    """An ordinary code cell (a Checkpoint's measurement or figure), with the myst-nb ``tags`` given."""
    cell = new_code_cell(_text(text, "text"))
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def setup_cell(text: str) -> nbformat.NotebookNode:
    """The locked setup cell (grade id :data:`SETUP_ID`): the lesson's imports."""
    cell = new_code_cell(_text(text, "text"))
    cell.metadata["nbgrader"] = _metadata(SETUP_ID, grade=False, solution=False, locked=True)
    return cell


def answer_cell(text: str, function: str) -> nbformat.NotebookNode:
    """The answer cell of ``function`` (its grade id), folded in the book (tag ``hide-input``).
    Raises ``ValueError`` unless ``text`` holds exactly one solution region."""
    body = _text(text, "text")
    if body.count(BEGIN_SOLUTION) != 1 or body.count(END_SOLUTION) != 1:
        raise ValueError(f"text of answer cell {function!r} must hold exactly one {BEGIN_SOLUTION} … {END_SOLUTION} "
                         f"region, got {body.count(BEGIN_SOLUTION)} begin and {body.count(END_SOLUTION)} end markers")
    cell = new_code_cell(body)
    cell.metadata["nbgrader"] = _metadata(_name(function, "function"), grade=False, solution=True, locked=False)
    cell.metadata["tags"] = ["hide-input"]
    return cell


def visible_tests_cell(text: str, function: str, points: int = 2) -> nbformat.NotebookNode:
    """The locked, graded visible tests of ``function`` (grade id :func:`visible_test_id`)."""
    cell = new_code_cell(_text(text, "text"))
    cell.metadata["nbgrader"] = _metadata(visible_test_id(function), grade=True, solution=False, locked=True,
                                          points=points)
    return cell


def hidden_tests_cell(function: str, points: int = 3) -> nbformat.NotebookNode:
    """The graded hidden tests of ``function`` (grade id :func:`hidden_test_id`): a hidden region calling
    ``trainsys.grading.check_<function>``, removed from the release and from the book (tag ``remove-cell``)."""
    name = _name(function, "function")
    body = ("# Hidden tests: the autograder runs the full check from trainsys.grading here.\n"
            f"{BEGIN_HIDDEN}\nfrom trainsys.grading import check_{name}\nprint(check_{name}({name}))\n{END_HIDDEN}")
    cell = new_code_cell(body)
    cell.metadata["nbgrader"] = _metadata(hidden_test_id(name), grade=True, solution=False, locked=True, points=points)
    cell.metadata["tags"] = ["remove-cell"]
    return cell


def _cell_id(path: Path, index: int, cell: Mapping) -> str:
    ident = grade_id(cell)
    if isinstance(ident, str) and ident:
        return re.sub(r"[^A-Za-z0-9_-]", "-", ident)[:64]  # nbgrader's release gives graded cells this id too
    return f"cell-{hashlib.sha1(f'{path.name}:{index}'.encode()).hexdigest()[:12]}"


def write_lesson(path: str | Path, lesson_cells: Iterable[nbformat.NotebookNode]) -> Path:
    """Write a source notebook at ``path``: the python3 kernel, stable cell ids (a graded cell's id is its
    grade id), no outputs. Raises ``nbformat.ValidationError`` for cells nbformat rejects."""
    path = Path(path)
    nb = new_notebook(cells=list(lesson_cells))
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    for index, cell in enumerate(nb.cells):
        cell["id"] = _cell_id(path, index, cell)
    nbformat.validate(nb)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path
