"""How the networks' weights start (docs/method.md §3.1): the code lineage's, or Keras'.

- ``'torch'`` (the default): kernels *and biases* uniform in ±1/sqrt(fan_in), as
  PyTorch's ``nn.Linear`` starts them in CAVIA's public code, on which VIABLE is built.
- ``'keras'``: Keras' defaults, Glorot-uniform kernels and zero biases.

The difference matters for a loss network: with ReLU hidden units and zero biases it
is positively homogeneous, Lhat(c f) = c Lhat(f) for c > 0, and since its biases get
no meta-gradient under ReLU it stays so through all of meta-training.

fan_in is always that of the whole layer: a first layer split into parts (the
prediction network's [x; phi], the relation network's [f_j; f_k]) starts as the
one [fan_in, H] kernel it computes. Every draw comes from Keras' seed generator, so
a run's seed (``keras.utils.set_random_seed``) fixes the initial weights.
"""

from __future__ import annotations

import math

import keras

INITS = ("torch", "keras")


def check_init(init: str) -> str:
    """Returns `init` if it names a known scheme; raises ValueError naming the choices."""
    if init not in INITS:
        raise ValueError(f"unknown init {init!r}: expected one of {', '.join(map(repr, INITS))}")
    return init


def kernel_initializer(init: str, *, fan_in: int, fan_out: int) -> keras.initializers.Initializer:
    """The initializer of (one part of) a [fan_in, fan_out] kernel under `init`."""
    if check_init(init) == "torch":
        bound = 1.0 / math.sqrt(fan_in)
    else:  # Glorot-uniform, with the whole layer's fan-in
        bound = math.sqrt(6.0 / (fan_in + fan_out))
    return keras.initializers.RandomUniform(-bound, bound)


def bias_initializer(init: str, *, fan_in: int) -> keras.initializers.Initializer:
    """The initializer of the bias of a layer with `fan_in` inputs under `init`."""
    if check_init(init) == "torch":
        bound = 1.0 / math.sqrt(fan_in)
        return keras.initializers.RandomUniform(-bound, bound)
    return keras.initializers.Zeros()
