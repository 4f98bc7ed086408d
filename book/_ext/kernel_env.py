"""Sphinx extension: what the book's kernels see, and an execution cache that cannot go stale.

- Every explorer draws all its frames (``TRAINSYS_WIDGET_FRAMES=all``, read by ``trainsys.widgets``), so
  the static page switches figures without a kernel. The kernels myst-nb starts inherit this process's
  environment.
- jupyter-cache keys a notebook's outputs on its code cells only, so a change to the ``trainsys`` package
  (a formula, a figure) would leave the book showing outputs of the old code; so would Sphinx, which
  re-reads only the sources that changed. The cache remembers a hash of the package's sources; when it
  differs, the cache is emptied and every notebook is read (and executed) again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from trainsys.widgets import FRAMES_ENV

ROOT = Path(__file__).resolve().parents[2]
STAMP = "trainsys-sources.sha256"


def _package_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted((ROOT / "src" / "trainsys").rglob("*.py")):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def frames_for_kernels(app, config) -> None:
    os.environ[FRAMES_ENV] = "all"


def fresh_cache(app) -> None:
    """Runs after myst-nb has resolved the cache's path (``builder-inited``, default priority 500)."""
    cache = Path(app.env.mystnb_config.execution_cache_path)
    current = _package_hash()
    stamp = cache / STAMP
    app.trainsys_package_changed = not stamp.is_file() or stamp.read_text() != current
    if cache.exists() and app.trainsys_package_changed:
        shutil.rmtree(cache)
    cache.mkdir(parents=True, exist_ok=True)
    stamp.write_text(current)


def reread_notebooks(app, env, added, changed, removed) -> list[str]:
    """Every notebook is outdated when the package changed (Sphinx alone would keep their old pages)."""
    if not getattr(app, "trainsys_package_changed", False):
        return []
    return sorted(name for name in env.found_docs if str(env.doc2path(name)).endswith(".ipynb"))


def setup(app):
    app.connect("config-inited", frames_for_kernels)
    app.connect("builder-inited", fresh_cache, priority=900)
    app.connect("env-get-outdated", reread_notebooks)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
