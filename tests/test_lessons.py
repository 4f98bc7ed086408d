"""The lesson linter: every source notebook has the course's anatomy and is wired into the book.

Checks, per notebook in ``solutions/``: the seven sections of a lesson in order, a display equation,
exactly one graded answer cell with one solution region, visible tests, exactly one hidden-test cell
that calls ``trainsys.grading``, 5 points in all, unique nbgrader ids; every Checkpoint question's
answer folded in a collapsed ``<details>`` block; and across the course: every notebook appears in
``_toc.yml``, every ``_toc.yml`` entry exists, and no paragraph of prose is shared between two notebooks.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ["Intuition", "Concepts", "The mathematics", "Implementation", "Tests", "Common mistakes", "Checkpoint"]
SOURCES = sorted(ROOT.glob("solutions/*/*.ipynb"))
NAME = re.compile(r"^(\d{2})_([a-z0-9_]+)\.ipynb$")


def _nbgrader(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def _toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files: list[str] = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections"))
            walk(entry.get("chapters"))

    walk(toc.get("parts"))
    walk(toc.get("chapters"))
    return files


def test_there_are_lessons() -> None:
    assert SOURCES, "no lesson notebooks found under solutions/"


@pytest.mark.parametrize("path", SOURCES, ids=[p.name for p in SOURCES])
def test_lesson_anatomy(path: Path) -> None:
    assert NAME.match(path.name), f"{path.name}: lesson files are named NN_<function_name>.ipynb"
    function = NAME.match(path.name).group(2)
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)

    headings = [m.group(1).strip() for c in nb.cells if c.cell_type == "markdown"
                for m in re.finditer(r"^## (.+)$", c.source, flags=re.M)]
    found = [h for h in headings if h in SECTIONS]
    assert found == SECTIONS, f"{path.name}: sections must be {SECTIONS} in this order, found {found}"
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# "), "a title comes first"

    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "$$" in markdown, f"{path.name}: the mathematics needs at least one display equation"

    answers = [c for c in nb.cells if _nbgrader(c).get("solution")]
    assert len(answers) == 1, f"{path.name}: exactly one graded answer cell, found {len(answers)}"
    assert answers[0].source.count("### BEGIN SOLUTION") == 1 and answers[0].source.count("### END SOLUTION") == 1
    assert re.search(rf"^def {function}\(", answers[0].source, flags=re.M), f"the answer cell defines {function}()"

    graded = [c for c in nb.cells if _nbgrader(c).get("grade")]
    hidden = [c for c in graded if "### BEGIN HIDDEN TESTS" in c.source]
    visible = [c for c in graded if "### BEGIN HIDDEN TESTS" not in c.source]
    assert len(hidden) == 1, f"{path.name}: exactly one hidden-test cell, found {len(hidden)}"
    assert re.search(rf"trainsys\.grading import check_{function}\b", hidden[0].source)
    assert f"check_{function}({function})" in hidden[0].source
    assert "remove-cell" in hidden[0].metadata.get("tags", []), "hidden tests must be removed from the book"
    assert visible and all("assert" in c.source or "pytest.raises" in c.source for c in visible)
    assert sum(_nbgrader(c).get("points", 0) for c in graded) == 5, f"{path.name}: a lesson is worth 5 points"

    ids = [_nbgrader(c)["grade_id"] for c in nb.cells if _nbgrader(c)]
    assert len(ids) == len(set(ids)), f"{path.name}: duplicated nbgrader grade_id in {ids}"
    cell_ids = [c.get("id") for c in nb.cells]
    assert len(cell_ids) == len(set(cell_ids)), f"{path.name}: duplicated cell ids"
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "sources are stored without outputs"


QUESTION = re.compile(r"\*\*Question(?: \d+)?\.\*\*")
# A folded answer: the question's own paragraph(s), then a <details> block whose summary is "Answer", with
# blank lines around the markdown body (so that maths and emphasis render in JupyterLab and in the book).
FOLDED = re.compile(r"\n\n<details>\n<summary>Answer</summary>\n\n(?P<body>.*?)\n\n</details>(?=\n\n|\Z)", re.S)
# An answer in plain sight: an "Answer" label opened by emphasis, "*(Answer:", "*Answer:*", "_Answer._", ...
ANSWER_MARKER = re.compile(r"[*_]\(?\s*Answer\b")


@pytest.mark.parametrize("path", SOURCES, ids=[p.name for p in SOURCES])
def test_checkpoint_answers_are_folded(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    cells = [c.source for c in nb.cells if c.cell_type == "markdown"]
    start = next(i for i, s in enumerate(cells) if re.search(r"^## Checkpoint\s*$", s, flags=re.M))
    before, checkpoint = "\n\n".join(cells[:start]), cells[start:]
    assert not QUESTION.search(before), f"{path.name}: a **Question.** outside the Checkpoint"
    assert sum(len(QUESTION.findall(s)) for s in checkpoint) >= 1, f"{path.name}: the Checkpoint asks no **Question.**"

    for source in checkpoint:
        questions = [m.start() for m in QUESTION.finditer(source)]
        blocks = list(FOLDED.finditer(source))
        assert source.count("<details>") == len(blocks), f"{path.name}: a <details> block not in the answer form"
        assert len(blocks) == len(questions), f"{path.name}: {len(questions)} questions but {len(blocks)} folded answers"
        for k, (q, block) in enumerate(zip(questions, blocks)):
            following = questions[k + 1] if k + 1 < len(questions) else len(source)
            assert q < block.start() < following, f"{path.name}: question {k + 1}'s answer does not follow it"
            assert block.group("body").strip(), f"{path.name}: question {k + 1} has an empty answer"
            # an unlabelled answer in plain sight: an emphasised paragraph between the question and its block
            assert not re.search(r"\n\n[*_]", source[q:block.start()]), (
                f"{path.name}: question {k + 1} is followed by an emphasised paragraph before its answer")
        outside = FOLDED.sub("", source)
        assert not ANSWER_MARKER.search(outside), f"{path.name}: an answer in plain sight outside a <details> block"

    for source in cells[:start]:
        assert not ANSWER_MARKER.search(source), f"{path.name}: an answer marker outside the Checkpoint"


def test_toc_and_lessons_agree() -> None:
    toc = _toc_files()
    for entry in toc:
        matches = [ROOT / f"{entry}{ext}" for ext in ("", ".md", ".ipynb") if (ROOT / f"{entry}{ext}").is_file()]
        assert matches, f"_toc.yml names {entry!r}, which does not exist"
    listed = {str(Path(e).with_suffix("")) for e in toc}
    for path in SOURCES:
        assert str(path.relative_to(ROOT).with_suffix("")) in listed, f"{path} is not in _toc.yml"


def test_no_prose_paragraph_is_shared_between_lessons() -> None:
    seen: dict[str, set[str]] = defaultdict(set)
    for path in SOURCES:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type != "markdown":
                continue
            for paragraph in re.split(r"\n\s*\n", cell.source):
                text = " ".join(paragraph.split())
                if len(text) >= 80 and not text.startswith("*Module"):
                    seen[text].add(path.name)
    shared = {text[:70]: sorted(names) for text, names in seen.items() if len(names) > 1}
    assert not shared, f"paragraphs copied between lessons: {shared}"


UTILITIES = ("04_relu_forward", "08_relu_backward", "13_scale_accumulated_gradients", "20_make_master_params",
             "21_scale_loss", "31_init_adam_state", "02_relu", "07_init_adamw_state", "12_clone_params",
             "13_scale_params", "14_subtract_params", "21_init_outer_optimizer", "11_clone_model_state",
             "12_load_model_state", "13_zeros_like_state", "14_add_state_dicts", "15_scale_state_dict")
"""Lessons whose function is a few lines once its inputs are checked: a shorter lesson for a smaller task."""


@pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])
def test_lessons_stay_within_their_word_budget(path: Path) -> None:
    """The budget grows with the answer's writing time (``trainsys.syllabus.word_budget``): a lesson whose
    contract is large (a training loop) may say more than one whose answer is a few lines."""
    from trainsys.course import lesson_words
    from trainsys.syllabus import answer_lines, word_budget

    lines = answer_lines(nbformat.read(path, as_version=4))
    budget = word_budget(lines, utility=path.stem in UTILITIES)
    words = lesson_words(path)
    assert words <= budget, f"{path.name}: {words} markdown words, the budget for a {lines}-line answer is {budget}"


def test_the_course_as_a_whole_stays_lean() -> None:
    """Longer budgets for large contracts must not make every lesson long: the median stays at the base budget."""
    from trainsys.course import lesson_words
    from trainsys.syllabus import LESSON_WORDS

    words = sorted(lesson_words(p) for p in SOURCES)
    assert sum(words) <= 100_000 and words[len(words) // 2] <= LESSON_WORDS, (sum(words), words[len(words) // 2])


def test_the_word_budget_grows_with_the_answer() -> None:
    from trainsys.syllabus import word_budget

    assert word_budget(0) == word_budget(40) == 1000 and word_budget(40, utility=True) == 700
    assert word_budget(65) == 1150 and word_budget(164) == 1744  # 150 words per 25 lines past 40
    with pytest.raises(ValueError, match="lines"):
        word_budget(-1)


def test_every_utility_named_is_one_lesson() -> None:
    stems = [p.stem for p in SOURCES]
    assert {name: stems.count(name) for name in UTILITIES} == {name: 1 for name in UTILITIES}


def _graded_function(nb) -> str:
    import ast

    answer = next(c.source for c in nb.cells if _nbgrader(c).get("solution"))
    return next(node.name for node in ast.parse(answer).body if isinstance(node, ast.FunctionDef))


@pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])
def test_checkpoint_runs_the_students_function(path: Path) -> None:
    """The Checkpoint calls the function the student wrote, through ``trainsys.lesson.own_or_reference``
    (which falls back to the package's only on ``NotImplementedError``), and never calls it bare (a stub
    would stop the cell) nor rebinds its name."""
    import ast

    nb = nbformat.read(path, as_version=4)
    function = _graded_function(nb)
    start = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"
                 and re.search(r"^## Checkpoint\s*$", c.source, flags=re.M))
    code = "\n".join(c.source for c in nb.cells[start:] if c.cell_type == "code")
    tree = ast.parse(code)
    wrapped = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
               and node.func.id == "own_or_reference"]
    assert any(node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == function for node in wrapped), (
        f"{path.name}: the Checkpoint must run the student's {function} as own_or_reference({function}, <reference>)")
    bare = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == function]
    assert not bare, f"{path.name}: the Checkpoint calls {function} bare (lines {bare}); call the own_or_reference wrapper"
    rebound = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Name) and node.id == function
               and isinstance(node.ctx, ast.Store)]
    assert not rebound, f"{path.name}: the Checkpoint rebinds {function} (lines {rebound})"
    assert "trainsys.lesson" in code, f"{path.name}: the Checkpoint must import own_or_reference from trainsys.lesson"


def test_syllabus_headers_and_totals_are_current() -> None:
    """Every lesson's header shows its XP and estimated time, and the part, module and introduction pages
    their totals, as ``python -m trainsys.syllabus`` computes them from the lessons."""
    from trainsys import syllabus

    stale = [str(path.relative_to(ROOT)) for path, text in syllabus.plan(ROOT).items() if path.read_text() != text]
    assert not stale, f"out of date (run python -m trainsys.syllabus, then make release): {stale}"


def test_the_time_estimate() -> None:
    from trainsys.syllabus import answer_lines, estimate_minutes

    assert estimate_minutes(words=1500, lines=10) == 25  # 10 reading + 10 writing + 5 running
    assert estimate_minutes(words=1, lines=0) == 10 and estimate_minutes(words=0, lines=0) == 5
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "def f(x):\n    ### BEGIN SOLUTION\n    # a comment\n\n    y = x\n    return y\n    ### END SOLUTION",
        metadata={"nbgrader": {"solution": True}})])
    assert answer_lines(nb) == 2


# The developers' notes live beside the repository, not in it: nothing a student, instructor or reader
# gets may point at them.
NOTES = re.compile(r"\.\./shared|\b(?:FACTS|DESIGN|COURSE|STYLE|TOOLING)\.md\b")
FILE_NAME = re.compile(r"(?<![\w/:.-])(?:\.{0,2}/)?[\w-]+(?:/[\w.-]+)*\.(?:md|ipynb|py|txt|yml|json|csv)\b")
SHIPPED = [*SOURCES, *sorted(ROOT.glob("book/**/*.md")), *sorted(ROOT.glob("src/**/*.py")), ROOT / "README.md",
           ROOT / "Makefile", ROOT / "requirements.txt", ROOT / "_config.yml", ROOT / "_toc.yml"]
SHIPPED = [p for p in SHIPPED if not {"node_modules", "vendor"} & set(p.relative_to(ROOT).parts)]


def test_nothing_points_at_files_outside_the_repository() -> None:
    inside = {p.name for p in ROOT.rglob("*") if not {".venv", "node_modules", ".git", "_build"} & set(p.parts)}
    inside |= {"progress.json", "summary.csv", "grades.csv", "intake.csv", "result.json", "federate.json"}  # what
    # make progress, make grade, the torchrun commands and make federate write
    found = []
    for path in SHIPPED:
        text = path.read_text()
        if path.suffix == ".ipynb":  # lessons: their markdown, the prose a student reads
            text = "\n".join(c.source for c in nbformat.reads(text, as_version=4).cells if c.cell_type == "markdown")
        found += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in NOTES.finditer(text)]
        if path.suffix in (".ipynb", ".md"):
            found += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in FILE_NAME.finditer(text)
                      if Path(m.group(0)).name not in inside and "://" not in text[max(0, m.start() - 40):m.start()]]
    assert not found, f"references to files that are not in the repository: {found}"
