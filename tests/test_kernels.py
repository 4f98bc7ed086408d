"""The suite's forked lesson kernels (tests/kernels.py) behave as fresh ``python3`` kernels where lessons look.

The server imports Matplotlib before any kernel exists (tests/kernel_preload.py), so these check what that could
break: the kernel's backend is the inline one ipykernel chooses, a figure drawn in a cell comes back as a PNG
output, and the kernel's environment is its own.
"""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from tests import kernels

CELLS = [
    "import os, sys\nimport matplotlib\nimport matplotlib.pyplot as plt\nprint(plt.get_backend())\n"
    "print(os.environ.get('MPLBACKEND'), os.environ.get('TRAINSYS_KERNEL_PROBE'))",
    "fig, ax = plt.subplots(figsize=(2, 1.5))\nax.plot([0, 1], [1, 0])\nax.set_title('$x_1$')",
    "print('tests.kernel_preload' in sys.modules, 'matplotlib.pyplot' in sys.modules)",
]


@pytest.fixture(scope="module")
def forked() -> str:
    if not kernels.active() and not kernels.start():
        pytest.fail("the kernel server did not start")
    return kernels.KERNEL


def _run(kernel: str, monkeypatch: pytest.MonkeyPatch) -> list[list[dict]]:
    monkeypatch.setenv("TRAINSYS_KERNEL_PROBE", "set by this test")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in CELLS])
    NotebookClient(nb, kernel_name=kernel, timeout=60).execute()
    return [cell.outputs for cell in nb.cells]


def test_a_forked_kernel_draws_inline_as_a_fresh_one(forked: str, monkeypatch: pytest.MonkeyPatch) -> None:
    first, figure, modules = _run(forked, monkeypatch)
    text = "".join(o.get("text", "") for o in first)
    assert text.split("\n")[:2] == [kernels.INLINE, f"{kernels.INLINE} set by this test"], text
    assert [o["output_type"] for o in figure if "image/png" in o.get("data", {})] == ["display_data"], figure
    assert "".join(o.get("text", "") for o in modules).split() == ["True", "True"]  # preloaded, then pyplot here
