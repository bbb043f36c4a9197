"""`viable-client images`: a folder of labelled support images and a folder of queries sent to
a served image classifier as their PNG or JPEG files (serving_png), each query's class printed.

    viable-client --model_name=images images --support=SUPPORT --query=QUERY

SUPPORT holds one folder per class (`SUPPORT/<class>/<image>`), QUERY the images to
classify (any depth). The classes are numbered in the order of their names, as the answer
names them back. The served model classifies N ways, fixed when it was exported, and
every class needs images in each request's support set: a support folder with another
number of classes is refused before anything is sent, and so is a file that does not
decode. GIF and BMP files are sent as PNG.
"""

from __future__ import annotations

import io
import os

import numpy as np

from viable_tf import image_decoding
from viable_tf.datasets import image_folder
from viable_tf.export import signature as sig


class ImagesError(ValueError):
    """A folder that cannot make a request; its message is one line naming it."""


def model_ways(metadata: dict) -> int | None:
    """N, the ways of a served classifier, from its serving_png signature's probabilities
    [B, Q, N] (GetModelMetadata); None where the signature does not say."""
    signature = metadata.get("signature_def", {}).get(sig.SERVING_PNG)
    if signature is None:
        raise ImagesError(
            f"the served model has no {sig.SERVING_PNG} signature: not an image classifier"
        )
    dims = signature["outputs"][sig.PROBABILITIES].get("tensor_shape", {}).get("dim", [])
    ways = int(dims[-1]["size"]) if dims else -1
    return ways if ways > 0 else None


def encoded(path: str) -> bytes:
    """A file's bytes as the served model takes them: PNG or JPEG as they are, a GIF or
    BMP re-encoded as PNG; refused (ImagesError, naming the file) where it does not decode
    or is larger than the signatures take."""
    with open(path, "rb") as f:
        data = f.read()
    import tensorflow as tf

    try:
        pixels = np.asarray(image_decoding.decode_image(data))
    except (tf.errors.InvalidArgumentError, tf.errors.UnknownError, ValueError) as error:
        reason = getattr(error, "message", str(error)).strip().splitlines()[0][:120]
        raise ImagesError(f"{path} does not decode as an image ({reason})") from None
    if data.startswith(image_decoding.PILLOW_FORMATS):
        from PIL import Image

        buffer = io.BytesIO()
        Image.fromarray(pixels.squeeze(-1) if pixels.shape[-1] == 1 else pixels).save(buffer, "PNG")
        data = buffer.getvalue()
    size = sig.image_size(data)
    if size is not None and max(size) > sig.MAX_PNG_SIDE:
        raise ImagesError(
            f"{path} is {size[0]} x {size[1]}: the served model takes images of at most "
            f"{sig.MAX_PNG_SIDE} x {sig.MAX_PNG_SIDE}"
        )
    return data


def support_set(folder: str) -> tuple[list[str], list[str], list[int]]:
    """(class names, files, labels) of a support folder: `folder/<class>/<image>`."""
    if not os.path.isdir(folder):
        raise ImagesError(f"--support {folder} is not a folder")
    names = sorted(
        d
        for d in os.listdir(folder)
        if os.path.isdir(os.path.join(folder, d)) and not image_folder.hidden(d)
    )
    if not names:
        raise ImagesError(
            f"--support {folder} holds no class folders: expected {folder}/<class>/<image>"
        )
    files, labels = [], []
    for label, name in enumerate(names):
        found = [
            os.path.join(folder, name, f)
            for f in sorted(os.listdir(os.path.join(folder, name)))
            if os.path.splitext(f)[1].lower() in image_folder.EXTENSIONS
            and not image_folder.hidden(f)
        ]
        if not found:
            raise ImagesError(
                f"class {name!r} of --support {folder} has no images: every class of the "
                "model needs images in the support set"
            )
        files += found
        labels += [label] * len(found)
    return names, files, labels


def queries(folder: str) -> list[str]:
    """The image files under a query folder, in the order of their paths."""
    if not os.path.isdir(folder):
        raise ImagesError(f"--query {folder} is not a folder")
    found = sorted(
        os.path.join(root, f)
        for root, dirs, names in os.walk(folder)
        for f in names
        if os.path.splitext(f)[1].lower() in image_folder.EXTENSIONS and not image_folder.hidden(f)
    )
    if not found:
        raise ImagesError(
            f"--query {folder} holds no images ({', '.join(image_folder.EXTENSIONS)})"
        )
    return found


def request(support: str, query: str, ways_of) -> tuple[list[str], list[str], dict]:
    """(class names, query files, the serving_png inputs) of the two folders, every file
    decoded here, then checked against the model's ways (`ways_of()`, asked last: a folder
    that cannot make a request is refused before the server is asked anything)."""
    names, files, labels = support_set(support)
    asked = queries(query)
    support_png = [encoded(f) for f in files]
    query_png = [encoded(f) for f in asked]
    ways = ways_of()
    if ways is not None and len(names) != ways:
        more = "more classes than" if len(names) > ways else "fewer classes than"
        raise ImagesError(
            f"--support {support} has {len(names)} classes ({', '.join(names)}), {more} the "
            f"model's {ways} ways: each request's support set holds exactly its {ways} classes"
        )
    inputs = {
        sig.SUPPORT_PNG: np.array([support_png], dtype=object),
        sig.SUPPORT_Y: np.array([labels], np.int32),
        sig.QUERY_PNG: np.array([query_png], dtype=object),
    }
    return names, asked, inputs


def report(names: list[str], asked: list[str], outputs: dict, query: str) -> str:
    """One line per query: its file, its class and the class's probability."""
    classes = np.asarray(outputs[sig.CLASSES])[0]
    probabilities = np.asarray(outputs[sig.PROBABILITIES])[0]
    lines = []
    for path, label, p in zip(asked, classes, probabilities, strict=True):
        lines.append(f"{os.path.relpath(path, query)}\t{names[int(label)]}\t{p[int(label)]:.3f}")
    return "\n".join(lines)
