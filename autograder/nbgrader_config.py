"""nbgrader configuration for the course.

Source notebooks (with solutions and hidden tests) live in ``solutions/<assignment>/``; the student
versions that ``nbgrader generate_assignment`` writes go to ``notebooks/<assignment>/``. The
gradebook is SQLite in the course root (``gradebook.db``) unless ``NBGRADER_DB_URL`` names another database (for a
class, e.g. ``postgresql://user@host/gradebook``).

nbgrader finds this file through ``JUPYTER_CONFIG_PATH=autograder`` (the Makefile sets it); the class
grading command, ``python -m trainsys.autograde``, does the same for every nbgrader it starts.
"""

import os
from pathlib import Path

c = get_config()  # noqa: F821 - provided by traitlets when nbgrader loads this file

ROOT = Path(__file__).resolve().parent.parent

c.CourseDirectory.root = os.environ.get("NBGRADER_COURSE_ROOT", str(ROOT))
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.course_id = "trainsys"
c.CourseDirectory.db_url = os.environ.get(
    "NBGRADER_DB_URL", f"sqlite:///{Path(c.CourseDirectory.root) / 'gradebook.db'}"
)

# Only notebooks are released: the package provides everything else a lesson imports.
c.CourseDirectory.include = ["*.ipynb"]

# A stuck submission (an infinite loop) costs its own cell, not the whole class.
c.Execute.timeout = 60
c.Execute.interrupt_on_timeout = True

# A locked test cell a student deleted is put back (and scored), not silently skipped.
c.OverwriteCells.add_missing_cells = True

# Stubs shown to students.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}


# Execute with short reply polls: a notebook that displays widgets must never sit idle for its whole
# timeout because nbclient missed a reply (measured; see trainsys.execution and trainsys.autograde.execute).
from nbconvert.preprocessors import ClearMetadataPreprocessor  # noqa: E402
from nbgrader.preprocessors import (  # noqa: E402
    AssignLatePenalties,
    CheckCellMetadata,
    IgnorePattern,
    LimitOutput,
    SaveAutoGrades,
)

from trainsys.autograde.feedback import TruncateOutputs  # noqa: E402
from trainsys.autograde.execute import SlicedPollExecute  # noqa: E402

# TruncateOutputs: the autograded notebook keeps at most a bounded number of bytes per output and per cell
# (LimitOutput counts lines: one 300 MB line passes it). A cell whose flood of output is still being read
# when iopub_timeout ends keeps what arrived instead of failing the whole notebook (measured: 100 MB of
# prints on a loaded 2-core machine); the points come from the trusted re-check either way.
c.Execute.raise_on_iopub_timeout = False
c.Autograde.autograde_preprocessors = [
    SlicedPollExecute,
    TruncateOutputs,
    IgnorePattern,
    ClearMetadataPreprocessor,
    LimitOutput,
    SaveAutoGrades,
    AssignLatePenalties,
    CheckCellMetadata,
]

# Feedback shows which hidden check failed and its message, never the hidden code, and is safe to open:
# student outputs and markdown are sanitized (nh3 allowlist; scripts and widgets dropped with a notice) and
# the page runs no script and loads nothing from elsewhere (no CDN MathJax; trainsys.autograde.feedback).
from nbgrader.preprocessors import GetGrades  # noqa: E402
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor  # noqa: E402

from trainsys.autograde.feedback import FeedbackExporter, HideHiddenTests, SanitizeOutputs  # noqa: E402

c.GenerateFeedback.preprocessors = [GetGrades, HideHiddenTests, SanitizeOutputs, CSSHTMLHeaderPreprocessor]
c.GenerateFeedback.exporter_class = FeedbackExporter
