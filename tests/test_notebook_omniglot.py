"""notebooks/omniglot.ipynb executed in a real kernel (nbclient) at a small budget, on
small stand-ins for Omniglot's two zips (fake_omniglot.py) passed as its DATA_DIR
parameter: the notebook's cells are what is tested here; the real images go through the
same stages in test_omniglot.py's end-to-end run."""

import os

import pytest
from fake_omniglot import write_fake_omniglot_zips
from test_notebooks import REPO, _images, _outputs, execute


@pytest.mark.slow
def test_the_omniglot_notebook_runs(tmp_path):
    notebook = execute(
        os.path.join(REPO, "notebooks", "omniglot.ipynb"),
        {
            "DATA_DIR": str(write_fake_omniglot_zips(tmp_path)),
            "ENCODER_EPOCHS": 1,
            "STEPS": 50,
            "VALIDATION_EPISODES": 20,
            "TEST_EPISODES": 60,
        },
    )
    text = _outputs(notebook)
    assert "train: 20 characters, 400 drawings" in text
    assert "CAVIA, prototype head:" in text and "nearest class mean:" in text
    assert "predicted:" in text and _images(notebook) == 2
