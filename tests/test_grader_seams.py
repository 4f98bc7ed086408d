"""The grader's seams stay single: one way to start nbgrader, one child environment, one sandbox encoding.

``trainsys.autograde.launch`` is the one place that starts nbgrader (its command line, in-process API or
script) and builds the environment of the grader's trusted processes. An architecture check reads every
module of ``src/`` and ``tests/`` with ``ast`` and fails on another launch; it is shown to catch planted ones.
"""

from __future__ import annotations

import ast
import json
import os
import resource
import warnings
from pathlib import Path

import pytest

from trainsys.autograde import launch
from trainsys.autograde.sandbox import ENV_VAR, SandboxConfig

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = ROOT / "src" / "trainsys" / "autograde" / "launch.py"
ENV_NAMES = ("NBGRADER_COURSE_ROOT", "JUPYTER_CONFIG_PATH")  # nbgrader's course and configuration


def _dotted(node: ast.AST) -> str:
    """``a.b.c`` for a name or attribute chain, else ``""``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def nbgrader_launches(text: str, environment: bool = True) -> list[str]:
    """Where ``text`` (a module's source) starts nbgrader or builds its environment, other than through
    :mod:`trainsys.autograde.launch`: its Python API, its script's path, ``-m nbgrader``, ``run_trusted``
    asked for nbgrader, or (with ``environment``) the variables of
    :func:`~trainsys.autograde.launch.nbgrader_env` set by hand."""
    found = []
    with warnings.catch_warnings():  # an invalid escape in some module's docstring is not this check's business
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        tree = ast.parse(text)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nbgrader.apps"):
            found.append(f"line {line}: imports nbgrader's applications ({node.module})")
        elif isinstance(node, ast.Import) and any(a.name.startswith("nbgrader.apps") for a in node.names):
            found.append(f"line {line}: imports nbgrader's applications")
        elif isinstance(node, (ast.Name, ast.Attribute)) and _dotted(node).rsplit(".", 1)[-1] in ("NbGraderAPI",
                                                                                                  "NbGraderApp"):
            found.append(f"line {line}: uses {_dotted(node)}")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and \
                isinstance(node.right, ast.Constant) and node.right.value == "nbgrader":
            found.append(f"line {line}: the nbgrader script's path")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "bin/nbgrader" in node.value:
            found.append(f"line {line}: the nbgrader script's path")
        elif isinstance(node, (ast.List, ast.Tuple, ast.Call)):
            items = node.args if isinstance(node, ast.Call) else node.elts
            words = [i.value if isinstance(i, ast.Constant) else None for i in items]
            if any(a == "-m" and b == "nbgrader" for a, b in zip(words, words[1:])):
                found.append(f"line {line}: -m nbgrader")
            if not isinstance(node, ast.Call) and (words[:1] == ["nbgrader"] or words[:2] == ["jupyter", "nbgrader"]):
                found.append(f"line {line}: an nbgrader command line")
            if isinstance(node, ast.Call) and _dotted(node.func).endswith("run_trusted") and "nbgrader" in words:
                found.append(f"line {line}: run_trusted(…, 'nbgrader') instead of launch.nbgrader")
        elif not environment:
            continue
        elif isinstance(node, ast.keyword) and node.arg in ENV_NAMES:
            found.append(f"line {line}: sets {node.arg} (launch.nbgrader_env does)")
        elif isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value in ENV_NAMES
                                                for k in node.keys):
            found.append(f"line {line}: sets nbgrader's environment by hand (launch.nbgrader_env does)")
    return found


def test_nbgrader_is_started_only_by_the_launcher() -> None:
    """In ``src/`` nothing else starts nbgrader or builds its environment; the tests start it only through the
    launcher too (a test that runs a whole copy of the repository may point that copy at its own configuration)."""
    modules = [(p, True) for p in sorted((ROOT / "src").rglob("*.py"))]
    modules += [(p, False) for p in sorted((ROOT / "tests").rglob("*.py"))]
    offenders = {str(p.relative_to(ROOT)): hits for p, environment in modules
                 if p not in (LAUNCHER, Path(__file__).resolve())
                 and (hits := nbgrader_launches(p.read_text(), environment))}
    assert not offenders, f"nbgrader started or its environment built outside trainsys.autograde.launch: {offenders}"
    assert len(nbgrader_launches(LAUNCHER.read_text())) >= 3  # the check sees the launcher's own launches


@pytest.mark.parametrize("planted", [
    "import subprocess, sys\nsubprocess.run([sys.executable, '-I', '-m', 'nbgrader', 'autograde', 'a'])\n",
    "import subprocess\nfrom trainsys._paths import BIN\nsubprocess.run([str(BIN / 'nbgrader'), 'export'])\n",
    "import subprocess\nsubprocess.run(['.venv/bin/nbgrader', 'export'])\n",
    "import subprocess\nsubprocess.run(['nbgrader', 'autograde', 'a'], check=True)\n",
    "import subprocess\nsubprocess.check_call(('jupyter', 'nbgrader', 'export'))\n",
    "from nbgrader.apps import NbGraderAPI\nNbGraderAPI().generate_assignment('a')\n",
    "import nbgrader.apps.nbgraderapp as app\napp.NbGraderApp.launch_instance()\n",
    "from trainsys.autograde import launch\nlaunch.run_trusted(course, 'nbgrader', 'export', timeout=9)\n",
    "import os\nenv = dict(os.environ, JUPYTER_CONFIG_PATH='autograder')\n",
    "env = {'NBGRADER_COURSE_ROOT': '/c'}\n",
], ids=["-m nbgrader", "BIN / nbgrader", "bin/nbgrader", "on PATH", "jupyter nbgrader", "NbGraderAPI", "NbGraderApp",
        "run_trusted", "env kwarg", "env dict"])
def test_the_check_catches_a_planted_launch(planted: str) -> None:
    assert nbgrader_launches(planted)


def test_the_check_leaves_reading_nbgrader_metadata_alone() -> None:
    text = ("meta = cell.metadata.get('nbgrader', {})\nnb['cells'][0]['metadata']['nbgrader'] = {}\n"
            "from nbgrader.api import Gradebook\nx = os.environ.get('NBGRADER_DB_URL')\n")
    assert nbgrader_launches(text) == []


def test_the_child_environment_is_built_once(tmp_path: Path) -> None:
    env = launch.nbgrader_env(tmp_path, None, {"A": "1"})
    assert env["NBGRADER_COURSE_ROOT"] == str(tmp_path) and env["A"] == "1"
    assert env["NBGRADER_DB_URL"] == launch.gradebook_url(tmp_path) == f"sqlite:///{tmp_path / 'gradebook.db'}"
    assert launch.nbgrader_env(tmp_path, "postgresql://h/g")["NBGRADER_DB_URL"] == "postgresql://h/g"
    assert env["JUPYTER_CONFIG_PATH"] == str(ROOT / "autograder")
    assert env["PATH"].split(os.pathsep)[0] == str(launch.BIN)


def test_a_trusted_process_runs_isolated_in_the_course_with_its_env_and_cap(tmp_path: Path) -> None:
    cap = 2**36  # 64 GiB: far above what an interpreter maps, below any default hard limit (usually unlimited)
    probe = ("import json, os, resource, sys\n"
             "print(json.dumps([sys.flags.isolated, os.getcwd(), os.environ['NBGRADER_COURSE_ROOT'], "
             "os.environ['ONLY_MINE'], resource.getrlimit(resource.RLIMIT_AS)[0]]))\n")
    run = launch.run_trusted(tmp_path, "code", timeout=60, extra_env={"ONLY_MINE": "yes", "PYTHONPATH": "/nowhere"},
                             memory_limit=cap, soft_only=True, stdin=probe)  # the interactive console reads stdin
    assert run.returncode == 0, run.stderr
    line = next(text for text in run.stdout.splitlines() if "[" in text)
    isolated, cwd, root, mine, soft = json.loads(line[line.index("["):])
    assert (isolated, cwd, root, mine, soft) == (1, str(tmp_path), str(tmp_path), "yes", cap)
    assert resource.getrlimit(resource.RLIMIT_AS)[0] != cap  # the cap is the child's alone


@pytest.mark.parametrize("argv", [["unknown"], [], ["generate"], ["nbgrader"]], ids=["unknown", "none", "generate",
                                                                                     "nbgrader"])
def test_the_launcher_refuses_a_bad_command_line(tmp_path: Path, argv: list[str]) -> None:
    run = launch.run_trusted(tmp_path, launch.__name__, *argv, timeout=60)
    assert run.returncode == 2, run.stderr
    assert "usage: python -I -m trainsys.autograde.launch nbgrader COMMAND" in run.stderr
    assert "python -I -m trainsys.autograde.launch generate ASSIGNMENT" in run.stderr


def test_nbgrader_through_the_launcher_answers_and_fails_as_its_own_command(tmp_path: Path) -> None:
    version = launch.nbgrader(tmp_path, "--version", timeout=120)
    assert version.returncode == 0 and "nbgrader version" in version.stdout, version.stderr
    for run in (launch.nbgrader(tmp_path, "autograde", "--no-such-option", timeout=120),
                launch.run_trusted(tmp_path, "nbgrader", "autograde", "--no-such-option", timeout=120)):
        assert run.returncode == 2 and "unrecognized arguments: --no-such-option" in run.stderr, run.stderr


SKIP_PROBE = """
import json, sys
from trainsys.autograde.launch import SKIPPED_IMPORTS, skip_unused_imports
skip_unused_imports()
import nbformat
import nbgrader.apps  # every application nbgrader's command can run, with everything they import
valid = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
nbformat.validate(valid)
invalid = nbformat.from_dict({**valid, "cells": [{"cell_type": "code", "source": 1}]})
try:
    nbformat.validate(invalid)
    refused = False
except nbformat.ValidationError:
    refused = True
print(json.dumps({"skipped": {name: sys.modules.get(name, "absent") is None for name in SKIPPED_IMPORTS},
                  "refused": refused}))
"""


def test_the_grader_children_skip_only_what_nothing_they_run_uses() -> None:
    """:func:`launch.skip_unused_imports`: nbgrader's applications import without the skipped modules and
    nbformat still validates notebooks; no package a grading child runs checks formats (the one use of the
    skipped rfc3987-syntax, in jsonschema's format checker)."""
    import importlib.util
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-I", "-c", SKIP_PROBE], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    reply = json.loads(run.stdout.strip().splitlines()[-1])
    assert reply == {"skipped": {name: True for name in launch.SKIPPED_IMPORTS}, "refused": True}
    checked = 0
    for package in ("nbformat", "nbconvert", "nbclient", "nbgrader", "jupyter_client", "traitlets"):
        root = Path(importlib.util.find_spec(package).origin).parent
        for path in root.rglob("*.py"):
            text = path.read_text(errors="replace")
            checked += 1
            assert "format_checker" not in text and "FormatChecker" not in text, f"{path} checks formats"
    assert checked > 300


def test_the_sandbox_configuration_crosses_to_a_child_one_way() -> None:
    config = SandboxConfig(memory=300 * 2**20, slot=3, extra_ro=("/a", "/b"), withheld=("train",))
    assert SandboxConfig.decode(SandboxConfig.encode(config)) == config  # tuples come back as tuples
    assert SandboxConfig.encode(None) == "off" and SandboxConfig.decode("off") is None
    assert SandboxConfig.decode("") == SandboxConfig()  # a plain nbgrader command still sandboxes its kernels
    assert SandboxConfig.from_env({ENV_VAR: SandboxConfig.encode(config)}) == config
    with pytest.raises(TypeError):
        SandboxConfig.decode(json.dumps({"no_such_limit": 1}))


def test_the_student_process_defines_no_graded_function() -> None:
    """The sandbox replaces a lesson's graded function wherever the package defines it (``withheld_view``): if a
    module the student process runs on defined one, that lesson's student process would lose its own code."""
    import importlib
    import subprocess
    import sys

    import trainsys.grading as grading

    graded = {name.removeprefix("check_") for name in dir(grading) if name.startswith("check_")}
    probe = "import sys; import trainsys.autograde.student_side; print(' '.join(sorted(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True, check=True,
                            timeout=60).stdout.split()
    for name in (m for m in loaded if m.startswith("trainsys")):
        path = Path(importlib.import_module(name).__file__)
        tree = ast.parse(path.read_text())
        defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        assert not defined & graded, f"{name} defines graded functions {sorted(defined & graded)}"
    assert "trainsys.autograde.sandbox" not in loaded  # the student side needs none of the grader's machinery
