"""A small folder shaped as Omniglot's zips read as images (for the end-to-end configs):
<root>/<alphabet>/<character>/<drawing>.png, every alphabet of gin/images/omniglot.gin's
split, black strokes on white, so that gin/omniglot_conv/ builds its episodes from it."""

import numpy as np
from PIL import Image

#: Characters per alphabet: 4 meta-training characters (16 classes with the rotations),
#: and 5 characters in each of the validation and test splits.
ALPHABETS = {
    "Korean": 1,
    "Japanese_(katakana)": 1,
    "Sanskrit": 1,
    "Balinese": 1,
    "Greek": 3,
    "Early_Aramaic": 2,
    "Latin": 3,
    "Tagalog": 2,
}
TRAIN_ALPHABETS = ("Korean", "Japanese_(katakana)", "Sanskrit", "Balinese")


def write_fake_omniglot(
    root, *, drawings: int = 12, size: int = 28, seed: int = 0, characters: int = 1
):
    """Writes the folder under `root` (a pathlib.Path) and returns it. Each character is
    a random set of strokes, its drawings the same strokes with a few pixels moved;
    `characters` times ALPHABETS' characters per alphabet (6: enough for 20 ways)."""
    rng = np.random.default_rng(seed)
    for alphabet, count in ALPHABETS.items():
        for c in range(count * characters):
            folder = root / alphabet / f"character{c + 1:02d}"
            folder.mkdir(parents=True)
            strokes = rng.random((size, size)) < 0.15
            for d in range(drawings):
                drawn = strokes ^ (rng.random((size, size)) < 0.03)
                pixels = np.where(drawn, 0, 255).astype(np.uint8)
                Image.fromarray(pixels, "L").save(folder / f"{c:04d}_{d + 1:02d}.png")
    return root
