"""Before a class is graded: one lesson's reference answer must score full marks, and its stub 0.

A grading setup the sandbox cannot work in (the package or the Python environment out of its sight, a
folder it may not read) would otherwise give every student 0 — each answer "could not be confirmed" —
and end as if all went well. :func:`self_test` runs one lesson through the same sandbox and trusted
verifier a student's notebook goes through, twice: with the lesson's reference answer (both test cells
must pass) and with the released stub (both must fail). When either does not, grading stops before
anyone is graded, with :func:`probe`'s account of what the sandbox could not see.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

from trainsys.autograde.sandbox import SRC, SandboxConfig, _python_paths, wrap
from trainsys.notebook import GradedCells, read_graded, replace_sources

STUB = "# YOUR CODE HERE\nraise NotImplementedError()"  # what nbgrader's release leaves in an answer cell
IMPORTS = ("numpy", "trainsys.grading")  # what every lesson's setup and answer need in the sandbox


class SelfTestFailed(RuntimeError):
    """The grading setup does not grade correctly; the message says what failed and what the sandbox missed."""


def first_lesson(course: Path, assignments: list[str]) -> tuple[Path, GradedCells] | None:
    """The first graded lesson (source notebook and its graded pieces) of the first of ``assignments``."""
    for assignment in sorted(assignments):
        for source in sorted((course / "solutions" / assignment).glob("*.ipynb")):
            try:
                lesson = read_graded(source)
            except Exception:  # noqa: BLE001 - an unreadable source is not one to test with
                lesson = None
            if lesson is not None:
                return source, lesson
    return None


def _with_answer(source: Path, lesson: GradedCells, answer: str | None) -> nbformat.NotebookNode:
    """The source notebook with its answer cell kept (``None``) or replaced by ``answer``."""
    nb = nbformat.read(source, as_version=4)
    if answer is not None:
        replace_sources(nb, {lesson.answer_id: answer})
    return nb


def self_test(options: object, assignments: list[str]) -> str:
    """Grade one lesson's reference answer and its stub as two students would be; return a one-line
    account. Raises :class:`SelfTestFailed` when the reference does not get every test cell or the stub
    gets one. ``options``: the run's :class:`~trainsys.autograde.runner.Options`."""
    from trainsys.autograde.decide import run_verifier

    found = first_lesson(options.course, assignments)
    if found is None:
        return "self-test skipped: no graded lesson among the assignments"
    source, lesson = found
    tmp = Path(tempfile.mkdtemp(prefix="trainsys-selftest-"))
    try:
        trial = dataclasses.replace(options, course=tmp, db_url=f"sqlite:///{tmp / 'unused.db'}")
        problems = []
        for student, answer, want in (("reference", None, "passed"), ("stub", STUB, "failed")):
            folder = tmp / "submitted" / student / source.parent.name
            folder.mkdir(parents=True)
            nbformat.write(_with_answer(source, lesson, answer), folder / source.name)
            reply = run_verifier(trial, student, source.parent.name, [source], slot=0)
            verdicts = {v["cell"]: v for v in reply.get("verdicts", [])}
            for cell in (lesson.visible_id, lesson.hidden_id):
                verdict = verdicts.get(cell)
                if verdict is None or verdict["status"] != want:
                    got = (f"{verdict['status']} ({verdict['message'][:300]})" if verdict is not None
                           else f"no verdict ({str(reply.get('error', '')).strip().splitlines()[-1:]})")
                    problems.append(f"the {student} answer of {source.name} should have {want} {cell}, got {got}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if problems:
        config = options.sandbox_config(0)
        unseen = probe(config) if config is not None else []
        raise SelfTestFailed("; ".join(problems) + (". In the sandbox: " + "; ".join(unseen) if unseen else ""))
    return f"self-test passed: {source.name}'s reference answer scored full marks and its stub 0"


PROBE_PATHS = 'for p in "$@"; do [ -r "$p" ] && [ -x "$p" ] || echo "cannot see or read $p"; done'
PROBE_IMPORTS = ("import sys\nfor name in sys.argv[1:]:\n    try:\n        __import__(name)\n"
                 "    except BaseException as exc:\n        print(f'import {name} fails: {type(exc).__name__}: {exc}')")


def probe(config: SandboxConfig) -> list[str]:
    """What a sandbox with ``config`` cannot see (the folders the grader binds into it, the interpreter)
    or import (:data:`IMPORTS`), one line each; empty when it sees everything."""
    paths = [*_python_paths(), str(SRC), sys.executable]
    found = []
    for command in (["/bin/sh", "-c", PROBE_PATHS, "probe", *paths], [sys.executable, "-I", "-c", PROBE_IMPORTS, *IMPORTS]):
        try:
            run = subprocess.run(wrap(command, config), capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as exc:
            found.append(f"the sandbox did not start: {exc}")
            break
        found += [line for line in run.stdout.splitlines() if line.strip()]
        if run.returncode != 0 and not run.stdout.strip():
            found.append(f"{command[0]} did not run (exit {run.returncode}: {run.stderr.strip()[-300:]})")
    return found
