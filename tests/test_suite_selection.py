"""What a pytest session selects: part markers reach the lessons' notebooks, and each lesson runs once.

Each case collects (``--collect-only``, nothing runs) in a child pytest, as an author would select.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.test_book import EXECUTED

ROOT = Path(__file__).resolve().parents[1]
RUN_BY_BOOK = sorted(EXECUTED)[0]  # solutions/m1p1-mlp-core/07_linear_backward.ipynb
NOT_RUN_BY_BOOK = "solutions/m1p1-mlp-core/06_mse_loss_and_grad.ipynb"


def _collected(*args: str) -> list[str]:
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "--nbval-lax", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode in (0, 5), run.stdout[-3000:] + run.stderr[-3000:]  # 5: nothing selected
    return [line for line in run.stdout.splitlines() if "::" in line]


def _notebooks(ids: list[str]) -> set[str]:
    return {i.split("::")[0] for i in ids if i.split("::")[0].endswith(".ipynb")}


def test_the_examples_are_what_they_claim() -> None:
    assert NOT_RUN_BY_BOOK not in EXECUTED
    assert (ROOT / RUN_BY_BOOK).is_file() and (ROOT / NOT_RUN_BY_BOOK).is_file()


def test_nbval_leaves_out_the_lessons_the_selected_book_build_runs() -> None:
    ids = _collected("tests/test_book.py", RUN_BY_BOOK, NOT_RUN_BY_BOOK)
    assert _notebooks(ids) == {NOT_RUN_BY_BOOK}
    assert any(i.startswith("tests/test_book.py::") for i in ids)


def test_a_part_marker_selects_its_lessons_notebooks_and_without_the_book_nbval_runs_them_all() -> None:
    """``-m m1p1`` leaves out the book's tests (they name no part), so nbval keeps the lesson the build runs."""
    ids = _collected("-m", "m1p1", "tests/test_book.py", RUN_BY_BOOK, NOT_RUN_BY_BOOK,
                     "solutions/m2p1-model-forward-loss/05_cross_entropy_loss.ipynb")
    assert _notebooks(ids) == {RUN_BY_BOOK, NOT_RUN_BY_BOOK}  # m1p1's, not m2p1's
    assert not any(i.startswith("tests/test_book.py::") for i in ids)
