"""The reference withheld (issue 23): while a lesson is re-checked, its graded function is not in the sandbox.

The sandbox sees the package with ``relu_forward`` replaced by a stub that raises "withheld while grading";
each route to the reference below must end at that stub, while an honest answer in the same sandbox (its
own code, the setup's imports from the same module) is untouched.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tests.hostile_class import ASSIGNMENT, FUNCTION, STEM, solution
from trainsys.autograde.isolation import StudentProcess
from trainsys.autograde.sandbox import WITHHELD, SandboxConfig
from trainsys.autograde.verify import read_lesson
from trainsys.course import REPO

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bubblewrap is Linux only")
LESSON = read_lesson(REPO / "solutions" / ASSIGNMENT / f"{STEM}.ipynb")
REFERENCE_LINE = "return np.maximum(Z, Z.dtype.type(0))"  # a line of the package's relu_forward

# Each route returns the function it found; ``routes`` calls each on a small array and reports what happened.
ROUTES = '''
import glob, importlib, inspect, os, sys
def _importlib():
    return getattr(importlib.import_module("trainsys.memtrain" + ".mlp"), FUNCTION)
def _sys_modules():
    import trainsys.grading
    return next(getattr(m, FUNCTION) for n, m in list(sys.modules.items()) if n.endswith(".mlp") and hasattr(m, FUNCTION))
def _globals():
    return linear_forward.__globals__[FUNCTION]
def _getsource():
    namespace = {}
    exec(inspect.getsource(inspect.getmodule(linear_forward)), namespace)
    return namespace[FUNCTION]
def _file():
    namespace = {}
    exec(open(linear_forward.__code__.co_filename).read(), namespace)
    return namespace[FUNCTION]
def routes():
    outcomes = {}
    for route in (_importlib, _sys_modules, _globals, _getsource, _file):
        try:
            route()(np.array([-1.0, 2.0]))
            outcomes[route.__name__] = "reached the reference"
        except RuntimeError as exc:
            outcomes[route.__name__] = str(exc)
    folder = os.path.dirname(linear_forward.__code__.co_filename)
    outcomes["source"] = open(os.path.join(folder, "mlp.py")).read()
    outcomes["bytecode"] = sorted(glob.glob(os.path.join(folder, "__pycache__", "mlp.*")))
    return outcomes
'''.replace("FUNCTION", repr(FUNCTION))


def test_every_route_to_the_withheld_reference_ends_at_the_stub() -> None:
    config = SandboxConfig(withheld=(FUNCTION,))
    with StudentProcess([LESSON.setup, ROUTES], "routes", timeout=60, sandbox=config) as student:
        assert student.status["ok"], student.status
        outcomes = student.function()
    source, bytecode = outcomes.pop("source"), outcomes.pop("bytecode")
    assert set(outcomes) == {"_importlib", "_sys_modules", "_globals", "_getsource", "_file"}
    for route, outcome in outcomes.items():
        assert WITHHELD in outcome and "trainsys.memtrain.mlp.relu_forward" in outcome, (route, outcome)
    assert REFERENCE_LINE not in source and "def linear_forward" in source
    assert bytecode == [], "the reference's bytecode must not be in the sandbox"


def test_an_honest_answer_is_untouched_by_the_withheld_reference() -> None:
    """Its own code, and the setup's linear_forward from the very module that holds the stub, still work."""
    config = SandboxConfig(withheld=(FUNCTION,))
    use_setup = solution() + "\ndef through_setup(X, W, b):\n    return relu_forward(linear_forward(X, W, b))\n"
    with StudentProcess([LESSON.setup, use_setup], "through_setup", timeout=60, sandbox=config) as student:
        assert student.status["ok"], student.status
        out = student.function(np.array([[1.0, -2.0]]), np.array([[1.0], [1.0]]), np.array([0.5]))
    np.testing.assert_array_equal(out, [[0.0]])  # relu(1 - 2 + 0.5) = relu(-0.5)


def test_without_withholding_the_package_is_whole() -> None:
    """The same routes reach the reference when nothing is withheld (the kernels, JupyterLab)."""
    with StudentProcess([LESSON.setup, ROUTES], "routes", timeout=60, sandbox=SandboxConfig()) as student:
        outcomes = student.function()
    assert REFERENCE_LINE in outcomes.pop("source")
    outcomes.pop("bytecode")
    assert set(outcomes.values()) == {"reached the reference"}
