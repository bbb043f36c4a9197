"""notebooks/images.ipynb executed in a real kernel (nbclient): a folder of drawn glyphs
to a served classifier answering base64 PNGs over REST, at a small budget. Its own file,
so that the suite's workers run the notebooks side by side."""

import os

import pytest
from test_notebooks import REPO, _images, _outputs, execute


@pytest.mark.slow
def test_the_images_notebook_goes_from_a_folder_to_a_served_classifier():
    notebook = execute(
        os.path.join(REPO, "notebooks", "images.ipynb"), {"STEPS": 40, "TEST_EPISODES": 40}
    )
    text = _outputs(notebook)
    assert "40 classes" in text and "{'train': 24, 'val': 8, 'test': 8}" in text
    assert "test classes, 5-way 1-shot:" in text and "(95% CI, 40 episodes; chance 20%)" in text
    assert "predicted: [" in text and "viable-serve stopped: 0" in text
    assert _images(notebook) == 1
