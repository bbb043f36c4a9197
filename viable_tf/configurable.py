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
    """`gin.configurable` for a Keras layer class, keeping its constructor signature; only
    its own named arguments bind in gin (not what `**kwargs` passes on to Keras), so a
    config binding an argument the class does not have is refused when it is parsed."""
    signature = inspect.signature(cls.__init__)
    named = set()
    for klass in cls.__mro__:  # its own and its bases' (what **kwargs passes up), not Keras'
        if klass.__module__.split(".")[0] in ("keras", "tensorflow", "builtins"):
            break
        if "__init__" in vars(klass):
            parameters = inspect.signature(vars(klass)["__init__"]).parameters.values()
            named |= {
                p.name
                for p in parameters
                if p.name != "self" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
            }
    cls = gin.configurable(cls, allowlist=sorted(named))
    cls.__init__.__signature__ = signature
    return cls


def expect(value: object, kind: type, refusal: str) -> None:
    """Refuses with `refusal` (ValueError, one line) a constructor argument that is not of
    its declared type (a config binding `head='prototypes'` where a Head object is meant):
    the boundary's check of what was given, not a probe of what a learner can do."""
    if not isinstance(value, kind):
        raise ValueError(refusal)
