"""Server-side batching: concurrent requests merged along the task axis B.

Requests for the same servable and signature that arrive within `batch_timeout`
are merged into one call of up to `max_batch_size` tasks. Support sets are padded
to the largest K with `support_mask` False on the padding (the learners ignore
masked points exactly): a request to `serving_default` or `adapt`, which take no
mask, is run through the signature's masked form (`serving_masked`,
`adapt_masked`) with an all-True mask for its own points. Query sets are padded to
the largest Q with zeros, and each request gets back its own rows, cut to its own Q.
A request larger than `max_batch_size` runs on its own. When `max_enqueued_batches`
batches are already waiting, a new request is refused with UNAVAILABLE, as TF
Serving does. Every request was checked before it was queued (labels included), so
one request's values cannot fail a merged call.

Shape legend: B tasks, K support, Q query.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

import grpc
import numpy as np

from serving.errors import ServingError
from serving.servable import Servable
from viable_tf.export import signature as sig


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


def _padded_form(servable: Servable, signature) -> str | None:
    """The signature a merged call with padded K and Q runs (None: no exact padding).

    Padding K is exact only through a support mask; every output must be per task
    or per query, so that each request's rows can be cut back out.
    """
    names = set(signature.inputs)
    run = signature.name
    if names & set(sig.K_AXIS_INPUTS) and sig.SUPPORT_MASK not in names:
        run = sig.MASKED_FORM.get(signature.name)
        if run is None or run not in servable.signatures:
            return None
    outputs = set(servable.signatures[run].outputs)
    if not outputs <= sig.PER_QUERY_OUTPUTS | sig.PER_TASK_OUTPUTS:
        return None
    return run


def _shape_key(inputs: dict[str, np.ndarray], pad: bool) -> tuple:
    """Requests batch together only if they agree on every axis that is not padded."""
    key = []
    for name in sorted(inputs):
        shape = list(inputs[name].shape[1:])
        if pad and (name in sig.K_AXIS_INPUTS or name in sig.Q_AXIS_INPUTS) and shape:
            shape[0] = -1
        key.append((name, tuple(shape)))
    return tuple(key)


def with_mask(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A request to a mask-free signature, for its masked form: every point is real."""
    support = next((inputs[name] for name in sig.SUPPORT_INPUTS if name in inputs), None)
    if sig.SUPPORT_MASK in inputs or support is None:
        return inputs
    return {**inputs, sig.SUPPORT_MASK: np.ones(support.shape[:2], bool)}


def merge(requests: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Concatenates requests along B, padding K (masked) and Q (zeros) to the largest."""
    merged = {}
    for name in requests[0]:
        arrays = [r[name] for r in requests]
        fill = sig.K_AXIS_INPUTS.get(name, sig.Q_AXIS_INPUTS.get(name))
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
        query = next((request[name] for name in sig.QUERY_INPUTS if name in request), None)
        q = None if query is None else query.shape[1]
        result = {}
        for name, value in outputs.items():
            rows = value[start : start + size]
            if q is not None and name in sig.PER_QUERY_OUTPUTS:
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
        self.pending = 0  # requests submitted and not answered yet

    async def submit(self, servable: Servable, signature, inputs: dict[str, np.ndarray]):
        size = next(iter(inputs.values())).shape[0]
        if size > self.options.max_batch_size:
            async with self._slots:
                return await self._run(servable, signature.name, inputs)
        run = _padded_form(servable, signature)
        pad = run is not None
        if pad and run != signature.name:
            inputs = with_mask(inputs)
        key = (id(servable), run or signature.name, _shape_key(inputs, pad))
        queue = self._queues.setdefault(key, _Queue())
        waiting = self._in_flight_batches + len(self._queues)
        if waiting >= self.options.max_enqueued_batches:
            raise ServingError(
                grpc.StatusCode.UNAVAILABLE,
                "The batch scheduling queue to which this task was submitted is full "
                f"({self.options.max_enqueued_batches} batches, --batching_parameters_file)",
            )
        future = asyncio.get_running_loop().create_future()
        self.pending += 1
        future.add_done_callback(self._answered)
        queued = sum(item.size for item in queue.items)
        if queued + size > self.options.max_batch_size:
            self._flush(key, servable, key[1])
            queue = self._queues.setdefault(key, _Queue())
        queue.items.append(_Pending(inputs, size, future))
        if sum(item.size for item in queue.items) >= self.options.max_batch_size:
            self._flush(key, servable, key[1])
        elif queue.timer is None:
            queue.timer = asyncio.get_running_loop().call_later(
                self.options.batch_timeout_micros / 1e6,
                self._flush,
                key,
                servable,
                key[1],
            )
        return await future

    @contextlib.asynccontextmanager
    async def hold(self):
        """Holds every batch thread: batches queue up meanwhile and run when it exits."""
        for _ in range(self.options.num_batch_threads):
            await self._slots.acquire()
        try:
            yield
        finally:
            for _ in range(self.options.num_batch_threads):
                self._slots.release()

    def _answered(self, _future) -> None:
        self.pending -= 1

    def _flush(self, key, servable, signature: str) -> None:
        queue = self._queues.pop(key, None)
        if queue is None or not queue.items:
            return
        if queue.timer is not None:
            queue.timer.cancel()
        self._in_flight_batches += 1
        asyncio.get_running_loop().create_task(self._execute(servable, signature, queue.items))

    async def _execute(self, servable, signature: str, items: list[_Pending]) -> None:
        try:
            requests = [item.inputs for item in items]
            async with self._slots:
                self.batches_run += 1
                outputs = await self._run(servable, signature, merge(requests))
            for item, result in zip(items, split(outputs, requests), strict=True):
                if not item.future.done():
                    item.future.set_result(result)
        except Exception as error:
            self._fail(items, error)
        finally:
            self._in_flight_batches -= 1

    @staticmethod
    def _fail(items: list[_Pending], error: Exception) -> None:
        for item in items:
            if not item.future.done():
                item.future.set_exception(error)
