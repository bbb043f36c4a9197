"""Prometheus metrics, named as TF Serving names its own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
)


class Metrics:
    """Request count by model and status; request latency by model, API and entry point."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.request_count = Counter(
            ":tensorflow:serving:request_count",
            "Number of requests, by model and status code.",
            ["model_name", "status"],
            registry=self.registry,
        )
        self.request_latency = Histogram(
            ":tensorflow:serving:request_latency",
            "Request latency in seconds, by model, API and entry point.",
            ["model_name", "API", "entrypoint"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def observe(self, model: str, api: str, entrypoint: str, status: str, seconds: float) -> None:
        self.request_count.labels(model, status).inc()
        self.request_latency.labels(model, api, entrypoint).observe(seconds)

    def page(self) -> bytes:
        return generate_latest(self.registry)
