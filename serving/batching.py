"""Server-side batching: concurrent requests merged along the task axis B.

Requests for the same servable and signature that arrive within `batch_timeout`
are merged into one call of up to `max_batch_size` tasks. Support sets are padded
to the largest K with `support_mask` False on the padding (the learners ignore
masked points exactly), query sets to the largest Q with zeros, and each
request gets back its own rows, cut to its own Q. A request larger than
`max_batch_size` runs on its own. When `max_enqueued_batches` batches are already
waiting, a new request is refused with UNAVAILABLE, as TF Serving does. If a
merged call is refused for its values (INVALID_ARGUMENT, e.g. one request's label
out of range), its requests are rerun one by one, so only the bad one fails.

Shape legend: B tasks, K support, Q query.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import grpc
import numpy as np

from serving.errors import ServingError
from serving.models import Servable

PADDED_ON_K = {"support_x": 0.0, "support_y": 0.0, "support_mask": False}
PADDED_ON_Q = {"query_x": 0.0}
PER_QUERY_OUTPUTS = {"predictions", "logits", "probabilities", "classes"}
PER_TASK_OUTPUTS = {"context"}


@dataclass(frozen=True)
class BatchingOptions:
    max_batch_size: int = 32
    batch_timeout_micros: int = 1000
    max_enqueued_batches: int = 100
    num_batch_threads: int = 2


@dataclass
class _Pending:
    inputs: dict[str, np.ndarray]
    size: int
    future: asyncio.Future


@dataclass
class _Queue:
    items: list[_Pending] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


def _can_pad(signature) -> bool:
    """Padding is exact only when K is masked and every output is per task or per query."""
    names = set(signature.inputs)
    k_ok = not (names & set(PADDED_ON_K)) or "support_mask" in names
    outputs_ok = set(signature.outputs) <= PER_QUERY_OUTPUTS | PER_TASK_OUTPUTS
    return k_ok and outputs_ok


def _shape_key(inputs: dict[str, np.ndarray], pad: bool) -> tuple:
    """Requests batch together only if they agree on every axis that is not padded."""
    key = []
    for name in sorted(inputs):
        shape = list(inputs[name].shape[1:])
        if pad and (name in PADDED_ON_K or name in PADDED_ON_Q) and shape:
            shape[0] = -1
        key.append((name, tuple(shape)))
    return tuple(key)


def merge(requests: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Concatenates requests along B, padding K (masked) and Q (zeros) to the largest."""
    merged = {}
    for name in requests[0]:
        arrays = [r[name] for r in requests]
        fill = PADDED_ON_K.get(name, PADDED_ON_Q.get(name))
        if fill is not None and arrays[0].ndim >= 2:
            longest = max(a.shape[1] for a in arrays)
            arrays = [
                np.pad(
                    a,
                    [(0, 0), (0, longest - a.shape[1])] + [(0, 0)] * (a.ndim - 2),
                    constant_values=fill,
                )
                if a.shape[1] < longest
                else a
                for a in arrays
            ]
        merged[name] = np.concatenate(arrays, axis=0)
    return merged


def split(outputs: dict[str, np.ndarray], requests: list[dict[str, np.ndarray]]) -> list[dict]:
    """Each request's rows of the merged outputs, per-query outputs cut to its own Q."""
    results, start = [], 0
    for request in requests:
        size = next(iter(request.values())).shape[0]
        q = request["query_x"].shape[1] if "query_x" in request else None
        result = {}
        for name, value in outputs.items():
            rows = value[start : start + size]
            if q is not None and name in PER_QUERY_OUTPUTS:
                rows = rows[:, :q]
            result[name] = rows
        results.append(result)
        start += size
    return results


class Batcher:
    """Merges concurrent requests per (servable, signature, shape class)."""

    def __init__(self, options: BatchingOptions, run) -> None:
        self.options = options
        self._run = run  # async (servable, signature, inputs) -> outputs
        self._queues: dict[tuple, _Queue] = {}
        self._slots = asyncio.Semaphore(options.num_batch_threads)
        self._in_flight_batches = 0
        self.batches_run = 0  # merged calls made, for tests and monitoring

    async def submit(self, servable: Servable, signature, inputs: dict[str, np.ndarray]):
        size = next(iter(inputs.values())).shape[0]
        if size > self.options.max_batch_size:
            async with self._slots:
                return await self._run(servable, signature.name, inputs)
        pad = _can_pad(signature)
        key = (id(servable), signature.name, _shape_key(inputs, pad))
        queue = self._queues.setdefault(key, _Queue())
        waiting = self._in_flight_batches + len(self._queues)
        if waiting >= self.options.max_enqueued_batches:
            raise ServingError(
                grpc.StatusCode.UNAVAILABLE,
                "The batch scheduling queue to which this task was submitted is full "
                f"({self.options.max_enqueued_batches} batches, --batching_parameters_file)",
            )
        future = asyncio.get_running_loop().create_future()
        queued = sum(item.size for item in queue.items)
        if queued + size > self.options.max_batch_size:
            self._flush(key, servable, signature)
            queue = self._queues.setdefault(key, _Queue())
        queue.items.append(_Pending(inputs, size, future))
        if sum(item.size for item in queue.items) >= self.options.max_batch_size:
            self._flush(key, servable, signature)
        elif queue.timer is None:
            queue.timer = asyncio.get_running_loop().call_later(
                self.options.batch_timeout_micros / 1e6,
                self._flush,
                key,
                servable,
                signature,
            )
        return await future

    def _flush(self, key, servable, signature) -> None:
        queue = self._queues.pop(key, None)
        if queue is None or not queue.items:
            return
        if queue.timer is not None:
            queue.timer.cancel()
        self._in_flight_batches += 1
        asyncio.get_running_loop().create_task(self._execute(servable, signature, queue.items))

    async def _execute(self, servable, signature, items: list[_Pending]) -> None:
        try:
            requests = [item.inputs for item in items]
            async with self._slots:
                self.batches_run += 1
                outputs = await self._run(servable, signature.name, merge(requests))
            for item, result in zip(items, split(outputs, requests), strict=True):
                if not item.future.done():
                    item.future.set_result(result)
        except ServingError as error:
            if error.code != grpc.StatusCode.INVALID_ARGUMENT or len(items) == 1:
                self._fail(items, error)
            else:  # one request's values (say a label out of range) fail the merged call:
                await self._one_by_one(servable, signature, items)  # only that one fails
        except Exception as error:
            self._fail(items, error)
        finally:
            self._in_flight_batches -= 1

    async def _one_by_one(self, servable, signature, items: list[_Pending]) -> None:
        for item in items:
            try:
                async with self._slots:
                    result = await self._run(servable, signature.name, item.inputs)
                if not item.future.done():
                    item.future.set_result(result)
            except Exception as error:
                self._fail([item], error)

    @staticmethod
    def _fail(items: list[_Pending], error: Exception) -> None:
        for item in items:
            if not item.future.done():
                item.future.set_exception(error)
