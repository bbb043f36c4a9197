"""What the gRPC and REST front ends share: resolve, check, (batch,) run, filter."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import tensorflow as tf

from serving.batching import Batcher, BatchingOptions
from serving.checks import Limits, check_inputs, check_output_filter
from serving.errors import ServingError, invalid
from serving.manager import ModelManager
from serving.metrics import Metrics
from serving.servable import Servable, Signature
from viable_tf.export import signature as sig
from viable_tf.logs import one_line


class InferenceService:
    """Runs predict requests against the manager's servables."""

    def __init__(
        self,
        manager: ModelManager,
        *,
        limits: Limits,
        batching: BatchingOptions | None,
        metrics: Metrics | None,
        num_threads: int = 4,
        inline_below_ms: float = 2.0,
    ) -> None:
        self.manager = manager
        self.limits = limits
        self.metrics = metrics
        self._executor = ThreadPoolExecutor(num_threads, thread_name_prefix="viable-serve")
        # A model call known to take under `inline_below_ms` runs on the event loop
        # itself: handing it to a worker thread and back costs about as much as the
        # call (~0.3 ms). Longer calls, and calls of unknown cost, go to the pool, so
        # the loop never stalls for longer than that. Unbatched serving only.
        self.inline_below = inline_below_ms / 1000 if batching is None else 0.0
        self.inline_calls = 0
        self.batcher = Batcher(batching, self._run) if batching else None

    def signature(self, servable: Servable, name: str) -> Signature:
        signature = servable.signatures.get(name or sig.SERVING_DEFAULT)
        if signature is None:
            raise ServingError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f'Serving signature key "{name}" not found. Signatures of {servable.name} '
                f"version {servable.version}: {', '.join(sorted(servable.signatures))}",
            )
        return signature

    def resolve(
        self, name: str, version: int | None, label: str | None, signature_name: str
    ) -> tuple[Servable, Signature]:
        """The servable and signature a request names; raises ServingError if none."""
        servable = self.manager.resolve(name, version, label)
        return servable, self.signature(servable, signature_name)

    async def predict(
        self,
        servable: Servable,
        signature: Signature,
        inputs: dict[str, np.ndarray],
        output_filter=(),
    ) -> dict[str, np.ndarray]:
        """Checks the inputs, runs (or batches) the call, keeps the outputs asked for.

        The request holds `servable` until it is answered, so a version swapped out
        meanwhile still finishes it.
        """
        inputs = check_inputs(signature, inputs, self.limits)
        wanted = check_output_filter(signature, output_filter)
        if self.batcher is not None:
            outputs = await self.batcher.submit(servable, signature, inputs)
        else:
            outputs = await self._run(servable, signature.name, inputs)
        return {key: outputs[key] for key in wanted}

    async def _run(self, servable: Servable, signature: str, inputs: dict[str, np.ndarray]):
        typical = servable.typical_seconds(signature)
        try:
            if typical is not None and typical < self.inline_below:
                self.inline_calls += 1
                return servable.run(signature, inputs)
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, servable.run, signature, inputs)
        except tf.errors.InvalidArgumentError as error:
            # The boundary checks (serving/checks.py) come first; a model's in-graph
            # check that still fires is reported as TensorFlow words it.
            raise invalid(one_line(error.message, fallback="invalid argument")) from None
        except tf.errors.ResourceExhaustedError as error:
            raise ServingError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                one_line(error.message, fallback="invalid argument"),
            ) from None

    def record(self, model: str, api: str, entrypoint: str, status: str, start: float) -> None:
        if self.metrics is not None:
            self.metrics.observe(model, api, entrypoint, status, time.perf_counter() - start)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
