"""Sphinx extension: drop nbgrader's ``### BEGIN/END SOLUTION`` marker lines from the book's code.

The source notebooks keep the markers (nbgrader needs them to make the student release); a reader of
the book sees the solution code alone, folded behind its toggle.
"""

from __future__ import annotations

import re

from docutils import nodes

MARKER_LINE = re.compile(r"^[ \t]*### (?:BEGIN|END) SOLUTION[ \t]*(?:\n|$)", re.M)


def strip_solution_markers(app, doctree: nodes.document) -> None:
    for block in doctree.findall(nodes.literal_block):
        text = block.astext()
        if "### BEGIN SOLUTION" not in text and "### END SOLUTION" not in text:
            continue
        cleaned = MARKER_LINE.sub("", text)
        block.rawsource = cleaned
        block.children = [nodes.Text(cleaned)]


def setup(app):
    app.connect("doctree-read", strip_solution_markers)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
