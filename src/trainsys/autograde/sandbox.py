"""The operating-system sandbox every piece of student code runs in while a class is graded.

Student code is hostile, and nothing that runs in the student's own interpreter can stop it: a scan,
a patched module, a guard — the student's code runs next to it and can undo it. So the notebook
kernels that ``nbgrader autograde`` starts, and the processes the trusted re-check calls the
student's function in, run inside `bubblewrap <https://github.com/containers/bubblewrap>`_
(``bwrap``: unprivileged Linux namespaces, the sandbox Flatpak is built on):

- **file system**: a fresh root holding only the system (``/usr``, ``/etc``, …) and the Python
  environment, read-only; of the course, only the package source (``src/``), read-only. Never
  ``solutions/``, the gradebook, ``submitted/``, ``autograded/``, ``feedback/``, ``reports/``,
  ``autograder/`` or another student's files. A private writable tmpfs with a size cap is the
  home folder, ``/tmp`` and ``/dev/shm``; it vanishes with the sandbox;
- **no network** (its own network namespace); a kernel is reached over Unix sockets in a folder
  bound into the sandbox (ZeroMQ's ``ipc`` transport), a re-check process over its stdin/stdout;
- **its own PID namespace**: it cannot see or signal the grader, and every process it started dies
  with it (``--die-with-parent``; the namespace's init takes all its processes down when it exits);
- **another user** (when the grader runs as root: one uid per parallel grading slot, so classmates
  graded side by side cannot signal each other) and no capabilities;
- **rlimits** on address space, processes, open files, file size and CPU time;
- **memory** of all its processes together capped (a memory cgroup where the grader may make one, else
  :class:`MemoryCap`), and its processes the kernel OOM killer's first pick (``oom_score_adj``);
- **the graded function withheld** where the grader asks (:func:`withheld_view`): the package it sees
  then holds a stub in its place.

The package and the Python environment are bound after the private tmpfs folders are mounted, so a
course cloned under ``/tmp`` or a home folder is visible inside.

:func:`wrap` builds the command; :class:`SandboxKernelManager` is the ``jupyter_client`` kernel
manager that nbgrader's executor uses to start sandboxed kernels (``trainsys.execution``);
:func:`ensure_available` tells an instructor what to install when the sandbox cannot run.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jupyter_client.manager import AsyncKernelManager

from trainsys.autograde.launch import QUIET
from trainsys.autograde.procfs import process_tree, proportional_size

ENV_VAR = "TRAINSYS_SANDBOX"  # JSON of SandboxConfig, or "off"; set by the grading command for nbgrader
OFF = "off"  # ENV_VAR's value (and the re-check request's) when student code runs unsandboxed
MPL_DIR = "/tmp/matplotlib"  # MPLCONFIGDIR inside a sandbox (on its private /tmp)
SRC = Path(__file__).resolve().parents[2]  # <course>/src: the package source, bound read-only
SYSTEM_DIRS = ("/usr", "/etc", "/opt")  # read-only; /bin, /lib, … are symlinks into /usr (merged /usr)
MERGED_USR_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
SLOT_UID_BASE = 61000
# For processes whose memory the grader measures from outside: arrays of 64 KiB or more get pages of
# their own, returned when freed, so the resident set follows the live arrays (a kernel does without:
# an mmap per large array costs it time).
MEASURABLE_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "131072"}  # uid of grading slot k when the grader runs as root: SLOT_UID_BASE + k


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot run on this machine; the message says how to fix it."""


@dataclass(frozen=True)
class SandboxConfig:
    """Limits of one sandbox. Sizes in bytes, times in seconds."""

    address_space: int = 6 * 2**30  # RLIMIT_AS: importing torch maps ~2 GiB of address space
    processes: int = 256  # RLIMIT_NPROC (threads count): per sandbox user
    open_files: int = 1024  # RLIMIT_NOFILE
    file_size: int = 256 * 2**20  # RLIMIT_FSIZE: the largest file it may write
    cpu_seconds: int = 1800  # RLIMIT_CPU per process
    tmpfs_size: int = 512 * 2**20  # each private tmpfs (home, /tmp, /dev/shm)
    memory: int = 0  # resident memory of all the sandbox's processes together (0: no cap); see MemoryCap
    oom_score_adj: int = 1000  # the kernel's OOM killer picks the sandbox's processes first
    slot: int = 0  # grading slot: picks the sandbox uid when the grader is root
    extra_ro: tuple[str, ...] = field(default_factory=tuple)  # more read-only binds (tests)
    withheld: tuple[str, ...] = field(default_factory=tuple)  # package functions replaced by stubs: withheld_view
    font_list: str = ""  # Matplotlib's font list for MPL_DIR, read-only (build_font_list); "": each process builds it

    def to_env(self) -> str:
        """This configuration as JSON text, the one form in which it crosses to another process."""
        return json.dumps(asdict(self))

    @staticmethod
    def encode(config: SandboxConfig | None) -> str:
        """The text the grader hands a child process (in :data:`ENV_VAR` to nbgrader, in the re-check's
        request): the configuration's JSON, or ``"off"`` when student code runs without the sandbox."""
        return OFF if config is None else config.to_env()

    @classmethod
    def decode(cls, text: str) -> SandboxConfig | None:
        """The configuration :meth:`encode` wrote; ``None`` for ``"off"``; the defaults for ``""`` (a plain
        ``nbgrader`` command, started by no grading command, still sandboxes its kernels).

        Raises ``ValueError`` (``json.JSONDecodeError``) on text that is not JSON and ``TypeError`` on an
        unknown field.
        """
        if text == OFF:
            return None
        if not text:
            return cls()
        data = json.loads(text)  # JSON lists become the tuples the fields hold
        return cls(**{**data, "extra_ro": tuple(data.get("extra_ro", ())), "withheld": tuple(data.get("withheld", ()))})

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> SandboxConfig | None:
        """The configuration the grading command passed down in :data:`ENV_VAR` (see :meth:`decode`)."""
        return cls.decode((os.environ if environ is None else environ).get(ENV_VAR, ""))

    @property
    def uid(self) -> int | None:
        """The uid the sandbox runs as: a slot's own uid when the grader is root, else the grader's."""
        return SLOT_UID_BASE + self.slot if os.geteuid() == 0 else None


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


@functools.lru_cache(maxsize=1)
def _isolated_sys_path() -> tuple[str, ...]:
    """``sys.path`` of ``python -I`` with this interpreter: what a sandboxed process imports from
    (the standard library, site-packages and the folders its ``.pth`` files add)."""
    try:
        run = subprocess.run([sys.executable, "-I", "-c", "import json, sys; print(json.dumps(sys.path))"],
                             capture_output=True, text=True, timeout=60, check=True)
        return tuple(json.loads(run.stdout))
    except (OSError, subprocess.SubprocessError, ValueError):
        return ()


def _python_paths() -> list[str]:
    """Folders the Python environment lives in, to bind read-only: the venv, the interpreter it was made
    from, and every folder on ``python -I``'s ``sys.path`` outside them (a ``.pth`` naming another
    site-packages). Never a folder holding the package source (the course root would come with it)."""
    paths = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    paths |= {p for p in _isolated_sys_path() if p and os.path.isabs(p) and os.path.exists(p)}
    kept = []
    for path in sorted(os.path.normpath(p) for p in paths if p):  # a parent sorts before its children
        if any(_within(path, s) for s in SYSTEM_DIRS) or any(_within(path, k) for k in kept):
            continue
        if _within(str(SRC), path) or _within(path, str(SRC)):
            continue  # the package source is bound on its own; a .pth naming the course root would show solutions/
        kept.append(path)
    return kept


def wrap(command: list[str], config: SandboxConfig, *, rw: tuple[str, ...] = (), chdir: str = "/home/student",
         env: dict[str, str] | None = None, cgroup: Cgroup | None = None) -> list[str]:
    """``command`` run in the sandbox: bwrap's arguments, then ``prlimit`` (the rlimits) and ``command``.

    ``rw`` folders are bound writable at the same path (a kernel's socket folder). ``env`` is the
    whole environment inside (nothing of the grader's leaks in). With ``cgroup``, everything the
    sandbox runs joins it first (see :class:`Cgroup`).
    """
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable(_MISSING_BWRAP)
    uid = config.uid
    # As root, bwrap builds the namespaces itself and the command drops to the slot's uid inside
    # (a user namespace would keep the real uid 0, for which the kernel enforces no process limit);
    # as anyone else, an unprivileged user namespace.
    unshare = (["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
               if uid is not None else ["--unshare-all"])
    args = [bwrap, *unshare, "--die-with-parent", "--new-session", "--clearenv", "--hostname", "sandbox"]
    for folder in SYSTEM_DIRS:
        if os.path.isdir(folder):
            args += ["--ro-bind", folder, folder]
    for name in MERGED_USR_LINKS:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    args += ["--proc", "/proc", "--dev", "/dev"]
    # The private tmpfs folders first: what is bound below may lie under them (a course cloned under /tmp
    # or a home folder), and a tmpfs mounted after a bind would hide it.
    for folder in ("/tmp", "/dev/shm", "/home/student"):
        args += ["--perms", "1777", "--size", str(config.tmpfs_size), "--tmpfs", folder]
    if config.font_list:
        args += ["--perms", "1777", "--dir", MPL_DIR, "--ro-bind", config.font_list,
                 f"{MPL_DIR}/{os.path.basename(config.font_list)}"]
    made: set[str] = set()
    for folder in (*_python_paths(), str(SRC), *config.extra_ro):
        args += _parents(folder, made) + ["--ro-bind", folder, folder]
    for view, folder in withheld_view(config.withheld):  # over the package's own folders
        args += ["--ro-bind", view, folder]
    for folder in rw:
        args += _parents(folder, made) + ["--bind", folder, folder]
    inner_env = {"HOME": "/home/student", "USER": "student", "LOGNAME": "student", "PATH": "/usr/bin:/bin",
                 "LANG": "C.UTF-8", **QUIET, "PYTHONDONTWRITEBYTECODE": "1",
                 "MPLCONFIGDIR": MPL_DIR, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
                 "MKL_NUM_THREADS": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1", **(env or {})}
    for key, value in inner_env.items():
        args += ["--setenv", key, value]
    args += ["--chdir", chdir, "--"]
    if uid is not None:  # no capabilities, no way back up (setuid binaries are ignored), another user
        args += [shutil.which("setpriv") or "/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    return [*_prefix(config, cgroup), *args, *_prlimit(config), *command]


def _prefix(config: SandboxConfig, cgroup: Cgroup | None) -> list[str]:
    """A shell (run by the grader, before bwrap) that makes itself, and so everything the sandbox will run,
    the OOM killer's first pick, joins the sandbox's cgroups, then execs bwrap."""
    statements = [f"echo {int(config.oom_score_adj)} > /proc/self/oom_score_adj"]
    statements += cgroup.join_statements() if cgroup else []
    return ["/bin/sh", "-c", "; ".join(statements) + '; exec "$@"', "trainsys-sandbox"]


class Cgroup:
    """Control groups for one sandbox, where the machine lets the grader make them (cgroup v1, as root).

    - ``cpu``: every sandbox gets the same CPU share however many processes it runs, so a student's
      hundred busy processes slow their own grading, not the classmate graded next to them;
    - ``pids``: at most ``config.processes`` tasks, counted per sandbox (RLIMIT_NPROC counts per user,
      and a user may be shared by two grading runs on one machine);
    - ``memory``: at most ``config.memory`` bytes for all its processes together (when set); past it
      the kernel's OOM killer ends one of them.

    Best effort: where cgroups cannot be made (no root, cgroup v2 without delegation), the rlimits
    alone apply, and :class:`MemoryCap` enforces the memory cap. :meth:`remove` deletes the groups once
    the sandbox has ended (after noting in :attr:`reached` which limits were hit).
    """

    ROOTS = {"cpu": Path("/sys/fs/cgroup/cpu"), "pids": Path("/sys/fs/cgroup/pids"),
             "memory": Path("/sys/fs/cgroup/memory")}

    def __init__(self, config: SandboxConfig) -> None:
        self.paths: list[Path] = []
        self.controllers: dict[str, Path] = {}
        self.reached: set[str] = set()
        self.peak_memory: int | None = None  # bytes, the memory group's peak (read when it is removed)
        if os.geteuid() != 0:
            return
        name = f"trainsys-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        for controller, root in self.ROOTS.items():
            if controller == "memory" and not config.memory:
                continue
            path = root / name
            try:
                path.mkdir()
            except OSError:
                continue
            try:
                if controller == "pids":
                    (path / "pids.max").write_text(str(config.processes))
                if controller == "memory":
                    (path / "memory.limit_in_bytes").write_text(str(config.memory))
                    with contextlib.suppress(OSError):  # without swap accounting there is no such file
                        (path / "memory.memsw.limit_in_bytes").write_text(str(config.memory))
            except OSError:
                with contextlib.suppress(OSError):
                    path.rmdir()
                continue
            self.paths.append(path)
            self.controllers[controller] = path

    @property
    def caps_memory(self) -> bool:
        """Whether the kernel enforces the sandbox's memory cap (else :class:`MemoryCap` must)."""
        return "memory" in self.controllers

    def join_statements(self) -> list[str]:
        """Shell statements that move the shell running them into the groups."""
        return [f"echo $$ > {path / 'cgroup.procs'}" for path in self.paths]

    def limits_reached(self) -> set[str]:
        """The limits the sandbox's processes have hit so far: ``"memory"`` (the OOM killer ended one),
        ``"processes"`` (a fork was refused)."""
        reached = set(self.reached)
        counters = (("memory", "memory.oom_control", "oom_kill"), ("processes", "pids.events", "max"))
        for limit, filename, key in counters:
            path = self.controllers.get("memory" if limit == "memory" else "pids")
            try:
                lines = (path / filename).read_text().splitlines() if path is not None else []
            except OSError:
                continue
            if any(line.split()[:1] == [key] and int(line.split()[1]) > 0 for line in lines if len(line.split()) == 2):
                reached.add(limit)
        return reached

    def remove(self, timeout: float = 10.0) -> None:
        """Delete the groups, ending any process still in them (the sandbox has ended: what is left is
        its namespace's last processes on their way out); gives up after ``timeout`` seconds."""
        self.reached = self.limits_reached()
        if "memory" in self.controllers:
            with contextlib.suppress(OSError, ValueError):
                self.peak_memory = int((self.controllers["memory"] / "memory.max_usage_in_bytes").read_text())
        pending = list(self.paths)
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for path in list(pending):
                try:
                    path.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:  # still holds processes
                    with contextlib.suppress(OSError, ValueError):
                        for pid in (path / "cgroup.procs").read_text().split():
                            with contextlib.suppress(OSError):
                                os.kill(int(pid), signal.SIGKILL)
                    continue
                pending.remove(path)
            if pending:
                time.sleep(0.05)
        self.paths = []
        self.controllers = {}


def cgroup_caps_memory() -> bool:
    """Whether this grader can cap a sandbox's memory with a cgroup (else :class:`MemoryCap` does)."""
    probe = Cgroup(SandboxConfig(memory=2**30))
    try:
        return probe.caps_memory
    finally:
        probe.remove()


class MemoryCap(threading.Thread):
    """Where no memory cgroup can be made: the sandbox's memory cap, enforced from outside.

    Every ``interval`` seconds it sums the proportional set size (``Pss``: shared pages split between
    the processes sharing them, so forks of one process are not counted twice) of every process in the
    tree under ``pid`` — read from ``/proc``, out of the student's reach — and kills the whole tree
    when the sum exceeds ``limit`` bytes. Between two looks the tree can grow by what it allocates in
    ``interval`` seconds; the OOM score (``oom_score_adj``) makes the kernel pick it first meanwhile.
    """

    def __init__(self, pid: int, limit: int, interval: float = 0.05) -> None:
        super().__init__(daemon=True, name=f"memory-cap-{pid}")
        self.pid, self.limit, self.interval = pid, limit, interval
        self.reached = False
        self.peak = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            tree = process_tree(self.pid)
            if not tree:
                return
            total = sum(map(proportional_size, tree))
            self.peak = max(self.peak, total)
            if total > self.limit:
                self.reached = True
                for pid in tree:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)

    def stop(self) -> None:
        self._stop_event.set()


def memory_cap(config: SandboxConfig, cgroup: Cgroup | None, pid: int) -> MemoryCap | None:
    """A started :class:`MemoryCap` on the tree under ``pid`` when ``config`` caps memory and no cgroup does."""
    if not config.memory or (cgroup is not None and cgroup.caps_memory):
        return None
    cap = MemoryCap(pid, config.memory)
    cap.start()
    return cap


def describe_limit(limit: str, config: SandboxConfig) -> str:
    """A sentence for the student and the instructor: which sandbox limit the student's code reached."""
    mib = 2**20
    return {
        "memory": f"the sandbox's memory limit ({config.memory / 2**30:.1f} GiB for all its processes together)",
        "address space": f"the sandbox's memory limit per process ({config.address_space / 2**30:.1f} GiB of "
                         "address space)",
        "processes": f"the sandbox's limit of {config.processes} processes and threads",
        "disk": f"the sandbox's temporary disk ({config.tmpfs_size // mib} MiB)",
        "file size": f"the sandbox's largest file ({config.file_size // mib} MiB)",
        "cpu": f"the sandbox's CPU time per process ({config.cpu_seconds} s)",
    }[limit]


def limit_from_exit(returncode: int | None) -> str | None:
    """The limit a sandbox's exit status shows (bwrap exits with 128 + the signal that ended its child)."""
    if returncode is None:
        return None
    signum = returncode - 128 if returncode > 128 else -returncode if returncode < 0 else 0
    return {signal.SIGXCPU: "cpu", signal.SIGXFSZ: "file size"}.get(signum)


def limit_from_message(message: str) -> str | None:
    """The limit an error message from the student's code shows (``errno`` texts of the rlimits and tmpfs)."""
    patterns = (("[Errno 28]", "disk"), ("No space left on device", "disk"), ("[Errno 27]", "file size"),
                ("File too large", "file size"), ("[Errno 11] Resource temporarily unavailable", "processes"),
                ("can't start new thread", "processes"), ("MemoryError", "address space"),
                ("Cannot allocate memory", "address space"))
    return next((limit for text, limit in patterns if text in message), None)


WITHHELD = "withheld while grading"
_VIEWS: dict[tuple[str, ...], list[tuple[str, str]]] = {}
_VIEW_LOCK = threading.Lock()


def withheld_view(names: tuple[str, ...]) -> list[tuple[str, str]]:
    """The sandbox's view of the package with the functions ``names`` withheld: ``(copy, package folder)``
    pairs to bind read-only over the package.

    Each package folder whose modules define one of ``names`` at top level is copied (modification times
    kept, so the bytecode of the other modules stays valid) with those definitions replaced by a stub
    that raises ``RuntimeError(... withheld while grading ...)``, and without the bytecode of the changed
    modules. In the sandbox no import, attribute, ``sys.modules`` entry, function ``__globals__``,
    ``inspect.getsource`` or file read reaches the real function: its code is not in the sandbox.
    Made once per process and set of names, in a private folder removed when the process exits.
    """
    names = tuple(sorted(set(names)))
    if not names:
        return []
    with _VIEW_LOCK:
        if names not in _VIEWS:
            _VIEWS[names] = _make_view(names)
        return _VIEWS[names]


def _make_view(names: tuple[str, ...]) -> list[tuple[str, str]]:
    import ast
    import atexit

    package = SRC / "trainsys"
    changed: dict[Path, str] = {}
    for module in sorted(package.rglob("*.py")):
        text = module.read_text()
        if not any(f"def {name}" in text for name in names):
            continue
        lines = text.splitlines(keepends=True)
        nodes = [n for n in ast.parse(text).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.name in names]
        for node in sorted(nodes, key=lambda n: n.lineno, reverse=True):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
            dotted = ".".join(module.relative_to(SRC).with_suffix("").parts)
            message = (f"{dotted}.{node.name} is {WITHHELD}: an answer must not use the package's reference "
                       "implementation")
            stub = f"def {node.name}(*args, **kwargs):  # {WITHHELD}\n    raise RuntimeError({message!r})\n"
            lines[start:node.end_lineno] = [stub]
        if nodes:
            changed[module] = "".join(lines)
    if not changed:
        return []
    folders = sorted({m.parent for m in changed})
    folders = [f for f in folders if not any(f != g and f.is_relative_to(g) for g in folders)]  # outermost only
    root = Path(tempfile.mkdtemp(prefix="trainsys-view-"))
    atexit.register(shutil.rmtree, root, True)
    pairs = []
    for index, folder in enumerate(folders):
        copy = root / str(index)
        stale = {m.stem for m in changed if m.is_relative_to(folder)}

        def ignore(directory: str, entries: list[str], stale: set[str] = stale) -> set[str]:
            if Path(directory).name != "__pycache__":
                return set()
            return {e for e in entries if e.split(".")[0] in stale}

        shutil.copytree(folder, copy, ignore=ignore)
        for module, text in changed.items():
            if module.is_relative_to(folder):
                target = copy / module.relative_to(folder)
                target.write_text(text)
                os.chmod(target, 0o644)
        pairs.append((str(copy), str(folder)))
    return pairs


def _parents(folder: str, made: set[str]) -> list[str]:
    """Create the folders above a bind point traversable (bwrap would make them 0700, root's)."""
    args = []
    for parent in reversed(Path(folder).parents[:-1]):  # without "/"
        if str(parent) not in made and str(parent) not in ("/tmp", "/usr", "/etc", "/opt"):
            made.add(str(parent))
            args += ["--perms", "0755", "--dir", str(parent)]
    return args


def _prlimit(config: SandboxConfig) -> list[str]:
    """rlimits set inside the sandbox (after bwrap has built it), on the command and all it starts."""
    prlimit = shutil.which("prlimit") or "/usr/bin/prlimit"
    return [prlimit, f"--as={config.address_space}", f"--nproc={config.processes}", f"--nofile={config.open_files}",
            f"--fsize={config.file_size}", f"--cpu={config.cpu_seconds}", "--core=0", "--"]


_MISSING_BWRAP = ("the grading sandbox needs bubblewrap: install it with `apt-get install bubblewrap` "
                  "(the Makefile's `sandbox` target does), or grade with --no-sandbox (not safe for a class)")


def ensure_available(config: SandboxConfig | None = None) -> None:
    """Start a trivial sandbox; raise :class:`SandboxUnavailable` naming the fix when it cannot run."""
    config = config or SandboxConfig()
    try:
        command = wrap(["/bin/true"], config)
    except SandboxUnavailable:
        raise
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"bubblewrap could not start a sandbox: {exc}") from None
    if run.returncode != 0:
        detail = (run.stderr.strip().splitlines() or ["no message"])[-1]
        hint = ""
        if "namespace" in detail.lower() or "operation not permitted" in detail.lower():
            hint = (" — user namespaces look disabled: enable them with "
                    "`sysctl -w kernel.unprivileged_userns_clone=1` (Debian) or "
                    "`sysctl -w user.max_user_namespaces=15000`, and on Ubuntu 24.04+ "
                    "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`")
        raise SandboxUnavailable(f"bubblewrap could not start a sandbox ({detail}){hint}; "
                                 "or grade with --no-sandbox (not safe for a class)")


def build_font_list(config: SandboxConfig) -> str:
    """Matplotlib's font list (``fontlist-v*.json``) as a process in ``config``'s sandbox builds it, built once:
    the path of a read-only copy for :attr:`SandboxConfig.font_list`, or ``""`` where it cannot be built.

    Each sandbox starts with an empty :data:`MPL_DIR`, so every process that imports Matplotlib there (each kernel,
    each process of the re-check) scanned the system's fonts and wrote the list again: 0.1 s of CPU of its 0.5 s
    import (measured on 2 cores, 38 fonts). Building it inside a sandbox lists exactly the fonts a sandboxed process
    sees (not the grader's home folder's); only Matplotlib's own code runs there, and the copy the sandboxes are
    given is the grader's, read-only, removed when the grader exits (a grader killed with SIGKILL leaves it in
    the temporary folder, as it leaves :func:`withheld_view`'s copy).
    """
    import atexit

    built = tempfile.mkdtemp(prefix="trainsys-fonts-")
    os.chmod(built, 0o777)  # the sandbox's user writes the list
    try:
        command = wrap([sys.executable, "-I", "-c", "import matplotlib.font_manager"], config, rw=(built,),
                       env={"MPLCONFIGDIR": built})
        run = subprocess.run(command, capture_output=True, timeout=120)
        lists = sorted(Path(built).glob("fontlist-v*.json"))
        if run.returncode != 0 or len(lists) != 1 or not isinstance(json.loads(lists[0].read_text()), dict):
            return ""
        kept = Path(tempfile.mkdtemp(prefix="trainsys-fontlist-"))
        os.chmod(kept, 0o755)
        target = kept / lists[0].name
        target.write_text(lists[0].read_text())
        os.chmod(target, 0o644)
        atexit.register(shutil.rmtree, kept, True)
        return str(target)
    except (OSError, ValueError, SandboxUnavailable, subprocess.TimeoutExpired):
        return ""
    finally:
        shutil.rmtree(built, ignore_errors=True)


def private_folder(config: SandboxConfig, prefix: str) -> str:
    """A fresh folder outside the sandbox that the sandbox user may write (bound writable inside).

    Kept short: Unix socket paths are limited to 107 bytes. When the grader is root the folder stays
    the grader's, writable by the slot's group only until :func:`seal_folder` (the sandbox user cannot
    undo that: it does not own the folder).
    """
    folder = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    if config.uid is not None:
        os.chown(folder, os.geteuid(), config.uid)
        os.chmod(folder, 0o730)
    else:
        os.chmod(folder, 0o700)
    return folder


def seal_folder(config: SandboxConfig, folder: str, writable: bool = False) -> None:
    """Let the sandbox create files in its socket folder (``writable``) or no longer (sealed).

    The folder lies on the grader's disk: once the kernel has bound its sockets a sealed folder keeps
    a student from filling that disk through it (only when the grader is root; see private_folder).
    """
    if config.uid is not None:
        os.chmod(folder, 0o730 if writable else 0o710)


class SandboxKernelManager(AsyncKernelManager):
    """A ``jupyter_client`` kernel manager whose kernel runs in the sandbox.

    The kernel talks over ZeroMQ ``ipc`` sockets in a private folder (the sandbox has no network);
    interrupts are sent as messages (a signal to bwrap would not reach the kernel in its own session);
    the folder is removed when the kernel's resources are cleaned up.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sandbox = SandboxConfig.from_env() or SandboxConfig()
        self.cgroup = Cgroup(self.sandbox)
        self.memory_cap: MemoryCap | None = None
        self.sandbox_folder = private_folder(self.sandbox, "tsk-")
        self.transport = "ipc"
        self.ip = os.path.join(self.sandbox_folder, "k")
        self.connection_file = os.path.join(self.sandbox_folder, "kernel.json")

    def write_connection_file(self, **kwargs: Any) -> None:
        super().write_connection_file(**kwargs)
        if self.sandbox.uid is not None and os.path.exists(self.connection_file):
            os.chown(self.connection_file, os.geteuid(), self.sandbox.uid)
            os.chmod(self.connection_file, 0o640)

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        command = super().format_kernel_cmd(extra_arguments)
        if self.kernel_spec is not None:
            self.kernel_spec.interrupt_mode = "message"
        return wrap(command, self.sandbox, rw=(self.sandbox_folder,), cgroup=self.cgroup)

    # AsyncKernelManager binds these names to KernelManager's coroutines: override the names themselves
    # (start_kernel calls _async_launch_kernel).
    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:  # type: ignore[override]
        kw["cwd"] = self.sandbox_folder  # never the student's folder on the real file system
        # The kernel's own stdout/stderr would be the grader's pipes (ipykernel echoes all output there and
        # hands them out as sys.stdout.fileno()): unbounded memory in the grader. Output goes over iopub.
        kw["stdin"] = kw["stdout"] = kw["stderr"] = subprocess.DEVNULL
        seal_folder(self.sandbox, self.sandbox_folder, writable=True)
        try:
            await AsyncKernelManager._launch_kernel(self, kernel_cmd, **kw)
            process = getattr(self.provisioner, "process", None)
            if process is not None:
                self.memory_cap = memory_cap(self.sandbox, self.cgroup, process.pid)
            await self._sockets_bound()
        finally:
            seal_folder(self.sandbox, self.sandbox_folder)

    _launch_kernel = _async_launch_kernel

    async def _sockets_bound(self, timeout: float = 60.0) -> None:
        """Wait until the kernel has created its socket files (before any student code runs in it)."""
        import asyncio

        paths = [f"{self.ip}-{port}" for port in self.ports]
        deadline = time.monotonic() + timeout
        while not all(os.path.exists(p) for p in paths) and time.monotonic() < deadline:
            if self.provisioner is not None and await self.provisioner.poll() is not None:
                return  # the kernel died: nbclient reports it
            await asyncio.sleep(0.05)

    async def cleanup_resources(self, restart: bool = False) -> None:  # type: ignore[override]
        await AsyncKernelManager.cleanup_resources(self, restart=restart)
        if self.memory_cap is not None:
            self.memory_cap.stop()
            self.memory_cap = None
        if not restart:
            shutil.rmtree(self.sandbox_folder, ignore_errors=True)
            self.cgroup.remove()


def current_limits() -> dict[str, tuple[int, int]]:
    """The rlimits of this process (to show inside a sandbox what it got)."""
    names = {"as": resource.RLIMIT_AS, "nproc": resource.RLIMIT_NPROC, "nofile": resource.RLIMIT_NOFILE,
             "fsize": resource.RLIMIT_FSIZE, "cpu": resource.RLIMIT_CPU}
    return {name: resource.getrlimit(value) for name, value in names.items()}
