"""Runs a viable-serve Server on 127.0.0.1 (free ports) in a background thread, for tests."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

from tensorflow_serving.config import model_server_config_pb2

from serving.server import Server, ServerOptions


def model_config(name: str, base_path: str, **labels: int):
    config = model_server_config_pb2.ModelConfig(
        name=name, base_path=base_path, model_platform="tensorflow"
    )
    for label, version in labels.items():
        config.version_labels[label] = version
    return config


class RunningServer:
    """A started Server and its event loop; `stop()` shuts both down."""

    def __init__(self, options: ServerOptions) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.server = self.call(self._start(options))

    async def _start(self, options: ServerOptions) -> Server:
        server = Server(options)
        await server.start()
        return server

    def call(self, coroutine, timeout: float = 60):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.server.grpc_port}"

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.server.rest_port}"

    def merged(self, send, requests, *, timeout: float = 60):
        """Sends every request (`send(request)`, from threads) while the batcher holds its
        batch threads, waits until all are queued, then lets the batches run: requests
        merge whatever the machine's timing. Returns the answers (or errors) in order."""
        batcher = self.server.service.batcher
        hold = batcher.hold()
        self.call(hold.__aenter__())
        try:
            with concurrent.futures.ThreadPoolExecutor(len(requests)) as pool:
                futures = [pool.submit(send, request) for request in requests]
                deadline = time.monotonic() + timeout
                while batcher.pending < len(requests):
                    done = [f for f in futures if f.done()]
                    if len(done) + batcher.pending >= len(requests) or time.monotonic() > deadline:
                        break  # refused at the boundary, never queued
                    time.sleep(0.01)
                queued = batcher.pending
                self.call(hold.__aexit__(None, None, None))
                hold = None
                return queued, [f.result(timeout) for f in futures]
        finally:
            if hold is not None:
                self.call(hold.__aexit__(None, None, None))

    def poll(self) -> None:
        self.call(self.server.manager.poll())

    def stop(self) -> None:
        self.call(self.server.stop(grace=0.5))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
