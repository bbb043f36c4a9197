"""Images as PNG files and back, as the image signatures (serving_png) read them.

`encode_pngs` writes images of 0..1 values as 8-bit PNGs; for drawings whose values are
multiples of 1/255 (Omniglot's, as read from their files) the round trip through the
served graph's decoding is exact.

Shape legend: H, W, C one image's height, width and channels (1 or 3).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def encode_pngs(images: np.ndarray) -> np.ndarray:
    """float [..., H, W, C] in 0..1 -> object array [...] of PNG bytes (8 bits per value)."""
    images = np.asarray(images)
    if images.ndim < 3 or images.shape[-1] not in (1, 3):
        raise ValueError(f"expected images [..., H, W, 1 or 3], got {list(images.shape)}")
    values = np.clip(np.round(images * 255.0), 0, 255).astype(np.uint8)
    leading = values.shape[:-3]
    flat = values.reshape(-1, *values.shape[-3:])
    pngs = np.empty(len(flat), dtype=object)
    for i, image in enumerate(flat):
        pngs[i] = tf.io.encode_png(image).numpy()
    return pngs.reshape(leading)


#: v / 255 for v = 0..255, as NumPy divides: what the served graph gathers for opaque
#: pixels (TensorFlow's graph divides by a constant through its reciprocal, which differs
#: in the last bit for some v).
UINT8_SCALED = np.arange(256, dtype=np.float32) / np.float32(255.0)


def over_white(color, alpha):
    """A pixel of 0..255 values with coverage alpha (0..255) laid over white, in 0..1."""
    return (color * alpha + 255.0 * (255.0 - alpha)) / (255.0 * 255.0)


def decode_png(data: bytes, channels: int = 1) -> np.ndarray:
    """One PNG -> float32 [H, W, C] in 0..1 (white = 1; transparent pixels as white), as
    the served graph decodes it before resizing."""
    color = tf.io.decode_png(data, channels=channels).numpy()
    alpha = tf.io.decode_png(data, channels=4).numpy()[..., 3:]
    blended = over_white(color.astype(np.float32), alpha.astype(np.float32))
    return np.where(alpha == 255, UINT8_SCALED[color], blended).astype(np.float32)
