"""Figures a reader without sight can follow: every figure a lesson draws carries alt text.

A code cell that draws a matplotlib figure sets myst-nb's image option in its metadata,
``{"mystnb": {"image": {"alt": "..."}}}``, which the book writes into the ``<img alt=...>`` of every image
the cell outputs; an image in markdown (``![alt](src)``) or a figure directive (``:alt:``) states its own.
The alt text says what the figure shows and what it finds: a sentence or two, not a file name or a title.
``tests/test_book.py::test_no_image_in_the_book_lacks_alt_text`` checks the built pages themselves.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted(ROOT.glob("solutions/*/*.ipynb"))
PAGES = sorted(p for p in ROOT.glob("book/**/*.md") if "node_modules" not in p.parts)
DRAWS = re.compile(r"\bplt\.(?:show|subplots|figure|subplot)\(|\.savefig\(")
FILE_NAME = re.compile(r"^\s*[\w./-]+\.(?:png|jpe?g|svg|gif|webp|pdf)\s*$|^[0-9a-f]{32,}", re.I)
MIN_WORDS = 15
"""What it shows and what it finds take more than a title's few words."""


def alt_problem(alt: object) -> str | None:
    """Why ``alt`` is not alt text a reader can use, or ``None`` if it is."""
    if not isinstance(alt, str) or not alt.strip():
        return "no alt text"
    if FILE_NAME.search(alt):
        return f"a file name as alt text ({alt!r})"
    if len(alt.split()) < MIN_WORDS:
        return f"alt text of {len(alt.split())} words ({alt!r}): say what the figure shows and its main finding"
    return None


def test_the_checker_rejects_what_the_book_had() -> None:
    assert alt_problem(None) and alt_problem("  ")
    assert alt_problem("3f9a0c6e2b1d4a5f8e7c9b0a1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e.png")
    assert alt_problem("loss.png") and alt_problem("Training loss")
    assert alt_problem("Held-out accuracy over 30 rounds for IID clients and label shards: IID runs cross 80% "
                       "about ten rounds earlier.") is None


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_every_figure_a_lesson_draws_has_alt_text(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and DRAWS.search(cell.source):
            alt = cell.metadata.get("mystnb", {}).get("image", {}).get("alt")
            if (why := alt_problem(alt)) is not None:
                problems.append(f"cell {index}: {why}")
        elif cell.cell_type == "markdown":
            problems += [f"cell {index}: markdown image: {why}" for m in re.finditer(r"!\[([^\]]*)\]\(", cell.source)
                         if (why := alt_problem(m.group(1))) is not None]
    assert not problems, f"{path.relative_to(ROOT)}: " + "; ".join(problems) + \
        ' (set {"mystnb": {"image": {"alt": "..."}}} in the cell metadata)'


@pytest.mark.parametrize("path", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_image_on_a_book_page_has_alt_text(path: Path) -> None:
    text = path.read_text()
    problems = [why for m in re.finditer(r"!\[([^\]]*)\]\(", text) if (why := alt_problem(m.group(1)))]
    for m in re.finditer(r"```\{(?:figure|image)\}[^\n]*\n(.*?)```", text, re.S):
        alt = re.search(r"^:alt:\s*(.+)$", m.group(1), re.M)
        if (why := alt_problem(alt.group(1) if alt else None)) is not None:
            problems.append(f"figure directive: {why}")
    assert not problems, f"{path.relative_to(ROOT)}: {problems}"
