"""GET /metrics in Prometheus' text format (through `prometheus_client`), from the same counters as
the JSON at /v1/metrics: each model directory's batcher (`Stats`, labelled `model`), the responses
per status class and the requests the api keys refused.

The registry is the app's own, not prometheus_client's global one, so that several apps in one
process (tests, or a process serving several) never share or repeat a metric; it is read when
scraped (a custom collector), so nothing is counted twice.
"""

from __future__ import annotations

from typing import Callable, Iterable

NAMESPACE = "aiayn"


def prometheus_text(collect: Callable[[], dict]) -> tuple[bytes, str]:
    """(body, content type) of the metrics in `collect()` (see `snapshot_families`)."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
    from prometheus_client.registry import CollectorRegistry

    class Collector:
        def collect(self):
            return snapshot_families(collect())

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())
    return generate_latest(registry), CONTENT_TYPE_LATEST


def snapshot_families(snapshot: dict) -> Iterable:
    """Metric families of {"models": {name: Stats.snapshot()}, "responses": {"2xx": n}, "refused": {"429": n}}."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    def counter(name, doc, labels=("model",)):
        return CounterMetricFamily(f"{NAMESPACE}_{name}", doc, labels=list(labels))

    def gauge(name, doc, labels=("model",)):
        return GaugeMetricFamily(f"{NAMESPACE}_{name}", doc, labels=list(labels))

    counters = {
        "requests": counter("requests", "requests answered or given up, per model"),
        "texts": counter("texts", "texts in those requests"),
        "rejected_queue_full": counter("rejected_queue_full", "requests refused with a 503: the queue was full"),
        "timeouts": counter("timeouts", "requests that passed their timeout (504)"),
        "errors": counter("errors", "requests whose decoding failed"),
        "unavailable": counter("unavailable", "requests answered 503 because their decoder process died"),
        "batches": counter("batches", "whole-call batches decoded"),
        "continuous_steps": counter("continuous_steps", "steps of the continuous search"),
        "streams": counter("streams", "streamed requests"),
    }
    cancelled = counter("cancelled_texts", "texts dropped while being decoded, their client gone or their time up",
                        ("model", "reason"))
    gauges = {"queue_length": gauge("queue_length", "requests waiting"),
              "texts_in_flight": gauge("texts_in_flight", "texts being decoded now")}
    latency = gauge("latency_seconds", "request latency over the last 10,000 requests, queueing included",
                    ("model", "quantile"))
    restarts = counter("worker_restarts", "decoder processes started again after one died")
    for model, stats in snapshot["models"].items():
        for name, family in counters.items():
            family.add_metric([model], stats[name])
        for name, family in gauges.items():
            family.add_metric([model], stats[name])
        for reason, n in stats["cancelled_texts"].items():
            cancelled.add_metric([model, reason], n)
        for q, ms in stats["latency_ms"].items():
            if ms is not None:
                latency.add_metric([model, f"0.{q[1:]}"], ms / 1000)
        restarts.add_metric([model], stats.get("worker_restarts", 0))
    responses = counter("responses", "responses by status class", ("status",))
    for status, n in snapshot["responses"].items():
        responses.add_metric([status], n)
    refused = counter("refused_by_key", "requests refused for their api key: 403 unknown, 429 over its limits",
                      ("status",))
    for status, n in snapshot["refused"].items():
        refused.add_metric([status], n)
    yield from (*counters.values(), cancelled, *gauges.values(), latency, restarts, responses, refused)
