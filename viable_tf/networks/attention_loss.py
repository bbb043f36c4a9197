"""attVIABLE's learned loss: every support point seen in the context of all the others.

The paper's authors name a loss network over the whole support set as future work
(docs/method.md §3, last point). Here the per-point features f_j (L_T, x, y_hat, y) are embedded,
pass through `num_blocks` set-transformer blocks, each

    h <- LayerNorm(h + MultiHeadAttention(h, h, mask))      (padded points masked out)
    h <- LayerNorm(h + Dense(activation(Dense(h))))

then a per-point head (an MLP with a bias-free output) gives one number per point, and
the inner loss is their mean over the real points. Without positional information the
blocks are permutation-equivariant, so the loss is invariant to the order of the
support set; a point attends to every real point, itself included. The cost is
O(K^2 W) per block (W the width) rather than the relation network's O(K^2 H^2).

One family of weights gets no meta-gradient, by construction: the key projection's
bias. q_j . (k_l + b) = q_j . k_l + q_j . b shifts every score of row j by the same
amount, and the softmax ignores that. (With ReLU units the ReLU biases would also get
none, as in the other loss networks; the default activation is smooth.)

Shape legend: B tasks, K support points, F per-point features, W width.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import keras
import tensorflow as tf

from viable_tf.configurable import keras_configurable
from viable_tf.networks import initializers
from viable_tf.ops import masked_mean


@keras_configurable
@keras.saving.register_keras_serializable(package="viable_tf")
class AttentionLossNetwork(keras.layers.Layer):
    """attVIABLE's loss network (see the module docstring)."""

    variant = "att"

    def __init__(
        self,
        *,
        width: int = 32,
        num_heads: int = 4,
        num_blocks: int = 2,
        hidden_units: Sequence[int] = (32,),
        activation: str = "tanh",
        output_activation: str | None = None,
        include_inputs: bool = True,
        init: str = "torch",
        norm: str = "post",
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if norm not in ("post", "pre"):
            raise ValueError(f"AttentionLossNetwork.norm must be 'post' or 'pre', got {norm!r}")
        self.norm = norm
        for name, value in (("width", width), ("num_heads", num_heads)):
            if value < 1:
                raise ValueError(f"AttentionLossNetwork.{name} must be >= 1, got {value}")
        if num_blocks < 0:
            raise ValueError(f"AttentionLossNetwork.num_blocks must be >= 0, got {num_blocks}")
        if width % num_heads:
            raise ValueError(
                f"AttentionLossNetwork.num_heads={num_heads} does not divide width={width}; "
                "expected a width that is a multiple of the number of heads"
            )
        self.hidden_units = tuple(int(u) for u in hidden_units)
        if any(u < 1 for u in self.hidden_units):
            raise ValueError(f"hidden_units must all be >= 1, got {self.hidden_units}")
        self.width, self.num_heads, self.num_blocks = width, num_heads, num_blocks
        self.activation = keras.activations.get(activation)
        self.output_activation = keras.activations.get(output_activation)
        self.include_inputs = include_inputs
        self.init = initializers.check_init(init)
        # Attributes, not lists, so that tf.train.Checkpoint tracks every sublayer.
        for i in range(num_blocks):
            setattr(
                self,
                f"attention_{i}",
                keras.layers.MultiHeadAttention(
                    num_heads,
                    key_dim=width // num_heads,
                    kernel_initializer=self._kernel(width, width),
                    bias_initializer=self._bias(width),
                    name=f"attention_{i}",
                ),
            )
            setattr(self, f"attention_norm_{i}", keras.layers.LayerNormalization(name=f"norm_a{i}"))
            setattr(self, f"feedforward_{i}", self._dense(width, width, self.activation, f"ff{i}"))
            setattr(self, f"feedforward_out_{i}", self._dense(width, width, None, f"ff_out{i}"))
            setattr(
                self, f"feedforward_norm_{i}", keras.layers.LayerNormalization(name=f"norm_f{i}")
            )
        if norm == "pre":  # pre-LN blocks leave the residual stream unnormalised
            self.final_norm = keras.layers.LayerNormalization(name="norm_final")
        widths = (width, *self.hidden_units)
        for i, (fan_in, units) in enumerate(itertools.pairwise(widths)):
            setattr(self, f"head_{i}", self._dense(units, fan_in, self.activation, f"head_{i}"))
        # No bias: a constant offset to the inner loss never gets a meta-gradient.
        self.head_output = self._dense(
            1, widths[-1], self.output_activation, "head_output", use_bias=False
        )

    def _kernel(self, fan_in: int, fan_out: int):
        return initializers.kernel_initializer(self.init, fan_in=fan_in, fan_out=fan_out)

    def _bias(self, fan_in: int):
        return initializers.bias_initializer(self.init, fan_in=fan_in)

    def _dense(self, units, fan_in, activation, name, use_bias=True) -> keras.layers.Dense:
        return keras.layers.Dense(
            units,
            activation=activation,
            use_bias=use_bias,
            kernel_initializer=self._kernel(fan_in, units),
            bias_initializer=self._bias(fan_in),
            name=name,
        )

    def build(self, input_shape) -> None:
        if self.built:
            return
        feature_dim = input_shape[-1]  # F
        self.embed = self._dense(self.width, feature_dim, None, "embed")
        self.embed.build((None, None, feature_dim))
        points = (None, None, self.width)
        for i in range(self.num_blocks):
            getattr(self, f"attention_{i}").build(points, points)
            for name in ("attention_norm", "feedforward", "feedforward_out", "feedforward_norm"):
                getattr(self, f"{name}_{i}").build(points)
        if self.norm == "pre":
            self.final_norm.build(points)
        width = self.width
        for i, units in enumerate(self.hidden_units):
            getattr(self, f"head_{i}").build((None, None, width))
            width = units
        self.head_output.build((None, None, width))
        self.built = True

    def point_losses(self, features: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        """features [B, K, F], mask bool [B, K] -> one learned loss per point [B, K]."""
        h = self.embed(features)  # [B, K, W]
        attend = tf.logical_and(mask[:, :, None], mask[:, None, :])  # [B, K, K]: real pairs
        for i in range(self.num_blocks):
            attention = getattr(self, f"attention_{i}")
            feedforward = getattr(self, f"feedforward_{i}")
            feedforward_out = getattr(self, f"feedforward_out_{i}")
            attention_norm = getattr(self, f"attention_norm_{i}")
            feedforward_norm = getattr(self, f"feedforward_norm_{i}")
            if self.norm == "post":
                h = attention_norm(h + attention(h, h, attention_mask=attend))  # [B, K, W]
                h = feedforward_norm(h + feedforward_out(feedforward(h)))
            else:
                normed = attention_norm(h)
                h = h + attention(normed, normed, attention_mask=attend)
                h = h + feedforward_out(feedforward(feedforward_norm(h)))
        if self.norm == "pre":
            h = self.final_norm(h)
        for i in range(len(self.hidden_units)):
            h = getattr(self, f"head_{i}")(h)
        return tf.squeeze(self.head_output(h), -1)  # [B, K]

    def call(self, features: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        """features [B, K, F], mask bool [B, K] -> inner loss per task [B]."""
        return masked_mean(self.point_losses(features, mask), mask, axis=1)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            width=self.width,
            num_heads=self.num_heads,
            num_blocks=self.num_blocks,
            hidden_units=list(self.hidden_units),
            activation=keras.activations.serialize(self.activation),
            output_activation=keras.activations.serialize(self.output_activation),
            include_inputs=self.include_inputs,
            init=self.init,
            norm=self.norm,
        )
        return config
