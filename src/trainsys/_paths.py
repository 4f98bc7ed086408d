"""Where the course lives on disk: the repository (the nbgrader course directory) and this Python's scripts.

The bottom layer of the package's course tooling: :mod:`trainsys.syllabus` and :mod:`trainsys.course` both read
it, so neither imports the other for a path (``tests/test_import_graph.py`` holds the package free of cycles).
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The repository root of a source checkout (``src/trainsys/_paths.py`` → two folders up)."""
BIN = Path(sys.executable).parent
"""The folder of this Python's console scripts (``nbgrader``, ``jupyter``): the virtual environment's ``bin``."""
