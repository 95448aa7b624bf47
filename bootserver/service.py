"""The boot service: the domain operations behind every endpoint and every ``render`` command.

One :class:`BootService` per config holds the upstream (session, mirrors, retry policy), the artifact
store, the stream catalog, the URL builder and the real-config reader. Handlers and CLI commands call
one method each, so the server and ``bootserver render`` can never disagree.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from .artifacts.cache import ArtifactCache, Published
from .artifacts.catalog import StreamCatalog
from .artifacts.readthrough import ReadThrough, Transfer
from .artifacts.report import cache_report
from .artifacts.upstream import Upstream
from .butane import ButaneError
from .config import IGNITION_VERSIONS, Config
from .discovery import NICS, Discovered, read_report
from .errors import BootserverError, InputError, UnavailableError
from .files import LinkRefused
from .fleet import FleetNode, read_fleet
from .grub import render_grub_config, render_grub_localboot
from .ignition import NotAcceptableError, RealConfigs, build_stub, encode, negotiate_version, stub_versions
from .images.firmware import IPXE_LOADERS, arm64_grub
from .images.netboot import node_image
from .images.netsecure import GRUB_CFG, generic_grub_cfg, loader_file, loader_set, secure_boot_streams
from .images.overlay import NodeImage
from .images.secureboot import check_secure_boot, secureboot_image
from .images.tools import need
from .inventory import NodeContext, node_contexts
from .ipxe import render_boot_script, render_discovery_script, render_localboot_script
from .metrics import Metrics
from .network import client_family, family_kargs, node_kargs
from .renders import RenderCache, ScriptInputs, StubInputs
from .scripts import script_context
from .signing import Signer
from .stalls import StallWatch
from .state import StateStore
from .state.backends import open_store
from .streams import ARTIFACT_KINDS, Release
from .timeline import (
    BOOT_DONE_STAGES,
    INSTALLED_STAGES,
    Current,
    Event,
    NodeState,
    Record,
    Recorded,
    artifact_event,
    boot_started,
)
from .urls import Urls
from .values import normalize_mac

log = logging.getLogger("bootserver.service")

#: Client addresses (and logged MACs) a process remembers for discovery reports at most.
REPORTERS_KEPT = 10_000
#: Newly discovered machines logged one by one per minute at most (per process).
DISCOVERY_LOG_LINES = 20

#: Seconds between background loads of a stream's metadata after one failed (see
#: :meth:`BootService.load_metadata_soon`).
METADATA_RETRY = 30.0

#: An observer of recorded events (:attr:`BootService.observers`): called on the event loop with each
#: :class:`~bootserver.timeline.Recorded` once it is committed (or queued, for a repeat); it must not
#: block, and may return an awaitable that the service runs in the background (:meth:`BootService.drain`
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

    def __init__(self, state: StateStore, report: Callable[[str, float], None]) -> None:
        self.state = state
        self.report = report

    def recorded(self, event: Recorded) -> Awaitable[None] | None:
        """The measurement to run when ``event`` ended a boot, else ``None``."""
        if event.before is None or event.stage == event.before or event.stage not in BOOT_DONE_STAGES:
            return None
        return self._measure(event)

    async def _measure(self, event: Recorded) -> None:
        started = boot_started(await self.state.events(event.node))
        if started is not None and event.at >= started:
            self.report(event.stage, event.at - started)


class BootService:
    """Domain operations for one loaded :class:`~bootserver.config.Config`."""

    def __init__(self, config: Config, signer: Signer | None = None,
                 upstream: Upstream | None = None, state: StateStore | None = None, *,
                 measured: bool = False) -> None:
        """``signer`` signs per-node URLs (default: the keys of the state store and the wall clock);
        ``upstream`` is where metadata and artifacts come from (default: :meth:`Upstream.for_config`,
        the mirrors of ``server.facility``); ``state`` is the state store (default: the one the config
        selects, :func:`~bootserver.state.backends.open_store`); ``measured``: keep the server's
        Prometheus metrics (:attr:`metrics`: upstream fetches, boot durations, the nodes' stages). The
        one place the service's parts are made and wired to each other. Call :meth:`close` when done
        (it closes the upstream and the state store)."""
        self.config = config
        #: Where stream metadata and artifacts come from (see :mod:`bootserver.artifacts.upstream`).
        self.upstream = Upstream.for_config(config) if upstream is None else upstream
        self.cache = ArtifactCache(config.cache_dir)
        self.catalog = StreamCatalog(config, self.cache, self.upstream)
        #: Artifact lookups with read-through to upstream (see :mod:`bootserver.artifacts.readthrough`).
        self.artifacts = ReadThrough(config, self.cache, self.catalog, self.upstream)
        #: The node timeline and the signing keys (sqlite in ``state_dir``, or ``state_store``).
        self.state = open_store(config) if state is None else state
        self.urls = Urls(config, signer, keys=self.state.keyring)
        self.real_configs = RealConfigs()
        #: Every configured node resolved once (profile, settings, provider): what a request carries down.
        self._nodes = node_contexts(config)
        #: The stall watch (one warning per stalled node; the nodes' stages for metrics scrapes).
        self.stall_watch = StallWatch(config, self.state)
        #: The observers of every event recorded in this process (see :meth:`observe`), in order: the
        #: stall watch, the boot-duration metric when measured, then those added (the live page's hub).
        self.observers: list[RecordObserver] = [self.stall_watch.recorded]
        #: The server's metrics (``None``: not measured), fed by the read-through's downloads, the
        #: boot durations and the stall watch's reading of the nodes' stages.
        self.metrics: Metrics | None = None
        if measured:
            self.metrics = Metrics(self.stall_watch.node_stages)
            self.artifacts.observer = self.metrics
            self.observers.append(BootDurations(self.state, self.metrics.boot_done).recorded)
        self._scripts: RenderCache[ScriptInputs, str] = RenderCache(self._render_script)
        self._grub_configs: RenderCache[ScriptInputs, str] = RenderCache(self._render_grub_config)
        self._stubs: RenderCache[StubInputs, bytes] = RenderCache(self._render_stub)
        #: Each node's network kargs and the device record they were built from (see :meth:`_network`).
        self._kargs: dict[str, tuple[Mapping[str, Any] | None, tuple[str, ...]]] = {}
        #: Timeline writes started after an answer went out (see :meth:`artifact_answered`).
        self._pending: set[asyncio.Task[Any]] = set()
        #: Called after each discovered machine's report recorded in this process (the live page's
        #: :class:`bootserver.http.page.Hub`); they must not block.
        self.discovery_hooks: list[Callable[[], None]] = []
        #: client address -> monotonic time of its last recorded report (``server.discovery.per_address``),
        #: and the MACs this process logged a report of already (one info line per machine).
        self._reported: dict[str, float] = {}
        self._logged: set[str] = set()
        #: the discovery log's minute: (its monotonic start, lines logged, lines left out)
        self._log_window: tuple[float, int, int] = (0.0, 0, 0)
        #: Background stream metadata loads (see :meth:`_load_metadata_soon`) and the monotonic time of
        #: each stream's last failed one.
        self._metadata_loads: dict[str, asyncio.Future[None]] = {}
        self._metadata_failed: dict[str, float] = {}

    def reloaded(self, config: Config) -> BootService:
        """A service for ``config`` (a reload: :mod:`bootserver.reload`; its restart-only keys equal this
        one's) that shares what outlives a config with this one: the upstream (its mirrors and its
        signature checks, ``verify_signatures``, follow ``config``), the state store, the signer, the
        in-process downloads, the background timeline writes, the metrics, the stall watch (now watching
        ``config``'s nodes) and the observers. This service stays usable for the requests that started
        on it; only the last one is closed (:meth:`close`)."""
        self.upstream.mirrors = config.mirrors()
        self.upstream.signatures = Upstream.signature_policy(config)
        new = BootService(config, self.urls.signer, upstream=self.upstream, state=self.state)
        new.artifacts.share_downloads(self.artifacts)
        new.artifacts.observer = self.artifacts.observer
        new.metrics = self.metrics
        new.observers = self.observers
        new.stall_watch = self.stall_watch
        self.stall_watch.config = config
        new._pending = self._pending
        new._metadata_loads = self._metadata_loads
        new._metadata_failed = self._metadata_failed
        new.discovery_hooks = self.discovery_hooks
        new._reported = self._reported
        new._logged = self._logged
        new._log_window = self._log_window
        return new

    def discovery_script(self, mac: str | None) -> str:
        """What ``/boot.ipxe`` answers a machine that matches no node while ``server.discovery`` is on
        (:func:`~bootserver.ipxe.render_discovery_script`): report, wait ``server.discovery.every``
        seconds, ask again. ``mac``: the request's ``mac`` (used when it is one, else iPXE's own)."""
        try:
            word = normalize_mac(mac) if mac else None
        except ValueError:
            word = None
        return render_discovery_script(mac=word, every=self.config.server.discovery.every, nics=NICS)

    async def report(self, query: Mapping[str, str], client: str | None, at: float | None = None) -> bool:
        """Record a machine's report (``GET /discover``, its query decoded: :func:`~bootserver.discovery.
        read_report`) from address ``client`` at unix time ``at`` (default now); returns whether it was
        recorded. Not recorded, answered alike: a MAC or UUID of a configured node (the answer must not
        tell which are), and a report less than ``server.discovery.per_address`` seconds after the last
        one recorded from that address (in this process). Raises
        :class:`~bootserver.discovery.ReportError` (no valid mac), :class:`UnavailableError` (store)."""
        settings = self.config.server.discovery
        mac, uuid, facts = read_report(query)
        if self.config.node_by_mac(mac) is not None or (uuid is not None and self.config.node_by_uuid(uuid)):
            return False
        now, key = time.monotonic(), client or "-"
        last = self._reported.get(key)
        if last is not None and now - last < settings.per_address:
            return False
        if len(self._reported) >= REPORTERS_KEPT:  # bounded: forget the addresses past their wait
            for address, when in list(self._reported.items()):
                if now - when >= settings.per_address:
                    del self._reported[address]
            if len(self._reported) >= REPORTERS_KEPT:
                self._reported.clear()
        self._reported[key] = now
        at = time.time() if at is None else at
        await self.state.discover(Discovered(mac, uuid, facts, client, at, at), settings.keep)
        if mac not in self._logged and len(self._logged) < REPORTERS_KEPT:
            self._logged.add(mac)
            self._log_discovered(now, mac, uuid, client, facts)
        for hook in self.discovery_hooks:
            hook()
        return True

    def _log_discovered(self, now: float, mac: str, uuid: str | None, client: str | None,
                        facts: Mapping[str, str]) -> None:
        """One info line per newly discovered machine, at most :data:`DISCOVERY_LOG_LINES` a minute (a
        flood of made-up MACs must not flood the log: the rest are counted in one line)."""
        window, lines, skipped = self._log_window
        if now - window >= 60:
            if skipped:
                log.info("%d more machines discovered in the last minute (not logged one by one; "
                         "`bootserver nodes discovered` lists them)", skipped)
            window, lines, skipped = now, 0, 0
        if lines < DISCOVERY_LOG_LINES:
            lines += 1
            # every value as a JSON string: quotes, newlines and control characters escaped (one line)
            log.info("discovered machine %s (uuid %s) from %s: %s; adopt it with `bootserver nodes adopt %s "
                     "--name NAME --profile PROFILE`", mac, uuid or "-", json.dumps(client), json.dumps(facts),
                     mac)
        else:
            skipped += 1
        self._log_window = (window, lines, skipped)

    async def boot_script(self, node: str, *, grub: bool = False) -> str:
        """The node's iPXE script (text) as :meth:`serve_script` answers now, recording nothing (for
        ``render`` and the live page); in GRUB's form with ``grub``. ``node`` must be a configured node
        name.

        Raises :class:`~bootserver.errors.UnavailableError` when the timeline cannot be read, or
        ``FetchError``/``MetadataError`` when the stream's metadata must be fetched and cannot be; with
        ``grub``, :class:`~bootserver.grub.GrubUnsupported` when an artifact URL is not plain http.
        """
        return (await self._script(self._nodes[node], await self.state.current(node), grub=grub))[1]

    async def _script(self, resolved: NodeContext, current: Current, grub: bool = False,
                      family: int | None = None) -> tuple[str, str, dict[str, Any]]:
        """``(event, script, detail)`` for the node as read (``current``: its stage and device record):
        the boot-disk script when boot-once applies, else the boot script; in GRUB's form with ``grub``
        (the boot image's UEFI boot), the same boot either way. ``family``: the address family the
        machine asked over (its URLs' base URL, and ``ip=dhcp6`` for a DHCP node asking over IPv6)."""
        node, profile = resolved.name, resolved.profile
        stage = current.stage
        if profile.boots_once and stage in INSTALLED_STAGES:
            script = render_grub_localboot(node, stage) if grub else render_localboot_script(node, stage)
            return "localboot", script, {"stage": stage}
        release = await self.catalog.release(profile.stream, profile.arch)
        # rendered once per change of its inputs (ScriptInputs), not per request
        signing = self.urls.signer.state(self.config.server.signing.install_ttl)
        inputs = ScriptInputs(node, release, signing, self._network(node, current.device, family), family)
        script = self._grub_configs.get(node, inputs) if grub else self._scripts.get(node, inputs)
        return "script", script, {"mode": profile.mode, "release": release.version}

    def _network(self, node: str, device: Mapping[str, Any] | None, family: int | None = None) -> tuple[str, ...]:
        """The node's network kargs (:func:`~bootserver.network.node_kargs`) for a machine asking over
        ``family``, built again only when its device record changed. Raises ``DeviceRecordError`` (never
        kept: the next request tries again)."""
        hit = self._kargs.get(node)
        if hit is not None and (hit[0] is device or hit[0] == device):
            return family_kargs(hit[1], family)
        kargs = node_kargs(self.config, node, device)
        self._kargs[node] = (device, kargs)
        return family_kargs(kargs, family)

    def _render_script(self, inputs: ScriptInputs) -> str:
        return render_boot_script(script_context(self.config, self.urls.for_family(inputs.family), inputs.node,
                                                 inputs.release, inputs.network))

    def _render_grub_config(self, inputs: ScriptInputs) -> str:
        return render_grub_config(script_context(self.config, self.urls.for_family(inputs.family), inputs.node,
                                                 inputs.release, inputs.network))

    async def record(self, node: str, event: str, *, ip: str | None = None,
                     detail: Mapping[str, Any] | None = None, at: float | None = None,
                     current: Current | None = None) -> str:
        """Record a timeline event (at unix time ``at`` in seconds, default now) through the group
        commit writer (off the event loop); returns the node's new stage once committed. With
        ``current`` (the node as read for this request), a mere repeat is written behind (see
        :meth:`bootserver.state.StateStore.record`).

        Raises :class:`UnavailableError` (HTTP 503) when ``state_dir`` cannot be written: a stub or
        config served without its event would defeat boot-once, so the client is asked to retry
        (iPXE's script retries, Ignition retries 5xx answers).
        """
        return await self._record(self._nodes[node], event, ip=ip, detail=detail, at=at, current=current)

    async def _record(self, resolved: NodeContext, event: str, *, ip: str | None = None,
                      detail: Mapping[str, Any] | None = None, at: float | None = None,
                      current: Current | None = None) -> str:
        """:meth:`record` for the node as resolved."""
        node, profile = resolved.name, resolved.profile
        record = Record(node, event, profile.mode, time.time() if at is None else at, ip, detail,
                        real_config=profile.ignition is not None)
        before = None
        if event in BOOT_ENDING_EVENTS:  # rare: once per boot
            before = current.stage if current is not None else await self.state.stage(node)
        stage = await self.state.record(record, current)
        recorded = Recorded(node, event, stage, before, record.at)
        for observer in self.observers:
            later = observer(recorded)
            if later is not None:
                self._spawn(later)
        return stage

    def observe(self, observer: RecordObserver) -> None:
        """Call ``observer`` after each event recorded in this process from now on (see
        :data:`RecordObserver`)."""
        self.observers.append(observer)

    async def serve_script(self, node: str, client: str | None, *, grub: bool = False) -> str:
        """What the server answers a node's script request from address ``client``: the boot script,
        or with boot-once the boot-disk script once the node is installed; records ``script`` or
        ``localboot`` in the timeline. One read of the node (:meth:`StateStore.current`); a repeat
        of the node's last event is written behind, anything new before the answer. With ``grub``,
        in GRUB's form (``GET /grub/<node>``, fetched by the UEFI boot of the node's boot image): the
        same boot (kernel, initramfs, kargs), the same boot-once rule, the same timeline event. Raises
        as :meth:`boot_script`.
        """
        resolved = self._nodes[node]
        current = await self.state.current(node)
        event, script, detail = await self._script(resolved, current, grub=grub, family=client_family(client))
        await self._record(resolved, event, ip=client, detail=detail, current=current)
        return script

    async def node_image(self, node: str) -> NodeImage:
        """The node's boot image: for a ``secure_boot`` node the Secure Boot one
        (:func:`bootserver.images.secureboot.secureboot_image`; the release's live ISO, kernel and
        initramfs fetched into the cache first, sha256-checked, once however many ask), else the
        netboot one (:func:`bootserver.images.netboot.node_image`); either a base built once and the
        node's region once per node and inputs, in ``cache_dir/iso``, made in a worker thread (a first
        build runs xorriso) so the event loop goes on. Raises as those two, :class:`UnavailableError`
        when the state store (the node's device record, for ``network: provider``) cannot be read, and
        the fetch's errors (``FetchError``, ``IntegrityError``)."""
        if not self.config.node_secure_boot(node):
            current = await self.state.current(node)
            return await asyncio.to_thread(node_image, self.config, self.urls, node, current.device)
        release, (iso, kernel, initramfs), kargs = await self.secure_boot_parts(node)
        return await asyncio.to_thread(secureboot_image, self.config, self.urls, node, release,
                                       iso, kernel, initramfs, kargs)

    async def secure_boot_parts(self, node: str) -> tuple[Release, tuple[Path, Path, Path], tuple[str, ...]]:
        """What a ``secure_boot`` node boots, from its image or over the network: its release, the cached
        live ISO, kernel and initramfs (fetched first, sha256-checked) and its kargs with the stub URL
        signed for ``chain_ttl`` (they are written to disk). Raises as :meth:`node_image`."""
        current = await self.state.current(node)
        profile = self._nodes[node].profile
        release = await self.catalog.release(profile.stream, profile.arch)
        check_secure_boot(node, release)
        assert release.live_iso is not None
        fetched = await asyncio.gather(*(self.artifacts.fetch(release, a)
                                         for a in (release.live_iso, release.kernel, release.initramfs)))
        ctx = script_context(self.config, self.urls, node, release, self._network(node, current.device),
                             stub_ttl=self.config.server.signing.chain_ttl)
        iso, kernel, initramfs = (f.path for f in fetched)
        return release, (iso, kernel, initramfs), ctx.kargs

    async def boot_image(self, node: str) -> NodeImage:
        """:meth:`node_image` for ``GET /iso/<node>.iso``: bad input (the node's network or release cannot
        be written into an image) is raised as a :class:`BootserverError` (HTTP 500) whose public text
        names no key or path; the message names both, for the log."""
        try:
            return await self.node_image(node)
        except InputError as e:
            raise BootserverError(str(e), public=f"node {node}: its boot image cannot be built from its settings; "
                                  "the server log has the details") from None

    async def arm64_grub(self) -> Path:
        """The standalone arm64 GRUB for this server's IPv4 base URL (GRUB's ``http`` has no IPv6;
        :func:`bootserver.images.firmware.arm64_grub`: built once, cached in ``cache_dir/loaders``), built
        in a worker thread (grub-mkstandalone, about 0.2 s). Raises as that function."""
        return await asyncio.to_thread(arm64_grub, self.config.cache_dir, self.config.server.base_url_for(4))

    async def loader(self, route: str, params: Mapping[str, str]) -> Path | str | None:
        """A boot loader route's answer (``route`` names it, ``params`` its URL's parts): the arm64 GRUB's
        file, Debian's ``ipxe.efi`` (:class:`~bootserver.images.tools.IsoToolMissing` when not installed),
        a Secure Boot loader set's file (:func:`~bootserver.images.netsecure.loader_set`, the stream's live
        ISO fetched on first use) or its GRUB config (text); ``None`` for a stream no ``secure_boot`` node
        boots from, or a file the set has not. Raises as those functions."""
        if route == "loader_arm64":
            return await self.arm64_grub()
        if route == "loader_ipxe":
            return need(IPXE_LOADERS["ipxe.efi"])
        if route == "grub_cfg" or params.get("file") == GRUB_CFG:
            return generic_grub_cfg(self.config.server.base_url_for(4))
        if params.get("stream") not in secure_boot_streams(self.config):
            return None
        return loader_file(await loader_set(self.config, self.catalog, self.artifacts, params["stream"]),
                           params["file"])

    async def serve_stub(self, node: str, client: str | None, accept: str | None = None) -> bytes:
        """:meth:`stub` in the spec version negotiated with the client's ``Accept`` header (see
        :func:`~bootserver.ignition.negotiate_version`; ``None``: the profile's version), recording
        ``stub`` in the timeline. Raises :class:`~bootserver.ignition.NotAcceptableError` (HTTP 406,
        nothing recorded) when the client accepts no version the profile allows, else as :meth:`stub`.
        """
        resolved = self._nodes[node]
        version = negotiate_version(accept, resolved.profile.ignition_version, IGNITION_VERSIONS)
        data = self._stub(resolved, version, client_family(client))
        await self._record(resolved, "stub", ip=client)
        return data

    async def serve_real_config(self, node: str, client: str | None) -> bytes | None:
        """:meth:`real_config`, recording ``config`` when there is one. Raises as :meth:`real_config`."""
        resolved = self._nodes[node]
        pinned = self._real_config_pinned(resolved)
        if pinned is None:
            return None
        await self._record(resolved, "config", ip=client)
        return pinned[0]

    async def artifact(self, segments: tuple[str, ...]) -> Published | Transfer | None:
        """The artifact at URL segments ``(stream, arch, release, file)``: the cached file opened
        (:class:`~bootserver.artifacts.cache.Published`; the caller closes its descriptor), a
        :class:`~bootserver.artifacts.readthrough.Transfer` of it (read-through), or ``None`` (not served:
        see :meth:`artifact_missing`; also when a link stands anywhere from ``cache_dir`` to it, which the
        cache logged). Raises as :meth:`ReadThrough.open` otherwise."""
        try:
            return await self.artifacts.open(segments)
        except LinkRefused:
            return None

    def artifact_missing(self) -> str:
        """Why :meth:`artifact` found nothing, in public words."""
        return "not a known artifact" if self.artifacts.enabled else "not in cache"

    async def artifact_requested(self, segments: tuple[str, ...], client: str | None) -> tuple[str, str | None]:
        """``(kind, node)`` of an artifact request from address ``client``: its kind (see
        :meth:`_artifact_kind`) and the node it is attributed to (docs/design.md; ``None`` when none),
        after recording ``<kind>-requested`` for it. Never raises: artifacts are served whatever
        happens to the timeline (a failure is logged)."""
        kind = self._artifact_kind(segments)
        if not client:
            return kind, None
        try:
            node = await self.state.attribute(client)  # one indexed row
            if node is None or node not in self.config.nodes:
                return kind, None
            if kind != "other":
                await self.record(node, f"{kind}-requested", ip=client)
            return kind, node
        except (UnavailableError, OSError) as e:
            log.error("artifact %s: not recorded in the node timeline: %s", "/".join(segments), e)
            return kind, None

    def artifact_answered(self, node: str, kind: str, client: str | None, *, status: int, nbytes: int,
                          complete: bool) -> None:
        """Record how an attributed artifact answer ended, once its last byte went out (or the
        connection broke): :func:`~bootserver.timeline.artifact_event` (``<kind>-completed``,
        ``-partial``, ``-unchanged`` or ``-failed``) with the body ``nbytes`` sent and the ``status``.
        The write runs in the background (see :meth:`drain`); call on the event loop."""
        if kind not in ARTIFACT_KINDS:
            return
        event = artifact_event(kind, status, complete)
        self._spawn(self.record(node, event, ip=client, detail={"bytes": nbytes, "status": status},
                                at=time.time()))

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._pending.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("timeline write failed: %s", task.exception())

    async def drain(self) -> None:
        """Wait for the background timeline writes started so far, and commit the write-behind ones."""
        if self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)
        await self.state.flush()

    async def fleet(self, *, devices: bool = False) -> list[FleetNode]:
        """The fleet view (:func:`bootserver.fleet.read_fleet`: every configured node and any other with
        events; with ``devices``, their device records) once this process's background writes are in.
        Raises :class:`UnavailableError`."""
        await self.drain()
        return await read_fleet(self.config, self.state, devices=devices)

    async def history(self, node: str, limit: int | None = None) -> tuple[NodeState, list[Event]]:
        """Node ``node``'s timeline state and its events, oldest first (``limit``: the last N), once this
        process's background writes are in. Raises :class:`UnavailableError`."""
        await self.drain()
        events = await self.state.events(node, limit=limit)
        return await self.state.node(node), events

    async def node_report(self, node: str, limit: int | None = None) -> dict[str, Any]:
        """Configured node ``node``'s stage and events, oldest first (``limit``: the last N), as
        ``GET /nodes/{node}`` shows them."""
        state, events = await self.history(node, limit)
        return {**state.as_dict(time.time()), "profile": self._nodes[node].profile_name,
                "events": [e.as_dict() for e in events]}

    def cache_report(self) -> dict[str, Any]:
        """What the artifact cache holds, for the live page's cache page
        (:func:`bootserver.artifacts.report.cache_report`; reads ``cache_dir``, no network)."""
        return cache_report(self.artifacts)

    def chain_url(self, node: str) -> str:
        """The node's signed chain URL (:meth:`bootserver.urls.Urls.chain`)."""
        return self.urls.chain(node)

    def check_signature(self, node: str, path: str, exp: str | None, sig: str | None) -> bool:
        """Whether a request's ``exp``/``sig`` are valid for ``node`` and ``path`` now
        (:meth:`bootserver.signing.Signer.check`; the ``check`` of :class:`bootserver.http.gate.Gate`).
        Raises :class:`~bootserver.signing.KeysUnavailableError` as that does."""
        return self.urls.signer.check(node, path, exp, sig)

    async def start(self, *, watch_stalls: bool = False) -> None:
        """Open the state store (see :meth:`bootserver.state.StateStore.start`); with ``watch_stalls``
        (``serve``), also start the stall watch (:meth:`StallWatch.start
        <bootserver.stalls.StallWatch.start>`, until :meth:`close`) if this process is the one of this
        machine that holds its lock. Call on the event loop. Raises
        :class:`~bootserver.state.StateStoreError`."""
        await self.state.start()
        if watch_stalls:
            self.stall_watch.start()

    async def scrape(self) -> bytes:
        """The Prometheus text exposition of :attr:`metrics` (``GET /metrics``), once this process's
        background writes are in and the nodes' stages are read (rendered in a worker thread: with
        ``serve --workers N`` it reads every worker's files). Only when ``measured``."""
        assert self.metrics is not None, "scrape() needs BootService(measured=True)"
        await self.drain()
        await self.stall_watch.read_stages()
        return await asyncio.to_thread(self.metrics.render)

    async def readiness(self) -> tuple[bool, dict[str, Any]]:
        """``(ready, report)`` of ``GET /readyz``: ready when every profile's stream metadata is loaded
        (scripts can be answered), every artifact it names is cached or read-through is on (see
        :meth:`ReadThrough.readiness` for the report), and the state store answers (``state_store``:
        ``{"backend": "sqlite"|"postgresql", "ready": bool}``; why not goes to the log). A stream whose
        metadata is missing gets a background load (:meth:`_load_metadata_soon`), so a probe that
        keeps asking sees the server become ready as soon as the metadata can be had. Never blocks on
        the network."""
        ready, report = self._artifacts_readiness()
        problem = await self.state.ready()
        if problem is not None:
            log.warning("readyz: %s", problem)
        ready = ready and problem is None
        return ready, {**report, "state_store": {"backend": self.state.backend, "ready": problem is None},
                       "ready": ready}

    def _artifacts_readiness(self) -> tuple[bool, dict[str, Any]]:
        ready, report = self.artifacts.readiness()
        waiting = sorted({i["stream"] for i in report["artifacts"] if i["release"] is None})
        for item in report["artifacts"]:
            if item["release"] is None and item["stream"] in self._metadata_failed:
                item["reason"] = "stream metadata could not be loaded; the server log has the details"
        for stream in waiting:
            self._load_metadata_soon(stream)
        if waiting:
            ready = False
            report = {**report, "ready": False}
        return ready, report

    def _load_metadata_soon(self, stream: str) -> None:
        """Start loading ``stream``'s metadata in the background unless a load is running or the last
        one failed less than :data:`METADATA_RETRY` seconds ago (a failure is logged once per try).
        Call on the event loop."""
        now = time.monotonic()
        if stream in self._metadata_loads or now - self._metadata_failed.get(stream, -METADATA_RETRY) < METADATA_RETRY:
            return

        async def load() -> None:
            try:
                await self.catalog.get(stream)
                self._metadata_failed.pop(stream, None)
            except BootserverError as e:
                self._metadata_failed[stream] = time.monotonic()
                log.warning("stream %s: metadata not loaded: %s", stream, e)
            finally:
                self._metadata_loads.pop(stream, None)

        self._metadata_loads[stream] = asyncio.ensure_future(load())

    async def close(self) -> None:
        """Finish the background timeline writes, stop metadata loads, cancel read-through downloads
        still running (their partials stay), close the upstream, then the state store."""
        await self.stall_watch.close()
        await self.drain()
        for task in list(self._metadata_loads.values()):
            task.cancel()
        await asyncio.gather(*self._metadata_loads.values(), return_exceptions=True)
        await self.artifacts.close()
        await self.upstream.close()
        await self.state.close()

    def _artifact_kind(self, segments: tuple[str, ...]) -> str:
        """``kernel``, ``initramfs`` or ``rootfs`` when the artifact URL segments ``(stream, arch,
        release, file)`` name an artifact of a stream's current release (from its metadata), else
        ``other``. Never raises."""
        try:
            stream, arch, version, filename = segments
            meta = self.catalog.cached(stream) if stream in self.config.streams else None
            rel = None if meta is None else meta.releases.get(arch)
        except Exception:  # malformed metadata or segments: only a label is at stake
            return "other"
        if rel is not None and rel.version == version:
            for kind in ARTIFACT_KINDS:
                if getattr(rel, kind).filename == filename:
                    return kind
        return "other"

    def real_config(self, node: str) -> bytes | None:
        """The node's real Ignition config bytes, or ``None`` when its profile has none.

        Raises :class:`~bootserver.errors.UnavailableError` when the file cannot be read (or, for a
        Butane config, translated) now.
        """
        pinned = self._real_config_pinned(self._nodes[node])
        return None if pinned is None else pinned[0]

    def _real_config_pinned(self, resolved: NodeContext) -> tuple[bytes, str] | None:
        """``(bytes, sha512 hash)`` of the node's real config, or ``None``. Raises as :meth:`real_config`."""
        node = resolved.name
        path: Path | None = self.config.ignition_path(resolved.profile_name)
        if path is None:
            return None
        try:
            return self.real_configs.read_pinned(path)
        except OSError as e:
            raise UnavailableError(f"node {node}: cannot read Ignition config {path}: {e.strerror}",
                                   public=f"node {node}: its Ignition config cannot be read now") from None
        except ButaneError as e:  # the Butane file was edited into one butane refuses: 503 until fixed
            raise UnavailableError(f"node {node}: {e}",
                                   public=f"node {node}: its Butane config cannot be translated now") from None

    def _ca_pem(self) -> bytes | None:
        """The CA certificate (PEM) embedded into stubs when ``server.tls`` is set, else ``None``.

        Raises :class:`~bootserver.errors.UnavailableError` when the CA file cannot be read.
        """
        if self.config.server.tls is None:
            return None
        ca = self.config.tls_files()[2]
        try:
            return ca.read_bytes()
        except OSError as e:
            raise UnavailableError(f"server.tls.ca: cannot read {ca}: {e.strerror}",
                                   public="the server's CA certificate cannot be read now") from None

    def stub(self, node: str, version: str | None = None) -> bytes:
        """The node's merge-style Ignition stub in spec ``version`` (default: the profile's
        ``ignition_version``), as the exact bytes served.

        Its merge URL is signed with an expiry rounded up to the hour, so ``render ignition`` and the
        server print the same bytes within the same hour (same clock, same code path).

        Raises :class:`~bootserver.ignition.NotAcceptableError` when ``version`` is not a stub version
        (3.1.0 or newer) up to the profile's ``ignition_version``;
        :class:`~bootserver.errors.UnavailableError` as :meth:`real_config`.
        """
        return self._stub(self._nodes[node], version)

    def _stub(self, resolved: NodeContext, version: str | None, family: int | None = None) -> bytes:
        """:meth:`stub` for the node as resolved, its URLs on the base URL of address family ``family``."""
        node, name, profile = resolved.name, resolved.profile_name, resolved.profile
        maximum = profile.ignition_version
        if version is None:
            version = maximum
        elif version not in stub_versions(maximum, IGNITION_VERSIONS):
            raise NotAcceptableError(
                f"node {node}: Ignition spec {version} is not one its stub can be written in: profile "
                f"{name} allows 3.1.0 to {maximum} (profiles.{name}.ignition_version)")
        pinned = self._real_config_pinned(resolved)
        signing = self.urls.signer.state(self.config.server.signing.install_ttl)
        checkin = self.urls.signer.state(self.config.server.signing.chain_ttl) if profile.checkin else None
        # One cache slot per node and version, so clients of different versions do not evict each other.
        return self._stubs.get(f"{node} {version}", StubInputs(node, version, None if pinned is None else pinned[1],
                                                               signing, self._ca_pem(), checkin, family))

    def _render_stub(self, inputs: StubInputs) -> bytes:
        node = inputs.node
        urls = self.urls.for_family(inputs.family)
        return encode(build_stub(
            version=inputs.version,
            hostname=self.config.node_hostname(node),
            config_url=None if inputs.config_hash is None else urls.real_config(node),
            config_hash=inputs.config_hash,
            ca_pem=inputs.ca_pem,
            checkin_url=None if inputs.checkin is None else urls.checkin(node),
        ))
