"""Executing notebooks without the widget-reply stall.

Measured on the course's 2-core test machines: nbclient's async client now and then misses the wake-up for an
``execute_reply`` that has already arrived when a cell displays ipywidgets, and then sits idle for the
whole execution timeout before carrying on with complete outputs. Waiting for the reply in short
slices (0.2 s) instead of one long poll removed the stall (0 in 128 runs vs about 5 in 108).

:class:`SlicedPollNotebookClient` is ``nbclient.NotebookClient`` with that one change; the book build
uses it through :func:`install` (``book/_ext/sliced_poll.py``), and nbgrader's autograder through
:class:`trainsys.autograde.execute.SlicedPollExecute`, which adds the grading command's choices (sandboxed
kernels, hidden tests withheld, bounded outputs). This module only executes: it decides nothing about grades.
"""

from __future__ import annotations

import asyncio
import typing as t
from queue import Empty
from time import monotonic

from nbclient import NotebookClient
from nbclient.client import timestamp
from nbclient.exceptions import CellTimeoutError
from nbclient.util import ensure_async
from nbformat import NotebookNode

POLL_SLICE_SECONDS = 0.2


async def _sliced_poll_for_reply(
    self: NotebookClient,
    msg_id: str,
    cell: NotebookNode,
    timeout: int | None,
    task_poll_output_msg: asyncio.Future[t.Any],
    task_poll_kernel_alive: asyncio.Future[t.Any],
) -> dict[str, t.Any]:
    """``NotebookClient._async_poll_for_reply`` with the shell channel read in short slices.

    Timeouts behave as in nbclient: at the deadline the kernel is checked, then interrupted (and the
    interrupted cell's own reply awaited) or the cell fails with ``CellTimeoutError``.
    """
    assert self.kc is not None
    deadline = None if timeout is None else monotonic() + timeout
    while True:
        if deadline is not None and monotonic() >= deadline:
            task_poll_kernel_alive.cancel()
            await self._async_check_alive()
            msg = await self._async_handle_timeout(timeout, cell)  # type: ignore[arg-type]
            # after an interrupt, wait (boundedly: a kernel may ignore SIGINT) for the cell's own reply
            deadline = None if msg is not None else monotonic() + max(float(timeout or 0), 10.0)
            if msg is None and getattr(self, "_interrupted_once", None) == msg_id:
                raise CellTimeoutError.error_from_timeout_and_cell(
                    "the kernel ignored the interrupt", timeout, cell)  # type: ignore[arg-type]
            self._interrupted_once = msg_id
            if msg is None:
                continue
            msg["parent_header"] = {"msg_id": msg_id}
        else:
            try:
                msg = await ensure_async(self.kc.shell_channel.get_msg(timeout=POLL_SLICE_SECONDS))
            except Empty:
                continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if self.record_timing:
            cell["metadata"]["execution"]["shell.execute_reply"] = timestamp(msg)
        try:
            await asyncio.wait_for(task_poll_output_msg, self.iopub_timeout)
        except (asyncio.TimeoutError, Empty):
            if self.raise_on_iopub_timeout:
                task_poll_kernel_alive.cancel()
                raise CellTimeoutError.error_from_timeout_and_cell(
                    "Timeout waiting for IOPub output", self.iopub_timeout, cell
                ) from None
            self.log.warning("Timeout waiting for IOPub output")
        task_poll_kernel_alive.cancel()
        return msg


class SlicedPollNotebookClient(NotebookClient):
    """``NotebookClient`` that cannot sleep through an execute reply (see the module docstring)."""

    _async_poll_for_reply = _sliced_poll_for_reply


def install() -> None:
    """Make every ``NotebookClient`` in this process poll in slices (used by the book build)."""
    NotebookClient._async_poll_for_reply = _sliced_poll_for_reply  # type: ignore[method-assign]
