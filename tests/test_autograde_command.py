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


@pytest.mark.parametrize(("argument", "value", "message"), [
    ("--jobs", "0", "--jobs must be at least 1, got 0"),
    ("--timeout", "0", "--timeout must be at least 1, got 0"),
    ("--recheck-timeout", "0", "--recheck-timeout must be at least 1, got 0"),
    ("--recheck-timeout", "soon", "--recheck-timeout: invalid int value: 'soon'"),
    ("--memory-limit-mb", "100", "--memory-limit-mb must be at least 512, got 100"),
])
def test_a_bad_number_is_refused_naming_its_argument(tmp_path: Path, argument: str, value: str, message: str) -> None:
    (tmp_path / "submitted").mkdir()
    run = subprocess.run([sys.executable, "-m", "trainsys.autograde", "--course", str(tmp_path), argument, value],
                         capture_output=True, text=True)
    assert run.returncode == 2 and message in run.stderr, run.stderr


def test_the_recheck_timeout_is_the_instructors_or_follows_the_cell_timeout(tmp_path: Path) -> None:
    from trainsys.autograde.options import Options

    assert Options(tmp_path, timeout=30).verify_timeout == 60.0
    assert Options(tmp_path, timeout=2).verify_timeout == 10.0  # a fresh process's load needs its floor
    assert Options(tmp_path, timeout=30, recheck_timeout=3).verify_timeout == 3.0


def test_bad_arguments_are_refused_with_a_clear_message(tmp_path: Path) -> None:
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
