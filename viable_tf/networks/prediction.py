"""The prediction network f_{phi, theta}: an MLP on [x; phi] (CAVIA, docs/method.md §1).

phi (the task context, C numbers) is an input tensor, not a weight. Because it
enters the first layer linearly, W·[x; phi] = W_x·x + W_phi·phi: the context term
is computed once per task and broadcast over its points instead of tiling phi
onto every point.

Weights start as the code lineage's do (`init='torch'`, docs/method.md §3.1): kernels and biases
uniform in ±1/sqrt(fan_in), fan_in = D + C for the split first layer, as CAVIA's
PyTorch `nn.Linear` layers start; `init='keras'` gives Keras' Glorot kernels and zero biases.

The network is also usable functionally, with weights passed in (`forward`):
MAML adapts the weights themselves, one copy per task, with a leading B axis.

With `output_layer=False` the network ends at its last hidden layer (after the ReLU):
the features on which a learner puts an output layer of its own per task, such as
the prototype head (`learners/prototypes.py`), which starts at the support set's
class means in this space. Parts composed after it (`features`, in order) change what
it ends with. With `SkipInputs()` the features are the input beside the hidden layer,
[x; s * relu(h)], with a learned scale s that starts at SKIP_SCALE_INIT = 1e-3: the
prototype head then starts (all but) as the nearest class mean of the inputs
themselves, and meta-learning decides how much of the learned features to add. (Not at
0: s enters the head's logits squared, so its gradient at 0 is exactly zero and it would
never move.) With `Normalize()` after it the features are l2-normalised last (a cosine
space: the prototype head's squared distances lie in [0, 4], so its softmax stays soft
under a temperature below 1 and the inner loop keeps a gradient). With
`SkipInputs(context_scaled=True)` the task context also scales the input beside the
hidden layer dimension by dimension, [x * (1 + phi W_s); s * relu(h)] (FiLM's gamma, as
CAVIA conditions its classifier's features on phi), W_s [C, D] meta-learned: at
phi_0 = 0 the features are unchanged, and adapting phi re-weights the input's dimensions
per task (a task-specific metric under the prototype head).

The network is composed of its MLP (the split first layer, hidden layers, and the output
layer unless `output_layer=False`) and, without an output layer, the feature parts of
`features`, in order (gin: `PredictionNetwork.features = [@SkipInputs(), @Normalize()]`).
Each part declares its weights (created after the MLP's, in order) and its width, and
computes its step of `forward`.

Shape legend: B tasks, P points per task (K or Q), D input dim, C context dim,
H hidden units, Y output dim.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

import gin
import keras
import tensorflow as tf

from viable_tf import ops
from viable_tf.configurable import keras_configurable
from viable_tf.networks import initializers

#: The learned scale of the hidden features beside the input (`SkipInputs`) starts here.
SKIP_SCALE_INIT = 1e-3
#: l2_normalize's floor on the squared norm (an all-zero ReLU feature vector stays 0).
NORMALIZE_EPSILON = 1e-12


def _dense(inputs: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    """[B, P, I] x kernel -> [B, P, O]; kernel is shared [I, O] or per task [B, I, O]."""
    if len(kernel.shape) == 2:
        return tf.tensordot(inputs, kernel, axes=1)
    return tf.matmul(inputs, kernel)


def _add_bias(inputs: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """[B, P, O] + bias, shared [O] or per task [B, O]."""
    if len(bias.shape) == 1:
        return inputs + bias
    return inputs + bias[:, None, :]


@gin.configurable
@dataclasses.dataclass(frozen=True)
class SkipInputs:
    """The input beside the last hidden layer's features, [x; s * relu(h)], with a learned
    scale s (`feature_scale` [1], from SKIP_SCALE_INIT); `context_scaled`: the input also
    scaled by the task context dimension by dimension, x * (1 + phi W_s) (FiLM's gamma,
    `kernel_input_scale` [C, D], so that at phi = 0 the input is unchanged; it needs a
    context, C >= 1)."""

    context_scaled: bool = False

    def width(self, net: PredictionNetwork, width: int) -> int:
        return width + net.input_dim

    def build(self, net: PredictionNetwork) -> None:
        net.add_param("feature_scale", (1,), keras.initializers.Constant(SKIP_SCALE_INIT))
        if self.context_scaled:
            net.add_param(
                "kernel_input_scale",
                (net.context_dim, net.input_dim),
                net.kernel_init(net.context_dim, net.input_dim),
            )

    def __call__(self, w: dict, h: tf.Tensor, x: tf.Tensor, context) -> tf.Tensor:
        scale = w["feature_scale"]  # [1] or per task [B, 1]
        scale = scale if len(scale.shape) == 1 else scale[:, None, :]
        if self.context_scaled:
            input_scale = w["kernel_input_scale"]  # [C, D] or [B, C, D]
            if len(input_scale.shape) == 2:
                gamma = 1.0 + tf.matmul(context, input_scale)  # [B, D]
            else:
                gamma = 1.0 + tf.einsum("bc,bcd->bd", context, input_scale)  # [B, D]
            x = x * gamma[:, None, :]  # [B, P, D]
        return tf.concat([x, scale * h], axis=-1)  # [B, P, D + H]


@gin.configurable
@dataclasses.dataclass(frozen=True)
class Normalize:
    """The features l2-normalised (a cosine space)."""

    def width(self, net: PredictionNetwork, width: int) -> int:
        return width

    def build(self, net: PredictionNetwork) -> None:
        pass

    def __call__(self, w: dict, h: tf.Tensor, x: tf.Tensor, context) -> tf.Tensor:
        return tf.math.l2_normalize(h, axis=-1, epsilon=NORMALIZE_EPSILON)


#: The feature parts a network can end with, by name (`features`, `get_config`).
FEATURE_PARTS = {part.__name__: part for part in (SkipInputs, Normalize)}


@keras_configurable
@keras.saving.register_keras_serializable(package="viable_tf")
class PredictionNetwork(keras.layers.Layer):
    """MLP y_hat = f(x; phi) with ReLU hidden layers and a linear output.

    Weights, in order (the `params` list of `forward`): first layer
    `kernel_x` [D, H], `kernel_context` [C, H] (only if C > 0), `bias` [H]; then a
    `kernel` [H, H'] and `bias` [H'] per further layer, the last one to Y outputs;
    then the feature parts' weights, `feature_scale` [1] (`SkipInputs`) and
    `kernel_input_scale` [C, D] (`SkipInputs(context_scaled=True)`). `param_names`
    names them in that order, and `forward` reads a list of them by name (`named`).
    """

    def __init__(
        self,
        *,
        input_dim: int,
        output_dim: int,
        context_dim: int,
        hidden_units: Sequence[int] = (40, 40),
        init: str = "torch",
        kernel_initializer: str | dict | keras.initializers.Initializer | None = None,
        bias_initializer: str | dict | keras.initializers.Initializer | None = None,
        output_layer: bool = True,
        features: Sequence[SkipInputs | Normalize] = (),
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        for name, value in (("input_dim", input_dim), ("output_dim", output_dim)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if context_dim < 0:
            raise ValueError(f"context_dim must be >= 0, got {context_dim}")
        if any(units < 1 for units in hidden_units):
            raise ValueError(f"hidden_units must all be >= 1, got {tuple(hidden_units)}")
        if not output_layer and not hidden_units:
            raise ValueError(
                "a network without its output layer needs a hidden layer (its features); "
                "got hidden_units=()"
            )
        features = tuple(features)
        for part in features:
            if not isinstance(part, tuple(FEATURE_PARTS.values())):
                raise ValueError(f"features must be SkipInputs or Normalize parts, got {part!r}")
        if features and output_layer:
            raise ValueError(
                f"features {list(features)} are for a network without its output layer "
                "(output_layer=False)"
            )
        kinds = [type(part).__name__ for part in features]
        if len(set(kinds)) < len(kinds):
            raise ValueError(f"each feature part at most once, got {list(features)}")
        if SkipInputs(context_scaled=True) in features and not context_dim:
            raise ValueError(
                "SkipInputs(context_scaled=True) scales the skipped input by the context: it "
                f"needs context_dim >= 1, got context_dim={context_dim}"
            )
        self.output_layer = bool(output_layer)
        #: What follows the last hidden layer's ReLU without an output layer, in order.
        self.feature_parts: tuple[SkipInputs | Normalize, ...] = features
        self.input_dim = input_dim
        self.output_dim = output_dim
        self.context_dim = context_dim
        self.hidden_units = tuple(int(u) for u in hidden_units)
        self.init = initializers.check_init(init)
        # Explicit initializers, if given, override `init`'s (tests use constants).
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer
        self.build()

    def build(self, input_shape=None) -> None:
        if self.built:
            return
        widths = (*self.hidden_units, *((self.output_dim,) if self.output_layer else ()))
        first = widths[0]
        fan_in = self.input_dim + self.context_dim  # the whole first layer's, [x; phi]
        self._param_names: list[str] = []  # forward()'s order
        self.add_param("kernel_x", (self.input_dim, first), self.kernel_init(fan_in, first))
        if self.context_dim:
            self.add_param(
                "kernel_context", (self.context_dim, first), self.kernel_init(fan_in, first)
            )
        self.add_param("bias_0", (first,), self.bias_init(fan_in))
        for i, (fan_in, fan_out) in enumerate(itertools.pairwise(widths), 1):
            self.add_param(f"kernel_{i}", (fan_in, fan_out), self.kernel_init(fan_in, fan_out))
            self.add_param(f"bias_{i}", (fan_out,), self.bias_init(fan_in))
        for part in self.feature_parts:
            part.build(self)
        self.built = True

    def add_param(self, name: str, shape: tuple[int, ...], initializer) -> None:
        """Creates weight `name`, next in `params`' order. Each weight is an attribute
        (not a list item) so that tf.train.Checkpoint tracks it under its name."""
        self._param_names.append(name)
        setattr(self, name, self.add_weight(shape=shape, initializer=initializer, name=name))

    def kernel_init(self, fan_in: int, fan_out: int):
        if self.kernel_initializer is not None:
            return keras.initializers.get(self.kernel_initializer)
        return initializers.kernel_initializer(self.init, fan_in=fan_in, fan_out=fan_out)

    def bias_init(self, fan_in: int):
        if self.bias_initializer is not None:
            return keras.initializers.get(self.bias_initializer)
        return initializers.bias_initializer(self.init, fan_in=fan_in)

    @property
    def feature_dim(self) -> int:
        """Width of what `forward` returns without an output layer: the last hidden layer
        (and the input beside it, with `SkipInputs`)."""
        width = self.hidden_units[-1] if self.hidden_units else self.input_dim
        for part in self.feature_parts:
            width = part.width(self, width)
        return width

    #: This network does not give its penultimate features apart from its outputs
    #: (networks/protocol.py); a user's functional model does (`keras_network`).
    penultimate_dim = None

    @property
    def params(self) -> list:
        """The weights theta, in `forward`'s order."""
        return [getattr(self, name) for name in self._param_names]

    @property
    def param_names(self) -> tuple[str, ...]:
        """The names of `params`, in order (kernel_x, kernel_context, bias_0, kernel_1, ...)."""
        return tuple(self._param_names)

    def named(self, params: Sequence[tf.Tensor]) -> dict[str, tf.Tensor]:
        """A list of weights in `params`' order (the variables, or per-task copies of
        them) by name."""
        params = list(params)
        if len(params) != len(self._param_names):
            raise ValueError(f"expected {len(self._param_names)} weights, got {len(params)}")
        return dict(zip(self._param_names, params, strict=True))

    def call(self, x: tf.Tensor, context: tf.Tensor | None = None) -> tf.Tensor:
        """x [B, P, D], context [B, C] -> y_hat [B, P, Y]."""
        return self.forward(self.params, x, context)

    def forward(self, params: Sequence[tf.Tensor], x: tf.Tensor, context=None) -> tf.Tensor:
        """The network with weights `params`, each shared or with a leading task axis B.

        Args:
          params: weights as listed in the class docstring; each either of the
            variable's shape (shared by all tasks) or with a leading B axis.
          x: float32 [B, P, D].
          context: float32 [B, C], the task contexts phi; required iff C > 0.

        Returns:
          float32 [B, P, Y]; [B, P, H] (the last hidden layer, after its ReLU) for a
          network built without its output layer.
        """
        w = self.named(params)  # the weights by name
        h = _dense(x, w["kernel_x"])  # [B, P, H]
        if self.context_dim:
            if context is None:
                raise ValueError(f"context [B, {self.context_dim}] is required")
            kernel_context = w["kernel_context"]
            if len(kernel_context.shape) == 2:
                context_term = tf.matmul(context, kernel_context)  # [B, H]
            else:
                context_term = tf.einsum("bc,bch->bh", context, kernel_context)  # [B, H]
            h += context_term[:, None, :]  # [B, P, H]
        h = _add_bias(h, w["bias_0"])
        for i in range(1, len(self.hidden_units) + int(self.output_layer)):
            h = ops.relu(h)
            h = _add_bias(_dense(h, w[f"kernel_{i}"]), w[f"bias_{i}"])
        if not self.output_layer:
            h = ops.relu(h)  # [B, P, H]
        for part in self.feature_parts:  # SkipInputs, Normalize
            h = part(w, h, x, context)
        return h  # [B, P, Y]

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            input_dim=self.input_dim,
            output_dim=self.output_dim,
            context_dim=self.context_dim,
            hidden_units=list(self.hidden_units),
            init=self.init,
            kernel_initializer=_serialize(self.kernel_initializer),
            bias_initializer=_serialize(self.bias_initializer),
            output_layer=self.output_layer,
            features=[
                {"part": type(part).__name__, **dataclasses.asdict(part)}
                for part in self.feature_parts
            ],
        )
        return config

    @classmethod
    def from_config(cls, config: dict) -> PredictionNetwork:
        config = dict(config)
        config["features"] = [
            FEATURE_PARTS[part["part"]](**{k: v for k, v in part.items() if k != "part"})
            for part in config.get("features", ())
        ]
        return cls(**config)


def _serialize(initializer):
    if initializer is None or isinstance(initializer, str):
        return initializer
    return keras.initializers.serialize(keras.initializers.get(initializer))
