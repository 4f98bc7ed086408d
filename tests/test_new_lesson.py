"""``make new-lesson`` creates what README's "Writing a lesson" lists, and a lesson made with it is gradable.

In a copy of the working tree (its own ``src/`` first on ``PYTHONPATH``): the refusals change nothing; ``make
new-lesson`` scaffolds a throwaway lesson (``m2p7.31 rounds_for_steps``) whose files are exactly the README's
checklist and whose places the lesson index finds; the part's tests then fail, naming the placeholders and the
missing answers; an author fills in a small real function, its check's cases, its answers, tests and notebook, runs
``make release``'s two steps for the part, and the part's tests pass. Every lesson of the course is also held to
having no placeholder left (:func:`test_no_placeholder_is_left`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tests.lesson_index import lessons
from tests.new_lesson import PLACEHOLDER, Request, ScaffoldError, plan, scaffold, todo

ROOT = Path(__file__).resolve().parents[1]
FUNCTION, FOLDER = "rounds_for_steps", "m2p7-evaluation-communication"
NN = f"{max(int(key[-2:]) for key in lessons() if key.startswith('m2p')) + 1:02d}"  # after Module 2's last lesson
KEY = f"m2p7.{NN}"  # m2p7.31 while the course has 30 lessons in Module 2 (Part 7 is its last part)
REQUEST = Request(KEY, FUNCTION, "total_steps, inner_steps", "trainsys.diloco.evaluation", "diloco_loop",
                  "Rounds for a step budget")
PLACE = re.compile(r"`((?:src|tests|solutions|notebooks)/[^`\s…]+|_toc\.yml)`")  # as test_lesson_index reads them
FILL = {"<reference>": "diloco/evaluation", "<checks>": "diloco_loop", "<mutants>": "m2_evaluation", "<mp>": "m2p7",
        "<part>": FOLDER, "<NN>": NN, "<function>": FUNCTION, "<tests>": f"m2p7_{FUNCTION}"}
LESSON_TESTS = ("tests/test_m2p7_rounds_for_steps.py", "tests/test_answers.py", "tests/test_lesson_index.py",
                "tests/test_lessons.py", "tests/test_new_lesson.py", "tests/test_notation.py", "tests/test_alt_text.py")
"""The test files that hold a lesson's tests (besides nbval); the copy runs those of them that exist."""
COURSE_WIDE = ("tests/test_lessons.py::test_toc_and_lessons_agree",
               "tests/test_lessons.py::test_syllabus_headers_and_totals_are_current",
               "tests/test_lessons.py::test_no_prose_paragraph_is_shared_between_lessons",
               "tests/test_lesson_index.py::test_every_lesson_release_and_check_has_a_key",
               "tests/test_answers.py::test_no_declaration_or_answer_without_a_lesson",
               "tests/test_new_lesson.py::test_no_placeholder_without_a_lesson")
"""The tests over the whole course that a new lesson joins (no part marker: run by name, those that exist)."""


# --- no placeholder left -----------------------------------------------------------------------------------------
@functools.cache
def _placeholders(root: Path = ROOT) -> dict[str, list[str]]:
    """``key → ["file:line", …]`` for every ``TODO(new-lesson <key>)`` in the course's sources."""
    marker = re.compile(re.escape(PLACEHOLDER.rstrip(")")) + r" (m\d+p\d+\.\d\d)\)")
    found: dict[str, list[str]] = {}
    files = [*root.glob("src/**/*.py"), *root.glob("tests/**/*.py"), *root.glob("solutions/*/*.ipynb"),
             root / "_toc.yml"]
    for path in sorted(files):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for key in marker.findall(line):
                found.setdefault(key, []).append(f"{path.relative_to(root)}:{number}")
    return found


LESSONS = lessons()


@pytest.mark.parametrize("key", LESSONS, ids=[f"{k} {l.function}" for k, l in LESSONS.items()])
def test_no_placeholder_is_left(key: str) -> None:
    left = _placeholders().get(key, [])
    assert not left, f"lesson {key} still waits for its author at {len(left)} places marked {todo(key)}: {left}"


def test_no_placeholder_without_a_lesson() -> None:
    stray = {key: places for key, places in _placeholders().items() if key not in LESSONS}
    assert not stray, f"placeholders of lessons that do not exist (a scaffold half removed?): {stray}"


# --- a copy of the course ----------------------------------------------------------------------------------------
SKIP = shutil.ignore_patterns(".git", ".venv", "_build", "node_modules", "vendor", "__pycache__", ".pytest_cache",
                              "*.db", "submitted", "autograded", "feedback", "reports")
"""What a copy leaves out when the repository is not a git checkout (build outputs, caches, a class's files)."""


def _copy(target: Path) -> Path:
    """The working tree's tracked and not-ignored files (as they are now) under ``target``; outside a git checkout,
    the tree without :data:`SKIP`."""
    listing = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True)
    if listing.returncode != 0:
        shutil.copytree(ROOT, target, ignore=SKIP, dirs_exist_ok=True)
        return target
    for name in filter(None, listing.stdout.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def _env(course: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JUPYTER_CONFIG_PATH")}
    env.update(PYTHONPATH=str(course / "src"), JUPYTER_CONFIG_PATH=str(course / "autograder"),
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", PYDEVD_DISABLE_FILE_VALIDATION="1")
    return env


def _state(root: Path) -> dict[str, str]:
    """``file → SHA-256`` of everything in the copy but caches and the gradebook."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file() and not {"__pycache__", ".pytest_cache"} & set(p.parts) and p.suffix != ".db"}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _copy(tmp_path_factory.mktemp("course"))


@pytest.mark.parametrize(("change", "argument", "given"), [
    ({"key": "m2p7.30"}, "key", "m2p7.30 is solutions/m2p7-evaluation-communication/30_communication_savings"),
    ({"key": "m2p7.5"}, "key", "m<module>p<part>.<NN>"),
    ({"key": "m2p9.01"}, "key", "a key in an existing part"),
    ({"key": "m2p5.31"}, "key", "none is free: m2p5 ends at 24 and the next part starts at 25"),
    ({"key": "m2p7.27"}, "key", "27 is m2p6.27"),
    ({"function": "communication_savings"}, "function", "graded by m2p7.30"),
    ({"function": "evaluate heldout"}, "function", "lower-case Python name"),
    ({"function": "validate_history"}, "function", "trainsys.diloco.evaluation does not define yet"),
    ({"args": "total_steps,,"}, "args", "parameters as written in its def"),
    ({"reference": "numpy.linalg"}, "reference", "trainsys.<package>.<module>"),
    ({"reference": "trainsys.nowhere.rounds"}, "reference", "existing package folder"),
    ({"check": "_harness"}, "check", "module of trainsys.grading"),
    ({"title": ""}, "title", "one-line lesson title"),
], ids=lambda v: v if isinstance(v, str) else "-".join(f"{k}={x}" for k, x in v.items()))
def test_a_refused_request_names_its_argument_and_changes_nothing(pristine: Path, change: dict, argument: str,
                                                                  given: str) -> None:
    before = _state(pristine)
    request = Request(**{**REQUEST.__dict__, **change})
    message = rf"^{argument} must be .*{re.escape(given)}.*got {re.escape(repr(change[argument]))}"
    with pytest.raises(ScaffoldError, match=message):
        scaffold(request, root=pristine, release=lambda root, names: pytest.fail("no release for a refused request"))
    assert _state(pristine) == before


def test_a_release_that_fails_puts_every_file_back(pristine: Path) -> None:
    before = _state(pristine)

    def release(root: Path, names: list[str]) -> None:
        (root / "notebooks" / names[0] / "01_half_written.ipynb").write_text("{}")  # nbgrader had begun
        raise RuntimeError("generating the release failed")

    with pytest.raises(RuntimeError, match="generating the release failed"):
        scaffold(REQUEST, root=pristine, release=release)
    assert _state(pristine) == before


def test_make_new_lesson_refuses_an_existing_key_on_the_command_line(pristine: Path) -> None:
    before = _state(pristine)
    result = _make_new_lesson(pristine, {**REQUEST.__dict__, "key": "m2p7.30"})
    assert result.returncode != 0 and "key must be a new lesson key" in result.stderr, result.stderr[-2000:]
    assert "nothing was written" in result.stderr
    assert _state(pristine) == before


def _make_new_lesson(course: Path, request: dict[str, str]) -> subprocess.CompletedProcess:
    """``make new-lesson`` in ``course`` with this repository's virtual environment (its setup not redone)."""
    venv = Path(sys.executable).parent.parent
    variables = [f"{name.upper()}={value}" for name, value in request.items()]
    return subprocess.run(["make", "--no-print-directory", "-C", str(course), "-o", str(venv / ".installed"),
                           f"VENV={venv}", "new-lesson", *variables], env=_env(course), capture_output=True,
                          text=True, timeout=300)


# --- the author's part -------------------------------------------------------------------------------------------
def _checklist(readme: str) -> tuple[set[str], set[str]]:
    """The places the numbered steps of README's "Writing a lesson" name, filled in for the throwaway lesson:
    ``(named with a placeholder, named as they are)`` (``src/trainsys/grading/__init__.py``, ``_toc.yml``, …)."""
    start = readme.index("## Writing a lesson\n")
    section = readme[start:readme.index("\n## ", start + 1)]
    steps = re.search(r"^1\. .*?(?=\n\n(?![ \d]))", section, re.S | re.M)
    assert steps, "README's 'Writing a lesson' has no numbered steps"
    templated, plain = set(), set()
    for place in PLACE.findall(steps[0]):
        filled = place
        for placeholder, value in FILL.items():
            filled = filled.replace(placeholder, value)
        assert "<" not in filled, f"README's checklist names {place}, with a placeholder this test does not fill"
        (templated if filled != place else plain).add(filled)
    return templated, plain


def _replace(path: Path, old: str, new: str, regex: bool = False) -> None:
    text = path.read_text()
    changed, count = re.subn(old, lambda _: new, text, count=1, flags=re.S) if regex else (
        text.replace(old, new, 1), text.count(old))
    assert count, f"{path}: the scaffold's {old[:60]!r} is not there"
    path.write_text(changed)


def _author(course: Path) -> None:
    """What the lesson's author writes: the reference, the check's cases and clauses, the answers, the tests and the
    notebook's prose and cells, for a small real function: ⌈T / H⌉ rounds for T inner steps at H per round."""
    t = todo(KEY)
    _replace(course / "src/trainsys/diloco/evaluation.py", rf"def {FUNCTION}\(.*\Z", f'''\
def {FUNCTION}(total_steps: int, inner_steps: int) -> int:
    """Outer rounds for ``total_steps`` inner steps at ``inner_steps`` (H) per round: ⌈T / H⌉, an int.
    Raises ``TypeError``/``ValueError`` naming the argument for a count that is not an integer >= 1."""
    from trainsys._validation import require_int

    total = require_int("total_steps", total_steps, minimum=1)
    return -(-total // require_int("inner_steps", inner_steps, minimum=1))
''', regex=True)
    check = course / "src/trainsys/grading/diloco_loop.py"
    _replace(check, f"{t} what the cases cover", "divisible and non-divisible budgets, counts below 1")
    _replace(check, r"    cases = \[  # .*?raise NotImplementedError\([^\n]*\)\n", '''\
    cases = [("100 steps, H = 10", fixed(100, 10)), ("101 steps, H = 10 (a last, shorter round)", fixed(101, 10)),
             ("5 steps, H = 500 (one round)", fixed(5, 500))]
    invalid = [("inner_steps = 0", BAD, "inner_steps", fixed(100, 0)),
               ("total_steps = -1", BAD, "total_steps", fixed(-1, 10))]
''', regex=True)
    _replace(check, rf'"{FUNCTION}": {{  # [^\n]*\n.*?\n    }},', f'''"{FUNCTION}": {{
        "failure modes": ("inner_steps = 0", "total_steps = -1"),
        "metric that proves it correct": ("100 steps", "101 steps"),
    }},''', regex=True)

    developer = course / "tests/answers/developer/m2_evaluation.py"
    _replace(developer, "\nMUTANTS = {", '''
def _rounds_floor(total_steps, inner_steps):
    return total_steps // inner_steps


def _rounds_unchecked(total_steps, inner_steps):
    return math.ceil(total_steps / inner_steps)


MUTANTS = {''')
    _replace(developer, "\nimport numpy as np\n", "\nimport math\n\nimport numpy as np\n")
    _replace(developer, rf'"{FUNCTION}": \[  # [^\n]*\n    \],', f'''"{FUNCTION}": [
        ("floor division drops the last, shorter round", _rounds_floor),
        ("no check of the counts: inner_steps = 0 divides by zero", _rounds_unchecked),
    ],''', regex=True)
    blind = course / "tests/answers/blind/m2p7.py"
    _replace(blind, "\nMUTANTS = {", '''
def _rounds_counts(total_steps, inner_steps, check_total=True):
    for name, value in (("total_steps", total_steps), ("inner_steps", inner_steps)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int")
        if value < 1 and (check_total or name == "inner_steps"):
            raise ValueError(f"{name} must be >= 1, got {value}")


def _rounds_true_division(total_steps, inner_steps):
    _rounds_counts(total_steps, inner_steps)
    return total_steps / inner_steps


def _rounds_negative_budget(total_steps, inner_steps):
    _rounds_counts(total_steps, inner_steps, check_total=False)
    return -(-total_steps // inner_steps)


def _rounds_one_more(total_steps, inner_steps):
    _rounds_counts(total_steps, inner_steps)
    return total_steps // inner_steps + 1


def _rounds_alt_ceil(total_steps, inner_steps):
    _rounds_counts(total_steps, inner_steps)
    return (total_steps + inner_steps - 1) // inner_steps


def _rounds_alt_loop(total_steps, inner_steps):
    _rounds_counts(total_steps, inner_steps)
    rounds, done = 0, 0
    while done < total_steps:
        rounds, done = rounds + 1, done + inner_steps
    return rounds


MUTANTS = {''')
    _replace(blind, rf'"{FUNCTION}": \[  # {re.escape(t)}: at least three[^\n]*\n    \],', f'''"{FUNCTION}": [
        ("true division: 10.1 rounds for 101 steps", _rounds_true_division),
        ("a negative budget accepted", _rounds_negative_budget),
        ("always one round more: T // H + 1", _rounds_one_more),
    ],''', regex=True)
    _replace(blind, rf'"{FUNCTION}": \[  # {re.escape(t)}: at least two[^\n]*\n    \],', f'''"{FUNCTION}": [
        ("(T + H - 1) // H", _rounds_alt_ceil),
        ("counts rounds until the budget is spent", _rounds_alt_loop),
    ],''', regex=True)
    _replace(course / "tests/answers/clauses/diloco_loop.py", rf'"{FUNCTION}": {{  # [^\n]*\n.*?\n    }},', f'''\
"{FUNCTION}": {{
        "failure modes": [existing("{FUNCTION}", "no check of the counts"),
                          existing("{FUNCTION}", "a negative budget")],
        "metric that proves it correct": [existing("{FUNCTION}", "floor division"),
                                          existing("{FUNCTION}", "always one round more")],
    }},''', regex=True)
    (course / "tests/test_m2p7_rounds_for_steps.py").write_text(f'''\
"""Lesson {KEY}: rounds_for_steps against counting."""

import pytest

from trainsys.diloco.evaluation import {FUNCTION}


def test_m2_{NN}_rounds_for_steps_counts_the_rounds_a_budget_takes() -> None:
    for total in range(1, 60):
        for inner in range(1, 25):
            rounds = [min(inner, total - start) for start in range(0, total, inner)]  # each round's steps
            assert {FUNCTION}(total, inner) == len(rounds) and sum(rounds) == total


def test_m2_{NN}_rounds_for_steps_refuses_counts_below_one() -> None:
    with pytest.raises(ValueError, match="inner_steps"):
        {FUNCTION}(10, 0)
    with pytest.raises(TypeError, match="total_steps"):
        {FUNCTION}(True, 3)
''')
    _author_notebook(course / "solutions" / FOLDER / f"{NN}_{FUNCTION}.ipynb", t)


NOTEBOOK = {  # cell index → what the author writes there (0: the title cell, 9: the hidden tests, kept)
    1: "import numpy as np\nimport pytest",
    2: "## Intuition\n\nA DiLoCo worker synchronises once every $H$ inner steps, so a budget of $T$ inner steps "
       "costs a number of outer rounds, and every round sends one pseudo-gradient per worker: that count is the "
       "communication bill.",
    3: "## Concepts\n\n**Contract** of `rounds_for_steps(total_steps, inner_steps) -> int`:\n\n"
       "| name | type and shape | dtype | meaning |\n|---|---|---|---|\n"
       "| `total_steps` | Python int $T \\ge 1$ | — | the inner-step budget |\n"
       "| `inner_steps` | Python int $H \\ge 1$ | — | inner steps per round |\n\n"
       "- **Failure modes:** a count below 1, or not an integer, raises naming its argument.\n"
       "- **Metric that proves it correct:** exactly $\\lceil T/H \\rceil$; the last round is shorter when $H$ "
       "does not divide $T$.",
    4: "## The mathematics\n\nThe rounds must cover the budget, $rH \\ge T$, and the fewest that do are\n\n$$\n"
       "r = \\left\\lceil \\frac{T}{H} \\right\\rceil = \\left\\lfloor \\frac{T + H - 1}{H} \\right\\rfloor ,\n$$\n\n"
       "integers throughout.",
    5: "## Implementation\n\n1. Check that both counts are integers $\\ge 1$.\n2. Return $\\lceil T/H \\rceil$.",
    6: 'def rounds_for_steps(total_steps, inner_steps):\n    """Outer rounds for total_steps inner steps at '
       'inner_steps per round: ceil(T / H)."""\n    ### BEGIN SOLUTION\n    for name, value in (("total_steps", '
       'total_steps), ("inner_steps", inner_steps)):\n        if isinstance(value, bool) or not isinstance(value, '
       'int):\n            raise TypeError(f"{name} must be an int, got {type(value).__name__}")\n        if value < 1:'
       '\n            raise ValueError(f"{name} must be >= 1, got {value}")\n    return -(-total_steps // inner_steps)'
       "\n    ### END SOLUTION",
    7: "## Tests\n\n1. **By hand.** $T = 100$, $H = 10$: 10 rounds; $T = 101$: 11.\n2. **Boundary.** $H > T$: one "
       "round.\n3. **Invalid input.** $H = 0$ raises.",
    8: "assert rounds_for_steps(100, 10) == 10\nassert rounds_for_steps(101, 10) == 11\n"
       "assert rounds_for_steps(5, 500) == 1\nwith pytest.raises(ValueError, match=\"inner_steps\"):\n"
       "    rounds_for_steps(100, 0)",
    10: "## Common mistakes\n\n- **Floor division.** `T // H` drops the last, shorter round: 10 for $T = 101$.\n"
        "- **No check of $H$.** $H = 0$ divides by zero instead of naming `inner_steps`.",
    11: "## Checkpoint\n\nYou can now claim: *a budget of $T$ steps costs $\\lceil T/H \\rceil$ rounds of "
        "communication.*\n\nThe cell counts the rounds of a 1,000-step budget for four values of $H$.",
    12: "from trainsys.lesson import own_or_reference\nfrom trainsys.diloco.evaluation import rounds_for_steps as "
        "reference_rounds_for_steps\n\nyours = own_or_reference(rounds_for_steps, reference_rounds_for_steps)\n"
        "for H in (1, 10, 30, 500):\n    print(f\"H = {H:3d}: {yours(1000, H):4d} rounds\")",
    13: "**Question.** How many rounds does $H = 30$ take for 1,000 steps, and how long is the last?\n\n<details>\n"
        "<summary>Answer</summary>\n\n34 rounds: 33 full ones cover 990 steps, the last has 10.\n\n</details>",
}


def _author_notebook(path: Path, t: str) -> None:
    nb = nbformat.read(path, as_version=4)
    assert len(nb.cells) == 14, [c.source[:30] for c in nb.cells]
    nb.cells[0].source = nb.cells[0].source.replace(f"{t} what it computes, in one sentence.",
                                                    "the outer rounds a budget of inner steps takes.")
    for index, text in NOTEBOOK.items():
        nb.cells[index].source = text
    nbformat.write(nb, path)


def _run(course: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=course, env=_env(course), capture_output=True, text=True,
                          timeout=timeout)


def _part_tests(course: Path) -> subprocess.CompletedProcess:
    """The part's tests of the new lesson (``pytest -m m2p7 -k rounds_for_steps``) in the copy."""
    files = [name for name in LESSON_TESTS if (course / name).is_file()]
    return _run(course, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-m", "m2p7", "-k", FUNCTION, *files)


def test_a_throwaway_lesson_from_make_new_lesson_to_passing_tests(tmp_path: Path) -> None:
    course = _copy(tmp_path / "course")
    made = _make_new_lesson(course, REQUEST.__dict__)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    written = {m[1] for m in re.finditer(r"^(?:wrote|edited) (\S+)$", made.stdout, re.M)}

    # what make new-lesson wrote is README's checklist (the part's book pages besides: the syllabus totals)
    templated, plain = _checklist((ROOT / "README.md").read_text())
    toc_entries = {place for place in templated if not Path(place).suffix}
    assert templated - toc_entries <= written, f"README lists, make new-lesson did not write: {templated - written}"
    unlisted = {p for p in written if not p.startswith("book/")} - templated - plain
    assert not unlisted, f"make new-lesson wrote files README's checklist does not name: {sorted(unlisted)}"
    assert {p for p in written if p.startswith("book/")} == {"book/intro.md", "book/m2/index.md",
                                                            "book/m2/p7_evaluation_communication.md"}
    toc = (course / "_toc.yml").read_text()
    assert all(f"- file: {entry}\n" in toc for entry in toc_entries), toc_entries

    # the lesson index finds every place from the key
    found = _run(course, "-c", f"from tests.lesson_index import places; p = places({KEY!r}); "
                              "print(p['reference'], p['check'], *p['tests'])")
    assert found.stdout.split() == [f"trainsys.diloco.evaluation.{FUNCTION}",
                                    f"trainsys.grading.diloco_loop.check_{FUNCTION}",
                                    f"tests/test_m2p7_{FUNCTION}.py"], found.stdout + found.stderr[-2000:]

    # before the author writes: the part's tests fail, naming what is missing
    before = _part_tests(course)
    report = before.stdout + before.stderr
    assert before.returncode == 1, report[-4000:]
    failed = {line.split("::")[0].split()[-1] for line in report.splitlines() if line.startswith("FAILED ")}
    expected = {"tests/test_m2p7_rounds_for_steps.py", "tests/test_new_lesson.py", "tests/test_lesson_index.py"}
    expected |= {"tests/test_answers.py"} if (course / "tests/test_answers.py").is_file() else set()
    assert expected <= failed, (sorted(failed), report[-4000:])
    assert f"lesson {KEY} still waits for its author" in report and "src/trainsys/diloco/evaluation.py" in report
    stub = _run(course, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--nbval-lax",
                f"solutions/{FOLDER}/{NN}_{FUNCTION}.ipynb")
    assert stub.returncode == 1, stub.stdout[-3000:]
    assert f"the visible tests of {FUNCTION} are not written yet" in stub.stdout, stub.stdout[-3000:]

    # the author writes, then make release's two steps for the part; the part's tests pass
    _author(course)
    for step in (["-m", "trainsys.syllabus"],
                 ["-c", f"from trainsys.course import REPO, generate_releases; generate_releases(REPO, [{FOLDER!r}])"]):
        done = _run(course, *step)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    after = _part_tests(course)
    assert after.returncode == 0, (after.stdout + after.stderr)[-6000:]
    assert re.search(r"(\d+) passed", after.stdout) and " failed" not in after.stdout, after.stdout[-2000:]
    course_wide = [test for test in COURSE_WIDE if f"def {test.split('::')[1]}(" in _text(course / test.split("::")[0])]
    executed = _run(course, "-m", "pytest", "-p", "no:cacheprovider", "-q", *course_wide, "--nbval-lax",
                    f"solutions/{FOLDER}/{NN}_{FUNCTION}.ipynb")
    assert executed.returncode == 0, executed.stdout[-3000:]
    passed = re.search(r"(\d+) passed", executed.stdout)
    assert passed and int(passed[1]) > len(course_wide), f"the notebook's cells did not run: {executed.stdout[-500:]}"


def _text(path: Path) -> str:
    return path.read_text() if path.is_file() else ""


def _shape(nb: dict) -> tuple[list[str], list[tuple]]:
    """A notebook's anatomy up to its Checkpoint heading — each cell's kind (a markdown cell by its ``## `` heading,
    a graded cell by its role) — and its graded cells' metadata without the grade id, with their tags."""
    kinds, graded = [], []
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        meta = cell["metadata"].get("nbgrader")
        if cell["cell_type"] == "markdown":
            heading = re.search(r"^## (.+)$", text, re.M)
            kinds.append(heading[1] if heading else "prose")
        elif meta:
            role = "answer" if meta.get("solution") else "hidden" if "### BEGIN HIDDEN TESTS" in text else \
                "visible" if meta.get("grade") else meta["grade_id"]
            kinds.append(role)
            graded.append((role, sorted((k, v) for k, v in meta.items() if k != "grade_id"),
                           cell["metadata"].get("tags", [])))
        else:
            kinds.append("code")
        if kinds[-1] == "Checkpoint":
            break
    return kinds, graded


def test_the_scaffold_has_the_shape_every_lesson_has() -> None:
    """Cell order up to the Checkpoint, nbgrader metadata and tags of the graded cells: the scaffold's notebook is
    built like each of the course's lessons (nothing is written: the texts are planned only)."""
    import json

    _, files = plan(REQUEST)
    scaffold_shape = _shape(json.loads(files[ROOT / "solutions" / FOLDER / f"{NN}_{FUNCTION}.ipynb"]))
    different = [key for key, lesson in LESSONS.items()
                 if _shape(json.loads((ROOT / lesson.source).read_text())) != scaffold_shape]
    assert not different, f"lessons built otherwise than make new-lesson builds them: {different}"
