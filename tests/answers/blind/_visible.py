"""Run a release notebook's visible tests against a candidate function (for the red team's own triage).

``visible_passes(notebook, name, fn)`` executes the notebook's setup cell, binds ``name`` to ``fn`` and
executes the cell ``test_<name>_visible``; it returns ``(passed, first line of the failure)``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[3]


def _cells(notebook: Path) -> dict[str, str]:
    nb = nbformat.read(notebook, as_version=4)
    return {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells if c.cell_type == "code"}


def visible_passes(notebook: str | Path, name: str, fn: Callable) -> tuple[bool, str]:
    path = Path(notebook)
    path = path if path.is_absolute() else REPO / path
    cells = _cells(path)
    namespace: dict = {"__name__": "__main__"}
    try:
        exec(compile(cells["setup"], f"{path.name}:setup", "exec"), namespace)  # noqa: S102 - lesson code
        namespace[name] = fn
        exec(compile(cells[f"test_{name}_visible"], f"{path.name}:visible", "exec"), namespace)  # noqa: S102
    except BaseException as exc:  # noqa: BLE001 - any failure is a failed visible test
        return False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
    return True, ""
