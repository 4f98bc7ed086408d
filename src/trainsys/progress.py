"""``python -m trainsys.progress`` (``make progress``): where a student stands in the course.

Runs the visible tests of every lesson notebook under ``notebooks/`` — each in its own Python
process, several at a time, each with a time limit — and prints, per module and part, the lessons
complete and the XP earned out of the XP available (5 per lesson), with the first line of the failure
of every lesson not yet complete. Writes ``progress.json``. A notebook that is missing, unreadable or
that hangs is reported as such; nothing stops the run.

A lesson is *complete* when its visible tests pass: the lesson's setup cell, then every code cell of
the student's before the tests, then the test cell, as "Restart and run all" would run them. The
hidden checks are the instructor's to run (``make grade``); passing the visible tests is what a student
can see for themselves.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat
from tqdm import tqdm

from trainsys import notebook
from trainsys.course import REPO
from trainsys.syllabus import HEADER, XP_PER_LESSON


@dataclass
class LessonProgress:
    notebook: str  # <part>/<NN>_<name>.ipynb
    module: int
    module_title: str
    part: int
    part_title: str
    status: str  # complete | not started | failing | missing | broken | timed out
    message: str = ""
    xp: int = 0
    seconds: float = 0.0


def lessons(source_root: Path) -> list[tuple[str, int, str, int, str]]:
    """``(part/notebook, module, module title, part, part title)`` of every lesson, in course order."""
    found = []
    for path in sorted(source_root.glob("*/*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        header = next((HEADER.search(c.source) for c in nb.cells if c.cell_type == "markdown"
                       and HEADER.search(c.source)), None)
        if header is None:
            continue
        found.append((f"{path.parent.name}/{path.name}", int(header[1]), header[2], int(header[3]), header[4]))
    return sorted(found, key=lambda row: (row[1], row[3], row[0]))


_RUNNER = r"""
import json, sys
from trainsys.notebook import run_visible_tests
before, visible = json.loads(sys.stdin.read())
try:
    run_visible_tests(visible, before, keep_going=True)
except BaseException as exc:
    line = f"{type(exc).__name__}: {exc}".strip().splitlines()[0] if str(exc) else type(exc).__name__
    print(json.dumps({"passed": False, "not_implemented": isinstance(exc, NotImplementedError),
                      "message": line[:300]}))
    sys.exit(0)
print(json.dumps({"passed": True}))
"""


def _cells(path: Path) -> tuple[list[str], str]:
    """``(the cells to run first, the visible tests)``: the setup and the student's code cells up to the first
    visible-test cell (:func:`trainsys.notebook.is_visible_test`), and that cell's source."""
    before = []
    for cell in notebook.code_cells(nbformat.read(path, as_version=4)):
        if notebook.is_visible_test(cell):
            return before, notebook.source(cell)
        if not notebook.is_graded(cell):
            before.append(notebook.source(cell))
    raise ValueError("it has no visible test cell")


def check_notebook(path: Path, timeout: float) -> tuple[str, str]:
    """``(status, message)`` of one lesson notebook's visible tests."""
    if not path.is_file():
        return "missing", "the notebook is not there"
    try:
        cells = _cells(path)
    except Exception as exc:  # noqa: BLE001 - an unreadable notebook is reported, not fatal
        return "broken", f"cannot be read: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONWARNINGS": "ignore", "OPENBLAS_NUM_THREADS": "1",
           "OMP_NUM_THREADS": "1"}
    try:
        run = subprocess.run([sys.executable, "-c", _RUNNER], input=json.dumps(cells), capture_output=True,
                             text=True, timeout=timeout, cwd=path.parent, env=env)
    except subprocess.TimeoutExpired:
        return "timed out", f"the visible tests did not finish within {timeout:.0f} s"
    try:
        result = json.loads(run.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
        return "broken", f"the notebook's process ended ({run.returncode}): {tail}"[:300]
    if result["passed"]:
        return "complete", ""
    if result.get("not_implemented"):
        return "not started", "the function still raises NotImplementedError"
    return "failing", result["message"]


def collect(notebooks: Path, source_root: Path, jobs: int, timeout: float, progress: bool = True
            ) -> list[LessonProgress]:
    rows = lessons(source_root)

    def one(row: tuple[str, int, str, int, str]) -> LessonProgress:
        start = time.perf_counter()
        status, message = check_notebook(notebooks / row[0], timeout)
        return LessonProgress(row[0], row[1], row[2], row[3], row[4], status, message,
                              XP_PER_LESSON if status == "complete" else 0, round(time.perf_counter() - start, 2))

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(tqdm(pool.map(one, rows), total=len(rows), desc="visible tests", unit="lesson",
                         disable=not progress))


def report(results: list[LessonProgress]) -> str:
    lines = []
    modules = sorted({(r.module, r.module_title) for r in results})
    total_xp = sum(r.xp for r in results)
    lines.append(f"Course: {sum(r.status == 'complete' for r in results)}/{len(results)} lessons, "
                 f"{total_xp}/{XP_PER_LESSON * len(results)} XP")
    for module, title in modules:
        mine = [r for r in results if r.module == module]
        lines.append(f"\nModule {module} — {title}: {sum(r.status == 'complete' for r in mine)}/{len(mine)} lessons, "
                     f"{sum(r.xp for r in mine)}/{XP_PER_LESSON * len(mine)} XP")
        for part, part_title in sorted({(r.part, r.part_title) for r in mine}):
            rows = [r for r in mine if r.part == part]
            done = sum(r.status == "complete" for r in rows)
            lines.append(f"  Part {part} — {part_title}: {done}/{len(rows)} lessons, "
                         f"{sum(r.xp for r in rows)}/{XP_PER_LESSON * len(rows)} XP")
            for r in rows:
                if r.status != "complete":
                    lines.append(f"    {r.status:<11} {r.notebook}" + (f": {r.message}" if r.message else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainsys.progress", description=__doc__.splitlines()[0])
    parser.add_argument("--notebooks", type=Path, default=REPO / "notebooks", help="the student's notebooks folder")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="notebooks at a time (default: cores)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per notebook (default: 120)")
    parser.add_argument("--output", type=Path, default=Path("progress.json"), help="where to write the JSON")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if args.timeout <= 0:
        parser.error(f"--timeout must be positive, got {args.timeout}")
    if not args.notebooks.is_dir():
        parser.error(f"--notebooks {args.notebooks} is not a folder (expected the course's notebooks/)")
    results = collect(args.notebooks.resolve(), REPO / "solutions", args.jobs, args.timeout)
    print(report(results))
    args.output.write_text(json.dumps({"lessons": [asdict(r) for r in results],
                                       "xp": sum(r.xp for r in results),
                                       "xp_available": XP_PER_LESSON * len(results)}, indent=1))
    print(f"\nwritten: {args.output.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
