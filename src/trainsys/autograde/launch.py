"""nbgrader and the grader's other trusted processes: how they start, the environment they get, the gradebook.

Every process that runs with the grader's rights starts here, through :func:`run_trusted`:
``python -I -m <module> <args>`` (``-I``: no working folder, no user site-packages and no ``PYTHON*``
variable decide what it imports) in the course root, with :func:`nbgrader_env` — the repository's nbgrader
configuration, the course root and the gradebook — plus what the caller alone needs. The callers:

- :func:`nbgrader` (``nbgrader <command>``): the class grading command (:mod:`trainsys.autograde.runner`,
  which adds the sandbox configuration and the memory limits) and the course tools (:mod:`trainsys.course`,
  for tests, benchmarks and instructors' scripts);
- the trusted re-check (:mod:`trainsys.autograde.decide` starts :mod:`trainsys.autograde.verify`);
- the releases of many assignments at once (:func:`generate_releases_here`).

nbgrader starts as ``python -I -m trainsys.autograde.launch nbgrader <command> …``: nbgrader's own command
line, after :func:`skip_unused_imports`, which halves its start-up (a cost paid by every job of a class).
Each such process is forked from one that imported nbgrader and the verifier once
(:mod:`trainsys.autograde.forkserver`), and runs exactly as that command line would.

The gradebook's address is read one way (:func:`gradebook_url`, :func:`gradebook`) by the processes that
start nbgrader and by nbgrader itself (``NBGRADER_DB_URL``, read by ``autograder/nbgrader_config.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from trainsys._paths import BIN, REPO
from trainsys.autograde import forkserver
from trainsys.autograde.forkserver import cap_address_space, skip_unused_imports

if TYPE_CHECKING:
    from nbgrader.api import Gradebook

# What every grader-started Python that may run lesson code gets: warnings are not printed (a test cell that
# writes to stderr is scored as failed) and matplotlib draws without a display.
QUIET = {"PYTHONWARNINGS": "ignore", "MPLBACKEND": "Agg"}
SKIPPED_IMPORTS = forkserver.SKIPPED_IMPORTS  # what every trusted process skips (:func:`skip_unused_imports`)


def gradebook_url(course: Path, db_url: str | None = None) -> str:
    """The gradebook of ``course``: ``db_url`` when given, else SQLite ``gradebook.db`` in the course root."""
    return db_url or f"sqlite:///{course / 'gradebook.db'}"


def gradebook(course: Path, db_url: str | None = None) -> Gradebook:
    """nbgrader's :class:`~nbgrader.api.Gradebook` at :func:`gradebook_url` (use it as a context manager)."""
    from nbgrader.api import Gradebook

    return Gradebook(gradebook_url(course, db_url))


def nbgrader_env(course: Path, db_url: str | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process the grader starts on ``course``: this one's, with the venv's scripts first
    on ``PATH``, the repository's nbgrader configuration (``JUPYTER_CONFIG_PATH``), the course root
    (``NBGRADER_COURSE_ROOT``), the gradebook (``NBGRADER_DB_URL``, :func:`gradebook_url`), then ``extra``."""
    env = dict(os.environ)
    env.update(
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        JUPYTER_CONFIG_PATH=str(REPO / "autograder"),
        NBGRADER_COURSE_ROOT=str(course),
        NBGRADER_DB_URL=gradebook_url(course, db_url),
        PYDEVD_DISABLE_FILE_VALIDATION="1",
    )
    env.update(extra or {})
    return env


def limit_memory(limit_bytes: int, soft_only: bool = False) -> Callable[[], None]:
    """A ``preexec_fn`` capping the child's address space at ``limit_bytes``. ``soft_only``: the hard limit
    stays (a trusted process capped below its sandboxed children: the sandbox's ``prlimit`` raises theirs
    to its own)."""
    def apply() -> None:  # runs in the child before exec
        cap_address_space(limit_bytes, soft_only)
    return apply


def trusted_command(module: str, *args: str) -> list[str]:
    """The command line of :func:`run_trusted`: this interpreter, isolated, running ``module``."""
    return [sys.executable, "-I", "-m", module, *args]


def run_trusted(course: Path, module: str, *args: str, timeout: float, db_url: str | None = None,
                extra_env: dict[str, str] | None = None, memory_limit: int | None = None, soft_only: bool = False,
                stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run ``python -I -m <module> <args>`` in ``course`` with :func:`nbgrader_env` and wait for it.

    ``extra_env``: the caller's own variables; ``memory_limit``: address-space cap in bytes
    (:func:`limit_memory`, with ``soft_only``); ``stdin``: text written to its standard input. Output is
    captured as text (undecodable bytes replaced). Raises ``subprocess.TimeoutExpired`` after ``timeout``
    seconds (the process is killed); a nonzero exit is returned, not raised.
    """
    command, env = trusted_command(module, *args), nbgrader_env(course, db_url, extra_env)
    forked = forkserver.run(command, module, list(args), cwd=str(course), env=env, stdin=stdin, timeout=timeout,
                            memory_limit=memory_limit, soft_only=soft_only)
    if forked is not None:
        return forked
    preexec = None if memory_limit is None else limit_memory(memory_limit, soft_only=soft_only)
    return subprocess.run(command, input=stdin, cwd=course, env=env, capture_output=True, text=True,
                          errors="replace", timeout=timeout, preexec_fn=preexec)


def nbgrader(course: Path, command: str, *args: str, timeout: float, db_url: str | None = None,
             extra_env: dict[str, str] | None = None, memory_limit: int | None = None,
             soft_only: bool = False) -> subprocess.CompletedProcess:
    """``nbgrader <command> <args>`` on ``course``: :func:`run_trusted` (same options, same errors) with
    nbgrader's command line, started by this module's ``nbgrader`` mode (:func:`skip_unused_imports`, then
    nbgrader's own ``main``). Pass options as single ``--name=value`` words and positional arguments last,
    after ``--`` (an id can then never be read as an option)."""
    return run_trusted(course, __name__, "nbgrader", command, *args, timeout=timeout, db_url=db_url,
                       extra_env=extra_env, memory_limit=memory_limit, soft_only=soft_only)


def generate_releases_here(names: list[str]) -> int:
    """``nbgrader generate_assignment NAME --force`` for each of ``names``, in this process; 0 if all succeed.

    The one use of nbgrader's Python API instead of its command, and why: one process runs
    ``NbGraderAPI.generate_assignment`` (what the command calls) for every assignment, so nbgrader's
    start-up — most of a small assignment's time — is paid once instead of per assignment, and the
    release is the command's byte for byte (a test compares). It still runs in a child started by
    :func:`run_trusted` (``python -I -m trainsys.autograde.launch generate NAME…``), in the environment
    every nbgrader gets: :func:`trainsys.course.generate_releases` starts it.
    """
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


def main(argv: list[str]) -> int:
    """``nbgrader COMMAND …`` (started by :func:`nbgrader`) or ``generate ASSIGNMENT…`` (started by
    :func:`trainsys.course.generate_releases`), each after :func:`skip_unused_imports`."""
    skip_unused_imports()
    if argv[:1] == ["nbgrader"] and len(argv) >= 2:
        from nbgrader.apps.nbgraderapp import main as nbgrader_main

        sys.argv = ["nbgrader", *argv[1:]]  # nbgrader reads its arguments from sys.argv, as its script does
        nbgrader_main()  # what ``python -m nbgrader`` runs; it exits with its own status on errors
        return 0
    if argv[:1] == ["generate"] and len(argv) >= 2:
        return generate_releases_here(argv[1:])
    print("usage: python -I -m trainsys.autograde.launch nbgrader COMMAND [ARGUMENT …]\n"
          "       python -I -m trainsys.autograde.launch generate ASSIGNMENT [ASSIGNMENT …]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
