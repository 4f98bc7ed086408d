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
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

import nh3
from bs4 import BeautifulSoup, CData, Comment, Declaration, ProcessingInstruction
from jinja2 import pass_context
from nbconvert.exporters import HTMLExporter
from nbconvert.filters.markdown import markdown2html as _render_markdown
from nbconvert.preprocessors import Preprocessor
from nbformat import NotebookNode
from nbformat.v4 import new_output
from traitlets import Bool, default

HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS")
NOTICE = "# Hidden tests: the code is not shown. Its result is below."


class HideHiddenTests(Preprocessor):
    """Remove hidden-test source (and tracebacks quoting it) from notebooks before they become feedback."""

    enabled = Bool(True, help="nbconvert runs only enabled preprocessors; this one is always wanted").tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code" or not HIDDEN.search(cell.source):
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

    def preprocess(self, nb, resources):
        # Widget state is written into the page by the classic template and drives a CDN-loaded widget
        # manager; the title is printed there too.
        for key in ("widgets", "title"):
            nb.metadata.pop(key, None)
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        cell_id = cell.get("id")
        if cell_id is not None and not (isinstance(cell_id, str) and SAFE_TOKEN.fullmatch(cell_id)):
            cell["id"] = f"cell-{index}"
        metadata = cell.setdefault("metadata", NotebookNode())
        if "tags" in metadata:
            tags = metadata["tags"] if isinstance(metadata["tags"], list) else []
            metadata["tags"] = [t for t in tags if isinstance(t, str) and SAFE_TOKEN.fullmatch(t)]
        self._nbgrader_metadata(metadata)
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
    def _nbgrader_metadata(metadata: NotebookNode) -> None:
        """The feedback template prints ``grade_id`` unescaped and formats ``score``/``points`` as numbers."""
        meta = metadata.get("nbgrader")
        if not isinstance(meta, dict):
            metadata.pop("nbgrader", None)
            return
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
        html, resources = super().from_notebook_node(nb, resources, **kw)
        return secure_page(html), resources
