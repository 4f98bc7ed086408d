"""nbgrader's executor for grading: the sliced reply poll (:mod:`trainsys.execution`), with the grading
command's choices made here rather than in the executing client.

:class:`SlicedPollExecute` is configured as nbgrader's ``Execute`` preprocessor (``autograder/nbgrader_config.py``).
Beyond executing it

- starts its kernels in the grading sandbox (:class:`trainsys.autograde.sandbox.SandboxKernelManager`) unless
  ``TRAINSYS_SANDBOX=off``;
- withholds the hidden tests from the kernel when the grading policy says so
  (:func:`trainsys.autograde.decide.kernel_withholds_hidden_tests`): their region is replaced by
  :data:`HIDDEN_NOTICE` while the cell runs (:func:`trainsys.notebook.strip_hidden`), and the notebook keeps the
  instructor's cell;
- bounds a flooding cell's outputs as they arrive (:func:`trainsys.autograde.feedback.bound_outputs`).
"""

from __future__ import annotations

import typing as t

from nbformat import NotebookNode
from nbgrader.preprocessors import Execute

from trainsys.execution import SlicedPollNotebookClient
from trainsys.notebook import has_hidden_region, is_code, strip_hidden

HIDDEN_NOTICE = "### (hidden tests: run by the trusted grader, not in this kernel)"


class SlicedPollExecute(Execute):
    """nbgrader's ``Execute`` preprocessor (configured as ``Execute``) with the sliced reply poll, whose
    kernels run in the grading sandbox (``trainsys.autograde.sandbox``) unless ``TRAINSYS_SANDBOX=off``,
    and which sends the kernel no hidden tests when :func:`~trainsys.autograde.decide.kernel_withholds_hidden_tests`.
    """

    _async_poll_for_reply = SlicedPollNotebookClient._async_poll_for_reply

    def __init__(self, *args: t.Any, **kwargs: t.Any) -> None:
        from trainsys.autograde.decide import kernel_withholds_hidden_tests
        from trainsys.autograde.sandbox import SandboxConfig, SandboxKernelManager

        if SandboxConfig.from_env() is not None:
            kwargs["kernel_manager_class"] = SandboxKernelManager
        super().__init__(*args, **kwargs)
        self.withhold_hidden_tests = kernel_withholds_hidden_tests()

    def output(self, outs: list[NotebookNode], msg: dict[str, t.Any], display_id: str | None,
               cell_index: int) -> NotebookNode | None:
        """nbclient's output handling, with a flooding cell's outputs bounded as they arrive (bytes per output
        and per cell, ``trainsys.autograde.feedback.bound_outputs``), so that prints never pile up here. A
        cell with display ids (updated by index) is left to ``TruncateOutputs`` after it ran."""
        from trainsys.autograde.feedback import MAX_TEXT_BYTES, bound_outputs, output_size

        out = super().output(outs, msg, display_id, cell_index)
        if out is not None and (len(outs) > 64 or output_size(out) > MAX_TEXT_BYTES) \
                and not any(cell_index in cells for cells in self._display_id_map.values()):
            outs[:] = bound_outputs(outs)
        return out

    def preprocess_cell(self, cell: NotebookNode, resources: t.Any, index: int) -> t.Any:
        source = cell.get("source", "")
        if not (self.withhold_hidden_tests and is_code(cell) and has_hidden_region(source)):
            return super().preprocess_cell(cell, resources, index)
        cell.source = strip_hidden(source, HIDDEN_NOTICE)
        try:
            return super().preprocess_cell(cell, resources, index)
        finally:
            cell.source = source  # the notebook keeps the instructor's cell (the feedback hides it)
