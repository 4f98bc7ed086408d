"""``make bench``: the figures the course promises, measured and printed (never asserted).

Run ``python -m trainsys.bench`` from the repository root for every section, or name sections:
``python -m trainsys.bench mutants nbval``. Each section prints ``name: value`` lines.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

import trainsys.grading as grading
from trainsys.course import BIN, REPO, assignments, make_course_copy, run_nbgrader, solved_answers, submit

def _lessons() -> list[Path]:
    return sorted(REPO.glob("solutions/*/*.ipynb"))


def bench_mutants() -> None:
    """How many realistic wrong implementations the hidden checks reject, and the check time."""
    sys.path.insert(0, str(REPO))
    import tests.mutants as mutants_pkg

    rejected = total = 0
    start = time.perf_counter()
    for info in pkgutil.iter_modules(mutants_pkg.__path__):
        module = importlib.import_module(f"tests.mutants.{info.name}")
        for name, mutants in module.MUTANTS.items():
            check = getattr(grading, f"check_{name}")
            for _, mutant in mutants:
                total += 1
                try:
                    check(mutant)
                except AssertionError:
                    rejected += 1
    elapsed = time.perf_counter() - start
    print(f"mutants rejected: {rejected} / {total}")
    print(f"mean check time per mutant: {elapsed / max(total, 1) * 1000:.1f} ms")


def bench_nbval() -> None:
    """Seconds per notebook for ``pytest --nbval-lax`` over every lesson (kernel start included)."""
    lessons = _lessons()
    start = time.perf_counter()
    subprocess.run([str(BIN / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
                    *map(str, lessons)], cwd=REPO, check=True, capture_output=True)
    elapsed = time.perf_counter() - start
    print(f"nbval: {len(lessons)} notebooks in {elapsed:.1f} s = {elapsed / len(lessons):.2f} s per notebook")


def bench_autograde() -> None:
    """Seconds per notebook for ``nbgrader autograde`` of one student who solved everything."""
    with tempfile.TemporaryDirectory() as tmp:
        course = make_course_copy(Path(tmp))
        count = 0
        start = time.perf_counter()
        for assignment in assignments(course):
            submit(course, "bench_student", assignment, solved_answers(course, assignment))
            run_nbgrader(course, "autograde", assignment, "--create")
            count += len(list((course / "solutions" / assignment).glob("*.ipynb")))
        elapsed = time.perf_counter() - start
    print(f"autograde: {count} notebooks in {elapsed:.1f} s = {elapsed / count:.2f} s per notebook")


def bench_book() -> None:
    """Wall time of a full book build, every notebook executed afresh (no execution cache)."""
    with tempfile.TemporaryDirectory() as tmp:
        config = yaml.safe_load((REPO / "_config.yml").read_text())
        config["execute"]["cache"] = str(Path(tmp) / "cache")
        config_path = Path(tmp) / "_config.yml"
        config_path.write_text(yaml.safe_dump(config))
        start = time.perf_counter()
        subprocess.run([str(BIN / "jupyter-book"), "build", str(REPO), "--config", str(config_path),
                        "--path-output", str(Path(tmp) / "out"), "--warningiserror", "--keep-going"],
                       cwd=REPO, check=True, capture_output=True)
        elapsed = time.perf_counter() - start
        shutil.rmtree(Path(tmp) / "out", ignore_errors=True)
    print(f"book build (fresh execution of {len(_lessons())} lessons): {elapsed:.1f} s")


SECTIONS: dict[str, Callable[[], None]] = {
    "mutants": bench_mutants,
    "nbval": bench_nbval,
    "autograde": bench_autograde,
    "book": bench_book,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sections", nargs="*", help=f"sections to run, from {list(SECTIONS)} (default: all)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.sections) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections {unknown}; choose from {list(SECTIONS)}")
    for name in args.sections or SECTIONS:
        print(f"== {name}")
        SECTIONS[name]()


if __name__ == "__main__":
    main()
