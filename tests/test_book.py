"""The book builds with Sphinx warnings as errors and loads nothing from the internet."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests import kernels

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
EXTERNAL = re.compile(r"""<(?:script|link|img|iframe)\b[^>]*?(?:src|href)=["'](?:https?:)?//[^"']+""", re.I)
CSS_URL = re.compile(r"""url\(\s*["']?(?:https?:)?//""", re.I)


# The pages the reader tests below open, executed in the test build. Every other lesson is built from its
# source without running it: nbval runs it in the same suite (`make test`), and `make book` runs all of them for
# the published book. nbval leaves these out when this build runs in the same session (tests/run_once.py): the
# build runs every cell and fails on any error, as --nbval-lax does. Executing all 96 twice was a third of the
# suite on 2 cores.
EXECUTED = {
    "solutions/m1p1-mlp-core/07_linear_backward.ipynb",
    "solutions/m1p2-gradient-accumulation/14_grad_accumulation_step.ipynb",
    "solutions/m1p3-activation-checkpointing/18_estimate_checkpointing_memory_savings.ipynb",
    "solutions/m1p4-mixed-precision/19_cast_to_half_precision.ipynb",
    "solutions/m1p4-mixed-precision/24_mixed_precision_step.ipynb",
    "solutions/m1p5-data-parallel/28_ring_all_reduce_mean.ipynb",
    "solutions/m1p7-memory-and-full-loop/39_compare_memory.ipynb",
    "solutions/m2p1-model-forward-loss/05_cross_entropy_loss.ipynb",
    "solutions/m2p7-evaluation-communication/30_communication_savings.ipynb",
    "solutions/m3p2-client-partitioning/06_count_client_samples.ipynb",
    "solutions/m3p6-experiments/25_rounds_to_target_vs_local_epochs.ipynb",
    "solutions/m3p6-experiments/26_accuracy_vs_client_fraction.ipynb",
}


@pytest.fixture(scope="module")
def built_book(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The book built as `make book` builds it (warnings are errors), with only :data:`EXECUTED` run."""
    assert (ROOT / "book/vendor/mathjax/tex-chtml.js").is_file(), "run `make vendor` first (make test does)"
    out = tmp_path_factory.mktemp("book")
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    skipped = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("solutions/*/*.ipynb")
                     if str(p.relative_to(ROOT)) not in EXECUTED)
    assert len(skipped) == 96 - len(EXECUTED), "EXECUTED names a notebook that is not a lesson"
    config["execute"].update(exclude_patterns=skipped, cache=str(out / "jupyter_cache"))
    # local extensions are found relative to the configuration file, which now lives elsewhere
    config["sphinx"]["local_extensions"] = {name: str(ROOT / path)
                                           for name, path in config["sphinx"]["local_extensions"].items()}
    if kernels.active():  # the lessons' python3 kernel forked from the session's warm process (tests/kernels.py)
        config["sphinx"]["config"]["nb_kernel_rgx_aliases"] = {"python3": kernels.KERNEL}
    (out / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    result = subprocess.run(
        [str(BIN / "jupyter-book"), "build", str(ROOT), "--config", str(out / "_config.yml"), "--path-output", str(out),
         "--warningiserror", "--keep-going"],
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
        if str(lesson.relative_to(ROOT)) in EXECUTED:
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


@pytest.mark.slow
def test_no_image_in_the_book_lacks_alt_text(built_book: Path) -> None:
    """Every ``<img>`` of the built pages says what it shows (``tests/test_alt_text.py``'s rule): none has an
    empty alt or a file name as alt, as all 99 had before the figures were described (issue 27)."""
    from tests.test_alt_text import alt_problem

    images = problems = 0
    for page in built_book.rglob("*.html"):
        for tag in re.findall(r"<img\b[^>]*>", page.read_text()):
            images += 1
            alt = re.search(r"""\balt=(["'])(.*?)\1""", tag, re.S)
            if (why := alt_problem(alt.group(2) if alt else None)) is not None:
                problems += 1
                print(f"{page.relative_to(built_book)}: {why}")
    assert images, "no image found in the built book"
    assert not problems, f"{problems} of {images} images lack alt text (listed above)"


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


# --- Every widget on every lesson page answers every control without a kernel ------------------------
WIDGET_PAGES = {
    "solutions/m1p2-gradient-accumulation/14_grad_accumulation_step.html": "accumulation_explorer",
    "solutions/m1p3-activation-checkpointing/18_estimate_checkpointing_memory_savings.html": "checkpointing_explorer",
    "solutions/m1p4-mixed-precision/19_cast_to_half_precision.html": "formats_explorer",
    "solutions/m1p4-mixed-precision/24_mixed_precision_step.html": "precision_explorer",
    "solutions/m1p5-data-parallel/28_ring_all_reduce_mean.html": None,
    "solutions/m2p7-evaluation-communication/30_communication_savings.html": None,
    "solutions/m3p6-experiments/25_rounds_to_target_vs_local_epochs.html": None,
    "solutions/m3p6-experiments/26_accuracy_vs_client_fraction.html": None,
}
"""Lesson pages whose explorer keeps a frame per control combination; where the explorer is cheap to rebuild
here (the name of its ``trainsys.widgets`` function), each frame shown is compared byte for byte with the
one this process draws."""

_FRAME = """async () => {
  const img = document.querySelector('main img[class*="tsx-frame-"]');
  if (!img) return null;
  const bytes = new Uint8Array(await (await fetch(img.src)).arrayBuffer());
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', bytes));
  return {frame: Array.from(img.classList).find(c => c.startsWith('tsx-frame-')),
          sha256: Array.from(digest).map(b => b.toString(16).padStart(2, '0')).join('')};
}"""
_POSITIONS = """() => Array.from(document.querySelectorAll('main .widget-hslider, main .widget-toggle-buttons')).map(c => {
  const handle = c.querySelector('.noUi-handle');
  if (handle) return Number(handle.getAttribute('aria-valuenow'));
  return Array.from(c.querySelectorAll('button')).findIndex(b => b.classList.contains('mod-active')); })"""
"""Where every control stands: a slider's position (a selection slider's index, an integer slider's value from
0), the pressed toggle's index — the frame the page must show is the one at these positions."""


def _kernel_frames(function: str) -> dict[str, str]:
    """``{frame class: sha256 of its PNG}`` as this process draws them."""
    import hashlib
    import os

    import ipywidgets

    import trainsys.widgets as w

    os.environ[w.FRAMES_ENV] = "all"
    try:
        box = getattr(w, function)()
    finally:
        del os.environ[w.FRAMES_ENV]

    def leaves(widget):
        return [widget] if isinstance(widget, ipywidgets.Image) else [x for c in widget.children for x in leaves(c)]

    return {next(c for c in image._dom_classes if c.startswith("tsx-frame-")): hashlib.sha256(image.value).hexdigest()
            for image in leaves(box.children[1])}


@pytest.mark.slow
@pytest.mark.parametrize("path", list(WIDGET_PAGES), ids=[p.rsplit("/", 1)[1][:-5] for p in WIDGET_PAGES])
def test_every_control_of_every_lesson_widget_changes_the_figure(browser_page, path: str) -> None:
    from trainsys.widgets import frame_class

    page, base, errors = browser_page
    errors.clear()
    page.goto(f"{base}/{path}", wait_until="networkidle")
    page.wait_for_selector('main img[class*="tsx-frame-"]', timeout=30000)
    expected = _kernel_frames(WIDGET_PAGES[path]) if WIDGET_PAGES[path] else None
    seen: dict[str, str] = {}

    def look() -> dict:
        page.wait_for_timeout(150)
        frame = page.evaluate(_FRAME)
        assert frame is not None, f"{path}: no figure shown"
        positions = page.evaluate(_POSITIONS)
        assert frame["frame"] == frame_class(positions), \
            f"{path}: the page shows frame {frame['frame']} while the controls stand at {positions}"
        assert seen.setdefault(frame["frame"], frame["sha256"]) == frame["sha256"], f"{path}: two figures for one frame"
        if expected is not None:
            assert expected.get(frame["frame"]) == frame["sha256"], \
                f"{path}: the page's figure {frame['frame']} differs from the one the kernel draws"
        return frame

    controls = page.locator("main .widget-hslider, main .widget-toggle-buttons")
    assert controls.count() >= 1, f"{path}: no control found"
    labels = [controls.nth(i).locator(".widget-label").first.inner_text().strip() for i in range(controls.count())]
    assert all(labels), f"{path}: a control without a visible label: {labels}"
    for i in range(controls.count()):
        control = controls.nth(i)
        handle = control.locator(".noUi-handle")
        if handle.count():
            handle.first.focus()
            page.keyboard.press("Home")
            previous = look()
            while True:
                before = page.evaluate(_POSITIONS)[i]
                page.keyboard.press("ArrowRight")
                now = look()
                if page.evaluate(_POSITIONS)[i] == before:
                    break  # the slider is at its end
                assert now["sha256"] != previous["sha256"], f"{path}: moving control {i + 1} left the figure as it was"
                previous = now
        else:
            buttons = control.locator("button")
            previous = look()
            for b in range(buttons.count()):
                buttons.nth(b).focus()  # operated from the keyboard, as a reader without a mouse would
                page.keyboard.press("Enter")
                now = look()
                if now["frame"] != previous["frame"]:
                    assert now["sha256"] != previous["sha256"], f"{path}: a toggle left the figure as it was"
                previous = now
    assert len(seen) >= 2, f"{path}: only {len(seen)} figure(s) seen"
    page.screenshot(path=str(SCREENSHOTS / f"widget_{Path(path).stem}.png"), full_page=False)
    assert not errors, f"{path}: console errors {errors}"


@pytest.mark.slow
@pytest.mark.parametrize("path", ["solutions/m1p7-memory-and-full-loop/39_compare_memory.html", "book/memory_explorer.html"],
                         ids=["lesson39", "explorer_page"])
def test_every_control_of_the_memory_twin_changes_the_numbers_as_python_computes_them(browser_page, path: str) -> None:
    from trainsys.memtrain.memory import explore_memory

    page, base, errors = browser_page
    errors.clear()
    page.goto(f"{base}/{path}", wait_until="networkidle")
    twin = page.locator("[data-trainsys-memory-explorer]")
    assert twin.count() == 1, f"{path}: the JavaScript twin is not on the page"
    inputs = twin.locator("input[data-control]")
    assert inputs.count() == 8

    def shown() -> tuple[dict, dict]:
        state = page.evaluate("""() => Object.fromEntries(Array.from(document.querySelectorAll(
            '[data-trainsys-memory-explorer] label')).map(l => [l.querySelector('input').name,
            l.querySelector('.tsx-value').textContent]))""")
        numbers = page.evaluate("""() => Object.fromEntries(Array.from(document.querySelectorAll(
            '[data-trainsys-memory-explorer] [data-quantity]')).map(e => [e.dataset.quantity, e.textContent]))""")
        return state, numbers

    def fixed(x: float, digits: int) -> str:
        """JavaScript's ``x.toFixed(digits)``: the exact binary value rounded, a tie going up (not to even)."""
        from decimal import ROUND_HALF_UP, Decimal

        return str(Decimal(x).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))

    def python(state: dict) -> dict:
        c = {k: (v if k == "precision" else None if v == "off" else int(v)) for k, v in state.items()}
        if c["segment_size"] is not None:
            c["segment_size"] = min(c["segment_size"], c["depth"])
        c["num_micro_batches"] = min(c["num_micro_batches"], -(-c["batch"] // c["num_workers"]))
        r = explore_memory(c)
        out = {k: f"{fixed(r[k] / 2**20, 2)} MiB" for k in ("parameters", "gradients", "optimizer_states",
                                                             "activations", "total", "communication_bytes")}
        out["recompute_fraction"] = f"{fixed(100 * r['recompute_fraction'], 1)} %"
        return out

    for i in range(8):
        before_state, before = shown()
        control = inputs.nth(i)
        control.focus()
        page.keyboard.press("ArrowRight" if control.input_value() != control.get_attribute("max") else "ArrowLeft")
        page.wait_for_timeout(100)
        state, numbers = shown()
        name = control.get_attribute("name")
        assert state[name] != before_state[name], f"{path}: control {name} did not move"
        assert numbers != before, f"{path}: moving {name} changed none of the numbers"
        assert numbers == python(state), f"{path}: after moving {name} the page shows {numbers}, Python {python(state)}"
    assert not errors, f"{path}: console errors {errors}"


@pytest.mark.slow
def test_every_setup_control_of_the_transformer_twin_changes_the_numbers_as_python_computes_them(browser_page) -> None:
    """The transformer explorer's page, as a reader uses it: each preset and each setup control (sliders and
    selects) changed in turn; the page's parameter count, per-component bytes and total must equal
    ``trainsys.memtrain.transformer_memory``'s for the configuration the controls show."""
    from decimal import ROUND_HALF_UP, Decimal

    from trainsys.memtrain.transformer_memory import transformer_memory

    page, base, errors = browser_page
    errors.clear()
    page.goto(f"{base}/book/transformer_explorer.html", wait_until="networkidle")
    twin = page.locator("[data-trainsys-transformer-explorer]")
    assert twin.count() == 1, "the transformer explorer is not on its page"

    def fixed(x: float, digits: int) -> str:  # JavaScript's toFixed: exact binary value, ties up
        return str(Decimal(x).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))

    def shown() -> tuple[dict, dict]:
        state = page.evaluate("""() => {
            const form = document.querySelector('[data-trainsys-transformer-explorer] .tsx-controls');
            return Object.fromEntries(Array.from(form.querySelectorAll('[data-control]')).map(c => [c.dataset.control,
              c.type === 'range' ? c.parentElement.querySelector('.tsx-value').textContent : c.value])); }""")
        numbers = page.evaluate("""() => Object.fromEntries(Array.from(document.querySelectorAll(
            '[data-trainsys-transformer-explorer] [data-quantity]')).map(e => [e.dataset.quantity, e.textContent]))""")
        return state, numbers

    def python(state: dict) -> dict:
        c = {k: v if k in ("model", "precision", "recompute") else int(v) for k, v in state.items()}
        r = transformer_memory(c)
        out = {k: f"{fixed(r[k] / 1e9, 2)} GB" for k in ("parameters", "gradients", "optimizer_states", "activations",
                                                          "total", "budget_bytes")}
        n = r["num_parameters"]
        out["num_parameters"] = f"{fixed(n / 1e9, 2)} B" if n >= 1e9 else f"{fixed(n / 1e6, 1)} M"
        return out

    def agrees(moved: str) -> None:
        state, numbers = shown()
        expected = python(state)
        assert {k: numbers[k] for k in expected} == expected, f"after {moved}: page {numbers}, Python {expected}"

    agrees("loading")
    for preset in ("gpt2-small", "llama-3-70b", "llama-3-8b"):
        page.select_option('[data-trainsys-transformer-explorer] select[data-control="model"]', preset)
        agrees(f"choosing {preset}")
    selects = twin.locator('.tsx-controls').first.locator('select[data-control]:not([data-control="model"])')
    for i in range(selects.count()):
        select = selects.nth(i)
        options = select.locator("option").evaluate_all("os => os.map(o => o.value)")
        before = shown()[1]
        select.select_option(options[-1] if select.input_value() != options[-1] else options[0])
        assert shown()[1] != before, f"changing {select.get_attribute('data-control')} changed none of the numbers"
        agrees(f"changing {select.get_attribute('data-control')}")
    sliders = twin.locator('.tsx-controls').first.locator('input[type="range"]')
    for i in range(sliders.count()):
        slider = sliders.nth(i)
        before = shown()[1]
        slider.focus()
        page.keyboard.press("ArrowRight" if slider.input_value() != slider.get_attribute("max") else "ArrowLeft")
        assert shown()[1] != before, f"moving {slider.get_attribute('data-control')} changed none of the numbers"
        agrees(f"moving {slider.get_attribute('data-control')}")
    page.screenshot(path=str(SCREENSHOTS / "transformer_explorer_moved.png"), full_page=True)
    assert not errors, f"console errors {errors}"
