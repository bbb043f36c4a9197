"""Matching Networks' output layer (Vinyals et al. 2016; docs/method.md, "The paper's
comparators"): a query's label distribution is an attention over the support set,

    p(y | x, S) = sum_i a(x, x_i) onehot(y_i),   a = softmax_i cos(f(x), g(x_i)) / tau,

so the logits are log p, computed as each class's log-sum-exp of the attention scores
(the softmax of those logits is p exactly, and a class without support points gets none).
Without full context embeddings f = g = the network's features. With them
(`full_context=True`), g(x_i, S) = g'(x_i) + the two directions of a bidirectional LSTM
over the support features in their order, and f(x, S) is an attention LSTM that reads the
support set for `processing_steps` steps:

    h_hat, c = LSTM([f'(x); r], (h, c));  h = h_hat + f'(x);  r = sum_i softmax_i(h . g_i) g_i

No inner gradient steps: a learner holds it as its head with `num_inner_steps = 0`.

Shape legend: B tasks, K support points, P points, H features, N classes.
"""

from __future__ import annotations

import gin
import keras
import tensorflow as tf

from viable_tf.learners.heads import Head, require_classifier
from viable_tf.learners.metaoptnet import masked_one_hot

#: A score that no real support point's reaches: a padded point's, or a class's without one.
NO_SCORE = -1e9


@gin.configurable
class MatchingHead(Head):
    """Matching Networks' attention over the support set as the output layer.

    Args:
      temperature: tau, the cosine's divisor (1: the paper's plain cosine).
      full_context: the full context embeddings (bidirectional LSTM g, attention LSTM f).
      processing_steps: the attention LSTM's steps over the support set.
    """

    name = "matching"
    method_without_steps = "matching"
    network_output_layer = False
    per_task = True

    def __init__(
        self, temperature: float = 1.0, full_context: bool = False, processing_steps: int = 5
    ) -> None:
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if processing_steps < 1:
            raise ValueError(f"processing_steps must be >= 1, got {processing_steps}")
        self.temperature = float(temperature)
        self.full_context = full_context
        self.processing_steps = int(processing_steps)
        self.support_lstm = self.query_lstm = None
        if full_context:
            self.name = self.method_without_steps = "matching_fce"

    def check(self, task_loss: str) -> None:
        require_classifier("MatchingHead", task_loss)

    def build_after_network(self, learner, network) -> None:
        if not self.full_context:
            return
        units = network.feature_dim  # H: g and f keep the features' size
        # Attributes of the learner, so that checkpoints and exports hold their weights.
        learner.fce_support_lstm = self.support_lstm = keras.layers.Bidirectional(
            keras.layers.LSTM(units, return_sequences=True), merge_mode="sum"
        )
        learner.fce_query_lstm = self.query_lstm = keras.layers.LSTMCell(units)
        self.support_lstm.build((None, None, units))
        self.query_lstm.build((None, 2 * units))

    def empty(self, batch_size, network, num_classes):
        features = tf.zeros(tf.stack([batch_size, 0, network.feature_dim]))
        return (features, tf.zeros(tf.stack([batch_size, 0, num_classes])))

    def start(self, features, support_y, support_mask, num_classes):
        g = features()  # [B, K, H]
        if self.full_context:
            g = g + self.support_lstm(g, mask=support_mask)  # skip + both directions
        one_hot = masked_one_hot(support_y, support_mask, num_classes)  # [B, K, N]
        return (g, one_hot)

    def apply(self, outputs, state):
        g, one_hot = state  # [B, K, H], [B, K, N]
        real = tf.reduce_any(one_hot > 0, axis=-1)  # [B, K]
        f = self._read(outputs, g, real) if self.full_context else outputs  # [B, P, H]
        cosine = tf.matmul(
            tf.math.l2_normalize(f, -1), tf.math.l2_normalize(g, -1), transpose_b=True
        )  # [B, P, K]
        scores = cosine / self.temperature
        # Per class n, log sum_{i of class n} exp(score_i): [B, P, K, N] -> [B, P, N].
        of_class = (one_hot > 0)[:, None, :, :]  # [B, 1, K, N]
        by_class = tf.where(of_class, scores[..., None], NO_SCORE)
        return tf.reduce_logsumexp(by_class, axis=2)

    def _read(self, queries: tf.Tensor, g: tf.Tensor, real: tf.Tensor) -> tf.Tensor:
        """The attention LSTM: queries [B, P, H] read the support's g [B, K, H] for
        `processing_steps` steps -> f [B, P, H]."""
        shape = tf.shape(queries)
        units = queries.shape[-1]
        x = tf.reshape(queries, [-1, units])  # [B P, H]
        h = tf.zeros_like(x)
        c = tf.zeros_like(x)
        readout = tf.zeros_like(x)
        for _ in range(self.processing_steps):
            h_hat, (h, c) = self.query_lstm(tf.concat([x, readout], -1), [h, c])
            h = h_hat + x  # [B P, H]
            scores = tf.einsum("bph,bkh->bpk", tf.reshape(h, shape), g)  # [B, P, K]
            scores = tf.where(real[:, None, :], scores, NO_SCORE)
            attention = tf.nn.softmax(scores, axis=-1)
            readout = tf.reshape(tf.matmul(attention, g), [-1, units])  # [B P, H]
        return tf.reshape(h, shape)
