"""Building blocks for authoring a lesson's source notebook under ``solutions/``.

A lesson is authored once, as an nbgrader *source* notebook. These helpers give each kind of cell
the metadata nbgrader and the book expect, so that no author writes nbgrader JSON by hand:

- :func:`markdown` — prose (headings, derivations);
- :func:`setup` — the locked import cell at the top;
- :func:`answer` — the one graded stub; the solution sits between ``### BEGIN SOLUTION`` and
  ``### END SOLUTION`` and is folded in the book (tag ``hide-input``);
- :func:`visible_tests` — the tests a student reads and runs (autograded, locked);
- :func:`hidden_tests` — a ``### BEGIN HIDDEN TESTS`` region calling ``trainsys.grading``; removed from
  the release by ``nbgrader generate_assignment`` and from the book page (tag ``remove-cell``);
- :func:`code` — ordinary cells (figures, measurements in the checkpoint).

``write_lesson(path, cells)`` writes an nbformat-4.5 notebook with stable cell ids.

Example (run from the repository root)::

    from autograder.authoring import markdown, setup, answer, visible_tests, hidden_tests, write_lesson
    write_lesson("solutions/m1p1-mlp-core/03_linear_forward.ipynb", [markdown("# ..."), ...])
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

SCHEMA_VERSION = 3


def _nbgrader(grade_id: str, *, grade: bool, solution: bool, locked: bool, points: int | None = None) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": SCHEMA_VERSION,
            "solution": solution, "task": False}
    if points is not None:
        meta["points"] = points
    return meta


def markdown(text: str) -> nbformat.NotebookNode:
    """A prose cell (MyST markdown, MathJax with ``$…$`` and ``$$…$$``)."""
    return new_markdown_cell(text.strip("\n"))


def code(source: str, tags: Sequence[str] = ()) -> nbformat.NotebookNode:
    """An ordinary code cell (e.g. the checkpoint's figure)."""
    cell = new_code_cell(source.strip("\n"))
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def setup(source: str) -> nbformat.NotebookNode:
    """The locked import cell: earlier lessons' functions come from the package."""
    cell = new_code_cell(source.strip("\n"))
    cell.metadata["nbgrader"] = _nbgrader("setup", grade=False, solution=False, locked=True)
    return cell


def answer(source: str, grade_id: str) -> nbformat.NotebookNode:
    """The graded stub; ``source`` must contain one ``### BEGIN SOLUTION`` / ``### END SOLUTION`` region."""
    if source.count("### BEGIN SOLUTION") != 1 or source.count("### END SOLUTION") != 1:
        raise ValueError(f"answer cell {grade_id!r} must contain exactly one BEGIN/END SOLUTION region")
    cell = new_code_cell(source.strip("\n"))
    cell.metadata["nbgrader"] = _nbgrader(grade_id, grade=False, solution=True, locked=False)
    cell.metadata["tags"] = ["hide-input"]
    return cell


def visible_tests(source: str, grade_id: str, points: int = 2) -> nbformat.NotebookNode:
    """Autograded tests the student can read and run."""
    cell = new_code_cell(source.strip("\n"))
    cell.metadata["nbgrader"] = _nbgrader(grade_id, grade=True, solution=False, locked=True, points=points)
    return cell


def hidden_tests(check_call: str, grade_id: str, points: int = 3) -> nbformat.NotebookNode:
    """A test cell whose body is hidden from students and from the book; ``check_call`` runs the check."""
    body = (
        "# Hidden tests: the autograder runs the full check from trainsys.grading here.\n"
        "### BEGIN HIDDEN TESTS\n"
        f"{check_call.strip()}\n"
        "### END HIDDEN TESTS"
    )
    cell = new_code_cell(body)
    cell.metadata["nbgrader"] = _nbgrader(grade_id, grade=True, solution=False, locked=True, points=points)
    cell.metadata["tags"] = ["remove-cell"]
    return cell


def _cell_id(path: Path, index: int, cell: nbformat.NotebookNode) -> str:
    grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
    if grade_id:
        return re.sub(r"[^A-Za-z0-9_-]", "-", grade_id)[:64]
    digest = hashlib.sha1(f"{path.name}:{index}".encode()).hexdigest()[:12]
    return f"cell-{digest}"


def write_lesson(path: str | Path, cells: Iterable[nbformat.NotebookNode]) -> Path:
    """Write a lesson notebook with the python3 kernel, stable cell ids, and no outputs."""
    path = Path(path)
    nb = new_notebook(cells=list(cells))
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    for index, cell in enumerate(nb.cells):
        cell["id"] = _cell_id(path, index, cell)
    nbformat.validate(nb)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path
