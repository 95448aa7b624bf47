"""The boot service: what one loaded config means, behind every endpoint and every ``render`` command.

One :class:`BootService` per config: the nodes resolved once, the URL builder, the render caches, the
real-config reader and the :class:`~bootserver.desk.ArtifactDesk` (artifacts, loaders, the cache); over
the :class:`~bootserver.runtime.Runtime` that outlives reloads (state store, upstream and downloads,
signer, metrics, observers). Handlers and CLI commands call one method each, so the server and
``bootserver render`` can never disagree.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from .butane import ButaneError
from .config import IGNITION_VERSIONS, Config, ResolvedNode
from .desk import ArtifactDesk
from .errors import UnavailableError
from .fleet import FleetNode, read_fleet
from .grub import render_grub_config, render_grub_localboot
from .ignition import NotAcceptableError, RealConfigs, StubTemplate, negotiate_version, stub_versions
from .images.netboot import node_image
from .images.overlay import NodeImage
from .images.secureboot import check_secure_boot, secureboot_image
from .inventory import Inventory, inventory
from .ipxe import render_boot_script, render_localboot_script
from .network import client_family, family_kargs, node_kargs
from .renders import RenderCache, ScriptInputs, StubInputs
from .runtime import Runtime
from .scripts import script_context
from .streams import Release, StreamMetadata
from .timeline import INSTALLED_STAGES, Current, Event, NodeState
from .urls import Urls

log = logging.getLogger("bootserver.service")


def boot_how(resolved: ResolvedNode, via: str, family: int | None) -> dict[str, str]:
    """How a node's boot reached its script, for its timeline event: ``via`` (``ipxe``: iPXE, from PXE or
    UEFI HTTP Boot; ``image``: the GRUB of its boot image; ``grub``: a GRUB sourcing the generic entry,
    the arm64 GRUB or a vendor's signed one), ``ip`` (``IPv4``, ``IPv6``) and ``secure_boot`` as far as
    the server can tell: ``off`` when the loader that asked is ours (nobody signed iPXE or our GRUBs,
    so the firmware does not enforce Secure Boot), ``vendor`` when a ``secure_boot`` node's GRUB asked
    (the vendor's signed chain: Secure Boot may be on)."""
    how = {"via": via}
    if family is not None:
        how["ip"] = f"IPv{family}"
    how["secure_boot"] = "vendor" if via == "grub" and resolved.secure_boot and resolved.arch == "x86_64" else "off"
    return how


@dataclass(frozen=True, slots=True)
class ScriptAnswer:
    """A node's last recorded script answer (:meth:`BootService.script`) and what it was made from: the
    node as read (``current``), ``how`` it asked (``(grub, address family, via)``), the stream metadata
    and signing state it was rendered with; its ``event`` (``script``/``localboot``), ``script`` (text)
    and the event's ``detail``. A request whose inputs are all the same reuses it whole."""

    current: Current
    how: tuple[bool, int | None, str]
    meta: StreamMetadata
    signing: tuple[int, bytes]
    event: str
    script: str
    detail: dict[str, Any]


class NetworkKargs(NamedTuple):
    """A node's network kargs (:func:`~bootserver.network.node_kargs`) and the device record they were
    built from (``None``: none)."""

    device: Mapping[str, Any] | None
    kargs: tuple[str, ...]


class StubKey(NamedTuple):
    """What a stub template (:class:`~bootserver.ignition.StubTemplate`) is shared by: the spec
    ``version``, the real config's hash (``None``: none), the CA (PEM) and whether it checks in."""

    version: str
    config_hash: str | None
    ca_pem: bytes | None
    checkin: bool


class BootService:
    """What one loaded :class:`~bootserver.config.Config` means, over a :class:`~bootserver.runtime.Runtime`."""

    def __init__(self, config: Config, runtime: Runtime) -> None:
        """``runtime`` holds what outlives this config (a reload makes a new service over the same
        runtime; the one serving until then keeps answering the requests that started on it)."""
        self.config = config
        self.runtime = runtime
        #: Every configured node resolved once (:class:`~bootserver.inventory.Inventory`): what a request
        #: carries down, what the page, ``render`` and the desk take.
        self.inventory: Inventory = inventory(config)
        self._nodes = self.inventory
        #: Artifacts, loaders and what the cache holds, for this config (its streams, ``read_through``).
        self.desk = ArtifactDesk(config, runtime, self._nodes)
        self.urls = Urls(config, lambda: runtime.signer)
        self.real_configs = RealConfigs()
        self._scripts: RenderCache[ScriptInputs, str] = RenderCache(self._render_script)
        self._grub_configs: RenderCache[ScriptInputs, str] = RenderCache(self._render_grub_config)
        self._stubs: RenderCache[StubInputs, bytes] = RenderCache(self._render_stub)
        #: The stub every node of one version, real config, CA and check-in shares.
        self._stub_templates: dict[StubKey, StubTemplate] = {}
        #: profile -> its real config's file (see :meth:`_config_path`).
        self._config_paths: dict[str, Path | None] = {}
        #: node -> its last recorded script answer and what it was made from (:meth:`script`).
        self._answered: dict[str, ScriptAnswer] = {}
        #: node -> its network kargs and the device record they were built from (see :meth:`_network`).
        self._kargs: dict[str, NetworkKargs] = {}

    def node(self, name: str) -> ResolvedNode:
        """Configured node ``name`` as resolved once for this config (:class:`~bootserver.config.ResolvedNode`),
        what a request carries down from the front. Raises ``KeyError`` for a name that is not a node
        (:meth:`bootserver.inventory.Inventory.find` first)."""
        return self._nodes[name]

    async def script(self, node: ResolvedNode | str, *, grub: bool = False, client: str | None = None,
                     record: bool = False, via: str | None = None) -> str:
        """The node's iPXE script (text): the boot script, or with boot-once the boot-disk script once
        the node is installed; in GRUB's form with ``grub`` (``GET /grub/<node>``, the UEFI boot of the
        node's boot image and the arm64 GRUB): the same boot (kernel, initramfs, kargs), the same
        boot-once rule. With ``record`` (what the server answers a request from address ``client``),
        records ``script`` or ``localboot`` in the timeline: one read of the node
        (:meth:`StateStore.current`); a repeat of the node's last event is written behind, anything new
        before the answer. Without, records nothing (``render``, the live page). ``node`` must be a
        configured node, as resolved (:meth:`node`) or by name. ``via`` (``ipxe``, ``image``: the netboot
        image's GRUB, ``grub``: a GRUB sourcing the generic entry) goes into the recorded event with the
        address family and, as far as the server can tell, Secure Boot (:func:`boot_how`).

        Raises :class:`~bootserver.errors.UnavailableError` when the timeline cannot be read or written,
        or ``FetchError``/``MetadataError`` when the stream's metadata must be fetched and cannot be; with
        ``grub``, :class:`~bootserver.grub.GrubUnsupported` when an artifact URL is not plain http.
        """
        resolved = self._resolved(node)
        current = await self.runtime.state.current(resolved.name)
        family = client_family(client)
        if not record:
            return (await self._script(resolved, current, grub=grub, family=family))[1]
        via = via or ("grub" if grub else "ipxe")
        # A repeat of the node's last answer (the same node as read, family, loader, metadata and
        # signing state) reuses it, its event's detail included: no inputs built, compared or rendered.
        meta = self.desk.catalog.cached(resolved.stream)
        signing = self.urls.signer.state(self.config.server.signing.install_ttl)
        how = (grub, family, via)
        answered = self._answered.get(resolved.name)
        if answered is not None and (answered.current is current or answered.current == current) \
                and answered.how == how and answered.meta is meta and answered.signing == signing:
            event, script, detail = answered.event, answered.script, answered.detail
        else:
            event, script, detail = await self._script(resolved, current, grub=grub, family=family)
            if event == "script":
                detail |= boot_how(resolved, via, family)
            if meta is not None:
                self._answered[resolved.name] = ScriptAnswer(current, how, meta, signing, event, script, detail)
        await self.runtime.record(resolved, event, ip=client, detail=detail, current=current)
        return script

    async def _script(self, resolved: ResolvedNode, current: Current, grub: bool = False,
                      family: int | None = None) -> tuple[str, str, dict[str, Any]]:
        """``(event, script, detail)`` for the node as read (``current``: its stage and device record):
        the boot-disk script when boot-once applies, else the boot script; in GRUB's form with ``grub``
        (the boot image's UEFI boot), the same boot either way. ``family``: the address family the
        machine asked over (its URLs' base URL, and ``ip=dhcp6`` for a DHCP node asking over IPv6)."""
        node = resolved.name
        stage = current.stage
        if resolved.boots_once and stage in INSTALLED_STAGES:
            script = render_grub_localboot(node, stage) if grub else render_localboot_script(node, stage)
            return "localboot", script, {"stage": stage}
        catalog = self.desk.catalog
        meta = catalog.cached(resolved.stream)  # the hot path: a copy at hand; else a load waited for briefly
        meta = meta if meta is not None else await self.runtime.metadata.wait(catalog, resolved.stream)
        release = meta.releases[resolved.arch]
        # rendered once per change of its inputs (ScriptInputs), not per request
        signing = self.urls.signer.state(self.config.server.signing.install_ttl)
        inputs = ScriptInputs(node, release, signing, self._network(resolved, current.device, family), family)
        script = self._grub_configs.get(node, inputs) if grub else self._scripts.get(node, inputs)
        return "script", script, {"mode": resolved.mode, "release": release.version}

    def _resolved(self, node: ResolvedNode | str) -> ResolvedNode:
        return node if isinstance(node, ResolvedNode) else self._nodes[node]

    def _network(self, resolved: ResolvedNode, device: Mapping[str, Any] | None,
                 family: int | None = None) -> tuple[str, ...]:
        """The node's network kargs (:func:`~bootserver.network.node_kargs`) for a machine asking over
        ``family`` (:func:`~bootserver.network.family_kargs`), built again only when its device record
        changed. Raises ``DeviceRecordError`` (never kept: the next request tries again)."""
        hit = self._kargs.get(resolved.name)
        if hit is not None and (hit.device is device or hit.device == device):
            return family_kargs(hit.kargs, family)
        kargs = node_kargs(resolved, device)
        self._kargs[resolved.name] = NetworkKargs(device, kargs)
        return family_kargs(kargs, family)

    def _render_script(self, inputs: ScriptInputs) -> str:
        return render_boot_script(script_context(self.urls.for_family(inputs.family), self._nodes[inputs.node],
                                                 inputs.release, inputs.network))

    def _render_grub_config(self, inputs: ScriptInputs) -> str:
        return render_grub_config(script_context(self.urls.for_family(inputs.family), self._nodes[inputs.node],
                                                 inputs.release, inputs.network))

    async def record(self, node: ResolvedNode | str, event: str, *, ip: str | None = None,
                     detail: Mapping[str, Any] | None = None, at: float | None = None) -> str:
        """Record timeline ``event`` of configured node ``node`` (as resolved, or by name) from address
        ``ip`` (at unix time ``at``, default now; :meth:`bootserver.runtime.Runtime.record`); returns the
        node's new stage once committed. Raises :class:`~bootserver.errors.UnavailableError` (HTTP 503)
        when the store cannot be written."""
        return await self.runtime.record(self._resolved(node), event, ip=ip, detail=detail, at=at)

    async def image(self, node: ResolvedNode | str) -> NodeImage:
        """The node's boot image: for a ``secure_boot`` node the Secure Boot one
        (:func:`bootserver.images.secureboot.secureboot_image`; the release's live ISO, kernel and
        initramfs fetched into the cache first, sha256-checked, once however many ask), else the
        netboot one (:func:`bootserver.images.netboot.node_image`); either a base built once and the
        node's region once per node and inputs, in ``cache_dir/iso``, made in a worker thread (a first
        build runs xorriso) so the event loop goes on. Raises as those two, :class:`UnavailableError`
        when the state store (the node's device record, for ``network: provider``) cannot be read, and
        the fetch's errors (``FetchError``, ``IntegrityError``)."""
        resolved = self._resolved(node)
        if not resolved.secure_boot:
            current = await self.runtime.state.current(resolved.name)
            return await asyncio.to_thread(node_image, self.config, self.urls, resolved, current.device)
        release, (iso, kernel, initramfs), kargs = await self.secure_boot_parts(resolved)
        return await asyncio.to_thread(secureboot_image, self.config, self.urls, resolved, release,
                                       iso, kernel, initramfs, kargs)

    async def secure_boot_parts(self, node: ResolvedNode | str) -> tuple[Release, tuple[Path, Path, Path],
                                                                         tuple[str, ...]]:
        """What a ``secure_boot`` node boots, from its image or over the network (``bootserver loaders``):
        its release, the cached live ISO, kernel and initramfs (fetched first, sha256-checked) and its
        kargs with the stub URL signed for ``chain_ttl`` (they are written to disk). Raises as :meth:`image`."""
        resolved = self._resolved(node)
        current = await self.runtime.state.current(resolved.name)
        release = await self.desk.catalog.release(resolved.stream, resolved.arch)
        check_secure_boot(resolved.name, release)
        assert release.live_iso is not None
        fetched = await asyncio.gather(*(self.desk.artifacts.fetch(release, a)
                                         for a in (release.live_iso, release.kernel, release.initramfs)))
        ctx = script_context(self.urls, resolved, release, self._network(resolved, current.device),
                             stub_ttl=self.config.server.signing.chain_ttl)
        iso, kernel, initramfs = (f.path for f in fetched)
        return release, (iso, kernel, initramfs), ctx.kargs

    async def fleet(self, *, devices: bool = False) -> list[FleetNode]:
        """The fleet view (:func:`bootserver.fleet.read_fleet`: every configured node and any other with
        events; with ``devices``, their device records) once this process's background writes are in.
        Raises :class:`UnavailableError`."""
        await self.runtime.drain()
        return await read_fleet(self.config, self.runtime.state, devices=devices)

    async def history(self, node: str, limit: int | None = None) -> tuple[NodeState, list[Event]]:
        """Node ``node``'s timeline state and its events, oldest first (``limit``: the last N), once this
        process's background writes are in. Raises :class:`UnavailableError`."""
        await self.runtime.drain()
        state = self.runtime.state
        events = await state.events(node, limit=limit)
        return await state.node(node), events

    def chain_url(self, node: str) -> str:
        """The node's signed chain URL (:meth:`bootserver.urls.Urls.chain`)."""
        return self.urls.chain(node)

    async def readiness(self) -> tuple[bool, dict[str, Any]]:
        """``(ready, report)`` of ``GET /readyz``: ready when every profile's stream metadata is loaded
        (scripts can be answered), every artifact it names is cached or read-through is on
        (:meth:`ArtifactDesk.readiness <bootserver.desk.ArtifactDesk.readiness>`), and the state store
        answers (``state_store``: ``{"backend": "sqlite"|"postgresql", "ready": bool}``; why not goes
        to the log). Never blocks on the network."""
        ready, report = self.desk.readiness()
        state = self.runtime.state
        problem = await state.ready()
        if problem is not None:
            log.warning("readyz: %s", problem)
        ready = ready and problem is None
        return ready, {**report, "state_store": {"backend": state.backend, "ready": problem is None},
                       "ready": ready}

    async def real_config(self, node: ResolvedNode | str, *, client: str | None = None,
                          record: bool = False) -> bytes | None:
        """The node's real Ignition config bytes, or ``None`` when its profile has none; with ``record``
        (the server's answer to address ``client``), records ``config`` when there is one.

        Raises :class:`~bootserver.errors.UnavailableError` when the file cannot be read (or, for a
        Butane config, translated) now, or the event cannot be recorded.
        """
        resolved = self._resolved(node)
        pinned = self._real_config_pinned(resolved)
        if pinned is None:
            return None
        if record:
            await self.runtime.record(resolved, "config", ip=client)
        return pinned[0]

    def _real_config_pinned(self, resolved: ResolvedNode) -> tuple[bytes, str] | None:
        """``(bytes, sha512 hash)`` of the node's real config, or ``None``. Raises as :meth:`real_config`."""
        node, name = resolved.name, resolved.profile
        try:
            path = self._config_paths[name]
        except KeyError:
            path = self._config_paths[name] = self._config_path(resolved.ignition)
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

    def _config_path(self, ignition: str | None) -> Path | None:
        """A profile's real config file ``ignition`` (as written; what
        :meth:`~bootserver.config.Config.ignition_path` resolves) as joined, not resolved: kept per
        profile, its links still followed at each read (a resolve per stub and config request cost tens
        of us of a cold boot, issue 40)."""
        return None if ignition is None else self.config.base_dir / os.path.expanduser(ignition)

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

    async def stub(self, node: ResolvedNode | str, *, version: str | None = None, accept: str | None = None,
                   client: str | None = None, record: bool = False) -> bytes:
        """The node's merge-style Ignition stub, as the exact bytes served: in spec ``version`` (default:
        the profile's ``ignition_version``), or with ``accept`` (the client's ``Accept`` header) in the
        version negotiated with it (:func:`~bootserver.ignition.negotiate_version`); with ``record`` (the
        server's answer to address ``client``), records ``stub`` in the timeline.

        Its merge URL is signed with an expiry rounded up to the hour, so ``render ignition`` and the
        server print the same bytes within the same hour (same clock, same code path).

        Raises :class:`~bootserver.ignition.NotAcceptableError` (HTTP 406, nothing recorded) when the
        version is not a stub version (3.1.0 or newer) up to the profile's ``ignition_version``, or the
        client accepts none; :class:`~bootserver.errors.UnavailableError` as :meth:`real_config`.
        """
        resolved = self._resolved(node)
        if accept is not None:
            version = negotiate_version(accept, resolved.ignition_version, IGNITION_VERSIONS)
        data = self._stub(resolved, version, client_family(client))
        if record:
            await self.runtime.record(resolved, "stub", ip=client)
        return data

    def _stub(self, resolved: ResolvedNode, version: str | None, family: int | None = None) -> bytes:
        """:meth:`stub` for the node as resolved, its URLs on the base URL of address family ``family``."""
        node, name = resolved.name, resolved.profile
        maximum = resolved.ignition_version
        if version is None:
            version = maximum
        elif version not in stub_versions(maximum, IGNITION_VERSIONS):
            raise NotAcceptableError(
                f"node {node}: Ignition spec {version} is not one its stub can be written in: profile "
                f"{name} allows 3.1.0 to {maximum} (profiles.{name}.ignition_version)")
        pinned = self._real_config_pinned(resolved)
        signing = self.urls.signer.state(self.config.server.signing.install_ttl)
        checkin = self.urls.signer.state(self.config.server.signing.chain_ttl) if resolved.checkin else None
        # One cache slot per node and version, so clients of different versions do not evict each other.
        return self._stubs.get(f"{node} {version}", StubInputs(node, version, None if pinned is None else pinned[1],
                                                               signing, self._ca_pem(), checkin, family))

    def _render_stub(self, inputs: StubInputs) -> bytes:
        """The node's stub: its profile's stub, encoded once per version, real config, CA and check-in
        (:class:`~bootserver.ignition.StubTemplate`), with the node's hostname and URLs written in."""
        node = inputs.node
        urls = self.urls.for_family(inputs.family)
        key = StubKey(inputs.version, inputs.config_hash, inputs.ca_pem, inputs.checkin is not None)
        template = self._stub_templates.get(key)
        if template is None:
            template = self._stub_templates[key] = StubTemplate(
                version=inputs.version, config_hash=inputs.config_hash, ca_pem=inputs.ca_pem,
                checkin=inputs.checkin is not None)
        return template.fill(hostname=self._nodes[node].hostname,
                             config_url=None if inputs.config_hash is None else urls.real_config(node),
                             checkin_url=None if inputs.checkin is None else urls.checkin(node))
