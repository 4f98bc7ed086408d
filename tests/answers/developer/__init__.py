"""Realistic wrong implementations ("common mistakes") of every graded function.

Each module maps a graded function's name to a list of ``(description, mutant)``. A mutant first
runs the reference (so it validates its input exactly as a careful student would), then returns the
result of the wrong mathematics. ``tests/test_answers.py`` proves the hidden checks reject every one
(the record format: ``tests/answers/__init__.py``).
"""
