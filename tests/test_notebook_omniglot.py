"""notebooks/omniglot.ipynb executed in a real kernel (nbclient), reading the images from
the data folder beside the checkout (`../shared/data/omniglot`, as CI has it), passed as
its DATA_DIR parameter, at a small budget."""

import os

import pytest
from test_notebooks import REPO, _images, _outputs, execute

DATA_DIR = os.path.abspath(os.path.join(REPO, "..", "shared", "data", "omniglot"))


@pytest.mark.slow
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
