"""Clause witnesses: per clause of each lesson's contract, wrong answers that break it (``WITNESSES``).

The format and its rules are in ``tests/answers/__init__.py``; a witness already written as a developer or blind
mutant is named with :func:`existing` rather than copied.
"""

from __future__ import annotations

from tests.answers import existing

__all__ = ["existing"]
