"""The wire codecs: gRPC TensorProtos and REST JSON (row and columnar) to NumPy arrays of
the signature's dtypes, and back. What the arrays must be is checks.py's.
"""

from __future__ import annotations

import base64
import binascii

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2

from serving.errors import invalid
from serving.servable import Signature
from viable_tf.export import signature as sig

# -- gRPC ---------------------------------------------------------------------------


# TensorFlow's own converters (tf.make_ndarray, tf.make_tensor_proto) handle every
# encoding but cost 30-80 us per tensor, a tenth of a small model call; the packed
# `tensor_content` encoding that clients (theirs included) send for numeric arrays is
# converted directly, everything else goes through TensorFlow's.
_PACKED_DTYPES = {
    np.dtype(dtype.as_numpy_dtype): dtype.as_datatype_enum
    for dtype in (tf.float32, tf.float64, tf.int32, tf.int64, tf.bool)
}
_NUMPY_OF = {enum: dtype for dtype, enum in _PACKED_DTYPES.items()}


def from_proto(proto: tensor_pb2.TensorProto) -> np.ndarray:
    """One TensorProto -> array (read-only when decoded from packed bytes)."""
    dtype = _NUMPY_OF.get(proto.dtype)
    if dtype is not None and proto.tensor_content and not proto.tensor_shape.unknown_rank:
        shape = [d.size for d in proto.tensor_shape.dim]
        return np.frombuffer(proto.tensor_content, dtype=dtype).reshape(shape)
    return tf.make_ndarray(proto)


def from_protos(protos) -> dict[str, np.ndarray]:
    """PredictRequest.inputs -> arrays; a malformed TensorProto is INVALID_ARGUMENT."""
    arrays = {}
    for name, proto in protos.items():
        try:
            arrays[name] = from_proto(proto)
        except Exception as error:
            raise invalid(f"input {name}: cannot decode TensorProto: {error}") from None
    return arrays


def fill_proto(proto: tensor_pb2.TensorProto, value: np.ndarray) -> None:
    """Writes `value` into `proto` (e.g. a response's output entry, in place)."""
    value = np.asarray(value)
    enum = _PACKED_DTYPES.get(value.dtype)
    if enum is None:
        proto.CopyFrom(tf.make_tensor_proto(value))
        return
    proto.dtype = enum
    for size in value.shape:
        proto.tensor_shape.dim.add().size = size
    proto.tensor_content = np.ascontiguousarray(value).tobytes()


def to_proto(value: np.ndarray) -> tensor_pb2.TensorProto:
    proto = tensor_pb2.TensorProto()
    fill_proto(proto, value)
    return proto


# -- REST ---------------------------------------------------------------------------


def _json_bytes(name: str, value):
    """A JSON string value as bytes: {"b64": "..."} decoded (TF Serving's form for binary
    data such as an encoded image), a plain string as its UTF-8 bytes; lists recursively."""
    if isinstance(value, list):
        return [_json_bytes(name, item) for item in value]
    if isinstance(value, dict):
        if set(value) != {"b64"} or not isinstance(value["b64"], str):
            raise invalid(f'input {name}: a binary value must be {{"b64": "<base64 string>"}}')
        try:
            return base64.b64decode(value["b64"], validate=True)
        except (binascii.Error, ValueError):
            raise invalid(f'input {name}: "b64" holds a string that is not valid base64') from None
    if isinstance(value, str):
        return value.encode("utf-8")
    raise invalid(f'input {name}: expected strings (binary ones as {{"b64": ...}})')


def _json_strings(name: str, value) -> np.ndarray:
    """Nested lists of strings -> an object array of bytes (NumPy's own bytes dtype would
    cut trailing NUL bytes off binary values)."""
    values = _json_bytes(name, value)
    shape = []
    level = values
    while isinstance(level, list):
        shape.append(len(level))
        if not level:
            break
        level = level[0]
    try:
        array = np.array(values, dtype=object)
    except ValueError:
        array = None
    if array is None or array.shape != tuple(shape):  # ragged: lists left inside
        raise invalid(f"input {name}: ragged nested lists; expected a rectangular array")
    return array


def _json_array(name: str, value, spec: tf.TensorSpec) -> np.ndarray:
    """A JSON value as an array of the signature's dtype (JSON numbers carry no dtype)."""
    if spec.dtype == tf.string:
        return _json_strings(name, value)
    try:
        array = np.asarray(value)
    except ValueError:
        raise invalid(f"input {name}: ragged nested lists; expected a rectangular array") from None
    kind = array.dtype.kind
    target = spec.dtype.as_numpy_dtype
    if array.size == 0 and kind == "f":
        return _empty(name, array, spec).astype(target)  # an empty list has no element type
    if spec.dtype.is_floating and kind in "iuf":
        return array.astype(target)
    if spec.dtype.is_integer and kind in "iu":
        return array.astype(target)
    if spec.dtype == tf.bool and kind == "b":
        return array
    got = {"b": "booleans", "U": "strings", "O": "mixed or nested values"}.get(
        kind, array.dtype.name
    )
    raise invalid(f"input {name}: expected {spec.dtype.name} values, got {got}")


def _empty(name: str, array: np.ndarray, spec: tf.TensorSpec) -> np.ndarray:
    """JSON can carry an empty support set only as [B, 0]: that means K = 0, i.e.
    [B, 0, *the signature's trailing dimensions], as a [B, 0, D] tensor does over gRPC."""
    trailing = spec.shape.as_list()[2:]
    if (
        name in sig.K_AXIS_INPUTS
        and array.ndim == 2
        and array.shape[1] == 0
        and spec.shape.rank is not None
        and spec.shape.rank > 2
        and None not in trailing
    ):
        return array.reshape([array.shape[0], 0, *trailing])
    return array


def from_json(body: dict, signature: Signature) -> tuple[dict[str, np.ndarray], str]:
    """A REST predict body -> (arrays, 'row' or 'columnar')."""
    if not isinstance(body, dict):
        raise invalid('request body must be a JSON object with "instances" or "inputs"')
    keys = {"instances", "inputs"} & set(body)
    if len(keys) != 1:
        raise invalid(
            'request body must have exactly one of "instances" (row) or "inputs" (columnar)'
        )
    unknown = set(body) - {"instances", "inputs", "signature_name"}
    if unknown:
        raise invalid(f"unknown fields in request body: {', '.join(sorted(unknown))}")
    names = list(signature.inputs)
    if "instances" in body:
        instances = body["instances"]
        if not isinstance(instances, list):
            raise invalid('"instances" must be a list, one element per task')
        if not instances:
            raise invalid('"instances" is empty: expected at least one task')
        if len(names) == 1 and not isinstance(instances[0], dict):
            columns = {names[0]: instances}
        else:
            if not all(isinstance(instance, dict) for instance in instances):
                raise invalid(f"each instance must be an object with the inputs {', '.join(names)}")
            keys_seen = set().union(*instances)
            for index, instance in enumerate(instances):
                if set(instance) != keys_seen:
                    raise invalid(
                        f"instance {index} has inputs {sorted(instance)}; every instance must "
                        f"name the same inputs ({sorted(keys_seen)})"
                    )
            columns = {key: [instance[key] for instance in instances] for key in keys_seen}
        style = "row"
    else:
        inputs = body["inputs"]
        if isinstance(inputs, dict):
            columns = inputs
        elif len(names) == 1:
            columns = {names[0]: inputs}
        else:
            raise invalid(f'"inputs" must be an object with the inputs {", ".join(names)}')
        style = "columnar"
    arrays = {}
    for name, value in columns.items():
        spec = signature.inputs.get(name)
        if spec is None:
            continue  # reported as an unexpected input by check_inputs
        arrays[name] = _json_array(name, value, spec)
    arrays.update({k: np.asarray(v) for k, v in columns.items() if k not in signature.inputs})
    return arrays, style


def to_json(outputs: dict[str, np.ndarray], style: str) -> dict:
    """Outputs -> TF Serving's REST response: "predictions" (row) or "outputs" (columnar)."""
    if style == "row":
        if len(outputs) == 1:
            return {"predictions": next(iter(outputs.values())).tolist()}
        lists = {key: value.tolist() for key, value in outputs.items()}
        batch = len(next(iter(lists.values())))
        return {"predictions": [{key: lists[key][i] for key in lists} for i in range(batch)]}
    if len(outputs) == 1:
        return {"outputs": next(iter(outputs.values())).tolist()}
    return {"outputs": {key: value.tolist() for key, value in outputs.items()}}
