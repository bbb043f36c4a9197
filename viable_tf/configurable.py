"""gin registration for Keras layers.

`gin.configurable` replaces a class's `__init__` with a `(*args, **kwargs)`
wrapper; Keras reads the raw argument spec of `__init__` to build a layer's
config and fails on it. `keras_configurable` registers the class with gin and
puts the real signature back on the wrapper, which `inspect` honours.
"""

from __future__ import annotations

import inspect

import gin


def keras_configurable(cls: type) -> type:
    """`gin.configurable` for a Keras layer class, keeping its constructor signature."""
    signature = inspect.signature(cls.__init__)
    cls = gin.configurable(cls)
    cls.__init__.__signature__ = signature
    return cls
