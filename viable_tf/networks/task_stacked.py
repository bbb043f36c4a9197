"""A Keras model run on B tasks' own weights at once, the tasks stacked on the channel axis
(MAML's functional forward pass on images).

MAML gives every task its own copy of the weights. For Dense layers a batched matmul
does that, but TensorFlow has no batched convolution: `tf.vectorized_map` falls back to
a loop over tasks, and XLA cannot compile the loop. Stacked on the channel axis, B tasks'
convolutions are one grouped convolution (an input of B * C_in channels, a filter of
C_in -> B * C_out, so output group b sees input group b alone), which oneDNN runs as one
op, with first- and second-order gradients, where the CPU kernels have them: oneDNN's do,
TensorFlow's own (TF_ENABLE_ONEDNN_OPTS=0) refuse a grouped convolution's gradient, so
there `grouped_gradients_supported()` is False and convolutions take the loop.

`stacked_forward` runs a chain of layers it knows (InputLayer, Reshape, Conv2D, Dense,
ReLU, Activation, MaxPooling2D, AveragePooling2D, Flatten; each layer's input the
previous layer's output) and returns None for any other model, which then takes the
per-task loop. It equals the loop up to the order of float sums (tested).

Shape legend: B tasks, P points per task, D input numbers per point, H x W x C a feature
map, F features, Y outputs.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import keras
import tensorflow as tf

ELEMENTWISE = (keras.layers.ReLU, keras.layers.Activation)
POOLING = (keras.layers.MaxPooling2D, keras.layers.AveragePooling2D)
KNOWN = (keras.layers.InputLayer, keras.layers.Reshape, keras.layers.Conv2D)
KNOWN += (keras.layers.Dense, keras.layers.Flatten, *ELEMENTWISE, *POOLING)


@functools.cache
def grouped_gradients_supported() -> bool:
    """Whether this process's kernels give a grouped convolution's gradients (tried once on
    a tiny one): oneDNN's do, TensorFlow's own CPU kernels do not."""
    x = tf.ones([1, 3, 3, 2])
    filters = tf.ones([1, 1, 1, 2])  # two groups of one channel
    try:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(tf.nn.conv2d(x, filters, 1, "SAME"))
        tape.gradient(y, [x, filters])
    except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError):
        return False
    return True


def is_graph_of_layers(model: keras.Model) -> bool:
    """Whether a user's Keras model is a graph of layers (functional or Sequential): Keras
    gives those a list of `inputs` and a subclassed model none. The one place the library
    asks a model it did not make what it is (its own parts declare what they offer)."""
    return isinstance(getattr(model, "inputs", None), list)


def chain_of_known_layers(model: keras.Model) -> list[keras.layers.Layer] | None:
    """The model's layers in order if it is a chain of KNOWN layers from one input to one
    output (channels last, no context input), else None."""
    if not isinstance(model, keras.Model) or not is_graph_of_layers(model):
        return None  # a subclassed model: no graph of layers to read
    if len(model.inputs) != 1 or len(model.outputs) != 1:
        return None
    layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
    if not layers or any(not isinstance(layer, KNOWN) for layer in layers):
        return None
    convolutions = any(isinstance(layer, keras.layers.Conv2D) for layer in layers)
    if convolutions and not grouped_gradients_supported():
        return None
    # How many times each layer is called, from the model's public config: a chain calls
    # each once, on what the layer before it gave.
    calls = {entry["name"]: len(entry["inbound_nodes"]) for entry in model.get_config()["layers"]}
    previous = model.inputs[0]
    for layer in layers:
        if calls.get(layer.name) != 1 or layer.input is not previous:
            return None
        if isinstance(layer, (keras.layers.Conv2D, *POOLING)) and (
            layer.data_format != "channels_last"
        ):
            return None
        if isinstance(layer, keras.layers.Conv2D) and layer.groups != 1:
            return None
        previous = layer.output
    return layers if previous is model.outputs[0] else None


class _Batched:
    """Activations of B tasks: as [B, P, ...] (`batched`) or, for convolutions, as
    [P, H, W, B * C] (`stacked`, task-major channels)."""

    def __init__(self, tensor: tf.Tensor, num_tasks: int) -> None:
        self.tensor, self.b, self.stacked = tensor, num_tasks, False

    def to_stacked(self) -> tf.Tensor:
        if not self.stacked:
            t = self.tensor  # [B, P, H, W, C]
            shape = tf.shape(t)
            t = tf.transpose(t, [1, 2, 3, 0, 4])  # [P, H, W, B, C]
            self.tensor = tf.reshape(t, tf.stack([shape[1], shape[2], shape[3], -1]))
            self.stacked = True
        return self.tensor

    def to_batched(self) -> tf.Tensor:
        if self.stacked:
            t = self.tensor  # [P, H, W, B * C]
            shape = tf.shape(t)
            t = tf.reshape(t, tf.stack([shape[0], shape[1], shape[2], self.b, -1]))
            self.tensor = tf.transpose(t, [3, 0, 1, 2, 4])  # [B, P, H, W, C]
            self.stacked = False
        return self.tensor


def _computed(layer: keras.layers.Layer, value: tf.Tensor) -> tf.Tensor:
    """`value` in the dtype `layer` computes in (bfloat16 under a mixed policy, where its
    variables stay float32), as Keras casts a layer's inputs and weights in its own call."""
    return tf.cast(value, layer.compute_dtype)


def stacked_forward(
    layers: list[keras.layers.Layer], variables: Sequence, params: Sequence, x: tf.Tensor
) -> tf.Tensor:
    """`layers` (from chain_of_known_layers) on x [B, P, D] with per-task weights:
    params[i] [B, *variables[i].shape] is task b's copy of variables[i] -> [B, P, Y]."""
    weight = {id(v): p for v, p in zip(variables, params, strict=True)}
    b = x.shape[0] if x.shape[0] is not None else tf.shape(x)[0]
    h = _Batched(x, b)
    for layer in layers:
        if isinstance(layer, keras.layers.Reshape):
            t = h.to_batched()
            h.tensor = tf.reshape(t, tf.concat([tf.shape(t)[:2], layer.target_shape], 0))
        elif isinstance(layer, keras.layers.Conv2D):
            t = h.to_stacked()  # [P, H, W, B * C_in]
            kernel = weight[id(layer.kernel)]  # [B, kh, kw, C_in, C_out]
            kh, kw, c_in, _ = layer.kernel.shape
            filters = tf.reshape(tf.transpose(kernel, [1, 2, 3, 0, 4]), [kh, kw, c_in, -1])
            t, filters = _computed(layer, t), _computed(layer, filters)
            t = tf.nn.conv2d(
                t,
                filters,  # [kh, kw, C_in, B * C_out]: group b reads input channels of task b
                strides=layer.strides,
                padding=layer.padding.upper(),
                dilations=layer.dilation_rate,
            )
            if layer.use_bias:
                t = t + _computed(layer, tf.reshape(weight[id(layer.bias)], [-1]))  # [B * C_out]
            h.tensor = layer.activation(t)
        elif isinstance(layer, POOLING):
            pool = tf.nn.max_pool2d if isinstance(layer, keras.layers.MaxPooling2D) else None
            pool = pool or tf.nn.avg_pool2d
            h.tensor = pool(h.to_stacked(), layer.pool_size, layer.strides, layer.padding.upper())
        elif isinstance(layer, keras.layers.Flatten):
            t = h.to_batched()  # [B, P, ...]
            h.tensor = tf.reshape(t, tf.stack([tf.shape(t)[0], tf.shape(t)[1], -1]))
        elif isinstance(layer, keras.layers.Dense):
            t = _computed(layer, h.to_batched())  # [B, P, F]
            t = tf.einsum("bpf,bfy->bpy", t, _computed(layer, weight[id(layer.kernel)]))
            if layer.use_bias:
                t = t + _computed(layer, weight[id(layer.bias)])[:, None, :]
            h.tensor = layer.activation(t)
        else:  # ELEMENTWISE: either layout
            h.tensor = layer(h.tensor)
    return h.to_batched()
