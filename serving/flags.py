"""viable-serve's flags, named as tensorflow_model_server's where they mean the same, and
the ServerOptions they make (one clear line for a flag or config file that cannot work).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field

from tensorflow_serving.config import model_server_config_pb2

from serving.batching import BatchingOptions
from serving.checks import Limits
from serving.protos import BatchingParameters, ModelServerConfig, MonitoringConfig, parse_text_file
from viable_tf.logs import add_verbosity_flag

DEFAULT_METRICS_PATH = "/monitoring/prometheus/metrics"
DESCRIPTION = "viable-serve: serve exported SavedModels over TF Serving's gRPC and REST protocols."


@dataclass
class ServerOptions:
    models: list[model_server_config_pb2.ModelConfig]
    host: str = "127.0.0.1"
    port: int = 8500
    rest_api_port: int = 8501
    poll_seconds: float = 1.0
    metrics_path: str | None = None  # None: no Prometheus page
    batching: BatchingOptions | None = None
    limits: Limits = field(default_factory=Limits)
    max_request_bytes: int = 16 << 20
    num_threads: int = 4
    inline_below_ms: float = 2.0  # unbatched calls faster than this run on the event loop
    demo: bool = True  # the /demo page on the REST port (serving/demo.py)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="viable-serve",
        description="serve exported SavedModels over TF Serving's gRPC and REST protocols",
    )
    add_verbosity_flag(parser)
    parser.add_argument("--port", type=int, default=8500, help="gRPC port")
    parser.add_argument("--rest_api_port", type=int, default=8501, help="REST port (-1: no REST)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--model_name", default="default", help="name of the single model")
    parser.add_argument("--model_base_path", default="", help="folder of its version folders")
    parser.add_argument("--model_config_file", default="", help="ModelServerConfig, text format")
    parser.add_argument("--file_system_poll_wait_seconds", type=float, default=1.0)
    parser.add_argument("--monitoring_config_file", default="", help="MonitoringConfig, text")
    parser.add_argument("--enable_batching", action="store_true")
    parser.add_argument("--batching_parameters_file", default="", help="BatchingParameters, text")
    parser.add_argument("--max_request_bytes", type=int, default=16 << 20)
    parser.add_argument("--max_support", type=int, default=1000, help="largest K accepted")
    parser.add_argument("--max_query", type=int, default=10_000, help="largest Q accepted")
    parser.add_argument("--max_tasks", type=int, default=10_000, help="largest B accepted")
    parser.add_argument(
        "--max_image_pixels",
        type=int,
        default=1 << 26,
        help="most decoded pixels of a request's PNGs, all together (from their headers)",
    )
    parser.add_argument("--num_threads", type=int, default=4, help="model execution threads")
    parser.add_argument(
        "--inline_below_ms",
        type=float,
        default=2.0,
        help="unbatched model calls that typically take less run on the event loop, "
        "saving the thread hand-off (0: always use the thread pool)",
    )
    parser.add_argument(
        "--demo",
        type=_boolean,
        nargs="?",
        const=True,
        default=True,
        help="serve the /demo page on the REST port (--demo=false: no page)",
    )
    return parser


def _boolean(text: str) -> bool:
    """A flag's true/false, as TF Serving's flags take them (--flag=false)."""
    value = text.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def options_from_flags(argv: list[str] | None = None) -> ServerOptions:
    """Turns flags into ServerOptions; raises ValueError with one clear line."""
    args = _parser().parse_args(argv)
    if args.model_config_file and args.model_base_path:
        raise ValueError("give either --model_config_file or --model_base_path, not both")
    if args.model_config_file:
        config = parse_text_file(args.model_config_file, ModelServerConfig)
        models = list(config.model_config_list.config)
        if not models:
            raise ValueError(f"{args.model_config_file} lists no model (model_config_list)")
    elif args.model_base_path:
        models = [
            model_server_config_pb2.ModelConfig(
                name=args.model_name, base_path=args.model_base_path, model_platform="tensorflow"
            )
        ]
    else:
        raise ValueError("nothing to serve: give --model_base_path or --model_config_file")
    for model in models:
        if not os.path.isabs(model.base_path):
            raise ValueError(
                f"model {model.name}: base_path must be absolute, got {model.base_path!r}"
            )
        if not os.path.isdir(model.base_path):
            raise ValueError(f"model {model.name}: base_path {model.base_path} is not a directory")
    metrics_path = None
    if args.monitoring_config_file:
        monitoring = parse_text_file(args.monitoring_config_file, MonitoringConfig)
        if monitoring.prometheus_config.enable:
            metrics_path = monitoring.prometheus_config.path or DEFAULT_METRICS_PATH
    batching = None
    if args.enable_batching:
        batching = BatchingOptions()
        if args.batching_parameters_file:
            params = parse_text_file(args.batching_parameters_file, BatchingParameters)
            values = {
                field: getattr(params, field).value
                for field in (
                    "max_batch_size",
                    "batch_timeout_micros",
                    "max_enqueued_batches",
                    "num_batch_threads",
                )
                if params.HasField(field)
            }
            batching = BatchingOptions(**{**batching.__dict__, **values})
        if (
            min(batching.max_batch_size, batching.num_batch_threads, batching.max_enqueued_batches)
            < 1
        ):
            raise ValueError(f"batching parameters must be >= 1, got {batching}")
    for flag in (
        "max_request_bytes",
        "max_support",
        "max_query",
        "max_tasks",
        "max_image_pixels",
        "num_threads",
    ):
        if getattr(args, flag) < 1:
            raise ValueError(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    return ServerOptions(
        models=models,
        host=args.host,
        port=args.port,
        rest_api_port=None if args.rest_api_port < 0 else args.rest_api_port,
        poll_seconds=args.file_system_poll_wait_seconds,
        metrics_path=metrics_path,
        batching=batching,
        limits=Limits(args.max_support, args.max_query, args.max_tasks, args.max_image_pixels),
        max_request_bytes=args.max_request_bytes,
        num_threads=args.num_threads,
        inline_below_ms=args.inline_below_ms,
        demo=args.demo,
    )
