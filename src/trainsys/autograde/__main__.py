"""``python -m trainsys.autograde``: grade a class, then export grades and write feedback.

Usage (from the course root, or with ``--course``)::

    python -m trainsys.autograde                  # every submission under submitted/, cores-many at a time
    python -m trainsys.autograde --jobs 4 --timeout 60 --assignment m1p1-mlp-core
    python -m trainsys.autograde --no-feedback    # grades and the summary only
    python -m trainsys.autograde --no-sandbox     # without the OS sandbox: only for trusted code

Every student kernel and every process that calls a student's function runs in a bubblewrap sandbox
(``trainsys.autograde.sandbox``); the points are decided by the lessons' tests in a trusted process
(``trainsys.autograde.verify``).

Writes ``reports/summary.csv`` (students × assignments: points, failed cells, flags, seconds),
``reports/intake.csv`` (what under ``submitted/`` was skipped, and why: ``trainsys.autograde.intake``),
``reports/grades.csv`` (``nbgrader export``) and ``feedback/<student>/<assignment>/*.html``
(``nbgrader generate_feedback``, hidden-test code removed). Killed and restarted, it grades only what
is missing.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import sys
import time
from pathlib import Path

from trainsys.autograde.launch import skip_unused_imports

skip_unused_imports()  # before anything below imports nbformat (trainsys.autograde.launch.SKIPPED_IMPORTS)

from trainsys.autograde.intake import check_id, survey, write_report  # noqa: E402
from trainsys.autograde.integrity import GraderChanged  # noqa: E402
from trainsys.autograde.runner import (  # noqa: E402
    JobResult,
    Options,
    grade_class,
    last_line,
    nbgrader_for_run,
    plan,
)
from trainsys.autograde.sandbox import SandboxConfig, SandboxUnavailable, build_font_list, ensure_available  # noqa: E402
from trainsys.autograde.selftest import SelfTestFailed, self_test  # noqa: E402

UNSANDBOXED_WARNING = ("WARNING: --no-sandbox: student code runs with this user's rights and can read and change "
                       "every file this user can (other students' work, the gradebook, the grader itself). "
                       "Use it only for code you trust; every grade of this run is marked 'unsandboxed' "
                       "in reports/summary.csv.")


def write_summary(results: list[JobResult], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student", "assignment", "score", "max_score", "failed_cells", "flags", "seconds", "sandbox"])
        for r in results:
            writer.writerow([r.student, r.assignment, r.score, r.max_score, " ".join(r.failed_cells),
                             " | ".join(r.flags), r.seconds, r.sandbox])


def format_summary(results: list[JobResult]) -> str:
    """A plain-text table: one row per student and assignment, flags listed under it."""
    lines = [f"{'student':<24} {'assignment':<32} {'points':>12} {'failed':>6} {'seconds':>8}"]
    for r in results:
        lines.append(f"{r.student:<24} {r.assignment:<32} {r.score:>5.1f} / {r.max_score:<4.0f} "
                     f"{len(r.failed_cells):>6} {r.seconds:>8.1f}")
        lines += [f"    ! {flag}" for flag in r.flags]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainsys.autograde", description=__doc__.splitlines()[0])
    parser.add_argument("--course", type=Path, default=Path.cwd(), help="course root (default: current folder)")
    parser.add_argument("--assignment", action="append", help="grade only this assignment (repeatable)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel students (default: cores)")
    parser.add_argument("--timeout", type=int, default=30, help="seconds a cell may run (default: 30)")
    parser.add_argument("--recheck-timeout", type=int, default=None,
                        help="seconds the trusted re-check gives the student's process to load or answer one "
                             "call, doubled once on a time-out (default: max(10, 2 x --timeout))")
    parser.add_argument("--memory-limit-mb", type=int, default=6144,
                        help="address space of each process in a sandbox (default: 6144)")
    parser.add_argument("--sandbox-memory-mb", type=int, default=None,
                        help="memory of all of one sandbox's processes together (default: 3/4 of the machine's "
                             "memory shared by --jobs, at most --memory-limit-mb, at least 1024)")
    parser.add_argument("--grader-memory-mb", type=int, default=3072,
                        help="address space of each trusted grading process: nbgrader, the re-check (default: 3072)")
    parser.add_argument("--db-url", default=os.environ.get("NBGRADER_DB_URL"), help="gradebook (default: SQLite)")
    parser.add_argument("--force", action="store_true", help="regrade jobs already complete")
    parser.add_argument("--no-feedback", action="store_true", help="skip nbgrader generate_feedback")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="run student code without the OS sandbox (unsafe: for trusted code only)")
    args = parser.parse_args(argv)
    for name, value, minimum in (("--jobs", args.jobs, 1), ("--timeout", args.timeout, 1),
                                 ("--recheck-timeout", 1 if args.recheck_timeout is None else args.recheck_timeout, 1),
                                 ("--memory-limit-mb", args.memory_limit_mb, 512),
                                 ("--sandbox-memory-mb", 256 if args.sandbox_memory_mb is None else args.sandbox_memory_mb, 256),
                                 ("--grader-memory-mb", args.grader_memory_mb, 1024)):
        if value < minimum:
            parser.error(f"{name} must be at least {minimum}, got {value}")
    for assignment in args.assignment or []:
        if (why := check_id(assignment, "assignment")) is not None:
            parser.error(f"--assignment: {why}")
    course = args.course.resolve()
    if not (course / "submitted").is_dir():
        parser.error(f"--course {course} has no submitted/ folder (expected submitted/<student>/<assignment>/)")

    if args.no_sandbox:
        print(UNSANDBOXED_WARNING, file=sys.stderr)
    else:
        try:
            ensure_available(SandboxConfig(address_space=args.memory_limit_mb * 2**20))
        except SandboxUnavailable as exc:
            print(f"python -m trainsys.autograde: {exc}", file=sys.stderr)
            return 2

    options = Options(course=course, jobs=args.jobs, timeout=args.timeout, memory_limit_mb=args.memory_limit_mb,
                      force=args.force, db_url=args.db_url, sandbox=not args.no_sandbox,
                      sandbox_memory_mb=args.sandbox_memory_mb, grader_memory_mb=args.grader_memory_mb,
                      recheck_timeout=args.recheck_timeout)
    if options.sandbox:  # built once, in a sandbox, rather than by every sandboxed process that imports Matplotlib
        options = dataclasses.replace(options, font_list=build_font_list(options.sandbox_config(0)))
    skipped = survey(course, args.assignment).skipped
    write_report(skipped, course / "reports" / "intake.csv")
    for item in skipped:
        print(f"skipped submitted/{item.path}: {item.reason}")
    try:  # never a class of zeros from a setup the sandbox cannot grade in
        print(self_test(options, sorted({a for _, a in plan(course, args.assignment)})))
    except SelfTestFailed as exc:
        print(f"python -m trainsys.autograde: the self-test failed, so nobody was graded: {exc}", file=sys.stderr)
        return 4
    start = time.perf_counter()
    try:
        results = grade_class(options, args.assignment)
    except GraderChanged as exc:
        print(f"python -m trainsys.autograde: {exc}", file=sys.stderr)
        return 3
    elapsed = time.perf_counter() - start
    write_summary(results, course / "reports" / "summary.csv")
    print(format_summary(results))
    print(f"\n{len(results)} submissions graded in {elapsed:.1f} s with {args.jobs} job(s); "
          f"summary in {course / 'reports' / 'summary.csv'}")

    export = nbgrader_for_run(options, "export", f"--to={course / 'reports' / 'grades.csv'}", timeout=600)
    if export.returncode != 0:
        print(f"nbgrader export failed: {last_line(export.stderr)}", file=sys.stderr)
        return 1
    if not args.no_feedback:
        for assignment in sorted({r.assignment for r in results}):
            run = nbgrader_for_run(options, "generate_feedback", "--force", "--", assignment, timeout=1800)
            if run.returncode != 0:
                print(f"nbgrader generate_feedback {assignment} failed: {last_line(run.stderr)}", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
