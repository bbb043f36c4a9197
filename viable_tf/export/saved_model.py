"""Export adapt-then-predict as a SavedModel in TF Serving's layout.

    BASE/<version>/saved_model.pb, variables/, assets.extra/

Signatures: as `viable_tf.export.signature` states them (serving_default takes
support_x, support_y, query_x; serving_masked adds support_mask; adapt, adapt_masked
and predict let a client adapt once and query many times). MAML adapts weights, not
a context: its export has serving_default and serving_masked only.

A classifier (cross-entropy learner, N way) takes integer labels and answers
    support_y int32 [B, K] (0..N-1) -> logits, probabilities [B, Q, N], classes int32 [B, Q]
in place of `predictions`; a label outside 0..N-1 is INVALID_ARGUMENT. With a
featurizer (Omniglot's frozen image encoder) x is the raw input, e.g. images
[B, K, 105, 105, 1], and D its feature size.

An export whose raw input is an image (`input_shape` [H, W, C], C = 1 or 3) also
takes its drawings as encoded PNG or JPEG strings, in serving_png and serving_png_masked:
    support_png string [B, K], support_y int32 [B, K], query_png string [B, Q]
Each is decoded in the graph as training reads an image file (any PNG bit depth and
colour type; transparent pixels count as white, as on paper; colour to grey by luma),
scaled to 0..1 and resized to H x W by area averaging when its size differs; a PNG of
H x W gives exactly the tensor serving_default takes (Omniglot's are read so for
training). A string that is not a PNG or JPEG, or an image larger than
`signature.MAX_PNG_SIDE` on a side, is INVALID_ARGUMENT, checked from its header before
it is decoded.

The graph is plain TensorFlow (the inner loop's gradient is traced into it; no
py_function, no XLA), so the real `tensorflow_model_server` loads it unchanged.
Inputs are checked inside the graph too (shapes agree, values finite), so a bad
request gets INVALID_ARGUMENT from any server.

Shape legend: B tasks, K support, Q query, D input dim, Y output dim, C context dim.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile

import keras
import tensorflow as tf

from viable_tf.export import signature as sig
from viable_tf.export.layout import (
    ASSETS_EXTRA,
    CONFIG_FILE,
    METADATA_FILE,
    WARMUP_FILE,
    next_version,
)
from viable_tf.export.pngs import decode_pngs
from viable_tf.export.warmup import WarmupInputs, warmup_requests
from viable_tf.learners import prototypes
from viable_tf.learners.base import AdaptedState, Learner


class AdaptThenPredict(tf.Module):
    """The served routine: adapt on each task's support set, predict on its queries.

    Args:
      learner: a trained learner. A cross-entropy learner is served as a classifier:
        integer `support_y` [B, K] (labels 0..N-1), outputs `logits`, `probabilities`
        [B, Q, N] and `classes` [B, Q].
      featurizer: optional frozen Keras model applied to every support and query input
        first (e.g. Omniglot's image encoder, or the pixels' preprocessing of an
        end-to-end model); `input_shape` is then the shape of one raw input.
      normalize: with a featurizer, whether its output is l2-normalised before the
        learner takes it (required: the export must feed the learner what it trained on).
        True where the learner trained on features read through LEO's format, which its
        loader l2-normalises (the Omniglot pipelines' encoder features and pixels); False
        where the featurizer gives the learner's inputs as training took them (a task
        family's `raw_inputs()`, e.g. a folder of images).
    """

    def __init__(
        self,
        learner: Learner,
        *,
        featurizer: keras.Model | None = None,
        input_shape: tuple[int, ...] | None = None,
        normalize: bool | None = None,
    ) -> None:
        super().__init__(name="adapt_then_predict")
        if (featurizer is None) != (input_shape is None):
            raise ValueError("featurizer and input_shape go together")
        if featurizer is not None and normalize is None:
            raise ValueError(
                "with a featurizer, say whether its output is l2-normalised for the learner: "
                "normalize=True for features read through LEO's format, False for a task "
                "family's raw_inputs() (e.g. a folder of images)"
            )
        self.learner = learner
        self.featurizer = featurizer
        self.normalize = normalize
        self.classification = learner.is_classifier
        self.input_shape = tuple(input_shape or (learner.input_dim,))  # one raw input
        # CAVIA and VIABLE adapt only a context phi, which can be returned and reused; not
        # a learner that adapts on the queries too (MeTAL's query term): its context is
        # of those queries, and no signature adapts without them.
        self.has_context = (
            learner.capabilities.adapts_context and not learner.capabilities.reads_queries
        )
        x_shape = [None, None, *self.input_shape]
        if self.classification:
            label = tf.TensorSpec([None, None], tf.int32, name=sig.SUPPORT_Y)
        else:
            label = tf.TensorSpec([None, None, learner.output_dim], tf.float32, name=sig.SUPPORT_Y)
        support = [tf.TensorSpec(x_shape, tf.float32, name=sig.SUPPORT_X), label]
        mask = tf.TensorSpec([None, None], tf.bool, name=sig.SUPPORT_MASK)
        query = tf.TensorSpec(x_shape, tf.float32, name=sig.QUERY_X)
        # Traced without AutoGraph, as Keras exports: the graphs hold the ops written.
        function = functools.partial(tf.function, autograph=False)
        self.serving_default = function(self._serve, input_signature=[*support, query])
        self.serving_masked = function(self._serve_masked, input_signature=[*support, mask, query])
        if self.has_context:
            context = tf.TensorSpec([None, learner.context_dim], tf.float32, name=sig.CONTEXT)
            self.adapt = function(self._adapt, input_signature=support)
            self.adapt_masked = function(self._adapt_masked, input_signature=[*support, mask])
            self.predict = function(self._predict, input_signature=[context, query])
        # Drawings as PNG files: for a classifier of images of 1 or 3 channels.
        self.takes_png = (
            self.classification and len(self.input_shape) == 3 and self.input_shape[-1] in (1, 3)
        )
        # Why each task's support set must hold every class (None: it need not).
        self.every_class_reason = learner.capabilities.every_class_reason or (
            sig.IMAGE_CLASSES_REASON if self.takes_png else None
        )
        if self.takes_png:
            pngs = [
                tf.TensorSpec([None, None], tf.string, name=sig.SUPPORT_PNG),
                label,
            ]
            query_png = tf.TensorSpec([None, None], tf.string, name=sig.QUERY_PNG)
            self.serving_png = function(self._serve_png, input_signature=[*pngs, query_png])
            self.serving_png_masked = function(
                self._serve_png_masked, input_signature=[*pngs, mask, query_png]
            )

    def signatures(self) -> dict:
        signatures = {
            sig.SERVING_DEFAULT: self.serving_default,
            sig.SERVING_MASKED: self.serving_masked,
        }
        if self.takes_png:
            signatures[sig.SERVING_PNG] = self.serving_png
            signatures[sig.SERVING_PNG_MASKED] = self.serving_png_masked
        if self.has_context:
            signatures.update(
                {
                    sig.ADAPT: self.adapt,
                    sig.ADAPT_MASKED: self.adapt_masked,
                    sig.PREDICT: self.predict,
                }
            )
        return signatures

    # An empty support or query set (K = 0, Q = 0) never reaches the networks: with
    # oneDNN, TensorFlow 2.21's graph convolutions answer a batch of zero images with the
    # wrong channel count, and a later kernel's type check then aborts the whole process.
    # The graphs branch around them (tf.cond, a standard op): K = 0 is the unadapted
    # state, Q = 0 an empty answer.

    def _features(self, x):
        """Raw inputs [B, P, *input_shape] -> the learner's inputs [B, P, D]."""
        if self.featurizer is None:
            return x
        shape = tf.shape(x)
        flat = tf.reshape(x, [-1, *self.input_shape])  # [B*P, ...]

        def featurize():
            features = self.featurizer(flat, training=False)
            return tf.math.l2_normalize(features, axis=-1) if self.normalize else features

        features = tf.cond(
            tf.size(flat) > 0, featurize, lambda: tf.zeros([0, self.learner.input_dim])
        )
        return tf.reshape(features, [shape[0], shape[1], self.learner.input_dim])

    def _adapt_state(self, support_x, support_y, support_mask, query_x=None):
        """The learner's adapted state (on the queries too, for a learner that reads
        them); with K = 0, its unadapted one."""
        return tf.cond(
            tf.shape(support_x)[1] > 0,
            lambda: self.learner.adapt(support_x, support_y, support_mask, query_x=query_x),
            lambda: self.learner.start_state(support_x, support_y, support_mask),
        )

    def _predict_queries(self, state, query_x):
        """The learner's predictions [B, Q, Y]; with Q = 0, an empty [B, 0, Y]."""
        shape = tf.shape(query_x)
        return tf.cond(
            shape[1] > 0,
            lambda: self.learner.predict(state, query_x),
            lambda: tf.zeros([shape[0], 0, self.learner.output_dim]),
        )

    def _outputs(self, y_hat) -> dict:
        if not self.classification:
            return {sig.PREDICTIONS: y_hat}  # [B, Q, Y]
        return {
            sig.LOGITS: y_hat,  # [B, Q, N]
            sig.PROBABILITIES: tf.nn.softmax(y_hat),  # [B, Q, N]
            sig.CLASSES: tf.argmax(y_hat, axis=-1, output_type=tf.int32),  # [B, Q]
        }

    def _check_support(self, support_x, support_y, support_mask):
        shape_x, shape_y = tf.shape(support_x), tf.shape(support_y)
        checks = [
            tf.debugging.assert_equal(
                shape_x[:2], shape_y[:2], message="support_x and support_y must agree on [B, K]"
            ),
            tf.debugging.assert_equal(
                shape_x[:2],
                tf.shape(support_mask),
                message="support_mask must be [B, K] like support_x",
            ),
        ]
        if self.classification:
            n = self.learner.output_dim
            in_range = tf.logical_and(support_y >= 0, support_y < n)
            checks.append(
                tf.debugging.assert_equal(
                    tf.reduce_all(tf.logical_or(in_range, tf.logical_not(support_mask))),
                    True,
                    message=sig.label_message(n),
                )
            )
            if reason := self.every_class_reason:
                counts = prototypes.class_counts(support_y, support_mask, n)  # [B, N]
                checks.append(
                    tf.debugging.assert_equal(
                        tf.reduce_all(counts > 0),
                        True,
                        message=sig.empty_class_message(n, reason),
                    )
                )
        with tf.control_dependencies(checks):
            support_x = tf.debugging.check_numerics(support_x, "support_x must be finite")
            if not self.classification:
                support_y = tf.debugging.check_numerics(support_y, "support_y must be finite")
            else:
                # masked points may hold any label; keep them in range for the loss
                support_y = tf.where(support_mask, support_y, tf.zeros_like(support_y))
            return self._features(support_x), support_y, tf.identity(support_mask)

    def _check_query(self, query_x, batch_size):
        check = tf.debugging.assert_equal(
            tf.shape(query_x)[0], batch_size, message="query_x must have the support's B"
        )
        with tf.control_dependencies([check]):
            return self._features(tf.debugging.check_numerics(query_x, "query_x must be finite"))

    @staticmethod
    def _all_real(support):
        return tf.ones(tf.shape(support)[:2], tf.bool)  # [B, K]: no padding

    # The signatures without a mask, and the PNG ones, call the masked routine's own
    # tf.function: the inner loop's graph is traced once and held once in the export,
    # where tracing each signature on its own repeated it in each.

    def _serve(self, support_x, support_y, query_x):
        return self.serving_masked(support_x, support_y, self._all_real(support_x), query_x)

    def _serve_masked(self, support_x, support_y, support_mask, query_x):
        support_x, support_y, support_mask = self._check_support(support_x, support_y, support_mask)
        query_x = self._check_query(query_x, tf.shape(support_x)[0])
        state = self._adapt_state(support_x, support_y, support_mask, query_x)
        outputs = self._outputs(self._predict_queries(state, query_x))
        if self.has_context:
            outputs[sig.CONTEXT] = state.context  # [B, C]
        return outputs

    def _serve_png(self, support_png, support_y, query_png):
        mask = self._all_real(support_png)
        return self.serving_png_masked(support_png, support_y, mask, query_png)

    def _serve_png_masked(self, support_png, support_y, support_mask, query_png):
        support_x = decode_pngs(sig.SUPPORT_PNG, support_png, self.input_shape)
        query_x = decode_pngs(sig.QUERY_PNG, query_png, self.input_shape)
        return self.serving_masked(support_x, support_y, support_mask, query_x)

    def _adapt(self, support_x, support_y):
        return self.adapt_masked(support_x, support_y, self._all_real(support_x))

    def _adapt_masked(self, support_x, support_y, support_mask):
        support_x, support_y, support_mask = self._check_support(support_x, support_y, support_mask)
        state = self._adapt_state(support_x, support_y, support_mask)
        return {sig.CONTEXT: state.context}  # [B, C]

    def _predict(self, context, query_x):
        context = tf.debugging.check_numerics(context, "context must be finite")
        query_x = self._check_query(query_x, tf.shape(context)[0])
        return self._outputs(self._predict_queries(AdaptedState(context=context), query_x))


def export_saved_model(
    learner: Learner,
    export_base: str,
    *,
    version: int | None = None,
    operative_config: str = "",
    metadata: dict | None = None,
    model_name: str = "viable",
    featurizer: keras.Model | None = None,
    input_shape: tuple[int, ...] | None = None,
    normalize: bool | None = None,
    warmup_inputs: WarmupInputs | None = None,
    extra_assets: dict[str, str] | None = None,
) -> str:
    """Writes BASE/<version>/ atomically (a finished folder appears at once) and returns it.

    `warmup_inputs(rng, num_support=K, num_query=Q)` makes the warm-up requests' inputs
    (see `warmup_requests`): pass the run's task family's `warmup_inputs`.
    `extra_assets` maps names in assets.extra/ to files or folders copied there (e.g.
    example drawings for the demo page, with their licence). `featurizer`, `input_shape`
    and `normalize`: as `AdaptThenPredict` takes them.

    A server polling `export_base` never sees a half-written version: the export is
    written to a hidden temporary folder beside it and renamed into place.
    """
    version = next_version(export_base) if version is None else version
    if version < 1:
        raise ValueError(f"version must be >= 1, got {version}")
    final = os.path.join(export_base, str(version))
    if os.path.exists(final):
        raise FileExistsError(f"{final} exists; expected a new version number")
    os.makedirs(export_base, exist_ok=True)
    module = AdaptThenPredict(
        learner, featurizer=featurizer, input_shape=input_shape, normalize=normalize
    )
    staging = tempfile.mkdtemp(prefix=f".{version}-", dir=export_base)
    try:
        tf.saved_model.save(module, staging, signatures=module.signatures())
        extra = os.path.join(staging, ASSETS_EXTRA)
        os.makedirs(extra, exist_ok=True)
        with open(os.path.join(extra, CONFIG_FILE), "w") as f:
            f.write(operative_config)
        description = {
            "method": learner.method_name,
            "task": "classification" if module.classification else "regression",
            "input_shape": list(module.input_shape),
            "input_dim": learner.input_dim,
            "output_dim": learner.output_dim,
            "context_dim": learner.context_dim,
            "head": learner.hparams()["head"],
            "every_class": module.every_class_reason,
            "signatures": sorted(module.signatures()),
            **(metadata or {}),
        }
        with open(os.path.join(extra, METADATA_FILE), "w") as f:
            json.dump(description, f, indent=2)
        for name, source in (extra_assets or {}).items():
            target = os.path.join(extra, name)
            if os.path.isdir(source):
                shutil.copytree(source, target)
            else:
                shutil.copyfile(source, target)
        with tf.io.TFRecordWriter(os.path.join(extra, WARMUP_FILE)) as writer:
            for record in warmup_requests(module, model_name=model_name, inputs=warmup_inputs):
                writer.write(record.SerializeToString())
        os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final
