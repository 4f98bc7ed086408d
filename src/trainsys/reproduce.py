r"""``make reproduce``: run the real-data experiments and write their evidence records (:mod:`trainsys.evidence`).

Sections run by name (``python -m trainsys.reproduce --section fedavg-fashion-mnist``; none named: all, in
order). Each section is a function ``(quick: bool, workers: int) -> dict`` that writes its record with
:func:`trainsys.evidence.write_record` and returns it; ``quick=True`` is the short version CI re-runs
(tests check it against the committed record, it must not overwrite it: a quick run writes nothing).

To add a section (e.g. ``"diloco-gpt"``, ``"memory-gpt"``), add one line to :data:`SECTIONS`:
``"name": "package.module:function"`` — the module is imported only when its section runs. After the
records, the book's generated tables (``book/records/*.md``) are rewritten from them.
"""

from __future__ import annotations

import argparse
import importlib
import os
import time
from collections.abc import Callable

SECTIONS: dict[str, str] = {
    "fedavg-fashion-mnist": "trainsys.fedavg.reproduce_real:fashion_mnist_section",
    "fedavg-shakespeare": "trainsys.fedavg.reproduce_real:shakespeare_section",
    "memory-gpt": "trainsys.memtrain.memory_grid:memory_gpt_section",
    "diloco-gpt": "trainsys.diloco.gpt_experiment:diloco_gpt_section",
}
"""Section name → ``"module:function"``; the record a section writes carries the section's name."""


def section(name: str) -> Callable[..., dict]:
    """The function of section ``name``; ``ValueError`` listing the sections when it is unknown."""
    if name not in SECTIONS:
        raise ValueError(f"section must be one of {sorted(SECTIONS)}, got {name!r}")
    module, function = SECTIONS[name].split(":")
    return getattr(importlib.import_module(module), function)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--section", action="append", choices=sorted(SECTIONS),
                        help="run only this section (repeatable); default: every section")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes for independent runs (default: 2, the course's machine)")
    parser.add_argument("--quick", action="store_true", help="the short CI version: runs, checks, writes nothing")
    args = parser.parse_args(argv)
    from trainsys.evidence import write_book_includes
    for name in args.section or list(SECTIONS):
        start = time.perf_counter()
        record = section(name)(quick=args.quick, workers=args.workers)
        print(f"[{name}] {time.perf_counter() - start:.0f} s; load average {os.getloadavg()}", flush=True)
        for key, value in record["figures"].items():
            if isinstance(value, dict) and "rows" in value:
                from trainsys.evidence import render_table
                print(render_table(record, key))
    if not args.quick:
        write_book_includes()


if __name__ == "__main__":
    main()
