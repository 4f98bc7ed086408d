"""The book's JavaScript memory explorer and trainsys.memtrain.memory give identical numbers.

node runs book/explorer/memory_explorer.js on a grid of configurations; Python computes the same grid
with :func:`trainsys.memtrain.memory.explore_memory`. Every number must be equal (same formulas, same
order of floating-point operations).
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from trainsys.memtrain.memory import explore_memory

ROOT = Path(__file__).resolve().parent.parent
GRID = [
    {"precision": p, "num_workers": N, "zero_stage": z, "num_micro_batches": M, "segment_size": s, "width": w,
     "depth": d, "batch": b}
    for p, N, z, M, s, w, d, b in itertools.product(
        ["fp32", "mixed"], [1, 3, 4, 64], [0, 1, 2, 3], [1, 2, 16], [None, 1, 3, 8], [256, 1000], [8, 16], [64, 1000])
    if (s is None or s <= d) and M <= -(-b // N) and N <= b
]


def test_the_grid_is_large() -> None:
    assert len(GRID) > 1000


@pytest.mark.skipif(shutil.which("node") is None, reason="node is needed to run the JavaScript")
def test_javascript_and_python_agree_on_every_configuration() -> None:
    script = ("const m = require(process.argv[1]); const grid = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
              "process.stdout.write(JSON.stringify(grid.map(c => m.exploreMemory(c))));")
    result = subprocess.run(["node", "-e", script, str(ROOT / "book/explorer/memory_explorer.js")],
                            input=json.dumps(GRID), capture_output=True, text=True, timeout=120, check=True)
    js = json.loads(result.stdout)
    mismatches = []
    for config, got in zip(GRID, js):
        want = explore_memory(config)
        for key, value in want.items():
            if got[key] != value:
                mismatches.append(f"{config} {key}: JavaScript {got[key]!r}, Python {value!r}")
    assert not mismatches, "\n".join(mismatches[:10])


@pytest.mark.skipif(shutil.which("node") is None, reason="node is needed to run the JavaScript")
def test_the_widget_and_its_twin_offer_the_same_controls() -> None:
    """Lesson 39's widget (JupyterLab) and the page's twin (the book) have the same controls, options, labels
    and starting values, so a reader of the book and a student in the lab explore the same space."""
    import ipywidgets

    from trainsys.widgets import memory_explorer

    script = "process.stdout.write(JSON.stringify(require(process.argv[1]).CONTROLS));"
    result = subprocess.run(["node", "-e", script, str(ROOT / "book/explorer/memory_explorer.js")],
                            capture_output=True, text=True, timeout=60, check=True)
    js = [(name, label, [("off" if o is None else o) for o in options], "off" if start is None else start)
          for name, label, options, start in json.loads(result.stdout)]
    box = memory_explorer()
    dropdowns = [w for row in box.children[0].children for w in row.children]
    assert all(isinstance(w, ipywidgets.Dropdown) for w in dropdowns)
    python = [(label, [int(o) if isinstance(o, str) and o.isdigit() else o for o in w.options],
               int(w.value) if isinstance(w.value, str) and w.value.isdigit() else w.value)
              for label, w in ((w.description, w) for w in dropdowns)]
    assert python == [(label, options, start) for _, label, options, start in js]
    assert "data-trainsys-memory-explorer" in box._repr_mimebundle_()["text/html"]
