"""After nbgrader: each answer checked again in a process the student's code cannot reach.

Policy (a score is only ever lowered, never raised):

- the hidden check fails in isolation while its cell scored in the kernel → the hidden cell gets 0
  (the kernel's pass was produced by tampering, e.g. a replaced ``numpy.allclose`` or ``trainsys.grading``);
- the answer cell replaced testing functions (``numpy.testing.*``, ``numpy.allclose``, ``trainsys.grading``,
  builtins …) → the visible-test cell gets 0, since its pass cannot be trusted;
- the answer imports the reference implementation (``trainsys.memtrain`` …) → flagged for the instructor.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat

import trainsys.grading as grading
from trainsys.autograde.isolation import IsolationUnavailable, StudentProcess
from trainsys.course import nbgrader_env

if TYPE_CHECKING:
    from trainsys.autograde.runner import Options

NOT_ISOLATABLE = {
    # returns a tensor whose autograd graph (the point of the lesson) cannot cross a process boundary;
    # its hidden check runs in the kernel only, and tampering is still detected
    "compute_batch_loss",
}
CHECK_CALL = re.compile(r"check_(\w+)\((\w+)\)")
REFERENCE_IMPORT = re.compile(r"\b(?:from|import)\s+trainsys\.(?:memtrain|diloco|fedavg)\b|\btrainsys\.(?:memtrain|diloco|fedavg)\.")


def _meta(cell: nbformat.NotebookNode) -> dict:
    return cell.metadata.get("nbgrader", {})


def lesson_parts(source: Path) -> dict[str, str]:
    """From an authored notebook: setup source, answer grade_id, visible and hidden test ids, function name."""
    nb = nbformat.read(source, as_version=4)
    parts: dict[str, str] = {}
    for cell in nb.cells:
        meta = _meta(cell)
        if meta.get("grade_id") == "setup":
            parts["setup"] = cell.source
        elif meta.get("solution"):
            parts["answer_id"] = meta["grade_id"]
        elif meta.get("grade") and "### BEGIN HIDDEN TESTS" in cell.source:
            parts["hidden_id"] = meta["grade_id"]
            match = CHECK_CALL.search(cell.source)
            if match:
                parts["function"] = match.group(2)
        elif meta.get("grade"):
            parts["visible_id"] = meta["grade_id"]
    return parts


def student_cells(notebook: Path, answer_id: str) -> list[str] | None:
    """The student's code cells up to and including the answer cell (test cells excluded), in order."""
    try:
        nb = nbformat.read(notebook, as_version=4)
    except Exception:  # noqa: BLE001 - unreadable: nothing to re-check
        return None
    cells = []
    for cell in nb.cells:
        meta = _meta(cell)
        if cell.cell_type != "code" or meta.get("grade") or meta.get("grade_id") == "setup":
            continue
        cells.append(cell.source)
        if meta.get("grade_id") == answer_id:
            return cells
    return None


def recheck_notebooks(options: Options, student: str, assignment: str, sources: list[Path]) -> list[str]:
    """Re-check every notebook of one submission; lower scores in the gradebook as the policy says."""
    from nbgrader.api import Gradebook, MissingEntry

    flags: list[str] = []
    with Gradebook(nbgrader_env(options.course, options.db_url)["NBGRADER_DB_URL"]) as gb:
        for source in sources:
            parts = lesson_parts(source)
            if "function" not in parts or "answer_id" not in parts:
                continue
            submitted = options.course / "autograded" / student / assignment / source.name
            cells = student_cells(submitted, parts["answer_id"]) if submitted.is_file() else None
            if cells is None:
                continue
            if any(REFERENCE_IMPORT.search(cell) for cell in cells):
                flags.append(f"{source.name}: the answer uses the reference implementation from trainsys")
            verdict, tampered, unavailable = _isolated_check(options, parts, [parts.get("setup", ""), *cells])
            if unavailable:
                flags.append(f"{source.name}: could not be re-checked in isolation ({unavailable}); kernel score kept")
            try:
                hidden = gb.find_grade(parts["hidden_id"], source.stem, assignment, student)
                visible = gb.find_grade(parts.get("visible_id", ""), source.stem, assignment, student)
            except MissingEntry:
                continue
            if verdict is not None and (hidden.score or 0) > 0:
                hidden.manual_score = 0.0
                flags.append(f"{source.name}: hidden check passed in the kernel but fails in isolation ({verdict})")
            if tampered and (visible.score or 0) > 0:
                visible.manual_score = 0.0
                flags.append(f"{source.name}: the answer replaced {', '.join(tampered[:4])}; visible tests set to 0")
            elif tampered:
                flags.append(f"{source.name}: the answer replaced {', '.join(tampered[:4])}")
        gb.db.commit()
    return flags


def _isolated_check(options: Options, parts: dict[str, str], cells: list[str]
                    ) -> tuple[str | None, list[str], str | None]:
    """``(failure, tampered, unavailable)``: the first line of a failed case (``None`` when the check
    passes), the testing functions the code replaced, and why the re-check could not run (a process
    that did not answer or died: no conclusion, so no score is lowered)."""
    check = getattr(grading, f"check_{parts['function']}", None)
    if check is None:
        return None, [], None
    if parts["function"] in NOT_ISOLATABLE:
        check = None  # load the answer for the tampering scan only
    tampered: list[str] = []
    try:  # generous time: a loaded machine must not cost a correct answer its points
        with StudentProcess(cells, parts["function"], timeout=max(60.0, 4.0 * options.timeout),
                            memory_limit_bytes=options.memory_limit_mb * 2**20) as student:
            tampered = student.status.get("tampered", [])
            if not student.status["ok"]:
                return f"the answer does not load: {student.status['error']}"[:300], tampered, None
            try:
                if check is not None:
                    check(student.function)
            except AssertionError as exc:
                return str(exc).splitlines()[0][:300], tampered, None
            return None, tampered, None
    except IsolationUnavailable as exc:
        return None, tampered, str(exc)[:200]
    except OSError as exc:
        return None, tampered, f"{type(exc).__name__}: {exc}"[:200]
