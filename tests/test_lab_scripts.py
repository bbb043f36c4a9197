"""Every lab/ script imports on today's code and answers `--help` (run in this process, as
`python lab/<script>.py --help` would, lab/ first on the path): a research script that
patches a name the library no longer has, or reads its arguments before parsing them,
fails here rather than in the next investigation."""

import contextlib
import glob
import io
import os
import re
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


#: A lab script named in a page: `lab/x.py`, `python -m lab.x`, or the names it had before
#: research/ and tools/ became lab/ (the research records keep them as written).
NAMED = re.compile(
    r"(?<![\w./])(?P<dir>lab|research|tools)/(?P<file>[a-z0-9_]+\.(?:py|sh))\b"
    r"|python -m (?P<mdir>lab|research|tools)\.(?P<module>[a-z0-9_]+)"
)
OLD_NAMES_NOTE = "are in `lab/` today under the same names"


def _pages() -> list[str]:
    pages = glob.glob(os.path.join(REPO, "docs", "**", "*.md"), recursive=True)
    return sorted(
        pages + glob.glob(os.path.join(REPO, "*.md")) + [os.path.join(REPO, "lab", "README.md")]
    )


@pytest.mark.parametrize("page", _pages(), ids=lambda p: os.path.relpath(p, REPO))
def test_every_lab_script_a_page_names_exists_and_old_names_are_explained(page):
    text = _text(page)
    old = False
    for found in NAMED.finditer(text):
        directory = found["dir"] or found["mdir"]
        name = found["file"] or f"{found['module']}.py"
        assert os.path.exists(os.path.join(REPO, "lab", name)), (found[0], page)
        old = old or directory != "lab"
    if old:
        assert OLD_NAMES_NOTE in text, page
