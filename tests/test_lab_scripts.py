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
SCRIPTS = sorted(
    p for p in glob.glob(os.path.join(REPO, "lab", "*.py")) if not p.endswith("__init__.py")
)


def test_there_are_lab_scripts():
    assert len(SCRIPTS) > 20


@pytest.mark.parametrize("path", SCRIPTS, ids=os.path.basename)
def test_a_lab_script_answers_help(path, monkeypatch):
    monkeypatch.setattr(sys, "argv", [path, "--help"])
    monkeypatch.syspath_prepend(os.path.dirname(path))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        runpy.run_path(path, run_name="__main__")
    assert stop.value.code == 0, path
    assert "usage:" in out.getvalue()
