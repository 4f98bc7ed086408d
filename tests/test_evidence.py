"""Evidence records (trainsys.evidence): what a record holds, how lessons and book pages show it, staleness."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from trainsys import evidence
from trainsys.evidence import (check_references, dataset_entry, figure, load_record, render_table, stale_includes,
                               write_record)

REPO = Path(__file__).resolve().parents[1]
TABLE = {"columns": ["E", "rounds"], "rows": [[1, 12.25], [5, None]], "formats": {"rounds": "{:.1f}"},
         "caption": "Rounds to 80%."}


def _write(tmp_path: Path, **overrides: object) -> dict:
    data = tmp_path / "data.bin"
    data.write_bytes(b"\x00\x01abc")
    kwargs = dict(datasets=[dataset_entry("toy", "1.0", [data], source="a test")], config={"lr": 0.1},
                  seeds=[0, 1, 2], figures={"rounds": TABLE, "target": 0.8}, wall_s=1.5, directory=tmp_path)
    kwargs.update(overrides)
    return write_record("toy-run", **kwargs)


def test_record_holds_dataset_hash_environment_and_figures(tmp_path: Path) -> None:
    written = _write(tmp_path)
    loaded = load_record("toy-run", tmp_path)
    assert loaded == json.loads(json.dumps(written))
    entry = loaded["datasets"][0]
    assert entry["files"][0]["sha256"] == hashlib.sha256(b"\x00\x01abc").hexdigest()
    assert entry["files"][0]["bytes"] == 5 and entry["source"] == "a test"
    env = loaded["environment"]
    assert {"python", "torch", "numpy"} <= set(env["packages"]) and env["packages"]["torch"].startswith("2.13")
    assert env["hardware"]["logical_cores"] >= 1 and len(env["hardware"]["load_average_1_5_15min"]) == 3
    assert len(env["git"]["commit"]) == 40 and isinstance(env["git"]["dirty"], bool)
    assert loaded["seeds"] == [0, 1, 2] and loaded["wall_s"] == 1.5
    assert figure(loaded, "target") == 0.8 and figure(loaded, "rounds.rows.0.1") == 12.25


def test_render_table_formats_cells_and_names_its_source(tmp_path: Path) -> None:
    record = _write(tmp_path)
    text = render_table(record, "rounds")
    assert "| E | rounds |" in text and "| 1 | 12.2 |" in text and "| 5 | — |" in text
    assert "record `toy-run`" in text and text.startswith("Rounds to 80%.")
    html = render_table(record, "rounds", fmt="html")
    assert "<td>12.2</td>" in html and "<caption>Rounds to 80%.</caption>" in html
    with pytest.raises(ValueError, match="not a table"):
        render_table(record, "target")


@pytest.mark.parametrize("overrides, match", [
    ({"figures": {}}, "figures must be a non-empty dict"),
    ({"figures": {"a.b": 1}}, "without dots"),
    ({"figures": {"t": {"columns": ["a"], "rows": [[1, 2]]}}}, "1 cells each"),
    ({"figures": {"x": float("nan")}}, "figures must be JSON-serialisable"),
    ({"wall_s": -1.0}, "wall_s must be"),
    ({"datasets": [{"name": "x"}]}, "datasets must be a list"),
])
def test_write_record_refuses_bad_input(tmp_path: Path, overrides: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _write(tmp_path, **overrides)


def test_missing_record_and_figure_are_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="make reproduce"):
        load_record("no-such-run", tmp_path)
    record = _write(tmp_path)
    with pytest.raises(KeyError, match="figures.rounds.nope"):
        figure(record, "rounds.nope")
    with pytest.raises(ValueError, match="name must match"):
        load_record("Bad Name", tmp_path)


def test_check_references_flags_a_figure_not_in_its_record(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _write(tmp_path)
    monkeypatch.setattr(evidence, "RECORDS_DIR", tmp_path)
    good = 'show_table("toy-run", "rounds")\n```{include} ../records/toy-run.rounds.md\n```'
    assert check_references(good, "page") == []
    bad = 'figure("toy-run", "speedup")  show_table("other-run", "x")'
    problems = check_references(bad, "page")
    assert len(problems) == 2 and "toy-run:speedup" in problems[0] and "other-run" in problems[1]


def test_book_includes_are_current() -> None:
    stale = stale_includes()
    assert not stale, f"book/records is stale for {stale}: run `python -m trainsys.evidence`"


def _texts() -> list[tuple[str, str]]:
    texts = [(str(p.relative_to(REPO)), p.read_text()) for p in (REPO / "book").rglob("*.md")
             if "node_modules" not in p.parts and "vendor" not in p.parts and "records" not in p.parts]
    for nb in sorted((REPO / "solutions").rglob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        texts.append((str(nb.relative_to(REPO)), "\n".join("".join(c["source"]) for c in cells)))
    return texts


def test_every_figure_shown_by_a_lesson_or_page_is_in_its_record() -> None:
    problems = [p for where, text in _texts() for p in check_references(text, where)]
    assert not problems, "\n".join(problems)


def test_reproduce_sections_resolve_by_name() -> None:
    from trainsys import reproduce
    for name in reproduce.SECTIONS:
        assert callable(reproduce.section(name)) and evidence.require_name(name) == name
    with pytest.raises(ValueError, match="section must be one of"):
        reproduce.section("no-such-section")
