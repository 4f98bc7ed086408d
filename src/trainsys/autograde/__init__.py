"""The instructor's side: grading a whole class with nbgrader, in parallel and safe from hostile code.

``python -m trainsys.autograde`` (``make grade``) runs :func:`trainsys.autograde.runner.grade_class`,
re-checks every answer out of the kernel's reach (:mod:`trainsys.autograde.verify`,
:mod:`trainsys.autograde.isolation`), exports grades and writes feedback without hidden-test code
(:mod:`trainsys.autograde.feedback`).
"""
