"""viable-serve: serve exported SavedModels over TF Serving's gRPC and REST protocols.

    viable-serve --model_name=viable --model_base_path=/abs/path/to/export
    viable-serve --model_config_file=models.config [--enable_batching]

Flags are named as tensorflow_model_server's where they mean the same. The server
listens on 127.0.0.1 unless --host says otherwise; a port of 0 picks a free one.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from dataclasses import dataclass, field

import grpc
from aiohttp import web
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc
from tensorflow_serving.config import model_server_config_pb2

from serving.batching import BatchingOptions
from serving.demo import DemoPage
from serving.grpc_service import ModelService, PredictionService
from serving.metrics import Metrics
from serving.models import ModelManager
from serving.protos import BatchingParameters, ModelServerConfig, MonitoringConfig, parse_text_file
from serving.rest import RestApi
from serving.service import InferenceService
from serving.tensors import Limits
from viable_tf.logs import add_verbosity_flag

log = logging.getLogger("viable_serve")
DEFAULT_METRICS_PATH = "/monitoring/prometheus/metrics"


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


class Server:
    """gRPC and REST front ends over one model manager, on one event loop."""

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self.metrics = Metrics() if options.metrics_path else None
        self.manager = ModelManager(options.models, on_change=self._update_health)
        self.service = InferenceService(
            self.manager,
            limits=options.limits,
            batching=options.batching,
            metrics=self.metrics,
            num_threads=options.num_threads,
            inline_below_ms=options.inline_below_ms,
        )
        self.health = health.aio.HealthServicer()
        self.grpc_port = self.rest_port = None
        self._grpc = self._rest = self._poller = None

    async def start(self) -> None:
        await self.manager.poll()  # load what is there before taking traffic
        self._update_health()
        limit = self.options.max_request_bytes
        self._grpc = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", 1 << 30),
                ("grpc.so_reuseport", 0),
            ]
        )
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
            PredictionService(self.service), self._grpc
        )
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(
            ModelService(self.service), self._grpc
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._grpc)
        self.grpc_port = self._grpc.add_insecure_port(f"{self.options.host}:{self.options.port}")
        if not self.grpc_port:
            raise OSError(f"cannot listen for gRPC on {self.options.host}:{self.options.port}")
        await self._grpc.start()
        if self.options.rest_api_port is not None:
            api = RestApi(
                self.service,
                max_request_bytes=limit,
                metrics=self.metrics,
                metrics_path=self.options.metrics_path or DEFAULT_METRICS_PATH,
                demo=DemoPage(self.manager, self.options.limits) if self.options.demo else None,
            )
            self._rest = web.AppRunner(api.app(), access_log=None)
            await self._rest.setup()
            site = web.TCPSite(self._rest, self.options.host, self.options.rest_api_port)
            await site.start()
            self.rest_port = site._server.sockets[0].getsockname()[1]
        self._poller = asyncio.get_running_loop().create_task(self._poll_forever())

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.options.poll_seconds)
            try:
                await self.manager.poll()
            except Exception:
                log.exception("polling the model base paths failed")

    def _update_health(self) -> None:
        state = (
            health_pb2.HealthCheckResponse.SERVING
            if self.manager.any_available()
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for service in ("", "tensorflow.serving.PredictionService"):
            asyncio.get_event_loop().create_task(self.health.set(service, state))

    async def stop(self, grace: float = 1.0) -> None:
        if self._poller is not None:
            self._poller.cancel()
        if self._rest is not None:
            await self._rest.cleanup()
        if self._grpc is not None:
            await self._grpc.stop(grace)
        self.service.close()


# -- command line ---------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="viable-serve", description=__doc__.split("\n")[0])
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
    for flag in ("max_request_bytes", "max_support", "max_query", "max_tasks", "num_threads"):
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
        limits=Limits(args.max_support, args.max_query, args.max_tasks),
        max_request_bytes=args.max_request_bytes,
        num_threads=args.num_threads,
        inline_below_ms=args.inline_below_ms,
        demo=args.demo,
    )


async def _serve(options: ServerOptions) -> None:
    server = Server(options)
    await server.start()
    names = ", ".join(sorted(server.manager.models))
    rest = f", REST on {options.host}:{server.rest_port}" if server.rest_port else ""
    print(
        f"viable-serve: serving {names}: gRPC on {options.host}:{server.grpc_port}{rest}",
        flush=True,
    )
    if server.rest_port and options.demo:
        page = f"http://{options.host}:{server.rest_port}/demo"
        print(f"viable-serve: the demo page: {page}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    await server.stop()


def main() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    logging.basicConfig(level=logging.INFO, format="viable-serve: %(message)s")
    try:
        options = options_from_flags()
    except ValueError as error:
        print(f"viable-serve: error: {error}", file=sys.stderr)
        sys.exit(2)
    asyncio.run(_serve(options))


if __name__ == "__main__":
    main()
