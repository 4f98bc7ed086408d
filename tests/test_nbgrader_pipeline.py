"""The nbgrader path from an authored lesson to a graded student notebook.

1. ``notebooks/`` is exactly what ``nbgrader generate_assignment`` makes from ``solutions/`` today
   (a stale release fails), and it leaks neither solutions nor hidden tests.
2. In a throw-away course directory, one fake student submits the solutions and another the
   untouched release; ``nbgrader autograde`` gives full marks and zero.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def _env(course: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        JUPYTER_CONFIG_PATH=str(ROOT / "autograder"),
        NBGRADER_COURSE_ROOT=str(course),
        NBGRADER_DB_URL=f"sqlite:///{course / 'gradebook.db'}",
        PYDEVD_DISABLE_FILE_VALIDATION="1",
    )
    return env


def _nbgrader(course: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    result = subprocess.run([str(BIN / "nbgrader"), *args], cwd=course, env=_env(course),
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh course directory holding a copy of solutions/ and a release generated from it."""
    root = tmp_path_factory.mktemp("course")
    shutil.copytree(ROOT / "solutions", root / "solutions")
    for assignment in ASSIGNMENTS:
        _nbgrader(root, "generate_assignment", assignment, "--force")
    return root


def _canonical(path: Path) -> str:
    return json.dumps(json.loads(path.read_text()), sort_keys=True, indent=1)


def test_release_notebooks_are_fresh(course: Path) -> None:
    for assignment in ASSIGNMENTS:
        fresh = sorted(p.name for p in (course / "notebooks" / assignment).glob("*.ipynb"))
        committed = sorted(p.name for p in (ROOT / "notebooks" / assignment).glob("*.ipynb"))
        assert fresh == committed, f"notebooks/{assignment} is stale: run `make release`"
        for name in fresh:
            assert _canonical(course / "notebooks" / assignment / name) == _canonical(
                ROOT / "notebooks" / assignment / name
            ), f"notebooks/{assignment}/{name} is stale: run `make release`"


def test_release_hides_solutions_and_hidden_tests() -> None:
    for path in sorted((ROOT / "notebooks").glob("*/*.ipynb")):
        text = path.read_text()
        nb = nbformat.read(path, as_version=4)
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "trainsys.grading import"):
            assert marker not in text, f"{path.name}: the release shows {marker!r}"
        answers = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
        assert len(answers) == 1 and "raise NotImplementedError()" in answers[0].source


def _student_copy(course: Path, student: str, assignment: str, solved: bool) -> None:
    """Submit the release, with each answer cell filled from the solution when ``solved``."""
    target = course / "submitted" / student / assignment
    target.mkdir(parents=True)
    for release in sorted((course / "notebooks" / assignment).glob("*.ipynb")):
        nb = nbformat.read(release, as_version=4)
        if solved:
            source = nbformat.read(course / "solutions" / assignment / release.name, as_version=4)
            answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in source.cells
                       if c.metadata.get("nbgrader", {}).get("solution")}
            for cell in nb.cells:
                grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
                if cell.metadata.get("nbgrader", {}).get("solution"):
                    cell.source = answers[grade_id]
        nbformat.write(nb, target / release.name)


@pytest.mark.slow
def test_autograde_gives_full_marks_to_solutions_and_zero_to_the_release(course: Path) -> None:
    from nbgrader.api import Gradebook

    for assignment in ASSIGNMENTS:
        _student_copy(course, "solved_student", assignment, solved=True)
        _student_copy(course, "blank_student", assignment, solved=False)
        _nbgrader(course, "autograde", assignment, "--create")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for assignment in ASSIGNMENTS:
            solved = gb.find_submission(assignment, "solved_student")
            blank = gb.find_submission(assignment, "blank_student")
            lessons = len(list((ROOT / "solutions" / assignment).glob("*.ipynb")))
            assert solved.max_score == 5 * lessons
            per_notebook = {nb.name: (nb.score, nb.max_score) for nb in solved.notebooks}
            assert solved.score == solved.max_score, f"solutions lost points: {per_notebook}"
            assert blank.score == 0, {nb.name: nb.score for nb in blank.notebooks}
