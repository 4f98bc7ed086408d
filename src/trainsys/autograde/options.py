"""What one class-grading run is told: the course, its parallel jobs and the limits of every process.

:class:`Options` is read by the runner (nbgrader's jobs) and by :mod:`trainsys.autograde.decide` (the
trusted re-check); both start their children through :func:`trainsys.autograde.launch.run_trusted`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Options:
    course: Path
    jobs: int = max(os.cpu_count() or 1, 1)
    timeout: int = 30  # seconds per cell
    memory_limit_mb: int = 6144  # address space of each process of a sandbox (the kernels, the re-check's)
    force: bool = False
    db_url: str | None = None  # None: SQLite gradebook.db in the course root
    sandbox: bool = True  # False only with --no-sandbox: student code then runs with the grader's rights
    sandbox_memory_mb: int | None = None  # all of one sandbox's processes together; None: sandbox_memory_default
    grader_memory_mb: int = 3072  # address space of each trusted process (nbgrader, the re-check's verifier)
    recheck_timeout: int | None = None  # seconds of the re-check's first try; None: max(10, 2 x timeout)
    font_list: str = ""  # Matplotlib's font list for every sandbox (sandbox.build_font_list; "": none)

    def sandbox_config(self, slot: int):
        from trainsys.autograde.sandbox import SandboxConfig

        if not self.sandbox:
            return None
        memory = self.sandbox_memory_mb or sandbox_memory_default(self.jobs, self.memory_limit_mb)
        return SandboxConfig(address_space=self.memory_limit_mb * 2**20, memory=memory * 2**20, slot=slot,
                             font_list=self.font_list)

    @property
    def verify_timeout(self) -> float:
        """Seconds the trusted re-check waits for one load or call (doubled once on a time-out):
        ``recheck_timeout`` when given, else ``max(10, 2 * timeout)`` (the re-check also loads the student's
        code in a fresh process, which a loaded machine slows down)."""
        if self.recheck_timeout is not None:
            return float(self.recheck_timeout)
        return float(max(10, 2 * self.timeout))


def sandbox_memory_default(jobs: int, memory_limit_mb: int, total_mb: int | None = None) -> int:
    """MiB all the processes of one sandbox may hold together: three quarters of the machine's memory
    (``total_mb``, default ``MemTotal``; the rest is the grader's and the system's) shared by the ``jobs``
    sandboxes that run at once (a job runs one at a time), at most ``memory_limit_mb`` (what one process
    may address) and at least 1 GiB (a kernel that imports torch holds about 0.4 GiB)."""
    if total_mb is None:
        total_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    return max(1024, min(memory_limit_mb, total_mb * 3 // 4 // max(jobs, 1)))
