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
        assert "BEGIN HIDDEN TESTS" not in html and "check_" not in html, f"{page.name} shows the hidden tests"
        assert "BEGIN SOLUTION" not in html
        assert "toggle" in html.lower(), f"{page.name}: the solution should sit behind a toggle"
        assert "<img" in html, f"{page.name}: the checkpoint figure is missing"


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
