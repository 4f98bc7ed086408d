"""``trainsys.notebook``, the one module that knows a lesson notebook's format: every helper on the real lessons
(source in ``solutions/``, release in ``notebooks/``), read both as nbformat ``NotebookNode`` and as raw JSON;
bad input; the cell builders against the authored cells; and the architecture rule that no other module of
``src/`` spells a marker or reads nbgrader metadata itself.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import json
import warnings
from pathlib import Path

import nbformat
import pytest

from trainsys import notebook as nbk
from trainsys.course import REPO

SOURCES = sorted(REPO.glob("solutions/*/*.ipynb"))
LESSON = REPO / "solutions" / "m1p1-mlp-core" / "03_linear_forward.ipynb"
RELEASE = REPO / "notebooks" / LESSON.parent.name / LESSON.name
FUNCTION = "linear_forward"


def _both(path: Path) -> tuple[nbformat.NotebookNode, dict]:
    return nbformat.read(path, as_version=4), json.loads(path.read_text())


def _roles(nb) -> list[tuple]:
    return [(nbk.grade_id(c), nbk.is_setup(c), nbk.is_answer(c), nbk.is_test(c), nbk.is_visible_test(c),
             nbk.is_hidden_test(c), nbk.has_nbgrader(c), nbk.is_code(c), nbk.source(c)) for c in nbk.cells(nb)]


@pytest.mark.parametrize("path", [LESSON, RELEASE], ids=["source", "release"])
def test_raw_json_and_notebook_node_read_alike(path: Path) -> None:
    node, raw = _both(path)
    assert isinstance(raw["cells"][0]["source"], list)  # raw JSON stores lines: source() joins them
    assert _roles(node) == _roles(raw)


@pytest.mark.parametrize("path", SOURCES, ids=[p.name for p in SOURCES])
def test_every_lesson_and_its_release_have_one_answer_visible_and_hidden_cell(path: Path) -> None:
    function = path.stem.split("_", 1)[1]
    release = json.loads((REPO / "notebooks" / path.parent.name / path.name).read_text())
    for nb, hidden_marker in ((json.loads(path.read_text()), True), (release, False)):
        code = nbk.code_cells(nb)
        assert [nbk.grade_id(c) for c in code if nbk.is_answer(c)] == [function]
        assert [nbk.grade_id(c) for c in code if nbk.is_visible_test(c)] == [nbk.visible_test_id(function)]
        hidden = [c for c in code if nbk.is_hidden_test(c)]
        assert [nbk.grade_id(c) for c in hidden] == [nbk.hidden_test_id(function)]
        assert nbk.has_hidden_region(nbk.source(hidden[0])) is hidden_marker  # the release lost the region
        assert [nbk.grade_id(c) for c in code if nbk.is_setup(c)] == [nbk.SETUP_ID]
    source_nb = json.loads(path.read_text())
    graded = nbk.graded_cells(source_nb)
    assert graded is not None and graded.function == function and graded.answer_id == function
    assert graded.test_ids == (nbk.visible_test_id(function), nbk.hidden_test_id(function))
    assert nbk.hidden_check(nbk.source(nbk.code_cells(source_nb)[3])) == function
    assert nbk.graded_cells(release) is None  # no hidden region left to name the graded function


def test_graded_cells_of_a_source() -> None:
    node, raw = _both(LESSON)
    graded = nbk.read_graded(LESSON)
    assert graded == nbk.graded_cells(node) == nbk.graded_cells(raw)
    assert graded.setup.startswith("import numpy as np")
    assert graded.visible_id == "test_linear_forward_visible" and "assert" in graded.visible
    assert graded.hidden_id == "test_linear_forward_hidden"


def test_student_code_finds_the_answer_by_metadata_then_cell_id_then_position() -> None:
    graded = nbk.read_graded(LESSON)
    release = json.loads(RELEASE.read_text())
    sources, found = nbk.student_code(release, graded)
    assert found == "metadata" and len(sources) == 1 and sources[0].startswith(f"def {FUNCTION}(")
    answer = next(c for c in nbk.cells(release) if nbk.is_answer(c))
    nbk.drop_nbgrader(answer)
    assert not nbk.has_nbgrader(answer) and nbk.student_code(release, graded) == (sources, "cell id")
    answer["id"] = "renamed"
    assert nbk.student_code(release, graded) == (sources, "position")
    release["cells"] = [c for c in release["cells"] if c is not answer]
    assert nbk.student_code(release, graded) == (None, "no answer cell")


def test_student_code_stops_at_the_first_test_cell_and_skips_the_setup() -> None:
    graded = nbk.read_graded(LESSON)
    release = json.loads(RELEASE.read_text())
    extra = {"cell_type": "code", "id": "mine", "metadata": {}, "source": ["x = 1\n", "y = 2"], "outputs": [],
             "execution_count": None}
    tests = next(i for i, c in enumerate(release["cells"]) if nbk.is_test(c))
    release["cells"].insert(tests, copy.deepcopy(extra))  # just before the tests: the student's
    release["cells"].append(extra)  # after the tests: not the student's answer
    sources, _ = nbk.student_code(release, graded)
    assert sources[-1] == "x = 1\ny = 2" and len(sources) == 2 and not any("import numpy" in s for s in sources)


def test_student_code_with_the_tests_deleted_stops_before_the_checkpoint() -> None:
    graded = nbk.read_graded(LESSON)
    assert graded.tail_ids, "the lesson's Checkpoint cell ids are known"
    release = json.loads(RELEASE.read_text())
    release["cells"] = [c for c in release["cells"] if not nbk.is_test(c)]  # a student deleted the test cells
    checkpoint = next(c for c in release["cells"] if c.get("id") == graded.tail_ids[0])
    sources, found = nbk.student_code(release, graded)
    assert found == "metadata" and len(sources) == 1 and sources[0].startswith(f"def {FUNCTION}(")
    assert nbk.source(checkpoint) not in sources  # the Checkpoint imports the reference: not the student's code


def test_answers_replace_and_solution_regions() -> None:
    node, raw = _both(LESSON)
    answers = nbk.answer_sources(node)
    assert list(answers) == [FUNCTION] and answers == nbk.answer_sources(raw)
    body = nbk.solution_body(answers[FUNCTION])
    assert body is not None and nbk.BEGIN_SOLUTION not in body and "return" in body
    assert nbk.solution_body("def f():\n    pass") is None
    assert nbk.replace_sources(node, {FUNCTION: "def linear_forward(x, W, b):\n    return 0"}) == 1
    assert nbk.answer_sources(node)[FUNCTION].endswith("return 0")
    assert nbk.replace_sources(node, {"no such cell": "x"}) == 0


def test_strip_hidden_removes_the_region_and_an_unterminated_one() -> None:
    hidden = next(nbk.source(c) for c in nbk.code_cells(json.loads(LESSON.read_text())) if nbk.is_hidden_test(c))
    stripped = nbk.strip_hidden(hidden, "# gone")
    assert stripped.splitlines() == [hidden.splitlines()[0], "# gone"] and "check_" not in stripped
    assert nbk.strip_hidden("a\n### BEGIN HIDDEN TESTS\nsecret()\n", "# gone") == "a\n# gone"
    assert nbk.strip_hidden("no region", "# gone") == "no region"


def test_run_visible_tests_on_the_reference_and_the_stub() -> None:
    graded = nbk.read_graded(LESSON)
    reference = nbk.answer_sources(json.loads(LESSON.read_text()))[FUNCTION]
    nbk.run_visible_tests(graded.visible, [graded.setup, reference])  # passes: returns, raises nothing
    stub = "def linear_forward(x, W, b):\n    raise NotImplementedError()"
    with pytest.raises(NotImplementedError):
        nbk.run_visible_tests(graded.visible, [graded.setup, stub])
    calls = []

    def spy(*args):
        calls.append(args)
        raise AssertionError("spy")

    with pytest.raises(AssertionError, match="spy"):  # bind: the function the tests meet is the one given
        nbk.run_visible_tests(graded.visible, [graded.setup], {FUNCTION: spy})
    assert calls


def test_run_visible_tests_keep_going_and_ipython_syntax() -> None:
    with pytest.raises(ZeroDivisionError):
        nbk.run_visible_tests("assert x == 1", ["x = 1", "1 / 0"])
    namespace = nbk.run_visible_tests("assert x == 1", ["x = 1", "1 / 0", "%matplotlib inline"], keep_going=True)
    assert namespace["__name__"] == "__main__"
    assert nbk.ipython_to_python("x = 1") == "x = 1"
    assert "get_ipython()" in nbk.ipython_to_python("%time x = 1")


@pytest.mark.parametrize("bad, argument", [(None, "cell"), ([], "cell"), ("cell", "cell")])
def test_a_cell_that_is_not_a_mapping_is_refused(bad, argument) -> None:
    for helper in (nbk.source, nbk.grade_id, nbk.is_answer, nbk.is_visible_test, nbk.has_nbgrader, nbk.drop_nbgrader):
        with pytest.raises(TypeError, match=rf"^{argument} must be a notebook cell"):
            helper(bad)


def test_bad_notebooks_and_arguments_are_refused_by_name() -> None:
    with pytest.raises(TypeError, match="^nb must be a notebook"):
        nbk.cells([])
    with pytest.raises(ValueError, match="^nb must hold a list of cells"):
        nbk.cells({"cells": "not a list"})
    with pytest.raises(TypeError, match="^graded must be the lesson's GradedCells"):
        nbk.student_code({"cells": []}, {"answer_id": "f"})
    with pytest.raises(TypeError, match="^by_grade_id must map"):
        nbk.replace_sources({"cells": []}, ["f"])
    with pytest.raises(TypeError, match="^text must be"):
        nbk.has_hidden_region(["### BEGIN HIDDEN TESTS"])
    with pytest.raises(ValueError, match="^function must be a Python identifier"):
        nbk.visible_test_id("not a name")
    with pytest.raises(TypeError, match="^visible and before must be cell sources"):
        nbk.run_visible_tests("assert True", [1])


def test_hostile_metadata_is_no_nbgrader_metadata() -> None:
    for metadata in ([], "x", {"nbgrader": ["grade"]}, {"nbgrader": None}):
        cell = {"cell_type": "code", "metadata": metadata, "source": "### BEGIN HIDDEN TESTS"}
        assert nbk.nbgrader(cell) == {} and not nbk.has_nbgrader(cell) and not nbk.is_hidden_test(cell)
    assert nbk.cells({"cells": [1, "x", {"cell_type": "code"}]}) == [{"cell_type": "code"}]


def test_the_builders_rebuild_the_authored_cells(tmp_path: Path) -> None:
    node = nbformat.read(LESSON, as_version=4)
    code = {nbk.grade_id(c): c for c in node.cells if nbk.has_nbgrader(c)}
    graded = nbk.graded_cells(node)
    rebuilt = {nbk.SETUP_ID: nbk.setup_cell(graded.setup),
               FUNCTION: nbk.answer_cell(code[FUNCTION].source, FUNCTION),
               graded.visible_id: nbk.visible_tests_cell(graded.visible, FUNCTION),
               graded.hidden_id: nbk.hidden_tests_cell(FUNCTION)}
    for ident, cell in rebuilt.items():
        assert cell.source == code[ident].source and cell.metadata == code[ident].metadata, ident
    path = nbk.write_lesson(tmp_path / "part" / LESSON.name, [nbk.markdown_cell("# Title"), *rebuilt.values(),
                                                            nbk.code_cell("x = 1", tags=["hide-input"])])
    written = json.loads(path.read_text())
    assert [c["id"] for c in written["cells"][1:5]] == list(rebuilt)  # a graded cell's id is its grade id
    tail = written["cells"][5]["id"]  # the trailing code cell: its id is the written notebook's own
    assert nbk.graded_cells(written) == dataclasses.replace(graded, tail_ids=(tail,))
    with pytest.raises(ValueError, match="must hold exactly one ### BEGIN SOLUTION"):
        nbk.answer_cell("def f():\n    pass", "f")
    with pytest.raises(ValueError, match="^points must be an integer >= 0"):
        nbk.visible_tests_cell("assert True", "f", points=-1)


def test_the_grading_command_withholds_hidden_tests_from_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``TRAINSYS_SANDBOX`` (the class grading command) the kernel runs the hidden cell without its region;
    the notebook keeps the instructor's cell. Plain ``nbgrader autograde`` runs it whole."""
    from nbgrader.preprocessors import Execute

    from trainsys.autograde.decide import kernel_withholds_hidden_tests
    from trainsys.autograde.execute import HIDDEN_NOTICE, SlicedPollExecute

    assert kernel_withholds_hidden_tests({"TRAINSYS_SANDBOX": "off"}) and not kernel_withholds_hidden_tests({})
    seen: list[str] = []
    monkeypatch.setattr(Execute, "preprocess_cell", lambda self, cell, resources, index: (seen.append(cell.source),
                                                                                           (cell, resources))[1])
    hidden = next(c for c in nbformat.read(LESSON, as_version=4).cells if nbk.is_hidden_test(c))
    original = hidden.source
    for env, withheld in (("off", True), (None, False)):
        if env is None:
            monkeypatch.delenv("TRAINSYS_SANDBOX", raising=False)
        else:
            monkeypatch.setenv("TRAINSYS_SANDBOX", env)
        seen.clear()
        SlicedPollExecute().preprocess_cell(hidden, {}, 0)
        assert (seen[0] == nbk.strip_hidden(original, HIDDEN_NOTICE)) is withheld and hidden.source == original
        assert ("check_" in seen[0]) is not withheld


# --------------------------------------------------------------------------------------------------
# Architecture: the format is known in one place
# --------------------------------------------------------------------------------------------------

MARKERS = (nbk.BEGIN_HIDDEN, nbk.END_HIDDEN, nbk.BEGIN_SOLUTION, nbk.END_SOLUTION, "BEGIN HIDDEN TESTS")


def _format_knowledge(path: Path) -> list[str]:
    """Where a module spells a marker in code (docstrings and comments may name them) or reads the
    ``nbgrader`` metadata entry (``x["nbgrader"]``, ``x.get("nbgrader")``, ``.pop``, ``.setdefault``)."""
    with warnings.catch_warnings():  # a module's own invalid escape sequences are not this rule's business
        warnings.simplefilter("ignore")
        tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if any(marker in node.value for marker in MARKERS):
                found.append(f"line {node.lineno}: a marker {node.value[:40]!r}")
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "nbgrader":
            found.append(f"line {node.lineno}: [\"nbgrader\"]")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "get", "pop", "setdefault") and node.args and isinstance(node.args[0], ast.Constant) \
                and node.args[0].value == "nbgrader":
            found.append(f"line {node.lineno}: .{node.func.attr}(\"nbgrader\")")
    return found


def test_only_trainsys_notebook_knows_the_notebook_format() -> None:
    src = REPO / "src" / "trainsys"
    offenders = {str(p.relative_to(src)): found for p in sorted(src.rglob("*.py"))
                 if p.name != "notebook.py" or p.parent != src
                 for found in [_format_knowledge(p)] if found}
    assert offenders == {}, offenders
    assert _format_knowledge(src / "notebook.py"), "the rule's own probe must see notebook.py's markers"


def test_the_format_probe_sees_every_way_of_reading_it(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text('"""A docstring may name ### BEGIN HIDDEN TESTS."""\n'
                      'def f(cell):\n    """So may this one: ### END SOLUTION."""\n'
                      '    a = "### BEGIN HIDDEN TESTS" in cell.source  # a comment may too: ### BEGIN SOLUTION\n'
                      '    b = cell.metadata["nbgrader"]\n    c = cell.metadata.get("nbgrader", {})\n'
                      '    cell.metadata.pop("nbgrader", None)\n    return a, b, c\n')
    assert sorted(line.split(":")[0] for line in _format_knowledge(module)) == ["line 4", "line 5", "line 6", "line 7"]
