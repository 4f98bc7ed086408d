"""Grading a class: nbgrader autograde per student in parallel, points decided out of the student's reach.

For each ``(student, assignment)`` under ``<course>/submitted``:

1. **Check the grader** (:mod:`trainsys.autograde.integrity`): the package, the nbgrader configuration
   and site-packages must be as they were when the run started, else the run stops.
2. **Stage** the submission (:mod:`trainsys.autograde.intake`): only the assignment's notebooks, read as
   regular files inside the student's own folder (no link, FIFO or device is followed or opened), up to a
   size cap, upgraded to nbformat 4.5, their duplicated ids repaired, are copied to a private folder
   (``.grading/intake/<job>/``); a refused or unreadable notebook is replaced by the release with a notice
   (0 points, and the feedback says why). nbgrader and the re-check grade that copy: the student's folder
   is never changed, and nbgrader's ``--student`` glob can only ever see this one student.
3. **Start fresh**: what an earlier run wrote into the gradebook for this submission (scores, manual
   scores, extra credit) is removed.
4. **Autograde** with nbgrader, whose kernels run in the sandbox (:mod:`trainsys.autograde.sandbox`):
   nbgrader executes the notebook, records it and keeps the outputs for feedback. If it fails on the
   whole assignment (a kernel that died, say), it is run again one notebook at a time.
5. **Decide the points** in a trusted process (:mod:`trainsys.autograde.verify`) that runs the lesson's
   own visible tests and hidden check against the student's function, called in a sandboxed process
   through a data-only channel. Its verdict *is* the cell's score, whatever the kernel claimed;
   the verdict is added to the cell's outputs so that the feedback shows it.
6. Write ``autograded/<student>/<assignment>/.trainsys.json`` — the job's result and the mark that it is
   complete. A restarted run skips complete jobs and redoes the rest (``--force`` on nbgrader), so a kill
   loses no grade and duplicates none.
"""

from __future__ import annotations

import glob
import json
import queue
import shutil
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tqdm import tqdm

from trainsys.autograde import launch
from trainsys.autograde.decide import apply_verdicts, run_verifier
from trainsys.autograde.options import Options

MARKER = ".trainsys.json"
INTAKE = Path(".grading") / "intake"  # staged submissions, relative to the course root


@dataclass
class JobResult:
    student: str
    assignment: str
    score: float = 0.0
    max_score: float = 0.0
    failed_cells: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    seconds: float = 0.0
    sandbox: str = "sandboxed"  # or "unsandboxed" (--no-sandbox)


# --- plan ---------------------------------------------------------------------------------------------
def plan(course: Path, assignments: list[str] | None = None) -> list[tuple[str, str]]:
    """All ``(student, assignment)`` pairs to grade, sorted (so every run grades in the same order).

    Only valid ids of known assignments (:func:`trainsys.autograde.intake.survey`); what is skipped is
    listed by ``survey(...).skipped``.
    """
    from trainsys.autograde.intake import survey

    return survey(course, assignments).jobs


def marker_path(course: Path, student: str, assignment: str) -> Path:
    return course / "autograded" / student / assignment / MARKER


def is_complete(course: Path, student: str, assignment: str) -> bool:
    return marker_path(course, student, assignment).is_file()


# --- one job ------------------------------------------------------------------------------------------
def nbgrader_for_run(options: Options, command: str, *args: str, timeout: float,
                     slot: int = 0) -> subprocess.CompletedProcess:
    """``nbgrader <command> <args>`` for this run (:func:`trainsys.autograde.launch.nbgrader`): its cell
    time-out, its gradebook, the sandbox of grading ``slot`` for the kernels (``TRAINSYS_SANDBOX``), and the
    grader's memory cap (without the sandbox: the kernels' own, which they inherit).

    Options go in ``args`` as single ``--name=value`` words and positional arguments last, after ``--``
    (an id can then never be read as an option). A time-out is returned as exit status 124.
    """
    from trainsys.autograde.sandbox import ENV_VAR, SandboxConfig

    config = options.sandbox_config(slot)
    memory_mb = options.grader_memory_mb if config else options.memory_limit_mb
    try:
        return launch.nbgrader(options.course, command, f"--Execute.timeout={options.timeout}", *args, timeout=timeout,
                               db_url=options.db_url, extra_env={**launch.QUIET, ENV_VAR: SandboxConfig.encode(config)},
                               memory_limit=memory_mb * 2**20, soft_only=config is not None)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(exc.cmd, 124, "", f"timed out after {timeout:.0f} s")


def _clear_gradebook(options: Options, student: str, assignment: str) -> None:
    """Remove this submission's earlier grades (scores, manual scores, extra credit): grade it fresh."""
    from nbgrader.api import MissingEntry

    with launch.gradebook(options.course, options.db_url) as gb:
        try:
            gb.remove_submission(assignment, student)
        except MissingEntry:
            pass


def grade_one(options: Options, student: str, assignment: str, slot: int = 0) -> JobResult:
    """Autograde one student's assignment and decide its points; record the result as the completion mark."""

    from trainsys.autograde.intake import check_id, stage

    for value, kind in ((student, "student"), (assignment, "assignment")):
        if (why := check_id(value, kind)) is not None:
            raise ValueError(f"grade_one: {why}")
    start = time.perf_counter()
    result = JobResult(student, assignment, sandbox="sandboxed" if options.sandbox else "unsandboxed")
    folder = INTAKE / uuid.uuid4().hex  # this job's own submitted/ folder, holding this one student
    staged = options.course / folder / student / assignment
    try:
        intake = stage(options.course, student, assignment, staged)
        result.flags += intake.flags
        _clear_gradebook(options, student, assignment)
        sources = sorted((options.course / "solutions" / assignment).glob("*.ipynb"))
        wall = options.timeout * 4 * max(len(sources), 1) + 120
        # A refused notebook is graded as its stand-in, the release, and each of its test cells fails (the verdicts
        # below): where every notebook was refused nothing needs running, so nbgrader records it without a kernel.
        unrun = ("--Execute.enabled=False",) if sources and {s.name for s in sources} <= set(intake.refused) else ()
        common = (f"--CourseDirectory.submitted_directory={folder}", f"--student={glob.escape(student)}", "--force",
                  "--create", *unrun)
        run = nbgrader_for_run(options, "autograde", *common, "--", assignment, timeout=wall, slot=slot)
        if run.returncode != 0 and len(sources) == 1:  # that run was the notebook's own: no second try
            result.flags.append(f"{sources[0].name}: not gradable ({last_line(run.stderr)})")
        elif run.returncode != 0:
            result.flags.append("nbgrader failed on the whole assignment; graded notebook by notebook")
            for source in sources:
                one = nbgrader_for_run(options, "autograde", *common, f"--notebook={glob.escape(source.stem)}",
                                       "--", assignment, timeout=options.timeout * 4 + 120, slot=slot)
                if one.returncode != 0:
                    result.flags.append(f"{source.name}: not gradable ({last_line(one.stderr)})")
        checked = [source for source in sources if source.name not in intake.refused]
        reply = run_verifier(options, student, assignment, checked, slot, submitted=staged) if checked else {}
        reply["verdicts"] = reply.get("verdicts", []) + _refused_verdicts(sources, intake.refused)
        result.flags += apply_verdicts(options, student, assignment, reply)
    finally:
        shutil.rmtree(options.course / folder, ignore_errors=True)
    _fill_scores(options.course, result, options.db_url)
    result.seconds = round(time.perf_counter() - start, 2)
    marker = marker_path(options.course, student, assignment)
    marker.parent.mkdir(parents=True, exist_ok=True)
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(result), indent=1))
    tmp.replace(marker)  # atomic: a job is complete exactly when its mark exists
    return result


def _refused_verdicts(sources: list[Path], refused: dict[str, str]) -> list[dict]:
    """Failed verdicts for the test cells of every refused notebook (its stand-in needs no re-check)."""
    from trainsys.autograde.verify import read_lesson

    verdicts = []
    for source in sources:
        lesson = read_lesson(source) if source.name in refused else None
        if lesson is not None:
            verdicts += [{"notebook": source.stem, "cell": cell, "status": "failed",
                          "message": f"not graded: the submitted notebook was refused ({refused[source.name]})"}
                         for cell in (lesson.visible_id, lesson.hidden_id)]
    return verdicts


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no output"


def _fill_scores(course: Path, result: JobResult, db_url: str | None) -> None:
    from nbgrader.api import MissingEntry

    with launch.gradebook(course, db_url) as gb:
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
    """Grade every submitted job not yet complete, ``options.jobs`` at a time; return all results.

    Each job runs in a grading slot (its sandbox user); before each job the grader's fingerprint is
    compared with the one taken at the start, and a change stops the run (:class:`GraderChanged`).
    """
    from trainsys.autograde.integrity import assert_unchanged, fingerprint

    jobs = plan(options.course, assignments)
    todo = [job for job in jobs if options.force or not is_complete(options.course, *job)]
    _prepare_gradebook(options, sorted({a for _, a in jobs}))
    baseline = fingerprint(options.course)
    slots: queue.Queue[int] = queue.Queue()
    for slot in range(options.jobs):
        slots.put(slot)

    def job(student: str, assignment: str) -> JobResult:
        slot = slots.get()
        try:
            assert_unchanged(baseline, options.course)
            return grade_one(options, student, assignment, slot)
        finally:
            slots.put(slot)

    with ThreadPoolExecutor(max_workers=options.jobs) as pool:
        futures = [pool.submit(job, student, assignment) for student, assignment in todo]
        try:
            for future in tqdm(as_completed(futures), total=len(futures), desc="autograding", unit="job",
                               disable=not progress):
                future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    assert_unchanged(baseline, options.course)
    return [load_result(options.course, *job) for job in jobs]


def _prepare_gradebook(options: Options, assignments: list[str]) -> None:
    """Make sure the gradebook knows each assignment (its cells and points) before parallel grading."""
    from nbgrader.api import MissingEntry

    with launch.gradebook(options.course, options.db_url) as gb:
        missing = []
        for assignment in assignments:
            try:
                gb.find_assignment(assignment)
            except MissingEntry:
                missing.append(assignment)
    for assignment in missing:
        run = nbgrader_for_run(options, "generate_assignment", "--force", "--", assignment, timeout=600)
        if run.returncode != 0:
            raise RuntimeError(f"nbgrader generate_assignment {assignment} failed: {last_line(run.stderr)}")


def load_result(course: Path, student: str, assignment: str) -> JobResult:
    data = json.loads(marker_path(course, student, assignment).read_text())
    known = JobResult.__dataclass_fields__
    return JobResult(**{k: v for k, v in data.items() if k in known})
