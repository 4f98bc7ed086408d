"""Issue 11's acceptance test: a hostile class, graded by the real command, costs only the attackers' points.

The class (tests/hostile_class.py) is graded ONCE by ``python -m trainsys.autograde`` (grades, export and
feedback) with a canary in its environment; the assertions below then check, one guarantee at a time,
that every student got exactly the expected points, that nothing secret reached a feedback page, that the
grader, the repository, site-packages and the classmates' files are as they were, that no process an
attack started is alive, and that the feedback pages run and load nothing. A student zeroed for tampering
in that run resubmits a correct answer and is regraded, with a classmate, in a copy of the graded course.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.hostile_class import (
    ASSIGNMENT,
    CANARIES,
    CANARY_CLASSMATE,
    CANARY_ENV,
    CANARY_ENV_NAME,
    HIDDEN,
    HIDDEN_CODE,
    PROC,
    PWNED,
    STEM,
    VISIBLE,
    WROTE,
    Student,
    copy_course,
    make_course,
    plant_gradebook_canary,
    plant_strays,
    resubmitter_first,
    site_packages,
    solution,
    students,
    submit_class,
    submit_student,
)
from trainsys.autograde.integrity import fingerprint
from trainsys.autograde.runner import load_result
from trainsys.autograde.launch import gradebook
from trainsys.course import BIN, REPO

pytestmark = pytest.mark.slow
ALLOWED_URL_PREFIXES = ("#", "data:image/png", "data:image/jpeg", "data:image/gif")
URL_ATTRIBUTES = ("href", "src", "xlink:href", "action", "formaction", "srcset", "poster", "background",
                  "data", "codebase", "cite", "longdesc", "usemap", "ping", "manifest")


# Runs a command and writes the largest resident set of any process of its tree (the grading command,
# nbgrader, the trusted re-check, the kernels) to the file named first.
PEAK_RSS = ("import resource, subprocess, sys; rc = subprocess.call(sys.argv[2:]); "
            "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); sys.exit(rc)")


def _grade(course: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    command = [str(BIN / "python"), "-c", PEAK_RSS, str(course / "peak_rss_kib"), str(BIN / "python"), "-m",
               "trainsys.autograde", "--course", str(course), "--jobs", "2", "--timeout", "5",
               "--memory-limit-mb", "4096", "--sandbox-memory-mb", "2560", *extra]
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    run = subprocess.run(command, env=full_env, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run


def _git_status() -> str:
    return subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=all"],
                          capture_output=True, text=True, check=True).stdout


def _site_fingerprint(course: Path) -> dict[str, str]:
    return {k: v for k, v in fingerprint(course).items() if k.startswith("site-packages")}


def _marked_processes() -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if PROC in cmdline:
                found.append(f"{entry.name}: {cmdline[:120]}")
    return found


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class Graded:
    course: Path
    roster: list[Student]
    stdout: str
    git_before: str
    git_after: str
    site_before: dict[str, str]
    site_after: dict[str, str]
    submitted_before: dict[str, str]
    alive_after: list[str]
    seconds: float
    strays: dict[str, str] = field(default_factory=dict)  # entries of submitted/ that must be skipped, and why


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> Graded:
    root = tmp_path_factory.mktemp("hostile")
    course = make_course(root / "course")
    plant_gradebook_canary(course)
    roster = [*students(), resubmitter_first()]  # the tamperer, zeroed here, resubmits in a later test
    submit_class(course, roster)
    strays = plant_strays(course)
    untouched = [s.name for s in roster if s.kind == "honest" and s.edit is None]
    submitted_before = {name: _digest(course / "submitted" / name / ASSIGNMENT / f"{STEM}.ipynb") for name in untouched}
    git_before, site_before = _git_status(), _site_fingerprint(course)
    start = time.perf_counter()
    run = _grade(course, env={CANARY_ENV_NAME: CANARY_ENV})
    seconds = time.perf_counter() - start
    deadline = time.monotonic() + 5  # processes of a sandbox that just closed may take a moment to be reaped
    while _marked_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    return Graded(course, roster, run.stdout + run.stderr, git_before, _git_status(), site_before,
                  _site_fingerprint(course), submitted_before, _marked_processes(), seconds, strays)


def _cell_scores(course: Path) -> dict[tuple[str, str], float]:
    scores = {}
    with gradebook(course) as gb:
        for submission in gb.assignment_submissions(ASSIGNMENT):
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    scores[(submission.student.id, grade.name)] = float(grade.score or 0)
    return scores


def _feedback_pages(course: Path) -> dict[str, str]:
    return {str(p.relative_to(course / "feedback")): p.read_text(errors="replace")
            for p in sorted((course / "feedback").rglob("*.html"))}


def _outputs_text(notebook: Path) -> str:
    nb = json.loads(notebook.read_text())
    return json.dumps([cell.get("outputs", []) for cell in nb["cells"] if cell.get("cell_type") == "code"])


# --- the class and its points ----------------------------------------------------------------------------
def test_the_class_covers_every_kind_of_attack(graded: Graded) -> None:
    kinds = {s.kind for s in graded.roster}
    assert kinds >= {"read", "rewrite", "classmates", "outlive", "channel", "scoring", "feedback", "honest"}
    attacks = [a for s in graded.roster if s.kind != "honest" for a in s.attacks]
    assert len(attacks) >= 30, len(attacks)
    assert sum(s.kind == "honest" for s in graded.roster) >= 4


def test_grading_completed_for_every_student(graded: Graded) -> None:
    assert "the grader changed" not in graded.stdout
    for student in graded.roster:
        result = load_result(graded.course, student.name, ASSIGNMENT)  # the completion mark, as written
        assert result.student == student.name and result.max_score == 5.0, (student.name, result)
    print(f"\nhostile class: {len(graded.roster)} students graded in {graded.seconds:.0f} s")


def test_every_student_gets_exactly_the_expected_points(graded: Graded) -> None:
    scores = _cell_scores(graded.course)
    wrong = []
    for student in graded.roster:
        got = (scores.get((student.name, VISIBLE), -1.0), scores.get((student.name, HIDDEN), -1.0))
        if got != student.expected:
            flags = " | ".join(load_result(graded.course, student.name, ASSIGNMENT).flags)
            wrong.append(f"{student.name} ({student.kind}): got {got}, expected {student.expected}; flags: {flags}")
    assert not wrong, "\n".join(wrong)


def test_attacks_are_flagged_for_the_instructor(graded: Graded) -> None:
    missing = []
    for student in graded.roster:
        flags = " | ".join(load_result(graded.course, student.name, ASSIGNMENT).flags)
        missing += [f"{student.name}: no flag containing {f!r} in {flags!r}" for f in student.flags if f not in flags]
    assert not missing, "\n".join(missing)


def test_no_submission_scores_more_than_the_lesson_is_worth(graded: Graded) -> None:
    with gradebook(graded.course) as gb:
        for submission in gb.assignment_submissions(ASSIGNMENT):
            assert submission.max_score == 5.0 and submission.score <= 5.0, submission.student.id
            names = {grade.name for notebook in submission.notebooks for grade in notebook.grades}
            assert names == {VISIBLE, HIDDEN}, (submission.student.id, names)
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    assert grade.manual_score is None and grade.extra_credit is None, submission.student.id
        assert len(gb.assignment_submissions(ASSIGNMENT)) == len(graded.roster)
        assert not [s.id for s in gb.students if WROTE in s.id or WROTE in (s.first_name or "")]


def test_summary_and_export_list_exactly_the_class(graded: Graded) -> None:
    with (graded.course / "reports" / "summary.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert sorted(row["student"] for row in rows) == sorted(s.name for s in graded.roster)
    assert all(row["sandbox"] == "sandboxed" for row in rows)
    with (graded.course / "reports" / "grades.csv").open() as handle:
        exported = {row["student_id"]: float(row["score"]) for row in csv.DictReader(handle)}
    expected = {s.name: sum(s.expected) for s in graded.roster}
    assert {k: v for k, v in exported.items() if k in expected} == expected


# --- 1. reading what is not theirs ------------------------------------------------------------------------
def test_no_canary_reaches_a_feedback_page(graded: Graded) -> None:
    leaks = []
    for page, html in _feedback_pages(graded.course).items():
        for canary in CANARIES:
            own = canary == CANARY_CLASSMATE and page.startswith("honest_solved/")  # its own answer cell
            if canary in html and not own:
                leaks.append(f"{page}: {canary}")
    assert not leaks, "\n".join(leaks)


def test_no_canary_reaches_any_output_of_any_student(graded: Graded) -> None:
    leaks = []
    for notebook in sorted((graded.course / "autograded").rglob("*.ipynb")):
        text = _outputs_text(notebook)
        leaks += [f"{notebook.relative_to(graded.course)}: {c}" for c in CANARIES if c in text]
    assert not leaks, "\n".join(leaks)


def test_no_hidden_test_code_reaches_a_feedback_page(graded: Graded) -> None:
    leaks = [f"{page}: {code}" for page, html in _feedback_pages(graded.course).items() for code in HIDDEN_CODE
             if code in html]
    assert not leaks, "\n".join(leaks)


def test_the_leak_attempts_ran_and_were_refused(graded: Graded) -> None:
    """The attacks did run in the kernel (their messages are in the outputs) and found nothing."""
    nb = json.loads((graded.course / "autograded" / "reader" / ASSIGNMENT / f"{STEM}.ipynb").read_text())
    lines = [line for cell in nb["cells"] for output in cell.get("outputs", []) if output.get("name") == "stdout"
             for line in "".join(output["text"]).splitlines() if line.startswith("[attack] ")]
    reads = [line for line in lines if line.startswith(f"[attack] read {graded.course}")]
    assert len(reads) >= 6 and all(": refused (" in line for line in reads), reads
    for attack in ("read the gradebook with sqlite3", "the grader's files through /proc/1/root",
                   "the grader's working folder through /proc/1/cwd", "the parent's environment"):
        assert any(line.startswith(f"[attack] {attack}: refused (") for line in lines), attack
    assert "[attack] search the file system for secrets: done []" in lines
    assert any(line.startswith("[attack] ran:") for line in lines), "the kernel hooks did not run"
    assert any(line.startswith("[attack] input history:") for line in lines), "the history cell did not run"


# --- 2. rewriting the grader ---------------------------------------------------------------------------------
def test_the_repository_is_unchanged(graded: Graded) -> None:
    before, after = set(graded.git_before.splitlines()), set(graded.git_after.splitlines())
    assert graded.git_after == graded.git_before, f"new: {sorted(after - before)}; gone: {sorted(before - after)}"


def test_site_packages_is_unchanged(graded: Graded) -> None:
    assert graded.site_after == graded.site_before
    site = Path(site_packages())
    assert not [p.name for p in site.iterdir() if p.name in ("zz_hostile.pth", "hostile_hook.py", "sitecustomize.py")]


def test_no_written_marker_anywhere_the_grader_reads(graded: Graded) -> None:
    targets = [*(REPO / "src" / "trainsys").rglob("*.py"), *(REPO / "autograder").iterdir()]
    targets += [p for p in graded.course.rglob("*") if p.is_file()]
    written = [str(p) for p in targets if p.is_file() and WROTE.encode() in p.read_bytes()]
    assert not written, written
    shadows = [str(folder / name) for folder in (graded.course, REPO)
               for name in ("tqdm.py", "numpy.py", "nbgrader.py", "sitecustomize.py") if (folder / name).exists()]
    assert not shadows, shadows


# --- 3. touching classmates ----------------------------------------------------------------------------------
def test_classmates_submissions_are_untouched(graded: Graded) -> None:
    for name, digest in graded.submitted_before.items():
        assert _digest(graded.course / "submitted" / name / ASSIGNMENT / f"{STEM}.ipynb") == digest, name


def test_completion_marks_and_autograded_notebooks_are_the_graders(graded: Graded) -> None:
    for student in graded.roster:
        mark = json.loads((graded.course / "autograded" / student.name / ASSIGNMENT / ".trainsys.json").read_text())
        assert mark["student"] == student.name
        notebook = graded.course / "autograded" / student.name / ASSIGNMENT / f"{STEM}.ipynb"
        if notebook.exists():  # absent only where nbgrader could not run the notebook (flagged)
            assert "Trusted grader:" in _outputs_text(notebook), student.name
        else:
            flags = " | ".join(load_result(graded.course, student.name, ASSIGNMENT).flags)
            assert "not gradable" in flags, student.name


def test_every_autograded_notebook_has_its_feedback(graded: Graded) -> None:
    for notebook in (graded.course / "autograded").rglob(f"{STEM}.ipynb"):
        student = notebook.relative_to(graded.course / "autograded").parts[0]
        assert (graded.course / "feedback" / student / ASSIGNMENT / f"{STEM}.html").is_file(), student


def test_a_student_who_reached_a_limit_reads_which_in_the_feedback(graded: Graded) -> None:
    """Six processes of 0.8 GB under the 2.5 GiB cap: the trusted verdict under each test cell names the limit."""
    from trainsys.autograde.sandbox import cgroup_caps_memory

    flags = " | ".join(load_result(graded.course, "memory_fan_out", ASSIGNMENT).flags)
    assert "memory limit (2.5 GiB for all its processes together)" in flags, flags
    page = graded.course / "feedback" / "memory_fan_out" / ASSIGNMENT / f"{STEM}.html"
    if cgroup_caps_memory() and page.is_file():  # the cgroup's OOM killer ended children, not the kernel
        html = page.read_text().replace("&#39;", "'").replace("&#x27;", "'")
        assert "memory limit (2.5 GiB for all its processes together)" in html
    else:  # the watchdog ends the whole sandbox, kernel included: no notebook to give feedback on
        assert "not gradable" in flags, flags


# --- 4. outliving the run -----------------------------------------------------------------------------------
def test_no_process_an_attack_started_is_alive(graded: Graded) -> None:
    assert not graded.alive_after, graded.alive_after


def test_the_process_attacks_ran(graded: Graded) -> None:
    outputs = _outputs_text(graded.course / "autograded" / "daemons" / ASSIGNMENT / f"{STEM}.ipynb")
    assert "[attack] 200 forked sleepers: done 200" in outputs


def test_no_process_of_the_grader_grew_past_1_5_gib(graded: Graded) -> None:
    """8 GB down a kernel's stdout and a 4 GiB blob down the re-check's channel reach no grader's memory."""
    peak_gib = int((graded.course / "peak_rss_kib").read_text()) / 2**20
    assert peak_gib < 1.5, f"a process of the grading run reached {peak_gib:.2f} GiB"


def test_no_crafted_pickle_ran_in_the_grader(graded: Graded) -> None:
    assert not [p for p in Path("/tmp").iterdir() if str(p).startswith(PWNED)]


def test_the_graders_disk_was_not_filled_through_the_socket_folder(graded: Graded) -> None:
    outputs = _outputs_text(graded.course / "autograded" / "bombs" / ASSIGNMENT / f"{STEM}.ipynb")
    socket_folder = "[attack] write 1 GiB into the kernel's socket folder (the grader's disk)"
    assert f"{socket_folder}: refused (PermissionError" in outputs
    assert re.search(r"\[attack\] write 1 GiB to /tmp: done \d+ MiB, then \[Errno 28\]", outputs), "/tmp is not capped"
    assert not [p for p in Path("/tmp").glob("tsk-*/fill-*")]


# --- 7. feedback pages ------------------------------------------------------------------------------------------
def _unsafe(html: str) -> list[str]:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    problems = [f"<{tag.name}>" for tag in soup.find_all(["script", "iframe", "frame", "object", "embed", "form",
                                                          "base", "foreignobject", "portal", "applet"])]
    problems += [f"<meta http-equiv={tag.get('http-equiv')}>" for tag in soup.find_all("meta") if tag.get("http-equiv")]
    for tag in soup.find_all(True):
        for name, value in tag.attrs.items():
            text = " ".join(value) if isinstance(value, list) else str(value)
            if name.lower().startswith("on"):
                problems.append(f"<{tag.name} {name}>")
            if name.lower() in URL_ATTRIBUTES and text.strip() and not text.strip().startswith(ALLOWED_URL_PREFIXES):
                problems.append(f"<{tag.name} {name}={text[:60]!r}>")
            if name.lower() == "style" and ("url(" in text.replace(" ", "").lower() or "@import" in text.lower()):
                problems.append(f"<{tag.name} style={text[:60]!r}>")
    for style in soup.find_all("style"):
        css = style.get_text().lower().replace(" ", "")
        if "@import" in css or [u for u in css.split("url(")[1:] if not u.lstrip("'\"").startswith("data:")]:
            problems.append("<style> loads from elsewhere")
    return problems


def test_feedback_pages_run_and_load_nothing(graded: Graded) -> None:
    pages = _feedback_pages(graded.course)
    assert any(page.startswith("xss/") for page in pages), "the xss student's page was not written"
    unsafe = {page: problems for page, html in pages.items() if (problems := _unsafe(html))}
    assert not unsafe, json.dumps(unsafe, indent=1)[:4000]


def test_no_remote_address_in_a_feedback_page(graded: Graded) -> None:
    for page, html in _feedback_pages(graded.course).items():
        from bs4 import BeautifulSoup

        values = [str(v) for tag in BeautifulSoup(html, "html.parser").find_all(True) for v in tag.attrs.values()]
        assert not [v for v in values if "evil.example" in v or "javascript:" in v.lower()], page


# --- 8. honest students ------------------------------------------------------------------------------------------
def test_a_zeroed_student_who_resubmits_a_correct_answer_gets_full_marks(graded: Graded, tmp_path: Path) -> None:
    """The tamperer's first grading is the class run's; its resubmission is graded with --force in a copy of the
    graded course (its gradebook and the tamperer's autograded folder: what a regrade in place would find)."""
    tamperer = resubmitter_first()
    classmate = next(s for s in graded.roster if s.name == "honest_solved")
    first = _cell_scores(graded.course)
    assert (first[(tamperer.name, VISIBLE)], first[(tamperer.name, HIDDEN)]) == (0.0, 0.0)
    course = copy_course(graded.course, tmp_path / "resubmit")
    shutil.copytree(graded.course / "autograded" / tamperer.name, course / "autograded" / tamperer.name)
    submit_student(course, classmate)

    corrected = Student(tamperer.name, "honest", solution(), (2.0, 3.0))
    submit_student(course, corrected)
    _grade(course, "--no-feedback", "--force")
    again = _cell_scores(course)
    assert (again[(tamperer.name, VISIBLE)], again[(tamperer.name, HIDDEN)]) == (2.0, 3.0)
    assert (again[(classmate.name, VISIBLE)], again[(classmate.name, HIDDEN)]) == classmate.expected
    assert not [f for f in load_result(course, tamperer.name, ASSIGNMENT).flags if "replaced" in f]


# --- 9. the submission folder is data (issue 23) -------------------------------------------------------------------
# (".." cannot be a folder's name: tests/test_intake.py checks the id pattern and the command line refuses it.)
def test_stray_entries_and_bad_ids_are_skipped_and_listed(graded: Graded) -> None:
    with (graded.course / "reports" / "intake.csv").open() as handle:
        listed = {row["path"]: row["reason"] for row in csv.DictReader(handle)}
    missing = {path: why for path, why in graded.strays.items() if not listed.get(f"submitted/{path}", "").startswith(why)}
    assert not missing, (missing, listed)
    for path in graded.strays:
        assert f"skipped submitted/{path}: " in graded.stdout, path
    student_folders = {p.name for p in (graded.course / "autograded").iterdir() if p.is_dir()}
    assert student_folders == {s.name for s in graded.roster}, student_folders ^ {s.name for s in graded.roster}


def test_refused_submissions_are_explained_on_the_students_page(graded: Graded) -> None:
    for student in graded.roster:
        if student.kind != "intake":
            continue
        page = graded.course / "feedback" / student.name / ASSIGNMENT / f"{STEM}.html"
        assert page.is_file(), student.name
        assert "Not graded: your submitted" in page.read_text(errors="replace"), student.name
        graded_nb = json.loads((graded.course / "autograded" / student.name / ASSIGNMENT / f"{STEM}.ipynb").read_text())
        ran = [c for c in graded_nb["cells"] if c["cell_type"] == "code" and c.get("execution_count") is not None]
        assert not ran, f"{student.name}: the stand-in of a refused notebook was run ({len(ran)} cells)"


def test_the_submission_folder_is_left_as_it_was(graded: Graded) -> None:
    import stat

    submitted = graded.course / "submitted"
    for name in ("link_classmate", "link_solutions", "link_outside", "link_urandom"):
        assert (submitted / name / ASSIGNMENT / f"{STEM}.ipynb").is_symlink(), name
    assert (submitted / "link_folder" / ASSIGNMENT).is_symlink()
    assert stat.S_ISFIFO((submitted / "fifo" / ASSIGNMENT / f"{STEM}.ipynb").lstat().st_mode)
    assert (submitted / "huge_notebook" / ASSIGNMENT / f"{STEM}.ipynb").stat().st_size == 200 * 2**20
    assert not [p for p in submitted.rglob("*") if p.name.endswith((".corrupt", ".orig"))]
    assert not [p for p in (graded.course / ".grading" / "intake").rglob("*")], "a staged submission was left"


def test_no_feedback_page_is_over_the_documented_size(graded: Graded) -> None:
    from trainsys.autograde.feedback import MAX_PAGE_BYTES

    sizes = {str(p.relative_to(graded.course)): p.stat().st_size for p in (graded.course / "feedback").rglob("*.html")}
    assert max(sizes.values()) <= MAX_PAGE_BYTES, sorted(sizes.items(), key=lambda kv: -kv[1])[:3]
    print(f"\nlargest feedback page: {max(sizes.values()) / 2**20:.2f} MiB (limit {MAX_PAGE_BYTES / 2**20:.0f} MiB)")


def test_floods_reach_the_page_cut_with_a_note(graded: Graded) -> None:
    for name, shown in (("prints_300_mb", "...................."), ("exception_100_mb", "ValueError")):
        page = (graded.course / "feedback" / name / ASSIGNMENT / f"{STEM}.html").read_text(errors="replace")
        assert "characters not shown" in page and shown in page, name
    autograded = graded.course / "autograded" / "prints_300_mb" / ASSIGNMENT / f"{STEM}.ipynb"
    assert autograded.stat().st_size < 2**20, f"the autograded notebook holds {autograded.stat().st_size} bytes"
