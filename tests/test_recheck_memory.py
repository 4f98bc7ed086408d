"""Visible tests that measure the student's memory hold in the trusted re-check.

In the re-check the student's function lives in a sandboxed process (``RemoteFunction``): ``tracemalloc``
in the grader sees only the reply crossing the wire, so a visible test comparing two peaks (Lesson 14: eight
micro-batches need under a third of one) failed for the reference itself — 2 points lost by every
student. ``peak_memory_bytes`` now asks such a function for its own process's peak.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import nbformat
import numpy as np
import pytest

from trainsys.memtrain.measure import peak_memory_bytes

ROOT = Path(__file__).resolve().parent.parent


class _Remote:
    """Stands for a function in another process: it reports that process's peak itself."""

    def __call__(self, n: int) -> np.ndarray:
        raise AssertionError("peak_memory_bytes must not call a remote function directly")

    def peak_memory(self, n: int) -> tuple[np.ndarray, int]:
        return np.zeros(n), 8 * n


def test_peak_memory_bytes_asks_a_remote_function_for_its_peak() -> None:
    result, peak = peak_memory_bytes(_Remote(), 1000)
    assert peak == 8000 and result.shape == (1000,)


def test_peak_memory_bytes_traces_a_local_call() -> None:
    _, peak = peak_memory_bytes(lambda n: np.ones(n).sum(), 100_000)
    assert peak >= 800_000  # the array of 100,000 float64 was alive at the peak


@pytest.mark.slow
def test_lesson_14_reference_passes_its_visible_memory_test_in_the_recheck() -> None:
    from trainsys.autograde.decide import run_verifier
    from trainsys.autograde.options import Options
    from trainsys.autograde.selftest import _with_answer
    from trainsys.autograde.verify import read_lesson

    source = ROOT / "solutions/m1p2-gradient-accumulation/14_grad_accumulation_step.ipynb"
    lesson = read_lesson(source)
    tmp = Path(tempfile.mkdtemp(prefix="trainsys-recheck-"))
    try:
        options = Options(course=tmp, jobs=2, db_url=f"sqlite:///{tmp / 'unused.db'}")
        folder = tmp / "submitted" / "reference" / source.parent.name
        folder.mkdir(parents=True)
        nbformat.write(_with_answer(source, lesson, None), folder / source.name)
        reply = run_verifier(options, "reference", source.parent.name, [source], slot=0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    verdicts = {v["cell"]: v for v in reply.get("verdicts", [])}
    for cell in (lesson.visible_id, lesson.hidden_id):
        assert verdicts[cell]["status"] == "passed", verdicts[cell]
