"""Time and XP: every lesson's header line, and the totals on the part, module and introduction pages.

``python -m trainsys.syllabus`` rewrites them from the lessons themselves; ``--check`` only reports what
is out of date (the lesson linter runs it). A lesson is worth :data:`XP_PER_LESSON` XP, its points in
nbgrader. Its time is an estimate, stated on the "How to use" page and computed, not typed:

- reading: its markdown words at :data:`READING_WORDS_PER_MINUTE` (technical prose with mathematics);
- writing: :data:`MINUTES_PER_LINE` per line of the reference answer (blank lines and comments not
  counted), validation included;
- running: :data:`MINUTES_TO_RUN` for the tests, the Checkpoint and its Question;

rounded up to 5 minutes. Part, module and course totals add the lessons' minutes.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import nbformat

from trainsys._paths import REPO
from trainsys.notebook import BEGIN_SOLUTION, is_answer, solution_body

XP_PER_LESSON = 5
READING_WORDS_PER_MINUTE = 150
MINUTES_PER_LINE = 1
MINUTES_TO_RUN = 5

HEADER = re.compile(r"^\*Module (\d+) — (.+?) · Part (\d+) — (.+?) · (\d+ XP · about \d+ minutes|\d+ points)\*$",
                    re.M)
"""A lesson's header line (the second paragraph of its first cell)."""
BLOCK = re.compile(r"<!-- syllabus:.*? -->\n.*?<!-- /syllabus -->\n", re.S)
BLOCK_OPEN = "<!-- syllabus: written by python -m trainsys.syllabus from the lessons; do not edit -->\n"


LESSON_FILE = re.compile(r"^(m(\d+)p(\d+))-[a-z0-9-]+/(\d\d)_(\w+)\.ipynb$")
"""A lesson's place: ``<part>/<NN>_<function>.ipynb`` with ``<part>`` = ``m<module>p<part>-<slug>``."""


def lesson_key(path: Path | str) -> str:
    """The lesson's key, unique across the course: ``m<module>p<part>.<NN>``, e.g. ``m2p5.22`` for
    ``solutions/m2p5-outer-nesterov/22_update_outer_momentum.ipynb`` (the same for its release in ``notebooks/``).
    Lesson numbers restart in every module, so ``NN`` alone is ambiguous; the part prefix makes it unique.
    Raises ``ValueError`` naming the path when it is not ``…/m<M>p<P>-<slug>/<NN>_<function>.ipynb``."""
    path = Path(path)
    match = LESSON_FILE.match(f"{path.parent.name}/{path.name}")
    if match is None:
        raise ValueError(f"path must be a lesson notebook <m<M>p<P>-slug>/<NN>_<function>.ipynb, got {str(path)!r}")
    return f"{match[1]}.{match[4]}"


@dataclass(frozen=True)
class Lesson:
    path: Path
    module: int
    module_title: str
    part: int
    part_title: str
    minutes: int
    xp: int = XP_PER_LESSON


def markdown_words(nb: nbformat.NotebookNode) -> int:
    """The whitespace-separated words of a notebook's markdown cells (mathematics included), without the
    header line (a label, not prose; so its number of words never depends on the estimate it shows)."""
    return sum(len(HEADER.sub("", cell.source).split()) for cell in nb.cells if cell.cell_type == "markdown")


def answer_lines(nb: nbformat.NotebookNode) -> int:
    """Lines of the reference answer: the solution region of the graded cell, without blanks and comments."""
    cell = next((c for c in nb.cells if is_answer(c)), None)
    body = solution_body(cell.source) if cell is not None else None
    if body is None:
        raise ValueError(f"the notebook has no answer cell with a {BEGIN_SOLUTION} region")
    return sum(1 for line in body.splitlines() if line.strip() and not line.strip().startswith("#"))


LESSON_WORDS = 1000
"""Markdown words a lesson may take whose answer is at most :data:`LINES_INCLUDED` lines: the derivation with
shapes, the contract, a hand-computed test, the mistakes, the checkpoint — then stop."""
UTILITY_WORDS = 700
"""The same for a utility: a function that is a few lines once its inputs are checked."""
LINES_INCLUDED = 40
LINES_PER_READING_MINUTE = 25
"""Past :data:`LINES_INCLUDED` answer lines, every 25 more (25 minutes of writing) buy one more minute of
reading (:data:`READING_WORDS_PER_MINUTE` words): a lesson whose contract is large gets the words to state it."""


def word_budget(lines: int, utility: bool = False) -> int:
    """The markdown words a lesson may take, sized to the writing time of its answer (``lines`` lines of the
    reference answer, :func:`answer_lines`): 1,000 words (700 for a utility) up to 40 lines, then
    150 more per 25 lines. Raises ``ValueError`` for a negative ``lines``."""
    if isinstance(lines, bool) or not isinstance(lines, int) or lines < 0:
        raise ValueError(f"lines must be an integer >= 0 (lines of the reference answer), got {lines!r}")
    base = UTILITY_WORDS if utility else LESSON_WORDS
    return base + READING_WORDS_PER_MINUTE * max(0, lines - LINES_INCLUDED) // LINES_PER_READING_MINUTE


def estimate_minutes(words: int, lines: int) -> int:
    """The module docstring's estimate, rounded up to 5 minutes."""
    raw = words / READING_WORDS_PER_MINUTE + MINUTES_PER_LINE * lines + MINUTES_TO_RUN
    return 5 * math.ceil(raw / 5)


def header_line(module: int, module_title: str, part: int, part_title: str, minutes: int) -> str:
    return (f"*Module {module} — {module_title} · Part {part} — {part_title} · {XP_PER_LESSON} XP · "
            f"about {minutes} minutes*")


def with_header(nb: nbformat.NotebookNode, where: str) -> tuple[nbformat.NotebookNode, Lesson]:
    """``nb`` with its header line brought up to date (a copy), and the lesson it describes."""
    nb = nbformat.from_dict(nb)
    first = nb.cells[0]
    match = HEADER.search(first.source) if first.cell_type == "markdown" else None
    if match is None:
        raise ValueError(f"{where}: the first cell has no '*Module M — … · Part P — … · …*' header line")
    module, module_title, part, part_title = int(match[1]), match[2], int(match[3]), match[4]
    minutes = estimate_minutes(markdown_words(nb), answer_lines(nb))
    first.source = HEADER.sub(header_line(module, module_title, part, part_title, minutes), first.source, count=1)
    return nb, Lesson(Path(where), module, module_title, part, part_title, minutes)


def _hours(minutes: int) -> str:
    return f"{minutes / 60:.1f} hours"


def _summary(lessons: list[Lesson]) -> str:
    return f"{len(lessons)} lessons · about {_hours(sum(l.minutes for l in lessons))} · {sum(l.xp for l in lessons)} XP"


def part_block(lessons: list[Lesson]) -> str:
    rows = "\n".join(f"| {int(l.path.name[:2])} | {{doc}}`{l.path.stem[3:]} </{l.path.parent.parent.name}/"
                     f"{l.path.parent.name}/{l.path.stem}>` | {l.minutes} min | {l.xp} |" for l in lessons)
    return f"**{_summary(lessons)}**\n\n| lesson | function | time | XP |\n|---|---|---|---|\n{rows}\n"


def module_block(lessons: list[Lesson]) -> str:
    parts = sorted({(l.part, l.part_title) for l in lessons})
    rows = []
    for part, title in parts:
        mine = [l for l in lessons if l.part == part]
        rows.append(f"| {part} · {title} | {len(mine)} | {_hours(sum(l.minutes for l in mine))} | "
                    f"{sum(l.xp for l in mine)} |")
    return (f"**{_summary(lessons)}**\n\n| part | lessons | time | XP |\n|---|---|---|---|\n" + "\n".join(rows) + "\n")


def course_block(lessons: list[Lesson]) -> str:
    rows = []
    for module, title in sorted({(l.module, l.module_title) for l in lessons}):
        mine = [l for l in lessons if l.module == module]
        rows.append(f"| {module} · {title} | {len({l.part for l in mine})} | {len(mine)} | "
                    f"{_hours(sum(l.minutes for l in mine))} | {sum(l.xp for l in mine)} |")
    return (f"**{_summary(lessons)}** — times are estimates: see {{doc}}`how_to_use`.\n\n"
            "| module | parts | lessons | time | XP |\n|---|---|---|---|---|\n" + "\n".join(rows) + "\n")


def _with_block(text: str, block: str, where: str) -> str:
    if not BLOCK.search(text):
        raise ValueError(f"{where}: no '<!-- syllabus: … -->' … '<!-- /syllabus -->' block to write into")
    return BLOCK.sub(lambda _: BLOCK_OPEN + block + "<!-- /syllabus -->\n", text, count=1)


def plan(root: Path = REPO) -> dict[Path, str]:
    """Every file the syllabus writes, with the text it should have."""
    out: dict[Path, str] = {}
    lessons: list[Lesson] = []
    for path in sorted(root.glob("solutions/*/*.ipynb")):
        nb, lesson = with_header(nbformat.read(path, as_version=4), str(path.relative_to(root)))
        text = nbformat.writes(nb)
        out[path] = text if text.endswith("\n") else text + "\n"  # as nbformat.write ends a file
        lessons.append(replace(lesson, path=path))
    for module in sorted({l.module for l in lessons}):
        mine = [l for l in lessons if l.module == module]
        index = root / "book" / f"m{module}" / "index.md"
        out[index] = _with_block(index.read_text(), module_block(mine), str(index))
        for part in sorted({l.part for l in mine}):
            pages = sorted((root / "book" / f"m{module}").glob(f"p{part}_*.md"))
            if len(pages) != 1:
                raise ValueError(f"book/m{module}: expected one page p{part}_*.md for Part {part}, found {len(pages)}")
            out[pages[0]] = _with_block(pages[0].read_text(), part_block([l for l in mine if l.part == part]),
                                        str(pages[0]))
    intro = root / "book" / "intro.md"
    out[intro] = _with_block(intro.read_text(), course_block(lessons), str(intro))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainsys.syllabus", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="report out-of-date files, write nothing")
    args = parser.parse_args(argv)
    stale = [path for path, text in plan().items() if path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"out of date: {path.relative_to(REPO)} (run python -m trainsys.syllabus, then make release)")
        return 1 if stale else 0
    for path, text in plan().items():
        if path in stale:
            path.write_text(text)
            print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
