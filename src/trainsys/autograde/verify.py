"""The trusted verdict on each graded cell: the lesson's own tests, run where no student code ever ran.

``python -I -m trainsys.autograde.verify`` reads a JSON request on stdin and writes JSON verdicts on
stdout. For every notebook of one student's assignment it

1. takes the lesson's setup cell, visible test cell and hidden check from the **source** notebook
   (the instructor's, never the submitted copy, whose test cells a student can edit);
2. takes the student's code cells from the submitted notebook — every code cell before the visible
   test cell that is not a test cell. The answer cell is found by its nbgrader ``grade_id``, else by
   its cell id (nbgrader's release gives graded cells their grade id as cell id), else by position
   (the last code cell before the visible tests): removing the cell's nbgrader metadata hides
   nothing;
3. loads those cells in a sandboxed student process (:class:`~trainsys.autograde.isolation.StudentProcess`),
   whose view of the package withholds the lesson's graded function (a stub raising "withheld while
   grading": an answer that reaches the reference by any route fails, and is flagged),
   and runs, *here*, the visible test cell with the student's function name bound to a
   :class:`~trainsys.autograde.isolation.RemoteFunction`, then ``trainsys.grading.check_<name>``.

Verdicts: ``passed`` (full points), ``failed`` (0: a test assertion, a wrong error, an answer that does
not load), ``unconfirmed`` (0, flagged for review: the student process crashed, sent garbage, or did not
answer in time even when retried once with a longer limit).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import nbformat

from trainsys.autograde.isolation import IsolationTimeout, IsolationUnavailable, StudentProcess, ipython_to_python
from trainsys.autograde.sandbox import WITHHELD, SandboxConfig, describe_limit, limit_from_message

CHECK_CALL = re.compile(r"check_(\w+)\((\w+)\)")
REFERENCE_IMPORT = re.compile(r"\b(?:from|import)\s+trainsys\.(?:memtrain|diloco|fedavg)\b|\btrainsys\.(?:memtrain|diloco|fedavg)\.")


@dataclass
class Verdict:
    notebook: str  # stem
    cell: str  # grade id of the test cell
    status: str  # passed | failed | unconfirmed
    message: str = ""


@dataclass
class Lesson:
    """What the source notebook says about its graded function."""

    setup: str
    function: str
    answer_id: str
    visible_id: str
    visible: str
    hidden_id: str
    test_ids: tuple[str, ...]


def _meta(cell: Any) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def read_lesson(source: Path) -> Lesson | None:
    """The graded pieces of an authored notebook; ``None`` when it has no graded function."""
    nb = nbformat.read(source, as_version=4)
    setup = function = answer_id = visible_id = visible = hidden_id = None
    test_ids = []
    for cell in nb.cells:
        meta = _meta(cell)
        if meta.get("grade_id") == "setup":
            setup = cell.source
        elif meta.get("solution"):
            answer_id = meta["grade_id"]
        elif meta.get("grade") and "### BEGIN HIDDEN TESTS" in cell.source:
            hidden_id = meta["grade_id"]
            test_ids.append(hidden_id)
            match = CHECK_CALL.search(cell.source)
            function = match.group(2) if match else None
        elif meta.get("grade"):
            visible_id, visible = meta["grade_id"], cell.source
            test_ids.append(visible_id)
    if None in (function, answer_id, visible_id, hidden_id):
        return None
    return Lesson(setup or "", function, answer_id, visible_id, visible, hidden_id, tuple(test_ids))


def student_cells(notebook: Path, lesson: Lesson) -> tuple[list[str] | None, str]:
    """``(the student's code cells up to the visible tests, how the answer cell was found)``.

    ``None`` when the notebook cannot be read or has no answer cell.
    """
    try:
        cells = json.loads(notebook.read_text()).get("cells", [])
        if not isinstance(cells, list):
            return None, "the notebook has no cell list"
    except (OSError, ValueError, AttributeError):
        return None, "the notebook cannot be read"

    def ident(cell: dict) -> str | None:
        meta = _meta(cell)
        return meta.get("grade_id") or cell.get("id")

    def source(cell: dict) -> str:
        text = cell.get("source", "")
        return "".join(text) if isinstance(text, list) else str(text)

    code = [c for c in cells if isinstance(c, dict) and c.get("cell_type") == "code"]
    ends = [i for i, c in enumerate(code) if ident(c) in lesson.test_ids]
    end = ends[0] if ends else len(code)
    mine = [c for c in code[:end] if ident(c) not in (*lesson.test_ids, "setup")]
    if not mine:
        return None, "no answer cell"
    by_meta = [c for c in mine if _meta(c).get("grade_id") == lesson.answer_id]
    by_id = [c for c in mine if c.get("id") == lesson.answer_id]
    found = "metadata" if by_meta else "cell id" if by_id else "position"
    return [source(c) for c in mine], found


def _run_visible(lesson: Lesson, function: Any) -> None:
    """The source notebook's visible test cell, here, with the student's function bound to its name."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(ipython_to_python(lesson.setup), "<setup>", "exec"), namespace)  # noqa: S102 - the instructor's
    namespace[lesson.function] = function
    exec(compile(ipython_to_python(lesson.visible), "<visible tests>", "exec"), namespace)  # noqa: S102


def _run_hidden(lesson: Lesson, function: Any) -> None:
    import trainsys.grading as grading

    getattr(grading, f"check_{lesson.function}")(function)


def _failure(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text.strip().splitlines()[0][:400] if text.strip() else type(exc).__name__


def verify_notebook(stem: str, lesson: Lesson, cells: list[str], timeout: float,
                    sandbox: SandboxConfig | None, notes: list[str] | None = None) -> list[Verdict]:
    """Verdicts for the visible and hidden test cells of one notebook (see the module docstring).

    A cell whose run timed out is retried once with twice the limit in a fresh process; after a
    second time-out, the remaining cells get one attempt at the longer limit.
    """
    verdicts = []
    limits = [timeout, 2 * timeout]
    student: StudentProcess | None = None
    started: list[StudentProcess] = []
    try:
        for cell_id, run in ((lesson.visible_id, _run_visible), (lesson.hidden_id, _run_hidden)):
            verdict = None
            for limit in list(limits):
                if student is None or student.process.poll() is not None or student.timeout != limit:
                    if student is not None:
                        student.close()
                    student = None
                try:
                    if student is None:
                        student = StudentProcess([lesson.setup, *cells], lesson.function, timeout=limit,
                                                 sandbox=sandbox)
                        started.append(student)
                        tampered = student.status["tampered"]
                        if tampered and notes is not None and not any(n.startswith(f"{stem}.ipynb: the answer replaced")
                                                                      for n in notes):
                            notes.append(f"{stem}.ipynb: the answer replaced {', '.join(tampered[:4])}")
                    if not student.status["ok"]:
                        verdict = Verdict(stem, cell_id, "failed",
                                          f"the answer does not define {lesson.function}: {student.status['error']}")
                        break
                    with contextlib.redirect_stdout(sys.stderr):
                        run(lesson, student.function)
                    verdict = Verdict(stem, cell_id, "passed")
                    break
                except IsolationTimeout as exc:
                    verdict = Verdict(stem, cell_id, "unconfirmed", f"{exc} (retried once with {2 * timeout:.0f} s)")
                    student = None
                    continue
                except IsolationUnavailable as exc:
                    verdict = Verdict(stem, cell_id, "unconfirmed", str(exc))
                    student = None
                    break
                except Exception as exc:  # noqa: BLE001 - a failed assertion or an error the test did not expect
                    verdict = Verdict(stem, cell_id, "failed", _failure(exc))
                    break
            if verdict.status == "unconfirmed" and "did not answer" in verdict.message:
                limits = [2 * timeout]
            verdicts.append(_name_the_limit(verdict, sandbox))
    finally:
        if student is not None:
            student.close()
    reached = set().union(*(p.reached for p in started))
    if reached and sandbox is not None:  # a limit hit without ending the answer (a child killed, a fork refused)
        note = "the student's code reached " + " and ".join(describe_limit(r, sandbox) for r in sorted(reached))
        for verdict in verdicts:
            if verdict.status != "passed" and "reached the sandbox's" not in verdict.message:
                verdict.message += f" ({note})"
        if notes is not None:
            notes.append(f"{stem}.ipynb: {note}")
    return verdicts


def _name_the_limit(verdict: Verdict, sandbox: SandboxConfig | None) -> Verdict:
    """A failed verdict whose error is a sandbox limit's (no space left, a refused fork, …) says which."""
    if verdict.status == "passed" or sandbox is None or "reached the sandbox's" in verdict.message:
        return verdict
    limit = limit_from_message(verdict.message)
    if limit is not None:
        verdict.message += f" (the student's code reached {describe_limit(limit, sandbox)})"
    return verdict


def verify(request: dict) -> dict:
    """All verdicts for one student's assignment; ``request`` as written by the grading command."""
    sandbox = None if request.get("sandbox") is None else SandboxConfig.from_dict(request["sandbox"])
    verdicts: list[Verdict] = []
    notes: list[str] = []
    for source in map(Path, request["sources"]):
        lesson = read_lesson(source)
        if lesson is None:
            continue
        submitted = Path(request["submitted"]) / source.name
        cells, found = student_cells(submitted, lesson) if submitted.is_file() else (None, "missing")
        if cells is None:
            reason = "the notebook is missing" if found == "missing" else found
            verdicts += [Verdict(source.stem, c, "failed", reason) for c in (lesson.visible_id, lesson.hidden_id)]
            continue
        if found == "position":
            notes.append(f"{source.name}: the answer cell had lost its nbgrader metadata and id; found by position")
        elif found == "cell id":
            notes.append(f"{source.name}: the answer cell had lost its nbgrader metadata; found by its cell id")
        if any(REFERENCE_IMPORT.search(cell) for cell in cells):
            notes.append(f"{source.name}: the answer uses the reference implementation from trainsys")
        # The graded function's reference is withheld from the sandbox (the trusted checks here keep it).
        withheld = None if sandbox is None else dataclasses.replace(sandbox, withheld=(lesson.function,))
        found = verify_notebook(source.stem, lesson, cells, float(request["timeout"]), withheld, notes)
        if any(WITHHELD in v.message for v in found):
            notes.append(f"{source.name}: the answer calls the package's {lesson.function} (the reference "
                         f"implementation, {WITHHELD})")
        verdicts += found
    return {"verdicts": [asdict(v) for v in verdicts], "notes": notes}


def main() -> None:
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # anything printed by tests goes to stderr
    sys.stdout = sys.stderr
    try:
        reply = verify(json.loads(sys.stdin.read()))
    except Exception:  # noqa: BLE001 - the grader reports this job as not verifiable
        reply = {"error": traceback.format_exc()[-2000:]}
    channel.write(json.dumps(reply))
    channel.flush()


if __name__ == "__main__":
    main()
