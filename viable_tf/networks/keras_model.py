"""Your own Keras model under CAVIA, MAML and VIABLE (docs/GUIDE.md).

A learner takes a `network` factory, called with `input_dim`, `output_dim` and
`context_dim`. `keras_network(build)` turns a function that builds a Keras model into
one: the model maps one point's input (and, for CAVIA and VIABLE, the task context phi)
to its outputs,

    build(input_dim, output_dim, context_dim) -> keras.Model
        [x [N, D], phi [N, C]] -> y_hat [N, Y]     (context_dim > 0: CAVIA, VIABLE)
        x [N, D] -> y_hat [N, Y]                    (context_dim = 0: plain MAML)

functional or subclassed, any layers. `UserNetwork` wraps it in the interface the
learners use (the same as `PredictionNetwork`'s): `network(x, context)` on [B, P, D]
points, and, for MAML and VIABLE on MAML, `params` and `forward(params, x, context)`,
which runs the model *functionally* on weights given as tensors (Keras 3's
`stateless_call`), shared or one copy per task with a leading B axis: no copy of the
model per task. With the prototype head (`head=PrototypeHead()`) `build` gets
`output_dim=None` and returns the features the head starts from, [N, F].

For image models, `FiLM` turns phi into a per-channel scale and shift of a feature map,
as the CAVIA code conditions its conv nets.

Refused at construction, each with one line: a model that does not take the context a
learner gives it (or takes one where it gets none), outputs of the wrong shape, and layers
whose state changes in a forward pass (BatchNormalization's moving statistics), which
would be shared across the tasks of a batch; use LayerNormalization or GroupNormalization.

Shape legend: B tasks, P points per task, N = B * P points, D input dim, C context dim,
Y outputs, F features.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import gin
import keras
import numpy as np
import tensorflow as tf

from viable_tf import precision
from viable_tf.networks import task_stacked

Build = Callable[[int, int | None, int], keras.Model]


@gin.configurable
def keras_network(build: Build = gin.REQUIRED) -> Callable[..., UserNetwork]:
    """A learner's `network` factory from `build(input_dim, output_dim, context_dim)`
    (in gin: `CAVIA.network = @keras_network()`, `keras_network.build = @conv4_film`)."""

    def make(*, input_dim: int, output_dim: int, context_dim: int, output_layer: bool = True):
        with precision.model_policy():  # its layers compute in the run's precision
            model = build(input_dim, output_dim if output_layer else None, context_dim)
        return UserNetwork(
            model,
            input_dim=input_dim,
            output_dim=output_dim,
            context_dim=context_dim,
            output_layer=output_layer,
        )

    return make


def _shape(value) -> list:
    return [None if d is None else int(d) for d in tf.TensorShape(value.shape).as_list()]


class UserNetwork(keras.layers.Layer):
    """A user's Keras model as a learner's network (see the module docstring).

    Args:
      model: the Keras model (built or not).
      input_dim, output_dim, context_dim: D, Y, C, as the learner passes them.
      output_layer: False for the prototype head: the model's output is the features.
    """

    def __init__(
        self,
        model: keras.Model,
        *,
        input_dim: int,
        output_dim: int,
        context_dim: int,
        output_layer: bool = True,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if not isinstance(model, keras.Model):
            raise TypeError(f"expected a keras.Model, got {type(model).__name__}")
        self.model = model
        self.input_dim = input_dim
        self.output_dim = output_dim
        self.context_dim = context_dim
        self.output_layer = output_layer
        self.init = "custom"
        self._feature_dim = self._check(model)
        # Without a context, a chain of standard layers runs per-task weights stacked.
        chain = None if context_dim else task_stacked.chain_of_known_layers(model)
        object.__setattr__(self, "_chain", chain)  # the model's own layers: not re-tracked
        # The two-output model of `_with_penultimate`, built when first asked for.
        object.__setattr__(self, "_dual", None)

    def _inputs(self, x, context):
        return [x, context] if self.context_dim else x

    def _check(self, model: keras.Model) -> int:
        """Builds the model on two points and checks what it takes and gives."""
        x = np.zeros([2, self.input_dim], np.float32)
        context = np.zeros([2, self.context_dim], np.float32)
        what = f"[x [N, {self.input_dim}], phi [N, {self.context_dim}]]"
        if not self.context_dim:
            what = f"x [N, {self.input_dim}] (no context: this learner adapts no phi)"
        try:
            out = model(self._inputs(x, context))
        except Exception as error:  # whatever the model raises, as one line
            said = " ".join(str(error).split())[:300]
            raise ValueError(
                f"the model must take {what}; calling it so failed: {type(error).__name__}: {said}"
            ) from None
        if isinstance(out, list | tuple | dict):
            raise ValueError(f"the model must return one tensor, got {type(out).__name__}")
        shape = _shape(out)
        want = self.output_dim if self.output_layer else None
        if len(shape) != 2 or shape[0] != 2 or (want is not None and shape[1] != want):
            expected = f"[N, {want}]" if want is not None else "[N, F] (features)"
            raise ValueError(
                f"the model's output for N = 2 points is {shape}; expected {expected}: "
                f"one row of {'outputs' if want else 'features'} per point"
            )
        stateful = sorted({v.path.split("/")[0] for v in model.non_trainable_variables} or set())
        if stateful:
            raise ValueError(
                f"the model has state that changes in a forward pass ({', '.join(stateful)}: "
                "e.g. BatchNormalization's moving statistics), which would be shared by every "
                "task of a batch; use LayerNormalization or GroupNormalization instead"
            )
        if not model.trainable_variables:
            raise ValueError("the model has no trainable weights: nothing to meta-learn")
        return shape[1]

    @property
    def feature_dim(self) -> int:
        """The width of the model's output: Y, or F without the output layer."""
        return self._feature_dim

    @property
    def params(self) -> list:
        """theta: the model's trainable weights, in `forward`'s order."""
        return list(self.model.trainable_variables)

    def call(self, x: tf.Tensor, context: tf.Tensor | None = None) -> tf.Tensor:
        """x [B, P, D], context [B, C] -> [B, P, Y] (or [B, P, F])."""
        return self._run(None, x, context)

    @property
    def penultimate_dim(self) -> int:
        """H, the width of what the model's last layer takes (its penultimate features)."""
        return int(self._with_penultimate.outputs[1].shape[-1])

    @property
    def _with_penultimate(self) -> keras.Model:
        """The same layers with two outputs: the model's, and its last layer's input."""
        if self._dual is None:
            needs = (
                "penultimate features need a functional Keras model whose last layer "
                "is called once (keras.Model(inputs, outputs))"
            )
            if not self.model.layers or not task_stacked.is_graph_of_layers(self.model):
                raise ValueError(f"{needs}; this one is subclassed or has no layers")
            last = self.model.layers[-1]
            try:
                dual = keras.Model(self.model.inputs, [self.model.outputs[0], last.input])
            except (TypeError, ValueError) as error:
                raise ValueError(f"{needs}; this one: {error}") from None
            if len(dual.outputs[1].shape) != 2:
                raise ValueError(
                    f"the model's last layer takes {dual.outputs[1].shape}; penultimate "
                    "features must be one row per point, [N, H]"
                )
            # Not tracked as a sub-layer: its weights are the model's, already tracked.
            object.__setattr__(self, "_dual", dual)
        return self._dual

    def call_with_penultimate(self, x: tf.Tensor, context: tf.Tensor | None = None):
        """x [B, P, D], context [B, C] -> (y_hat [B, P, Y], h [B, P, H]) in one pass: the
        outputs and the penultimate features they are computed from (shared weights)."""
        if self.context_dim and context is None:
            raise ValueError(f"context [B, {self.context_dim}] is required")
        b, p = tf.shape(x)[0], tf.shape(x)[1]
        y_hat, h = self._with_penultimate(self._point_inputs(x, context))
        return (
            tf.reshape(tf.cast(y_hat, tf.float32), [b, p, self.feature_dim]),
            tf.reshape(tf.cast(h, tf.float32), [b, p, self.penultimate_dim]),
        )

    def forward(self, params: Sequence[tf.Tensor], x: tf.Tensor, context=None) -> tf.Tensor:
        """The model on weights `params` (shared, or each with a leading B axis: one
        per task), run functionally; x [B, P, D], context [B, C] -> [B, P, Y]."""
        return self._run(list(params), x, context)

    def _run(self, params, x, context):
        if self.context_dim and context is None:
            raise ValueError(f"context [B, {self.context_dim}] is required")
        variables = self.model.trainable_variables
        per_task = params is not None and any(
            len(p.shape) == len(v.shape) + 1 for p, v in zip(params, variables, strict=True)
        )
        if not per_task:
            return self._points(params, x, context)
        # One copy of the weights per task: a chain of standard layers with the tasks
        # stacked (each convolution one grouped convolution), else the model per task over
        # its own points, vectorised (pfor; a loop where an op has no batched form).
        params = [
            p if len(p.shape) == len(v.shape) + 1 else tf.repeat(p[None], tf.shape(x)[0], 0)
            for p, v in zip(params, variables, strict=True)
        ]
        if self._chain is not None:  # the tasks stacked on the channel axis (task_stacked.py)
            out = task_stacked.stacked_forward(self._chain, variables, params, x)
            return tf.cast(out, tf.float32)  # a bfloat16 model's output, as the learner takes it
        contexts = context if self.context_dim else tf.zeros([tf.shape(x)[0], 0], x.dtype)
        return tf.vectorized_map(
            lambda task: self._points(task[0], task[1][None], task[2][None])[0],
            (params, x, contexts),
            fallback_to_while_loop=True,
        )

    def _point_inputs(self, x, context):
        """[B, P, D] points (and [B, C] contexts) as the model's N = B * P rows."""
        flat = tf.reshape(x, [-1, self.input_dim])
        if not self.context_dim:
            return flat
        p = tf.shape(x)[1]
        rows = tf.reshape(tf.repeat(context[:, None, :], p, axis=1), [-1, self.context_dim])
        return [flat, rows]

    def _points(self, params, x, context):
        """[B, P, D] points (and [B, C] contexts) through the model as N = B * P rows."""
        b, p = tf.shape(x)[0], tf.shape(x)[1]
        inputs = self._point_inputs(x, context)
        if params is None:
            out = self.model(inputs)
        else:
            out, _ = self.model.stateless_call(params, [], inputs)
        # A model computing in bfloat16 (precision.py) answers in it: the learner's losses
        # and adapted state are float32.
        return tf.reshape(tf.cast(out, tf.float32), [b, p, self.feature_dim])


@keras.saving.register_keras_serializable(package="viable_tf")
class FiLM(keras.layers.Layer):
    """Feature-wise linear modulation by the task context: [features [N, ..., Ch],
    phi [N, C]] -> features * (1 + gamma) + beta, with (gamma, beta) = W phi + b per
    channel (Perez et al. 2018; the CAVIA code conditions its conv nets so). b starts at
    zero, so the context phi_0 = 0 leaves the features as they are; W starts random, so
    phi gets a gradient from the first inner step (at W = 0 it would get none, and W none
    through phi: the context would never be used)."""

    def build(self, input_shape) -> None:
        features, context = input_shape
        self.channels = int(features[-1])
        self.dense = keras.layers.Dense(  # computes in what FiLM computes in
            2 * self.channels, bias_initializer="zeros", dtype=self.dtype_policy
        )
        self.dense.build(context)

    def call(self, inputs):
        features, context = inputs
        gamma, beta = tf.split(self.dense(context), 2, axis=-1)  # [N, Ch] each
        rank = len(features.shape)
        broadcast = [-1] + [1] * (rank - 2) + [self.channels]
        return features * (1.0 + tf.reshape(gamma, broadcast)) + tf.reshape(beta, broadcast)

    def compute_output_shape(self, input_shape):
        return input_shape[0]


@gin.configurable
def conv4_film(
    input_dim: int,
    output_dim: int | None,
    context_dim: int,
    *,
    image_shape: Sequence[int] = (28, 28, 1),
    filters: int = 32,
    blocks: int = 4,
) -> keras.Model:
    """The CAVIA code lineage's image backbone: `blocks` conv blocks (3 x 3 conv with
    `filters` channels, FiLM by phi, ReLU, 2 x 2 max-pool) on an image given as
    `input_dim` numbers, then a linear output layer (none with `output_dim=None`: the
    flattened features). No batch normalisation: its statistics would be shared by the
    tasks of a batch (refused by UserNetwork); FiLM is the per-task conditioning.

    Under the bfloat16 precision (viable_tf/precision.py) the convolutions and the output
    layer compute in bfloat16. With a context, FiLM, ReLU and the pooling compute in
    float32: TensorFlow's CPU kernels for element-wise bfloat16 ops are slower than its
    float32 ones, casts included. Without one (MAML), ReLU and the pooling stay in
    bfloat16, which measured faster there (benchmarks/bfloat16.py).
    In float32 every layer computes in it."""
    if int(np.prod(image_shape)) != input_dim:
        raise ValueError(f"image_shape {tuple(image_shape)} does not hold input_dim={input_dim}")
    x = keras.Input((input_dim,), name="x")
    inputs = [x]
    h = keras.layers.Reshape(tuple(image_shape))(x)
    if context_dim:
        context = keras.Input((context_dim,), name="context")
        inputs.append(context)
    elementwise = "float32" if context_dim else None  # None: the run's precision (docstring)
    for _ in range(blocks):
        h = keras.layers.Conv2D(filters, 3, padding="same")(h)
        if context_dim:
            h = FiLM(dtype=elementwise)([h, context])
        h = keras.layers.ReLU(dtype=elementwise)(h)
        h = keras.layers.MaxPooling2D(2, dtype=elementwise)(h)
    h = keras.layers.Flatten()(h)
    if output_dim is not None:
        h = keras.layers.Dense(output_dim)(h)
    return keras.Model(inputs if context_dim else x, h)
