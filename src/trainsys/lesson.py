"""What a lesson notebook's Checkpoint imports: the student's own function, or the package's while it is a stub.

Every Checkpoint runs the function the student wrote. Before it is written (the release's stub raises
``NotImplementedError``) the Checkpoint would stop at its first call, so :func:`own_or_reference` wraps
the student's function: it is called as is, and only if it raises ``NotImplementedError`` does the
wrapper say so in one line and answer with the package's reference instead, for that call and every
later one. Any other exception is the student's to see and is raised unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from trainsys._validation import describe


def own_or_reference(function: Callable[..., Any], reference: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` as the Checkpoint should call it: the student's, the package's ``reference`` while it is a stub.

    ``function`` and ``reference`` are callables with the same signature (``TypeError`` otherwise names
    the argument). The returned callable forwards every call to ``function``; the first time that raises
    ``NotImplementedError`` it prints one line naming both functions and from then on returns
    ``reference(*args, **kwargs)``. Arguments are passed through untouched, so a stub that raises before
    touching them leaves nothing half-done.
    """
    for name, value in (("function", function), ("reference", reference)):
        if not callable(value):
            raise TypeError(f"{name} must be a function, got {describe(value)}")
    name = getattr(function, "__name__", repr(function))
    where = f"{getattr(reference, '__module__', '?')}.{getattr(reference, '__qualname__', repr(reference))}"
    fell_back = False

    @functools.wraps(function)
    def checkpoint_call(*args: Any, **kwargs: Any) -> Any:
        nonlocal fell_back
        if not fell_back:
            try:
                return function(*args, **kwargs)
            except NotImplementedError:
                fell_back = True
                print(f"Your {name} raises NotImplementedError, so this Checkpoint uses the package's {where}: "
                      "implement yours and run the cell again to see your own function's results.")
        return reference(*args, **kwargs)

    return checkpoint_call
