"""Submissions are data: which folders are graded, and the clean copy of a submission nbgrader grades.

``submitted/`` is written by students, an LMS export or an unzip tool, so nothing in it is trusted. This
module decides what is graded (:func:`survey`) and makes, for each job, a staged copy that holds only what
the grader read itself (:func:`stage`); nbgrader and the trusted re-check grade that copy, never the
student's folder, and the student's folder is never changed.

**Ids.** A student id must match :data:`STUDENT_ID` and an assignment id :data:`ASSIGNMENT_ID`: 1 to 100
characters, ASCII letters and digits first, then letters, digits, ``_ . -``, spaces (not last), and ``@ +``
in student ids (e-mail addresses; nbgrader refuses ``+`` in assignment ids). So no id starts with ``-``
(an option), is ``.``/``..`` or hidden, holds a glob metacharacter (``* ? [ ]``: nbgrader's ``--student``
is a glob), a path separator, a comma (nbgrader's exclude lists) or a control character, or ends with a
space (nbgrader strips it, and would then grade another folder). A folder whose name breaks the pattern is
skipped and listed in the run's report, never graded.

**What is read.** Only the notebooks the assignment releases (its ``solutions/<assignment>/*.ipynb`` names)
and ``timestamp.txt``, and only regular files directly inside the student's own assignment folder: every
folder on the way is opened with ``O_NOFOLLOW`` relative to its parent's descriptor, every file is checked
with ``lstat`` and opened with ``O_NOFOLLOW | O_NONBLOCK``, and the opened file must be the regular file
that was checked. A symbolic link (to a classmate's notebook, to ``solutions/``, out of the course, to
``/dev/urandom``), a FIFO, a device or a socket is refused without being opened; so is a notebook over
:data:`MAX_NOTEBOOK_BYTES` (read up to that many bytes plus one, never more). A hard link is a regular file
(it cannot name a folder, nor cross file systems) and is graded, flagged for the instructor: collection tools
(``nbgrader collect``, ``zip_collect``) write copies, so a second name may be a classmate's file. A refused or unreadable notebook
is replaced in the staged copy by the release with a notice cell at its top, so nbgrader scores it 0 and
the student's feedback page says why; the instructor reads the same reason among the job's flags.

**What is skipped.** Folders and files that are not a student (``.DS_Store``, ``__MACOSX/``, ``Thumbs.db``,
a bad id, a file), not an assignment of this course (``.ipynb_checkpoints/``, an unknown name), or not a
notebook of the assignment are skipped and listed in the run's report (``reports/intake.csv``) or in the
job's flags; none stops the class.

**Notebooks.** nbformat 3 and older minor versions of 4 are upgraded with nbformat's own converters
(``nbformat.reads(..., as_version=4)``, ``nbformat.v4.upgrade``) and validated; duplicated cell ids and
duplicated grade ids (a copy-pasted test cell) are repaired, the released cell (else the first copy) kept.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from trainsys.notebook import drop_nbgrader, grade_id

#: A student id: 1-100 characters, see the module docstring.
STUDENT_ID = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.@+ -]{0,98}[A-Za-z0-9_.@+-])?")
#: An assignment id: as a student id without ``@`` and ``+``.
ASSIGNMENT_ID = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_. -]{0,98}[A-Za-z0-9_.-])?")
#: The largest submitted notebook read (bytes). The course's largest notebook with outputs is ~40 kB;
#: nbgrader clears saved outputs before running, so a bigger file is a flood, not an answer.
MAX_NOTEBOOK_BYTES = 32 * 2**20
MAX_TIMESTAMP_BYTES = 1024
TIMESTAMP = "timestamp.txt"

#: What operating systems and tools leave in upload folders.
SYSTEM_FILES = {
    ".DS_Store": "a macOS folder-view file", "__MACOSX": "macOS archive metadata (a zip made on a Mac)",
    ".ipynb_checkpoints": "Jupyter's autosave checkpoints", "Thumbs.db": "a Windows thumbnail cache",
    "desktop.ini": "a Windows folder-view file", ".Trashes": "a macOS trash folder",
    ".Spotlight-V100": "a macOS search index", ".fseventsd": "a macOS event log",
}


def shown(name: str) -> str:
    """A file name as it may be printed: as it is when printable, else escaped (``ascii``), at most 80 chars."""
    return (name if name.isprintable() else ascii(name))[:80]


@dataclass(frozen=True)
class Skipped:
    """A path under ``submitted/`` that is not graded, and why."""

    path: str  # relative to submitted/
    reason: str


@dataclass
class Survey:
    """What is graded: ``(student, assignment)`` jobs in a fixed order, and what was skipped."""

    jobs: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


def check_id(value: str, kind: str = "student") -> str | None:
    """``None`` when ``value`` is a valid ``kind`` (``"student"`` or ``"assignment"``) id, else why not."""
    pattern = STUDENT_ID if kind == "student" else ASSIGNMENT_ID
    if pattern.fullmatch(value):
        return None
    allowed = "letters, digits, _ . - @ + and inner spaces" if kind == "student" else \
        "letters, digits, _ . - and inner spaces"
    return (f"not a valid {kind} id ({value[:60]!r}): expected 1-100 ASCII characters, a letter or digit first, "
            f"then {allowed}")


def _why_not_a_folder(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link (not followed)"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe), not a file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device, not a file"
    if stat.S_ISSOCK(mode):
        return "a socket, not a file"
    return "a file, not a folder" if stat.S_ISREG(mode) else "not a regular file or folder"


def system_file(name: str) -> str | None:
    """What operating system or tool left ``name`` behind; ``None`` for any other name."""
    return SYSTEM_FILES.get(name) or ("a macOS resource fork (._ file)" if name.startswith("._") else None)


def _why_skipped(name: str, mode: int, kind: str) -> str | None:
    if (what := system_file(name)) is not None:
        return what
    if not stat.S_ISDIR(mode):
        return _why_not_a_folder(mode)
    return check_id(name, kind)


def course_assignments(course: Path) -> set[str]:
    """The assignments of the course: the folders of ``solutions/`` (nbgrader's source directory)."""
    source = course / "solutions"
    return {p.name for p in source.iterdir() if p.is_dir() and not p.is_symlink()} if source.is_dir() else set()


def survey(course: Path, assignments: list[str] | None = None) -> Survey:
    """Every ``(student, assignment)`` to grade under ``course/submitted``, sorted, and what was skipped.

    Nothing below ``submitted/`` is followed: a student folder that is a link is skipped; an assignment
    folder that is a link is a job (its notebooks are refused by :func:`stage`, so the student is told).
    """
    result = Survey()
    root = course / "submitted"
    if not root.is_dir():
        return result
    known = course_assignments(course)
    for student_entry in sorted(os.scandir(root), key=lambda e: e.name):
        name = student_entry.name
        why = _why_skipped(name, student_entry.stat(follow_symlinks=False).st_mode, "student")
        if why is not None:
            result.skipped.append(Skipped(shown(name), why))
            continue
        try:
            entries = sorted(_scandir_nofollow(root / name), key=lambda e: e[0])
        except OSError as exc:
            result.skipped.append(Skipped(shown(name), f"cannot be listed ({exc.strerror})"))
            continue
        for assignment, mode in entries:
            relative = f"{shown(name)}/{shown(assignment)}"
            if (what := system_file(assignment)) is not None:
                result.skipped.append(Skipped(relative, what))
            elif stat.S_ISLNK(mode) and assignment in known:
                if assignments is None or assignment in assignments:
                    result.jobs.append((name, assignment))  # refused in stage(), with the student told why
            elif not stat.S_ISDIR(mode):
                result.skipped.append(Skipped(relative, _why_not_a_folder(mode)))
            elif (why := check_id(assignment, "assignment")) is not None:
                result.skipped.append(Skipped(relative, why))
            elif assignment not in known:
                result.skipped.append(Skipped(relative, "not an assignment of this course (no solutions/"
                                                        f"{shown(assignment)}/)"))
            elif assignments is None or assignment in assignments:
                result.jobs.append((name, assignment))
    return result


def _scandir_nofollow(folder: Path) -> list[tuple[str, int]]:
    """``(name, lstat mode)`` of every entry of ``folder``, which must not itself be a link."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        return [(name, os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode) for name in os.listdir(fd)]
    finally:
        os.close(fd)


# --- staging one submission -------------------------------------------------------------------------------
class Refused(Exception):
    """A submitted file the grader does not read; the message is shown to the student and the instructor."""


@dataclass
class Staged:
    """What :func:`stage` did: ``flags`` for the instructor (the summary), ``refused`` notebooks with why."""

    flags: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)


def _open_folder(parent_fd: int, name: str, label: str) -> int:
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            mode = os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode
            raise Refused(f"the {label} folder is {_why_not_a_folder(mode)}") from None
        raise Refused(f"the {label} folder cannot be opened ({exc.strerror})") from None


def read_regular(folder_fd: int, name: str, limit: int) -> bytes:
    """The bytes of ``name``, a regular file directly in the folder ``folder_fd``, at most ``limit`` bytes.

    Raises :class:`Refused` (never blocks, never follows) for a link, FIFO, device, socket or folder, a file
    replaced between the check and the open, and a file over ``limit`` bytes.
    """
    before = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    if stat.S_ISLNK(before.st_mode):
        try:
            target = os.readlink(name, dir_fd=folder_fd)
        except OSError:
            target = "?"
        raise Refused(f"a symbolic link (to {target[:120]!r}): links are not followed; submit the file itself")
    if not stat.S_ISREG(before.st_mode):
        raise Refused(f"{_why_not_a_folder(before.st_mode)}: only regular files are read")
    if before.st_size > limit:
        raise Refused(f"{before.st_size / 2**20:.1f} MiB, over the {limit / 2**20:.0f} MiB limit for a submitted "
                      "file (clear its outputs: Kernel > Restart Kernel and Clear All Outputs, save, submit again)")
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder_fd)
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
            raise Refused("replaced while it was being read")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(2**20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise Refused(f"over the {limit / 2**20:.0f} MiB limit for a submitted file")
    return b"".join(chunks)


def read_notebook(data: bytes) -> tuple[nbformat.NotebookNode, list[str]]:
    """A submitted notebook's bytes as a valid nbformat 4.5 notebook, and what was changed to get there.

    Raises :class:`Refused` for text that is not UTF-8 JSON of a notebook nbformat can read.
    """
    try:
        text = data.decode("utf-8")
        raw = json.loads(text)
    except (UnicodeDecodeError, ValueError) as exc:
        raise Refused(f"an unreadable notebook: not UTF-8 JSON ({type(exc).__name__}: {str(exc)[:120]})") from None
    if not isinstance(raw, dict):
        raise Refused("an unreadable notebook: its JSON is not an object")
    version, minor = raw.get("nbformat"), raw.get("nbformat_minor", 0)
    changes = []
    # nbformat renames a repeated cell id itself while reading (a DuplicateCellId warning): count them first
    ids = [c.get("id") for c in raw.get("cells", []) if isinstance(c, dict) and isinstance(c.get("id"), str)]
    renamed = len(ids) - len(set(ids))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nb = nbformat.reads(text, as_version=4)  # upgrades nbformat 3 (and older) with nbformat's converters
        if nb.get("nbformat_minor", 0) < nbformat.v4.nbformat_minor:
            nb = nbformat.v4.upgrade(nb, from_version=4, from_minor=nb.get("nbformat_minor", 0))
        if (version, minor) != (4, nbformat.v4.nbformat_minor):
            changes.append(f"upgraded from nbformat {version}.{minor} to 4.{nbformat.v4.nbformat_minor}")
        dupes = renamed + _dedupe_cell_ids(nb) + _dedupe_grade_ids(nb)
        if dupes:
            changes.append(f"repaired {dupes} duplicated cell id(s) or grade id(s), the released (else the first) "
                           "copy kept")
        nbformat.validate(nb)
    except Refused:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever nbformat cannot read is refused, with its reason
        detail = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}" if str(exc) else type(exc).__name__
        raise Refused(f"an unreadable notebook: nbformat cannot read it ({detail})") from None
    return nb, changes


def _dedupe_cell_ids(nb: nbformat.NotebookNode) -> int:
    """Give every cell whose id repeats an earlier one a fresh id; return how many were changed."""
    seen: set[str] = set()
    changed = 0
    for index, cell in enumerate(nb.get("cells", [])):
        cell_id = cell.get("id")
        if cell_id is not None and cell_id in seen:
            cell["id"] = f"{cell_id}-{index}"[:64]
            changed += 1
        if cell_id is not None:
            seen.add(cell["id"])
    return changed


def _dedupe_grade_ids(nb: nbformat.NotebookNode) -> int:
    """A cell repeating another cell's nbgrader grade id (a copy-pasted test cell) becomes a plain code
    cell. The released cell stays the graded one: the copy whose cell id is its grade id (as nbgrader's
    release writes it; a pasted copy gets a new id, and may sit above the answer), else the first copy.
    Return how many were changed."""
    copies: dict[str, list] = {}
    for cell in nb.get("cells", []):
        ident = grade_id(cell)
        if ident is not None:
            copies.setdefault(ident, []).append(cell)
    changed = 0
    for ident, cells in copies.items():
        keep = next((cell for cell in cells if cell.get("id") == ident), cells[0])
        for cell in cells:
            if cell is not keep:
                drop_nbgrader(cell)
                changed += 1
    return changed


NOTICE_ID = "trainsys-intake-notice"


def stand_in(course: Path, assignment: str, name: str, reason: str) -> nbformat.NotebookNode:
    """The release of notebook ``name`` (else an empty notebook) with a notice saying why it was not graded."""
    release = course / "notebooks" / assignment / name
    try:
        nb = nbformat.read(release, as_version=4) if release.is_file() and not release.is_symlink() else None
    except Exception:  # noqa: BLE001 - a broken release still gets the notice
        nb = None
    nb = nb or nbformat.v4.new_notebook()
    notice = nbformat.v4.new_markdown_cell(
        f"**Not graded: your submitted `{name}` was refused** ({reason}). This page shows the released "
        "notebook in its place, scored 0. Submit the notebook itself (a regular `.ipynb` file) and ask your "
        "instructor to grade it again.")
    notice["id"] = NOTICE_ID
    nb.cells.insert(0, notice)
    return nb


def stage(course: Path, student: str, assignment: str, target: Path) -> Staged:
    """Write the gradable copy of ``submitted/<student>/<assignment>`` into ``target`` (a new folder).

    ``student`` and ``assignment`` must be valid ids (:func:`check_id`); raises ``ValueError`` otherwise.
    """
    for value, kind in ((student, "student"), (assignment, "assignment")):
        if (why := check_id(value, kind)) is not None:
            raise ValueError(why)
    result = Staged()
    target.mkdir(parents=True)
    expected = sorted(p.name for p in (course / "solutions" / assignment).glob("*.ipynb"))
    root_fd = os.open(course / "submitted", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    fds = [root_fd]
    try:
        try:
            fds.append(_open_folder(fds[-1], student, "student"))
            fds.append(_open_folder(fds[-1], assignment, "assignment"))
        except Refused as exc:
            for name in expected:
                result.refused[name] = str(exc)
            names = []
        else:
            names = sorted(os.listdir(fds[-1]))
        for name in names:
            if name == TIMESTAMP:
                try:
                    (target / TIMESTAMP).write_bytes(read_regular(fds[-1], name, MAX_TIMESTAMP_BYTES))
                except Refused as exc:
                    result.flags.append(f"skipped {TIMESTAMP}: {exc}")
                continue
            if name not in expected:
                mode = os.stat(name, dir_fd=fds[-1], follow_symlinks=False).st_mode
                what = system_file(name) or "not a notebook of this assignment"
                result.flags.append(f"skipped {shown(name)}{'/' if stat.S_ISDIR(mode) else ''} ({what})")
                continue
            try:
                nb, changes = read_notebook(read_regular(fds[-1], name, MAX_NOTEBOOK_BYTES))
            except Refused as exc:
                result.refused[name] = str(exc)
                continue
            result.flags += [f"{name}: {change}" for change in changes]
            links = os.stat(name, dir_fd=fds[-1], follow_symlinks=False).st_nlink
            if links > 1:  # collection tools write copies; a hard link may share a classmate's file
                result.flags.append(f"{name}: graded, but it is a hard link ({links} names for one file): check that "
                                    "no other name is a classmate's submission")
            nbformat.write(nb, target / name)
    finally:
        for fd in reversed(fds):
            os.close(fd)
    for name, reason in sorted(result.refused.items()):
        result.flags.append(f"{name}: refused, not graded: {reason}")
        nbformat.write(stand_in(course, assignment, name, reason), target / name)
    return result


def write_report(skipped: list[Skipped], path: Path) -> None:
    """``reports/intake.csv``: every path under ``submitted/`` that was not graded, and why."""
    import csv

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["path", "reason"])
        for item in skipped:
            writer.writerow([f"submitted/{item.path}", item.reason])
