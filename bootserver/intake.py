"""The discovery intake: what ``/boot.ipxe`` answers a machine that matches no node while
``server.discovery`` is on, and the reports such machines send (``GET /discover``), recorded in the
state store for ``bootserver nodes discovered`` and the live page (docs/design.md, "Discovery").

One :class:`DiscoveryIntake` per server process, over its :class:`~bootserver.runtime.Runtime`: it
outlives reloads (its per-address rate limit and its log window must), and reads the config each
call is made for.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping

from .config import Config
from .discovery import NICS, Discovered, read_report
from .grub import render_grub_discovery
from .inventory import inventory
from .ipxe import render_discovery_script
from .runtime import Runtime
from .values import normalize_mac

log = logging.getLogger("bootserver.service")

#: Client addresses (and logged MACs) a process remembers for discovery reports at most.
REPORTERS_KEPT = 10_000
#: Newly discovered machines logged one by one per minute at most (per process).
DISCOVERY_LOG_LINES = 20


class DiscoveryIntake:
    """Discovery scripts and reports for one server process over ``runtime`` (its state store and
    observers: every recorded report is told to them as a
    :data:`~bootserver.timeline.DISCOVERED` event)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        #: client address -> monotonic time of its last recorded report (``server.discovery.per_address``),
        #: and the MACs this process logged a report of already (one info line per machine).
        self._reported: dict[str, float] = {}
        self._logged: set[str] = set()
        #: (MAC, address) pairs this process warned of as a conflict already (one warning each).
        self._conflicts: set[tuple[str, str]] = set()
        #: the discovery log's minute: (its monotonic start, lines logged, lines left out)
        self._log_window: tuple[float, int, int] = (0.0, 0, 0)

    def script(self, config: Config, mac: str | None, *, grub: bool = False) -> str:
        """What ``/boot.ipxe`` answers a machine that matches no node under ``config`` while its
        ``server.discovery`` is on (:func:`~bootserver.ipxe.render_discovery_script`): report, wait
        ``server.discovery.every`` seconds, ask again; with ``grub``, what ``/boot.grub`` answers, in
        GRUB's form (:func:`~bootserver.grub.render_grub_discovery`, on the IPv4 base URL). ``mac``: the
        request's ``mac`` (used when it is one, else the machine's own). Raises ``GrubUnsupported`` (a
        base URL GRUB cannot fetch)."""
        try:
            word = normalize_mac(mac) if mac else None
        except ValueError:
            word = None
        every = config.server.discovery.every
        if grub:
            # GRUB fetches over IPv4 (or a host name) only: its base URL, whichever is listed first
            return render_grub_discovery(mac=word, every=every, base_url=config.server.base_url_for(4))
        return render_discovery_script(mac=word, every=every, nics=NICS)

    async def report(self, config: Config, query: Mapping[str, str], client: str | None,
                     at: float | None = None) -> bool:
        """Record a machine's report (``GET /discover``, its query decoded: :func:`~bootserver.discovery.
        read_report`) from address ``client`` at unix time ``at`` (default now) under ``config``; returns
        whether it was recorded. Not recorded, answered alike: a MAC or UUID of a configured node (the
        answer must not tell which are), and a report less than ``server.discovery.per_address`` seconds
        after the last one recorded from that address (in this process). A MAC reported from a second
        address is a conflict (:func:`~bootserver.discovery.merged` keeps both; adopting it then needs
        ``--addresses``): one warning per MAC and address, within the discovery log's bound. Raises
        :class:`~bootserver.discovery.ReportError` (no valid mac), ``UnavailableError`` (store)."""
        settings = config.server.discovery
        mac, uuid, facts = read_report(query)
        nodes = inventory(config)
        if nodes.by_mac(mac) is not None or (uuid is not None and nodes.by_uuid(uuid)):
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
        record = await self.runtime.state.discover(Discovered(mac, uuid, facts, client, at, at), settings.keep)
        if mac not in self._logged and len(self._logged) < REPORTERS_KEPT:
            self._logged.add(mac)
            self._log_discovered(now, mac, uuid, client, facts)
        if record.conflict and (mac, key) not in self._conflicts and len(self._conflicts) < REPORTERS_KEPT:
            self._conflicts.add((mac, key))
            self._log_conflict(now, record)
        self.runtime.discovered(mac, at)
        return True

    def _log_discovered(self, now: float, mac: str, uuid: str | None, client: str | None,
                        facts: Mapping[str, str]) -> None:
        """One info line per newly discovered machine, within :meth:`_bounded`."""
        if self._bounded(now):
            # every value as a JSON string: quotes, newlines and control characters escaped (one line)
            log.info("discovered machine %s (uuid %s) from %s: %s; adopt it with `bootserver nodes adopt %s "
                     "--name NAME --profile PROFILE`", mac, uuid or "-", json.dumps(client), json.dumps(facts),
                     mac)

    def _log_conflict(self, now: float, record: Discovered) -> None:
        """The warning that ``record``'s MAC was reported from more than one address, within :meth:`_bounded`."""
        if self._bounded(now):
            log.warning("discovered machine %s reported from %d addresses (%s): two machines claim this MAC, or "
                        "it moved; its facts are those of its first reports; `bootserver nodes adopt %s` needs "
                        "--addresses naming the one to trust", record.mac, len(record.addresses),
                        ", ".join(json.dumps(a) for a in record.addresses), record.mac)

    def _bounded(self, now: float) -> bool:
        """Whether a discovery log line may be written now: at most :data:`DISCOVERY_LOG_LINES` a minute
        (a flood of made-up MACs or addresses must not flood the log: the rest are counted in one line)."""
        window, lines, skipped = self._log_window
        if now - window >= 60:
            if skipped:
                log.info("%d more discovery lines in the last minute (not logged one by one; "
                         "`bootserver nodes discovered` lists the machines)", skipped)
            window, lines, skipped = now, 0, 0
        fits = lines < DISCOVERY_LOG_LINES
        self._log_window = (window, lines + fits, skipped + (not fits))
        return fits
