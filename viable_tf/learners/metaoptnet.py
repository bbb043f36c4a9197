"""MetaOptNet's output layers (Lee et al. 2019; docs/method.md, "The paper's comparators"):
per episode a linear classifier on the support set's features is the solution of a convex
problem, differentiated through, and the logits are its scores on the query features times
a meta-learned scale. No inner gradient steps: a learner holds one as its head with
`num_inner_steps = 0`, as the Prototypical Network holds the prototype head.

- `RidgeHead` (R2-D2, Bertinetto et al. 2019): ridge regression onto the one-hot labels,
  W = X^T (X X^T + lambda I)^-1 Y, in closed form through the K x K system (Woodbury),
  lambda meta-learned.
- `SVMHead` (MetaOptNet-SVM): the Crammer-Singer multi-class SVM, solved in its dual,
  a QP over K * N numbers (`crammer_singer_dual`):

      min_alpha  1/2 sum_k ||sum_n alpha_nk x_n||^2 + eps/2 ||alpha||^2 - sum_n alpha_n,y_n
      s.t.       alpha_nk <= C [k = y_n],   sum_k alpha_nk = 0      (every n, k)

  w_k = sum_n alpha_nk x_n. The original solves it with a differentiable interior-point
  solver (qpth) and its code adds eps = 1 for stability; here it is solved in the graph by
  accelerated projected gradient (FISTA) for a fixed number of iterations at step 1 / L
  (L the largest eigenvalue of the Gram matrix plus eps), with the rows projected onto their
  constraint set exactly by a sort-based projection (Duchi et al. 2008's, for the caps
  C [k = y_n] and the zero sum). The meta-gradient flows through the unrolled iterations;
  every op is a standard TensorFlow op (matmul, sort, cumsum, eigvalsh), so an export stays
  servable. Tested against scipy's solver on small problems (tests/test_comparators.py).

Shape legend: B tasks, K support points, P points, H features, N classes.
"""

from __future__ import annotations

import math

import gin
import keras
import tensorflow as tf

from viable_tf.learners.heads import Head, learner_weight, require_classifier


def masked_one_hot(labels: tf.Tensor, mask: tf.Tensor, num_classes: int) -> tf.Tensor:
    """int labels [B, K], mask bool [B, K] -> one-hot [B, K, N], zero on padded points."""
    return tf.one_hot(labels, num_classes) * tf.cast(mask, tf.float32)[..., None]


def masked_features(features: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """features [B, K, H] with padded points' rows zero (they then take no part)."""
    return tf.where(mask[..., None], features, tf.zeros_like(features))


def ridge_weights(features: tf.Tensor, targets: tf.Tensor, l2: float | tf.Tensor) -> tf.Tensor:
    """W [B, H, N] = X^T (X X^T + l2 I)^-1 Y, X = features [B, K, H], Y = targets [B, K, N]:
    the ridge regression of Y on X, through a K x K system. A zero row of X and Y (a padded
    point) leaves W as without it."""
    gram = tf.matmul(features, features, transpose_b=True)  # [B, K, K]
    eye = tf.eye(tf.shape(gram)[-1], batch_shape=tf.shape(gram)[:1])
    dual = tf.linalg.solve(gram + l2 * eye, targets)  # [B, K, N]
    return tf.matmul(features, dual, transpose_a=True)  # [B, H, N]


def project_capped_zero_sum(values: tf.Tensor, ceiling: tf.Tensor) -> tf.Tensor:
    """The Euclidean projection of each row of `values` [..., N] onto {x <= ceiling, sum x
    = 0} (ceiling [..., N] >= 0): x = min(v - mu, ceiling), the shift mu found from the
    rows sorted by v - ceiling, where a point's cap starts to bind (the simplex projection
    of Duchi et al. 2008, in the SVM dual's own variables).

    It never subtracts a row from its cap: a free coordinate is v - mu with mu a mean of
    free values and caps that bind, so a row of values far smaller than its cap (the dual
    of a network whose features have grown, 1e-17 of C) keeps its digits, where
    C - (C - alpha) rounds to 0 even in float64."""
    n = tf.shape(values)[-1]
    order = tf.argsort(values - ceiling, axis=-1, direction="DESCENDING")  # [..., N]
    batch_dims = len(values.shape) - 1
    v = tf.gather(values, order, batch_dims=batch_dims)  # [..., N]
    cap = tf.gather(ceiling, order, batch_dims=batch_dims)
    # mu_j: the shift that gives sum 0 when the first j sorted coordinates sit at their cap.
    capped = tf.cumsum(cap, axis=-1, exclusive=True)  # [..., N]
    free = tf.cumsum(v, axis=-1, reverse=True)
    mu = (capped + free) / tf.cast(n - tf.range(n), values.dtype)  # [..., N]
    # The solution caps the coordinates whose v - cap >= mu; their count is that of j with
    # mu_j <= v_j - cap_j (a prefix). A row whose caps sum to 0 (padding) caps every one.
    count = tf.reduce_sum(tf.cast(mu <= v - cap, tf.int32), axis=-1, keepdims=True)
    shift = tf.gather(mu, tf.minimum(count, n - 1), batch_dims=batch_dims)  # [..., 1]
    return tf.minimum(values - shift, ceiling)


def crammer_singer_dual(
    gram: tf.Tensor,
    one_hot: tf.Tensor,
    mask: tf.Tensor,
    *,
    c: float,
    eps: float,
    num_iterations: int,
) -> tf.Tensor:
    """The dual of the Crammer-Singer SVM (module docstring), per task: gram [B, K, K],
    one_hot [B, K, N] of the labels, mask bool [B, K] -> alpha [B, K, N] (zero on padded
    points), after `num_iterations` of accelerated projected gradient.

    Solved in float64, as the original solves its QP in double precision. The step is 1 / L
    with L ~ K |x|^2, so alpha is about 1 / (K |x|^2): 1e-17 of C once a network without
    batch normalisation has grown its features to 1e8, as MetaOptNet-SVM's 5-way 5-shot
    run did. The projection keeps such an alpha (`project_capped_zero_sum`); written as
    alpha_n = C e_{y_n} - tau_n with tau_n in C times the simplex, it cancelled to exactly
    0 (w = 0, every logit equal, no meta-gradient: the run stopped learning for good)."""
    dtype = gram.dtype
    gram, one_hot = tf.cast(gram, tf.float64), tf.cast(one_hot, tf.float64)
    real = tf.cast(mask, tf.float64)[..., None]  # [B, K, 1]
    gram = gram * real * tf.transpose(real, [0, 2, 1])  # padded points see no one
    # L = the objective's curvature: the Gram matrix's largest eigenvalue, plus eps.
    lipschitz = tf.stop_gradient(tf.reduce_max(tf.linalg.eigvalsh(gram), axis=-1)) + eps
    step = (1.0 / lipschitz)[:, None, None]  # [B, 1, 1]
    ceiling = c * one_hot  # [B, K, N]

    def project(alpha):
        return project_capped_zero_sum(alpha, ceiling) * real  # padded rows stay zero

    def gradient(alpha):
        return tf.matmul(gram, alpha) + eps * alpha - one_hot  # [B, K, N]

    alpha = tf.zeros_like(one_hot)  # feasible: every constraint holds at 0
    momentum, t = alpha, 1.0
    for _ in range(num_iterations):
        stepped = project(momentum - step * gradient(momentum))
        t_next = (1.0 + (1.0 + 4.0 * t * t) ** 0.5) / 2.0
        momentum = stepped + ((t - 1.0) / t_next) * (stepped - alpha)
        alpha, t = stepped, t_next
    return tf.cast(alpha, dtype)


class _SolvedLinearHead(Head):
    """A per-task linear output layer solved from the support set's features, its logits
    times a meta-learned scale (MetaOptNet's). With `normalize`, the support and query
    features are divided by their l2 norms first: their scale is then fixed, where a
    network without batch normalisation can grow it until the head's constants (the
    SVM's C and eps, a fixed ridge lambda) no longer act."""

    network_output_layer = False
    per_task = True
    #: The head's name in refusals (RidgeHead, SVMHead).
    head_class = ""

    def __init__(self, scale: float = 1.0, normalize: bool = False) -> None:
        if not scale > 0:
            raise ValueError(f"scale must be > 0, got {scale}")
        self.initial_scale = float(scale)
        self.normalize = bool(normalize)
        self.scale = None

    def _features(self, features: tf.Tensor) -> tf.Tensor:
        """[B, P, H] as the solve sees them: l2-normalised where `normalize` (a zero row,
        a padded point's, stays zero)."""
        return tf.math.l2_normalize(features, axis=-1) if self.normalize else features

    def check(self, task_loss: str) -> None:
        require_classifier(self.head_class, task_loss)

    def build(self, learner) -> None:
        self.scale = learner_weight(
            learner,
            "head_scale",
            shape=(),
            initializer=keras.initializers.Constant(self.initial_scale),
            name="head_scale",
        )

    def empty(self, batch_size, network, num_classes):
        kernel = tf.zeros(tf.stack([batch_size, network.feature_dim, num_classes]))
        return (kernel,)

    def start(self, features, support_y, support_mask, num_classes):
        x = masked_features(self._features(features()), support_mask)  # [B, K, H]
        y = masked_one_hot(support_y, support_mask, num_classes)  # [B, K, N]
        return (self.solve(x, y, support_mask),)

    def solve(self, x: tf.Tensor, y: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        """Support features [B, K, H], one-hot labels [B, K, N] -> W [B, H, N]."""
        raise NotImplementedError

    def apply(self, outputs, state):
        (kernel,) = state
        return self.scale * tf.matmul(self._features(outputs), kernel)  # [B, P, N]


@gin.configurable
class RidgeHead(_SolvedLinearHead):
    """R2-D2's output layer: ridge regression of the one-hot labels on the support
    features, lambda = `l2`, meta-learned as log lambda with the rest where `learn_l2` (as
    R2-D2 does; MetaOptNet's ridge head keeps 50 fixed for its 16,000 ResNet features, far
    too strong for this project's 32 conv features), logits times a learned scale."""

    name = "ridge"
    head_class = "RidgeHead"  # as refusals name it
    method_without_steps = "r2d2"  # Bertinetto et al. 2019

    def __init__(
        self, l2: float = 1.0, learn_l2: bool = True, scale: float = 1.0, normalize: bool = False
    ) -> None:
        super().__init__(scale, normalize)
        if not l2 > 0:
            raise ValueError(f"l2 must be > 0, got {l2}")
        self.initial_l2 = float(l2)
        self.learn_l2 = learn_l2
        self.log_l2 = None

    def build(self, learner) -> None:
        super().build(learner)
        if self.learn_l2:
            self.log_l2 = learner_weight(
                learner,
                "head_log_l2",
                shape=(),
                initializer=keras.initializers.Constant(math.log(self.initial_l2)),
                name="head_log_l2",
            )

    def solve(self, x, y, mask):
        l2 = tf.exp(self.log_l2) if self.learn_l2 else self.initial_l2
        return ridge_weights(x, y, l2)


@gin.configurable
class SVMHead(_SolvedLinearHead):
    """MetaOptNet-SVM's output layer: the Crammer-Singer SVM on the support features
    (C = `c`, 0.1 in the original; its code's `eps` = 1), solved in the graph by
    `num_iterations` of accelerated projected gradient on the dual; `normalize` fixes the
    features' scale (l2), so that C and eps keep the meaning the paper gives them."""

    name = "svm"
    head_class = "SVMHead"
    method_without_steps = "metaoptnet_svm"  # Lee et al. 2019

    def __init__(
        self,
        c: float = 0.1,
        eps: float = 1.0,
        num_iterations: int = 50,
        scale: float = 1.0,
        normalize: bool = False,
    ) -> None:
        super().__init__(scale, normalize)
        if not c > 0 or not eps >= 0:
            raise ValueError(f"SVMHead needs c > 0 and eps >= 0, got c={c}, eps={eps}")
        if num_iterations < 1:
            raise ValueError(f"num_iterations must be >= 1, got {num_iterations}")
        self.c, self.eps, self.num_iterations = float(c), float(eps), int(num_iterations)

    def solve(self, x, y, mask):
        gram = tf.matmul(x, x, transpose_b=True)  # [B, K, K]
        alpha = crammer_singer_dual(
            gram, y, mask, c=self.c, eps=self.eps, num_iterations=self.num_iterations
        )  # [B, K, N]
        return tf.matmul(x, alpha, transpose_a=True)  # w_k = sum_n alpha_nk x_n: [B, H, N]
