"""A client of TF Serving's gRPC API for viable_tf models, and the viable-client CLI.

    from serving.client import Client
    client = Client("127.0.0.1:8500")
    out = client.predict(support_x, support_y, query_x, model_name="viable")
    out["predictions"]  # [B, Q, Y]

It uses only the official `tensorflow-serving-api` stubs and the contract of
`viable_tf.export.signature`: without a mask it calls `serving_default` / `adapt`
with exactly support_x, support_y (and query_x); with `support_mask` it calls their
masked forms. So it works unchanged against the real tensorflow_model_server.

    viable-client --target=127.0.0.1:8500 --model_name=viable sine --num_support=5
    viable-client --target=127.0.0.1:8500 --model_name=viable status
"""

from __future__ import annotations

import argparse
import json
import sys

import grpc
import numpy as np
import tensorflow as tf
from google.protobuf import json_format
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from serving.omniglot_client import INPUT_FORMS, omniglot_report
from viable_tf.export import signature as sig
from viable_tf.logs import add_verbosity_flag


class Client:
    """Predict, adapt, metadata and status over gRPC."""

    def __init__(self, target: str = "127.0.0.1:8500", *, timeout: float = 30.0) -> None:
        self.channel = grpc.insecure_channel(target)
        self.prediction = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)
        self.models = model_service_pb2_grpc.ModelServiceStub(self.channel)
        self.timeout = timeout

    def close(self) -> None:
        self.channel.close()

    @staticmethod
    def _spec(spec, model_name: str, version: int | None, label: str | None) -> None:
        spec.name = model_name
        if version is not None:
            spec.version.value = version
        elif label is not None:
            spec.version_label = label

    def request(
        self,
        inputs: dict[str, np.ndarray],
        *,
        model_name: str,
        signature_name: str = sig.SERVING_DEFAULT,
        version: int | None = None,
        label: str | None = None,
    ) -> predict_pb2.PredictRequest:
        request = predict_pb2.PredictRequest()
        self._spec(request.model_spec, model_name, version, label)
        request.model_spec.signature_name = signature_name
        for name, value in inputs.items():
            request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
        return request

    def call(self, request: predict_pb2.PredictRequest) -> dict[str, np.ndarray]:
        response = self.prediction.Predict(request, timeout=self.timeout)
        return {name: tf.make_ndarray(proto) for name, proto in response.outputs.items()}

    def predict(
        self,
        support_x,
        support_y,
        query_x,
        *,
        support_mask=None,
        model_name: str = "viable",
        version: int | None = None,
        label: str | None = None,
    ) -> dict[str, np.ndarray]:
        """Adapt on each task's support set and predict its queries (serving_default, or
        serving_masked when a support_mask [B, K] marks padding)."""
        inputs = _support(support_x, support_y, support_mask)
        inputs[sig.QUERY_X] = np.asarray(query_x, np.float32)
        name = sig.SERVING_DEFAULT if support_mask is None else sig.SERVING_MASKED
        request = self.request(
            inputs, model_name=model_name, signature_name=name, version=version, label=label
        )
        return self.call(request)

    def predict_pngs(
        self,
        support_png,
        support_y,
        query_png,
        *,
        support_mask=None,
        model_name: str = "viable",
        version: int | None = None,
        label: str | None = None,
    ) -> dict[str, np.ndarray]:
        """An image classifier's answer for drawings sent as PNG files: support_png and
        query_png [B, K] / [B, Q] of bytes (serving_png, or serving_png_masked with a
        support_mask)."""
        inputs = {
            sig.SUPPORT_PNG: np.asarray(support_png, dtype=object),
            sig.SUPPORT_Y: np.asarray(support_y, np.int32),
            sig.QUERY_PNG: np.asarray(query_png, dtype=object),
        }
        name = sig.SERVING_PNG
        if support_mask is not None:
            inputs[sig.SUPPORT_MASK] = np.asarray(support_mask, bool)
            name = sig.SERVING_PNG_MASKED
        request = self.request(
            inputs, model_name=model_name, signature_name=name, version=version, label=label
        )
        return self.call(request)

    def adapt(self, support_x, support_y, *, support_mask=None, model_name="viable", **spec):
        """The adapted context of each task, [B, C], to reuse with predict_with_context."""
        request = self.request(
            _support(support_x, support_y, support_mask),
            model_name=model_name,
            signature_name=sig.ADAPT if support_mask is None else sig.ADAPT_MASKED,
            **spec,
        )
        return self.call(request)[sig.CONTEXT]

    def predict_with_context(self, context, query_x, *, model_name="viable", **spec):
        inputs = {
            sig.CONTEXT: np.asarray(context, np.float32),
            sig.QUERY_X: np.asarray(query_x, np.float32),
        }
        request = self.request(inputs, model_name=model_name, signature_name=sig.PREDICT, **spec)
        return self.call(request)  # predictions, or a classifier's logits/probabilities/classes

    def metadata(self, model_name: str, **spec) -> dict:
        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        self._spec(request.model_spec, model_name, spec.get("version"), spec.get("label"))
        response = self.prediction.GetModelMetadata(request, timeout=self.timeout)
        signatures = get_model_metadata_pb2.SignatureDefMap()
        response.metadata["signature_def"].Unpack(signatures)
        return json_format.MessageToDict(signatures, preserving_proto_field_name=True)

    def status(self, model_name: str, **spec) -> list[dict]:
        request = get_model_status_pb2.GetModelStatusRequest()
        self._spec(request.model_spec, model_name, spec.get("version"), spec.get("label"))
        response = self.models.GetModelStatus(request, timeout=self.timeout)
        return [
            json_format.MessageToDict(s, preserving_proto_field_name=True)
            for s in response.model_version_status
        ]


def _support(support_x, support_y, support_mask) -> dict[str, np.ndarray]:
    support_y = np.asarray(support_y)
    # Integer labels (a classifier's, [B, K]) stay integers; regression targets are float32.
    label_dtype = np.int32 if support_y.dtype.kind in "iu" else np.float32
    inputs = {
        sig.SUPPORT_X: np.asarray(support_x, np.float32),
        sig.SUPPORT_Y: support_y.astype(label_dtype),
    }
    if support_mask is not None:
        inputs[sig.SUPPORT_MASK] = np.asarray(support_mask, bool)
    return inputs


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="viable-client", description=__doc__.split("\n")[0])
    add_verbosity_flag(parser)
    parser.add_argument("--target", default="127.0.0.1:8500", help="host:port of the gRPC server")
    parser.add_argument("--model_name", default="viable")
    parser.add_argument("--version", type=int, default=None)
    parser.add_argument("--label", default=None)
    commands = parser.add_subparsers(dest="command", required=True)
    sine = commands.add_parser("sine", help="adapt to a random sine task, print the fit's MSE")
    sine.add_argument("--num_support", type=int, default=10)
    sine.add_argument("--seed", type=int, default=0)
    sine.add_argument(
        "--outliers",
        type=int,
        default=0,
        help="of the support points, with y drawn over the output range (the error is "
        "against the clean curve)",
    )
    omniglot = commands.add_parser(
        "omniglot", help="an N-way K-shot episode of Omniglot test images, print the accuracy"
    )
    omniglot.add_argument("--data_dir", default="../shared/data/omniglot")
    omniglot.add_argument("--num_ways", type=int, default=5)
    omniglot.add_argument("--num_shots", type=int, default=1)
    omniglot.add_argument("--num_queries", type=int, default=5, help="per class")
    omniglot.add_argument("--seed", type=int, default=0, help="of the first episode")
    omniglot.add_argument("--num_episodes", type=int, default=1, help="episodes seed, seed+1, ...")
    omniglot.add_argument(
        "--inputs",
        default="tensors,png",
        help="how the drawings are sent, of tensors,png (png: serving_png)",
    )
    omniglot.add_argument(
        "--saved_model",
        default="",
        help="an export's version folder: also run the same episodes through it in this "
        "process and count the served answers that differ",
    )
    omniglot.add_argument(
        "--rest_url",
        default="",
        help="also send each episode over REST to this server (http://host:port), and "
        "report both protocols' accuracy",
    )
    images = commands.add_parser(
        "images",
        help="classify a folder of query images by a folder of labelled support images "
        "(SUPPORT/<class>/<image>), sent as PNG or JPEG files; print each query's class",
    )
    images.add_argument("--support", required=True, help="one folder per class of images")
    images.add_argument("--query", required=True, help="the images to classify")
    commands.add_parser("status", help="the model's version statuses")
    commands.add_parser("metadata", help="the model's signatures")
    return parser


def images_report(client: Client, args, spec: dict) -> str:
    """`viable-client images`: the folders checked, one serving_png request, each query's
    class. A folder that cannot make a request ends the command in one line, nothing sent."""
    from serving import images_client

    try:
        names, asked, inputs = images_client.request(
            args.support,
            args.query,
            lambda: images_client.model_ways(client.metadata(args.model_name, **spec)),
        )
    except images_client.ImagesError as error:
        raise SystemExit(f"viable-client: {error}") from None
    request = client.request(
        inputs, model_name=args.model_name, signature_name=sig.SERVING_PNG, **spec
    )
    return images_client.report(names, asked, client.call(request), args.query)


def main() -> None:
    args = _parser().parse_args()
    client = Client(args.target)
    spec = {"version": args.version, "label": args.label}
    try:
        if args.command == "status":
            print(json.dumps(client.status(args.model_name, **spec), indent=2))
        elif args.command == "metadata":
            print(json.dumps(client.metadata(args.model_name, **spec), indent=2))
        elif args.command == "images":
            print(images_report(client, args, spec))
        elif args.command == "omniglot":
            if args.num_episodes < 1:
                raise SystemExit(
                    f"viable-client: --num_episodes must be >= 1, got {args.num_episodes}"
                )
            unknown = set(args.inputs.split(",")) - set(INPUT_FORMS)
            if unknown or not args.inputs:
                raise SystemExit(
                    f"viable-client: --inputs takes {','.join(INPUT_FORMS)}, got {args.inputs!r}"
                )
            print(omniglot_report(client, args, spec))
        else:
            from viable_tf.tasks.sine import SineTasks  # the training tasks' ranges

            if not 0 <= args.outliers <= args.num_support:
                raise SystemExit(
                    f"viable-client: --outliers must be in [0, --num_support="
                    f"{args.num_support}], got {args.outliers}"
                )
            inputs, (amplitude, phase) = SineTasks().request(
                np.random.default_rng(args.seed),
                num_support=args.num_support,
                num_query=100,
                grid=True,
                outliers=args.outliers,
            )
            query_x = inputs[sig.QUERY_X]
            outputs = client.predict(
                inputs[sig.SUPPORT_X],
                inputs[sig.SUPPORT_Y],
                query_x,
                model_name=args.model_name,
                **spec,
            )
            mse = float(
                np.mean((outputs[sig.PREDICTIONS] - amplitude * np.sin(query_x - phase)) ** 2)
            )
            print(
                f"sine task A={amplitude:.2f}, p={phase:.2f}, K={args.num_support}"
                + (f" ({args.outliers} outliers)" if args.outliers else "")
                + f": MSE over 100 points of the clean curve = {mse:.4f}"
            )
    except grpc.RpcError as error:
        print(f"viable-client: {error.code().name}: {error.details()}", file=sys.stderr)
        sys.exit(1)
    except RuntimeError as error:  # a REST answer other than 200
        print(f"viable-client: {error}", file=sys.stderr)
        sys.exit(1)
    finally:
        client.close()


if __name__ == "__main__":
    main()
