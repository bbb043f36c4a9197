"""The warm-up requests an export ships (assets.extra/tf_serving_warmup_requests, TF
Serving's format): the server replays them before a version takes traffic, so its
first client does not pay for the graphs' first runs. `module` below is the export's
`saved_model.AdaptThenPredict`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from viable_tf.export import signature as sig
from viable_tf.export.pngs import encode_pngs

WarmupInputs = Callable[..., dict[str, np.ndarray]]


def generic_warmup_inputs(
    module, rng: np.random.Generator, *, num_support: int, num_query: int
) -> dict[str, np.ndarray]:
    """Warm-up inputs when the caller names none: standard normal x of the served
    shape, labels 0..N-1 or standard normal targets."""
    learner = module.learner
    if module.classification:
        support_y = (np.arange(num_support) % learner.output_dim).astype(np.int32)[None]
    else:
        support_y = rng.normal(size=(1, num_support, learner.output_dim)).astype(np.float32)
    shape = module.input_shape
    return {
        sig.SUPPORT_X: rng.normal(size=(1, num_support, *shape)).astype(np.float32),
        sig.SUPPORT_Y: support_y,
        sig.QUERY_X: rng.normal(size=(1, num_query, *shape)).astype(np.float32),
    }


def warmup_requests(module, *, model_name: str, inputs: WarmupInputs | None = None) -> list:
    """PredictionLog records that exercise serving_default (K = 10 and K = 0) and
    serving_masked (K = 10, the batcher's form) before traffic, and an image
    classifier's serving_png and serving_png_masked (its drawings as PNG files). A
    classifier that needs every class in its support set (a prototype head, an image
    classifier) gets K = max(10, N), and no K = 0.

    `inputs(rng, num_support=K, num_query=Q)` gives one task's support_x, support_y and
    query_x in the served input space (a task family's `warmup_inputs`, or images for
    an export with a featurizer); by default `generic_warmup_inputs`.
    """
    from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

    rng = np.random.default_rng(0)
    if inputs is None:
        inputs = functools.partial(generic_warmup_inputs, module)
    records = []
    full, empty = 10, 0
    if module.every_class_reason:
        full, empty = max(full, module.learner.output_dim), None
    plans = [(sig.SERVING_DEFAULT, full), (sig.SERVING_DEFAULT, empty), (sig.SERVING_MASKED, full)]
    if module.takes_png:
        plans += [(sig.SERVING_PNG, full), (sig.SERVING_PNG_MASKED, full)]
    for signature_name, k in plans:
        if k is None:
            continue
        request = predict_pb2.PredictRequest()
        request.model_spec.name = model_name
        request.model_spec.signature_name = signature_name
        values = dict(inputs(rng, num_support=k, num_query=10))
        if signature_name in (sig.SERVING_PNG, sig.SERVING_PNG_MASKED):
            values[sig.SUPPORT_PNG] = encode_pngs(values.pop(sig.SUPPORT_X).clip(0, 1))
            values[sig.QUERY_PNG] = encode_pngs(values.pop(sig.QUERY_X).clip(0, 1))
        if signature_name in (sig.SERVING_MASKED, sig.SERVING_PNG_MASKED):
            values[sig.SUPPORT_MASK] = np.ones((1, k), bool)
        for name, value in values.items():
            request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
        records.append(
            prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)
            )
        )
    return records
