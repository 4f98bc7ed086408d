"""``make progress`` on a student's copy: some lessons solved, one failing, one broken, one missing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat

from trainsys import progress
from trainsys.course import REPO, answer_sources

PART = "m1p1-mlp-core"


def _fill(path: Path, source: Path, answer: str | None = None) -> None:
    """Put the reference answer (or ``answer``) into the release notebook's answer cell."""
    nb = nbformat.read(path, as_version=4)
    answers = answer_sources(source)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answer if answer is not None else answers[grade_id]
    nbformat.write(nb, path)


def test_progress_reports_solved_failing_broken_and_missing(tmp_path: Path, capsys) -> None:
    notebooks = tmp_path / "notebooks"
    shutil.copytree(REPO / "notebooks" / PART, notebooks / PART)
    releases = sorted((notebooks / PART).glob("*.ipynb"))
    solved, failing, broken, missing = releases[0], releases[1], releases[2], releases[3]
    for path in (solved, releases[4]):
        _fill(path, REPO / "solutions" / PART / path.name)
    _fill(failing, REPO / "solutions" / PART / failing.name, "def linear_forward(*args):\n    return None\n"
          if "linear_forward" in failing.name else "def f():\n    pass\n")
    broken.write_text("{ not json")
    missing.unlink()

    output = tmp_path / "progress.json"
    assert progress.main(["--notebooks", str(notebooks), "--output", str(output), "--jobs", "2",
                          "--timeout", "120"]) == 0
    printed = capsys.readouterr().out
    data = json.loads(output.read_text())
    by_name = {row["notebook"]: row for row in data["lessons"]}
    assert len(by_name) == 96 and data["xp_available"] == 480
    assert by_name[f"{PART}/{solved.name}"]["status"] == "complete"
    assert by_name[f"{PART}/{releases[4].name}"]["status"] == "complete"
    assert by_name[f"{PART}/{failing.name}"]["status"] == "failing"
    assert by_name[f"{PART}/{failing.name}"]["message"], "a failing lesson shows the first line of its failure"
    assert by_name[f"{PART}/{broken.name}"]["status"] == "broken"
    assert by_name[f"{PART}/{missing.name}"]["status"] == "missing"
    assert by_name[f"{PART}/{releases[5].name}"]["status"] == "not started"
    assert data["xp"] == 10
    assert "Module 1 — Memory-Constrained Trainer: 2/40 lessons, 10/200 XP" in printed
    assert "Part 1 — MLP forward and backward core: 2/10 lessons, 10/50 XP" in printed
    assert f"broken      {PART}/{broken.name}: cannot be read" in printed
