"""The trusted re-check gives a correct answer full marks, for every graded function.

Each reference implementation is loaded in a sandboxed student process (as a student's answer cell
would be) and its check runs in this process against it, across the data-only channel: results,
in-place updates, views, generators, torch modules and autograd graphs must all come back as they
are in one process. A failure here would mean the autograder takes points from correct answers.
"""

from __future__ import annotations

import pytest

from tests.answers import references
import trainsys.grading as grading
from trainsys.autograde.isolation import StudentProcess
from trainsys.autograde.sandbox import SandboxConfig

pytestmark = pytest.mark.slow
REFERENCES = sorted(references().items())


@pytest.mark.parametrize(("name", "module"), REFERENCES, ids=[n for n, _ in REFERENCES])
def test_reference_passes_its_check_through_the_sandbox(name: str, module: str) -> None:
    answer = f"from {module} import {name}\n"
    with StudentProcess([answer], name, timeout=120, sandbox=SandboxConfig()) as student:
        assert student.status["ok"], student.status
        assert student.status["tampered"] == []
        message = getattr(grading, f"check_{name}")(student.function)
    assert "passed" in message
