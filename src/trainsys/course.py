"""The course directory as nbgrader sees it, for tests, benchmarks and instructors' scripts.

The repository is an nbgrader course: sources in ``solutions/``, releases in ``notebooks/``, the
configuration in ``autograder/nbgrader_config.py``. These helpers run nbgrader on the repository or on
a throw-away copy of it (``NBGRADER_COURSE_ROOT``), and make fake submissions from the sources.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def assignments(root: Path = REPO) -> list[str]:
    """Assignment ids: the folders of ``solutions/`` that hold lesson notebooks."""
    return sorted(p.name for p in (root / "solutions").iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def nbgrader_env(course: Path, db_url: str | None = None) -> dict[str, str]:
    """Environment for nbgrader on ``course``: the repository's config; the gradebook ``db_url``
    (default: SQLite ``gradebook.db`` inside ``course``)."""
    env = dict(os.environ)
    env.update(
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        JUPYTER_CONFIG_PATH=str(REPO / "autograder"),
        NBGRADER_COURSE_ROOT=str(course),
        NBGRADER_DB_URL=db_url or f"sqlite:///{course / 'gradebook.db'}",
        PYDEVD_DISABLE_FILE_VALIDATION="1",
    )
    return env


def run_nbgrader(course: Path, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    """Run ``nbgrader <args>`` on ``course``; raise ``RuntimeError`` with its output if it fails."""
    result = subprocess.run([str(BIN / "nbgrader"), *args], cwd=course, env=nbgrader_env(course),
                            capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def make_course_copy(target: Path) -> Path:
    """Copy ``solutions/`` into ``target`` and generate a release there, as an instructor would."""
    target.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "solutions", target / "solutions", dirs_exist_ok=True)
    for assignment in assignments(target):
        run_nbgrader(target, "generate_assignment", assignment, "--force")
    return target


def answer_sources(source_notebook: Path) -> dict[str, str]:
    """``grade_id → source`` of the answer cells of an authored notebook (the reference solutions)."""
    nb = nbformat.read(source_notebook, as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("solution")}


def submit(course: Path, student: str, assignment: str, answers: dict[str, dict[str, str]] | None = None) -> Path:
    """Place a submission for ``student``: the release, with answer cells replaced from ``answers``.

    ``answers`` maps a notebook file name to ``{grade_id: source}``; notebooks it does not name are
    submitted untouched (their stubs still raise ``NotImplementedError``).
    """
    target = course / "submitted" / student / assignment
    target.mkdir(parents=True, exist_ok=True)
    for release in sorted((course / "notebooks" / assignment).glob("*.ipynb")):
        nb = nbformat.read(release, as_version=4)
        filled = (answers or {}).get(release.name, {})
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id in filled:
                cell.source = filled[grade_id]
        nbformat.write(nb, target / release.name)
    return target


def solved_answers(course: Path, assignment: str) -> dict[str, dict[str, str]]:
    """The reference answers of every notebook of ``assignment``, for a student who solved them all."""
    return {p.name: answer_sources(p) for p in sorted((course / "solutions" / assignment).glob("*.ipynb"))}


def lesson_words(notebook: Path) -> int:
    """A lesson's length as a reader meets it: the whitespace-separated words of its markdown cells
    (mathematics included, code cells and the header line with XP and time not)."""
    from trainsys.syllabus import markdown_words

    return markdown_words(nbformat.read(notebook, as_version=4))
