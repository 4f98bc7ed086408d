"""Each lesson notebook runs once per session.

When a selected test builds the book (its ``built_book`` fixture), nbval leaves out the lessons that build
executes (``EXECUTED`` in tests/test_book.py): the build runs every cell of them and fails on any error, which
is what ``--nbval-lax`` checks. The cells left out are counted as deselected. Without a book test in the session
(``pytest solutions``, ``pytest -m m1p2``) nbval runs every lesson. Registered by ``tests/conftest.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

BOOK_FIXTURE = "built_book"


@pytest.hookimpl(trylast=True)  # after -m and -k have chosen the session's tests
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any(BOOK_FIXTURE in getattr(item, "fixturenames", ()) for item in items):
        return
    from tests.test_book import EXECUTED, ROOT

    executed = {ROOT / path for path in EXECUTED}
    dropped = [item for item in items if Path(str(item.fspath)) in executed]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = set(dropped)
        items[:] = [item for item in items if item not in gone]
