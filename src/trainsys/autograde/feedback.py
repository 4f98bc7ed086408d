"""Feedback pages: which hidden check failed and why, without its code, and safe to open in a browser.

``nbgrader generate_feedback`` turns each autograded notebook into an HTML page that the student and the
instructor open. Everything in that notebook except the instructor's own cells was written by the student,
so the page is built as if it were hostile (configured in ``autograder/nbgrader_config.py``):

* :class:`HideHiddenTests` — in every cell holding a ``### BEGIN HIDDEN TESTS`` region the source is
  replaced by a one-line notice, and an error's traceback — which would quote that source — is cut to its
  last line, the check's own message (``AssertionError: [case] … differs from the reference …``).
* :class:`SanitizeOutputs` — every output is reduced to what is safe to show: text, tracebacks, PNG/JPEG
  images, and HTML/SVG/Markdown cleaned by `nh3 <https://nh3.readthedocs.io>`_ (the Rust *ammonia*
  sanitizer) against an allowlist. JavaScript, widget views and unknown types are dropped with a one-line
  notice. Cell and output metadata the template prints (execution counts, tags, image sizes, file names,
  ``isolated`` iframes, grade ids, notebook widget state, markdown attachments) are normalised.
* :class:`FeedbackExporter` — the HTML exporter ``generate_feedback`` uses: it cleans the HTML that
  Markdown renders to (markdown cells, Markdown outputs, instructor comments) with the same allowlist, and
  passes the finished page through :func:`secure_page`, which removes every ``<script>`` (nbgrader's
  template loads MathJax from a CDN; math stays as its TeX source), every event handler, every link or
  source that leaves the page and every CSS ``url()``/``@import`` that is not inline data. The page works
  offline and runs no code at all.

Allowed URLs in student content: ``#fragment`` links, and ``data:image/png|jpeg|gif;base64`` image sources.

**Floods are bounded** (bytes, not lines; nbgrader's own ``LimitOutput`` counts lines):

* :class:`TruncateOutputs` runs in ``nbgrader autograde`` right after execution, so the autograded notebook
  on disk is already bounded: consecutive prints are merged, and each text output, error message and
  traceback keeps its first and last :data:`MAX_TEXT_BYTES` / 2 bytes with a note saying how much was cut;
  an image over :data:`MAX_IMAGE_BYTES` is replaced by a note; once a cell's outputs reach
  :data:`MAX_CELL_OUTPUT_BYTES` the rest is replaced by one note.
* :class:`SanitizeOutputs` applies the same limits again and keeps one feedback page within
  :data:`MAX_PAGE_CONTENT_BYTES` of student content, estimated as the page will hold it (text and sources
  at :data:`HTML_GROWTH` times their size, images at theirs): cell sources are cut to
  :data:`MAX_SOURCE_BYTES`, and past the budget, graded cells keep their place (so the scores still show)
  with notes for source and outputs and other cells are left out with one note. :class:`FeedbackExporter`
  measures the finished page and renders it again with a quarter of the budget while it is over
  :data:`MAX_PAGE_BYTES` (nbgrader's template alone is ~0.16 MB).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections import deque
from typing import Any

import nh3
from bs4 import BeautifulSoup, CData, Comment, Declaration, ProcessingInstruction
from jinja2 import pass_context
from nbconvert.exporters import HTMLExporter
from nbconvert.filters.markdown import markdown2html as _render_markdown
from nbconvert.preprocessors import Preprocessor
from nbformat import NotebookNode
from nbformat.v4 import new_output
from traitlets import Bool, Int, default

from trainsys.notebook import drop_nbgrader, has_hidden_region, has_nbgrader, nbgrader

NOTICE = "# Hidden tests: the code is not shown. Its result is below."


# --------------------------------------------------------------------------------------------------
# Floods
# --------------------------------------------------------------------------------------------------

#: One text shown to the student (a print's text, an error message, a traceback, an HTML or Markdown
#: output) keeps at most this many UTF-8 bytes: its first and last half.
MAX_TEXT_BYTES = 16 * 1024
#: One image output (base64 PNG/JPEG/SVG) at most; a larger one is replaced by a note.
MAX_IMAGE_BYTES = 1024 * 1024
#: All outputs of one cell at most (text at its size, images at theirs); the rest becomes one note.
MAX_CELL_OUTPUT_BYTES = 1024 * 1024 + 4 * MAX_TEXT_BYTES
#: One cell's source as shown on the feedback page (what was run is not changed).
MAX_SOURCE_BYTES = 64 * 1024
#: Student content of one feedback page, counted as the page holds it (see the module docstring).
MAX_PAGE_CONTENT_BYTES = 3 * 1024 * 1024
#: How much a text is taken to grow on the page (HTML escaping, syntax-highlighting spans, rendered Markdown).
#: An estimate: worst cases grow more (``"`` becomes ``&quot;``; Pygments wraps each token in a ``<span>``),
#: which is why :class:`FeedbackExporter` measures the finished page and renders it again with a quarter of
#: the budget while it is over :data:`MAX_PAGE_BYTES`.
HTML_GROWTH = 3
#: Per cell on the page beyond its content: nbgrader's template wraps each cell in ~1 kB of markup.
CELL_OVERHEAD_BYTES = 2048
#: The largest feedback page :class:`FeedbackExporter` writes (student content + nbgrader's template).
MAX_PAGE_BYTES = 4 * 1024 * 1024


def clip_text(text: str, limit: int = MAX_TEXT_BYTES) -> str:
    """``text`` if it fits in ``limit`` UTF-8 bytes, else its first and last ``limit // 2`` bytes around a
    note saying how many characters were cut."""
    if len(text) * 4 <= limit or (len(text) <= limit and len(text.encode("utf-8", "surrogatepass")) <= limit):
        return text
    return _joined(text, text, len(text), limit)


def _joined(start: str, end: str, total: int, limit: int) -> str:
    """The first ``limit // 2`` bytes of ``start`` and the last of ``end`` (the two ends of a text of
    ``total`` characters) around a note saying how many characters were cut."""
    half = limit // 2
    head = start[:half].encode("utf-8", "surrogatepass")[:half].decode("utf-8", "ignore")
    tail = end[-half:].encode("utf-8", "surrogatepass")[-half:].decode("utf-8", "ignore")
    cut = total - len(head) - len(tail)
    return (f"{head}\n[feedback] … {cut:,} characters not shown: an output shows at most its first and last "
            f"{half // 1024} KiB …\n{tail}")


def _text(value: Any) -> str:
    return "".join(str(v) for v in value) if isinstance(value, list) else value if isinstance(value, str) else ""


def output_size(output: dict) -> int:
    """The characters of an output's texts and images (bytes, for the ASCII of base64 and of most output)."""
    if output.get("output_type") == "stream":
        return len(_text(output.get("text", "")))
    if output.get("output_type") == "error":
        return len(str(output.get("evalue", ""))) + sum(len(str(line)) for line in output.get("traceback", []) or [])
    data = output.get("data", {})
    return sum(len(_text(v)) for v in data.values()) if isinstance(data, dict) else 0


def _note(text: str) -> NotebookNode:
    return new_output("stream", name="stdout", text=f"[feedback] {text}\n")


def clip_output(output: Any) -> NotebookNode | dict:
    """One output with each of its texts clipped (:func:`clip_text`) and any image over
    :data:`MAX_IMAGE_BYTES` replaced by a note; other fields as they were."""
    if not isinstance(output, dict):
        return output
    kind = output.get("output_type")
    if kind == "stream":
        output["text"] = clip_text(_text(output.get("text", "")))
    elif kind == "error":
        output["ename"] = clip_text(str(output.get("ename", "Error")), 256)
        output["evalue"] = clip_text(str(output.get("evalue", "")))
        traceback = output.get("traceback", [])
        lines = [str(line) for line in traceback] if isinstance(traceback, list) else []
        if sum(len(line) for line in lines) * 4 > MAX_TEXT_BYTES:
            output["traceback"] = clip_text("\n".join(lines)).split("\n")
    elif kind in ("display_data", "execute_result") and isinstance(output.get("data"), dict):
        data = output["data"]
        for mime in list(data):
            value = _text(data[mime])
            if mime.startswith("image/") and mime != "image/svg+xml":
                if len(value) > MAX_IMAGE_BYTES:
                    del data[mime]
                    data.setdefault("text/plain", f"[feedback] a {len(value) / 2**20:.1f} MB image, over the "
                                                  f"{MAX_IMAGE_BYTES // 2**20} MiB shown for one image")
            elif mime in ("image/svg+xml", "text/html") and len(value) > MAX_TEXT_BYTES * 4:
                del data[mime]  # cut markup is broken markup: the plain text (clipped) stands in
                data.setdefault("text/plain", f"[feedback] a {len(value) / 2**20:.1f} MB {mime} output, not shown")
            elif isinstance(data[mime], (str, list)):
                data[mime] = clip_text(value)
    return output


class _Ends:
    """The first and last :data:`MAX_TEXT_BYTES` characters of a long run of prints, kept as they arrive."""

    def __init__(self, text: str) -> None:
        self.head, self.tail, self.total = text[:MAX_TEXT_BYTES], deque(), len(text)
        self.tail_size = 0
        if len(text) > MAX_TEXT_BYTES:
            self._tail(text[MAX_TEXT_BYTES:])

    def _tail(self, text: str) -> None:
        self.tail.append(text[-MAX_TEXT_BYTES:])
        self.tail_size += len(self.tail[-1])
        while len(self.tail) > 1 and self.tail_size - len(self.tail[0]) >= MAX_TEXT_BYTES:
            self.tail_size -= len(self.tail.popleft())

    def add(self, text: str) -> None:
        self.total += len(text)
        room = MAX_TEXT_BYTES - len(self.head)
        if room > 0 and not self.tail:
            self.head += text[:room]
            text = text[room:]
        if text:
            self._tail(text)

    def text(self) -> str:
        tail = "".join(self.tail)
        if self.total == len(self.head) + len(tail):
            return clip_text(self.head + tail)
        return _joined(self.head, tail, self.total, MAX_TEXT_BYTES)


def bound_outputs(outputs: list, budget: int = MAX_CELL_OUTPUT_BYTES) -> list:
    """A cell's outputs within ``budget`` bytes: consecutive prints to the same stream merged, each output
    clipped (:func:`clip_output`), and once the budget is spent one note in place of the rest."""
    merged: list = []
    pieces: dict[int, _Ends] = {}  # index in merged of a stream output -> the ends of its merged text
    for output in outputs:
        if (isinstance(output, dict) and output.get("output_type") == "stream" and merged
                and id(merged[-1]) in pieces and merged[-1].get("name") == output.get("name")):
            pieces[id(merged[-1])].add(_text(output.get("text", "")))
            continue
        if isinstance(output, dict) and output.get("output_type") == "stream":
            pieces[id(output)] = _Ends(_text(output.get("text", "")))
        merged.append(output)
    for output in merged:
        if id(output) in pieces:
            output["text"] = pieces[id(output)].text()
    kept, used = [], 0
    for index, output in enumerate(merged):
        output = clip_output(output)
        size = output_size(output) if isinstance(output, dict) else 0
        if used + size > budget:
            kept.append(_note(f"{len(merged) - index} more output(s) not shown: a cell shows at most "
                              f"{budget // 1024} KiB of output"))
            break
        kept.append(output)
        used += size
    return kept


class TruncateOutputs(Preprocessor):
    """Bound every cell's outputs (:func:`bound_outputs`); in ``nbgrader autograde`` right after execution."""

    enabled = Bool(True, help="nbconvert runs only enabled preprocessors; this one is always wanted").tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.get("cell_type") == "code" and isinstance(cell.get("outputs"), list):
            cell["outputs"] = bound_outputs(cell["outputs"])
        return cell, resources


class HideHiddenTests(Preprocessor):
    """Remove hidden-test source (and tracebacks quoting it) from notebooks before they become feedback."""

    enabled = Bool(True, help="nbconvert runs only enabled preprocessors; this one is always wanted").tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code" or not has_hidden_region(cell.source):
            return cell, resources
        cell.source = NOTICE
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                output["traceback"] = [f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"]
        return cell, resources


# --------------------------------------------------------------------------------------------------
# The allowlists
# --------------------------------------------------------------------------------------------------

#: Formatting a feedback page needs: text, headings, lists, tables, code, images. No forms, media,
#: frames, image maps, or anything that runs or loads.
HTML_TAGS = frozenset(nh3.ALLOWED_TAGS - {"area", "map"} | {"tfoot"})

#: Removed together with everything inside them (their text would be noise or code).
DROPPED_WITH_CONTENT = frozenset({
    "script", "style", "iframe", "frame", "frameset", "object", "embed", "applet", "noscript", "noembed",
    "noframes", "template", "textarea", "select", "title", "xmp", "plaintext", "svg", "math", "portal",
})

HTML_ATTRIBUTES = {
    "*": {"class", "id", "title", "lang", "dir", "align", "style"},
    "a": {"href"},
    "img": {"src", "alt", "width", "height"},
    "table": {"border", "cellpadding", "cellspacing"},
    "td": {"colspan", "rowspan", "valign"},
    "th": {"colspan", "rowspan", "valign", "scope"},
    "col": {"span", "width"},
    "colgroup": {"span", "width"},
    "ol": {"start", "type", "reversed"},
    "li": {"value"},
    "time": {"datetime"},
    "details": {"open"},
}

#: CSS properties a ``style`` attribute may keep: colour, type, alignment, box edges. No position,
#: no backgrounds (they take images), no content, no transforms.
STYLE_PROPERTIES = frozenset({
    "color", "background-color", "font-family", "font-size", "font-style", "font-weight", "font-variant",
    "text-align", "text-decoration", "text-indent", "text-transform", "vertical-align", "white-space",
    "line-height", "letter-spacing", "word-spacing", "border", "border-collapse", "border-color",
    "border-style", "border-width", "border-top", "border-right", "border-bottom", "border-left",
    "border-spacing", "padding", "padding-top", "padding-right", "padding-bottom", "padding-left",
    "margin", "margin-top", "margin-right", "margin-bottom", "margin-left", "width", "height",
    "min-width", "max-width", "min-height", "max-height", "opacity", "fill", "fill-opacity", "fill-rule",
    "stroke", "stroke-width", "stroke-opacity", "stroke-linecap", "stroke-linejoin", "stroke-dasharray",
    "stroke-dashoffset", "stroke-miterlimit", "font", "text-anchor", "clip-rule", "visibility",
})

#: Presentational SVG (what plotting libraries write). No script, foreignObject, animation, image, link,
#: filter or pattern elements.
SVG_TAGS = frozenset({
    "svg", "g", "defs", "symbol", "use", "title", "desc", "path", "rect", "circle", "ellipse", "line",
    "polyline", "polygon", "text", "tspan", "clipPath", "clippath", "marker", "linearGradient",
    "lineargradient", "radialGradient", "radialgradient", "stop",
})
SVG_ATTRIBUTES = {"*": {
    "id", "class", "style", "x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "r", "rx", "ry", "dx", "dy",
    "fx", "fy", "width", "height", "d", "points", "transform", "viewBox", "preserveAspectRatio", "version",
    "fill", "fill-opacity", "fill-rule", "stroke", "stroke-width", "stroke-opacity", "stroke-linecap",
    "stroke-linejoin", "stroke-dasharray", "stroke-dashoffset", "stroke-miterlimit", "opacity",
    "clip-path", "clip-rule", "clipPathUnits", "font-family", "font-size", "font-style", "font-weight",
    "text-anchor", "dominant-baseline", "alignment-baseline", "baseline-shift", "rotate", "offset",
    "stop-color", "stop-opacity", "gradientUnits", "gradientTransform", "spreadMethod", "marker-start",
    "marker-mid", "marker-end", "markerWidth", "markerHeight", "markerUnits", "refX", "refY", "orient",
    "visibility", "display", "href", "xmlns", "textLength", "lengthAdjust",
}}
SVG_NAMESPACE = "http://www.w3.org/2000/svg"
XLINK_NAMESPACE = "http://www.w3.org/1999/xlink"

DATA_IMAGE = re.compile(r"data:image/(?:png|jpeg|gif);base64,[A-Za-z0-9+/=\s]*", re.IGNORECASE)
#: What a ``style`` value, or any attribute value, must not contain (checked without whitespace/controls,
#: lower-cased, after the parser has decoded entities): resource loads, script URLs, old IE script hooks,
#: and CSS escapes that could hide one of those.
UNSAFE_VALUE = re.compile(r"javascript:|vbscript:|livescript:|expression\(|@import|behavior:|-moz-binding|\\")
CSS_URL = re.compile(r"url\(", re.IGNORECASE)
LOCAL_CSS_URL = re.compile(r"url\(\s*['\"]?#[A-Za-z0-9_.:-]*['\"]?\s*\)", re.IGNORECASE)
FRAGMENT = re.compile(r"#[^\s<>\"'`\\]*")
#: Bootstrap classes of the page's own stylesheet that would pin student content over the page.
PINNED_CLASS = re.compile(r"affix|modal|fixed|sticky|navbar", re.IGNORECASE)
SAFE_TOKEN = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
CONTROLS = re.compile(r"[\x00-\x20\x7f]+")


def _squeezed(value: str) -> str:
    return CONTROLS.sub("", value).lower()


def _unsafe_css(value: str) -> bool:
    squeezed = _squeezed(value)
    if UNSAFE_VALUE.search(squeezed):
        return True
    # url(#id) (an SVG clip path or gradient in the same document) is the only url() allowed
    return bool(CSS_URL.search(LOCAL_CSS_URL.sub("", squeezed)))


def _attribute_filter(tag: str, attribute: str, value: str) -> str | None:
    """Last word on every attribute nh3 keeps: URLs may not leave the page, CSS may not load anything."""
    attribute = attribute.lower()
    if attribute.startswith("on"):
        return None
    if attribute == "src":
        return value.strip() if tag == "img" and DATA_IMAGE.fullmatch(value.strip()) else None
    if attribute == "href":
        return value.strip() if FRAGMENT.fullmatch(value.strip()) else None
    if _unsafe_css(value):
        return None
    if attribute == "class":
        tokens = [t for t in value.split() if SAFE_TOKEN.fullmatch(t) and not PINNED_CLASS.search(t)]
        return " ".join(tokens) or None
    if attribute == "xmlns":
        return SVG_NAMESPACE
    return value


_HTML_CLEANER = nh3.Cleaner(
    tags=set(HTML_TAGS),
    clean_content_tags=set(DROPPED_WITH_CONTENT),
    attributes={tag: set(names) for tag, names in HTML_ATTRIBUTES.items()},
    attribute_filter=_attribute_filter,
    strip_comments=True,
    link_rel=None,
    url_schemes={"data"},
    url_relative="pass_through",  # relative URLs reach _attribute_filter, which keeps only #fragments
    filter_style_properties=set(STYLE_PROPERTIES),
)

_SVG_CLEANER = nh3.Cleaner(
    tags=set(SVG_TAGS),
    clean_content_tags={"script", "style", "foreignObject", "foreignobject", "iframe", "object", "embed"},
    attributes={tag: set(names) for tag, names in SVG_ATTRIBUTES.items()},
    attribute_filter=_attribute_filter,
    strip_comments=True,
    link_rel=None,
    url_schemes={"data"},
    url_relative="pass_through",
    filter_style_properties=set(STYLE_PROPERTIES),
)


def sanitize_html(html: str) -> str:
    """``html`` (an output, or what Markdown rendered to) reduced to the feedback allowlist."""
    return _HTML_CLEANER.clean(str(html))


def sanitize_svg(svg: str) -> str:
    """A standalone SVG document reduced to presentational elements; ``""`` if no ``<svg>`` survives."""
    cleaned = _SVG_CLEANER.clean(re.sub(r"<\?xml[^>]*\?>|<!DOCTYPE[^>]*>", "", str(svg), flags=re.IGNORECASE))
    start = cleaned.find("<svg")
    if start < 0:
        return ""
    cleaned = cleaned[start:].replace("&nbsp;", "&#160;")  # the HTML serializer's one non-XML entity
    head_end = cleaned.find(">")
    head = cleaned[:head_end]
    if "xmlns=" not in head:
        head += f' xmlns="{SVG_NAMESPACE}"'
    if "xlink:" in cleaned and "xmlns:xlink" not in head:
        head += f' xmlns:xlink="{XLINK_NAMESPACE}"'
    return head + cleaned[head_end:]


# --------------------------------------------------------------------------------------------------
# The preprocessor
# --------------------------------------------------------------------------------------------------

#: Output types shown, and how. Anything else (JavaScript, widget views, PDFs, vendor types) is dropped.
SHOWN = ("text/plain", "text/html", "text/markdown", "text/latex", "image/png", "image/jpeg", "image/svg+xml")
IMAGE_METADATA = ("image/png", "image/jpeg", "image/svg+xml")
PLACEHOLDER_PNG = (  # 1x1 transparent PNG, standing in for a markdown attachment that is not a plain image
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
ATTACHMENT_REF = re.compile(r"attachment:([^\s)\"'<>]+)")
MIME_NAME = re.compile(r"[\w.+/-]{1,80}")


def _notice(kinds: list[str]) -> NotebookNode:
    names = ", ".join(sorted({k if MIME_NAME.fullmatch(k) else "?" for k in kinds}))[:200]
    return new_output("stream", name="stdout",
                      text=f"[feedback] Output not shown ({names}): feedback pages show text, images and cleaned HTML; "
                           "scripts and widgets do not run here.\n")


def _valid_base64(data: Any) -> str | None:
    if not isinstance(data, str):
        return None
    compact = re.sub(r"\s+", "", data)
    try:
        base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError):
        return None
    return compact


def _number(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value) if 0 < value < 100_000 else None


def _image_metadata(metadata: Any) -> dict:
    """Only what the template prints about an image, checked: a numeric size, ``unconfined``, alt text."""
    clean: dict = {}
    if not isinstance(metadata, dict):
        return clean
    for mime in IMAGE_METADATA:
        entry = metadata.get(mime)
        if not isinstance(entry, dict):
            continue
        kept = {k: n for k in ("width", "height") if (n := _number(entry.get(k))) is not None}
        if entry.get("unconfined") is True:
            kept["unconfined"] = True
        if isinstance(entry.get("alt"), str):
            kept["alt"] = entry["alt"][:500]
        if kept:
            clean[mime] = kept
    return clean


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class SanitizeOutputs(Preprocessor):
    """Make a student's autograded notebook safe to render as a feedback page (see the module docstring).

    Runs in ``GenerateFeedback.preprocessors`` after ``GetGrades``, before the page is rendered by
    :class:`FeedbackExporter` (which cleans rendered Markdown and the finished page).
    """

    enabled = Bool(True, help="nbconvert runs only enabled preprocessors; this one is always wanted").tag(config=True)
    page_budget = Int(MAX_PAGE_CONTENT_BYTES, help="student content of one page, bytes as the page holds it "
                                                   "(see the module docstring)").tag(config=True)

    def preprocess(self, nb, resources):
        # Widget state is written into the page by the classic template and drives a CDN-loaded widget
        # manager; the title is printed there too.
        for key in ("widgets", "title"):
            nb.metadata.pop(key, None)
        nb, resources = super().preprocess(nb, resources)
        nb.cells = self._within_budget(nb.cells)
        return nb, resources

    def _within_budget(self, cells: list) -> list:
        """The cells that fit :attr:`page_budget`; past it, graded cells keep their place with notes for
        source and outputs, and the others are left out (one note says how many)."""
        kept, used, left_out = [], 0, 0
        for cell in cells:
            source = cell.get("source", "") if isinstance(cell.get("source"), str) else ""
            cell["source"] = source = clip_text(source, MAX_SOURCE_BYTES)
            cost = CELL_OVERHEAD_BYTES + HTML_GROWTH * len(source)
            for output in cell.get("outputs", []):
                images = sum(len(v) for k, v in output.get("data", {}).items() if k in ("image/png", "image/jpeg"))
                cost += images + HTML_GROWTH * (output_size(output) - images)
            if used + cost <= self.page_budget:
                kept.append(cell)
                used += cost
                continue
            used = self.page_budget  # nothing after a cell that did not fit: the page reads in order
            if not has_nbgrader(cell):
                left_out += 1
                continue
            cell["source"] = "# [feedback] not shown: this page had reached its size limit"
            if cell.get("cell_type") == "code":
                cell["outputs"] = [_note("outputs not shown: this page had reached its size limit")]
            kept.append(cell)
        if left_out:
            note = NotebookNode(cell_type="markdown", metadata=NotebookNode(), id="feedback-size-limit",
                                source=f"*[feedback] {left_out} cell(s) not shown: a feedback page shows at most "
                                       f"{self.page_budget / 2**20:.1f} MB of a notebook.*")
            kept.append(note)
        return kept

    def preprocess_cell(self, cell, resources, index):
        cell_id = cell.get("id")
        if cell_id is not None and not (isinstance(cell_id, str) and SAFE_TOKEN.fullmatch(cell_id)):
            cell["id"] = f"cell-{index}"
        metadata = cell.setdefault("metadata", NotebookNode())
        if "tags" in metadata:
            tags = metadata["tags"] if isinstance(metadata["tags"], list) else []
            metadata["tags"] = [t for t in tags if isinstance(t, str) and SAFE_TOKEN.fullmatch(t)]
        self._nbgrader_metadata(cell)
        if cell.cell_type == "code":
            cell["execution_count"] = _count(cell.get("execution_count"))
            outputs = []
            for output in cell.get("outputs", []):
                outputs.extend(self.sanitize_output(output))
            cell["outputs"] = outputs
        elif cell.cell_type == "markdown":
            self._markdown_attachments(cell)
        elif cell.cell_type == "raw":
            # A raw cell would be pasted into the page as HTML: show its text as a code block instead.
            source = cell.source if isinstance(cell.source, str) else ""
            fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", source)), default=0))
            markdown = NotebookNode(cell_type="markdown", metadata=NotebookNode(), source=f"{fence}\n{source}\n{fence}")
            if "id" in cell:
                markdown["id"] = cell["id"]
            cell = markdown
        return cell, resources

    @staticmethod
    def _nbgrader_metadata(cell: NotebookNode) -> None:
        """The feedback template prints ``grade_id`` unescaped and formats ``score``/``points`` as numbers."""
        if not has_nbgrader(cell):
            drop_nbgrader(cell)
            return
        meta = nbgrader(cell)
        if "grade_id" in meta and not (isinstance(meta["grade_id"], str) and SAFE_TOKEN.fullmatch(meta["grade_id"])):
            meta["grade_id"] = "invalid-grade-id"
        for key in ("score", "points"):
            if key in meta and (isinstance(meta[key], bool) or not isinstance(meta[key], (int, float, type(None)))):
                meta[key] = 0
        if "comment" in meta and not isinstance(meta["comment"], (str, type(None))):
            meta["comment"] = None

    @staticmethod
    def _markdown_attachments(cell: NotebookNode) -> None:
        """Attachments become data: URLs in the page: keep PNG/JPEG/GIF only, and give every
        ``attachment:`` reference an entry (a missing one would abort the whole conversion)."""
        attachments = cell.get("attachments")
        kept: dict = {}
        if isinstance(attachments, dict):
            for name, bundle in attachments.items():
                if not isinstance(bundle, dict):
                    continue
                for mime in ("image/png", "image/jpeg", "image/gif"):
                    data = _valid_base64(bundle.get(mime))
                    if data is not None:
                        kept[name] = {mime: data}
                        break
        source = cell.source if isinstance(cell.source, str) else ""
        for name in ATTACHMENT_REF.findall(source):
            kept.setdefault(name, {"image/png": PLACEHOLDER_PNG})
        if kept or "attachments" in cell:
            cell["attachments"] = kept

    def sanitize_output(self, output: Any) -> list[NotebookNode]:
        """One output as zero or more safe outputs (a dropped active output leaves a notice)."""
        if not isinstance(output, dict):
            return [_notice(["unknown"])]
        output = clip_output(output)
        kind = output.get("output_type")
        if kind == "stream":
            text = output.get("text", "")
            name = output.get("name") if output.get("name") in ("stdout", "stderr") else "stdout"
            return [new_output("stream", name=name, text=text if isinstance(text, str) else "")]
        if kind == "error":
            traceback = output.get("traceback", [])
            return [new_output(
                "error",
                ename=str(output.get("ename", "Error")),
                evalue=str(output.get("evalue", "")),
                traceback=[str(line) for line in traceback] if isinstance(traceback, list) else [],
            )]
        if kind not in ("display_data", "execute_result"):
            return [_notice([str(kind)])]

        data = output.get("data", {}) if isinstance(output.get("data"), dict) else {}
        kept: dict[str, str] = {}
        dropped: list[str] = []
        emptied: list[str] = []
        for mime, value in data.items():
            if mime not in SHOWN or not isinstance(value, str):
                dropped.append(str(mime))
                continue
            if mime == "text/html":
                value = sanitize_html(value)
            elif mime == "text/markdown":
                mime, value = "text/html", sanitize_html(_render_markdown(value))
                if "text/html" in data:  # an HTML representation is already there
                    continue
            elif mime == "image/svg+xml":
                value = sanitize_svg(value)
            elif mime in ("image/png", "image/jpeg"):
                value = _valid_base64(value)
                if value is None:
                    dropped.append(mime)
                    continue
            if not value.strip() and mime != "text/plain":
                emptied.append(mime)  # nothing left once cleaned: let another form (plain text) show
                continue
            kept[mime] = value
        if not kept:
            dropped += emptied
        safe = []
        if kept:
            fields = {"data": kept, "metadata": _image_metadata(output.get("metadata"))}
            if kind == "execute_result":
                fields["execution_count"] = _count(output.get("execution_count"))
            safe.append(new_output(kind, **fields))
        if dropped:
            safe.append(_notice(dropped))
        return safe


# --------------------------------------------------------------------------------------------------
# The exporter and the finished page
# --------------------------------------------------------------------------------------------------

#: Elements no feedback page needs; whatever put them there, they go with their content.
PAGE_DROPPED = ["script", "iframe", "frame", "frameset", "object", "embed", "applet", "base", "link",
                "noscript", "template", "portal", "svg", "math", "form", "input", "button", "textarea",
                "select"]
URL_ATTRIBUTES = frozenset({
    "action", "formaction", "background", "poster", "ping", "lowsrc", "dynsrc", "longdesc", "codebase",
    "manifest", "data", "srcset", "imagesrcset", "usemap", "xlink:href", "cite", "srcdoc", "archive",
    "classid", "profile", "http-equiv", "content",
})
CSS_ANY_URL = re.compile(r"url\(\s*(['\"]?)(.*?)\1\s*\)", re.IGNORECASE | re.DOTALL)
CSS_IMPORT = re.compile(r"@import[^;]*;?", re.IGNORECASE)
CSS_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
PAGE_IMAGE = re.compile(r"data:image/(?:png|jpeg|gif|svg\+xml);base64,[A-Za-z0-9+/=\s]*", re.IGNORECASE)


def _inline_css(css: str) -> str:
    """The page's own stylesheets without comments or ``@import``, every non-data ``url()`` emptied
    (Bootstrap points at glyph fonts that are not next to a feedback page: nothing may be fetched)."""
    css = CSS_IMPORT.sub("", CSS_COMMENT.sub("", css))
    return CSS_ANY_URL.sub(lambda m: m.group(0) if _squeezed(m.group(2)).startswith("data:") else 'url("data:,")', css)


def secure_page(html: str) -> str:
    """The finished feedback page with nothing that runs and nothing that loads from elsewhere.

    Student content has already been cleaned with nh3; this pass covers the template itself (nbgrader's
    feedback template loads MathJax from a CDN) and anything a template variable let through.
    """
    soup = BeautifulSoup(html, features="html.parser")
    for node in soup.find_all(string=lambda s: isinstance(s, (Comment, CData, ProcessingInstruction, Declaration))):
        node.extract()
    for tag in soup.find_all(PAGE_DROPPED):
        if not tag.decomposed:
            tag.decompose()
    for tag in soup.find_all("meta"):
        if set(tag.attrs) - {"charset", "name", "content"} or tag.get("name", "viewport") != "viewport":
            tag.decompose()
    for tag in soup.find_all(True):
        for name in list(tag.attrs):
            value = tag.attrs[name]
            value = " ".join(value) if isinstance(value, list) else str(value)
            lname = name.lower()
            keep = True
            if lname.startswith("on") or (lname in URL_ATTRIBUTES and not (tag.name == "meta" and lname == "content")):
                keep = False
            elif lname == "href":
                keep = bool(FRAGMENT.fullmatch(value.strip()))
            elif lname == "src":
                keep = tag.name == "img" and bool(PAGE_IMAGE.fullmatch(value.strip()))
            elif _unsafe_css(value):
                keep = False
            if not keep:
                del tag.attrs[name]
    for style in soup.find_all("style"):
        style.string = _inline_css(style.get_text())
    return str(soup)


class FeedbackExporter(HTMLExporter):
    """nbgrader's feedback exporter (``HTMLExporter`` with the ``feedback`` template) made safe to open.

    Rendered Markdown is cleaned like any HTML output, and the finished page goes through
    :func:`secure_page`. The CDN URLs of the stock templates are emptied as well, so no template
    variant this exporter may be given can point outside the page.
    """

    @default("mathjax_url")
    def _no_mathjax(self):
        return ""

    @default("require_js_url")
    def _no_require(self):
        return ""

    @default("jquery_url")
    def _no_jquery(self):
        return ""

    @default("jupyter_widgets_base_url")
    def _no_widgets(self):
        return ""

    @default("mermaid_js_url")
    def _no_mermaid(self):
        return ""

    @default("mermaid_layout_elk_js_url")
    def _no_mermaid_elk(self):
        return ""

    @default("optimistic_validation")
    def _validate_once_sanitized(self):
        # validate the notebook after all preprocessors, when SanitizeOutputs has repaired what a hand-edited
        # submission may break (a string execution count, a cell id with quotes), not before
        return True

    @default("raw_mimetypes")
    def _no_raw_html(self):
        return []

    @pass_context
    def markdown2html(self, context, source):
        return sanitize_html(super().markdown2html(context, source))

    def from_notebook_node(self, nb, resources=None, **kw):
        """The secured page; rendered again with a quarter of the content budget while it is over
        :data:`MAX_PAGE_BYTES` (each rendering starts from ``nb`` itself: nbconvert copies it first)."""
        sanitizers = [p for p in getattr(self, "_preprocessors", []) if isinstance(p, SanitizeOutputs)]
        budgets = [p.page_budget for p in sanitizers]
        try:
            for _ in range(4):
                html, out = super().from_notebook_node(nb, dict(resources or {}), **kw)
                html = secure_page(html)
                if len(html.encode("utf-8", "surrogatepass")) <= MAX_PAGE_BYTES or not sanitizers:
                    break
                for sanitizer in sanitizers:
                    sanitizer.page_budget //= 4
        finally:
            for sanitizer, budget in zip(sanitizers, budgets):
                sanitizer.page_budget = budget
        if len(html.encode("utf-8", "surrogatepass")) > MAX_PAGE_BYTES:
            html = ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"></head><body><p>This feedback page was "
                    f"over {MAX_PAGE_BYTES // 2**20} MiB and is not shown; your instructor has the graded "
                    "notebook.</p></body></html>")
        return html, out
