"""The nbgrader path from an authored lesson to a graded student notebook.

1. ``notebooks/`` is exactly what ``nbgrader generate_assignment`` makes from ``solutions/`` today
   (a stale release fails), and it leaks neither solutions nor hidden tests.
2. In a throw-away course directory, one fake student submits the solutions and another the
   untouched release; ``nbgrader autograde`` gives full marks and zero.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from trainsys.course import REPO, assignments, generate_releases, make_course_copy, run_nbgrader, solved_answers, submit

ASSIGNMENTS = assignments()
# nbgrader's autograde end to end, unsandboxed, on the shortest PyTorch part (every lesson's cells already run,
# hidden checks included, under nbval; the pipeline itself is the same for every part, and the NumPy lessons
# of Part 1 are graded, sandboxed, for whole classes by tests/test_autograde_class.py and test_hostile_class.py)
AUTOGRADED = ["m3p1-model-dataset"]


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh course directory holding a copy of solutions/ and a release generated from it."""
    return make_course_copy(tmp_path_factory.mktemp("course"))


def _canonical(path: Path) -> str:
    return json.dumps(json.loads(path.read_text()), sort_keys=True, indent=1)


def test_release_notebooks_are_fresh(course: Path) -> None:
    for assignment in ASSIGNMENTS:
        fresh = sorted(p.name for p in (course / "notebooks" / assignment).glob("*.ipynb"))
        committed = sorted(p.name for p in (REPO / "notebooks" / assignment).glob("*.ipynb"))
        assert fresh == committed, f"notebooks/{assignment} is stale: run `make release`"
        for name in fresh:
            assert _canonical(course / "notebooks" / assignment / name) == _canonical(
                REPO / "notebooks" / assignment / name
            ), f"notebooks/{assignment}/{name} is stale: run `make release`"


def test_generating_releases_refuses_unknown_assignments_and_reports_nbgrader_failures(tmp_path: Path) -> None:
    (tmp_path / "solutions" / "broken").mkdir(parents=True)
    (tmp_path / "solutions" / "broken" / "01_lesson.ipynb").write_text("{ not a notebook")
    with pytest.raises(ValueError, match=r"names must be assignments of .*unknown \['nope'\]"):
        generate_releases(tmp_path, ["nope"])
    with pytest.raises(RuntimeError, match=r"(?s)generating the releases of \['broken'\] failed.*broken"):
        generate_releases(tmp_path)
    assert not list((tmp_path / "notebooks").glob("broken/*.ipynb")), "a failed release must not look generated"


def test_release_hides_solutions_and_hidden_tests() -> None:
    for path in sorted((REPO / "notebooks").glob("*/*.ipynb")):
        text = path.read_text()
        nb = nbformat.read(path, as_version=4)
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "trainsys.grading import"):
            assert marker not in text, f"{path.name}: the release shows {marker!r}"
        answers = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
        assert len(answers) == 1 and "raise NotImplementedError()" in answers[0].source


@pytest.mark.slow
def test_autograde_gives_full_marks_to_solutions_and_zero_to_the_release(course: Path) -> None:
    from nbgrader.api import Gradebook

    for assignment in AUTOGRADED:
        submit(course, "solved_student", assignment, solved_answers(course, assignment))
        submit(course, "blank_student", assignment)
        run_nbgrader(course, "autograde", assignment, "--create")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for assignment in AUTOGRADED:
            solved = gb.find_submission(assignment, "solved_student")
            blank = gb.find_submission(assignment, "blank_student")
            lessons = len(list((REPO / "solutions" / assignment).glob("*.ipynb")))
            assert solved.max_score == 5 * lessons
            per_notebook = {nb.name: (nb.score, nb.max_score) for nb in solved.notebooks}
            assert solved.score == solved.max_score, f"solutions lost points: {per_notebook}"
            assert blank.score == 0, {nb.name: nb.score for nb in blank.notebooks}


def test_every_test_cell_of_every_release_calls_the_stubbed_function() -> None:
    """So the untouched release scores 0 everywhere: each graded cell reaches the NotImplementedError."""
    for path in sorted((REPO / "notebooks").glob("*/*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
        function = answer.source.split("def ", 1)[1].split("(", 1)[0]
        source = nbformat.read(REPO / "solutions" / path.parent.name / path.name, as_version=4)
        for cell in source.cells:
            if cell.metadata.get("nbgrader", {}).get("grade"):
                assert f"{function}(" in cell.source, f"{path.name}: test cell {cell.id} never calls {function}"
