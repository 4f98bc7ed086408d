"""Which case of which check enforces which clause of a lesson's contract.

Every lesson's Concepts section states the graded function's contract: a table of arguments and a
list of clauses, each a bullet that opens with a bold label — ``**Mutation — say it exactly.**``,
``**dtype:**``, ``**Failure modes:**``, ``**Metric that proves it correct:**``, and whatever else that
function promises (draw order, rounding, special values, ...). A clause is identified by its label,
normalised by :func:`clause_key` (``"mutation"``, ``"dtype"``, ``"failure modes"``, ...).

Each check module declares, in a module-level ``CLAUSES`` dict, for each graded function the clauses
it enforces and the labels of the cases that enforce them::

    CLAUSES = {
        "accumulate_gradients": {
            "mutation": ("acc is a dict: buffers updated in place", ...),
            ...
        },
    }

A case label in ``CLAUSES`` is a prefix of the label the check puts between brackets at the start of
its failure message (``[acc is a dict: buffers updated in place] ...``). The course's tests hold the
declarations to the lessons (every stated clause has cases, no declared clause is unstated) and to
the checks (a wrong answer that breaks the clause fails the check at one of the declared cases).
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
from pathlib import Path

__all__ = ["clause_key", "stated_clauses", "declared_clauses", "failing_case"]

_CONTRACT = re.compile(r"\*\*Contract\*\*[^`]*`([A-Za-z_][A-Za-z_0-9]*)")
_CLAUSE = re.compile(r"^[-*]\s+\*\*(.+?)\*\*", re.MULTILINE)


def clause_key(label: str) -> str:
    """A clause's name from its bold label: lower case, without backticks, cut before ``:``, `` —``,
    `` (`` or a final full stop (``"Mutation — say it exactly."`` → ``"mutation"``)."""
    text = label.replace("`", "").strip().lower()
    text = re.split(r":| —| \(", text, maxsplit=1)[0]
    return text.strip().rstrip(".").strip()


def stated_clauses(notebook: str | Path) -> tuple[str, list[str]]:
    """``(function, clause keys in order)`` of the contract in ``notebook``'s Concepts section.

    Raises ``ValueError`` naming the notebook when it has no Concepts section, no ``**Contract** of
    `function`...`` line, or a clause label stated twice.
    """
    path = Path(notebook)
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    concepts = [text for text in ("".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")
                if text.startswith("## Concepts")]
    if len(concepts) != 1:
        raise ValueError(f"notebook {path}: expected one markdown cell starting '## Concepts', found {len(concepts)}")
    text = concepts[0]
    head = _CONTRACT.search(text)
    if head is None:
        raise ValueError(f"notebook {path}: its Concepts section has no '**Contract** of `function`' line")
    keys = [clause_key(label) for label in _CLAUSE.findall(text[head.end():])]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise ValueError(f"notebook {path}: clause labels stated more than once: {repeated}")
    return head.group(1), keys


def declared_clauses() -> dict[str, dict[str, tuple[str, ...]]]:
    """Every check module's ``CLAUSES``, merged: function → clause key → case labels.

    Raises ``ValueError`` when two modules declare the same function, or a declaration is not a
    non-empty tuple of non-empty strings.
    """
    import trainsys.grading as grading

    merged: dict[str, dict[str, tuple[str, ...]]] = {}
    owner: dict[str, str] = {}
    for info in pkgutil.iter_modules(grading.__path__):
        if info.name.startswith("_") or info.name == "clauses":
            continue
        module = importlib.import_module(f"trainsys.grading.{info.name}")
        for function, clauses in getattr(module, "CLAUSES", {}).items():
            if function in merged:
                raise ValueError(f"CLAUSES[{function!r}] is declared by both {owner[function]} and {module.__name__}")
            for key, cases in clauses.items():
                if (not isinstance(cases, tuple) or not cases
                        or not all(isinstance(c, str) and c for c in cases)):
                    raise ValueError(f"{module.__name__}.CLAUSES[{function!r}][{key!r}]: expected a non-empty tuple "
                                     f"of case labels, got {cases!r}")
            merged[function] = dict(clauses)
            owner[function] = module.__name__
    return merged


def failing_case(message: str, labels: tuple[str, ...]) -> str | None:
    """The label in ``labels`` that a check's failure ``message`` names (``"[<label>..."``), or None."""
    for label in sorted(labels, key=len, reverse=True):
        if message.startswith(f"[{label}"):
            return label
    return None
