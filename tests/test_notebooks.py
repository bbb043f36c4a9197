"""notebooks/ executed cell by cell in a real kernel (nbclient): a failing cell fails the
suite. The Omniglot notebook's test is tests/test_notebook_omniglot.py (its own file, so
that the suite's workers run the two notebooks side by side)."""

import os
import sys

import nbformat
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "notebooks"))
from make_notebooks import execute  # noqa: E402


def _outputs(notebook) -> str:
    """What the code cells printed, a cell's stream pieces joined as written: the kernel
    flushes a stream on a timer, so one `print` can arrive as two outputs on a busy
    machine ("viable-serve stopped:", then " 0")."""
    return "\n".join(
        "".join(
            output.get("text", "")
            for output in cell.get("outputs", [])
            if output.get("output_type") == "stream"
        )
        for cell in notebook.cells
        if cell.cell_type == "code"
    )


def _images(notebook) -> int:
    return sum(
        "image/png" in output.get("data", {})
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    )


def test_the_committed_notebooks_carry_the_outputs_of_a_run():
    for name in ("quickstart.ipynb", "omniglot.ipynb", "images.ipynb"):
        notebook = nbformat.read(os.path.join(REPO, "notebooks", name), as_version=4)
        code = [cell for cell in notebook.cells if cell.cell_type == "code"]
        assert all(cell.get("execution_count") for cell in code), name
        assert _images(notebook) >= 1, name


@pytest.mark.slow
def test_the_quickstart_runs(tmp_path):
    notebook = execute(os.path.join(REPO, "notebooks", "quickstart.ipynb"), {"STEPS": 150})
    text = _outputs(notebook)
    assert "CAVIA: 150 meta-updates" in text and "relVIABLE: 150 meta-updates" in text
    assert "relVIABLE  K = 10: MSE" in text
    assert "REST:" in text and "gRPC:" in text and "viable-serve stopped: 0" in text
    assert _images(notebook) == 1
