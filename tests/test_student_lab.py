"""Checked as a student would: a released lesson in JupyterLab, driven in headless Chromium.

A copy of the release notebook of Lesson 14 is opened in a throw-away JupyterLab (``make lab`` without
the browser). Like a student, the test runs it untouched and sees the stub fail, types the reference
solution into the answer cell, restarts and runs everything, sees the visible tests pass, and moves the
checkpoint's slider with the keyboard; the figure below the slider is redrawn by the live kernel.
Screenshots go to ``_build/screenshots/student_*.png``.

The tests share one notebook and run in file order (step 3 redoes step 2 when it runs alone).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LESSON = "m1p2-gradient-accumulation/14_grad_accumulation_step.ipynb"
RELEASE = ROOT / "notebooks" / LESSON
SOURCE = ROOT / "solutions" / LESSON
CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = ROOT / "_build" / "screenshots"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
# JupyterLab settings of the throw-away user: no news prompt, no update check, and every cell attached
# to the page (the default windowing skips rendering of cells out of view).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                        "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}
SERVER_START_S = 60
PAGE_S = 60_000  # ms: opening JupyterLab, a kernel start, running the whole notebook
STEP_S = 15_000  # ms: a menu, a dialog, one widget redraw

pytestmark = pytest.mark.slow


def _solution_source() -> str:
    """The answer cell of the authored notebook, without nbgrader's solution markers."""
    cells = [c for c in json.loads(SOURCE.read_text())["cells"]
             if c["metadata"].get("nbgrader", {}).get("solution")]
    assert len(cells) == 1, f"{SOURCE.name}: expected one answer cell, found {len(cells)}"
    source = "".join(cells[0]["source"])
    lines = [line for line in source.splitlines()
             if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")]
    return "\n".join(lines)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory):
    """A headless JupyterLab serving a folder with a copy of the release notebook: (base URL, token, folder)."""
    tmp = tmp_path_factory.mktemp("student_lab")
    work = tmp / "work"
    work.mkdir()
    shutil.copy(RELEASE, work / RELEASE.name)
    for name, values in LAB_SETTINGS.items():
        path = tmp / "settings" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp / "config"), JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
               IPYTHONDIR=str(tmp / "ipython"), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               PYDEVD_DISABLE_FILE_VALIDATION="1")
    env.pop("JUPYTER_CONFIG_PATH", None)  # the course's nbgrader config is for the instructor, not a student
    log = (tmp / "jupyterlab.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
         "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}",
         "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         f"--LabServerApp.user_settings_dir={tmp / 'settings'}",
         f"--LabServerApp.workspaces_dir={tmp / 'workspaces'}"],
        cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            assert server.poll() is None, f"JupyterLab exited:\n{(tmp / 'jupyterlab.log').read_text()[-3000:]}"
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"JupyterLab did not answer within {SERVER_START_S} s"
            time.sleep(0.2)
        yield base, token, work
    finally:
        server.send_signal(signal.SIGTERM)  # stops the kernels it started, then itself
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=5)
        try:
            os.killpg(server.pid, signal.SIGKILL)  # a kernel left behind in the server's session
        except ProcessLookupError:
            pass
        log.close()


@pytest.fixture(scope="module")
def notebook(lab):
    """The lesson open in JupyterLab in headless Chromium, its kernel idle: (page, errors, folder)."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).is_file(), "Debian's chromium is needed (make test installs it)"
    base, token, work = lab
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.set_default_timeout(STEP_S)
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{base}/lab/tree/{RELEASE.name}?token={token}")
        page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=PAGE_S)
        _wait_idle(page)
        yield page, errors, work
        browser.close()


def _wait_idle(page) -> None:
    """Wait until the kernel is started and idle (cells run before it is ready are silently skipped)."""
    page.locator("#jp-main-statusbar .jp-StatusBar-TextItem").get_by_text(
        re.compile(r"^Python 3.*\| Idle$")).wait_for(timeout=PAGE_S)
    page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=PAGE_S)


def _menu(page, menu: str, item: str) -> None:
    """Click ``menu ▸ item`` in JupyterLab's menu bar."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{re.escape(menu)}$")).click()
    page.locator(".lm-Menu-content .lm-Menu-itemLabel").get_by_text(item, exact=True).click()


def _outputs(page, text: str):
    return page.locator(".jp-OutputArea-output", has_text=text)


def _shot(page, name: str) -> None:
    page.screenshot(path=str(SCREENSHOTS / f"student_{name}.png"))


def _saved_answer(path: Path) -> str | None:
    try:
        cells = json.loads(path.read_text())["cells"]
    except (OSError, ValueError):
        return None
    answers = ["".join(c["source"]) for c in cells if c["metadata"].get("nbgrader", {}).get("solution")]
    return answers[0] if len(answers) == 1 else None


def _solve(page, work: Path) -> None:
    """Type the reference answer into the answer cell, save, restart the kernel and run all cells."""
    if _outputs(page, "visible tests passed").count():
        return
    solution = _solution_source()
    answer = page.locator(".jp-CodeCell").filter(
        has=page.locator(".cm-content", has_text="raise NotImplementedError()"))
    assert answer.count() == 1, "the answer cell (the stub raising NotImplementedError) was not found"
    editor = answer.locator(".cm-content")
    editor.click()
    page.keyboard.press("ControlOrMeta+a")
    page.keyboard.insert_text(solution)  # like a paste: no auto-indent or auto-closed brackets
    page.keyboard.press("Escape")  # back to command mode
    page.keyboard.press("ControlOrMeta+s")
    deadline = time.monotonic() + STEP_S / 1000
    while _saved_answer(work / RELEASE.name) != solution:  # the file on disk holds exactly what was typed
        assert time.monotonic() < deadline, "the typed solution was not saved as typed"
        time.sleep(0.2)
    _menu(page, "Kernel", "Restart Kernel and Run All Cells…")
    page.locator(".jp-Dialog .jp-mod-accept").click()
    _outputs(page, "visible tests passed").wait_for(timeout=PAGE_S)
    page.locator(".widget-slider .noUi-handle").wait_for(timeout=PAGE_S)  # the checkpoint ran to the explorer
    _wait_idle(page)


def test_the_untouched_release_fails_on_the_stub(notebook) -> None:
    page, errors, _ = notebook
    _menu(page, "Run", "Run All Cells")
    failure = _outputs(page, "NotImplementedError")
    failure.first.wait_for(timeout=PAGE_S)
    _wait_idle(page)
    visible_tests = page.locator(".jp-CodeCell").filter(  # by its first lines: CodeMirror renders lazily
        has=page.locator(".cm-content", has_text="# 1. Hand-computable case"))
    assert visible_tests.count() == 1, "the visible test cell was not found"
    failure.first.scroll_into_view_if_needed()
    _shot(page, "1_stub_fails")
    assert visible_tests.locator(".jp-OutputArea-output", has_text="NotImplementedError").count() == 1, \
        "the visible test cell should fail with the stub's NotImplementedError"
    assert not _outputs(page, "visible tests passed").count()
    assert not errors, f"page errors: {errors}"


def test_the_typed_solution_passes_the_visible_tests(notebook) -> None:
    page, errors, work = notebook
    _solve(page, work)
    passed = _outputs(page, "visible tests passed")
    assert passed.count() == 1
    assert not _outputs(page, "NotImplementedError").count(), "a NotImplementedError is still shown"
    assert not page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']",
                            has_text="Error").count(), "an error is shown"
    passed.scroll_into_view_if_needed()
    _shot(page, "2_solution_passes")
    assert not errors, f"page errors: {errors}"


def test_the_checkpoint_slider_redraws_the_figure(notebook) -> None:
    page, errors, work = notebook
    _solve(page, work)
    explorer = page.locator(".widget-vbox").filter(has=page.locator(".widget-slider")).last
    figure = explorer.locator('img[class*="tsx-frame-"]')  # the frame the slider's position shows
    readout = explorer.locator(".widget-readout")
    figure.wait_for()
    explorer.scroll_into_view_if_needed()
    before_src, before_value = figure.get_attribute("src"), readout.inner_text()
    _shot(page, "3_slider_before")
    explorer.locator(".noUi-handle").focus()
    page.keyboard.press("ArrowRight")
    page.wait_for_function(
        "([box, src]) => { const img = box.querySelector('img[class*=\"tsx-frame-\"]');"
        " return img !== null && img.complete && img.getAttribute('src') !== src; }",
        arg=[explorer.element_handle(), before_src], timeout=STEP_S)
    after_value = readout.inner_text()
    assert (before_value, after_value) == ("4", "8"), f"slider moved from {before_value} to {after_value}"
    assert figure.get_attribute("src") != before_src
    _wait_idle(page)
    explorer.scroll_into_view_if_needed()
    _shot(page, "3_slider_moved")
    assert not errors, f"page errors: {errors}"
