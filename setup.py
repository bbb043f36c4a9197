"""Packaging beside pyproject.toml (which holds the metadata): the repository's `gin/`
folder is installed inside the package as `viable_tf/gin/`, so the shipped configs
resolve by name after a plain `pip install .` (see viable_tf/config.py)."""

from setuptools import find_packages, setup

setup(
    packages=[
        *find_packages(include=["viable_tf", "viable_tf.*", "serving", "serving.*"]),
        "viable_tf.gin",
    ],
    package_dir={"viable_tf.gin": "gin"},
    package_data={
        "viable_tf.gin": ["*/*.gin"],
        "viable_tf.evaluation": ["sine_reference.json"],
        "serving": ["demo.html"],
        # The shipped exports (viable_tf/pretrained/): every file of every version.
        "viable_tf.pretrained": [
            "*/*/*.pb",
            "*/*/variables/*",
            "*/*/assets.extra/*",
            "*/*/assets.extra/examples/*",
            "*/*/assets.extra/examples/*/*",
        ],
    },
)
