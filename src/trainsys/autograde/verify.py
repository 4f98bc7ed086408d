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

from trainsys.autograde.isolation import IsolationTimeout, IsolationUnavailable, StudentProcess
from trainsys.autograde.launch import skip_unused_imports
from trainsys.autograde.sandbox import WITHHELD, SandboxConfig, describe_limit, limit_from_message
from trainsys.notebook import GradedCells, read_graded, run_visible_tests, student_code

REFERENCE_IMPORT = re.compile(r"\b(?:from|import)\s+trainsys\.(?:memtrain|diloco|fedavg)\b|\btrainsys\.(?:memtrain|diloco|fedavg)\.")


@dataclass
class Verdict:
    notebook: str  # stem
    cell: str  # grade id of the test cell
    status: str  # passed | failed | unconfirmed
    message: str = ""


def read_lesson(source: Path) -> GradedCells | None:
    """The graded pieces of an authored notebook (:func:`trainsys.notebook.graded_cells`); ``None`` when it has
    no graded function."""
    return read_graded(source)


def student_cells(notebook: Path, lesson: GradedCells) -> tuple[list[str] | None, str]:
    """``(the student's code cells up to the visible tests, how the answer cell was found)``
    (:func:`trainsys.notebook.student_code`). ``None`` when the notebook cannot be read or has no answer cell.
    """
    try:
        nb = json.loads(notebook.read_text())
    except (OSError, ValueError):
        return None, "the notebook cannot be read"
    if not isinstance(nb, dict):
        return None, "the notebook cannot be read"
    if not isinstance(nb.get("cells", []), list):
        return None, "the notebook has no cell list"
    return student_code(nb, lesson)


def _run_visible(lesson: GradedCells, function: Any) -> None:
    """The source notebook's visible test cell, here, with the student's function bound to its name."""
    run_visible_tests(lesson.visible, [lesson.setup], {lesson.function: function})


def _run_hidden(lesson: GradedCells, function: Any) -> None:
    import trainsys.grading as grading

    getattr(grading, f"check_{lesson.function}")(function)


def _failure(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text.strip().splitlines()[0][:400] if text.strip() else type(exc).__name__


def verify_notebook(stem: str, lesson: GradedCells, cells: list[str], timeout: float,
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
    sandbox = SandboxConfig.decode(request["sandbox"])  # as the kernels read it from TRAINSYS_SANDBOX
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
    skip_unused_imports()  # before nbformat is imported (trainsys.autograde.launch.SKIPPED_IMPORTS says why)
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
