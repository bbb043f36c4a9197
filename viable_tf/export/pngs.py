"""Images as PNG files and back, as the image signatures (serving_png) read them: in
NumPy for clients and tests (`encode_pngs`, `decode_png`), and in the served graph with
standard ops only (`decode_pngs`).

`encode_pngs` writes images of 0..1 values as 8-bit PNGs; for drawings whose values are
multiples of 1/255 (Omniglot's, as read from their files) the round trip through the
served graph's decoding is exact.

Shape legend: H, W, C one image's height, width and channels (1 or 3).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from viable_tf.export import signature as sig
from viable_tf.image_decoding import luminance, over_white


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


def decode_png(data: bytes, channels: int = 1) -> np.ndarray:
    """One PNG or JPEG -> float32 [H, W, C] in 0..1 (white = 1; transparent pixels as
    white), as the served graph decodes it before resizing, and as training reads an
    image file (`image_decoding.convert`): decoded to colour, then grey by luma."""
    return _decode(tf.constant(data), channels).numpy()


def decode_pngs(name: str, pngs: tf.Tensor, image_shape) -> tf.Tensor:
    """In a served graph: PNG strings [B, P] -> images float32 [B, P, H, W, C] in 0..1,
    each checked from its header (named by `name` in the refusal), decoded as
    `decode_png` does and resized to H x W by area averaging where its size differs."""
    images = tf.map_fn(
        lambda data: _decode_png_graph(name, data, tuple(image_shape)),
        tf.reshape(pngs, [-1]),
        fn_output_signature=tf.TensorSpec(image_shape, tf.float32),
    )
    return tf.reshape(images, tf.concat([tf.shape(pngs), image_shape], axis=0))


def _decode_png_graph(name: str, data: tf.Tensor, image_shape: tuple) -> tf.Tensor:
    """One PNG or JPEG -> float32 [H, W, C] in 0..1, white = 1, as training reads an
    image file; refused (by `name`) unless it is a PNG or JPEG of at most MAX_PNG_SIDE a
    side, from its header, before it is decoded."""
    height, width, channels = image_shape
    header = tf.strings.substr(data + b"\0" * 24, 0, 24)  # safe on short strings
    is_png = tf.logical_and(
        tf.equal(tf.strings.substr(header, 0, 8), sig.PNG_MAGIC),
        tf.equal(tf.strings.substr(header, 12, 4), b"IHDR"),
    )
    is_jpeg = tf.equal(tf.strings.substr(header, 0, 3), sig.JPEG_MAGIC)
    check_format = tf.debugging.assert_equal(
        tf.logical_or(is_png, is_jpeg),
        True,
        message=f"{name} holds a string that is not a PNG or JPEG",
    )
    with tf.control_dependencies([check_format]):
        size = tf.cond(  # [width, height]
            is_png,
            lambda: tf.io.decode_raw(
                tf.strings.substr(header, 16, 8), tf.int32, little_endian=False
            ),
            lambda: tf.reverse(tf.image.extract_jpeg_shape(data)[:2], [0]),
        )
    check_size = tf.debugging.assert_equal(
        tf.reduce_all(tf.logical_and(size > 0, size <= sig.MAX_PNG_SIDE)),
        True,
        message=f"{name} holds an image larger than {sig.MAX_PNG_SIDE} pixels on a side",
    )
    with tf.control_dependencies([check_size]):
        image = _decode(data, channels)
    return tf.cond(
        tf.reduce_all(tf.equal(tf.shape(image)[:2], [height, width])),
        lambda: image,
        lambda: tf.image.resize(image, [height, width], method="area"),
    )


def _decode(data: tf.Tensor, channels: int) -> tf.Tensor:
    """A PNG or JPEG string -> float32 [h, w, channels] in 0..1: decoded to colour and
    coverage (a JPEG's is full), then `luminance` and `over_white` as training reads a
    file (`image_decoding.convert`)."""
    rgba = tf.cond(
        tf.equal(tf.strings.substr(data, 0, 3), sig.JPEG_MAGIC),
        lambda: tf.pad(
            tf.io.decode_jpeg(data, channels=3), [[0, 0], [0, 0], [0, 1]], constant_values=255
        ),
        lambda: _png_rgba(data),
    )
    color, alpha = rgba[..., :3], rgba[..., 3:]  # uint8 [h, w, 3], [h, w, 1]
    return over_white(luminance(color) if channels == 1 else color, alpha)


def _png_rgba(data: tf.Tensor) -> tf.Tensor:
    """A PNG string -> uint8 [h, w, 4]: decoded at its own channel count (grey, grey and
    alpha, colour, colour and alpha), then grey repeated to colour and a missing alpha
    made opaque. Not `decode_png(channels=4)`: for a file of fewer than 8 bits a sample
    (Omniglot's drawings are 1-bit grey; small palettes are 1, 2 or 4 bits) the alpha it
    adds is that depth's largest value (1, 3 or 15), not 255, so every pixel came out
    nearly transparent, and white once laid over white."""
    image = tf.io.decode_png(data)  # uint8 [h, w, c], c = 1..4
    count = tf.shape(image)[-1]
    color = tf.gather(image, tf.where(count >= 3, [0, 1, 2], [0, 0, 0]), axis=-1)
    alpha = tf.where(count % 2 == 0, image[..., -1:], tf.constant(255, tf.uint8))
    rgba = tf.concat([color, alpha], axis=-1)
    rgba.set_shape([None, None, 4])  # in a graph the file's channel count is not known
    return rgba
