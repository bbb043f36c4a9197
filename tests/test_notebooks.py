"""notebooks/ executed cell by cell in a real kernel (nbclient): a failing cell fails the
suite. The Omniglot notebook reads the images from the data folder beside the checkout
(`../shared/data/omniglot`, as CI has it), passed as its DATA_DIR parameter."""

import os
import sys

import nbformat

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "notebooks"))
from make_notebooks import execute  # noqa: E402

DATA_DIR = os.path.abspath(os.path.join(REPO, "..", "shared", "data", "omniglot"))


def _outputs(notebook) -> str:
    return "\n".join(
        output.get("text", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("output_type") == "stream"
    )


def _images(notebook) -> int:
    return sum(
        "image/png" in output.get("data", {})
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    )


def test_the_committed_notebooks_carry_the_outputs_of_a_run():
    for name in ("quickstart.ipynb", "omniglot.ipynb"):
        notebook = nbformat.read(os.path.join(REPO, "notebooks", name), as_version=4)
        code = [cell for cell in notebook.cells if cell.cell_type == "code"]
        assert all(cell.get("execution_count") for cell in code), name
        assert _images(notebook) >= 1, name


def test_the_quickstart_runs(tmp_path):
    notebook = execute(os.path.join(REPO, "notebooks", "quickstart.ipynb"), {"STEPS": 300})
    text = _outputs(notebook)
    assert "CAVIA: 300 meta-updates" in text and "relVIABLE: 300 meta-updates" in text
    assert "relVIABLE  K = 10: MSE" in text
    assert "REST:" in text and "gRPC:" in text and "viable-serve stopped: 0" in text
    assert _images(notebook) == 1


def test_the_omniglot_notebook_runs():
    notebook = execute(
        os.path.join(REPO, "notebooks", "omniglot.ipynb"),
        {
            "DATA_DIR": DATA_DIR,
            "ENCODER_EPOCHS": 1,
            "STEPS": 50,
            "VALIDATION_EPISODES": 20,
            "TEST_EPISODES": 60,
        },
    )
    text = _outputs(notebook)
    assert "CAVIA, prototype head:" in text and "nearest class mean:" in text
    assert "predicted:" in text and _images(notebook) == 2
