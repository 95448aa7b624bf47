"""What lives from ``serve``'s start to its stop, whatever config it serves (docs/design.md, "Runtime").

A reload (:mod:`bootserver.reload`) replaces what one config means (a new
:class:`~bootserver.service.BootService`) and keeps the :class:`Runtime`: the state store, the upstream
client with its downloads in flight, the signer, the metrics, the background tasks (timeline writes
behind answers, stream metadata loads), the stall watch and one list of observers, told of every
timeline event and every discovered machine's report recorded in this process. Nothing here reads a
config key that a reload may change without being told (:meth:`Runtime.follow`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from .artifacts.cache import ArtifactCache
from .artifacts.catalog import StreamCatalog
from .artifacts.readthrough import Download, cancel_downloads
from .artifacts.upstream import Upstream
from .config import Config, ResolvedNode
from .errors import BootserverError, FetchError, UnavailableError
from .metrics import Metrics
from .signing import Signer
from .stalls import StallWatch
from .state import StateStore, TimelineStore, repeat_key
from .state.backends import open_store
from .streams import StreamMetadata
from .timeline import BOOT_DONE_STAGES, DISCOVERED, Current, Record, Recorded

log = logging.getLogger("bootserver.runtime")

#: Seconds between background loads of a stream's metadata after one failed (see :meth:`MetadataLoads.soon`).
METADATA_RETRY = 30.0
#: Seconds a request waits for a stream's metadata being loaded before it is answered 503
#: (:meth:`MetadataLoads.wait`): a local file or a near server answers within it, no network does not.
METADATA_WAIT = 1.0

#: An observer of what this process records (:meth:`Runtime.observe`): called on the event loop with each
#: :class:`~bootserver.timeline.Recorded` once it is committed (or queued, for a repeat), and with a
#: discovered machine's report (event :data:`~bootserver.timeline.DISCOVERED`, ``node`` its MAC); it must
#: not block, and may return an awaitable that the runtime runs in the background (:meth:`Runtime.drain`
#: waits for it).
RecordObserver = Callable[[Recorded], Awaitable[None] | None]

#: Events that may end a boot (:data:`~bootserver.timeline.BOOT_DONE_STAGES`): the stage before them
#: is read for :class:`~bootserver.timeline.Recorded`.
BOOT_ENDING_EVENTS = ("config", "checkin")


class BootDurations:
    """The boot-duration observer (:data:`RecordObserver`): when a node reaches one of
    :data:`~bootserver.timeline.BOOT_DONE_STAGES` it reports ``(stage, seconds)`` since its boot's first
    script, read from ``state`` (:func:`~bootserver.timeline.boot_started`), to ``report``
    (:meth:`bootserver.metrics.Metrics.boot_done`)."""

    def __init__(self, state: TimelineStore, report: Callable[[str, float], None]) -> None:
        self.state = state
        self.report = report

    def recorded(self, event: Recorded) -> Awaitable[None] | None:
        """The measurement to run when ``event`` ended a boot, else ``None``."""
        if event.before is None or event.stage == event.before or event.stage not in BOOT_DONE_STAGES:
            return None
        return self._measure(event)

    async def _measure(self, event: Recorded) -> None:
        started = await self.state.boot_started(event.node)
        if started is not None and event.at >= started:
            self.report(event.stage, event.at - started)


class MetadataLoads:
    """Background loads of stream metadata, keyed by what the config names: ``(stream, metadata)`` (its
    URL or file), so a reload that points a stream elsewhere loads the new source, and one whose source
    stays shares the load (or the wait after a failure) of the config before it."""

    def __init__(self) -> None:
        self._running: dict[tuple[str, str], asyncio.Future[None]] = {}
        #: (stream, source) -> monotonic time of the last failed load and its error (one line)
        self._failed: dict[tuple[str, str], tuple[float, str]] = {}
        #: (stream, source) -> the error of that failed load
        self._errors: dict[tuple[str, str], BootserverError] = {}

    def failure(self, catalog: StreamCatalog, stream: str) -> tuple[float, str] | None:
        """``(monotonic time, error)`` of the last failed load of ``stream``'s metadata as ``catalog``'s
        config names it, or ``None`` when it did not fail (or loaded since)."""
        return self._failed.get((stream, catalog.config.streams[stream].metadata))

    def soon(self, catalog: StreamCatalog, stream: str) -> None:
        """Start loading ``stream``'s metadata through ``catalog`` in the background unless a load of
        the same source runs or the last one failed less than :data:`METADATA_RETRY` seconds ago (a
        failure is logged once per try). Call on the event loop."""
        key = (stream, catalog.config.streams[stream].metadata)
        failed = self._failed.get(key)
        if key in self._running or (failed is not None and time.monotonic() - failed[0] < METADATA_RETRY):
            return

        async def load() -> None:
            try:
                await catalog.get(stream)
                self._failed.pop(key, None)
                self._errors.pop(key, None)
            except BootserverError as e:
                self._failed[key] = (time.monotonic(), str(e))
                self._errors[key] = e
                log.warning("stream %s: metadata not loaded: %s", stream, e)
            finally:
                self._running.pop(key, None)

        self._running[key] = asyncio.ensure_future(load())

    async def wait(self, catalog: StreamCatalog, stream: str, timeout: float = METADATA_WAIT) -> StreamMetadata:
        """``stream``'s metadata for a request: the copy ``catalog`` holds, else a background load
        (:meth:`soon`) waited for at most ``timeout`` seconds, so a server without network answers at once
        rather than after its upstream retries. Raises the load's error when the document itself is
        unusable (``MetadataError``, HTTP 502 as before), else :class:`~bootserver.errors.UnavailableError`
        (HTTP 503, ``Retry-After``: the seconds until the next load) naming the source and the error."""
        meta = catalog.cached(stream)
        if meta is not None:
            return meta
        self.soon(catalog, stream)
        source = catalog.config.streams[stream].metadata
        key = (stream, source)
        running = self._running.get(key)
        if running is not None:
            await asyncio.wait([running], timeout=timeout)  # the load goes on after the wait
        meta = catalog.cached(stream)
        if meta is not None:
            return meta
        error = self._errors.get(key)
        if error is not None and not isinstance(error, FetchError):
            raise error.with_traceback(None)
        failed = self._failed.get(key)
        why = f"could not be loaded: {failed[1]}" if failed is not None else "is still loading"
        unavailable = UnavailableError(f"stream {stream}: metadata from {source} {why}",
                                       public="stream metadata not loaded yet (no network?); retry shortly")
        left = METADATA_RETRY - (time.monotonic() - failed[0]) if failed is not None else timeout
        unavailable.retry_after = max(1, min(int(left + 0.999), int(METADATA_RETRY)))
        raise unavailable

    def problems(self, catalog: StreamCatalog) -> list[dict[str, Any]]:
        """The streams of ``catalog``'s config whose metadata is not loaded because the last load failed:
        ``{"stream", "source" (URL or file), "error" (one line), "retry_in" (seconds to the next load)}``,
        for the live page (its header and cache page)."""
        out = []
        now = time.monotonic()
        for stream, sc in catalog.config.streams.items():
            failed = self._failed.get((stream, sc.metadata))
            if failed is not None and catalog.cached(stream) is None:
                out.append({"stream": stream, "source": sc.metadata, "error": failed[1],
                            "retry_in": max(0, int(METADATA_RETRY - (now - failed[0])))})
        return out

    async def close(self) -> None:
        """Stop the loads still running."""
        for task in list(self._running.values()):
            task.cancel()
        await asyncio.gather(*self._running.values(), return_exceptions=True)


class Runtime:
    """What one ``serve`` (or one command) keeps from its start to its stop, across reloads: the state
    store (:attr:`state`), the upstream client (:attr:`upstream`) and the artifact downloads in flight
    in this process (:attr:`downloads`), the cache (:attr:`cache`), the URL :attr:`signer`, the metrics
    (:attr:`metrics`, when measured), the stall watch, the observers (:meth:`observe`), the background
    timeline writes and the stream metadata loads (:attr:`metadata`).

    ``config`` is the config it starts with: what it takes from it are the restart-only keys
    (:data:`bootserver.reload.RESTART_KEYS`: ``cache_dir``, ``state_dir``, ``state_store``, ``upstream``)
    and, through :meth:`follow`, the few a reload changes (mirrors, signature policy, the stall watch's
    nodes). Call :meth:`start` on the event loop before use and :meth:`close` when done."""

    def __init__(self, config: Config, signer: Signer | None = None, *, upstream: Upstream | None = None,
                 state: StateStore | None = None, measured: bool = False) -> None:
        """``signer`` signs per-node URLs (default: the keys of the state store and the wall clock);
        ``upstream`` is where metadata and artifacts come from (default: :meth:`Upstream.for_config`);
        ``state`` is the state store (default: :func:`~bootserver.state.backends.open_store`);
        ``measured``: keep the server's Prometheus metrics (:attr:`metrics`)."""
        #: The config served now (:meth:`follow` replaces it).
        self.config = config
        self.upstream = Upstream.for_config(config) if upstream is None else upstream
        self.cache = ArtifactCache(config.cache_dir)
        #: The node timeline, devices, discovered machines and signing keys (sqlite or ``state_store``).
        self.state = open_store(config) if state is None else state
        self._signer = signer
        #: The read-through downloads in flight in this process, by destination (shared by every
        #: config's :class:`~bootserver.artifacts.readthrough.ReadThrough`).
        self.downloads: dict[Path, Download] = {}
        self.metadata = MetadataLoads()
        self.stall_watch = StallWatch(config, self.state)
        self._observers: list[RecordObserver] = [self.stall_watch.recorded]
        #: The server's metrics (``None``: not measured), fed by the downloads, the boot durations and
        #: the stall watch's reading of the nodes' stages.
        self.metrics: Metrics | None = None
        if measured:
            self.metrics = Metrics(self.stall_watch.node_stages)
            self._observers.append(BootDurations(self.state, self.metrics.boot_done).recorded)
        #: Timeline writes started after an answer went out, and observers' background work.
        self._pending: set[asyncio.Future[Any]] = set()

    @property
    def signer(self) -> Signer:
        """The URL :class:`~bootserver.signing.Signer` (over the state store's keys, made on first use)."""
        if self._signer is None:
            self._signer = Signer(self.state.keyring())
        return self._signer

    def check_signature(self, node: str, path: str, exp: str | None, sig: str | None) -> bool:
        """Whether a request's ``exp``/``sig`` are valid for ``node`` and ``path`` now
        (:meth:`bootserver.signing.Signer.check`; the ``check`` of :class:`bootserver.http.gate.Gate`).
        Raises :class:`~bootserver.signing.KeysUnavailableError` as that does."""
        return self.signer.check(node, path, exp, sig)

    def follow(self, config: Config) -> None:
        """Serve ``config`` from now on (a reload; its restart-only keys equal the running ones): the
        upstream's mirrors and signature checks and the stall watch's nodes follow it."""
        self.config = config
        self.upstream.mirrors = config.mirrors()
        self.upstream.signatures = Upstream.signature_policy(config)
        self.stall_watch.config = config

    def observe(self, observer: RecordObserver) -> None:
        """Call ``observer`` after each event recorded in this process from now on (see
        :data:`RecordObserver`)."""
        self._observers.append(observer)

    def tell(self, recorded: Recorded) -> None:
        """Tell every observer of ``recorded`` (their background work runs until :meth:`drain`)."""
        for observer in self._observers:
            later = observer(recorded)
            if later is not None:
                self.spawn(later)

    async def record(self, resolved: ResolvedNode, event: str, *, ip: str | None = None,
                     detail: Mapping[str, Any] | None = None, at: float | None = None,
                     current: Current | None = None) -> str:
        """Record timeline ``event`` of the node as resolved (at unix time ``at`` in seconds, default now)
        through the state store's group commit (off the event loop) and tell the observers; returns
        the node's new stage once committed. With ``current`` (the node as read for this request), a
        mere repeat is written behind (see :meth:`bootserver.state.StateStore.record`).

        Raises :class:`~bootserver.errors.UnavailableError` (HTTP 503) when the store cannot be written:
        a stub or config served without its event would defeat boot-once, so the client is asked to
        retry (iPXE's script retries, Ignition retries 5xx answers)."""
        node, mode = resolved.name, resolved.mode
        when = time.time() if at is None else at
        real_config = resolved.ignition is not None
        if current is not None and event not in BOOT_ENDING_EVENTS and self.state.count_again(
                repeat_key(current, node, event, ip, detail, mode, real_config), when):
            # a repeat of the record queued behind for this node as read: counted into it (issue 43)
            self.tell(Recorded(node, event, current.stage, None, when))
            return current.stage
        record = Record(node, event, mode, when, ip, detail, real_config=real_config)
        before = None
        if event in BOOT_ENDING_EVENTS:  # rare: once per boot
            before = current.stage if current is not None else await self.state.stage(node)
        stage = await self.state.record(record, current)
        self.tell(Recorded(node, event, stage, before, record.at))
        return stage

    def discovered(self, mac: str, at: float) -> None:
        """Tell the observers that machine ``mac``'s report was recorded at unix time ``at``."""
        self.tell(Recorded(mac, DISCOVERED, DISCOVERED, None, at))

    def spawn(self, work: Awaitable[Any]) -> None:
        """Run ``work`` in the background until it ends (:meth:`drain` waits for it; a failure is logged)."""
        task = asyncio.ensure_future(work)
        self._pending.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Future[Any]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("timeline write failed: %s", task.exception())

    async def drain(self) -> None:
        """Wait for the background work started so far, and commit the write-behind timeline events."""
        if self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)
        await self.state.flush()

    async def start(self, *, watch_stalls: bool = False) -> None:
        """Open the state store (:meth:`bootserver.state.StateStore.start`); with ``watch_stalls``
        (``serve``), also start the stall watch (:meth:`bootserver.stalls.StallWatch.start`, until
        :meth:`close`) if this process holds this machine's stall lock. Call on the event loop. Raises
        :class:`~bootserver.state.StateStoreError`."""
        await self.state.start()
        if watch_stalls:
            self.stall_watch.start()

    async def scrape(self) -> bytes:
        """The Prometheus text exposition of :attr:`metrics` (``GET /metrics``), once this process's
        background writes are in and the nodes' stages are read (rendered in a worker thread: with
        ``serve --workers N`` it reads every worker's files). Only when measured."""
        assert self.metrics is not None, "scrape() needs Runtime(measured=True)"
        await self.drain()
        await self.stall_watch.read_stages()
        return await asyncio.to_thread(self.metrics.render)

    async def close(self) -> None:
        """Stop the stall watch, finish the background writes, stop metadata loads, cancel read-through
        downloads still running (their partials stay; a verified one publishes first), close the
        upstream, then the state store."""
        await self.stall_watch.close()
        await self.drain()
        await self.metadata.close()
        await cancel_downloads(self.downloads)
        await self.upstream.close()
        await self.state.close()

    async def __aenter__(self) -> Runtime:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
