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

from trainsys._paths import BIN, REPO  # re-exported: the course's tools import them from here
from trainsys.syllabus import markdown_words


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


def generate_releases(course: Path, names: list[str] | None = None, timeout: float = 1800) -> None:
    """``nbgrader generate_assignment NAME --force`` for every assignment of ``course`` (or ``names``).

    One Python process runs nbgrader's own API (``NbGraderAPI.generate_assignment``, what the command
    calls) for all of them: the release is the command's, byte for byte (a test compares), and the
    start-up of nbgrader — most of a small assignment's time — is paid once instead of per assignment.
    Raises ``RuntimeError`` with nbgrader's log when an assignment fails.
    """
    names = assignments(course) if names is None else list(names)
    unknown = sorted(set(names) - set(assignments(course)))
    if unknown:
        raise ValueError(f"names must be assignments of {course} ({assignments(course)}), got unknown {unknown}")
    result = subprocess.run([str(BIN / "python"), "-m", "trainsys.course", "generate", *names], cwd=course,
                            env=nbgrader_env(course), capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"generating the releases of {names} failed ({result.returncode}):\n"
                           f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")


def _generate(names: list[str]) -> int:
    """In the nbgrader environment :func:`generate_releases` sets up: generate each release; 0 if all succeed."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.apps.nbgraderapp import NbGraderApp

    app = NbGraderApp()
    app.initialize([])  # reads autograder/nbgrader_config.py through JUPYTER_CONFIG_PATH, as the command does
    api = NbGraderAPI(config=app.config)
    for name in names:
        outcome = api.generate_assignment(name, force=True)
        if not outcome["success"]:
            print(f"nbgrader generate_assignment {name} failed:\n{outcome.get('error', '')}\n{outcome.get('log', '')}",
                  file=sys.stderr)
            return 1
    return 0


def make_course_copy(target: Path) -> Path:
    """Copy ``solutions/`` into ``target`` and generate a release there, as an instructor would."""
    target.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "solutions", target / "solutions", dirs_exist_ok=True)
    generate_releases(target)
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
    return markdown_words(nbformat.read(notebook, as_version=4))


if __name__ == "__main__":  # python -m trainsys.course generate NAME… (run by generate_releases)
    if len(sys.argv) < 3 or sys.argv[1] != "generate":
        sys.exit("usage: python -m trainsys.course generate ASSIGNMENT [ASSIGNMENT …]")
    sys.exit(_generate(sys.argv[2:]))
