"""viable-serve: serve exported SavedModels over TF Serving's gRPC and REST protocols.

    viable-serve --model_name=viable --model_base_path=/abs/path/to/export
    viable-serve --model_config_file=models.config [--enable_batching]

Flags are named as tensorflow_model_server's where they mean the same. The server
listens on 127.0.0.1 unless --host says otherwise; a port of 0 picks a free one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

import grpc
from aiohttp import web
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

from serving.demo import DemoPage
from serving.flags import DEFAULT_METRICS_PATH, ServerOptions, options_from_flags
from serving.grpc_service import ModelService, PredictionService
from serving.manager import ModelManager
from serving.metrics import Metrics
from serving.rest import RestApi
from serving.service import InferenceService

log = logging.getLogger("viable_serve")


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
            self.rest_port = self._rest.addresses[0][1]  # the port bound (0: any free one)
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
