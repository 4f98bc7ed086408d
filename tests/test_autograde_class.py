"""Grading a synthetic class end to end: every expected score, hostile cases, feedback, kill and resume.

The class (tests/synthetic_class.py: 30 students of a two-notebook part; those whose case is about one
notebook hand in only that one, the others both) is graded by the real command,
``python -m trainsys.autograde`` (which also exports grades and writes feedback), killed with SIGKILL once
two students are graded, and resumed by the same command. Every assertion below reads the resumed grading:
the class's known score for every cell is also the proof that the kill lost no grade and duplicated none
(a stronger reference than a second, uninterrupted grading, which could be wrong the same way). Three of
its students are then graded again, with ``--force``, in a copy of the course: the scores must not change.
The command's arguments and ``--no-sandbox`` are tested in tests/test_autograde_command.py.
"""

from __future__ import annotations

import csv
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.synthetic_class import ASSIGNMENT, CLASS_LESSONS, Student, grade, make_course, students, submit_class
from trainsys.autograde.launch import gradebook
from trainsys.autograde.runner import MARKER, load_result, plan

pytestmark = pytest.mark.slow
KILL_AFTER = 2  # students graded (completion marks written) when the first run is killed
AGAIN = ("partial", "patch_grading", "syntax_error")  # graded twice: full and zero notebooks, flagged, broken


@dataclass
class Graded:
    course: Path
    roster: list[Student]
    stdout: str  # the resumed run's
    done_before: int  # students whose completion mark the killed run had written


def _marks(course: Path) -> int:
    return len(list((course / "autograded").rglob(MARKER)))


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> Graded:
    course = make_course(tmp_path_factory.mktemp("class"), CLASS_LESSONS)
    roster = students(CLASS_LESSONS, their_notebook_only=True)
    submit_class(course, roster)
    process = grade(course, wait=False)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and process.poll() is None and _marks(course) < KILL_AFTER:
        time.sleep(0.5)
    os.killpg(process.pid, signal.SIGKILL)  # the grader, nbgrader, the re-checks and the sandboxes it started
    process.wait()
    done_before = _marks(course)
    run = grade(course)  # the same command again: it grades what the kill left, then exports and writes feedback
    return Graded(course, roster, run.stdout, done_before)


def _cell_scores(course: Path) -> dict[tuple[str, str, str], float]:
    scores = {}
    with gradebook(course) as gb:
        for student in gb.students:
            try:
                submission = gb.find_submission(ASSIGNMENT, student.id)
            except Exception:  # noqa: BLE001
                continue
            for notebook in submission.notebooks:
                for grade_ in notebook.grades:
                    scores[(student.id, notebook.name, grade_.name)] = float(grade_.score or 0)
    return scores


def _expected_cells(student: Student) -> dict[tuple[str, str, str], float]:
    cells = {}
    for stem, (visible, hidden) in student.expected.items():
        function = CLASS_LESSONS[stem]
        cells[(student.name, stem, f"test_{function}_visible")] = visible
        cells[(student.name, stem, f"test_{function}_hidden")] = hidden
    return cells


def test_the_class_has_at_least_30_submissions(graded: Graded) -> None:
    assert len(graded.roster) >= 30  # issue 7: "a synthetic class of at least 30 submissions"


def test_every_cell_gets_its_expected_score(graded: Graded) -> None:
    scores = _cell_scores(graded.course)
    wrong = [f"{name} {stem} {grade_id}: got {scores.get((name, stem, grade_id))}, expected {want}"
             for student in graded.roster for (name, stem, grade_id), want in _expected_cells(student).items()
             if scores.get((name, stem, grade_id)) != want]
    assert not wrong, "\n".join(wrong)


def test_killed_grading_resumes_without_losing_or_duplicating(graded: Graded) -> None:
    course, roster = graded.course, graded.roster
    done = graded.done_before
    assert KILL_AFTER <= done < len(roster), f"the kill came at {done} of {len(roster)} jobs"
    assert _marks(course) == len(plan(course)) == len(roster)
    with gradebook(course) as gb:
        assert len(gb.assignment_submissions(ASSIGNMENT)) == len(roster)
    # every student holds exactly the lessons' graded cells, no more and no fewer (their values: the test above)
    scores = _cell_scores(course)
    for student in roster:
        assert {k for k in scores if k[0] == student.name} == set(_expected_cells(student)), student.name


def test_grading_the_same_submissions_again_gives_identical_scores(graded: Graded, tmp_path: Path) -> None:
    """A copy of the graded course (its gradebook with the first grades) holding three of the submissions,
    regraded with --force: each is cleared and graded afresh, to the same scores."""
    again = tmp_path / "again"
    for name in ("solutions", "notebooks"):
        shutil.copytree(graded.course / name, again / name)
    shutil.copy(graded.course / "gradebook.db", again / "gradebook.db")
    for name in AGAIN:
        shutil.copytree(graded.course / "submitted" / name, again / "submitted" / name)
    grade(again, "--no-feedback", "--force")
    assert _marks(again) == len(AGAIN)
    first = {key: score for key, score in _cell_scores(graded.course).items() if key[0] in AGAIN}
    assert {key: score for key, score in _cell_scores(again).items() if key[0] in AGAIN} == first, \
        "grading the same submissions twice changed a score"


def test_hostile_cases_are_flagged_for_the_instructor(graded: Graded) -> None:
    for student in graded.roster:
        flags = " | ".join(load_result(graded.course, student.name, ASSIGNMENT).flags)
        for expected in student.flags:
            assert expected in flags, f"{student.name}: expected a flag containing {expected!r}, got {flags!r}"
        if not student.name.startswith("mutant_") and not any("reference" in f for f in student.flags):
            # an honest student is never accused (a notebook without its test cells ends before the Checkpoint)
            assert "reference implementation" not in flags, f"{student.name} wrongly flagged: {flags!r}"
    assert (graded.course / "submitted" / "corrupt_json" / ASSIGNMENT / "04_relu_forward.ipynb").is_file()  # as it was


def test_summary_and_grades_are_exported(graded: Graded) -> None:
    course, roster = graded.course, graded.roster
    with (course / "reports" / "summary.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {row["student"] for row in rows} == {s.name for s in roster}
    with (course / "reports" / "grades.csv").open() as handle:
        exported = {row["student_id"]: float(row["score"]) for row in csv.DictReader(handle)}
    for row in rows:
        assert exported[row["student"]] == float(row["score"])
    full = sum(map(sum, next(s for s in roster if s.name == "solved").expected.values()))
    assert "solved" in graded.stdout and f"{full:.1f} / {full:.0f}" in graded.stdout


def test_feedback_shows_the_failure_but_not_the_hidden_code(graded: Graded) -> None:
    pages = list((graded.course / "feedback").rglob("*.html"))
    assert pages, "no feedback was written"
    for page in pages:
        html = page.read_text()
        for secret in ("BEGIN HIDDEN TESTS", "from trainsys.grading import", "check_relu_forward(relu_forward)"):
            assert secret not in html, f"{page}: feedback shows {secret!r}"
    mutant = graded.course / "feedback" / "mutant_relu_forward_1" / ASSIGNMENT / "04_relu_forward.html"
    assert "differs from the reference" in mutant.read_text(), "the failing check's message should reach the student"
