"""Grading a synthetic class end to end: every expected score, hostile cases, feedback, kill and resume.

The class (tests/synthetic_class.py) is graded once by the real command, ``python -m trainsys.autograde``
(which also exports grades and writes feedback); a smaller class is killed mid-run, resumed, and
compared with an uninterrupted grading of the same submissions.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.synthetic_class import ASSIGNMENT, LESSONS, make_course, students, submit_class
from trainsys.autograde.runner import MARKER, load_result, plan
from trainsys.course import BIN, nbgrader_env

pytestmark = pytest.mark.slow
TIMEOUT = "5"


def _grade(course: Path, *extra: str, wait: bool = True) -> subprocess.Popen | subprocess.CompletedProcess:
    command = [str(BIN / "python"), "-m", "trainsys.autograde", "--course", str(course), "--jobs", "2",
               "--timeout", TIMEOUT, "--memory-limit-mb", "4096", *extra]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    if not wait:
        return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory):
    course = make_course(tmp_path_factory.mktemp("class"))
    roster = students()
    submit_class(course, roster)
    run = _grade(course)
    return course, roster, run.stdout


def _cell_scores(course: Path) -> dict[tuple[str, str, str], float]:
    from nbgrader.api import Gradebook

    scores = {}
    with Gradebook(nbgrader_env(course)["NBGRADER_DB_URL"]) as gb:
        for student in gb.students:
            try:
                submission = gb.find_submission(ASSIGNMENT, student.id)
            except Exception:  # noqa: BLE001
                continue
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    scores[(student.id, notebook.name, grade.name)] = float(grade.score or 0)
    return scores


def test_the_class_has_at_least_30_submissions(graded) -> None:
    _, roster, _ = graded
    assert len(roster) >= 30


def test_every_cell_gets_its_expected_score(graded) -> None:
    course, roster, _ = graded
    scores = _cell_scores(course)
    wrong = []
    for student in roster:
        for stem, (visible, hidden) in student.expected.items():
            function = LESSONS[stem]
            for grade_id, want in ((f"test_{function}_visible", visible), (f"test_{function}_hidden", hidden)):
                got = scores.get((student.name, stem, grade_id), 0.0)
                if got != want:
                    wrong.append(f"{student.name} {stem} {grade_id}: got {got}, expected {want}")
    assert not wrong, "\n".join(wrong)


def test_hostile_cases_are_flagged_for_the_instructor(graded) -> None:
    course, roster, stdout = graded
    for student in roster:
        flags = " | ".join(load_result(course, student.name, ASSIGNMENT).flags)
        for expected in student.flags:
            assert expected in flags, f"{student.name}: expected a flag containing {expected!r}, got {flags!r}"
    assert (course / "submitted" / "corrupt_json" / ASSIGNMENT / "04_relu_forward.ipynb").is_file()  # left as it was


def test_summary_and_grades_are_exported(graded) -> None:
    course, roster, stdout = graded
    with (course / "reports" / "summary.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {row["student"] for row in rows} == {s.name for s in roster}
    with (course / "reports" / "grades.csv").open() as handle:
        exported = {row["student_id"]: float(row["score"]) for row in csv.DictReader(handle)}
    for row in rows:
        assert exported[row["student"]] == float(row["score"])
    assert "solved" in stdout and "15.0 / 15" in stdout


def test_feedback_shows_the_failure_but_not_the_hidden_code(graded) -> None:
    course, _, _ = graded
    pages = list((course / "feedback").rglob("*.html"))
    assert pages, "no feedback was written"
    for page in pages:
        html = page.read_text()
        for secret in ("BEGIN HIDDEN TESTS", "from trainsys.grading import", "check_relu_forward(relu_forward)"):
            assert secret not in html, f"{page}: feedback shows {secret!r}"
    mutant = (course / "feedback" / "mutant_relu_forward_1" / ASSIGNMENT / "04_relu_forward.html").read_text()
    assert "differs from the reference" in mutant, "the failing check's message should reach the student"


def test_killed_grading_resumes_without_losing_or_duplicating(graded, tmp_path: Path) -> None:
    from nbgrader.api import Gradebook

    course, _, _ = graded  # the whole class, graded without interruption: the reference scores
    names = {"solved", "blank", "partial", "patch_grading", "syntax_error"}  # full, zero, mixed, flagged, broken
    roster = [s for s in students() if s.name in names]
    interrupted = make_course(tmp_path / "interrupted")
    submit_class(interrupted, roster)
    process = _grade(interrupted, "--no-feedback", wait=False)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and len(list(interrupted.rglob(MARKER))) < 2:
        time.sleep(0.5)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    done_before = len(list(interrupted.rglob(MARKER)))
    assert 2 <= done_before < len(roster), f"the kill came at {done_before} of {len(roster)} jobs"
    _grade(interrupted, "--no-feedback")
    assert len(list(interrupted.rglob(MARKER))) == len(plan(interrupted))
    reference = {key: score for key, score in _cell_scores(course).items() if key[0] in names}
    assert _cell_scores(interrupted) == reference, "resumed grading differs from an uninterrupted one"
    with Gradebook(nbgrader_env(interrupted)["NBGRADER_DB_URL"]) as gb:
        assert len(gb.assignment_submissions(ASSIGNMENT)) == len(roster)
    _grade(interrupted, "--no-feedback", "--force")
    assert _cell_scores(interrupted) == reference, "grading the same class twice changed a score"


def test_bad_arguments_are_refused_with_a_clear_message(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "trainsys.autograde", "--course", str(tmp_path), "--jobs", "0"],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "--jobs must be at least 1, got 0" in run.stderr
    run = subprocess.run([sys.executable, "-m", "trainsys.autograde", "--course", str(tmp_path)],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "has no submitted/ folder" in run.stderr


def test_no_sandbox_warns_and_marks_every_grade(tmp_path: Path) -> None:
    roster = [s for s in students() if s.name == "solved"]
    course = make_course(tmp_path / "unsandboxed")
    submit_class(course, roster)
    run = _grade(course, "--no-feedback", "--no-sandbox")
    assert "WARNING: --no-sandbox" in run.stderr
    with (course / "reports" / "summary.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["student"], row["sandbox"], float(row["score"])) for row in rows] == [("solved", "unsandboxed", 15.0)]
