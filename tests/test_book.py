"""The book builds with Sphinx warnings as errors and loads nothing from the internet."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
EXTERNAL = re.compile(r"""<(?:script|link|img|iframe)\b[^>]*?(?:src|href)=["'](?:https?:)?//[^"']+""", re.I)
CSS_URL = re.compile(r"""url\(\s*["']?(?:https?:)?//""", re.I)


@pytest.fixture(scope="module")
def built_book(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert (ROOT / "book/vendor/mathjax/tex-chtml.js").is_file(), "run `make vendor` first (make test does)"
    out = tmp_path_factory.mktemp("book")
    result = subprocess.run(
        [str(BIN / "jupyter-book"), "build", str(ROOT), "--path-output", str(out), "--warningiserror", "--keep-going"],
        cwd=ROOT, capture_output=True, text=True, timeout=1200,
    )
    assert result.returncode == 0, f"book build failed:\n{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
    return out / "_build" / "html"


@pytest.mark.slow
def test_book_has_every_lesson_without_hidden_tests(built_book: Path) -> None:
    lessons = sorted(ROOT.glob("solutions/*/*.ipynb"))
    for lesson in lessons:
        page = built_book / lesson.relative_to(ROOT).with_suffix(".html")
        assert page.is_file(), f"{page} was not built"
        html = page.read_text()
        assert "BEGIN HIDDEN TESTS" not in html and "trainsys.grading import" not in html, \
            f"{page.name} shows the hidden tests"
        assert "BEGIN SOLUTION" not in html
        assert "toggle" in html.lower(), f"{page.name}: the solution should sit behind a toggle"
        assert "visible tests passed" in html, f"{page.name}: the executed page lacks the visible tests' output"


@pytest.mark.slow
def test_book_loads_no_external_resources(built_book: Path) -> None:
    offenders = []
    for page in built_book.rglob("*.html"):
        offenders += [f"{page.relative_to(built_book)}: {m}" for m in EXTERNAL.findall(page.read_text())]
    for css in built_book.rglob("*.css"):
        if CSS_URL.search(css.read_text(errors="ignore")):
            offenders.append(str(css.relative_to(built_book)))
    assert not offenders, "\n".join(offenders[:20])
    assert (built_book / "_static" / "mathjax" / "tex-chtml.js").is_file()


# --- Checked as a reader would: the built book in headless Chromium ------------------------------------
CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = ROOT / "_build" / "screenshots"
READER_PAGES = {
    "intro": "book/intro.html",
    "explorer": "book/memory_explorer.html",
    "module1": "solutions/m1p1-mlp-core/07_linear_backward.html",
    "module1_widget": "solutions/m1p2-gradient-accumulation/14_grad_accumulation_step.html",
    "module2": "solutions/m2p1-model-forward-loss/05_cross_entropy_loss.html",
    "module3": "solutions/m3p2-client-partitioning/06_count_client_samples.html",
}


@pytest.fixture(scope="module")
def browser_page(built_book: Path):
    import functools
    import http.server
    import threading

    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).is_file(), "Debian's chromium is needed (make test installs it)"
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(built_book))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        yield page, f"http://127.0.0.1:{server.server_address[1]}", errors
        browser.close()
    server.shutdown()


def _open(browser_page, name: str):
    page, base, errors = browser_page
    errors.clear()
    page.goto(f"{base}/{READER_PAGES[name]}", wait_until="networkidle")
    page.wait_for_timeout(1500)  # MathJax typesets asynchronously
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
    return page, errors


@pytest.mark.slow
@pytest.mark.parametrize("name", ["intro", "module1", "module1_widget", "module2", "module3"])
def test_reader_sees_rendered_maths_figures_and_no_errors(browser_page, name: str) -> None:
    page, errors = _open(browser_page, name)
    text = page.inner_text("main")
    assert "$$" not in text, f"{name}: raw display maths left in the page"
    if name != "intro":
        assert page.locator("mjx-container").count() > 0, f"{name}: MathJax did not typeset"
        images = page.locator("main img")
        assert images.count() > 0, f"{name}: no figure"
        assert page.evaluate("Array.from(document.querySelectorAll('main img')).every(i => i.naturalWidth > 0)")
    if name == "module1_widget":
        assert page.locator(".jupyter-widgets, .widget-output, .widget-vbox").count() > 0, "the widget is not shown"
    assert not errors, f"{name}: console errors {errors}"


@pytest.mark.slow
def test_reader_moves_the_explorer_and_the_numbers_change(browser_page) -> None:
    page, errors = _open(browser_page, "explorer")
    total = page.locator('[data-quantity="total"]').first
    before = total.inner_text()
    workers = page.locator('input[data-control="num_workers"]').first
    workers.focus()
    page.keyboard.press("ArrowRight")  # 4 -> 8 workers
    page.wait_for_timeout(200)
    after = total.inner_text()
    assert before != after, f"the total stayed {before} after moving the workers slider"
    page.screenshot(path=str(SCREENSHOTS / "explorer_moved.png"), full_page=True)
    assert not errors, errors
