"""Where each wrong answer of a function fails its check: ``python -m tests.answers.clauses._survey <function> ...``.

A tool for writing ``WITNESSES``: it prints, per developer or blind wrong answer, the case label that rejects it.
"""

from __future__ import annotations

import sys

from tests.answers import _written, check


def survey(function: str) -> None:
    print(f"== {function}")
    for answer in _written().values():
        if answer.function != function or answer.verdict != "wrong":
            continue
        outcome = check(answer)
        message = outcome.message
        where = "PASSED" if outcome.passed else message[: message.find("]") + 1] if message.startswith("[") \
            else message[:80]
        print(f"  {answer.module.rsplit('.', 1)[1]:<22} {answer.description[:90]!r:<94} -> {where}")


if __name__ == "__main__":
    for name in sys.argv[1:]:
        survey(name)
