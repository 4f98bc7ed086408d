"""Kernels for the lessons the suite runs (nbval, the book build) are forked from a warm process.

Every lesson notebook starts a kernel, and most of a kernel's start-up is importing: PyTorch and NumPy (about
1.5 s of CPU) and ipykernel. A pytest process that runs notebooks starts one fork server
(:class:`trainsys.autograde.forkserver.ForkServer`, not isolated, listening on a private Unix socket) that has
imported them, and registers a kernel, ``trainsys-forked``, whose command is ``tests/kernel_launch.py``: each
kernel is then a fork of that server running ``ipykernel_launcher`` in the notebook's folder and environment.
nbval uses it (``--nbval-kernel-name``, unless one is given); the book test maps the lessons' ``python3`` to it.

These kernels run the course's own notebooks. Students' code never runs in them: the grader's kernels are
started by nbgrader in the sandbox, from the ``python3`` kernel, which this does not change.
``TRAINSYS_FORKED_KERNELS=0`` turns it off (every kernel starts afresh).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from trainsys.autograde.forkserver import ForkServer, ServerGone

KERNEL = "trainsys-forked"
SWITCH = "TRAINSYS_FORKED_KERNELS"
SERVER = "TRAINSYS_KERNEL_FORKSERVER"  # read by tests/kernel_launch.py
PRELOAD = ("numpy", "torch", "ipykernel.kernelapp")
MATPLOTLIB = "tests.kernel_preload"  # Matplotlib without pyplot, fonts loaded: where the kernels' backend is ipykernel's
INLINE = "module://matplotlib_inline.backend_inline"  # the backend ipykernel gives a kernel whose MPLBACKEND is unset
LAUNCHER = Path(__file__).with_name("kernel_launch.py")

_state: dict[str, object] = {}


def kernel_spec() -> dict:
    """The kernel's ``kernel.json``."""
    return {"argv": [sys.executable, "-I", "-S", str(LAUNCHER), "-f", "{connection_file}"],
            "display_name": "Python 3 (forked for the test suite)", "language": "python",
            "metadata": {"debugger": False}}


def start() -> bool:
    """Start the server and register the kernel in this process's environment (its children inherit it)."""
    folder = Path(tempfile.mkdtemp(prefix="trainsys-kernels-"))
    spec = folder / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps(kernel_spec(), indent=1))
    preload = PRELOAD + ((MATPLOTLIB,) if os.environ.get("MPLBACKEND", INLINE) == INLINE else ())
    server = ForkServer(preload=preload, listen=str(folder / "server"), isolated=False)
    try:
        server.wait_ready()
    except ServerGone:
        server.close()
        shutil.rmtree(folder, ignore_errors=True)
        return False
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(folder), os.environ.get("JUPYTER_PATH")]))
    os.environ[SERVER] = str(folder / "server")
    _state.update(server=server, folder=folder)
    return True


def active() -> bool:
    """Whether this process started the server (its children's kernels named :data:`KERNEL` are forked)."""
    return "server" in _state


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the server where this process will run a lesson notebook: a collected notebook or the book test."""
    config = session.config
    controller = getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput")
    if config.option.collectonly or controller or os.environ.get(SWITCH) == "0" or active():
        return
    if not any(str(item.fspath).endswith((".ipynb", "test_book.py")) for item in session.items):
        return
    if not start():
        return
    if not getattr(config.option, "nbval_kernel_name", None) and not getattr(config.option, "nbval_current_env", False):
        config.option.nbval_kernel_name = KERNEL


def pytest_unconfigure(config: pytest.Config) -> None:
    server = _state.pop("server", None)
    if isinstance(server, ForkServer):
        server.close()
    folder = _state.pop("folder", None)
    if isinstance(folder, Path):
        shutil.rmtree(folder, ignore_errors=True)
