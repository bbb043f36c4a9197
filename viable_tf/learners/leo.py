"""LEO, Latent Embedding Optimization (Rusu et al., ICLR 2019), behind the learner
contract; VIABLE on LEO, the extension the VIABLE paper names, is `viable.LEOVIABLE`.

Written from the paper and read against its public code (google-deepmind/leo, TF 1.12);
the same computation in TensorFlow 2 / Keras 3, float32. Per task, with support
embeddings x_j [D], labels y_j in 0..N-1 and L latents:

    h_j   = dropout(x_j) W_enc                              (encoder, [D, L], no bias)
    r_j   = mean_k g([h_j; h_k])                            (relation net over the ordered
                                                             pairs of real support points:
                                                             3 layers of 2L, ReLU between,
                                                             no biases)
    mu_c, s_c = mean of r_j over class c's real points      (a Gaussian over z_c [L])
    z_c   ~ N(mu_c, sigma(s_c)),   sigma(s) = max(exp(s) - 1, 1e-10)
    w_c   ~ N(m_c, sigma'(u_c)),   [m_c; u_c] = z_c W_dec   (decoder, [L, 2D], no bias;
                                                             sigma' offset by the Glorot
                                                             scale sqrt(2 / (N + D)))
    logit_c(x) = dropout(x) . w_c

Inner loop: `num_latent_steps` steps z <- z - alpha_z * dL/dz (alpha_z [L] meta-learned;
the weights re-decoded from z at every step), then `num_finetuning_steps` steps
w <- w - alpha_w * dL/dw (alpha_w [D] meta-learned). L is the support cross-entropy
*summed* over the real points, as the public code's gradient of its per-point losses.
Outer objective per meta-batch: mean over tasks of (query cross-entropy + beta KL +
gamma ||stop_grad(z_final) - z_0||^2) + lambda_1 l2 + lambda_2 orthogonality, with
KL = mean_{c, l} [log q(z_c) - log N(z_c; 0, 1)] at the sampled z, the encoder penalty
a mean over classes and latents, l2 = sum of ||W||^2 / 2 over the encoder, relation and
decoder kernels, and the orthogonality penalty the mean squared difference between the
decoder rows' correlation matrix and I.

Samples versus means, as the public code: `meta_loss` (meta-training) samples z and w,
with dropout on every use of the embeddings, its noise handed to `_adapt` and carried
by the states it adapts (`AdaptedState.noise`, which `predict` reads); `adapt` and
`predict` (validation, test, export, serving) have no noise: the means and no dropout,
so a served answer is deterministic.
Where the public code draws K weight samples per class (one per support point) and
averages their logits, one sample per class is drawn here. The training noise is a pure
function of the meta-batch it is drawn for (`batch_seed`): a resumed or XLA-compiled run
draws the same.

A class with no real support point has no code: its logit is EMPTY_CLASS_BIAS (never
predicted); an export refuses such a request (`every_class_reason`).

Shape legend: B tasks, K support (padded), Q query, D embedding, N way, L latents.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from viable_tf import ops
from viable_tf.configurable import keras_configurable
from viable_tf.learners import prototypes
from viable_tf.learners.base import AdaptedState, Capabilities, Learner
from viable_tf.learners.gradient import gradient_step
from viable_tf.learners.leo_noise import Noise, batch_seed
from viable_tf.learners.prototypes import EMPTY_CLASS_BIAS
from viable_tf.ops import masked_mean, real_labels
from viable_tf.tasks.base import TaskBatch

#: sigma(s) = max(exp(s) - 1 + offset, MIN_STDDEV), as the public code.
MIN_STDDEV = 1e-10


def summed(per_task_mean: tf.Tensor, support_mask: tf.Tensor) -> tf.Tensor:
    """A per-task mean over the real support points [B] as their sum: LEO's inner loss
    is summed (see `LEO.inner_loss`), the shared losses are means."""
    return per_task_mean * tf.reduce_sum(tf.cast(support_mask, tf.float32), axis=1)


def _check(name: str, value, low, *, inclusive: bool = True) -> None:
    if not (value >= low if inclusive else value > low):
        raise ValueError(f"LEO.{name} must be {'>=' if inclusive else '>'} {low}, got {value}")


@keras_configurable
class LEO(Learner):
    """LEO: meta-learned encoder, relation network and decoder; adapts latent codes, then
    the decoded classifier weights. The adapted state's head is (weights [B, N, D], class
    bias [B, N]) (0 for a class with support points, EMPTY_CLASS_BIAS for one without)."""

    base_name = "leo"

    def __init__(
        self,
        *,
        input_dim: int,
        output_dim: int,
        num_latents: int = 64,
        num_latent_steps: int = 5,
        num_finetuning_steps: int = 5,
        inner_lr: float = 1.0,
        finetuning_lr: float = 0.001,
        dropout_rate: float = 0.5,
        kl_weight: float = 1e-3,
        encoder_penalty_weight: float = 1e-9,
        l2_penalty_weight: float = 1e-8,
        orthogonality_penalty_weight: float = 1e-3,
        first_order: bool = False,
        task_loss: str = "cross_entropy",
    ) -> None:
        _check("num_latents", num_latents, 1)
        _check("num_latent_steps", num_latent_steps, 0)
        _check("num_finetuning_steps", num_finetuning_steps, 0)
        _check("finetuning_lr", finetuning_lr, 0, inclusive=False)
        for name, value in (
            ("kl_weight", kl_weight),
            ("encoder_penalty_weight", encoder_penalty_weight),
            ("l2_penalty_weight", l2_penalty_weight),
            ("orthogonality_penalty_weight", orthogonality_penalty_weight),
            ("dropout_rate", dropout_rate),
        ):
            _check(name, value, 0)
        if not dropout_rate < 1:
            raise ValueError(f"LEO.dropout_rate must be < 1, got {dropout_rate}")
        if task_loss != "cross_entropy":
            raise ValueError(
                f"LEO is a classifier: task_loss must be 'cross_entropy', got {task_loss!r}"
            )
        super().__init__(input_dim=input_dim, output_dim=output_dim, task_loss=task_loss)
        _check("inner_lr", inner_lr, 0, inclusive=False)
        self.capabilities = Capabilities(
            adapted_parts=("head",),  # the decoded classifier, from latent codes
            every_class_reason="this model decodes each class's weights from its support points",
        )
        self.num_inner_steps = num_latent_steps + num_finetuning_steps  # S, both kinds
        self.inner_lr = float(inner_lr)  # alpha_z's start
        self.first_order = first_order
        # The per-point loss its inner loops sum: the task loss (what a residual learned
        # loss adds to, loss_features.Residual).
        self.inner_task_loss = self.task_loss
        self.num_latents = num_latents  # L
        self.num_latent_steps = num_latent_steps
        self.num_finetuning_steps = num_finetuning_steps
        self.finetuning_lr = float(finetuning_lr)
        self.dropout_rate = float(dropout_rate)
        self.kl_weight = float(kl_weight)  # beta
        self.encoder_penalty_weight = float(encoder_penalty_weight)  # gamma
        self.l2_penalty_weight = float(l2_penalty_weight)  # lambda_1
        self.orthogonality_penalty_weight = float(orthogonality_penalty_weight)  # lambda_2
        latents, width = num_latents, 2 * num_latents

        def kernel(shape, name):
            return self.add_weight(
                shape=shape, initializer=keras.initializers.GlorotUniform(), name=name
            )

        # Attributes, not a list, so that tf.train.Checkpoint tracks them.
        self.encoder_kernel = kernel((input_dim, latents), "encoder")
        self.relation_0 = kernel((width, width), "relation_0")  # on [h_j; h_k]
        self.relation_1 = kernel((width, width), "relation_1")
        self.relation_2 = kernel((width, width), "relation_2")
        self.decoder_kernel = kernel((latents, 2 * input_dim), "decoder")
        self.latent_lr = self.add_weight(
            shape=(latents,), initializer=keras.initializers.Constant(inner_lr), name="latent_lr"
        )  # alpha_z
        self.finetuning_lr_weights = self.add_weight(
            shape=(input_dim,),
            initializer=keras.initializers.Constant(finetuning_lr),
            name="finetuning_lr",
        )  # alpha_w

    @property
    def kernels(self) -> list:
        """The weights the l2 penalty covers (not the learning rates)."""
        return [
            self.encoder_kernel,
            self.relation_0,
            self.relation_1,
            self.relation_2,
            self.decoder_kernel,
        ]

    def hparams(self) -> dict[str, str | int | float | bool]:
        return {
            # The columns every learner's results share, at LEO's values: no context,
            # no prediction network of its own ('custom'), no head but its decoded
            # classifier ('linear'), its inner loss the task loss (summed).
            "method": self.method_name,
            "context_dim": 0,
            "inner_steps": self.num_inner_steps,
            "inner_lr": self.inner_lr,
            "first_order": self.first_order,
            "init": "custom",
            "activation": "none",
            "head": "linear",
            "inner_task_loss": self.task_loss_name,
            "prototype": "mean",
            "num_latents": self.num_latents,
            "latent_steps": self.num_latent_steps,
            "finetuning_steps": self.num_finetuning_steps,
            "finetuning_lr": self.finetuning_lr,
            "dropout_rate": self.dropout_rate,
            "kl_weight": self.kl_weight,
            "encoder_penalty_weight": self.encoder_penalty_weight,
            "l2_penalty_weight": self.l2_penalty_weight,
            "orthogonality_penalty_weight": self.orthogonality_penalty_weight,
        }

    # -- the model -----------------------------------------------------------------

    def _dropout(self, x: tf.Tensor, noise: Noise | None) -> tf.Tensor:
        return x if noise is None else noise.dropout(x, self.dropout_rate)

    def relation(self, codes: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        """codes [B, K, L], mask [B, K] -> r_j = mean over real k of g([h_j; h_k]),
        [B, K, 2L]. The first layer is computed per point: [h_j; h_k] W = h_j W_a + h_k W_b."""
        latents = self.num_latents
        first = tf.matmul(codes, self.relation_0[:latents])  # [B, K, 2L]
        second = tf.matmul(codes, self.relation_0[latents:])
        hidden = ops.relu(first[:, :, None, :] + second[:, None, :, :])  # [B, K, K, 2L]
        hidden = ops.relu(tf.matmul(hidden, self.relation_1))
        pairs = tf.matmul(hidden, self.relation_2)  # [B, K, K, 2L], last layer linear
        pair_mask = tf.logical_and(mask[:, :, None], mask[:, None, :])  # [B, K, K]
        return masked_mean(pairs, pair_mask[..., None], axis=2)

    def encode(self, support_x, support_y, support_mask, noise: Noise | None = None):
        """The support set -> (the codes' Gaussian per class: mean, s [B, N, L]; real
        points per class [B, N]); with dropout on the inputs under training `noise`."""
        x = tf.where(support_mask[..., None], support_x, tf.zeros_like(support_x))
        codes = tf.matmul(self._dropout(x, noise), self.encoder_kernel)  # [B, K, L]
        per_point = self.relation(codes, support_mask)  # [B, K, 2L]
        members = prototypes.class_members(support_y, support_mask, self.output_dim)  # [B,K,N]
        counts = tf.reduce_sum(members, axis=1)  # [B, N]
        per_point = tf.where(support_mask[..., None], per_point, tf.zeros_like(per_point))
        params = prototypes.class_means(members, per_point)  # [B, N, 2L]
        mean, s = tf.split(params, 2, axis=-1)
        return mean, s, counts

    def _sample(self, mean, s, offset: float, noise: Noise | None):
        """z ~ N(mean, sigma(s)) under training `noise`, else the mean; and log q(z) - log
        N(z; 0, 1) elementwise (zero when not sampled)."""
        if noise is None:
            return mean, tf.zeros_like(mean)
        stddev = tf.maximum(tf.exp(s) - (1.0 - offset), MIN_STDDEV)
        eps = noise.normal(tf.shape(mean))
        z = mean + stddev * eps
        log_ratio = -tf.math.log(stddev) - 0.5 * tf.square(eps) + 0.5 * tf.square(z)
        return z, log_ratio

    def decode(self, latents: tf.Tensor, noise: Noise | None = None) -> tf.Tensor:
        """Codes [B, N, L] -> classifier weights [B, N, D] (sampled under training `noise`)."""
        mean, s = tf.split(tf.matmul(latents, self.decoder_kernel), 2, axis=-1)
        glorot = math.sqrt(2.0 / (self.output_dim + self.input_dim))
        weights, _ = self._sample(mean, s, offset=glorot, noise=noise)
        return weights

    def initial_state(self, batch_size: tf.Tensor) -> AdaptedState:
        """No support set: no class has a code, every class is empty (uniform)."""
        weights = tf.zeros(tf.stack([batch_size, self.output_dim, self.input_dim]))
        class_bias = tf.fill(tf.stack([batch_size, self.output_dim]), EMPTY_CLASS_BIAS)
        return AdaptedState(head=(weights, class_bias))

    def start_state(self, support_x, support_y, support_mask) -> AdaptedState:
        """Before adaptation: `initial_state`, every class empty."""
        return self.initial_state(tf.shape(support_x)[0])

    def predict(self, state: AdaptedState, x: tf.Tensor) -> tf.Tensor:
        weights, class_bias = state.head
        x = self._dropout(x, state.noise)  # while meta-training: the state's noise
        return tf.einsum("bpd,bnd->bpn", x, weights) + class_bias[:, None, :]

    # -- the inner loop --------------------------------------------------------------

    def summed_task_loss(self, state, support_x, support_y, support_mask) -> tf.Tensor:
        """The task loss summed over each task's real support points [B] (the public
        code differentiates its per-point losses, i.e. their sum)."""
        return summed(self.support_loss(state, support_x, support_y, support_mask), support_mask)

    def inner_loss(
        self, state, support_x, support_y, support_mask, *, step=0, query_x=None
    ) -> tf.Tensor:
        """LEO's inner loss [B]: the summed task loss (the same at every step)."""
        return self.summed_task_loss(state, support_x, support_y, support_mask)

    def latent_loss(self, state, support_x, support_y, support_mask) -> tf.Tensor:
        """The loss of the latent-space steps [B]."""
        return self.inner_loss(state, support_x, support_y, support_mask)

    def finetuning_loss(self, state, support_x, support_y, support_mask) -> tf.Tensor:
        """The loss of the fine-tuning steps [B]: the summed task loss."""
        return self.summed_task_loss(state, support_x, support_y, support_mask)

    def _step(self, value, loss_fn, lr):
        """One inner step of one tensor (gradient.gradient_step)."""
        (stepped,), loss = gradient_step(
            [value], lambda values: loss_fn(values[0]), [lr], first_order=self.first_order
        )
        return stepped, loss

    def _adapt(self, support_x, support_y, support_mask, noise: Noise | None = None):
        """(state, inner losses [S, B], KL [B], encoder penalty [B]); meta-training passes
        its `noise`, which the adapted states carry (dropout, sampled codes and weights)."""
        support_y = real_labels(support_y, support_mask)
        support = (support_x, support_y, support_mask)
        mean, s, counts = self.encode(*support, noise=noise)
        real_class = counts > 0  # [B, N]
        class_bias = tf.where(real_class, tf.zeros_like(counts), EMPTY_CLASS_BIAS)
        start, log_ratio = self._sample(mean, s, offset=0.0, noise=noise)
        kl = masked_mean(tf.reduce_mean(log_ratio, axis=-1), real_class, axis=1)  # [B]
        losses = []
        latents = start
        for _ in range(self.num_latent_steps):
            latents, loss = self._step(
                latents,
                lambda z: self.latent_loss(
                    AdaptedState(head=(self.decode(z, noise), class_bias), noise=noise), *support
                ),
                self.latent_lr,
            )
            losses.append(loss)
        weights = self.decode(latents, noise)
        for _ in range(self.num_finetuning_steps):
            weights, loss = self._step(
                weights,
                lambda w: self.finetuning_loss(
                    AdaptedState(head=(w, class_bias), noise=noise), *support
                ),
                self.finetuning_lr_weights,
            )
            losses.append(loss)
        moved = tf.reduce_mean(tf.square(tf.stop_gradient(latents) - start), axis=-1)
        penalty = masked_mean(moved, real_class, axis=1)  # [B]
        stacked = tf.stack(losses) if losses else tf.zeros([0, tf.shape(support_x)[0]])
        return AdaptedState(head=(weights, class_bias), noise=noise), stacked, kl, penalty

    def adapt(self, support_x, support_y, support_mask, *, query_x=None, return_inner_losses=False):
        state, losses, _, _ = self._adapt(support_x, support_y, support_mask)
        return (state, losses) if return_inner_losses else state

    # -- the outer objective ---------------------------------------------------------

    @property
    def penalized_weights(self) -> tuple:
        return tuple(self.kernels)

    def l2_penalty(self) -> tf.Tensor:
        """sum over the encoder, relation and decoder kernels of ||W||^2 / 2."""
        return tf.add_n([tf.nn.l2_loss(w) for w in self.kernels])

    def orthogonality_penalty(self) -> tf.Tensor:
        """Mean squared difference between the decoder rows' correlation matrix and I."""
        w = self.decoder_kernel  # [L, 2D]
        norms = tf.norm(w, axis=1, keepdims=True) + 1e-32
        correlation = tf.matmul(w, w, transpose_b=True) / tf.matmul(norms, norms, transpose_b=True)
        return tf.reduce_mean(tf.square(correlation - tf.eye(self.num_latents)))

    def meta_loss(self, batch: TaskBatch) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        noise = Noise(batch_seed(batch))  # this meta-update's training noise
        state, losses, kl, penalty = self._adapt(
            batch.support_x, batch.support_y, batch.support_mask, noise=noise
        )
        query = self.query_loss(batch, state)  # [B], with the state's dropout
        per_task = query + self.kl_weight * kl + self.encoder_penalty_weight * penalty
        regularisers = (
            self.l2_penalty_weight * self.l2_penalty()
            + self.orthogonality_penalty_weight * self.orthogonality_penalty()
        )
        metrics = {"kl": tf.reduce_mean(kl), "encoder_penalty": tf.reduce_mean(penalty)}
        if self.num_inner_steps:
            metrics["inner_loss_pre"] = tf.reduce_mean(losses[0])
        return tf.reduce_mean(per_task) + regularisers, metrics
