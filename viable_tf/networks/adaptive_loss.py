"""The task-adaptive learned loss's networks (MeTAL, Baik et al. 2021; docs/method.md §11).

A `ModulatedTerm` is one learned term of the inner loss: for each inner step (or one
shared by all steps) an MLP over rows of numbers, whose every weight tensor W an affine
adapter modulates per task from a task-state vector s:

    (m, o) = adapter(s)                 Linear(s, s), ReLU, Linear(s, 2T): T multipliers, T offsets
    W' = (1 + a_i m_i) W + b_i o_i      a_i, b_i meta-learned scalars that start at 0

so that at initialisation the term's network is its own weights (the adapter's output
is multiplied by zero). The term reads its rows one by one (MeTAL's form: the mean of
one output per row) or in every ordered pair of a left and a right set (the relational
form: the mean over real pairs), T = 2 tensors a layer (kernel, bias).

Weights start as MeTAL's code starts them (`init='metal'`): the MLP's kernels
Glorot-uniform, its biases zero; or as VIABLE's loss networks (`init='torch'`, PyTorch's
`nn.Linear`: kernels and biases uniform in ±1/sqrt(fan_in)). `output_init='zeros'`
zeroes the output layer: the term then starts flat, its value and its gradient 0. The
adapter starts as PyTorch's `nn.Linear`.

Shape legend: B tasks, P rows (points), R right rows (pairs), F row width, S task-state
width, H hidden units, T weight tensors of one network.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import keras
import tensorflow as tf

from viable_tf.networks import initializers
from viable_tf.ops import masked_mean

#: How a term's layers start: as MeTAL's code (Glorot kernels, zero biases) or as
#: VIABLE's loss networks (PyTorch's nn.Linear); and its output layer: as the rest, or zero.
INITS = ("metal", "torch")
OUTPUT_INITS = ("init", "zeros")
#: Where a term's network is read: per row (MeTAL's), or per ordered pair of rows.
OVER = ("points", "pairs")
ACTIVATIONS = {"relu": tf.nn.relu, "tanh": tf.tanh}


class ModulatedTerm(keras.layers.Layer):
    """One learned term: `num_networks` MLPs on rows of width `input_dim` (for pairs, a
    left row of `input_dim` then a right row of `right_dim`), each modulated per task by
    its own adapter on a state of width `adapter_dim` (0: no adapter, the MLP as it is).

    `hidden_units` None is MeTAL's one hidden layer as wide as the input."""

    def __init__(
        self,
        *,
        input_dim: int,
        num_networks: int,
        adapter_dim: int,
        over: str = "points",
        right_dim: int = 0,
        hidden_units: Sequence[int] | None = None,
        activation: str = "relu",
        init: str = "metal",
        output_init: str = "init",
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        if over not in OVER:
            raise ValueError(f"over must be one of {OVER}, got {over!r}")
        if init not in INITS:
            raise ValueError(f"init must be one of {INITS}, got {init!r}")
        if output_init not in OUTPUT_INITS:
            raise ValueError(f"output_init must be one of {OUTPUT_INITS}, got {output_init!r}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        if over == "pairs" and right_dim < 1:
            raise ValueError("a term over pairs needs the right rows' width (right_dim >= 1)")
        self.input_dim = int(input_dim)  # F (the left row's, for pairs)
        self.right_dim = int(right_dim) if over == "pairs" else 0
        self.over = over
        self.num_networks = int(num_networks)
        self.adapter_dim = int(adapter_dim)  # S (0: no adapter)
        width = self.input_dim + self.right_dim
        units = (width,) if hidden_units is None else tuple(int(u) for u in hidden_units)
        if not units or any(u < 1 for u in units):
            raise ValueError(f"hidden_units must be positive ints, got {hidden_units!r}")
        self.hidden_units = units
        self.activation = activation
        self.init = init
        self.output_init = output_init
        self.networks: list[list[tf.Variable]] = []  # per network: kernel_0, bias_0, ...
        self.adapters: list[list[tf.Variable]] = []  # per network: A1, c1, A2, c2, a, b
        sizes = (width, *units, 1)
        for n in range(self.num_networks):
            weights = []
            for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
                last = i == len(sizes) - 2
                kernel_init = (
                    "zeros"
                    if last and output_init == "zeros"
                    else initializers.kernel_initializer(
                        "keras" if init == "metal" else "torch", fan_in=fan_in, fan_out=fan_out
                    )
                )
                bias_init = (
                    "zeros"
                    if init == "metal" or (last and output_init == "zeros")
                    else initializers.bias_initializer("torch", fan_in=fan_in)
                )
                weights.append(
                    self.add_weight(
                        shape=(fan_in, fan_out), initializer=kernel_init, name=f"net{n}_kernel_{i}"
                    )
                )
                bias = self.add_weight(
                    shape=(fan_out,), initializer=bias_init, name=f"net{n}_bias_{i}"
                )
                weights.append(bias)
            self.networks.append(weights)
            # Attributes of their own, so that checkpoints hold them (a list does not).
            for i, w in enumerate(weights):
                setattr(self, f"net{n}_{i}", w)
            if self.adapter_dim:
                adapter = self._adapter_weights(n, len(weights))
                self.adapters.append(adapter)
                for i, w in enumerate(adapter):
                    setattr(self, f"adapter{n}_{i}", w)

    @property
    def num_tensors(self) -> int:
        """T, the weight tensors of one network (a kernel and a bias a layer)."""
        return 2 * (len(self.hidden_units) + 1)

    def _adapter_weights(self, n: int, num_tensors: int) -> list[tf.Variable]:
        s = self.adapter_dim
        torch_like = initializers.kernel_initializer("torch", fan_in=s, fan_out=s)
        bias_init = initializers.bias_initializer("torch", fan_in=s)
        return [
            self.add_weight(shape=(s, s), initializer=torch_like, name=f"adapter{n}_kernel_0"),
            self.add_weight(shape=(s,), initializer=bias_init, name=f"adapter{n}_bias_0"),
            self.add_weight(
                shape=(s, 2 * num_tensors),
                initializer=initializers.kernel_initializer(
                    "torch", fan_in=s, fan_out=2 * num_tensors
                ),
                name=f"adapter{n}_kernel_1",
            ),
            self.add_weight(
                shape=(2 * num_tensors,), initializer=bias_init, name=f"adapter{n}_bias_1"
            ),
            # a_i, b_i: the scales of the multipliers and offsets, zero at the start.
            self.add_weight(
                shape=(num_tensors,), initializer="zeros", name=f"adapter{n}_multiplier"
            ),
            self.add_weight(shape=(num_tensors,), initializer="zeros", name=f"adapter{n}_offset"),
        ]

    def modulated(self, network: int, state: tf.Tensor | None) -> list[tf.Tensor]:
        """The weights of network `network` for each task, [B, *w.shape] under the adapter
        on `state` [B, S]; as they are (no task axis) without an adapter."""
        weights = self.networks[network]
        if not self.adapter_dim:
            return list(weights)
        kernel_0, bias_0, kernel_1, bias_1, scale_m, scale_o = self.adapters[network]
        hidden = tf.nn.relu(tf.matmul(state, kernel_0) + bias_0)  # [B, S]
        multipliers, offsets = tf.split(tf.matmul(hidden, kernel_1) + bias_1, 2, axis=-1)  # [B, T]
        out = []
        for i, w in enumerate(weights):
            shape = [-1] + [1] * len(w.shape)  # [B, 1, ...]: one number a task and tensor
            m = tf.reshape(scale_m[i] * multipliers[:, i], shape)
            o = tf.reshape(scale_o[i] * offsets[:, i], shape)
            out.append((1.0 + m) * w[None] + o)  # [B, *w.shape]
        return out

    def _after_first(self, weights: list[tf.Tensor], hidden: tf.Tensor) -> tf.Tensor:
        """The MLP after its first layer's pre-activation `hidden` [B, ..., H0]: -> [B, ...]."""
        act = ACTIVATIONS[self.activation]
        for i in range(1, len(self.hidden_units) + 1):
            kernel, bias = weights[2 * i], weights[2 * i + 1]
            hidden = _dense(act(hidden), kernel, bias)
        return hidden[..., 0]

    def points(self, network: int, state, rows: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        """The mean over each task's real rows of the network's output: rows [B, P, F],
        mask bool [B, P] -> [B]."""
        weights = self.modulated(network, state)
        hidden = _dense(rows, weights[0], weights[1])  # [B, P, H0]
        return masked_mean(self._after_first(weights, hidden), mask, axis=1)

    def pairs(
        self,
        network: int,
        state,
        left: tf.Tensor,
        left_mask: tf.Tensor,
        right: tf.Tensor,
        right_mask: tf.Tensor,
    ) -> tf.Tensor:
        """The mean over each task's real ordered pairs (j, k) of the network's output on
        [left_j; right_k]: left [B, P, F], right [B, R, F_r], masks bool -> [B]. The first
        layer is applied to each side once (its kernel split by rows) and summed per pair."""
        weights = self.modulated(network, state)
        kernel, bias = weights[0], weights[1]
        f = self.input_dim
        left_part = _dense(left, kernel[..., :f, :], bias)  # [B, P, H0]
        right_part = _dense(right, kernel[..., f:, :])  # [B, R, H0]
        hidden = left_part[:, :, None, :] + right_part[:, None, :, :]  # [B, P, R, H0]
        values = self._after_first(weights, hidden)  # [B, P, R]
        pair_mask = tf.logical_and(left_mask[:, :, None], right_mask[:, None, :])
        return masked_mean(values, pair_mask, axis=(1, 2))


def _dense(x: tf.Tensor, kernel: tf.Tensor, bias: tf.Tensor | None = None) -> tf.Tensor:
    """x [B, ..., I] times a kernel shared [I, O] or per task [B, I, O], plus a bias [O]
    or [B, O]."""
    if len(kernel.shape) == 2:
        out = tf.tensordot(x, kernel, axes=1)
    else:  # per task: flatten the middle axes
        shape = tf.shape(x)
        flat = tf.reshape(x, [shape[0], -1, shape[-1]])  # [B, M, I]
        out = tf.matmul(flat, kernel)  # [B, M, O]
        out = tf.reshape(out, tf.concat([shape[:-1], tf.shape(kernel)[-1:]], 0))
    if bias is None:
        return out
    if len(bias.shape) == 1:
        return out + bias
    extra = len(x.shape) - 2  # the axes between B and the last
    return out + tf.reshape(bias, tf.concat([tf.shape(bias)[:1], [1] * extra, [-1]], 0))
