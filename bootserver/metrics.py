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
``nodes_stalled{stage}``                          configured nodes past their stage's ``timeline.stall_after``
``boot_seconds{stage}``                           seconds from a node's first script of a boot to
                                                  ``installed``/``running`` and to ``up`` (histogram)

With ``serve --workers N`` (N > 1) the workers run in prometheus-client's **multiprocess mode**: the
parent calls :func:`enable_multiprocess` with a fresh directory before it forks them, every worker
writes its values to files there, and ``/metrics`` (answered by any worker) adds up every worker's
files (``downloads_in_flight`` counts live workers only). Multiprocess mode adds
``worker_requests{pid}``: requests answered by each worker process (a gauge, one series per pid).
A scrape skips a worker's file while that worker is still creating it (:class:`WorkerFiles`), so a
scrape during start-up answers, never 500.

Plain domain code: no aiohttp import.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, values
from prometheus_client.core import GaugeMetricFamily, Metric

from .streams import Artifact
from .timeline import BOOT_DONE_STAGES, STAGES

#: Request-duration buckets (seconds): scripts take milliseconds, a 1 GB rootfs tens of seconds.
DURATION_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, float("inf"))
#: Boot-duration buckets (seconds): a live boot takes a minute or two, an install with its first boot
#: 5 to 30 minutes, a stalled one hours.
BOOT_BUCKETS = (60.0, 120.0, 300.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0, 7200.0, float("inf"))
#: Buckets of the paced Retry-After values (seconds).
RETRY_AFTER_BUCKETS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, float("inf"))


#: The environment variable prometheus-client reads for its multiprocess directory.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def enable_multiprocess(path: str) -> None:
    """Put this worker process in multiprocess mode, with metric files in ``path`` (a directory shared
    by the workers, empty when the server started). Call it in the worker, after the fork and before
    any :class:`Metrics` exists: prometheus-client picks its value class when it is first imported
    (from the environment) and names its files after the pid that value class saw, so this sets the
    environment *and* a fresh value class, whatever was imported before."""
    os.environ[MULTIPROC_ENV] = path
    values.ValueClass = values.MultiProcessValue()


def mark_process_dead(pid: int, path: str) -> None:
    """Forget the live-gauge values of worker ``pid`` (it exited) in multiprocess directory ``path``."""
    from prometheus_client import multiprocess  # on purpose here: only --workers uses multiprocess mode

    multiprocess.mark_process_dead(pid, path)


def multiprocess_dir() -> str | None:
    """The multiprocess directory when this process is in multiprocess mode, else ``None``."""
    path = os.environ.get(MULTIPROC_ENV)
    return path if path and values.ValueClass is not values.MutexValue else None


class WorkerFiles:
    """Every worker's metric files in multiprocess directory ``path``, added up as prometheus-client's
    ``MultiProcessCollector`` does, except a file that is still empty.

    prometheus-client creates a worker's file (``<type>_<pid>.db``) and only then sizes it (to 64 KiB)
    and writes its header; its reader fails (``struct.error``) on a file caught at 0 bytes, and that
    failure fails the whole scrape: a worker creating its files while another answers ``/metrics``
    (start-up, a worker's first request of a kind) made that scrape a 500. An empty file holds no
    value yet, so skipping it loses nothing, and a file never shrinks back to 0 bytes: once it has a
    size its header is read as the library reads it. (Upstream: prometheus/client_python issue 1199.)
    """

    def __init__(self, path: str) -> None:
        self.path = path

    def collect(self) -> Iterator[Metric]:
        from prometheus_client import multiprocess  # on purpose here: --workers only

        files = []
        for name in glob.glob(os.path.join(self.path, "*.db")):
            try:
                if os.stat(name).st_size > 0:
                    files.append(name)
            except FileNotFoundError:  # a dead worker's live gauge, removed by mark_process_dead
                continue
        return iter(multiprocess.MultiProcessCollector.merge(files, accumulate=True))


class _StageCollector:
    """Reports ``bootserver_nodes{stage}`` and ``bootserver_nodes_stalled{stage}`` from a callable
    returning every node's ``(stage, stalled)``."""

    def __init__(self, stages: Callable[[], Iterable[tuple[str, bool]]]) -> None:
        self._stages = stages

    def collect(self) -> Iterator[Metric]:
        counts = dict.fromkeys(STAGES, 0)
        stalled = dict.fromkeys(STAGES, 0)
        for stage, late in self._stages():
            counts[stage] = counts.get(stage, 0) + 1
            stalled[stage] = stalled.get(stage, 0) + int(late)
        family = GaugeMetricFamily("bootserver_nodes", "Nodes per timeline stage.", labels=["stage"])
        for stage, n in counts.items():
            family.add_metric([stage], n)
        yield family
        family = GaugeMetricFamily("bootserver_nodes_stalled", "Nodes past their stage's timeline.stall_after, "
                                   "per stage.", labels=["stage"])
        for stage, n in stalled.items():
            family.add_metric([stage], n)
        yield family


class Metrics:
    """The metric objects of one server. ``stages`` returns every node's current stage and whether it
    is stalled, ``(stage, stalled)`` (it is called on each scrape, possibly in a worker thread). Also the
    upstream-fetch observer of :meth:`bootserver.artifacts.upstream.Upstream.download`, and the boot observer of
    :class:`bootserver.service.BootService` (:meth:`boot_done`)."""

    def __init__(self, stages: Callable[[], Iterable[tuple[str, bool]]] | None = None) -> None:
        r = self.registry = CollectorRegistry()
        mp_dir = multiprocess_dir()
        if mp_dir is not None:
            # the metric objects write to files; what a scrape reports is every worker's files
            self.registry = CollectorRegistry()
            self.registry.register(WorkerFiles(mp_dir))
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
        self.in_flight = Gauge("bootserver_downloads_in_flight", "Upstream downloads running now.", registry=r,
                               multiprocess_mode="livesum")
        self.boot = Histogram("bootserver_boot_seconds", "Seconds from a node's first script of a boot to "
                              "the stage (installed, running, up).", ["stage"], buckets=BOOT_BUCKETS, registry=r)
        for stage in BOOT_DONE_STAGES:
            self.boot.labels(stage)
        self.reloads = Counter("bootserver_config_reloads", "Config reloads (SIGHUP, bootserver reload) by "
                               "result: ok, or invalid (the running config stays).", ["result"], registry=r)
        for result in ("ok", "invalid"):
            self.reloads.labels(result)
        # livemin: with --workers, the oldest config any live worker serves
        self.config_loaded = Gauge("bootserver_config_loaded_timestamp_seconds", "Unix time the running "
                                   "config was loaded (at start or by the last reload that succeeded).",
                                   registry=r, multiprocess_mode="livemin")
        self.admission_queued = Gauge("bootserver_admission_waiting", "Requests waiting for a slot, by "
                                      "class: in_boot (a later step of a boot, served first) or new.",
                                      ["class"], registry=r, multiprocess_mode="livesum")
        self.admission_refusals = Counter("bootserver_admission_refused", "Requests refused with a paced "
                                          "503, by class.", ["class"], registry=r)
        self.admission_retry_after = Histogram("bootserver_admission_retry_after_seconds", "Retry-After "
                                               "of the paced 503 answers (seconds).",
                                               buckets=RETRY_AFTER_BUCKETS, registry=r)
        self.admission_rate = Gauge("bootserver_admission_service_rate", "Requests per second the server "
                                    "finished in its last busy window (what the pacing assumes).",
                                    registry=r, multiprocess_mode="livesum")
        #: admission class -> its waiting gauge and refusal counter
        self._admission = {cls: (self.admission_queued.labels(cls), self.admission_refusals.labels(cls))
                           for cls in ("in_boot", "new")}
        self.worker_requests: Gauge | None = None
        #: (route, method, status) -> the request counter and duration histogram of those labels
        self._children: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}
        if mp_dir is not None:
            self.worker_requests = Gauge("bootserver_worker_requests", "HTTP requests answered by each "
                                         "worker process.", registry=r, multiprocess_mode="all")
        for result in ("hit", "miss"):
            self.cache.labels(result)
        for result in ("ok", "error"):
            self.fetches.labels(result)
        if stages is not None:
            self.registry.register(_StageCollector(stages))

    # --- the fetch observer protocol (bootserver.artifacts.upstream.FetchObserver) ---
    def fetch_started(self, artifact: Artifact) -> None:
        """An upstream download of ``artifact`` began."""
        self.in_flight.inc()

    def fetch_finished(self, artifact: Artifact, nbytes: int, seconds: float, ok: bool) -> None:
        """An upstream download ended after ``seconds`` with ``nbytes`` bytes received; ``ok`` if published."""
        self.in_flight.dec()
        self.fetches.labels("ok" if ok else "error").inc()
        self.fetch_bytes.inc(nbytes)
        self.fetch_seconds.inc(seconds)

    def boot_done(self, stage: str, seconds: float) -> None:
        """A node reached ``stage`` (one of :data:`bootserver.timeline.BOOT_DONE_STAGES`) ``seconds``
        after the first script of its boot."""
        self.boot.labels(stage).observe(seconds)

    def config_reloaded(self, ok: bool, loaded_at: float) -> None:
        """A reload ended (``ok``: the new config serves); ``loaded_at``: unix time the config now
        serving was loaded."""
        self.reloads.labels("ok" if ok else "invalid").inc()
        self.config_loaded.set(loaded_at)

    def admission_waiting(self, cls: str, waiting: int) -> None:
        """``waiting`` requests of admission class ``cls`` (``in_boot``, ``new``) wait for a slot now."""
        self._admission[cls][0].set(waiting)

    def admission_refused(self, cls: str, retry_after: int, rate: float) -> None:
        """A request of admission class ``cls`` got a paced 503 with ``Retry-After: retry_after``
        (seconds); ``rate``: the service rate it was paced at (requests/s)."""
        self._admission[cls][1].inc()
        self.admission_retry_after.observe(retry_after)
        self.admission_rate.set(rate)

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        """One answered request (``seconds`` until the last byte)."""
        children = self._children.get((route, method, status))
        if children is None:  # labels() validates and locks on every call: once per distinct label set
            children = self._children[(route, method, status)] = (
                self.requests.labels(route, method, str(status)), self.duration.labels(route))
        children[0].inc()
        children[1].observe(seconds)
        if self.worker_requests is not None:
            self.worker_requests.inc()

    def render(self) -> bytes:
        """The text exposition format of every metric (blocking: reads the timeline)."""
        return generate_latest(self.registry)
