"""The serving contract, in one place: signature names, their inputs and outputs, which
axis of each is B, K or Q, and the checks every input passes.

The export builds its signatures from it; the server (`serving/`), its batcher and the
client import it rather than spell the names again. Plain Python and NumPy, so the
server checks a request with it before anything reaches TensorFlow.

Signatures (every input has a leading task axis B; K and Q vary per request):

  serving_default  support_x [B, K, D], support_y [B, K, Y], query_x [B, Q, D]
                   -> predictions [B, Q, Y] (a classifier: logits, probabilities
                   [B, Q, N], classes [B, Q]) and context [B, C] (CAVIA, VIABLE)
  serving_masked   the same plus support_mask bool [B, K]: False marks padding
  adapt            support_x, support_y -> context [B, C]          (CAVIA, VIABLE)
  adapt_masked     the same plus support_mask
  predict          context [B, C], query_x [B, Q, D] -> predictions (CAVIA, VIABLE)
  serving_png      an image classifier's drawings as PNG or JPEG files: support_png string
                   [B, K], support_y int32 [B, K], query_png string [B, Q] -> what
                   serving_default returns (decoded, resized to the model's input and
                   scaled inside the graph, exactly as serving_default's images are read)
  serving_png_masked  the same plus support_mask

K = 0 (or an all-False mask) gives the unadapted prediction. A classifier takes
support_y int32 [B, K] with labels 0..N-1 on its real points.

Shape legend: B tasks, K support, Q query, D input dim, Y output dim, N way, C context.
"""

from __future__ import annotations

import numpy as np

SUPPORT_X = "support_x"
SUPPORT_Y = "support_y"
SUPPORT_MASK = "support_mask"
QUERY_X = "query_x"
CONTEXT = "context"
SUPPORT_PNG = "support_png"
QUERY_PNG = "query_png"

PREDICTIONS = "predictions"
LOGITS = "logits"
PROBABILITIES = "probabilities"
CLASSES = "classes"

SERVING_DEFAULT = "serving_default"
SERVING_MASKED = "serving_masked"
ADAPT = "adapt"
ADAPT_MASKED = "adapt_masked"
PREDICT = "predict"
SERVING_PNG = "serving_png"
SERVING_PNG_MASKED = "serving_png_masked"

#: A 1 x 1 white grayscale PNG: what pads a batch's PNG inputs (a valid image, so the
#: graph decodes every string it is given; padding is masked out or cut from the outputs).
BLANK_PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x00\x00\x00"
    b"\x00:~\x9bU\x00\x00\x00\nIDAT\x08\x99c\xf8\x0f\x00\x01\x01\x01\x00\r\xe66\xc3\x00\x00"
    b"\x00\x00IEND\xaeB`\x82"
)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
JPEG_MAGIC = b"\xff\xd8\xff"
#: The largest width or height of a PNG or JPEG the image signatures decode (a small file
#: can claim a huge image; it is refused from its header, before any decoding).
MAX_PNG_SIDE = 1024
#: JPEG's start-of-frame markers (baseline, progressive, ...), which carry the size.
_JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}

#: Each plain signature's masked form (the batcher pads K and runs that one).
MASKED_FORM = {
    SERVING_DEFAULT: SERVING_MASKED,
    ADAPT: ADAPT_MASKED,
    SERVING_PNG: SERVING_PNG_MASKED,
}
#: Inputs whose axis 1 is K, and the value that pads them (masked out).
K_AXIS_INPUTS = {SUPPORT_X: 0.0, SUPPORT_PNG: BLANK_PNG, SUPPORT_Y: 0, SUPPORT_MASK: False}
#: Inputs whose axis 1 is Q, and the value that pads them (cut from the outputs).
Q_AXIS_INPUTS = {QUERY_X: 0.0, QUERY_PNG: BLANK_PNG}
#: The inputs that hold a task's support points' x and its queries, in either form.
SUPPORT_INPUTS = (SUPPORT_X, SUPPORT_PNG)
QUERY_INPUTS = (QUERY_X, QUERY_PNG)
#: Outputs with a Q axis (cut back to a request's own Q) and with only B.
PER_QUERY_OUTPUTS = frozenset({PREDICTIONS, LOGITS, PROBABILITIES, CLASSES})
PER_TASK_OUTPUTS = frozenset({CONTEXT})


def label_message(num_classes: int) -> str:
    """What a classifier says of a label outside 0..N-1 (the boundary and the graph alike)."""
    return f"support_y must hold class labels 0..{num_classes - 1}"


#: Why an export made before the reason was written down needs every class.
PROTOTYPE_HEAD_REASON = "this model's output layer starts at each class's support mean"

#: Why an image classifier needs every class: its labels name only what they are shown.
IMAGE_CLASSES_REASON = "a label means the class of its support drawings, and each needs one"


def empty_class_message(num_classes: int, reason: str = PROTOTYPE_HEAD_REASON) -> str:
    """What a classifier that needs every class in its support set (a prototype head,
    LEO) says of a task whose support set leaves a class without a real point."""
    classes = f"0..{num_classes - 1}"
    return f"support_y must hold a real support point of every class {classes} ({reason})"


def empty_classes(support_y: np.ndarray, support_mask: np.ndarray | None, num_classes: int):
    """[(task, class)] of the classes without a real support point, task by task."""
    labels = np.asarray(support_y)
    real = np.ones(labels.shape, bool) if support_mask is None else np.asarray(support_mask, bool)
    missing = []
    for task in range(labels.shape[0]):
        present = set(labels[task][real[task]].tolist())
        missing += [(task, c) for c in range(num_classes) if c not in present]
    return missing


def check_labels(
    support_y: np.ndarray, support_mask: np.ndarray | None, num_classes: int
) -> str | None:
    """None if every real point's label is in 0..N-1, else the message to answer with."""
    labels = np.asarray(support_y)
    bad = (labels < 0) | (labels >= num_classes)
    if support_mask is not None:
        bad &= np.asarray(support_mask, bool)
    return label_message(num_classes) if bad.any() else None


def png_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG's header, or None if `data` does not start as a PNG
    does (the signature, then an IHDR chunk)."""
    if len(data) < 24 or data[:8] != PNG_MAGIC or data[12:16] != b"IHDR":
        return None
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a JPEG's start-of-frame segment, or None if `data` is not
    a JPEG whose segments lead to one."""
    if data[:3] != JPEG_MAGIC:
        return None
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # a fill byte
            at += 1
        elif marker == 0x01 or 0xD0 <= marker <= 0xD8:  # markers without a length
            at += 2
        elif marker in _JPEG_FRAMES:
            if at + 9 > len(data):
                return None
            height = int.from_bytes(data[at + 5 : at + 7], "big")
            return int.from_bytes(data[at + 7 : at + 9], "big"), height
        else:
            at += 2 + int.from_bytes(data[at + 2 : at + 4], "big")
    return None


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) of a PNG or JPEG from its header, or None if it is neither."""
    return png_size(data) or jpeg_size(data)


def check_pngs(name: str, values: np.ndarray) -> str | None:
    """None if every string of `values` starts as a PNG or JPEG no larger than
    MAX_PNG_SIDE on a side, else the message naming the first that does not, by its index."""
    flat = np.asarray(values, dtype=object).reshape(-1)
    shape = np.shape(values)
    for index, data in enumerate(flat):
        where = f"{name}{[int(i) for i in np.unravel_index(index, shape)]}" if shape else name
        size = image_size(data if isinstance(data, bytes) else b"")
        if size is None:
            return f"{where} is not a PNG or JPEG (expected the bytes of a .png or .jpg file)"
        if not (0 < size[0] <= MAX_PNG_SIDE and 0 < size[1] <= MAX_PNG_SIDE):
            return (
                f"{where} is a {size[0]} x {size[1]} image; each side must be "
                f"1..{MAX_PNG_SIDE} pixels"
            )
    return None
