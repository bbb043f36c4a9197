"""The prototype head: a classifier's output layer that starts, per task, at the nearest
class mean of its support set in the network's own feature space (Proto-MAML,
Triantafillou et al., Meta-Dataset, ICLR 2020).

For task b with penultimate features g(x) [H] and support class means mu_c [H] (real
points only, masks respected):

    w_c = 2 mu_c,   b_c = -||mu_c||^2,   logit_c(x) = w_c . g(x) + b_c
                                                    = ||g(x)||^2 - ||g(x) - mu_c||^2

so before any inner step the argmax is the nearest class mean (squared Euclidean). The
meta-gradient flows through the means into the network. A learner chooses it with
`head=PrototypeHead()` (learners/heads.py); the paper's
plain output layer is the default.

The logits may be divided by a temperature tau (`PrototypeHead.temperature`, default 1:
the plain class-mean logits), meta-learned as log tau with `learn_temperature=True`. At one shot
every support point is its class mean, the softmax over squared distances between class
means is saturated and the support loss has almost no gradient (docs/method.md §7); a
larger tau gives the inner loop one again.

A class with no real support point has no mean: its weights are zero and its bias
EMPTY_CLASS_BIAS, so it is never predicted (and its probability is 0). An export of a
prototype-head model refuses such a request instead (signature.empty_class_message).
"""

from __future__ import annotations

import tensorflow as tf

#: How a class's support features become its prototype: their mean (Proto-MAML), their
#: geometric median, or their mean weighted by how alike each is to the others (the robust
#: aggregations TraNFS compares, docs/method.md §8).
PROTOTYPES = ("mean", "median", "weighted")
MEDIAN_ITERATIONS = 10  # Weiszfeld steps from the mean
MEDIAN_EPSILON = 1e-6  # a distance below which a point's weight stops growing
#: The bias of a class without support points: far below any real class's logit.
EMPTY_CLASS_BIAS = -1e9


def class_members(
    labels: tf.Tensor, mask: tf.Tensor, num_classes: int, dtype: tf.DType = tf.float32
) -> tf.Tensor:
    """labels int [B, K], mask bool [B, K] -> members [B, K, N]: 1 where a real point
    is of class n (labels outside 0..N-1 are of no class)."""
    return tf.one_hot(labels, num_classes, dtype=dtype) * tf.cast(mask, dtype)[..., None]


def class_counts(labels: tf.Tensor, mask: tf.Tensor, num_classes: int) -> tf.Tensor:
    """labels int [B, K], mask bool [B, K] -> real support points per class [B, N]."""
    return tf.reduce_sum(class_members(labels, mask, num_classes), axis=1)


def class_means(members: tf.Tensor, features: tf.Tensor) -> tf.Tensor:
    """members [B, K, N] (a point's weight in each class), features [B, K, H] ->
    [B, N, H]: each class's weighted mean (0 for a class with no weight). The one place
    class means are computed (the prototype head's prototypes, LEO's class codes)."""
    sums = tf.einsum("bkn,bkh->bnh", members, features)  # [B, N, H]
    return sums / tf.maximum(tf.reduce_sum(members, axis=1), 1e-12)[..., None]


def check_prototype(prototype: str) -> str:
    if prototype not in PROTOTYPES:
        raise ValueError(f"prototype must be one of {PROTOTYPES}, got {prototype!r}")
    return prototype


def class_prototypes(features: tf.Tensor, members: tf.Tensor, prototype: str = "mean") -> tf.Tensor:
    """features [B, K, H] (padding zeroed), members [B, K, N] one-hot of each real point's
    class -> prototypes [B, N, H]:

    mean: the class mean. median: the geometric median (the point minimising the summed
    distance to the class's points), by MEDIAN_ITERATIONS Weiszfeld steps from the mean
    (weights 1 / max(distance, MEDIAN_EPSILON)); one far point moves it by a bounded
    amount. weighted: the mean weighted by each point's mean cosine similarity to the
    other points of its class, clipped at 0 (a point unlike the rest counts little; one
    shot, or no positive similarity, gives the plain mean)."""
    means = class_means(members, features)  # [B, N, H]
    if prototype == "mean":
        return means
    if prototype == "median":
        median = means
        for _ in range(MEDIAN_ITERATIONS):
            # each point's distance to its own class's current median only: [B, K] (not
            # to every class's, [B, K, N, H]: N times the work for weights that are 0)
            own = tf.einsum("bkn,bnh->bkh", members, median)  # [B, K, H]
            gap = features - own
            distance = tf.sqrt(tf.reduce_sum(tf.square(gap), -1) + MEDIAN_EPSILON**2)
            median = class_means(members / distance[..., None], features)
        return median
    unit = tf.math.l2_normalize(features, axis=-1)  # [B, K, H]
    cosine = tf.matmul(unit, unit, transpose_b=True)  # [B, K, K]
    same = tf.matmul(members, members, transpose_b=True)  # [B, K, K]: 1 if same class
    others = same - tf.linalg.diag(tf.linalg.diag_part(same))  # without the point itself
    count = tf.reduce_sum(others, axis=2)  # [B, K]
    similarity = tf.reduce_sum(cosine * others, axis=2) / tf.maximum(count, 1.0)  # [B, K]
    weight = tf.where(count > 0, tf.nn.relu(similarity), tf.ones_like(similarity))  # [B, K]
    weighted = class_means(members * weight[..., None], features)
    has_weight = tf.reduce_sum(members * weight[..., None], axis=1) > 0  # [B, N]
    return tf.where(has_weight[..., None], weighted, means)


def prototype_head(
    features: tf.Tensor,
    labels: tf.Tensor,
    mask: tf.Tensor,
    num_classes: int,
    prototype: str = "mean",
) -> tuple[tf.Tensor, tf.Tensor]:
    """features [B, K, H], labels int [B, K], mask bool [B, K] -> (kernel [B, H, N],
    bias [B, N]): w_c = 2 mu_c, b_c = -||mu_c||^2 over each task's real points, mu_c the
    class's prototype (`class_prototypes`: its mean unless said otherwise)."""
    # Padded points may hold anything (even inf): zeroed, not multiplied by 0.
    features = tf.where(mask[..., None], features, tf.zeros_like(features))
    members = class_members(labels, mask, num_classes, features.dtype)  # [B, K, N]
    counts = tf.reduce_sum(members, axis=1)  # [B, N]
    means = class_prototypes(features, members, prototype)  # [B, N, H]
    kernel = 2.0 * tf.transpose(means, [0, 2, 1])  # [B, H, N]
    bias = -tf.reduce_sum(tf.square(means), axis=-1)  # [B, N]
    bias = tf.where(counts > 0, bias, tf.fill(tf.shape(bias), EMPTY_CLASS_BIAS))
    return kernel, bias


def apply_head(
    features: tf.Tensor, kernel: tf.Tensor, bias: tf.Tensor, tau: tf.Tensor | float | None = None
) -> tf.Tensor:
    """features [B, P, H], kernel [B, H, N], bias [B, N] -> logits [B, P, N] / tau (None:
    not divided)."""
    logits = tf.matmul(features, kernel) + bias[:, None, :]
    return logits if tau is None else logits / tau
