"""``make new-lesson``: scaffold every file a new lesson needs, from its key.

    python -m tests.new_lesson --key m2p7.31 --function rounds_for_steps --args "total_steps, inner_steps" \\
        --reference trainsys.diloco.evaluation --check diloco_loop [--title "Rounds for a step budget"]

writes, for lesson ``<mp>.<NN>`` of part folder ``<part>`` grading ``<function>``:

1. the reference stub ``<function>`` at the end of ``src/trainsys/<reference>.py`` (the module is created when the
   package folder exists but the file does not), raising ``NotImplementedError`` that says what to write;
2. the check ``check_<function>`` at the end of ``src/trainsys/grading/<checks>.py`` (created when missing), in
   that module's ``__all__``, with an entry in its ``CLAUSES`` for the clauses the notebook's Concepts states;
   exported by ``src/trainsys/grading/__init__.py`` (its imports, or ``_LAZY`` for a lazily loaded module, and
   ``__all__``);
3. an empty, placeholder-marked entry for ``<function>`` in each of the answer registry's three modules
   (``tests/answers/__init__.py``): ``developer/<mutants>.py`` (the module whose ``REFERENCE`` is the reference
   module, or a new ``<mp>_<module>.py``), ``blind/<mp>.py`` (``MUTANTS`` and ``ALTERNATIVES``) and
   ``clauses/<checks>.py`` (``WITNESSES``);
4. the reference's tests ``tests/test_<mp>_<function>.py``;
5. the source notebook ``solutions/<part>/<NN>_<function>.ipynb`` built with :mod:`trainsys.notebook`'s cell
   builders: title and header, the ``setup`` cell, the seven sections, the answer cell, the visible and hidden
   test cells, and a Checkpoint calling ``own_or_reference``;
6. its entry in ``_toc.yml``, after the part's last lesson;
7. then, as ``make release`` does for the part: the syllabus headers and totals, and the release
   ``notebooks/<part>/<NN>_<function>.ipynb``.

Every place the author must write is marked :data:`PLACEHOLDER`; until all are gone the lesson's tests fail and
``tests/test_new_lesson.py`` names each one left. Every argument is checked before anything is written; an
existing key, function, check or file refuses with a message naming the argument and changes nothing; if a
write, the syllabus or the release fails, every file is put back as it was (all files or none).
"""

from __future__ import annotations

import argparse
import ast
import keyword
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
PLACEHOLDER = "TODO(new-lesson)"
"""Marks every place a scaffolded lesson still waits for its author."""
KEY = re.compile(r"^m([1-9]\d*)p([1-9]\d*)\.(\d\d)$")
FUNCTION = re.compile(r"^[a-z][a-z0-9_]*$")
MODULE = re.compile(r"^trainsys(\.[a-z_][a-z0-9_]*)+$")
CHECK_MODULE = re.compile(r"^[a-z][a-z0-9_]*$")


class ScaffoldError(ValueError):
    """A bad argument or a place already taken; the message names the argument, what was expected and what was
    given. Raised before anything is written."""


@dataclass(frozen=True)
class Request:
    """What the author asks for; :func:`validate` checks it against the repository at ``root``."""

    key: str  # m2p7.31
    function: str  # rounds_for_steps
    args: str  # "total_steps, inner_steps": the graded function's parameters, as written in its def
    reference: str  # trainsys.diloco.evaluation
    check: str  # diloco_loop (the module trainsys.grading.diloco_loop)
    title: str  # Rounds for a step budget


@dataclass(frozen=True)
class Places:
    """Where the lesson's files go (absolute paths) and what the notebook's header says."""

    part: str  # m2p7
    folder: str  # m2p7-evaluation-communication
    number: int  # 31
    module_title: str
    part_title: str
    notebook: Path
    release: Path
    reference: Path
    check: Path
    grading_init: Path
    tests: Path
    toc: Path


# --- checking the request ---------------------------------------------------------------------------------------
def _fail(argument: str, expected: str, given: object) -> ScaffoldError:
    return ScaffoldError(f"{argument} must be {expected}, got {given!r}")


def _lessons(root: Path) -> dict[str, tuple[str, str]]:
    """``key → (part folder, graded function)`` of every lesson under ``root/solutions`` (from the file names)."""
    from trainsys.syllabus import lesson_key

    out = {}
    for path in sorted((root / "solutions").glob("*/*.ipynb")):
        out[lesson_key(path)] = (path.parent.name, path.stem[3:])
    return out


def _header(notebook: Path) -> tuple[str, str]:
    """``(module title, part title)`` from a lesson's header line."""
    from trainsys.syllabus import HEADER

    first = nbformat.read(notebook, as_version=4).cells[0].source
    match = HEADER.search(first)
    if match is None:
        raise ScaffoldError(f"{notebook}: its first cell has no header line '*Module M — … · Part P — …*' "
                            "to copy")
    return match[2], match[4]


def _defines(path: Path, name: str) -> bool:
    return path.is_file() and any(isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name
                                  for node in ast.parse(path.read_text()).body)


def validate(request: Request, root: Path = ROOT) -> Places:
    """The request's places, after checking every argument; raises :class:`ScaffoldError` naming the first bad one
    (``key``, ``function``, ``args``, ``reference``, ``check`` or ``title``) and what was expected."""
    match = KEY.match(request.key) if isinstance(request.key, str) else None
    if match is None:
        raise _fail("key", "m<module>p<part>.<NN> (e.g. m2p7.31: Module 2, Part 7, Lesson 31)", request.key)
    module, part_number, number = int(match[1]), int(match[2]), int(match[3])
    part = f"m{module}p{part_number}"
    lessons = _lessons(root)
    if request.key in lessons:
        folder, function = lessons[request.key]
        raise _fail("key", f"a new lesson key ({request.key} is solutions/{folder}/{request.key[-2:]}_{function})",
                    request.key)
    folders = sorted({folder for folder, _ in lessons.values() if folder.startswith(f"{part}-")})
    if len(folders) != 1:
        known = sorted({folder.split("-")[0] for folder, _ in lessons.values()})
        raise _fail("key", f"a key in an existing part (one of {known}; a new part needs its book page first)",
                    request.key)
    folder = folders[0]
    same_module = {int(k.split(".")[1]): k for k in lessons if k.startswith(f"m{module}p")}
    if number in same_module:
        raise _fail("key", f"a lesson number not used in Module {module} ({number:02d} is {same_module[number]}; "
                           "numbers restart in every module and do not repeat within one)", request.key)
    before = [n for n, k in same_module.items() if int(k[1:].split("p")[1].split(".")[0]) <= part_number]
    after = [n for n, k in same_module.items() if int(k[1:].split("p")[1].split(".")[0]) > part_number]
    if (before and number < max(before)) or (after and number > min(after)):
        low, high = (max(before) + 1 if before else 1), (min(after) - 1 if after else 99)
        free = f"between {low:02d} and {high:02d}" if low <= high else (
            f"none is free: {part} ends at {low - 1:02d} and the next part starts at {high + 1:02d}, and a lesson "
            "in the middle of a module renumbers every lesson after it (make new-lesson does not)")
        raise _fail("key", f"a lesson number in course order for {part} ({free})", request.key)

    function = request.function
    if not isinstance(function, str) or not FUNCTION.match(function) or keyword.iskeyword(function):
        raise _fail("function", "a lower-case Python name such as update_outer_momentum", function)
    graded = {f: k for k, (_, f) in lessons.items()}
    if function in graded:
        raise _fail("function", f"a function no lesson grades yet ({function} is graded by {graded[function]})",
                    function)
    try:
        signature = ast.parse(f"def {function}({request.args}):\n    pass\n").body[0].args
    except SyntaxError:
        raise _fail("args", "the function's parameters as written in its def (e.g. 'total_steps, inner_steps')",
                    request.args) from None
    if not [a for a in signature.posonlyargs + signature.args + signature.kwonlyargs] and not signature.vararg:
        raise _fail("args", "at least one parameter (a graded function takes inputs)", request.args)

    if not isinstance(request.reference, str) or not MODULE.match(request.reference):
        raise _fail("reference", "a module of the package, trainsys.<package>.<module> (e.g. trainsys.diloco.outer)",
                    request.reference)
    reference = root / "src" / Path(*request.reference.split(".")).with_suffix(".py")
    if not reference.parent.is_dir() or not (reference.parent / "__init__.py").is_file():
        raise _fail("reference", f"a module in an existing package folder ({reference.parent.relative_to(root)} "
                                 "is not one)", request.reference)
    if _defines(reference, function):
        raise _fail("function", f"a name {request.reference} does not define yet", function)

    if not isinstance(request.check, str) or not CHECK_MODULE.match(request.check) or request.check.startswith("_"):
        raise _fail("check", "the name of a module of trainsys.grading (e.g. diloco_optim)", request.check)
    if request.check == "clauses":
        raise _fail("check", "a check module (trainsys.grading.clauses reads the declarations, it holds no checks)",
                    request.check)
    grading = root / "src" / "trainsys" / "grading"
    for path in sorted(grading.glob("*.py")):
        if _defines(path, f"check_{function}"):
            raise _fail("function", f"a function without a check (trainsys.grading.{path.stem} defines "
                                    f"check_{function})", function)
    if not isinstance(request.title, str) or not request.title.strip() or "\n" in request.title:
        raise _fail("title", "a one-line lesson title", request.title)

    sources = sorted((root / "solutions" / folder).glob("*.ipynb"))
    module_title, part_title = _header(sources[-1])
    places = Places(
        part=part, folder=folder, number=number, module_title=module_title, part_title=part_title,
        notebook=root / "solutions" / folder / f"{number:02d}_{function}.ipynb",
        release=root / "notebooks" / folder / f"{number:02d}_{function}.ipynb",
        reference=reference, check=grading / f"{request.check}.py", grading_init=grading / "__init__.py",
        tests=root / "tests" / f"test_{part}_{function}.py", toc=root / "_toc.yml")
    for argument, path in (("key", places.notebook), ("key", places.release), ("function", places.tests)):
        if path.exists():
            raise _fail(argument, f"a lesson whose files do not exist yet ({path.relative_to(root)} does)",
                        getattr(request, argument))
    return places


# --- what each file gets -----------------------------------------------------------------------------------------
def todo(key: str) -> str:
    """The placeholder of lesson ``key``: ``tests/test_new_lesson.py`` lists every one left, file and line."""
    return f"{PLACEHOLDER.rstrip(')')} {key})"


def _parameters(args: str) -> list[str]:
    signature = ast.parse(f"def f({args}):\n    pass\n").body[0].args
    return [a.arg for a in signature.posonlyargs + signature.args + signature.kwonlyargs]


def notebook_cells(request: Request, places: Places) -> list[nbformat.NotebookNode]:
    """The source notebook's cells, in the order all 96 lessons share, from :mod:`trainsys.notebook`'s builders."""
    from trainsys.notebook import (answer_cell, code_cell, hidden_tests_cell, markdown_cell, setup_cell,
                                   visible_tests_cell)

    f, key, t, args = request.function, request.key, todo(request.key), request.args
    module, part = places.part[1:].split("p")
    rows = "\n".join(f"| `{name}` | {t} | | |" for name in _parameters(args))
    return [
        markdown_cell(f"# Lesson {places.number} · {request.title}\n\n*Module {module} — {places.module_title} · "
                      f"Part {part} — {places.part_title} · 5 XP · about 5 minutes*\n\n"
                      f"You will write `{f}({args})`: {t} what it computes, in one sentence."),
        setup_cell(f"import numpy as np\nimport matplotlib.pyplot as plt\nimport pytest\n\n"
                   f"# {t}: earlier lessons' functions this one uses, imported from the package"),
        markdown_cell(f"## Intuition\n\n{t}: why this step exists, in plain words, tied to the memory or "
                      "communication budget."),
        markdown_cell(f"## Concepts\n\n**Contract** of `{f}({args}) -> {t}`:\n\n"
                      f"| name | type and shape | dtype | meaning |\n|---|---|---|---|\n{rows}\n\n"
                      f"- **Failure modes:** {t}: what raises, naming which argument.\n"
                      f"- **Metric that proves it correct:** {t}: the oracle or invariant the check compares with."),
        markdown_cell(f"## The mathematics\n\n{t}: the derivation, with the shape of every symbol:\n\n"
                      f"$$\ny = f(x) \\qquad \\text{{{t}}}\n$$"),
        markdown_cell(f"## Implementation\n\n1. {t}: validate every argument, naming it in the error.\n"
                      f"2. {t}: compute the result."),
        answer_cell(f'def {f}({args}):\n    """{t}: the contract in a few lines (shapes, dtype, what raises)."""\n'
                    f"    ### BEGIN SOLUTION\n    raise NotImplementedError(\"{t}: the lesson's solution\")\n"
                    "    ### END SOLUTION", f),
        markdown_cell(f"## Tests\n\n1. **By hand.** {t}\n2. **Boundary.** {t}\n3. **Invalid input.** {t}\n"
                      f"4. **Invariant.** {t}"),
        visible_tests_cell(f"# {t}: 1. a hand-computable case, 2. a boundary case, 3. an invalid input that must "
                           f"raise (pytest.raises), 4. an invariant\nassert False, \"lesson {key}: the visible "
                           f"tests of {f} are not written yet\"", f),
        hidden_tests_cell(f),
        markdown_cell(f"## Common mistakes\n\n- **{t}: a realistic wrong version.** What it breaks, and which "
                      "test catches it.\n- **{t}: another one.** What it breaks, and which test catches it.".replace(
                          "{t}", t)),
        markdown_cell(f"## Checkpoint\n\nYou can now claim: *{t}*.\n\nThe cell runs your `{f}` on {t}."),
        code_cell(f"from trainsys.lesson import own_or_reference\nfrom {request.reference} import {f} as "
                  f"reference_{f}\n\nyours = own_or_reference({f}, reference_{f})  # the package's only while "
                  f"yours is a stub\n# {t}: a measurement or a figure made with yours (a figure needs alt text)"),
        markdown_cell(f"**Question.** {t}: a question the Checkpoint's result answers.\n\n<details>\n"
                      f"<summary>Answer</summary>\n\n{t}: its answer.\n\n</details>"),
    ]


def notebook_text(request: Request, places: Places) -> str:
    """The source notebook as ``nbformat.write`` writes it (stable cell ids from the notebook's file name)."""
    import tempfile

    from trainsys.notebook import write_lesson

    with tempfile.TemporaryDirectory() as scratch:
        return write_lesson(Path(scratch) / places.notebook.name, notebook_cells(request, places)).read_text()


def reference_text(request: Request, places: Places, current: str | None) -> str:
    """The reference module with the stub appended (a new module when ``current`` is None)."""
    t, f = todo(request.key), request.function
    head = current if current is not None else (
        f'"""{request.title} (lesson {request.key}): {t} what this module computes, and the source it follows."""'
        "\n\nfrom __future__ import annotations\n")
    return (head.rstrip("\n") + f"\n\n\ndef {f}({request.args}):\n"
            f'    """{t}: the contract: named-axis shapes, dtype, what is mutated, what raises (naming the argument);\n'
            f'    type hints on every parameter."""\n'
            f'    raise NotImplementedError("{f} (lesson {request.key}): {t} the reference implementation")\n')


def check_text(request: Request, places: Places, current: str | None) -> str:
    """The check module with ``check_<function>`` appended, in ``__all__`` and ``CLAUSES``."""
    t, f, key = todo(request.key), request.function, request.key
    if current is None:
        current = (f'"""Checks behind the hidden tests of lesson {key}: {t} what the cases cover."""\n\n'
                   "from __future__ import annotations\n\nfrom collections.abc import Callable\nfrom typing import Any"
                   "\n\n__all__ = [\n]\n\nCLAUSES = {\n}\n")
    text = _append_to_list(current, "__all__", f'"check_{f}"', where=f"trainsys.grading.{request.check}")
    entry = (f'"{f}": {{  # {t}: per clause the lesson states in bold, the labels of the cases enforcing it\n'
             f'        "failure modes": ("{t}: an invalid-input case",),\n'
             f'        "metric that proves it correct": ("{t}: a valid case",),\n    }}')
    text = _add_to_dict(text, "CLAUSES", entry)
    banner = f"# --- Lesson {places.number} "
    return text.rstrip("\n") + f"\n\n\n{banner}{'-' * (101 - len(banner))}\n" + (
        f"def check_{f}(fn: Callable[..., Any]) -> str:\n"
        f'    """{f} against the reference {request.reference}.{f}: {t} what the cases cover."""\n'
        f"    from {request.reference} import {f} as reference\n"
        "    from trainsys.grading._harness import BAD, CheckFailure, fixed, run_cases\n\n"
        f"    cases = [  # {t}: (label, fixed(arguments…)): a hand-computable case, boundaries, dtypes\n    ]\n"
        f"    invalid = [  # {t}: (label, BAD, \"the argument the error must name\", fixed(arguments…))\n    ]\n"
        f"    if not cases or not invalid:  # {t}: remove once the cases are written\n"
        f'        raise NotImplementedError("check_{f} (lesson {key}) has no cases yet")\n\n'
        "    def compare(label: str, got: Any, expected: Any) -> None:  # exact; for floating results use\n"
        "        # assert_array or assert_within_rounding with a tolerance derived from the dtype and the computation\n"
        "        if type(got) is not type(expected) or got != expected:\n"
        '            raise CheckFailure(f"[{label}] got {got!r}, expected {expected!r}")\n\n'
        f'    return run_cases("{f}", fn, reference, cases, compare, invalid)\n')


def grading_init_text(request: Request, current: str) -> str:
    """``trainsys/grading/__init__.py`` exporting ``check_<function>``: in ``_LAZY`` when the module is loaded
    lazily, else in its ``from trainsys.grading.<checks> import (…)``; and in ``__all__`` (sorted)."""
    name, module = f"check_{request.function}", f"trainsys.grading.{request.check}"
    tree = ast.parse(current)
    lines = current.splitlines(keepends=True)
    lazy = next((node.value for node in tree.body if isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets)), None)
    lazy_keys = [k.value for k in lazy.keys] if isinstance(lazy, ast.Dict) else []
    imports = [node for node in tree.body if isinstance(node, ast.ImportFrom) and node.module == module]
    if module in lazy_keys:
        entry = lazy.values[lazy_keys.index(module)]
        names = sorted([e.value for e in entry.elts] + [name])
        text = _replace_node(lines, entry, "(\n        " + ",\n        ".join(f'"{n}"' for n in names) + ")")
    elif imports:
        names = sorted([a.name for a in imports[0].names] + [name])
        text = _replace_node(lines, imports[0], f"from {module} import (\n" + "".join(f"    {n},\n" for n in names)
                             + ")")
    else:
        last = [node for node in tree.body if isinstance(node, ast.ImportFrom)
                and (node.module or "").startswith("trainsys.grading.")][-1]
        text = "".join(lines[:last.end_lineno]) + f"from {module} import {name}\n" + "".join(lines[last.end_lineno:])
    return _append_to_list(text, "__all__", f'"{name}"', where="trainsys.grading", sort=True)


def answers_texts(request: Request, places: Places, root: Path) -> dict[Path, str]:
    """The registry's three modules (``tests/answers/__init__.py``) with an empty, placeholder-marked entry for the
    function: developer mutants (the module whose ``REFERENCE`` is the reference module, or a new one), the blind
    red team's ``blind/<part>.py``, the clause witnesses ``clauses/<checks>.py``."""
    t, f, answers = todo(request.key), request.function, root / "tests" / "answers"
    developer = [p for p in sorted((answers / "developer").glob("[!_]*.py"))
                 if re.search(rf'^REFERENCE = "{re.escape(request.reference)}"$', p.read_text(), re.M)]
    developer_path = developer[0] if developer else answers / "developer" / (
        f"{places.part}_{request.reference.rsplit('.', 1)[1]}.py")
    blind_path = answers / "blind" / f"{places.part}.py"
    clauses_path = answers / "clauses" / f"{request.check}.py"
    heads = {
        developer_path: f'"""Mutants for {request.reference} (lesson {request.key} first): {t} the mistakes '
                        f'the notebooks name."""\n\nfrom __future__ import annotations\n\n'
                        f'REFERENCE = "{request.reference}"\n',
        blind_path: f'"""Red team, {places.part}: wrong answers and correct alternatives written from the release '
                    'notebooks only."""\n\nfrom __future__ import annotations\n',
        clauses_path: f'"""Witnesses for trainsys.grading.{request.check}: wrong answers, each breaking one clause '
                      'of its lesson\'s contract."""\n\nfrom __future__ import annotations\n',
    }
    out = {path: path.read_text() if path.is_file() else heads[path] for path in heads}
    out[developer_path] = _add_to_dict(out[developer_path], "MUTANTS", f'"{f}": [  # {t}: at least two '
                                       "(description, wrong answer) pairs: the notebook's common mistakes\n    ]")
    out[blind_path] = _add_to_dict(out[blind_path], "MUTANTS", f'"{f}": [  # {t}: at least three wrong '
                                   "answers written from the release notebook alone\n    ]")
    out[blind_path] = _add_to_dict(out[blind_path], "ALTERNATIVES", f'"{f}": [  # {t}: at least two right '
                                   "answers, written differently from the reference\n    ]")
    out[clauses_path] = _add_to_dict(out[clauses_path], "WITNESSES", (
        f'"{f}": {{  # {t}: per clause of CLAUSES, wrong answers breaking it, or tests.answers.existing(…) of a mutant\n'
        '        "failure modes": [],\n        "metric that proves it correct": [],\n    }'))
    return out


def tests_text(request: Request, places: Places) -> str:
    """``tests/test_<part>_<function>.py``: the reference's tests, named ``test_m<M>_<NN>_…`` for the part marker."""
    t, f = todo(request.key), request.function
    module = places.part[1:].split("p")[0]
    return (f'"""Lesson {request.key}, {request.title}: the tests of {request.reference}.{f}.\n\n'
            f'{t}: the oracle each test compares with (torch, a closed form, hand-computed values).\n"""\n\n'
            "from __future__ import annotations\n\nimport pytest\n\n"
            f"from {request.reference} import {f}\n\n\n"
            f"def test_m{module}_{places.number:02d}_{f}_matches_its_oracle() -> None:\n"
            f'    pytest.fail("{t}: compare {f} with its oracle")\n')


def toc_text(places: Places, function: str, current: str) -> str:
    """``_toc.yml`` with the lesson after the last lesson of its part (same indentation)."""
    entries = list(re.finditer(rf"^( *)- file: solutions/{re.escape(places.folder)}/(\d\d)_\w+\n", current, re.M))
    earlier = [m for m in entries if int(m[2]) < places.number]
    if not earlier:
        raise ScaffoldError(f"_toc.yml lists no lesson of solutions/{places.folder} before {places.number:02d} "
                            "to place the new one after")
    last = earlier[-1]
    line = f"{last[1]}- file: solutions/{places.folder}/{places.number:02d}_{function}\n"
    return current[:last.end()] + line + current[last.end():]


# --- editing Python sources in place ---------------------------------------------------------------------------
def _assignment(tree: ast.Module, name: str) -> ast.expr | None:
    """The value of the first top-level ``name = …``."""
    return next((node.value for node in tree.body if isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)), None)


def _offset(lines: list[str], lineno: int, col: int) -> int:
    return sum(len(line) for line in lines[:lineno - 1]) + len(lines[lineno - 1].encode()[:col].decode())


def _replace_node(lines: list[str], node: ast.AST, text: str) -> str:
    source = "".join(lines)
    start, end = _offset(lines, node.lineno, node.col_offset), _offset(lines, node.end_lineno, node.end_col_offset)
    return source[:start] + text + source[end:]


def _insert_last(text: str, node: ast.List | ast.Dict, entry: str) -> str:
    """``entry`` as the last element of the literal ``node`` (one per line, four spaces in, a trailing comma)."""
    lines = text.splitlines(keepends=True)
    items = node.elts if isinstance(node, ast.List) else node.values
    if items:
        last = items[-1]
        at = _offset(lines, last.end_lineno, last.end_col_offset)
        rest = text[at:]
        comma = rest.lstrip(" ").startswith(",")
        at += (rest.index(",") + 1) if comma else 0
        return text[:at] + ("" if comma else ",") + f"\n    {entry}," + text[at:]
    at = _offset(lines, node.lineno, node.col_offset) + 1  # just after the opening bracket
    return text[:at] + f"\n    {entry}," + text[at:]


def _add_to_dict(text: str, name: str, entry: str) -> str:
    """``text`` with ``entry`` (``"key": value``) added to the module-level dict literal ``name``, or ``name``
    defined at the end when the module has none."""
    value = _assignment(ast.parse(text), name)
    if isinstance(value, ast.Dict):
        return _insert_last(text, value, entry)
    if value is not None:
        key, _, rest = entry.partition(": ")
        return text.rstrip("\n") + f"\n\n{name}[{key}] = {rest}\n"
    return text.rstrip("\n") + f"\n\n{name} = {{\n    {entry},\n}}\n"


def _append_to_list(text: str, name: str, entry: str, where: str, sort: bool = False) -> str:
    """``text`` with ``entry`` added to the module-level list literal ``name`` (at its sorted place with ``sort``)."""
    value = _assignment(ast.parse(text), name)
    if not isinstance(value, ast.List):
        raise ScaffoldError(f"{where} must define {name} as a list literal to add {entry} to, found "
                            f"{type(value).__name__ if value is not None else 'none'}")
    if not sort or not value.elts:
        return _insert_last(text, value, entry)
    lines = text.splitlines(keepends=True)
    after = [e for e in value.elts if isinstance(e, ast.Constant) and str(e.value) > ast.literal_eval(entry)]
    if not after:
        return _insert_last(text, value, entry)
    at = _offset(lines, after[0].lineno, after[0].col_offset)
    return text[:at] + f"{entry},\n    " + text[at:]


# --- writing: all files or none --------------------------------------------------------------------------------
def plan(request: Request, root: Path = ROOT) -> tuple[Places, dict[Path, str]]:
    """The checked request's places and every file it writes (absolute path → new text), nothing written yet.
    Raises :class:`ScaffoldError` as :func:`validate` does, or when a generated Python file does not parse."""
    places = validate(request, root)
    read = lambda path: path.read_text() if path.is_file() else None  # noqa: E731
    files = {
        places.reference: reference_text(request, places, read(places.reference)),
        places.check: check_text(request, places, read(places.check)),
        places.grading_init: grading_init_text(request, places.grading_init.read_text()),
        **answers_texts(request, places, root),
        places.tests: tests_text(request, places),
        places.notebook: notebook_text(request, places),
        places.toc: toc_text(places, request.function, places.toc.read_text()),
    }
    for path, text in files.items():
        if path.suffix == ".py":
            try:
                ast.parse(text)
            except SyntaxError as error:
                raise ScaffoldError(f"the scaffold of {path.relative_to(root)} does not parse ({error}); "
                                    "nothing was written") from None
    return places, files


class _Journal:
    """Files as they were before the scaffold wrote them, to put back on failure."""

    def __init__(self) -> None:
        self.before: dict[Path, bytes | None] = {}
        self.folders: list[Path] = []

    def write(self, path: Path, text: str) -> None:
        if path not in self.before:
            self.before[path] = path.read_bytes() if path.exists() else None
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def keep(self, folder: Path) -> None:
        """Remember every file under ``folder`` (nbgrader rewrites a whole release folder); on :meth:`undo` the
        files that were not there are removed."""
        self.folders.append(folder)
        for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
            if path.is_file() and path not in self.before:
                self.before[path] = path.read_bytes()

    def undo(self) -> None:
        for folder in self.folders:
            for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
                if path.is_file() and path not in self.before:
                    path.unlink()
        for path, data in self.before.items():
            if data is None:
                path.unlink(missing_ok=True)
            else:
                path.write_bytes(data)


def scaffold(request: Request, root: Path = ROOT, release: Callable[[Path, list[str]], None] | None = None,
             echo: Callable[[str], None] = print) -> dict[Path, str]:
    """Write the lesson's files, then its syllabus headers and the part's release; return what was written.

    ``release(root, [part folder])`` generates the release (default: ``trainsys.course.generate_releases``).
    Raises :class:`ScaffoldError` before writing anything for a bad request; if anything fails after the first
    write, every file is restored and the new ones removed before the error propagates.
    """
    from trainsys import syllabus

    if release is None:
        from trainsys.course import generate_releases as release
    places, files = plan(request, root)
    journal = _Journal()
    try:
        for path, text in files.items():
            journal.write(path, text)
        for path, text in syllabus.plan(root).items():
            if path.read_text() != text:
                journal.write(path, text)
                files[path] = text
        journal.keep(root / "notebooks" / places.folder)
        release(root, [places.folder])
        if not places.release.is_file():
            raise RuntimeError(f"the release did not write {places.release.relative_to(root)}")
    except BaseException:
        journal.undo()
        raise
    files[places.release] = places.release.read_text()
    for path in files:
        echo(f"{'wrote' if journal.before.get(path) is None else 'edited'} {path.relative_to(root)}")
    echo(f"lesson {request.key} scaffolded: every '{todo(request.key)}' marks a place to write; "
         f"then run pytest -m {places.part}")
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make new-lesson", description=__doc__.split("\n")[0])
    parser.add_argument("--key", required=True, help="m<module>p<part>.<NN>, e.g. m2p7.31")
    parser.add_argument("--function", required=True, help="the graded function's name")
    parser.add_argument("--args", required=True, help="its parameters as in its def, e.g. 'total_steps, inner_steps'")
    parser.add_argument("--reference", required=True, help="the module of its reference, e.g. trainsys.diloco.outer")
    parser.add_argument("--check", required=True, help="the trainsys.grading module of its check, e.g. diloco_optim")
    parser.add_argument("--title", default="", help="the lesson's title (default: from the function's name)")
    args = parser.parse_args(argv)
    title = args.title or args.function.replace("_", " ").capitalize()
    try:
        scaffold(Request(args.key, args.function, args.args, args.reference, args.check, title))
    except ScaffoldError as error:
        print(f"make new-lesson: {error}; nothing was written", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
