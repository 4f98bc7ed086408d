"""A synthetic class of 30+ submissions with known expected scores per cell, for the grading tests.

Built on quick lessons of Part 1: ``LESSONS`` (relu_forward, linear_backward, relu_backward) for ``make bench``,
``CLASS_LESSONS`` (the first two: their kernels run in 1.6 s and 1.3 s of CPU, against 2.4 s for linear_forward's
throughput sweep) for the class test (tests/test_autograde_class.py), where every notebook a
student submits costs a sandboxed kernel and a re-check: two notebooks keep what the third proved (a hostile
notebook costs only its own points; the other notebook keeps its points), and there a student whose case is
about one notebook hands in only that one (``students(..., their_notebook_only=True)``). Students: the full
solutions, the untouched release, one student per mutant of the graded functions, honest submissions a careless
grader gets wrong, and hostile or broken submissions aimed at the relu_forward notebook (the others solved).
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from tests.answers.developer import m1p1_mlp
from trainsys.course import BIN, REPO, answer_sources, run_nbgrader, submit

ASSIGNMENT = "m1p1-mlp-core"
LESSONS = {"04_relu_forward": "relu_forward", "07_linear_backward": "linear_backward",
           "08_relu_backward": "relu_backward"}
CLASS_LESSONS = {stem: LESSONS[stem] for stem in ("04_relu_forward", "07_linear_backward")}
TARGET = "04_relu_forward"  # the notebook hostile students attack
# A correct relu_forward written otherwise than the reference (copy, then zero the negatives; NaN and -0.0 are
# not < 0, so they stay): an honest alternative must earn full marks.
ALTERNATIVE_RELU = """def relu_forward(Z):
    if not isinstance(Z, np.ndarray) or Z.dtype.kind != "f":
        raise TypeError(f"relu_forward: Z must be a floating-point numpy array, got {type(Z).__name__} "
                        f"of dtype {getattr(Z, 'dtype', None)}")
    A = Z.copy()
    A[Z < 0] = 0
    return A
"""


@dataclass
class Student:
    name: str
    answers: dict[str, str | None]  # notebook stem -> answer cell source (None: leave the stub)
    expected: dict[str, tuple[float, float]]  # notebook stem -> (visible points, hidden points)
    edit: str | None = None  # a post-processing step applied to the target notebook file
    flags: list[str] = field(default_factory=list)  # substrings expected among the summary's flags
    submitted: tuple[str, ...] | None = None  # the notebook stems handed in (None: every notebook of the part)


# --timeout: seconds a cell may run while grading. Not made smaller: below 5 s only the kernels' waits on the two
# looping students would shrink (a few seconds), while a loaded machine's first import cell would risk an honest
# time-out.
TIMEOUT = "5"
# --recheck-timeout: seconds the trusted re-check gives a fresh student process to load the answer or answer one
# call, doubled once on a time-out. A process of these lessons loads in 0.6 s on an idle core (bubblewrap, then
# numpy, matplotlib, pytest and the part's tools), so an honest answer loses points only if a busy machine makes
# its load more than ten times slower twice in a row (the retry waits 8 s). The default, max(10, 2 x --timeout),
# would give each looping student 10 + 20 + 20 s of a spinning core in the re-check instead of 4 + 8 + 8.
RECHECK_TIMEOUT = "4"
# --memory-limit-mb: the address space of each sandboxed process. A kernel of these NumPy lessons addresses
# 168 MiB at its peak (VmPeak after importing numpy, ipykernel and trainsys.grading; torch, which they do not
# import, would add 0.5 GiB), so 2 GiB leaves a tenfold margin, and memory_bomb's 1 GiB blocks are refused at
# the second block rather than the fourth: a third of the pages to write, in the kernel and in each re-check.
MEMORY_LIMIT_MB = "2048"


def grade(course: Path, *extra: str, wait: bool = True) -> subprocess.Popen | subprocess.CompletedProcess:
    """Grade ``course`` by the real command, 2 jobs; ``wait=False``: return the running process (its own
    session, so that a test can kill its whole process group), else the finished run (asserted exit 0)."""
    command = [str(BIN / "python"), "-m", "trainsys.autograde", "--course", str(course), "--jobs", "2",
               "--timeout", TIMEOUT, "--recheck-timeout", RECHECK_TIMEOUT, "--memory-limit-mb", MEMORY_LIMIT_MB, *extra]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if not wait:
        return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def make_course(root: Path, lessons: dict[str, str] = LESSONS) -> Path:
    """A course directory holding ``lessons`` (notebook stem -> graded function), their release and an empty
    gradebook."""
    (root / "solutions" / ASSIGNMENT).mkdir(parents=True)
    for stem in lessons:
        shutil.copy(REPO / "solutions" / ASSIGNMENT / f"{stem}.ipynb", root / "solutions" / ASSIGNMENT)
    run_nbgrader(root, "generate_assignment", ASSIGNMENT, "--force")
    return root


def _solution(stem: str) -> str:
    return answer_sources(REPO / "solutions" / ASSIGNMENT / f"{stem}.ipynb")[LESSONS[stem]]


def _visible_passes(stem: str, answer: str) -> bool:
    """Run the lesson's setup, the answer and its visible tests in a fresh namespace."""
    nb = nbformat.read(REPO / "solutions" / ASSIGNMENT / f"{stem}.ipynb", as_version=4)
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}
    namespace: dict = {}
    try:
        exec(cells["setup"], namespace)  # noqa: S102 - test fixture
        exec(answer, namespace)  # noqa: S102
        exec(cells[f"test_{LESSONS[stem]}_visible"], namespace)  # noqa: S102
    except BaseException:  # noqa: BLE001
        return False
    return True




def _mutant_source(stem: str, description: str) -> str:
    """Source code for a mutant: the whole mutants module inlined (the sandbox shows students only the
    package), then the mutant bound to the function's name."""
    function = LESSONS[stem]
    module = inspect.getsource(m1p1_mlp)
    import_ref = "from trainsys.memtrain import mlp as ref\n"
    assert import_ref in module, "the mutants module no longer imports the reference as ref"
    # while grading, the package's copy of the graded function is withheld: the mutants' input validation
    # (the reference's) runs the student's own correct copy, written first, as a student's would
    own = (_solution(stem) + f"\n_own_{function} = {function}\n"
           "import types as _types\nfrom trainsys.memtrain import mlp as _package\n"
           f"ref = _types.SimpleNamespace(**{{**vars(_package), {function!r}: _own_{function}}})\n")
    future = "from __future__ import annotations\n"
    return (future + own + module.replace(future, "").replace(import_ref, "")
            + f"\n{function} = dict(MUTANTS[{function!r}])[{description!r}]\n")


# Students who hand in every notebook of the part even where their case is about one: the full, blank and partial
# submissions, a missing or unreadable notebook among others, and the cases whose point is that the other
# notebooks keep their points (a kernel that dies, a notebook that never ends loading, tampering).
WHOLE = ("solved", "blank", "partial", "missing_notebook", "corrupt_json", "exit_kernel", "segfault_kernel",
         "loop_top_level", "patch_grading")


def students(lessons: dict[str, str] = LESSONS, their_notebook_only: bool = False) -> list[Student]:
    """The roster for a course of ``lessons`` (which must hold ``TARGET``): 33 students with ``LESSONS``, 30 with
    ``CLASS_LESSONS`` (one per mutant of each graded function). ``their_notebook_only``: a student not in
    :data:`WHOLE` hands in only the notebook their case is about (a mutant's, else ``TARGET``) and scores 0 on
    the others, as a student who submits one lesson of a part does; each notebook costs the grader a kernel
    and a re-check."""
    if TARGET not in lessons:
        raise ValueError(f"students: lessons must include the target notebook {TARGET!r}, got {sorted(lessons)}")
    full = {stem: (2.0, 3.0) for stem in lessons}
    other = [stem for stem in lessons if stem != TARGET][-1]  # the notebook "partial" leaves blank

    def _solved(**overrides: str | None) -> dict[str, str | None]:
        return {**{stem: _solution(stem) for stem in lessons}, **overrides}

    def _target(visible: float, hidden: float) -> dict[str, tuple[float, float]]:
        return {**full, TARGET: (visible, hidden)}

    relu = _solution(TARGET)
    wrong_relu = relu + "\n_correct = relu_forward\n\ndef relu_forward(Z):\n    return _correct(Z) * 1.01\n"
    float64_only_wrong = relu + (
        "\n_correct = relu_forward\n\ndef relu_forward(Z):\n"
        "    return _correct(Z) if Z.dtype != np.float64 else -_correct(Z)\n")
    roster = [
        Student("solved", _solved(), full),
        Student("blank", {stem: None for stem in lessons}, {stem: (0.0, 0.0) for stem in lessons}),
        Student("partial", _solved(**{other: None}), {**full, other: (0.0, 0.0)}),
        Student("loop_in_function", _solved(**{TARGET: "def relu_forward(Z):\n    while True:\n        pass\n"}),
                _target(0, 0)),
        Student("loop_top_level", _solved(**{TARGET: "while True:\n    pass\n"}), _target(0, 0)),
        Student("exit_kernel", _solved(**{TARGET: "import os\nos._exit(1)\n"}), _target(0, 0)),
        Student("segfault_kernel", _solved(**{TARGET: "import ctypes\nctypes.string_at(0)\n"}), _target(0, 0)),
        Student("memory_bomb", _solved(**{TARGET: (
            "def relu_forward(Z):\n    hoard = []\n    while True:\n"
            "        hoard.append(np.ones(2**27))  # 1 GiB at a time\n")}), _target(0, 0)),
        Student("patch_numpy_testing", _solved(**{TARGET: float64_only_wrong + (
            "\nnp.testing.assert_array_equal = lambda *a, **k: None\n"
            "np.testing.assert_allclose = lambda *a, **k: None\nnp.allclose = lambda *a, **k: True\n")}),
                _target(0, 0), flags=["replaced"]),
        Student("patch_grading", _solved(**{TARGET: wrong_relu + (
            "\nimport trainsys.grading\n"
            "trainsys.grading.check_relu_forward = lambda fn: 'relu_forward: all 7 cases passed'\n")}),
                _target(0, 0), flags=["replaced trainsys.grading.check_relu_forward"]),
        Student("import_reference", _solved(**{TARGET: "from trainsys.memtrain.mlp import relu_forward\n"}),
                _target(0, 0), flags=["reference implementation"]),  # withheld while grading: fails, flagged
        Student("edit_locked_cell", _solved(), full, edit="edit_visible"),
        Student("delete_locked_cells", _solved(), full, edit="delete_tests"),
        Student("missing_notebook", _solved(), _target(0, 0), edit="remove"),
        Student("corrupt_json", _solved(), _target(0, 0), edit="corrupt", flags=["unreadable notebook"]),
        Student("duplicate_cell_ids", _solved(), full, edit="duplicate_ids", flags=["duplicated cell id"]),
        Student("warnings_on_stderr", _solved(**{TARGET: "import warnings\n" + relu.replace(
            "def relu_forward(Z):", "def relu_forward(Z):\n    warnings.warn('slow path', UserWarning)\n"
            "    np.log(np.zeros(1))  # RuntimeWarning: divide by zero", 1)}), full),
        Student("syntax_error", _solved(**{TARGET: "def relu_forward(Z)\n    return Z\n"}), _target(0, 0)),
        Student("error_after_definition", _solved(**{TARGET: relu + "\nraise RuntimeError('left over')\n"}), full),
        Student("helper_in_extra_cell", _solved(**{TARGET: "def relu_forward(Z):\n    return _relu_helper(Z)\n"}),
                full, edit="helper_cell"),
        Student("huge_output", _solved(**{TARGET: relu + "\nfor i in range(20000):\n    print(i)\n"}), full),
        Student("alternative_solution", _solved(**{TARGET: ALTERNATIVE_RELU}), full),
        Student("scratch_files", _solved(), full, edit="scratch_files",
                flags=["skipped scratch.ipynb (not a notebook of this assignment)"]),
        Student("old_jupyter", _solved(), full, edit="nbformat_4_4", flags=["upgraded from nbformat 4.4 to 4.5"]),
    ]
    for stem, function in lessons.items():
        for index, (description, _) in enumerate(m1p1_mlp.MUTANTS[function]):
            answer = _mutant_source(stem, description)
            visible = 2.0 if _visible_passes(stem, answer) else 0.0
            roster.append(Student(f"mutant_{function}_{index}", _solved(**{stem: answer}),
                                  {**full, stem: (visible, 0.0)}))
    if their_notebook_only:
        for student in roster:
            if student.name not in WHOLE:
                stem = next((s for s, f in lessons.items() if student.name.startswith(f"mutant_{f}_")), TARGET)
                student.submitted = (stem,)
                student.expected = {s: student.expected[s] if s == stem else (0.0, 0.0) for s in lessons}
    return roster


def _edit(path: Path, how: str) -> None:
    if how == "remove":
        path.unlink()
        return
    if how == "corrupt":
        path.write_text(path.read_text()[: len(path.read_text()) // 2])
        return
    if how == "scratch_files":  # a scratch copy of the notebook and notes beside the submission
        shutil.copy(path, path.with_name("scratch.ipynb"))
        path.with_name("notes.txt").write_text("try np.maximum next time\n")
        return
    nb = json.loads(path.read_text())
    graded = [c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade")]
    if how == "edit_visible":
        graded[0]["source"] = "pass  # the tests were in my way\n"
    elif how == "delete_tests":
        nb["cells"] = [c for c in nb["cells"] if c not in graded]
    elif how == "helper_cell":
        answer = next(i for i, c in enumerate(nb["cells"]) if c.get("metadata", {}).get("nbgrader", {}).get("solution"))
        nb["cells"].insert(answer, {"cell_type": "code", "id": "my-helper", "metadata": {}, "outputs": [],
                                    "execution_count": None, "source": _solution(TARGET).replace(
                                        "def relu_forward(", "def _relu_helper(")})
    elif how == "nbformat_4_4":  # saved by an older Jupyter: format 4.4, no cell ids
        nb["nbformat_minor"] = 4
        for cell in nb["cells"]:
            cell.pop("id", None)
    elif how == "duplicate_ids":
        nb["cells"][1]["id"] = nb["cells"][0]["id"]
        nb["cells"][3]["id"] = nb["cells"][0]["id"]
    path.write_text(json.dumps(nb))


def submit_class(course: Path, roster: list[Student]) -> None:
    """Write every student's submission under ``course/submitted``."""
    for student in roster:
        answers = {f"{stem}.ipynb": {LESSONS[stem]: src} for stem, src in student.answers.items() if src is not None}
        folder = submit(course, student.name, ASSIGNMENT, answers)
        for stem in student.answers:
            if student.submitted is not None and stem not in student.submitted:
                (folder / f"{stem}.ipynb").unlink()
        if student.edit:
            _edit(folder / f"{TARGET}.ipynb", student.edit)
