"""Grading a class: nbgrader autograde per student in parallel, checked again out of the kernel's reach.

For each ``(student, assignment)`` under ``<course>/submitted``:

1. **Inspect** every submitted notebook: unreadable JSON is set aside (renamed ``*.ipynb.corrupt``,
   never deleted) so that nbgrader scores that notebook as missing and grades the others.
2. **Autograde** with nbgrader in its own process, with the per-cell timeout, warnings kept off stderr
   (``PYTHONWARNINGS=ignore``: a library warning must not zero a correct cell) and the kernel's address
   space capped. If nbgrader fails on the whole assignment (a kernel that died, say), it is run again
   one notebook at a time so that only the broken notebook loses its points.
3. **Re-check** each notebook's graded function in a fresh process (:mod:`trainsys.autograde.isolation`):
   a hidden check that passed in the kernel but fails there is set to 0 in the gradebook; visible tests
   passed in a kernel whose testing functions were replaced are set to 0; an answer that imports the
   reference implementation is flagged.
4. Write ``autograded/<student>/<assignment>/.trainsys.json`` — the job's result and the mark that it is
   complete. A restarted run skips complete jobs and redoes the rest (``--force`` on nbgrader), so a kill
   loses no grade and duplicates none.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
from tqdm import tqdm

from trainsys.course import BIN, nbgrader_env

MARKER = ".trainsys.json"


@dataclass
class Options:
    course: Path
    jobs: int = max(os.cpu_count() or 1, 1)
    timeout: int = 30  # seconds per cell
    memory_limit_mb: int = 6144  # address space of nbgrader and the kernels it starts
    force: bool = False
    db_url: str | None = None  # None: SQLite gradebook.db in the course root


@dataclass
class JobResult:
    student: str
    assignment: str
    score: float = 0.0
    max_score: float = 0.0
    failed_cells: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    seconds: float = 0.0


# --- plan ---------------------------------------------------------------------------------------------
def plan(course: Path, assignments: list[str] | None = None) -> list[tuple[str, str]]:
    """All ``(student, assignment)`` pairs submitted, sorted (so every run grades in the same order)."""
    jobs = []
    for student_dir in sorted((course / "submitted").iterdir() if (course / "submitted").is_dir() else []):
        for assignment_dir in sorted(p for p in student_dir.iterdir() if p.is_dir()):
            if assignments is None or assignment_dir.name in assignments:
                jobs.append((student_dir.name, assignment_dir.name))
    return jobs


def marker_path(course: Path, student: str, assignment: str) -> Path:
    return course / "autograded" / student / assignment / MARKER


def is_complete(course: Path, student: str, assignment: str) -> bool:
    return marker_path(course, student, assignment).is_file()


# --- one job ------------------------------------------------------------------------------------------
def _limit_memory(limit_bytes: int):
    def apply() -> None:  # runs in the child before exec
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
    return apply


def _nbgrader(options: Options, *args: str, timeout: float) -> subprocess.CompletedProcess:
    env = {**nbgrader_env(options.course, options.db_url), "PYTHONWARNINGS": "ignore", "MPLBACKEND": "Agg"}
    try:
        return subprocess.run([str(BIN / "nbgrader"), *args, f"--Execute.timeout={options.timeout}"],
                              cwd=options.course, env=env, capture_output=True, text=True, timeout=timeout,
                              preexec_fn=_limit_memory(options.memory_limit_mb * 2**20))
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(exc.cmd, 124, "", f"timed out after {timeout:.0f} s")


def _inspect_submission(course: Path, student: str, assignment: str, flags: list[str]) -> None:
    """Set aside notebooks that cannot be read; repair duplicated cell ids (keeping the original)."""
    for path in sorted((course / "submitted" / student / assignment).glob("*.ipynb")):
        try:
            repaired = nbformat.from_dict(json.loads(path.read_text()))
            changes = _dedupe_cell_ids(repaired)
            nbformat.validate(repaired)
        except Exception as exc:  # noqa: BLE001 - any unreadable notebook is set aside, never deleted
            path.rename(path.with_name(path.name + ".corrupt"))
            flags.append(f"{path.name}: unreadable notebook ({type(exc).__name__}), kept as {path.name}.corrupt")
            continue
        if changes:
            backup = path.with_name(path.name + ".orig")
            if not backup.exists():
                backup.write_text(path.read_text())
            nbformat.write(repaired, path)
            flags.append(f"{path.name}: repaired {changes} duplicated cell id(s); original kept as {backup.name}")


def _dedupe_cell_ids(nb: nbformat.NotebookNode) -> int:
    """Give every cell whose id repeats an earlier one a fresh id; return how many were changed."""
    seen: set[str] = set()
    changed = 0
    for index, cell in enumerate(nb.get("cells", [])):
        cell_id = cell.get("id")
        if cell_id is not None and cell_id in seen:
            cell["id"] = f"{cell_id}-{index}"[:64]
            changed += 1
        if cell_id is not None:
            seen.add(cell["id"])
    return changed


def grade_one(options: Options, student: str, assignment: str) -> JobResult:
    """Autograde and re-check one student's assignment; record the result as the job's completion mark."""
    from trainsys.autograde.integrity import recheck_notebooks

    start = time.perf_counter()
    result = JobResult(student, assignment)
    _inspect_submission(options.course, student, assignment, result.flags)
    sources = sorted((options.course / "solutions" / assignment).glob("*.ipynb"))
    wall = options.timeout * 4 * max(len(sources), 1) + 120
    run = _nbgrader(options, "autograde", assignment, "--student", student, "--force", "--create", timeout=wall)
    if run.returncode != 0:
        result.flags.append("nbgrader failed on the whole assignment; graded notebook by notebook")
        for source in sources:
            one = _nbgrader(options, "autograde", assignment, "--student", student, "--notebook", source.stem,
                            "--force", "--create", timeout=options.timeout * 4 + 120)
            if one.returncode != 0:
                result.flags.append(f"{source.name}: not gradable ({_last_line(one.stderr)})")
    result.flags += recheck_notebooks(options, student, assignment, sources)
    _fill_scores(options.course, result, options.db_url)
    result.seconds = round(time.perf_counter() - start, 2)
    marker = marker_path(options.course, student, assignment)
    marker.parent.mkdir(parents=True, exist_ok=True)
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(result), indent=1))
    tmp.replace(marker)  # atomic: a job is complete exactly when its mark exists
    return result


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no output"


def _fill_scores(course: Path, result: JobResult, db_url: str | None) -> None:
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(nbgrader_env(course, db_url)["NBGRADER_DB_URL"]) as gb:
        try:
            submission = gb.find_submission(result.assignment, result.student)
        except MissingEntry:
            result.flags.append("no submission recorded by nbgrader")
            return
        result.score, result.max_score = float(submission.score), float(submission.max_score)
        for notebook in submission.notebooks:
            for grade in notebook.grades:
                if grade.max_score > 0 and (grade.score or 0) < grade.max_score:
                    result.failed_cells.append(f"{notebook.name}:{grade.name}")


# --- the class ----------------------------------------------------------------------------------------
def grade_class(options: Options, assignments: list[str] | None = None, progress: bool = True) -> list[JobResult]:
    """Grade every submitted job not yet complete, ``options.jobs`` at a time; return all results."""
    jobs = plan(options.course, assignments)
    todo = [job for job in jobs if options.force or not is_complete(options.course, *job)]
    _prepare_gradebook(options, sorted({a for _, a in jobs}))
    with ThreadPoolExecutor(max_workers=options.jobs) as pool:
        futures = [pool.submit(grade_one, options, student, assignment) for student, assignment in todo]
        for _ in tqdm(as_completed(futures), total=len(futures), desc="autograding", unit="job",
                      disable=not progress):
            pass
        for future in futures:
            future.result()
    return [load_result(options.course, *job) for job in jobs]


def _prepare_gradebook(options: Options, assignments: list[str]) -> None:
    """Make sure the gradebook knows each assignment (its cells and points) before parallel grading."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(nbgrader_env(options.course, options.db_url)["NBGRADER_DB_URL"]) as gb:
        missing = []
        for assignment in assignments:
            try:
                gb.find_assignment(assignment)
            except MissingEntry:
                missing.append(assignment)
    for assignment in missing:
        run = _nbgrader(options, "generate_assignment", assignment, "--force", timeout=600)
        if run.returncode != 0:
            raise RuntimeError(f"nbgrader generate_assignment {assignment} failed: {_last_line(run.stderr)}")


def load_result(course: Path, student: str, assignment: str) -> JobResult:
    data = json.loads(marker_path(course, student, assignment).read_text())
    return JobResult(**data)
