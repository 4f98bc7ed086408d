"""The trusted re-check gives a correct answer full marks, for every graded function.

The reference implementations are loaded in a sandboxed student process (as a student's answer cell would
be), one process per reference module serving all of its graded functions, and each function's check runs
in this process against it, across the data-only channel: results, in-place updates, views, generators,
torch modules and autograd graphs must all come back as they are in one process. A failure here would mean
the autograder takes points from correct answers. (The grader itself starts one process per lesson.)
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from tests.answers import references
import trainsys.grading as grading
from trainsys.autograde.isolation import StudentProcess
from trainsys.autograde.sandbox import SandboxConfig

pytestmark = pytest.mark.slow


def _by_module() -> list[tuple[str, list[str]]]:
    grouped: defaultdict[str, list[str]] = defaultdict(list)
    for name, module in sorted(references().items()):
        grouped[module].append(name)
    return sorted(grouped.items())


BY_MODULE = _by_module()


@pytest.mark.parametrize(("module", "names"), BY_MODULE,
                         ids=[f"{module.rsplit('.', 1)[1]}:{'+'.join(names)}" for module, names in BY_MODULE])
def test_references_pass_their_checks_through_the_sandbox(module: str, names: list[str]) -> None:
    answer = f"from {module} import {', '.join(names)}\n"
    failed = {}
    with StudentProcess([answer], names, timeout=120, sandbox=SandboxConfig()) as student:
        assert student.status["ok"], student.status
        assert student.status["tampered"] == []
        for name in names:
            try:
                message = getattr(grading, f"check_{name}")(student.functions[name])
            except AssertionError as exc:
                failed[name] = f"failed: {str(exc)[:2000]}"
                continue
            if "passed" not in message:
                failed[name] = message[:2000]
    assert not failed, failed


def test_every_graded_function_is_checked_once() -> None:
    served = [name for _, names in BY_MODULE for name in names]
    assert sorted(served) == sorted(references()) and len(served) == len(set(served)) == 96
