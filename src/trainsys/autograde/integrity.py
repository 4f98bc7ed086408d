"""Is the grader still the grader? Fingerprints of everything that decides a grade.

The sandbox keeps student code away from the course's files; this is the second line: before every
job the grading command fingerprints

- the package source (``src/trainsys``: the checks, the reference, this grader) by content;
- the nbgrader configuration (``autograder/``, and an ``nbgrader_config.py`` in the course root) by
  content;
- the Python environment's ``site-packages`` by name, size and modification time of every file, and
  by content for the files Python runs at start-up (``*.pth``, ``sitecustomize.py``,
  ``usercustomize.py``). Bytecode caches (``__pycache__``) are left out: Python writes them whenever a
  module is first imported, which is no change to the grader,

and stops the run with a message naming what changed when a fingerprint differs from the one taken
when the run started.
"""

from __future__ import annotations

import hashlib
import os
import site
import sys
from pathlib import Path

from trainsys.course import REPO

STARTUP_FILES = (".pth",)
STARTUP_NAMES = ("sitecustomize.py", "usercustomize.py")


class GraderChanged(RuntimeError):
    """A file that decides grades changed while the class was being graded."""


def _content_digest(root: Path, suffixes: tuple[str, ...] = ()) -> str:
    digest = hashlib.sha256()
    if not root.exists():
        return "absent"
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if suffixes and not name.endswith(suffixes):
                continue
            path = Path(dirpath) / name
            digest.update(str(path.relative_to(root)).encode() + b"\0")
            try:
                digest.update(path.read_bytes())
            except OSError as exc:
                digest.update(f"unreadable: {exc}".encode())
    return digest.hexdigest()


def _listing_digest(root: Path) -> str:
    """Names, sizes and modification times of every file below ``root``; contents of start-up files."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            digest.update(f"{path}\0{info.st_size}\0{info.st_mtime_ns}\0".encode())
            if name.endswith(STARTUP_FILES) or name in STARTUP_NAMES:
                try:
                    digest.update(Path(path).read_bytes())
                except OSError:
                    pass
    return digest.hexdigest()


def site_packages() -> list[Path]:
    """The environment's site-packages folders (the user's too, which ``python -I`` ignores anyway)."""
    folders = {Path(p) for p in site.getsitepackages() if Path(p).is_dir()}
    user = Path(site.getusersitepackages()) if hasattr(site, "getusersitepackages") else None
    if user is not None and user.is_dir():
        folders.add(user)
    return sorted(folders)


def fingerprint(course: Path) -> dict[str, str]:
    """``what → digest`` for every file set that decides grades."""
    prints = {
        "the package source (src/trainsys)": _content_digest(REPO / "src" / "trainsys", (".py",)),
        "the nbgrader configuration (autograder/)": _content_digest(REPO / "autograder", (".py", ".json")),
        f"{course / 'nbgrader_config.py'}": _content_digest(course / "nbgrader_config.py"),
        "the Python interpreter": _content_digest(Path(sys.executable).resolve()),
    }
    for folder in site_packages():
        prints[f"site-packages ({folder})"] = _listing_digest(folder)
    return prints


def assert_unchanged(before: dict[str, str], course: Path) -> None:
    """Raise :class:`GraderChanged` naming every file set whose fingerprint differs from ``before``."""
    now = fingerprint(course)
    changed = [what for what in sorted(set(before) | set(now)) if before.get(what) != now.get(what)]
    if changed:
        raise GraderChanged("the grader changed during the run: " + "; ".join(changed)
                            + ". Grading stopped: restore these files (e.g. `git status`, reinstall .venv) "
                              "and grade again with --force.")
