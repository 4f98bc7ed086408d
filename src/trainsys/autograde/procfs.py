"""What the grader reads about a student's processes from ``/proc``: numbers the student's code cannot touch.

Two readers use them: :class:`~trainsys.autograde.isolation.StudentProcess` measures the peak memory of one
call (``VmHWM`` after a reset through ``clear_refs``), and :class:`~trainsys.autograde.sandbox.MemoryCap`
sums the memory of a sandbox's whole process tree. Every reading of a process that has gone raises
``OSError`` (or returns the documented empty value where a reader must not fail).
"""

from __future__ import annotations

import os
import resource
from pathlib import Path


def children(pid: int, task: int | str | None = None) -> list[int]:
    """The pids of the children started by thread ``task`` of ``pid`` (default: its main thread).

    Raises ``OSError`` when the process is gone or not readable, ``ValueError`` on a malformed list.
    """
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid if task is None else task}/children").read_text().split()]


def start_time(pid: int) -> int:
    """When ``pid`` started, in clock ticks since boot (field 22 of ``/proc/<pid>/stat``); raises ``OSError``."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[19])  # after the command name, which may hold spaces


def status_bytes(pid: int, field: str) -> int:
    """A memory field of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``, …) in bytes.

    Raises ``OSError`` when the process is gone, ``ValueError`` when ``field`` is not there.
    """
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024  # the kernel writes kB (KiB)
    raise ValueError(f"no {field} in /proc/{pid}/status")


def reset_peak(pid: int) -> int | None:
    """Reset the process's peak resident set to its current one; return that in bytes (``None``: not allowed)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return status_bytes(pid, "VmRSS")
    except (OSError, ValueError):
        return None


def peak(pid: int) -> int | None:
    """The process's peak resident set (``VmHWM``) in bytes since it started or since :func:`reset_peak`;
    ``None`` when it cannot be read."""
    try:
        return status_bytes(pid, "VmHWM")
    except (OSError, ValueError):
        return None


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants alive now (from the children of every thread); ``[]`` once it is gone."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        found.append(current)
        for task in tasks:
            try:
                todo += children(current, task)
            except (OSError, ValueError):
                continue
    return found


def proportional_size(pid: int) -> int:
    """Bytes of memory ``pid`` holds: its ``Pss`` (shared pages split between their sharers), else its
    resident set; 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 0
