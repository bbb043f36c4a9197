"""A small folder shaped as Omniglot's zips read as images (for the end-to-end configs):
<root>/<alphabet>/<character>/<drawing>.png, every alphabet of gin/images/omniglot.gin's
split, black strokes on white, so that gin/omniglot_conv/ builds its episodes from it; and
small stand-ins for the two zips themselves, for the frozen-feature pipeline's reader."""

import io
import zipfile

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
            for d, pixels in enumerate(_drawings(rng, (size, size), drawings)):
                Image.fromarray(pixels, "L").save(folder / f"{c:04d}_{d + 1:02d}.png")
    return root


def _drawings(rng, shape, count):
    """One character's `count` drawings (uint8, black 0 on white 255): a random set of
    strokes, each drawing with a few pixels moved."""
    strokes = rng.random(shape) < 0.15
    for _ in range(count):
        drawn = strokes ^ (rng.random(shape) < 0.03)
        yield np.where(drawn, 0, 255).astype(np.uint8)


def write_fake_omniglot_zips(root, *, characters: int = 5, drawings: int = 20, seed: int = 0):
    """Omniglot's two background zips in small (viable_tf/datasets/omniglot.py's ZIPS and
    ALPHABETS, 105 x 105 PNGs as the real ones): `characters` characters per alphabet of
    every split, `drawings` drawings each, the meta-training alphabets in the first zip and
    the others in the second. Returns `root` (a pathlib.Path), for `read_omniglot`."""
    from viable_tf.datasets import omniglot

    rng = np.random.default_rng(seed)
    train = omniglot.ALPHABETS["train"]
    alphabets = [a for names in omniglot.ALPHABETS.values() for a in names]
    for name in omniglot.ZIPS:
        top = name.removesuffix(".zip")
        first = name == omniglot.ZIPS[0]
        with zipfile.ZipFile(root / name, "w") as archive:
            for alphabet in (a for a in alphabets if (a in train) == first):
                for c in range(characters):
                    pixels = _drawings(rng, omniglot.IMAGE_SHAPE[:2], drawings)
                    for d, drawing in enumerate(pixels):
                        png = io.BytesIO()
                        Image.fromarray(drawing, "L").save(png, "PNG")
                        entry = f"{top}/{alphabet}/character{c + 1:02d}/{c:04d}_{d + 1:02d}.png"
                        archive.writestr(entry, png.getvalue())
    return root
