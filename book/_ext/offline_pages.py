"""Sphinx extension: pages that load nothing they cannot find, and log no errors, offline.

- Thebe (live code on a remote kernel) is off in this book, but sphinx-thebe still adds its loader and a
  ``const THEBE_JS_URL`` script, twice when the environment is read twice, which throws in the console:
  both are dropped from every page.
- The ipywidgets embed manager typesets widget output through MathJax 2's ``Hub``; a shim
  (``book/explorer/mathjax_hub_shim.js``) gives MathJax 3 one.
- The ipywidgets embed manager asks for its icon fonts at ``@jupyter-widgets/html-manager/dist/<file>``
  relative to the page; the fonts are copied next to every page that embeds widgets, so the request
  succeeds from a web server and from ``file://`` alike.
- An explorer with a JavaScript twin (``trainsys.widgets.TwinnedExplorer``, and the explorer pages) leaves a
  mount point ``<div data-trainsys-...-explorer>`` in the page; its script is added to exactly the pages
  that have one.
"""

from __future__ import annotations

import shutil
from pathlib import Path

FONT_DIR = Path(__file__).resolve().parents[1] / "vendor" / "html-manager"


def drop_thebe(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    scripts[:] = [  # in place: the list is the builder's, to which a page's own scripts are added
        js for js in scripts
        if "sphinx-thebe" not in str(getattr(js, "filename", js) or "")
        and "THEBE_JS_URL" not in str(getattr(js, "attributes", {}).get("body", ""))
    ]


TWINS = {"data-trainsys-memory-explorer": "memory_explorer.js",
         "data-trainsys-transformer-explorer": "transformer_explorer.js"}


def twin_scripts(app, pagename, templatename, context, doctree) -> None:
    body = context.get("body", "")
    for marker, script in TWINS.items():
        if marker in body:
            app.add_js_file(script)


def copy_widget_fonts(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    fonts = [p for p in FONT_DIR.glob("*") if p.suffix in {".woff", ".woff2", ".ttf", ".eot", ".svg"}]
    outdir = Path(app.outdir)
    folders = {page.parent for page in outdir.rglob("*.html") if "html-manager/embed-amd.js" in page.read_text()}
    for folder in folders:
        target = folder / "@jupyter-widgets" / "html-manager" / "dist"
        target.mkdir(parents=True, exist_ok=True)
        for font in fonts:
            shutil.copy2(font, target / font.name)


def setup(app):
    app.add_js_file("mathjax_hub_shim.js", priority=100)  # before MathJax (500) and the widget manager
    app.connect("html-page-context", drop_thebe)
    app.connect("html-page-context", twin_scripts)
    app.connect("build-finished", copy_widget_fonts)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
