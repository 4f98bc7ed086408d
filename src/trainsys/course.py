"""The course directory as nbgrader sees it, for tests, benchmarks and instructors' scripts.

The repository is an nbgrader course: sources in ``solutions/``, releases in ``notebooks/``, the
configuration in ``autograder/nbgrader_config.py``. These helpers run nbgrader on the repository or on
a throw-away copy of it (``NBGRADER_COURSE_ROOT``), and make fake submissions from the sources.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import nbformat

from trainsys._paths import BIN, REPO  # noqa: F401 - BIN re-exported: the course's tools import it from here
from trainsys import notebook
from trainsys.autograde import launch
from trainsys.autograde.launch import nbgrader_env  # noqa: F401 - re-exported: the course's tools import it from here
from trainsys.syllabus import markdown_words


def assignments(root: Path = REPO) -> list[str]:
    """Assignment ids: the folders of ``solutions/`` that hold lesson notebooks."""
    return sorted(p.name for p in (root / "solutions").iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def run_nbgrader(course: Path, command: str, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    """Run ``nbgrader <command> <args>`` on ``course`` (:func:`trainsys.autograde.launch.nbgrader`); raise
    ``RuntimeError`` with its output if it fails, ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
    result = launch.nbgrader(course, command, *args, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join((command, *args))} failed ({result.returncode}):\n"
                           f"{result.stdout}\n{result.stderr}")
    return result


def generate_releases(course: Path, names: list[str] | None = None, timeout: float = 1800) -> None:
    """``nbgrader generate_assignment NAME --force`` for every assignment of ``course`` (or ``names``).

    One Python process runs nbgrader's own API for all of them
    (:func:`trainsys.autograde.launch.generate_releases_here`, which says why): the release is the
    command's, byte for byte (a test compares), and nbgrader starts once instead of per assignment.
    Raises ``ValueError`` naming unknown ``names``, ``RuntimeError`` with nbgrader's log when an assignment
    fails.
    """
    names = assignments(course) if names is None else list(names)
    unknown = sorted(set(names) - set(assignments(course)))
    if unknown:
        raise ValueError(f"names must be assignments of {course} ({assignments(course)}), got unknown {unknown}")
    result = launch.run_trusted(course, launch.__name__, "generate", *names, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"generating the releases of {names} failed ({result.returncode}):\n"
                           f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")


def make_course_copy(target: Path) -> Path:
    """Copy ``solutions/`` into ``target`` and generate a release there, as an instructor would."""
    target.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "solutions", target / "solutions", dirs_exist_ok=True)
    generate_releases(target)
    return target


def answer_sources(source_notebook: Path) -> dict[str, str]:
    """``grade_id → source`` of the answer cells of an authored notebook (the reference solutions)."""
    return notebook.answer_sources(nbformat.read(source_notebook, as_version=4))


def submit(course: Path, student: str, assignment: str, answers: dict[str, dict[str, str]] | None = None) -> Path:
    """Place a submission for ``student``: the release, with answer cells replaced from ``answers``.

    ``answers`` maps a notebook file name to ``{grade_id: source}``; notebooks it does not name are
    submitted untouched (their stubs still raise ``NotImplementedError``).
    """
    target = course / "submitted" / student / assignment
    target.mkdir(parents=True, exist_ok=True)
    for release in sorted((course / "notebooks" / assignment).glob("*.ipynb")):
        nb = nbformat.read(release, as_version=4)
        notebook.replace_sources(nb, (answers or {}).get(release.name, {}))
        nbformat.write(nb, target / release.name)
    return target


def solved_answers(course: Path, assignment: str) -> dict[str, dict[str, str]]:
    """The reference answers of every notebook of ``assignment``, for a student who solved them all."""
    return {p.name: answer_sources(p) for p in sorted((course / "solutions" / assignment).glob("*.ipynb"))}


def lesson_words(path: Path) -> int:
    """A lesson's length as a reader meets it: the whitespace-separated words of its markdown cells
    (mathematics included, code cells and the header line with XP and time not)."""
    return markdown_words(nbformat.read(path, as_version=4))
