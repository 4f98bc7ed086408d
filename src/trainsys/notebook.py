"""A lesson notebook's format: the one module that knows nbgrader's cells, grade ids and markers.

Every lesson is one nbgrader notebook, authored under ``solutions/`` (the *source*) and released under
``notebooks/`` by ``nbgrader generate_assignment`` (the *release*). Its graded cells are:

============  ===========================  ==================================================================
cell          nbgrader metadata            source
============  ===========================  ==================================================================
setup         ``grade_id`` ``setup``,      the lesson's imports (earlier lessons' functions from the package)
              locked, not graded
answer        ``solution``, ``grade_id``   the graded function; the source holds one :data:`BEGIN_SOLUTION` …
              = the function's name        :data:`END_SOLUTION` region, which the release replaces by a stub
visible tests ``grade``, ``grade_id``      tests the student reads and runs
              ``test_<function>_visible``
hidden tests  ``grade``, ``grade_id``      a :data:`BEGIN_HIDDEN` … :data:`END_HIDDEN` region calling
              ``test_<function>_hidden``   ``check_<function>(<function>)``; the release has the region removed
============  ===========================  ==================================================================

A *test cell* is a graded cell that is not an answer. It is **hidden** when its source holds the hidden-test
marker, or — in a release, where nbgrader removed the region — when its grade id ends in
:data:`HIDDEN_SUFFIX`; every other test cell is **visible** (:func:`is_hidden_test`, :func:`is_visible_test`).

Every function here takes a cell either as an ``nbformat.NotebookNode`` or as the raw JSON ``dict`` of a
notebook file (whose ``source`` may be a list of lines): submissions are read as raw JSON before nbformat
has validated them, so a cell's metadata may be anything and is never trusted to be a ``dict``. A cell that
is not a mapping raises ``TypeError`` naming the argument.

:func:`graded_cells` reads a source notebook's graded pieces (:class:`GradedCells`), :func:`student_code` a
submission's code cells up to the tests, and :func:`run_visible_tests` is the one runner of a lesson's visible
tests (the trusted verifier and ``make progress`` use it).

The cell builders at the end (:func:`setup_cell`, :func:`answer_cell`, :func:`visible_tests_cell`,
:func:`hidden_tests_cell`, :func:`write_lesson`) give each cell the metadata above, so no author writes
nbgrader JSON by hand.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainsys._validation import describe

if TYPE_CHECKING:  # nbformat is imported where a notebook is read or built: the sandboxed student side needs none
    import nbformat

# --------------------------------------------------------------------------------------------------
# Markers and grade ids
# --------------------------------------------------------------------------------------------------

BEGIN_SOLUTION = "### BEGIN SOLUTION"
END_SOLUTION = "### END SOLUTION"
BEGIN_HIDDEN = "### BEGIN HIDDEN TESTS"
END_HIDDEN = "### END HIDDEN TESTS"

SOLUTION_REGION = re.compile(r"### BEGIN SOLUTION(.*?)### END SOLUTION", re.S)
"""The solution region of an answer cell; group 1 is the reference answer between the markers."""
HIDDEN_REGION = re.compile(r"### BEGIN HIDDEN TESTS.*?(?:### END HIDDEN TESTS[^\n]*|\Z)", re.S)
"""A hidden-test region up to its end marker's line, or to the end of the cell when that marker is missing."""
HIDDEN_CHECK = re.compile(r"### BEGIN HIDDEN TESTS.*?\bcheck_(\w+)\(", re.S)
"""The first ``check_<function>(`` call inside a hidden-test region; group 1 is ``<function>``."""
CHECK_CALL = re.compile(r"check_(\w+)\((\w+)\)")
"""A hidden-test call ``check_<function>(<name>)``; group 2 is the name the student's function is bound to."""

SETUP_ID = "setup"
VISIBLE_SUFFIX = "_visible"
HIDDEN_SUFFIX = "_hidden"
SCHEMA_VERSION = 3  # nbgrader's cell metadata schema


def visible_test_id(function: str) -> str:
    """The grade id of ``function``'s visible test cell: ``test_<function>_visible``."""
    return f"test_{_name(function, 'function')}{VISIBLE_SUFFIX}"


def hidden_test_id(function: str) -> str:
    """The grade id of ``function``'s hidden test cell: ``test_<function>_hidden``."""
    return f"test_{_name(function, 'function')}{HIDDEN_SUFFIX}"


def _name(value: object, argument: str) -> str:
    if not isinstance(value, str) or not value.isidentifier():
        raise ValueError(f"{argument} must be a Python identifier (the graded function's name), got {describe(value)}")
    return value


# --------------------------------------------------------------------------------------------------
# Reading cells (NotebookNode or raw JSON)
# --------------------------------------------------------------------------------------------------


def _cell(cell: object) -> Mapping:
    if not isinstance(cell, Mapping):
        raise TypeError(f"cell must be a notebook cell (an nbformat NotebookNode or a JSON dict), got {describe(cell)}")
    return cell


def source(cell: Mapping) -> str:
    """The cell's source as one string (raw JSON stores it as a list of lines); ``""`` when it has none."""
    text = _cell(cell).get("source", "")
    return "".join(text) if isinstance(text, list) else str(text)


def is_code(cell: Mapping) -> bool:
    """Whether the cell is a code cell."""
    return _cell(cell).get("cell_type") == "code"


def has_nbgrader(cell: Mapping) -> bool:
    """Whether the cell carries nbgrader metadata (a ``dict`` under ``metadata["nbgrader"]``)."""
    metadata = _cell(cell).get("metadata")
    return isinstance(metadata, Mapping) and isinstance(metadata.get("nbgrader"), Mapping)


def nbgrader(cell: Mapping) -> Mapping:
    """The cell's nbgrader metadata (the live mapping, not a copy); an empty ``dict`` when the cell has none
    or when its metadata or nbgrader entry is not a mapping (hostile JSON)."""
    metadata = _cell(cell).get("metadata")
    meta = metadata.get("nbgrader") if isinstance(metadata, Mapping) else None
    return meta if isinstance(meta, Mapping) else {}


def drop_nbgrader(cell: Mapping) -> None:
    """Remove the cell's nbgrader entry (it becomes an ordinary cell); nothing when it has none."""
    metadata = _cell(cell).get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("nbgrader", None)


def grade_id(cell: Mapping) -> Any:
    """The cell's nbgrader grade id as stored (a string in a valid notebook; hostile JSON may hold anything),
    ``None`` when it has none."""
    return nbgrader(cell).get("grade_id")


def is_answer(cell: Mapping) -> bool:
    """Whether the cell is an answer (nbgrader ``solution``) cell."""
    return bool(nbgrader(cell).get("solution"))


def is_graded(cell: Mapping) -> bool:
    """Whether nbgrader scores the cell (``grade``)."""
    return bool(nbgrader(cell).get("grade"))


def is_setup(cell: Mapping) -> bool:
    """Whether the cell is the lesson's setup cell (grade id :data:`SETUP_ID`)."""
    return grade_id(cell) == SETUP_ID


def has_hidden_region(text: str) -> bool:
    """Whether ``text`` (a cell's source) holds the hidden-test marker."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a cell's source (str), got {describe(text)}")
    return BEGIN_HIDDEN in text


def is_test(cell: Mapping) -> bool:
    """Whether the cell is a test cell: graded, and not an answer."""
    return is_graded(cell) and not is_answer(cell)


def is_hidden_test(cell: Mapping) -> bool:
    """Whether the cell is a hidden-test cell: a test cell holding the hidden-test marker, or one whose grade id
    ends in :data:`HIDDEN_SUFFIX` (a release, where nbgrader removed the region)."""
    if not is_test(cell):
        return False
    ident = grade_id(cell)
    return has_hidden_region(source(cell)) or (isinstance(ident, str) and ident.endswith(HIDDEN_SUFFIX))


def is_visible_test(cell: Mapping) -> bool:
    """Whether the cell is a visible-test cell: a test cell that is not hidden (:func:`is_hidden_test`)."""
    return is_test(cell) and not is_hidden_test(cell)


def cells(nb: Mapping) -> list:
    """The notebook's cells that are mappings (raw JSON may hold anything in its cell list).
    Raises ``ValueError`` when ``nb`` has no cell list, ``TypeError`` when it is not a notebook mapping."""
    if not isinstance(nb, Mapping):
        raise TypeError(f"nb must be a notebook (an nbformat NotebookNode or a JSON dict), got {describe(nb)}")
    found = nb.get("cells", [])
    if not isinstance(found, list):
        raise ValueError(f"nb must hold a list of cells under 'cells', got {describe(found)}")
    return [cell for cell in found if isinstance(cell, Mapping)]


def code_cells(nb: Mapping) -> list:
    """The notebook's code cells, in order (see :func:`cells`)."""
    return [cell for cell in cells(nb) if is_code(cell)]


def answer_sources(nb: Mapping) -> dict[str, str]:
    """``grade_id → source`` of the notebook's answer cells (in a source notebook: the reference solutions)."""
    return {grade_id(cell): source(cell) for cell in cells(nb) if is_answer(cell)}


def replace_sources(nb: Mapping, by_grade_id: Mapping[str, str]) -> int:
    """Set the source of every cell whose grade id is a key of ``by_grade_id`` to its value (a submission's
    answers in a release); return how many cells changed. ``nb`` is changed in place."""
    if not isinstance(by_grade_id, Mapping):
        raise TypeError(f"by_grade_id must map grade ids to cell sources, got {describe(by_grade_id)}")
    changed = 0
    for cell in cells(nb):
        ident = grade_id(cell)
        if isinstance(ident, str) and ident in by_grade_id:
            cell["source"] = by_grade_id[ident]
            changed += 1
    return changed


def solution_body(text: str) -> str | None:
    """The text between an answer cell's solution markers; ``None`` when it has no solution region."""
    if not isinstance(text, str):
        raise TypeError(f"text must be an answer cell's source (str), got {describe(text)}")
    match = SOLUTION_REGION.search(text)
    return match.group(1) if match else None


def strip_hidden(text: str, notice: str) -> str:
    """``text`` with every hidden-test region (:data:`HIDDEN_REGION`) replaced by the line ``notice``."""
    if not isinstance(text, str) or not isinstance(notice, str):
        raise TypeError(f"text and notice must be str, got {describe(text)} and {describe(notice)}")
    return HIDDEN_REGION.sub(notice, text)


def hidden_check(text: str) -> str | None:
    """The function whose ``check_<function>(`` the hidden-test region of ``text`` calls first; ``None`` if none."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a hidden-test cell's source (str), got {describe(text)}")
    match = HIDDEN_CHECK.search(text)
    return match.group(1) if match else None


# --------------------------------------------------------------------------------------------------
# A lesson's graded cells, a submission's code, the visible tests
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GradedCells:
    """What a source notebook says about its graded function (:func:`graded_cells`)."""

    setup: str  # the setup cell's source ("" when the lesson has none)
    function: str  # the graded function, as the hidden tests' check_<function>(<function>) names it
    answer_id: str  # grade id of the answer cell
    visible_id: str  # grade id of the (last) visible-test cell
    visible: str  # its source
    hidden_id: str  # grade id of the hidden-test cell
    test_ids: tuple[str, ...]  # grade ids of every test cell, in notebook order
    # cell ids of the code cells after the first test cell that are not tests (the Checkpoint): the release keeps
    # them, so a submission whose test cells were deleted still ends its student code where the lesson's own cells
    # resume
    tail_ids: tuple[str, ...] = ()


def graded_cells(nb: Mapping) -> GradedCells | None:
    """The graded pieces of a source notebook (from ``solutions/``: a release has no hidden region to name the
    function); ``None`` when it lacks an answer cell, a visible-test cell or a hidden check (the setup is optional).
    Raises ``TypeError``/``ValueError`` for something that is not a notebook (:func:`cells`)."""
    setup = function = answer_id = visible_id = visible = hidden_id = None
    test_ids, tail_ids = [], []
    for cell in cells(nb):
        if test_ids and is_code(cell) and not is_test(cell) and isinstance(cell.get("id"), str):
            tail_ids.append(cell["id"])
        if is_setup(cell):
            setup = source(cell)
        elif is_answer(cell):
            answer_id = grade_id(cell)
        elif is_hidden_test(cell):
            hidden_id = grade_id(cell)
            test_ids.append(hidden_id)
            match = CHECK_CALL.search(source(cell))
            function = match.group(2) if match else None
        elif is_visible_test(cell):
            visible_id, visible = grade_id(cell), source(cell)
            test_ids.append(visible_id)
    if None in (function, answer_id, visible_id, hidden_id):
        return None
    return GradedCells(setup or "", function, answer_id, visible_id, visible, hidden_id, tuple(test_ids),
                       tuple(tail_ids))


def read_graded(path: str | Path) -> GradedCells | None:
    """:func:`graded_cells` of the source notebook file at ``path`` (read with nbformat; its errors propagate)."""
    import nbformat

    return graded_cells(nbformat.read(Path(path), as_version=4))


def student_code(nb: Mapping, graded: GradedCells) -> tuple[list[str] | None, str]:
    """``(the student's code cells, how the answer cell was found)`` in a submitted notebook ``nb`` (raw JSON).

    The student's cells are every code cell before the first test cell of ``graded`` (or, where the student
    deleted the tests, before the first of the lesson's own later cells, ``graded.tail_ids``) that is neither a
    test cell nor the setup cell; a cell is named by its grade id, else its cell id (nbgrader's release gives
    graded cells their grade id as cell id), so removing a cell's nbgrader metadata hides nothing. The answer
    cell is found by ``"metadata"`` (its grade id), else ``"cell id"``, else ``"position"``.
    ``(None, "no answer cell")`` when the student has no code cell there."""
    if not isinstance(graded, GradedCells):
        raise TypeError(f"graded must be the lesson's GradedCells, got {describe(graded)}")

    def ident(cell: Mapping) -> Any:
        return grade_id(cell) or cell.get("id")

    code = code_cells(nb)
    ends = [i for i, cell in enumerate(code) if ident(cell) in (*graded.test_ids, *graded.tail_ids)]
    end = ends[0] if ends else len(code)
    mine = [cell for cell in code[:end] if ident(cell) not in (*graded.test_ids, SETUP_ID)]
    if not mine:
        return None, "no answer cell"
    by_meta = [cell for cell in mine if grade_id(cell) == graded.answer_id]
    by_id = [cell for cell in mine if cell.get("id") == graded.answer_id]
    found = "metadata" if by_meta else "cell id" if by_id else "position"
    return [source(cell) for cell in mine], found


MAGIC = re.compile(r"^\s*[%!]|\?\s*$", re.M)
"""A line of IPython syntax (``%magic``, ``!shell``, ``obj?``) that plain Python cannot compile."""


def ipython_to_python(text: str) -> str:
    """A cell's IPython syntax (``%magic``, ``!shell``, ``obj?``) as plain Python, as the kernel runs it.

    IPython is imported only for cells that need it (it costs a fraction of a second per process).
    """
    if not MAGIC.search(text):
        return text
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(text)


def run_visible_tests(visible: str, before: Sequence[str] = (), bind: Mapping[str, Any] | None = None, *,
                      keep_going: bool = False) -> dict[str, Any]:
    """Run a lesson's visible test cell ``visible`` in a fresh ``__main__`` namespace, after the cells ``before``
    (the setup cell, then any of the student's code cells), with the names of ``bind`` set just before the tests
    (the graded function, when it lives elsewhere). Cells are IPython source (:func:`ipython_to_python`).

    An exception in a cell of ``before`` propagates, unless ``keep_going`` (as "Run all" in a notebook that
    goes on after an error: the tests then meet whatever the earlier cells defined). Whatever the visible tests
    raise propagates. Returns the namespace. This is the one place a lesson's visible tests are run: the trusted
    verifier (``trainsys.autograde.verify``) and ``make progress`` (``trainsys.progress``) call it."""
    if not isinstance(visible, str) or not all(isinstance(text, str) for text in before):
        raise TypeError(f"visible and before must be cell sources (str), got {describe(visible)} and "
                        f"{describe(before)}")
    namespace: dict[str, Any] = {"__name__": "__main__"}
    for index, text in enumerate(before):
        try:
            exec(compile(ipython_to_python(text), f"<cell {index}>", "exec"), namespace)  # noqa: S102 - lesson code
        except BaseException:
            if not keep_going:
                raise
    namespace.update(bind or {})
    exec(compile(ipython_to_python(visible), "<visible tests>", "exec"), namespace)  # noqa: S102
    return namespace


# --------------------------------------------------------------------------------------------------
# Cell builders (lesson authoring: ``make new-lesson``)
# --------------------------------------------------------------------------------------------------


def _metadata(ident: str, *, grade: bool, solution: bool, locked: bool, points: int | None = None) -> dict:
    meta = {"grade": grade, "grade_id": ident, "locked": locked, "schema_version": SCHEMA_VERSION,
            "solution": solution, "task": False}
    if points is not None:
        if isinstance(points, bool) or not isinstance(points, int) or points < 0:
            raise ValueError(f"points must be an integer >= 0, got {describe(points)}")
        meta["points"] = points
    return meta


def _new_code_cell(text: str) -> nbformat.NotebookNode:
    from nbformat.v4 import new_code_cell

    return new_code_cell(text)


def _text(value: object, argument: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{argument} must be str, got {describe(value)}")
    return value.strip("\n")


def markdown_cell(text: str) -> nbformat.NotebookNode:
    """A prose cell (MyST markdown, mathematics in ``$…$`` and ``$$…$$``)."""
    from nbformat.v4 import new_markdown_cell

    return new_markdown_cell(_text(text, "text"))


def code_cell(text: str, tags: Sequence[str] = ()) -> nbformat.NotebookNode:
    """An ordinary code cell (a Checkpoint's measurement or figure), with the myst-nb ``tags`` given."""
    cell = _new_code_cell(_text(text, "text"))
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def setup_cell(text: str) -> nbformat.NotebookNode:
    """The locked setup cell (grade id :data:`SETUP_ID`): the lesson's imports."""
    cell = _new_code_cell(_text(text, "text"))
    cell.metadata["nbgrader"] = _metadata(SETUP_ID, grade=False, solution=False, locked=True)
    return cell


def answer_cell(text: str, function: str) -> nbformat.NotebookNode:
    """The answer cell of ``function`` (its grade id), folded in the book (tag ``hide-input``).
    Raises ``ValueError`` unless ``text`` holds exactly one solution region."""
    body = _text(text, "text")
    if body.count(BEGIN_SOLUTION) != 1 or body.count(END_SOLUTION) != 1:
        raise ValueError(f"text of answer cell {function!r} must hold exactly one {BEGIN_SOLUTION} … {END_SOLUTION} "
                         f"region, got {body.count(BEGIN_SOLUTION)} begin and {body.count(END_SOLUTION)} end markers")
    cell = _new_code_cell(body)
    cell.metadata["nbgrader"] = _metadata(_name(function, "function"), grade=False, solution=True, locked=False)
    cell.metadata["tags"] = ["hide-input"]
    return cell


def visible_tests_cell(text: str, function: str, points: int = 2) -> nbformat.NotebookNode:
    """The locked, graded visible tests of ``function`` (grade id :func:`visible_test_id`)."""
    cell = _new_code_cell(_text(text, "text"))
    cell.metadata["nbgrader"] = _metadata(visible_test_id(function), grade=True, solution=False, locked=True,
                                          points=points)
    return cell


def hidden_tests_cell(function: str, points: int = 3) -> nbformat.NotebookNode:
    """The graded hidden tests of ``function`` (grade id :func:`hidden_test_id`): a hidden region calling
    ``trainsys.grading.check_<function>``, removed from the release and from the book (tag ``remove-cell``)."""
    name = _name(function, "function")
    body = ("# Hidden tests: the autograder runs the full check from trainsys.grading here.\n"
            f"{BEGIN_HIDDEN}\nfrom trainsys.grading import check_{name}\nprint(check_{name}({name}))\n{END_HIDDEN}")
    cell = _new_code_cell(body)
    cell.metadata["nbgrader"] = _metadata(hidden_test_id(name), grade=True, solution=False, locked=True, points=points)
    cell.metadata["tags"] = ["remove-cell"]
    return cell


def _cell_id(path: Path, index: int, cell: Mapping) -> str:
    ident = grade_id(cell)
    if isinstance(ident, str) and ident:
        return re.sub(r"[^A-Za-z0-9_-]", "-", ident)[:64]  # nbgrader's release gives graded cells this id too
    return f"cell-{hashlib.sha1(f'{path.name}:{index}'.encode()).hexdigest()[:12]}"


def write_lesson(path: str | Path, lesson_cells: Iterable[nbformat.NotebookNode]) -> Path:
    """Write a source notebook at ``path``: the python3 kernel, stable cell ids (a graded cell's id is its
    grade id), no outputs. Raises ``nbformat.ValidationError`` for cells nbformat rejects."""
    path = Path(path)
    import nbformat

    nb = nbformat.v4.new_notebook(cells=list(lesson_cells))
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    for index, cell in enumerate(nb.cells):
        cell["id"] = _cell_id(path, index, cell)
    nbformat.validate(nb)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path
