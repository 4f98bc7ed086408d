"""``make setup``'s installer (tools/uv_install.py) hands uv the pip settings pip itself would use."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("uv_install", ROOT / "tools" / "uv_install.py")
uv_install = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(uv_install)

LISTED = """\
:env:.cert='/etc/ssl/certs/bundle.crt'
:env:.default-timeout='180'
:env:.find-links='/opt/wheels'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/somewhere/else'
global.index-url='https://global.example/simple'
global.no-index='false'
install.index-url='https://install.example/simple'
install.no-index='yes'
"""


def test_pip_precedence_is_kept_environment_then_install_then_global() -> None:
    assert uv_install.parse(LISTED) == {
        "cert": ["/etc/ssl/certs/bundle.crt"],
        "find-links": ["/opt/wheels"],  # PIP_FIND_LINKS over the file's [global]
        "constraint": ["/etc/xdg/pip/constraints.txt"],
        "extra-index-url": ["file:///opt/pypi/simple", "file:///opt/pypi-more/simple"],  # split as pip splits it
        "index-url": ["https://install.example/simple"],  # [install] over [global]
        "no-index": ["yes"],  # [install] over [global]
    }
    assert uv_install.parse("") == {}


def test_uv_gets_each_setting_as_its_own_option(monkeypatch) -> None:
    monkeypatch.setattr(uv_install, "pip_settings", lambda python: uv_install.parse(LISTED))
    argv, env = uv_install.command(["-r", "requirements.txt"], python="/venv/bin/python")
    assert argv[:5] == ["/venv/bin/uv", "pip", "install", "--python", "/venv/bin/python"]
    assert argv[-2:] == ["-r", "requirements.txt"]
    options = argv[5:-2]
    pairs = list(zip(options, options[1:]))
    assert ("--index-url", "https://install.example/simple") in pairs and ("--find-links", "/opt/wheels") in pairs
    assert [v for k, v in pairs if k == "--extra-index-url"] == ["file:///opt/pypi/simple", "file:///opt/pypi-more/simple"]
    assert ("--constraint", "/etc/xdg/pip/constraints.txt") in pairs
    assert ("--index-strategy", "unsafe-best-match") in pairs and "--compile-bytecode" in options  # as pip does
    assert env["SSL_CERT_FILE"] == "/etc/ssl/certs/bundle.crt"
    assert options.count("--no-index") == 1  # pip reads 'yes' as true


@pytest.mark.parametrize(("value", "given"), [("true", True), ("1", True), ("On", True), ("false", False),
                                              ("0", False), ("no", False)])
def test_no_index_is_passed_where_pip_reads_yes(monkeypatch, value: str, given: bool) -> None:
    monkeypatch.setattr(uv_install, "pip_settings", lambda python: uv_install.parse(f"global.no-index='{value}'\n"))
    argv, _ = uv_install.command([], python="/venv/bin/python")
    assert ("--no-index" in argv) is given


def test_this_machines_pip_settings_are_read() -> None:
    settings = uv_install.pip_settings(sys.executable)
    assert set(settings) <= {*uv_install.OPTIONS, *uv_install.SWITCHES, "cert"}
    assert all(isinstance(v, list) and all(isinstance(x, str) and x for x in v) for v in settings.values())
