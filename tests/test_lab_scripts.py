"""Every lab/ script imports on today's code and answers `--help` (run in this process, as
`python lab/<script>.py --help` would, lab/ first on the path): a research script that
patches a name the library no longer has, or reads its arguments before parsing them,
fails here rather than in the next investigation."""

import contextlib
import glob
import io
import os
import runpy
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULES = sorted(
    p for p in glob.glob(os.path.join(REPO, "lab", "*.py")) if not p.endswith("__init__.py")
)
#: The modules the scripts share (no command of their own).
SHARED = [os.path.join(REPO, "lab", "inner_path.py")]
SCRIPTS = [p for p in MODULES if p not in SHARED]


def _text(path: str) -> str:
    with open(path) as f:
        return f.read()


def test_there_are_lab_scripts():
    assert len(SCRIPTS) > 20


@pytest.mark.parametrize("path", SHARED, ids=os.path.basename)
def test_a_shared_module_is_shared_and_not_a_command(path):
    name = os.path.basename(path)[: -len(".py")]
    assert "__main__" not in _text(path)
    users = [p for p in SCRIPTS if f"from lab import {name}" in _text(p)]
    assert len(users) >= 2, users


@pytest.mark.parametrize("path", SCRIPTS, ids=os.path.basename)
def test_a_lab_script_answers_help(path, monkeypatch):
    monkeypatch.setattr(sys, "argv", [path, "--help"])
    monkeypatch.syspath_prepend(os.path.dirname(path))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        runpy.run_path(path, run_name="__main__")
    assert stop.value.code == 0, path
    assert "usage:" in out.getvalue()
