"""The config a running ``serve`` answers with, and its live reload: :class:`Loaded` (one loaded config
and what serves it), :class:`Running` (the one served now, replaced in one step by a reload over the same
:class:`~bootserver.runtime.Runtime`) and the request keys the front sets from it (``request[LOADED]``,
``request[RESOLVED]``). docs/design.md, "Runtime".
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from aiohttp import web

from .. import reload
from ..config import Config, ResolvedNode
from ..config.loader import with_store_nodes
from ..desk import ArtifactDesk
from ..errors import BootserverError
from ..intake import DiscoveryIntake
from ..inventory import carry_over
from ..metrics import Metrics
from ..node_writes import POLL, StoreNodes
from ..runtime import Runtime
from ..service import BootService
from . import page
from .gate import Gate

log = logging.getLogger("bootserver.web")


@dataclass(frozen=True)
class Loaded:
    """One loaded config of a running server and what serves it: the service, its artifact desk, the
    request-level checks (also the one resolution of a request's client address, ``Gate.client``) and
    the unix time it was loaded. A request is answered by the one that was current when it came
    (``request[LOADED]``)."""

    svc: BootService
    desk: ArtifactDesk
    gate: Gate
    at: float

    @classmethod
    def load(cls, config: Config, runtime: Runtime, at: float) -> Loaded:
        """What serves ``config`` over ``runtime``, loaded at unix time ``at``."""
        svc = BootService(config, runtime)
        return cls(svc, svc.desk, Gate(config, runtime.check_signature), at)


#: What answers this request (:class:`Loaded`), set by :func:`front`.
LOADED = web.RequestKey("loaded", Loaded)
#: The node the request concerns, resolved once by :func:`front` (:class:`~bootserver.config.ResolvedNode`)
#: and passed down to the service; ``request[NODE]`` holds its name for the access log.
RESOLVED = web.RequestKey("resolved", ResolvedNode)


class Running:
    """The config a server serves now (:attr:`current`), which :meth:`reload` replaces in one step.

    Requests in flight finish on the :class:`Loaded` they started with (:func:`front` hands it to the
    handler); what outlives a config (the :class:`~bootserver.runtime.Runtime`: state store, upstream,
    downloads in flight, metrics, observers such as the live page's listeners) carries over. One reload
    runs at a time; more signals meanwhile make one more.

    The store watch (:meth:`watch_store`, started with the application) keeps the state store's nodes
    served without a reload: every :data:`~bootserver.node_writes.POLL` seconds it reads the store's
    revision (one row), and on a change the nodes that changed; the config of the files
    (:attr:`files`) with the store's nodes is then swapped in as a reload does (:meth:`swap`), so a
    store write is served by every worker of every replica within about a second; requests and
    transfers in flight finish on the config they started with."""

    def __init__(self, loaded: Loaded, runtime: Runtime, metrics: Metrics, live: page.Page) -> None:
        self.current = loaded
        self.runtime = runtime
        #: The config of the files alone (the running one without its store nodes): what a store change
        #: is merged into.
        self.files = with_store_nodes(runtime.config, {})
        #: The state store's nodes as this process last read them.
        self.store_nodes = StoreNodes()
        self._watch: asyncio.Task[None] | None = None
        self._skipped: set[str] = set()
        #: Discovered machines' scripts and reports (outlives reloads, as its rate limit must).
        self.intake = DiscoveryIntake(runtime)
        self.metrics = metrics
        self.page = live
        self._lock = asyncio.Lock()
        metrics.config_loaded.set(loaded.at)

    def swap(self, config: Config) -> Loaded:
        """Serve ``config`` (loaded and checked, its restart-only keys the running ones) from now on; a
        stream whose metadata source changed is loaded in the background (:func:`follow_streams`)."""
        before = self.current
        self.runtime.follow(config)
        loaded = Loaded.load(config, self.runtime, time.time())
        self.page.use(loaded.svc, loaded.at)
        self.current = loaded
        self.runtime.spawn(follow_streams(before.desk, loaded.desk))
        return loaded

    def start_watch(self) -> None:
        """Start :meth:`watch_store` (on the event loop; :meth:`close` stops it)."""
        if self._watch is None:
            self._watch = asyncio.create_task(self.watch_store())

    async def watch_store(self) -> None:
        """Follow the state store's nodes until cancelled (see the class docstring). A store that cannot
        answer is one warning line (and one when it answers again); the running config stays meanwhile."""
        failing = False
        while True:
            try:
                await self.follow_store()
                if failing:
                    log.info("store watch: the state store answers again")
                failing = False
            except Exception as e:  # the store away (UnavailableError), or a bug: the running config stays
                if not failing:
                    log.warning("store watch: the state store's nodes cannot be read, the running config "
                                "stays: %s", e, exc_info=not isinstance(e, BootserverError))
                failing = True
            await asyncio.sleep(POLL)

    async def follow_store(self) -> bool:
        """One step of the store watch: read what changed in the store's nodes and, when something did,
        serve the files' config with them; returns whether it swapped. A node that fails this config's
        checks (its profile is not in this replica's config, say) is left out with one error line. Raises
        ``UnavailableError``."""
        nodes = self.store_nodes
        first = nodes.revision < 0
        if first:
            await nodes.load(self.runtime.state)
            changed: set[str] | None = None
        else:
            changed = await nodes.refresh(self.runtime.state)
            if not changed:
                return False
        async with self._lock:
            config, skipped = nodes.merged(self.files, strict=False, written=changed)
            for line in skipped:
                if line not in self._skipped:
                    log.error("%s", line)
            self._skipped = set(skipped)
            if first and config.nodes == self.runtime.config.nodes:
                return False
            before = self.runtime.config.nodes
            if changed is not None:  # the other nodes keep their resolution (10,000 store nodes: 0.6 s)
                carry_over(config, self.runtime.config, changed)
            loaded = self.swap(config)
            now = config.nodes
            made = sorted(n for n in now if n not in before)
            gone = sorted(n for n in before if n not in now)
            updated = sorted(n for n in (changed or now) if n in now and n in before and now[n] != before[n])
            log.info("store nodes: %s; serving %d nodes", "; ".join(
                f"{what} {', '.join(names[:10])}{' ...' if len(names) > 10 else ''}"
                for what, names in (("created", made), ("updated", updated), ("deleted", gone)) if names)
                or "none changed", len(now))
            self.metrics.config_loaded.set(loaded.at)
            return True

    async def reload(self) -> bool:
        """Read the config file again (with its includes), check it as ``check-config`` does and serve it
        (:mod:`bootserver.reload`); returns whether it serves now. An invalid config is one error line
        naming the file and key, and the running config stays; changed restart-only keys are one
        warning line. Counted in ``bootserver_config_reloads_total{result}`` and recorded in
        ``state_dir/reload.json``."""
        async with self._lock:
            running = self.runtime.config
            try:
                files = await asyncio.to_thread(reload.load_checked, running.source)
                # the store's nodes as last read; a file that now names one of them refuses the reload
                config, skipped = self.store_nodes.merged(files, strict=True)
            except Exception as e:  # an invalid config (ConfigError), or a bug: the running config stays
                message = str(e) if isinstance(e, BootserverError) else f"{type(e).__name__}: {e}"
                log.error("reload refused; the config loaded at %s keeps serving: %s",
                          time.strftime("%H:%M:%S", time.localtime(self.current.at)), message,
                          exc_info=not isinstance(e, BootserverError))
                self.metrics.config_reloaded(False, self.current.at)
                await asyncio.to_thread(reload.write_status, running, ok=False, message=message,
                                        loaded_at=self.current.at)
                return False
            config, changed = reload.keep_running(running, config)
            self.files, _ = reload.keep_running(running, files)
            for line in skipped:
                log.error("%s", line)
            if changed:
                log.warning("%s", reload.restart_warning(changed))
            loaded = self.swap(config)
            message = reload.summary(config)
            log.info("reloaded %s", message)
            self.metrics.config_reloaded(True, loaded.at)
            await asyncio.to_thread(reload.write_status, running, ok=True, message=message, loaded_at=loaded.at,
                                    nodes=config.nodes)
            return True

    async def close(self) -> None:
        """Stop the store watch; close what every loaded config shared
        (:meth:`bootserver.runtime.Runtime.close`)."""
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
            self._watch = None
        await self.runtime.close()


async def follow_streams(before: ArtifactDesk, after: ArtifactDesk) -> None:
    """After a reload from ``before``'s config to ``after``'s: load the metadata of every stream whose
    source (``streams.<s>.metadata``) changed or is new, and log one line per stream whose current
    release changed (``reload: stream S serves release R (was Q)``). Failures are logged, never raised."""
    old = before.config.streams
    for name, spec in after.config.streams.items():
        if name in old and old[name].metadata == spec.metadata:
            continue
        was = None
        try:
            meta = before.catalog.cached(name) if name in old else None
            was = None if meta is None else {a: r.version for a, r in meta.releases.items()}
        except BootserverError:
            pass
        try:
            now = {a: r.version for a, r in (await after.catalog.get(name)).releases.items()}
        except BootserverError as e:
            log.warning("reload: stream %s: metadata of %s not loaded: %s", name, spec.metadata, e)
            continue
        if now != was:
            log.info("reload: stream %s serves release %s (was %s)", name,
                     ", ".join(f"{v} ({a})" for a, v in sorted(now.items())),
                     "none" if not was else ", ".join(f"{v} ({a})" for a, v in sorted(was.items())))


#: The running config of both applications (:class:`Running`).
RUNNING = web.AppKey("running", Running)
