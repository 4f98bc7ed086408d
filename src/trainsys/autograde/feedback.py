"""Feedback that tells a student which hidden check failed and why, without showing its code.

:class:`HideHiddenTests` runs inside ``nbgrader generate_feedback`` (configured in
``autograder/nbgrader_config.py``): in every cell holding a ``### BEGIN HIDDEN TESTS`` region the source
is replaced by a one-line notice, and an error's traceback — which would quote that source — is cut to
its last line, the check's own message (``AssertionError: [case] … differs from the reference …``).
"""

from __future__ import annotations

import re

from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS")
NOTICE = "# Hidden tests: the code is not shown. Its result is below."


class HideHiddenTests(Preprocessor):
    """Remove hidden-test source (and tracebacks quoting it) from notebooks before they become feedback."""

    enabled = Bool(True, help="nbconvert runs only enabled preprocessors; this one is always wanted").tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code" or not HIDDEN.search(cell.source):
            return cell, resources
        cell.source = NOTICE
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                output["traceback"] = [f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"]
        return cell, resources
