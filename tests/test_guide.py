"""docs/GUIDE.md's Python blocks, run in order in one namespace (mktestdocs): the guide
cannot drift from the code."""

import os

import pytest
from mktestdocs import check_md_file

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_every_code_block_of_the_guide_runs(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # what the blocks write goes to temporary folders
    path = os.path.join(REPO, "docs", "GUIDE.md")
    with open(path) as f:
        blocks = f.read().count("```python")
    assert blocks >= 7
    check_md_file(fpath=path, memory=True)
