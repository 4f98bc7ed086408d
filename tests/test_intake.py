"""The intake of a class's submissions (trainsys.autograde.intake), without running nbgrader.

What lands in ``submitted/`` is data: ids are checked before they reach a command line, stray files are
skipped and listed, and staging reads only regular files inside the student's own folder — links, FIFOs
and devices are refused without being opened (a FIFO would block, ``/dev/urandom`` never ends).
The whole class goes through the real grading command in tests/test_hostile_class.py.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import nbformat
import pytest

from trainsys.autograde.intake import (
    MAX_NOTEBOOK_BYTES,
    NOTICE_ID,
    Refused,
    check_id,
    read_notebook,
    stage,
    survey,
)

ASSIGNMENT = "a1"
NOTEBOOK = "01_lesson.ipynb"


def _notebook(answer: str = "x = 1") -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(answer)
    cell.metadata["nbgrader"] = {"grade_id": "answer", "solution": True, "grade": False, "locked": False,
                                 "schema_version": 3}
    cell["id"] = "answer"
    nb.cells = [nbformat.v4.new_markdown_cell("# Lesson"), cell]
    return nb


@pytest.fixture
def course(tmp_path: Path) -> Path:
    root = tmp_path / "course"
    for folder in ("solutions", "notebooks"):
        (root / folder / ASSIGNMENT).mkdir(parents=True)
        nbformat.write(_notebook("raise NotImplementedError()"), root / folder / ASSIGNMENT / NOTEBOOK)
    (root / "solutions" / "later").mkdir()
    (root / "solutions" / "later" / "secret.txt").write_text("SOLUTIONS-SECRET\n")
    return root


def _submit(course: Path, student: str, answer: str = "x = 2") -> Path:
    folder = course / "submitted" / student / ASSIGNMENT
    folder.mkdir(parents=True)
    nbformat.write(_notebook(answer), folder / NOTEBOOK)
    return folder


# --- ids -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["alice", "Bob Smith", "jane.doe", "s12345", "a.b@uni.edu", "x+tag@mail.org",
                                   "Obrien", "a" * 100])
def test_valid_student_ids(value: str) -> None:
    assert check_id(value) is None


@pytest.mark.parametrize("value", ["", "--help", "-x", "[0]*", "a*", "a?", "a[b]", "..", ".", ".hidden", "a/b",
                                   "trailing ", " leading", "a,b", "tab\there", "new\nline", "a" * 101, "é",
                                   "__MACOSX", ".DS_Store"])
def test_invalid_student_ids_are_refused_with_the_pattern(value: str) -> None:
    why = check_id(value)
    assert why is not None and "expected 1-100 ASCII characters" in why


def test_assignment_ids_refuse_what_nbgrader_refuses() -> None:
    assert check_id("m1p1-mlp-core", "assignment") is None and check_id("week 1.2", "assignment") is None
    assert check_id("a+b", "assignment") is not None and check_id("a@b", "assignment") is not None


# --- what is graded ------------------------------------------------------------------------------------------
def test_survey_skips_stray_entries_and_bad_ids_and_keeps_the_class(course: Path) -> None:
    for name in ("alice", "bob smith", "carol.x"):
        _submit(course, name)
    submitted = course / "submitted"
    (submitted / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (submitted / "__MACOSX" / "alice").mkdir(parents=True)
    (submitted / "notes.txt").write_text("hello")
    for bad in ("--help", "[0]*", "..."):
        _submit(course, bad)
    (submitted / "mallory").symlink_to(submitted / "alice")
    os.mkfifo(submitted / "fifo")
    (submitted / "alice" / ".ipynb_checkpoints").mkdir()
    (submitted / "alice" / "unknown-assignment").mkdir()
    (submitted / "alice" / ".DS_Store").write_bytes(b"x")
    (submitted / "alice" / "later").mkdir()  # a real assignment, but not the one asked for below

    result = survey(course)
    assert result.jobs == [("alice", ASSIGNMENT), ("alice", "later"), ("bob smith", ASSIGNMENT),
                           ("carol.x", ASSIGNMENT)]
    skipped = {item.path: item.reason for item in result.skipped}
    assert skipped[".DS_Store"] == "a macOS folder-view file"
    assert skipped["__MACOSX"].startswith("macOS archive metadata")
    assert skipped["notes.txt"] == "a file, not a folder"
    assert skipped["mallory"] == "a symbolic link (not followed)"
    assert skipped["fifo"].startswith("a FIFO")
    for bad in ("--help", "[0]*", "..."):
        assert skipped[bad].startswith("not a valid student id"), bad
    assert skipped["alice/.ipynb_checkpoints"] == "Jupyter's autosave checkpoints"
    assert skipped["alice/unknown-assignment"].startswith("not an assignment of this course")
    assert skipped["alice/.DS_Store"] == "a macOS folder-view file"
    assert survey(course, [ASSIGNMENT]).jobs == [("alice", ASSIGNMENT), ("bob smith", ASSIGNMENT),
                                                 ("carol.x", ASSIGNMENT)]


def test_survey_of_a_course_without_submissions_is_empty(tmp_path: Path) -> None:
    assert survey(tmp_path).jobs == []


# --- staging one submission ------------------------------------------------------------------------------------
def _staged_answer(target: Path) -> str:
    nb = nbformat.read(target / NOTEBOOK, as_version=4)
    return next(c.source for c in nb.cells if c.get("id") == "answer")


def _refused(course: Path, student: str, tmp_path: Path) -> tuple[str, nbformat.NotebookNode]:
    target = tmp_path / "staged" / student
    staged = stage(course, student, ASSIGNMENT, target)
    assert list(staged.refused) == [NOTEBOOK], staged
    nb = nbformat.read(target / NOTEBOOK, as_version=4)
    assert nb.cells[0]["id"] == NOTICE_ID and "Not graded" in nb.cells[0].source
    assert _staged_answer(target) == "raise NotImplementedError()"  # the release stands in: 0 points
    assert any(f.startswith(f"{NOTEBOOK}: refused, not graded:") for f in staged.flags)
    return staged.refused[NOTEBOOK], nb


def test_an_honest_submission_is_staged_unchanged_and_the_original_untouched(course: Path, tmp_path: Path) -> None:
    folder = _submit(course, "alice", "x = 42")
    (folder / "timestamp.txt").write_text("2026-12-01 10:00:00.000000 UTC")
    before = (folder / NOTEBOOK).read_bytes()
    staged = stage(course, "alice", ASSIGNMENT, tmp_path / "staged")
    assert staged.refused == {} and staged.flags == []
    assert _staged_answer(tmp_path / "staged") == "x = 42"
    assert (tmp_path / "staged" / "timestamp.txt").read_text().startswith("2026-12-01")
    assert (folder / NOTEBOOK).read_bytes() == before


@pytest.mark.parametrize("target", ["classmate", "solutions", "outside", "urandom", "dangling"])
def test_a_notebook_that_is_a_link_is_refused_and_never_read(course: Path, tmp_path: Path, target: str) -> None:
    _submit(course, "alice", "SECRET = 'classmate canary'")
    outside = tmp_path / "home" / "instructor.ipynb"
    outside.parent.mkdir()
    nbformat.write(_notebook("SECRET = 'outside canary'"), outside)
    links = {"classmate": course / "submitted" / "alice" / ASSIGNMENT / NOTEBOOK,
             "solutions": course / "solutions" / ASSIGNMENT / NOTEBOOK, "outside": outside,
             "urandom": Path("/dev/urandom"), "dangling": tmp_path / "nowhere.ipynb"}
    folder = course / "submitted" / "eve" / ASSIGNMENT
    folder.mkdir(parents=True)
    (folder / NOTEBOOK).symlink_to(links[target])
    reason, nb = _refused(course, "eve", tmp_path)
    assert reason.startswith("a symbolic link") and "not followed" in reason
    assert "canary" not in json.dumps(nb)


def test_an_assignment_folder_linked_to_solutions_is_refused(course: Path, tmp_path: Path) -> None:
    (course / "submitted" / "eve").mkdir(parents=True)
    (course / "submitted" / "eve" / ASSIGNMENT).symlink_to(course / "solutions" / ASSIGNMENT)
    assert ("eve", ASSIGNMENT) in survey(course).jobs  # graded, so that the student is told
    reason, _ = _refused(course, "eve", tmp_path)
    assert reason == "the assignment folder is a symbolic link (not followed)"


def test_a_fifo_is_refused_without_blocking(course: Path, tmp_path: Path) -> None:
    folder = course / "submitted" / "eve" / ASSIGNMENT
    folder.mkdir(parents=True)
    os.mkfifo(folder / NOTEBOOK)  # opening it for reading would block until a writer came
    reason, _ = _refused(course, "eve", tmp_path)
    assert reason.startswith("a FIFO")


def test_a_device_node_is_refused_without_being_opened(course: Path, tmp_path: Path) -> None:
    folder = course / "submitted" / "eve" / ASSIGNMENT
    folder.mkdir(parents=True)
    try:
        os.mknod(folder / NOTEBOOK, 0o600 | stat.S_IFCHR, os.makedev(1, 9))  # /dev/urandom's numbers
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD (the link to /dev/urandom is tested above)")
    reason, _ = _refused(course, "eve", tmp_path)
    assert reason.startswith("a device")


def test_a_notebook_over_the_size_cap_is_refused_unread(course: Path, tmp_path: Path) -> None:
    folder = _submit(course, "eve")
    with (folder / NOTEBOOK).open("r+b") as handle:
        handle.truncate(200 * 2**20)  # sparse: 200 MiB that take no disk
    reason, _ = _refused(course, "eve", tmp_path)
    assert f"over the {MAX_NOTEBOOK_BYTES // 2**20} MiB limit" in reason and reason.startswith("200.0 MiB")


def test_an_unreadable_notebook_is_refused_with_its_reason(course: Path, tmp_path: Path) -> None:
    folder = course / "submitted" / "eve" / ASSIGNMENT
    folder.mkdir(parents=True)
    (folder / NOTEBOOK).write_text('{"cells": [')
    reason, _ = _refused(course, "eve", tmp_path)
    assert reason.startswith("an unreadable notebook: not UTF-8 JSON")


def test_stray_files_in_the_students_folder_are_skipped_and_listed(course: Path, tmp_path: Path) -> None:
    folder = _submit(course, "alice", "x = 3")
    (folder / ".DS_Store").write_bytes(b"x")
    (folder / "__MACOSX").mkdir()
    (folder / ".ipynb_checkpoints").mkdir()
    (folder / "Untitled.ipynb").symlink_to("/dev/urandom")
    os.mkfifo(folder / "pipe")
    staged = stage(course, "alice", ASSIGNMENT, tmp_path / "staged")
    assert staged.refused == {} and _staged_answer(tmp_path / "staged") == "x = 3"
    assert sorted(staged.flags) == ["skipped .DS_Store (a macOS folder-view file)",
                                    "skipped .ipynb_checkpoints/ (Jupyter's autosave checkpoints)",
                                    "skipped Untitled.ipynb (not a notebook of this assignment)",
                                    "skipped __MACOSX/ (macOS archive metadata (a zip made on a Mac))",
                                    "skipped pipe (not a notebook of this assignment)"]
    assert sorted(p.name for p in (tmp_path / "staged").iterdir()) == [NOTEBOOK]


def test_a_hard_link_is_graded_and_flagged(course: Path, tmp_path: Path) -> None:
    _submit(course, "alice", "x = 7")
    folder = course / "submitted" / "eve" / ASSIGNMENT
    folder.mkdir(parents=True)
    os.link(course / "submitted" / "alice" / ASSIGNMENT / NOTEBOOK, folder / NOTEBOOK)
    staged = stage(course, "eve", ASSIGNMENT, tmp_path / "staged")
    assert staged.refused == {} and _staged_answer(tmp_path / "staged") == "x = 7"
    assert staged.flags == [f"{NOTEBOOK}: graded, but it is a hard link (2 names for one file): check that no other "
                            "name is a classmate's submission"]


def test_stage_refuses_an_invalid_id(course: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a valid student id"):
        stage(course, "[0]*", ASSIGNMENT, tmp_path / "staged")


# --- notebook formats -------------------------------------------------------------------------------------------
def test_nbformat_3_is_upgraded_keeping_the_grade_ids() -> None:
    v3 = nbformat.writes(nbformat.convert(_notebook("x = 5"), 3), version=3)
    assert json.loads(v3)["nbformat"] == 3 and "worksheets" in json.loads(v3)
    nb, changes = read_notebook(v3.encode())
    assert changes == ["upgraded from nbformat 3.0 to 4.5"]
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "answer")
    assert answer.source == "x = 5" and (nb.nbformat, nb.nbformat_minor) == (4, 5)


def test_repeated_cell_ids_are_repaired_and_reported() -> None:
    # nbformat renames a repeated id itself while reading (a warning only): the repair must still be reported
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("a"), nbformat.v4.new_code_cell("b")])
    nb.cells[1].id = nb.cells[0].id
    repaired, changes = read_notebook(json.dumps(nb).encode())
    assert len({c.id for c in repaired.cells}) == 2
    assert any("repaired 1 duplicated cell id" in change for change in changes), changes


def test_an_older_minor_version_of_4_gets_cell_ids() -> None:
    raw = json.loads(nbformat.writes(_notebook("x = 6")))
    raw["nbformat_minor"] = 2
    for cell in raw["cells"]:
        del cell["id"]
    nb, changes = read_notebook(json.dumps(raw).encode())
    assert changes == ["upgraded from nbformat 4.2 to 4.5"]
    assert all(cell.get("id") for cell in nb.cells)
    nbformat.validate(nb)


@pytest.mark.parametrize("data, why", [(b"\xff\xfe", "not UTF-8 JSON"), (b"[1, 2]", "not an object"),
                                       (b'{"nbformat": 9, "cells": []}', "nbformat cannot read")])
def test_what_nbformat_cannot_read_is_refused(data: bytes, why: str) -> None:
    with pytest.raises(Refused, match=why):
        read_notebook(data)


@pytest.mark.parametrize("value", ["..", "--help", "[0]*", "a+b"])
def test_the_command_line_refuses_a_bad_assignment_id(course: Path, value: str, capsys) -> None:
    from trainsys.autograde.__main__ import main

    (course / "submitted").mkdir()
    with pytest.raises(SystemExit) as exit_:
        main(["--course", str(course), f"--assignment={value}"])
    assert exit_.value.code == 2 and "--assignment: not a valid assignment id" in capsys.readouterr().err
