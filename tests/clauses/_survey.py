"""Where each existing mutant of a function fails its check: ``python -m tests.clauses._survey <function> ...``.

A tool for writing ``WITNESSES``: it prints, per mutant (developers' and red team's), the case label
that rejects it, and the clauses the lesson states.
"""

from __future__ import annotations

import sys

import trainsys.grading as grading
from tests.clauses import _mutant_modules


def survey(function: str) -> None:
    check = getattr(grading, f"check_{function}")
    print(f"== {function}")
    for module in _mutant_modules():
        for description, wrong in getattr(module, "MUTANTS", {}).get(function, []):
            try:
                check(wrong)
                where = "PASSED"
            except AssertionError as failure:
                message = str(failure)
                where = message[: message.find("]") + 1] if message.startswith("[") else message[:80]
            print(f"  {module.__name__.split('.')[-1]:<22} {description[:90]!r:<94} -> {where}")


if __name__ == "__main__":
    for name in sys.argv[1:]:
        survey(name)
