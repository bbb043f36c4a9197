"""Image files to pixels, one rule for every path that reads them: training's reading of a
folder (datasets/image_folder.py), an export's decoding of the files it is sent
(export/pngs.py) and a client's check of the files it sends (serving/images_client.py).

PNG and JPEG files are decoded by TensorFlow's own decoders (`tf.io.decode_image`, as a
served graph decodes them), BMP and GIF files by Pillow (`decode_by_pillow`); `convert`
takes the decoded uint8 pixels to float32 0..1 at a size and channel count, colour to
grey by ITU-R 601 luma, alpha composited over white.
"""

from __future__ import annotations

import io
from collections.abc import Iterable

import numpy as np


def decode_image(data: bytes):
    """A PNG, JPEG, GIF (its first frame) or BMP file's pixels, uint8 [h, w, c]. Raises
    TensorFlow's InvalidArgumentError (or UnknownError) or ImageDecodeError where the
    bytes are not such an image."""
    import tensorflow as tf

    if data.startswith(PILLOW_FORMATS):
        return decode_by_pillow(data)
    return tf.io.decode_image(data, expand_animations=False)


class ImageDecodeError(ValueError):
    """A BMP or GIF file Pillow cannot decode."""


#: What files `decode_by_pillow` reads, by their first bytes: BMP and GIF.
PILLOW_FORMATS = (b"BM", b"GIF87a", b"GIF89a")


def decode_by_pillow(data: bytes) -> np.ndarray:
    """A BMP or GIF file's pixels (a GIF's first frame), uint8 [h, w, c]: colour with
    alpha (c = 4) when the file marks pixels transparent, else grey (1) when it holds
    only grey, else colour (3). By Pillow, because TensorFlow's decoders drop a GIF's
    transparency (a drawing on a transparent background comes out as one colour, often
    all black), read a 32-bit BMP's unused fourth byte as alpha (0 in most such files:
    every pixel transparent, so white once laid over white), take a BMP palette's
    indices for grey levels, and refuse 1- and 4-bit BMPs."""
    import PIL.Image

    try:
        with PIL.Image.open(io.BytesIO(data)) as image:
            image.load()  # a GIF's first frame
            if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
                pixels = np.asarray(image.convert("RGBA"))
            elif image.mode in ("1", "L"):
                pixels = np.asarray(image.convert("L"))[..., None]
            else:
                pixels = np.asarray(image.convert("RGB"))
                if (pixels == pixels[..., :1]).all():  # a grey palette
                    pixels = pixels[..., :1]
    except (OSError, SyntaxError, ValueError, PIL.Image.DecompressionBombError) as error:
        raise ImageDecodeError(f"{type(error).__name__}: {error}") from None
    return pixels


def convert(image, image_size: tuple[int, int], channels: int):
    """One decoded uint8 image [h, w, c] (c = 1..4), or a batch of them alike [n, h, w, c],
    -> float32 [H, W, channels] (or [n, H, W, channels]) of 0..1:
    colour to grey as PNG and JPEG decoders convert (`luminance`, so that a served PNG
    signature, whose decoder converts it, sees the grey training saw, to 1/255), grey to
    colour by repetition, alpha composited over white, resized by area averaging."""
    import tensorflow as tf

    image = tf.convert_to_tensor(image)
    colour, alpha = (
        (image[..., :-1], image[..., -1:]) if image.shape[-1] in (2, 4) else (image, None)
    )
    if channels == 1 and colour.shape[-1] == 3:
        colour = luminance(colour)
    elif channels == 3 and colour.shape[-1] == 1:
        colour = tf.repeat(colour, 3, -1)
    image = over_white(colour, alpha)
    if tuple(image.shape[-3:-1]) != tuple(image_size):
        image = tf.image.resize(image, image_size, method="area")
    return tf.clip_by_value(image, 0.0, 1.0)  # area sums can pass 1 by an ulp


#: v / 255 for v = 0..255, as NumPy divides: what an opaque pixel of value v reads as, in
#: training and in a served graph alike (TensorFlow's graph divides by a constant through
#: its reciprocal, which differs in the last bit for some v).
UINT8_SCALED = np.arange(256, dtype=np.float32) / np.float32(255.0)


def convert_all(
    images: Iterable[np.ndarray],
    image_size: tuple[int, int],
    channels: int,
    *,
    batch_bytes: int = 32 * 2**20,
) -> np.ndarray:
    """Decoded uint8 images [h, w, c] of any shapes (arrays or tensors) -> float32 [n, H, W,
    channels], in their order: `convert` on the images of one shape together (the same ops
    on each image as one at a time, a handful of calls where a folder of one size took one
    per image). Images are held for it until `batch_bytes` of them wait, so a class of many
    large files is converted in parts, never held whole at its files' size."""
    parts, chunk, held = [], [], 0
    for image in map(np.asarray, images):  # a decoder's tensor, or an array
        chunk.append(image)
        held += image.nbytes
        if held >= batch_bytes:
            parts.append(_convert_chunk(chunk, image_size, channels))
            chunk, held = [], 0
    parts.append(_convert_chunk(chunk, image_size, channels))
    return np.concatenate(parts)


def _convert_chunk(chunk: list[np.ndarray], image_size, channels) -> np.ndarray:
    """`chunk` converted in its order, one `convert` per shape."""
    out = np.empty((len(chunk), *image_size, channels), np.float32)
    by_shape: dict[tuple[int, ...], list[int]] = {}
    for i, image in enumerate(chunk):
        by_shape.setdefault(image.shape, []).append(i)
    for indices in by_shape.values():
        out[indices] = convert(np.stack([chunk[i] for i in indices]), image_size, channels)
    return out


def over_white(colour, alpha=None):
    """uint8 values [h, w, C] with coverage alpha uint8 [h, w, 1] (None: opaque) ->
    float32 [h, w, C] in 0..1, laid over white where not opaque: one rule for training's
    reading of a file and an export's decoding of one."""
    import tensorflow as tf

    opaque = tf.gather(UINT8_SCALED, tf.cast(colour, tf.int32))
    if alpha is None:
        return opaque
    c, a = tf.cast(colour, tf.float32), tf.cast(alpha, tf.float32)
    covered = (c * a + 255.0 * (255.0 - a)) / (255.0 * 255.0)
    return tf.where(tf.equal(alpha, 255), opaque, covered)


def luminance(rgb):
    """uint8 [h, w, 3] -> uint8 [h, w, 1]: ITU-R 601 luma, floor((299 R + 587 G + 114 B) /
    1000), the weights PNG and JPEG decoders use for grey (equal to TensorFlow's PNG
    decoder on 99.6% of random colours and within 1 of it on the rest)."""
    import tensorflow as tf

    r, g, b = tf.unstack(tf.cast(rgb, tf.int32), axis=-1)
    return tf.cast((299 * r + 587 * g + 114 * b) // 1000, tf.uint8)[..., None]
