"""The course grades wherever it is cloned: under /tmp, in a path with a space (issue 23).

The sandbox mounts a private tmpfs on /tmp; the package and the Python environment of a course cloned
under /tmp must still be visible inside it. The clone here is the package source and the nbgrader
configuration copied under ``/tmp/…/a course/``, with a virtual environment of its own (made without
pip: a ``.pth`` lends it this environment's site-packages), and a one-lesson class of two students.
"""

from __future__ import annotations

import csv
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile_class import ASSIGNMENT, FUNCTION, STEM, WRONG, copy_course, make_course, solution
from trainsys.course import REPO, submit

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bubblewrap is Linux only")


def clone_under(root: Path) -> Path:
    """The package and configuration copied to ``root`` with their own venv; returns its python."""
    root.mkdir(parents=True)
    shutil.copytree(REPO / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "autograder", root / "autograder", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True, timeout=120)
    own_site = next((root / "venv" / "lib").glob("python3*/site-packages"))
    shared = next(p for p in site.getsitepackages() if p.endswith("site-packages"))
    (own_site / "course.pth").write_text(f"{shared}\n{root / 'src'}\n")
    return root / "venv" / "bin" / "python"


def grade(python: Path, course: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JUPYTER_CONFIG_PATH")}
    return subprocess.run([str(python), "-I", "-m", "trainsys.autograde", "--course", str(course), "--jobs", "2",
                           "--timeout", "10", "--no-feedback", *extra], env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``(python, course)``: the clone's interpreter and a one-lesson course with its release, no submissions."""
    root = tmp_path_factory.mktemp("anywhere") / "a course"
    assert str(root).startswith("/tmp/")
    python = clone_under(root)
    return python, make_course(root / "class")


def test_a_course_cloned_under_tmp_in_a_path_with_a_space_grades_correctly(clone: tuple[Path, Path]) -> None:
    python, course = clone
    submit(course, "solved", ASSIGNMENT, {f"{STEM}.ipynb": {FUNCTION: solution()}})
    submit(course, "wrong", ASSIGNMENT, {f"{STEM}.ipynb": {FUNCTION: WRONG}})
    run = grade(python, course)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "self-test passed" in run.stdout
    with (course / "reports" / "summary.csv").open() as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert float(rows["solved"]["score"]) == 5.0, rows["solved"]
    assert float(rows["wrong"]["score"]) == 0.0, rows["wrong"]
    assert "could not be confirmed" not in rows["solved"]["flags"] + rows["wrong"]["flags"], rows


@pytest.mark.skipif(os.geteuid() != 0, reason="hiding a folder from the sandbox's own user needs root")
def test_a_setup_the_sandbox_cannot_see_stops_before_anyone_is_graded(clone: tuple[Path, Path],
                                                                        tmp_path: Path) -> None:
    """The clone's venv readable by its owner only (a clone made with umask 077): the sandbox's user
    cannot start its Python. The self-test fails, names the folder, and nobody gets a grade."""
    python, course = clone
    broken = copy_course(course, tmp_path / "class")
    submit(broken, "solved", ASSIGNMENT, {f"{STEM}.ipynb": {FUNCTION: solution()}})
    venv = python.parent.parent
    venv.chmod(0o700)
    try:
        run = grade(python, broken)
    finally:
        venv.chmod(0o755)
    assert run.returncode == 4, run.stdout[-2000:] + run.stderr[-2000:]
    assert "self-test failed, so nobody was graded" in run.stderr
    assert "the reference answer of 04_relu_forward.ipynb should have passed" in run.stderr
    assert f"cannot see or read {venv}" in run.stderr, run.stderr[-2000:]
    assert not (broken / "autograded").exists() and not (broken / "reports" / "summary.csv").exists()
