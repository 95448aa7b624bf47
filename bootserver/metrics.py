"""Prometheus metrics of one server (``GET /metrics``), in a per-app registry: no global state.

Names (all prefixed ``bootserver_``):

``http_requests_total{route,method,status}``      requests answered, by route pattern (``/ipxe/{node}``)
``http_request_duration_seconds{route}``          time from request to last byte sent (seconds)
``artifact_bytes_served_total{kind}``             artifact body bytes sent, kind kernel|initramfs|rootfs|other
``cache_requests_total{result}``                  artifact requests answered from the cache (``hit``) or not (``miss``)
``upstream_fetches_total{result}``                upstream artifact downloads finished, result ok|error
``upstream_bytes_total``                          bytes downloaded from upstream
``upstream_fetch_seconds_total``                  seconds spent in upstream downloads
``downloads_in_flight``                           upstream downloads running now
``nodes{stage}``                                  configured nodes per timeline stage (read at scrape time)

Plain domain code: no aiohttp import.
"""

from __future__ import annotations

from typing import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from .streams import Artifact
from .timeline import STAGES

#: Request-duration buckets (seconds): scripts take milliseconds, a 1 GB rootfs tens of seconds.
DURATION_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, float("inf"))


class _StageCollector:
    """Reports ``bootserver_nodes{stage}`` from a callable returning every node's stage."""

    def __init__(self, stages: Callable[[], Iterable[str]]) -> None:
        self._stages = stages

    def collect(self):  # type: ignore[no-untyped-def]
        counts = dict.fromkeys(STAGES, 0)
        for stage in self._stages():
            counts[stage] = counts.get(stage, 0) + 1
        family = GaugeMetricFamily("bootserver_nodes", "Nodes per timeline stage.", labels=["stage"])
        for stage, n in counts.items():
            family.add_metric([stage], n)
        yield family


class Metrics:
    """The metric objects of one server. ``stages`` returns the current stage of every node (it is
    called on each scrape, possibly in a worker thread). Also the upstream-fetch observer of
    :func:`bootserver.fetch.download_artifact`."""

    def __init__(self, stages: Callable[[], Iterable[str]] | None = None) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("bootserver_http_requests", "HTTP requests answered.",
                                ["route", "method", "status"], registry=r)
        self.duration = Histogram("bootserver_http_request_duration_seconds",
                                  "Seconds from request to the last byte of the answer.", ["route"],
                                  buckets=DURATION_BUCKETS, registry=r)
        self.bytes_served = Counter("bootserver_artifact_bytes_served", "Artifact body bytes sent.",
                                    ["kind"], registry=r)
        self.cache = Counter("bootserver_cache_requests", "Artifact requests by cache result.",
                             ["result"], registry=r)
        self.fetches = Counter("bootserver_upstream_fetches", "Upstream artifact downloads finished.",
                               ["result"], registry=r)
        self.fetch_bytes = Counter("bootserver_upstream_bytes", "Bytes downloaded from upstream.", registry=r)
        self.fetch_seconds = Counter("bootserver_upstream_fetch_seconds",
                                     "Seconds spent downloading from upstream.", registry=r)
        self.in_flight = Gauge("bootserver_downloads_in_flight", "Upstream downloads running now.", registry=r)
        for result in ("hit", "miss"):
            self.cache.labels(result)
        for result in ("ok", "error"):
            self.fetches.labels(result)
        if stages is not None:
            r.register(_StageCollector(stages))

    # --- the fetch observer protocol (bootserver.fetch.FetchObserver) ---
    def fetch_started(self, artifact: Artifact) -> None:
        """An upstream download of ``artifact`` began."""
        self.in_flight.inc()

    def fetch_finished(self, artifact: Artifact, nbytes: int, seconds: float, ok: bool) -> None:
        """An upstream download ended after ``seconds`` with ``nbytes`` bytes received; ``ok`` if published."""
        self.in_flight.dec()
        self.fetches.labels("ok" if ok else "error").inc()
        self.fetch_bytes.inc(nbytes)
        self.fetch_seconds.inc(seconds)

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        """One answered request (``seconds`` until the last byte)."""
        self.requests.labels(route, method, str(status)).inc()
        self.duration.labels(route).observe(seconds)

    def render(self) -> bytes:
        """The text exposition format of every metric (blocking: reads the timeline)."""
        return generate_latest(self.registry)
