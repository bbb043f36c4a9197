"""Learned inner-loop losses Lhat_psi of VIABLE (docs/method.md §3).

Both networks map per-point features of a support set to one inner loss per
task. The per-point features f_j are built by the learner: (L_T(y_hat_j, y_j),
y_hat_j, y_j) and, for the relation network, also x_j.

- `SimpleLossNetwork` (simVIABLE): an MLP on each f_j; the inner loss is the mean
  over the task's real support points.
- `RelationLossNetwork` (relVIABLE): an MLP on every ordered pair [f_j; f_k],
  j = k included; the inner loss is the mean over the K*K real pairs. Padded
  points take part in no pair.

The output layer has no bias, on purpose: a constant offset to the inner loss
does not change d/dphi, so such a bias would never receive a meta-gradient.

Weights start as in CAVIA's PyTorch code (`init='torch'`, docs/method.md §3.1): kernels and
biases uniform in ±1/sqrt(fan_in), fan_in = 2F for the relation network's first
layer. With Keras' zero biases (`init='keras'`) a ReLU loss network is positively
homogeneous and, as its biases get no meta-gradient, stays so through meta-training.

`output_init='zeros'` starts the output layer at zero, so the learned loss starts flat
(Lhat = 0: the first inner steps change nothing) while the hidden layers keep `init`'s
draw. End to end on images a random loss network's first inner steps were uninformative
(their gradient on phi at cos ~0.05-0.09 with the task loss's) yet 3-7x larger in their
effect on the predictions than CAVIA's; meta-training answered by switching adaptation
off, and the learned loss never became informative (docs/method.md §3.1). From
zero, the meta-gradient shapes the loss before it moves anything.

Shape legend: B tasks, K support points, F per-point features, H hidden units.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import keras
import tensorflow as tf

from viable_tf import hardware, ops
from viable_tf.configurable import keras_configurable
from viable_tf.networks import initializers
from viable_tf.ops import masked_mean

#: The relation network's hidden layers may compute in bfloat16 (`compute_dtype`): the
#: per-pair pre-activations, hidden layers and output run in it; the variables, the
#: first layer's per-point products, the loss and every gradient stay float32.
COMPUTE_DTYPES = {
    "float32": keras.DTypePolicy("float32"),
    "bfloat16": keras.DTypePolicy("mixed_bfloat16"),
}


#: How the output layer starts: as `init` draws it (the code lineage's), or at zero.
OUTPUT_INITS = ("lineage", "zeros")
#: How the relation network reads a task's loss out of its pairs: the mean of one scalar
#: per pair (the paper's), or Santoro et al.'s set-level form, a readout MLP on the mean
#: of the pairs' last hidden layer.
READOUTS = ("pairs", "set")


def _validate(hidden_units: Sequence[int]) -> tuple[int, ...]:
    units = tuple(int(u) for u in hidden_units)
    if not units or any(u < 1 for u in units):
        raise ValueError(f"hidden_units must be a non-empty list of positive ints, got {units}")
    return units


class _LossNetwork(keras.layers.Layer):
    """Shared construction: hidden Dense layers after the first, bias-free output."""

    def __init__(
        self,
        *,
        hidden_units: Sequence[int],
        activation: str = "relu",
        output_activation: str | None = None,
        include_inputs: bool,
        init: str = "torch",
        output_init: str = "lineage",
        compute_dtype: str = "float32",
        readout_units: Sequence[int] = (),
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if output_init not in OUTPUT_INITS:
            raise ValueError(f"output_init must be one of {OUTPUT_INITS}, got {output_init!r}")
        self.output_init = output_init
        if compute_dtype not in COMPUTE_DTYPES:
            raise ValueError(
                f"compute_dtype must be one of {sorted(COMPUTE_DTYPES)}, got {compute_dtype!r}"
            )
        if compute_dtype == "bfloat16" and (reason := hardware.bfloat16_unsupported()):
            raise ValueError(f"compute_dtype='bfloat16' cannot run here: {reason}")
        self.compute_dtype_name = compute_dtype
        self.hidden_units = _validate(hidden_units)
        self.init = initializers.check_init(init)
        self.activation = keras.activations.get(activation)
        # ReLU as ops.relu: the same values and gradients, a cheaper second derivative.
        self._activate = ops.relu if activation == "relu" else self.activation
        self.output_activation = keras.activations.get(output_activation)
        self.include_inputs = include_inputs
        # Called as observe_hidden(layer_index, activations) for each hidden layer's
        # activations when set (lab/loss_network_anatomy.py counts the live units);
        # None in training, exports and evaluation.
        self.observe_hidden = None
        # Attributes, not a list, so that tf.train.Checkpoint tracks them.
        for i, (fan_in, units) in enumerate(itertools.pairwise(self.hidden_units), 1):
            # The activation is applied in _tail (self._activate), not by the layer.
            setattr(self, f"hidden_{i}", self._dense(units, fan_in, None, f"hidden_{i}"))
        # A set-level readout's layers (RelationLossNetwork, readout='set'), on the pooled
        # last hidden layer; none by default.
        self.readout_units = tuple(int(u) for u in readout_units)
        widths = (self.hidden_units[-1], *self.readout_units)
        for i, (fan_in, units) in enumerate(itertools.pairwise(widths)):
            setattr(self, f"readout_{i}", self._dense(units, fan_in, None, f"readout_{i}"))
        # No bias: it would get no meta-gradient (see module docstring).
        self._output = self._dense(
            1,
            widths[-1],
            self.output_activation,
            "output",
            use_bias=False,
            zero_kernel=output_init == "zeros",
        )

    def _dense(
        self, units, fan_in, activation, name, use_bias=True, zero_kernel=False
    ) -> keras.layers.Dense:
        """A Dense layer of `units` on `fan_in` inputs, initialised as `init` says."""
        kernel = initializers.kernel_initializer(self.init, fan_in=fan_in, fan_out=units)
        return keras.layers.Dense(
            units,
            activation=activation,
            use_bias=use_bias,
            dtype=COMPUTE_DTYPES[self.compute_dtype_name],
            kernel_initializer="zeros" if zero_kernel else kernel,
            bias_initializer=initializers.bias_initializer(self.init, fan_in=fan_in),
            name=name,
        )

    @property
    def _hidden(self) -> list[keras.layers.Dense]:
        return [getattr(self, f"hidden_{i}") for i in range(1, len(self.hidden_units))]

    @property
    def _readout(self) -> list[keras.layers.Dense]:
        return [getattr(self, f"readout_{i}") for i in range(len(self.readout_units))]

    def _build_tail(self, first_units: int) -> None:
        width = first_units
        for layer in [*self._hidden, *self._readout]:
            layer.build((None, width))
            width = layer.units
        self._output.build((None, width))

    def _hidden_layers(self, hidden: tf.Tensor) -> tf.Tensor:
        """First-layer pre-activations [..., H] -> the last hidden layer's activations."""
        h = self._activate(hidden)
        if self.observe_hidden is not None:
            self.observe_hidden(0, h)
        for i, layer in enumerate(self._hidden, 1):
            h = self._activate(layer(h))
            if self.observe_hidden is not None:
                self.observe_hidden(i, h)
        return h

    def _tail(self, hidden: tf.Tensor) -> tf.Tensor:
        """First-layer pre-activations [..., H] -> one number per point or pair [...],
        float32 whatever the compute dtype."""
        return tf.cast(tf.squeeze(self._output(self._hidden_layers(hidden)), -1), tf.float32)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            hidden_units=list(self.hidden_units),
            activation=keras.activations.serialize(self.activation),
            output_activation=keras.activations.serialize(self.output_activation),
            include_inputs=self.include_inputs,
            init=self.init,
            output_init=self.output_init,
            compute_dtype=self.compute_dtype_name,
            readout_units=list(self.readout_units),
        )
        return config


@keras_configurable
@keras.saving.register_keras_serializable(package="viable_tf")
class SimpleLossNetwork(_LossNetwork):
    """simVIABLE's loss: MLP on each support point's features, masked mean over K."""

    variant = "sim"

    def __init__(
        self,
        *,
        hidden_units: Sequence[int] = (32, 32, 32),
        activation: str = "relu",
        output_activation: str | None = None,
        include_inputs: bool = False,
        init: str = "torch",
        **kwargs,
    ) -> None:
        super().__init__(
            hidden_units=hidden_units,
            activation=activation,
            output_activation=output_activation,
            include_inputs=include_inputs,
            init=init,
            **kwargs,
        )

    def build(self, input_shape) -> None:
        if self.built:
            return
        feature_dim = input_shape[-1]  # F, the first layer's fan-in
        self._first = self._dense(self.hidden_units[0], feature_dim, None, "hidden_0")
        self._first.build((None, feature_dim))
        self._build_tail(self.hidden_units[0])
        self.built = True

    def point_losses(self, features: tf.Tensor) -> tf.Tensor:
        """features [B, K, F] -> per-point learned loss [B, K]."""
        return self._tail(self._first(features))

    def call(self, features: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        """features [B, K, F], mask bool [B, K] -> inner loss per task [B]."""
        return masked_mean(self.point_losses(features), mask, axis=1)


@keras_configurable
@keras.saving.register_keras_serializable(package="viable_tf")
class RelationLossNetwork(_LossNetwork):
    """relVIABLE's loss: MLP on every ordered pair of support points.

    The first layer is computed per point and combined per pair:
    W·[f_j; f_k] + b = W_a·f_j + W_b·f_k + b, which is exact and costs
    O(K·F·H + K²·H) instead of O(K²·F·H) with no [B, K, K, 2F] tensor.
    `naive_pair_losses` is the materialised form, kept for tests and benchmarks.
    """

    variant = "rel"

    def __init__(
        self,
        *,
        hidden_units: Sequence[int] = (32, 32, 32),
        activation: str = "relu",
        output_activation: str | None = None,
        include_inputs: bool = True,
        decomposed: bool = True,
        symmetric_init: bool = False,
        init: str = "torch",
        compute_dtype: str = "float32",
        readout: str = "pairs",
        readout_units: Sequence[int] = (32,),
        **kwargs,
    ) -> None:
        if readout not in READOUTS:
            raise ValueError(f"readout must be one of {READOUTS}, got {readout!r}")
        if readout == "set" and not decomposed:
            raise ValueError("readout='set' pools the decomposed pairs: needs decomposed=True")
        super().__init__(
            hidden_units=hidden_units,
            activation=activation,
            output_activation=output_activation,
            include_inputs=include_inputs,
            init=init,
            compute_dtype=compute_dtype,
            readout_units=_validate(readout_units) if readout == "set" else (),
            **kwargs,
        )
        self.readout = readout
        self.decomposed = decomposed  # False: materialise every pair (benchmarks only)
        # True: W_b starts as a copy of W_a, so Lhat starts symmetric in (j, k). For the
        # reproduction study only: the previous code started so by accident (a reused
        # Keras initializer draws the same numbers twice).
        self.symmetric_init = symmetric_init

    def build(self, input_shape) -> None:
        if self.built:
            return
        feature_dim = input_shape[-1]
        units = self.hidden_units[0]
        # The halves of one [2F, H] kernel: initialised with the pair's fan-in 2F,
        # each from its own draw.
        fan_in = 2 * feature_dim
        self.kernel_first = self.add_weight(
            shape=(feature_dim, units),
            initializer=initializers.kernel_initializer(self.init, fan_in=fan_in, fan_out=units),
            name="kernel_first",
        )  # W_a, applied to f_j
        self.kernel_second = self.add_weight(
            shape=(feature_dim, units),
            initializer=initializers.kernel_initializer(self.init, fan_in=fan_in, fan_out=units),
            name="kernel_second",
        )  # W_b, applied to f_k
        if self.symmetric_init:
            self.kernel_second.assign(self.kernel_first)
        self.bias = self.add_weight(
            shape=(units,),
            initializer=initializers.bias_initializer(self.init, fan_in=fan_in),
            name="bias_0",
        )
        self._build_tail(units)
        self.built = True

    def pair_losses(self, features: tf.Tensor) -> tf.Tensor:
        """features [B, K, F] -> learned loss of every ordered pair [B, K, K] (j, k)."""
        rows, pair_shape = self._pair_rows(features)
        return tf.reshape(self._tail(rows), pair_shape)  # [B, K, K]

    def set_loss(self, features: tf.Tensor, pair_mask: tf.Tensor) -> tf.Tensor:
        """readout='set', Santoro et al.'s relation network: f(mean over the real pairs of
        g(pair)), g the pair MLP's hidden layers and f the readout layers and the
        bias-free output. features [B, K, F], pair_mask bool [B, K, K] -> [B]."""
        rows, pair_shape = self._pair_rows(features)
        hidden = self._hidden_layers(rows)  # [B*K*K, H]
        hidden = tf.reshape(hidden, tf.concat([pair_shape, tf.shape(hidden)[-1:]], 0))
        pooled = masked_mean(hidden, pair_mask[..., None], axis=(1, 2))  # [B, H]
        for layer in self._readout:
            pooled = self._activate(layer(pooled))
        return tf.cast(tf.squeeze(self._output(pooled), -1), tf.float32)  # [B]

    def _pair_rows(self, features: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """features [B, K, F] -> the first layer's pre-activations of every ordered pair
        as rows [B*K*K, H], and the pairs' shape [B, K, K]."""
        first = tf.tensordot(features, self.kernel_first, axes=1)  # [B, K, H]
        second = tf.tensordot(features, self.kernel_second, axes=1)  # [B, K, H]
        dtype = COMPUTE_DTYPES[self.compute_dtype_name].compute_dtype
        first, second, bias = (tf.cast(t, dtype) for t in (first, second, self.bias))
        pairs = first[:, :, None, :] + second[:, None, :, :]  # [B, K, K, H]
        # The layers run on the pairs as rows [B*K*K, H]: the same numbers, but the
        # bias gradients then reduce a 2-D tensor over its rows, which XLA's CPU
        # backend does ~10x faster than the same sum over three axes of [B, K, K, H]
        # (docs/PERFORMANCE.md).
        rows = tf.reshape(pairs, [-1, pairs.shape[-1]]) + bias
        return rows, tf.shape(pairs)[:-1]

    def naive_pair_losses(self, features: tf.Tensor) -> tf.Tensor:
        """Same as `pair_losses`, by materialising every pair's concatenated features."""
        k = tf.shape(features)[1]
        first = tf.repeat(features[:, :, None, :], k, axis=2)  # [B, K, K, F]  (f_j)
        second = tf.repeat(features[:, None, :, :], k, axis=1)  # [B, K, K, F]  (f_k)
        pairs = tf.concat([first, second], axis=-1)  # [B, K, K, 2F]
        kernel = tf.concat([self.kernel_first, self.kernel_second], axis=0)  # [2F, H]
        return self._tail(tf.tensordot(pairs, kernel, axes=1) + self.bias)  # [B, K, K]

    def call(self, features: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        """features [B, K, F], mask bool [B, K] -> inner loss per task [B]."""
        pair_mask = tf.logical_and(mask[:, :, None], mask[:, None, :])  # [B, K, K]
        if self.readout == "set":
            return self.set_loss(features, pair_mask)
        pairs = self.pair_losses if self.decomposed else self.naive_pair_losses
        return masked_mean(pairs(features), pair_mask, axis=(1, 2))

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "decomposed": self.decomposed,
            "symmetric_init": self.symmetric_init,
            "readout": self.readout,
        }
