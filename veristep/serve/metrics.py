"""Prometheus metrics of one server process (its own registry, so tests can run several)."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from veristep.verifiers.core.result import VerifyResult

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


def worker_restarts(verifier: Any) -> int:
    """Workers the verifier's pool replaced after a time-out or crash (0 if it has no pool)."""
    own = getattr(verifier, "worker_restarts", None)
    if callable(own):  # a Ray-served kind counts over its actors
        return int(own())
    pools = [getattr(verifier, "_pool", None), getattr(getattr(verifier, "_runner", None), "_pool", None)]
    total = sum(int(getattr(p, "restarts", 0) or 0) for p in pools if p is not None)
    for component in getattr(verifier, "components", []) or []:  # a weighted verifier
        total += worker_restarts(getattr(component, "verifier", None))
    return total


class _PoolCollector:
    """Reads the live pools at scrape time (their counters live in the pools, not here)."""

    def __init__(self, verifiers: Callable[[], dict[str, Any]], queued: Callable[[], int],
                 actors: Callable[[], list[dict[str, Any]]] | None = None) -> None:
        self.verifiers = verifiers
        self.queued = queued
        self.actors = actors

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The restart count per kind and the items waiting in the lanes."""
        restarts = GaugeMetricFamily("veristep_worker_restarts", "Worker processes replaced after a "
                                     "time-out or a crash, per kind", labels=["kind"])
        for kind, verifier in self.verifiers().items():
            restarts.add_metric([kind], worker_restarts(verifier))
        yield restarts
        yield GaugeMetricFamily("veristep_queue_depth", "Items accepted and not yet answered",
                                value=self.queued())
        if self.actors is not None:
            actors = GaugeMetricFamily("veristep_ray_actor_outstanding", "Items sent to each Ray "
                                       "actor and not yet answered (labels: where it runs)",
                                       labels=["actor", "node", "host", "pid"])
            restarts = GaugeMetricFamily("veristep_ray_actor_restarts", "Times Ray replaced each "
                                         "actor's process", labels=["actor"])
            answered = GaugeMetricFamily("veristep_ray_actor_items", "Items each Ray actor answered",
                                         labels=["actor"])
            for a in self.actors():
                actors.add_metric([str(a["actor"]), a["node"], a["host"], str(a["pid"])], a["outstanding"])
                restarts.add_metric([str(a["actor"])], a["restarts"])
                answered.add_metric([str(a["actor"])], a["items"])
            yield actors
            yield restarts
            yield answered


class Metrics:
    """Requests, items by kind and status, queue depth, latency and worker restarts."""

    def __init__(self, verifiers: Callable[[], dict[str, Any]], queued: Callable[[], int],
                 actors: Callable[[], list[dict[str, Any]]] | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("veristep_requests", "HTTP requests by endpoint and status code",
                                ["endpoint", "code"], registry=self.registry)
        self.items = Counter("veristep_items", "Items answered by kind and status",
                             ["kind", "status"], registry=self.registry)
        self.latency = Histogram("veristep_request_seconds", "Time from a request's arrival to its reply",
                                 ["endpoint"], buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.inflight_requests = Gauge("veristep_inflight_requests", "Requests being served",
                                       registry=self.registry)
        self.registry.register(_PoolCollector(verifiers, queued, actors))

    def count_items(self, kind: str, results: Sequence[VerifyResult]) -> None:
        """Count answered items by status (one counter update per status, not per item)."""
        for status, n in collections.Counter(result.status.value for result in results).items():
            self.items.labels(kind, status).inc(n)

    def observe(self, endpoint: str, code: int, seconds: float) -> None:
        """Count one reply and its latency."""
        self.requests.labels(endpoint, str(code)).inc()
        self.latency.labels(endpoint).observe(seconds)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
