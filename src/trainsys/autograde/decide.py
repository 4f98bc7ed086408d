"""The trusted verdicts become the gradebook's scores, and the feedback says what they were.

:func:`run_verifier` starts ``python -I -m trainsys.autograde.verify`` — a trusted process, outside the
sandbox, where no student code runs — for one student's assignment. :func:`apply_verdicts` writes its
verdicts into nbgrader's gradebook as the cells' automatic scores (clearing any manual score), and adds
each verdict to its test cell's outputs in the autograded notebook, which the feedback page is made from.
A job whose verifier does not answer scores 0 on every test cell and is flagged for review.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

import nbformat

from trainsys.autograde import launch
from trainsys.autograde.options import Options
from trainsys.notebook import grade_id, read_graded

NOTICE = "Trusted grader"


def run_verifier(options: Options, student: str, assignment: str, sources: list[Path], slot: int,
                 submitted: Path | None = None) -> dict:
    """The verifier's reply: ``{"verdicts": [...], "notes": [...]}`` or ``{"error": ...}``.

    ``submitted``: the folder of the student's notebooks (default ``submitted/<student>/<assignment>``; the
    grading command passes its staged copy, :mod:`trainsys.autograde.intake`).
    """
    from trainsys.autograde.sandbox import SandboxConfig

    folder = submitted if submitted is not None else options.course / "submitted" / student / assignment
    request = {"sources": [str(s) for s in sources],
               "submitted": str(folder),
               "timeout": options.verify_timeout, "sandbox": SandboxConfig.encode(options.sandbox_config(slot))}
    per_notebook = 2 * (options.verify_timeout * 5) + 60  # visible and hidden, each with its retries
    wall = per_notebook * max(len(sources), 1) + 60
    try:
        run = launch.run_trusted(options.course, "trainsys.autograde.verify", timeout=wall, db_url=options.db_url,
                                 extra_env=launch.QUIET, memory_limit=options.grader_memory_mb * 2**20, soft_only=True,
                                 stdin=json.dumps(request))
    except subprocess.TimeoutExpired:
        return {"error": f"the trusted re-check did not finish within {wall:.0f} s"}
    try:
        reply = json.loads(run.stdout)
    except ValueError:
        return {"error": f"the trusted re-check failed ({run.returncode}): {run.stderr.strip()[-500:]}"}
    return reply if isinstance(reply, dict) else {"error": "the trusted re-check answered nonsense"}


def apply_verdicts(options: Options, student: str, assignment: str, reply: dict) -> list[str]:
    """Scores from verdicts; return the flags for the instructor."""
    from nbgrader.api import MissingEntry

    flags = list(reply.get("notes", []))
    verdicts = reply.get("verdicts", [])
    if "error" in reply:
        flags.append(f"could not be re-checked: {reply['error'].strip().splitlines()[-1][:300]}; "
                     "every test cell set to 0, review by hand")
    by_cell = {(v["notebook"], v["cell"]): v for v in verdicts}
    withheld = _hidden_cells(options.course / "solutions" / assignment)  # never run in the kernel
    with launch.gradebook(options.course, options.db_url) as gb:
        try:
            submission = gb.find_submission(assignment, student)
        except MissingEntry:
            return flags + ["no submission recorded by nbgrader"]
        for notebook in submission.notebooks:
            for grade in notebook.grades:
                if not grade.max_score:
                    continue
                verdict = by_cell.get((notebook.name, grade.name))
                if verdict is None and "error" not in reply:
                    continue  # not a lesson's test cell: nbgrader's own score stands
                passed = verdict is not None and verdict["status"] == "passed"
                kernel = grade.auto_score or 0.0
                grade.auto_score = float(grade.max_score) if passed else 0.0
                grade.manual_score = None
                grade.extra_credit = None
                grade.needs_manual_grade = False
                if verdict is not None and verdict["status"] == "unconfirmed":
                    flags.append(f"{notebook.name}.ipynb {grade.name}: could not be confirmed "
                                 f"({verdict['message'][:200]}); 0 points, review by hand")
                elif verdict is not None and not passed and kernel > 0 and (notebook.name, grade.name) not in withheld:
                    flags.append(f"{notebook.name}.ipynb {grade.name}: passed in the kernel but fails the "
                                 f"trusted re-check ({verdict['message'][:200]})")
        gb.db.commit()
    _annotate(options.course / "autograded" / student / assignment, verdicts)
    return flags


def kernel_withholds_hidden_tests(environ: Mapping[str, str] | None = None) -> bool:
    """Whether nbgrader's kernel is denied the hidden tests (``environ``: default ``os.environ``).

    Yes under the class grading command, which sets ``TRAINSYS_SANDBOX`` (``"off"`` included) and decides every
    test cell's points in the trusted re-check (:func:`apply_verdicts`): student code in the kernel could read
    the hidden tests (``In``, a ``post_run_cell`` hook) and print them into its feedback, and the kernel's score
    for them is ignored (:func:`_hidden_cells`). No under plain ``nbgrader autograde``, whose kernel scores are
    the grades. Applied by :class:`trainsys.autograde.execute.SlicedPollExecute`."""
    from trainsys.autograde.sandbox import ENV_VAR

    return bool((os.environ if environ is None else environ).get(ENV_VAR))


def _hidden_cells(folder: Path) -> set[tuple[str, str]]:
    """``(notebook, grade id)`` of the hidden-test cells: the grading command's kernels are not sent their
    code (:func:`kernel_withholds_hidden_tests`), so the kernel's score for them means nothing."""
    cells = set()
    for source in sorted(folder.glob("*.ipynb")):
        try:
            lesson = read_graded(source)
        except Exception:  # noqa: BLE001 - an unreadable source has no lesson
            lesson = None
        if lesson is not None:
            cells.add((source.stem, lesson.hidden_id))
    return cells


def _annotate(folder: Path, verdicts: list[dict]) -> None:
    """Append each verdict to its test cell's outputs in the autograded notebook."""
    by_notebook: dict[str, dict[str, dict]] = {}
    for v in verdicts:
        by_notebook.setdefault(v["notebook"], {})[v["cell"]] = v
    for stem, cells in by_notebook.items():
        path = folder / f"{stem}.ipynb"
        try:
            nb = nbformat.read(path, as_version=4)
        except Exception:  # noqa: BLE001 - a missing notebook has nothing to annotate
            continue
        for cell in nb.cells:
            verdict = cells.get(grade_id(cell))
            if verdict is None or cell.cell_type != "code":
                continue
            text = f"{NOTICE}: {verdict['status']}" + (f" — {verdict['message']}" if verdict["message"] else "")
            cell.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=text + "\n"))
        nbformat.write(nb, path)
