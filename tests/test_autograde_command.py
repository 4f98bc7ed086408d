"""The grading command's arguments, and ``--no-sandbox`` (a one-student course), apart from the class test
(tests/test_autograde_class.py) so that the two can run on different test workers."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from tests.synthetic_class import CLASS_LESSONS, grade, make_course, students, submit_class

pytestmark = pytest.mark.slow


def test_bad_arguments_are_refused_with_a_clear_message(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "trainsys.autograde", "--course", str(tmp_path), "--jobs", "0"],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "--jobs must be at least 1, got 0" in run.stderr
    run = subprocess.run([sys.executable, "-m", "trainsys.autograde", "--course", str(tmp_path)],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "has no submitted/ folder" in run.stderr


def test_no_sandbox_warns_and_marks_every_grade(tmp_path: Path) -> None:
    roster = [s for s in students(CLASS_LESSONS) if s.name == "solved"]
    full = sum(map(sum, roster[0].expected.values()))
    course = make_course(tmp_path / "unsandboxed", CLASS_LESSONS)
    submit_class(course, roster)
    run = grade(course, "--no-feedback", "--no-sandbox")
    assert "WARNING: --no-sandbox" in run.stderr
    with (course / "reports" / "summary.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["student"], row["sandbox"], float(row["score"])) for row in rows] == [("solved", "unsandboxed", full)]
