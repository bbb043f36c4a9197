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

PREDICTIONS = "predictions"
LOGITS = "logits"
PROBABILITIES = "probabilities"
CLASSES = "classes"

SERVING_DEFAULT = "serving_default"
SERVING_MASKED = "serving_masked"
ADAPT = "adapt"
ADAPT_MASKED = "adapt_masked"
PREDICT = "predict"

#: Each plain signature's masked form (the batcher pads K and runs that one).
MASKED_FORM = {SERVING_DEFAULT: SERVING_MASKED, ADAPT: ADAPT_MASKED}
#: Inputs whose axis 1 is K, and the value that pads them (masked out).
K_AXIS_INPUTS = {SUPPORT_X: 0.0, SUPPORT_Y: 0, SUPPORT_MASK: False}
#: Inputs whose axis 1 is Q, and the value that pads them (cut from the outputs).
Q_AXIS_INPUTS = {QUERY_X: 0.0}
#: Outputs with a Q axis (cut back to a request's own Q) and with only B.
PER_QUERY_OUTPUTS = frozenset({PREDICTIONS, LOGITS, PROBABILITIES, CLASSES})
PER_TASK_OUTPUTS = frozenset({CONTEXT})


def regression_outputs() -> tuple[str, ...]:
    return (PREDICTIONS,)


def classification_outputs() -> tuple[str, ...]:
    return (LOGITS, PROBABILITIES, CLASSES)


def label_message(num_classes: int) -> str:
    """What a classifier says of a label outside 0..N-1 (the boundary and the graph alike)."""
    return f"support_y must hold class labels 0..{num_classes - 1}"


#: Why an export made before the reason was written down needs every class.
PROTOTYPE_HEAD_REASON = "this model's output layer starts at each class's support mean"


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
