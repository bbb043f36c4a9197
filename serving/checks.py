"""The boundary checks: every request's inputs, as NumPy arrays, checked before anything
reaches TensorFlow. Each failure names the input and says what was expected: missing,
extra or misnamed inputs, wrong dtype, wrong rank or static dimension, tasks (B) or
support points (K) that disagree between inputs, non-finite values, a classifier's labels
outside 0..N-1 (and, for a prototype head, a class without a support point), an empty
batch, K or Q above the server's bounds, and for the PNG signatures strings that are
not PNGs or decode to more pixels than the server's bound (read from their headers).
The same checks run for gRPC and REST, with the same messages; the model's own in-graph
checks stay as a last guard. Names and axes come from the contract,
`viable_tf.export.signature`.

Shape legend: B tasks, K support points, Q query points.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from serving.errors import ServingError, invalid
from serving.servable import Signature
from viable_tf.export import signature as sig


@dataclass(frozen=True)
class Limits:
    """Bounds a request must stay within."""

    max_support: int = 1000  # K
    max_query: int = 10_000  # Q
    max_tasks: int = 10_000  # B
    max_image_pixels: int = 1 << 26  # decoded pixels of a request's PNGs, all together


def _describe(spec: tf.TensorSpec) -> str:
    dims = ", ".join("?" if d is None else str(d) for d in spec.shape.as_list())
    return f"{spec.dtype.name} [{dims}]"


def check_inputs(
    signature: Signature, inputs: dict[str, np.ndarray], limits: Limits
) -> dict[str, np.ndarray]:
    """Validates inputs against a signature; returns them."""
    expected = signature.inputs
    missing = sorted(set(expected) - set(inputs))
    extra = sorted(set(inputs) - set(expected))
    if missing or extra:
        wanted = ", ".join(f"{k}: {_describe(v)}" for k, v in sorted(expected.items()))
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing)}")
        if extra:
            parts.append(f"unexpected {', '.join(extra)}")
        hint = ""
        masked = sig.MASKED_FORM.get(signature.name)
        if sig.SUPPORT_MASK in extra and masked:
            hint = f" (a request with {sig.SUPPORT_MASK} goes to signature '{masked}')"
        raise invalid(
            f"inputs do not match signature '{signature.name}': {'; '.join(parts)}. "
            f"Expected inputs: {wanted}{hint}"
        )
    if all(np.ndim(v) >= 1 and np.shape(v)[0] == 0 for v in inputs.values()):
        # (over REST an empty batch arrives as empty lists, with no shape to check)
        raise invalid("empty request: expected at least one task (B >= 1)")
    batch_sizes = {}
    for name, spec in expected.items():
        value = inputs[name]
        if value.dtype != spec.dtype.as_numpy_dtype:
            raise invalid(
                f"input {name}: expected dtype {spec.dtype.name}, "
                f"got {tf.as_dtype(value.dtype).name}"
            )
        if not spec.shape.is_compatible_with(value.shape):
            raise invalid(
                f"input {name}: expected shape {_describe(spec)}, got "
                f"[{', '.join(map(str, value.shape))}]"
            )
        if value.ndim:
            batch_sizes[name] = value.shape[0]
        if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
            raise invalid(f"input {name} contains NaN or Inf; expected finite values")
        if spec.dtype == tf.string and not all(isinstance(v, bytes) for v in value.flat):
            raise invalid(f"input {name}: expected strings (bytes), got other values")
    if len(set(batch_sizes.values())) > 1:
        sizes = ", ".join(f"{k}: {v}" for k, v in sorted(batch_sizes.items()))
        raise invalid(f"inputs disagree on the number of tasks B (axis 0): {sizes}")
    batch = next(iter(batch_sizes.values()), 1)
    if batch < 1:
        raise invalid("empty request: expected at least one task (B >= 1)")
    if batch > limits.max_tasks:
        raise invalid(f"B = {batch} tasks exceeds the server's bound of {limits.max_tasks}")
    support = {k: inputs[k].shape[1] for k in sig.K_AXIS_INPUTS if k in inputs}
    if len(set(support.values())) > 1:
        sizes = ", ".join(f"{k}: {v}" for k, v in sorted(support.items()))
        raise invalid(
            f"support inputs disagree on the number of support points K (axis 1): {sizes}"
        )
    if support and max(support.values()) > limits.max_support:
        raise invalid(
            f"K = {max(support.values())} support points exceeds the server's bound of "
            f"{limits.max_support} (--max_support)"
        )
    for name in sig.Q_AXIS_INPUTS:
        if name in inputs and inputs[name].shape[1] > limits.max_query:
            raise invalid(
                f"Q = {inputs[name].shape[1]} query points exceeds the server's bound of "
                f"{limits.max_query} (--max_query)"
            )
    pixels = 0
    for name in (sig.SUPPORT_PNG, sig.QUERY_PNG):
        if name in inputs:
            message = sig.check_pngs(name, inputs[name])
            if message:
                raise invalid(message)
            pixels += sum(w * h for w, h in map(sig.image_size, inputs[name].flat))
    if pixels > limits.max_image_pixels:
        raise invalid(
            f"the request's images hold {pixels} pixels, above the server's bound of "
            f"{limits.max_image_pixels} (--max_image_pixels)"
        )
    if signature.num_classes is not None and sig.SUPPORT_Y in inputs:
        message = sig.check_labels(
            inputs[sig.SUPPORT_Y], inputs.get(sig.SUPPORT_MASK), signature.num_classes
        )
        if message:
            raise invalid(message)
        if signature.every_class:
            missing = sig.empty_classes(
                inputs[sig.SUPPORT_Y], inputs.get(sig.SUPPORT_MASK), signature.num_classes
            )
            if missing:
                task, label = missing[0]
                raise invalid(
                    f"{sig.empty_class_message(signature.num_classes, signature.every_class)}: "
                    f"class {label} has "
                    f"none in task {task}"
                )
    return inputs


def check_output_filter(signature: Signature, output_filter) -> list[str]:
    """The outputs a request asks for (all if none named)."""
    names = list(output_filter)
    unknown = [name for name in names if name not in signature.outputs]
    if unknown:
        raise ServingError(
            invalid("").code,
            f"output_filter names unknown outputs {', '.join(unknown)}; signature "
            f"'{signature.name}' has: {', '.join(sorted(signature.outputs))}",
        )
    return names or list(signature.outputs)
