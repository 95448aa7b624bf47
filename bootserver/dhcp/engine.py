"""``bootserver dhcp``: dnsmasq as the DHCP and TFTP engine of the provisioning network, run in the
foreground as our child, its files written from the config, its log relayed into ours and onto the
node timeline, its reservations kept live across reloads.

**Start** (:func:`run_engine`): the ``dhcp:`` checks (:func:`~bootserver.dhcp.reservations.check_dhcp`,
against the interface as it is now), the files under ``state_dir/dhcp/`` (:mod:`bootserver.dhcp.dnsmasq`;
the TFTP root gets ``bootserver loaders``' files and ``proxy`` mode's PXE menu files), then dnsmasq
(``--keep-in-foreground``, its own options file only, no ``/etc/dnsmasq.conf``, no DNS, bound to
``dhcp.interface`` alone, as the user bootserver runs as). It is up once it logs ``started``; when it
exits before that, its last line becomes ours, naming the key at fault (``dhcp.interface`` for an
unknown interface or a port in use), exit 2 (config) or 1.

**Its log** (stderr) goes into ours line by line under the logger ``bootserver.dnsmasq`` (escaped by
:class:`bootserver.logs.TextFormatter`, like every line; ``log-dhcp``'s detail lines at debug). The
first mile goes onto the timeline (:class:`FirstMile`): ``DHCPACK`` (``full``) or a ``PXE`` answer
(``proxy``) of a node's MAC is a ``dhcp`` event (address, boot file), a TFTP ``sent`` to that address a
``tftp`` event (file), written to the state store of the config like any other event.

**Reload** (``SIGHUP``; ``bootserver reload`` and ``nodes adopt`` send it to the process in
``state_dir/dhcp/engine.pid`` too, and the systemd unit follows the server's reload): the config is read
again and checked; an invalid one is one error line and the running one stays. The reservations are
rewritten (``hosts/nodes``, ``opts/nodes``), which dnsmasq re-reads by itself: no restart, no lease lost.
Only a change of dnsmasq's own options (``dhcp:`` keys, ``server.base_url``, the ``secure_boot`` nodes and
their MACs: :func:`~bootserver.dhcp.dnsmasq.secure_boot_lines`) restarts it (its lease file keeps the
leases). The log line says how many reservations changed.

**Stop**: ``SIGTERM`` or ``SIGINT`` stop dnsmasq (``SIGTERM``, ``SIGKILL`` after 5 s) and return 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import grp
import ipaddress
import json
import logging
import os
import pwd
import re
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import Config, load_config
from ..errors import BootserverError, ConfigError, InputError
from ..files import write_atomic
from ..images.firmware import write_loaders
from ..state import StateStore, StateStoreError
from ..state.backends import open_store
from ..timeline import Record
from ..values import host_family
from .dnsmasq import DNSMASQ, Layout, conf_text, layout, write_reservations
from .iface import NoInterface, interface_addresses
from .reservations import Reservation, check_dhcp, subnet_of, unselectable
from .rules import menu_files, menu_script, secure_boot_unlisted

log = logging.getLogger("bootserver.dhcp")
relay = logging.getLogger("bootserver.dnsmasq")

#: ``state_dir/dhcp/engine.pid``: the process id of the running ``bootserver dhcp``.
PID_FILE = "engine.pid"
#: ``state_dir/dhcp/reload.json``: the outcome of the engine's last reload (:func:`wait_engine_status`).
STATUS_FILE = "reload.json"

#: Seconds dnsmasq has to say ``started`` (or fail) before ``bootserver dhcp`` gives up.
START_TIMEOUT = 15.0
#: Seconds dnsmasq has to exit after SIGTERM before it is killed.
STOP_TIMEOUT = 5.0


class EngineError(BootserverError):
    """dnsmasq refused to start or died (exit 1); the message names the key at fault where one is."""


@dataclass(frozen=True)
class Prepared:
    """What one config gives the engine: the files (``files``), the subnet (``None`` when the interface
    has no IPv4 address), the reservations (``taken``) and dnsmasq's options text (``conf``)."""

    files: Layout
    subnet: ipaddress.IPv4Network | None
    taken: tuple[Reservation, ...]
    conf: str


def prepare(config: Config) -> Prepared:
    """Check ``config``'s ``dhcp:`` against this machine and compute the engine's files (nothing written).
    Raises :class:`~bootserver.errors.ConfigError` (no ``dhcp:``, or as
    :func:`~bootserver.dhcp.reservations.check_dhcp`)."""
    if config.dhcp is None:
        raise ConfigError(config.source, "dhcp", "not set: add a dhcp: mapping with the interface "
                          "(docs/config.md) to run the DHCP engine")
    taken = check_dhcp(config, local=True)
    try:
        found = interface_addresses(config.dhcp.interface)
    except NoInterface:
        found = None
    subnet = subnet_of(config, found, taken)
    if subnet is None:
        raise ConfigError(config.source, "dhcp.interface", f"{config.dhcp.interface} has no IPv4 address; "
                          "dnsmasq answers on the interface's subnet")
    files = layout(config)
    return Prepared(files, subnet, taken, conf_text(config, subnet, files))


def write_tftp_root(config: Config, files: Layout) -> None:
    """Fill the TFTP root: ``bootserver loaders``' files (:func:`~bootserver.images.firmware.write_loaders`)
    and, for ``proxy`` mode's PXE menu, copies of them under the menu's names and the iPXE script that
    chains the generic entry (:func:`~bootserver.dhcp.rules.menu_files`)."""
    arm64 = any(profile.arch == "aarch64" for profile in config.profiles.values())
    written = {p.name: p for p in write_loaders(files.tftp_root, config.cache_dir,
                                                config.server.base_url_for(4), need_arm64=arm64)}
    for name, source in menu_files(config).items():
        if source is None:
            write_atomic(files.tftp_root / name, menu_script(config).encode())
        elif source in written:
            write_atomic(files.tftp_root / name, written[source].read_bytes())


def write_files(config: Config, prepared: Prepared) -> None:
    """Write ``dnsmasq.conf``, the reservations and the TFTP root of ``prepared`` (each file whole)."""
    files = prepared.files
    files.root.mkdir(parents=True, exist_ok=True)
    write_atomic(files.conf, prepared.conf.encode())
    write_reservations(config, files, prepared.taken)
    write_tftp_root(config, files)


def dnsmasq_argv(files: Layout) -> list[str]:
    """dnsmasq's command line: in the foreground, our options file alone (``--conf-file`` keeps
    ``/etc/dnsmasq.conf`` out), no ``/etc/hosts`` or ``resolv.conf``, its pid file beside its files, and
    the user and group bootserver runs as (dnsmasq would otherwise switch to ``nobody``, who cannot read
    ``state_dir``). Raises :class:`EngineError` when dnsmasq is not installed."""
    program = shutil.which(DNSMASQ) or next((p for p in ("/usr/sbin/dnsmasq", "/sbin/dnsmasq") if os.path.exists(p)),
                                            None)
    if program is None:
        raise EngineError("dnsmasq is not installed (Debian: apt-get install dnsmasq-base)")
    user = pwd.getpwuid(os.geteuid()).pw_name
    group = grp.getgrgid(os.getegid()).gr_name
    return [program, "--keep-in-foreground", f"--conf-file={files.conf}", f"--pid-file={files.root / 'dnsmasq.pid'}",
            "--no-resolv", "--no-hosts", f"--user={user}", f"--group={group}"]


_LINE = re.compile(r"^(?P<prog>dnsmasq(?:-dhcp|-tftp)?)(?:\[\d+\])?: (?P<msg>.*)$")


def refusal(config: Config, line: str) -> BootserverError:
    """The one-line error of dnsmasq's last line ``line`` when it exits before it started: naming
    ``dhcp.interface`` for an unknown interface (exit 2) or a port it cannot take (exit 1)."""
    match = _LINE.match(line)
    message = match.group("msg") if match else line
    assert config.dhcp is not None
    iface = config.dhcp.interface
    if "unknown interface" in message:
        return ConfigError(config.source, "dhcp.interface", f"dnsmasq refused to start: {message}")
    if "Address already in use" in message:
        return EngineError(f"{config.source}: dhcp.interface: dnsmasq cannot listen on {iface}: {message} "
                           "(another DHCP or TFTP server runs there)")
    return EngineError(f"{config.source}: dhcp: dnsmasq refused to start: {message or 'no message'}")


# ---------------------------------------------------------------------------------------- the first mile

_MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
_IPV4 = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")
_DHCP = re.compile(r"^(?:(?P<xid>\d+) )?(?P<what>DHCPACK|PXE|DHCPREPLY)\((?P<iface>[^)]*)\)(?P<rest>( \S+)*)$")
#: The boot file of a transaction: in the BOOTP ``file`` field, or in option 67 (``log-dhcp``'s option lines);
#: over DHCPv6 in option 59 (``bootfile-url``).
_BOOTFILE = re.compile(r"^(?P<xid>\d+) (?:bootfile name: |sent size: *\d+ option: *67 bootfile-name +"
                       r"|sent size: *\d+ option: *59 bootfile-url +)(?P<file>\S+)$")
#: The MAC dnsmasq found for a DHCPv6 client (its DUID need not hold one): a line of its own before the reply.
_MAC6 = re.compile(r"^(?P<xid>\d+) client MAC address: (?P<mac>\S+)$")
_TFTP_SENT = re.compile(r"^sent (?P<path>\S+) to (?P<ip>\S+)$")


@dataclass(frozen=True)
class Seen:
    """A first-mile event for the timeline: ``event`` (``dhcp`` or ``tftp``) of the machine with ``mac``,
    from address ``ip`` (or ``None``), with ``detail``; ``at``: when dnsmasq logged it (unix seconds, the
    ``at`` given to :meth:`FirstMile.feed`), or ``None``."""

    mac: str
    event: str
    ip: str | None
    detail: dict[str, Any]
    at: float | None = None


class FirstMile:
    """Reads dnsmasq's log lines (``log-dhcp``) for the first mile of each machine: an answer that
    gave it an address (``DHCPACK``, ``full`` mode; ``DHCPREPLY`` over DHCPv6, the MAC from the
    transaction's ``client MAC address`` line) or a boot file (``PXE``, ``proxy`` mode) is a
    ``dhcp`` event, completed by the ``bootfile name`` line of the same transaction (:meth:`feed`
    returns it when the transaction's lines end: a line of another transaction, or :meth:`flush`);
    a TFTP transfer sent in full to an address a machine was answered at is a ``tftp`` event. Each
    event carries the time of the line that made it (the answer, not the end of its transaction: a
    UEFI HTTP Boot client asks for its loader within milliseconds). Pure: no clock, no I/O."""

    def __init__(self, mode: str, known: dict[str, str] | None = None) -> None:
        self.mode = mode
        self._pending: dict[str, Seen] = {}
        self._by_ip: dict[str, str] = dict(known or {})
        self._mac6: tuple[str, str] | None = None  # (xid, MAC) of the last DHCPv6 client MAC line

    def feed(self, line: str, at: float | None = None) -> list[Seen]:
        """Events completed by dnsmasq's log line ``line`` (as it writes it: ``dnsmasq-dhcp[PID]: ...``),
        read at ``at`` (unix seconds, or ``None``)."""
        match = _LINE.match(line)
        if match is None:
            return []
        prog, msg = match.group("prog"), match.group("msg")
        if prog == "dnsmasq-tftp":
            done = self.flush()
            sent = _TFTP_SENT.match(msg)
            if sent and (mac := self._by_ip.get(sent.group("ip"))) is not None:
                done.append(Seen(mac, "tftp", sent.group("ip"), {"file": os.path.basename(sent.group("path"))}, at))
            return done
        if prog != "dnsmasq-dhcp":
            return []
        boot = _BOOTFILE.match(msg)
        if boot and boot.group("xid") in self._pending:
            seen = self._pending[boot.group("xid")]
            self._pending[boot.group("xid")] = dataclasses.replace(seen, detail={**seen.detail,
                                                                              "file": boot.group("file")})
            return []
        xid = msg.split(" ", 1)[0] if msg[:1].isdigit() else ""
        done = [s for x, s in self._pending.items() if x != xid]
        self._pending = {x: s for x, s in self._pending.items() if x == xid}
        mac6 = _MAC6.match(msg)
        if mac6 and _MAC.match(mac6.group("mac").lower()):
            self._mac6 = (mac6.group("xid"), mac6.group("mac").lower())
        answer = _DHCP.match(msg)
        if answer:
            words = answer.group("rest").split()
            if answer.group("what") == "DHCPREPLY":  # DHCPv6: <address> <DUID> [<name>]
                mac = self._mac6[1] if self._mac6 is not None and self._mac6[0] == answer.group("xid") else None
                ip = words[0] if words and host_family(words[0]) == 6 else None
                if ip is None:
                    return done
            else:
                mac = next((w.lower() for w in words if _MAC.match(w.lower())), None)
                ip = next((w for w in words if _IPV4.match(w)), None)
            if mac is not None:
                detail: dict[str, Any] = {"mode": self.mode}
                if ip is not None:
                    detail["address"] = ip
                    self._by_ip[ip] = mac
                if answer.group("what") == "PXE" and words and words[-1] not in (mac, ip, "proxy"):
                    detail["file"] = words[-1]
                seen = Seen(mac, "dhcp", ip, detail, at)
                if answer.group("xid"):
                    self._pending[answer.group("xid")] = seen
                else:
                    done.append(seen)
        return done

    def flush(self) -> list[Seen]:
        """The events still waiting for more lines of their transaction."""
        done, self._pending = list(self._pending.values()), {}
        return done


# ---------------------------------------------------------------------------------------- the engine


def _reservation_changes(old: tuple[Reservation, ...], new: tuple[Reservation, ...]) -> tuple[int, int, int]:
    before, after = {r.node: r for r in old}, {r.node: r for r in new}
    added = len(after.keys() - before.keys())
    removed = len(before.keys() - after.keys())
    changed = sum(1 for n in after.keys() & before.keys() if after[n] != before[n])
    return added, removed, changed


def write_pid(config: Config) -> Path:
    """Write this process's id into ``state_dir/dhcp/engine.pid``; returns the file."""
    path = layout(config).root / PID_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, f"{os.getpid()}\n".encode())
    return path


def signal_engine(config: Config) -> int | None:
    """Send ``SIGHUP`` to the ``bootserver dhcp`` of ``config``'s ``state_dir`` (its pid file, checked to
    name a live ``bootserver dhcp``); returns its process id, or ``None`` when none runs."""
    path = layout(config).root / PID_FILE
    try:
        pid = int(path.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    if not any(b"bootserver" in word for word in cmdline) or b"dhcp" not in cmdline:
        return None
    try:
        os.kill(pid, signal.SIGHUP)
    except OSError:
        return None
    return pid


def _write_status(files: Layout, *, ok: bool, message: str) -> None:
    doc = {"pid": os.getpid(), "at": time.time(), "result": "ok" if ok else "invalid", "message": message}
    with contextlib.suppress(OSError):
        write_atomic(files.root / STATUS_FILE, json.dumps(doc).encode())


def wait_engine_status(config: Config, after: float, timeout: float) -> dict[str, Any] | None:
    """The engine's first reload outcome recorded at or after unix time ``after`` (``{"pid", "at",
    "result": "ok"|"invalid", "message"}`` from ``state_dir/dhcp/reload.json``), polled every 0.1 s for at
    most ``timeout`` seconds; ``None`` when none came."""
    path = layout(config).root / STATUS_FILE
    end = time.monotonic() + timeout
    while True:
        try:
            doc = json.loads(path.read_bytes())
        except (OSError, ValueError):
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("at"), int | float) and doc["at"] >= after:
            return doc
        if time.monotonic() >= end:
            return None
        time.sleep(0.1)


def reload_engine(config: Config, timeout: float) -> str | None:
    """Signal a running ``bootserver dhcp`` of ``config``'s ``state_dir`` (:func:`signal_engine`) and wait
    up to ``timeout`` seconds for its outcome (:func:`wait_engine_status`); the outcome in words
    (``bootserver dhcp: 13 reservations ...``), or ``None`` without a ``dhcp:`` mapping or an engine.
    What ``nodes adopt`` and ``openshift import`` add to their server's reload."""
    if config.dhcp is None:
        return None
    sent = time.time()
    engine = signal_engine(config)
    if engine is None:
        return None
    status = wait_engine_status(config, sent, timeout)
    if status is None:
        return f"sent SIGHUP to bootserver dhcp (process {engine}), no outcome within {timeout:g} s"
    if status.get("result") != "ok":
        return f"bootserver dhcp refused the reload, no reservation: {status.get('message')}"
    return f"bootserver dhcp: {status.get('message')}"

class Engine:
    """One ``bootserver dhcp`` run: dnsmasq as its child, the relay of its log, reloads. See the module
    docstring; :func:`run_engine` is the entry point."""

    def __init__(self, config: Config, store: StateStore | None) -> None:
        self.config = config
        self.store = store
        self.prepared = prepare(config)
        self.child: asyncio.subprocess.Process | None = None
        self.first_mile = self._first_mile()
        self.lines: asyncio.Queue[str | None] = asyncio.Queue()

    def _first_mile(self) -> FirstMile:
        assert self.config.dhcp is not None
        known = {str(r.ipv4.ip): r.mac for r in self.prepared.taken if r.ipv4 is not None}
        return FirstMile(self.config.dhcp.mode, known)

    async def start(self) -> None:
        """Write the files and start dnsmasq; returns once it logged ``started``. Raises as :func:`refusal`."""
        write_files(self.config, self.prepared)
        self.child = await asyncio.create_subprocess_exec(
            *dnsmasq_argv(self.prepared.files), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        assert self.child.stderr is not None
        last = ""
        end = time.monotonic() + START_TIMEOUT
        while True:
            try:
                raw = await asyncio.wait_for(self.child.stderr.readline(), max(0.1, end - time.monotonic()))
            except TimeoutError:
                await self.stop()
                raise EngineError(f"dnsmasq did not start within {START_TIMEOUT:g} s (last line: {last!r})") from None
            if not raw:
                await self.child.wait()
                raise refusal(self.config, last)
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self._relay(line)
            last = line or last
            if re.match(r"^dnsmasq(\[\d+\])?: started, version", line):
                break
        log.info("dnsmasq (process %d) answers on %s in %s mode: %d reservations, files in %s", self.child.pid,
                 self.config.dhcp.interface if self.config.dhcp else "", self.config.dhcp.mode if self.config.dhcp
                 else "", len(self.prepared.taken), self.prepared.files.root)

    def _relay(self, line: str) -> None:
        match = _LINE.match(line)
        msg = match.group("msg") if match else line
        answer = re.match(r"^\d+ (?:DHCPACK|DHCPOFFER|PXE|DHCPREPLY|DHCPADVERTISE)", msg)
        level = logging.DEBUG if re.match(r"^\d+ ", msg) and not answer else logging.INFO
        relay.log(level, "%s", line)

    async def _record(self, seen: list[Seen]) -> None:
        for s in seen:
            node = self.config.node_by_mac(s.mac)
            if node is None or self.store is None:
                continue
            profile = self.config.node_profile(node)
            try:
                await self.store.record(Record(node, s.event, profile.mode, s.at or time.time(), s.ip, s.detail,
                                               real_config=profile.ignition is not None))
            except (StateStoreError, OSError) as e:
                log.warning("node %s: %s not recorded on the timeline: %s", node, s.event, e)

    async def pump(self) -> None:
        """Relay dnsmasq's lines and record the first mile until its stderr ends."""
        assert self.child is not None and self.child.stderr is not None
        stream = self.child.stderr
        while True:
            try:
                raw = await asyncio.wait_for(stream.readline(), 0.5)
            except TimeoutError:
                await self._record(self.first_mile.flush())
                continue
            if not raw:
                await self._record(self.first_mile.flush())
                return
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self._relay(line)
            await self._record(self.first_mile.feed(line, time.time()))

    async def stop(self) -> None:
        """Stop dnsmasq: SIGTERM, then SIGKILL after :data:`STOP_TIMEOUT` seconds."""
        child, self.child = self.child, None
        if child is None or child.returncode is not None:
            return
        child.terminate()
        try:
            await asyncio.wait_for(child.wait(), STOP_TIMEOUT)
        except TimeoutError:
            child.kill()
            await child.wait()

    async def reload(self) -> bool:
        """Read the config again (see the module docstring); returns whether dnsmasq must be restarted
        (its own options changed). An invalid config is logged and changes nothing."""
        try:
            new = load_config(self.config.source)
            prepared = prepare(new)
        except BootserverError as e:
            log.error("reload refused, the running config stays: %s", e)
            _write_status(self.prepared.files, ok=False, message=str(e))
            return False
        added, removed, changed = _reservation_changes(self.prepared.taken, prepared.taken)
        restart = prepared.conf != self.prepared.conf
        old, self.config, self.prepared = self.prepared, new, prepared
        write_reservations(new, prepared.files, prepared.taken)
        if restart:
            write_files(new, prepared)
        self.first_mile = self._first_mile()
        message = (f"{len(prepared.taken)} reservations ({added} added, {removed} removed, {changed} changed)"
                   + ("; dnsmasq's options changed: restarting it" if restart
                      else " without restarting dnsmasq" if old.taken != prepared.taken else ""))
        log.info("reload: %s", message)
        _write_status(prepared.files, ok=True, message=message)
        return restart


async def run_engine(config: Config) -> int:
    """``bootserver dhcp``: run the engine until SIGTERM/SIGINT (returns 0). Raises
    :class:`~bootserver.errors.ConfigError` and :class:`EngineError` as :func:`prepare` and :func:`refusal`;
    dnsmasq dying on its own is an :class:`EngineError` naming its last line."""
    engine = Engine(config, None)  # checks the config and the interface first: nothing opened on a refusal
    for line in (*unselectable(config, engine.prepared.taken), *secure_boot_unlisted(config)):
        log.warning("%s", line)
    try:
        store: StateStore | None = open_store(config)
        assert store is not None
        await store.start()
    except (StateStoreError, OSError) as e:
        log.warning("the state store cannot be opened (%s): the first mile will not be on the timeline", e)
        store = None
    engine.store = store
    loop = asyncio.get_running_loop()
    stop, hup = asyncio.Event(), asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    loop.add_signal_handler(signal.SIGHUP, hup.set)
    pid_file: Path | None = None
    try:
        await engine.start()
        pid_file = write_pid(config)
        while True:
            pump = asyncio.ensure_future(engine.pump())
            while True:
                waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(hup.wait()), pump]
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                for w in waits[:2]:
                    w.cancel()
                if stop.is_set():
                    await engine.stop()
                    await pump
                    return 0
                if pump.done():
                    code = engine.child.returncode if engine.child is not None else None
                    raise EngineError(f"dnsmasq exited on its own (status {code}); see its lines above")
                hup.clear()
                if await engine.reload():
                    await engine.stop()
                    await pump
                    await engine.start()
                    break
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(signum)
        await engine.stop()
        if pid_file is not None:
            with contextlib.suppress(OSError, ValueError):
                if int(pid_file.read_text().strip()) == os.getpid():
                    pid_file.unlink()
        if store is not None:
            await store.close()


def print_config(config: Config, what: str) -> str:
    """``bootserver dhcp --print [dnsmasq|kea|kea6]``: the engine's configuration for a site that keeps its
    own server, without starting anything: dnsmasq's options with the reservations inline, Kea's ``Dhcp4``
    JSON (:mod:`bootserver.dhcp.kea`), or with ``dhcp.ipv6`` Kea's ``Dhcp6`` JSON (:mod:`bootserver.dhcp.kea6`;
    kea-dhcp4 and kea-dhcp6 are two daemons with a file each). The interface need not be on this machine
    when a reservation tells the subnet. Raises :class:`~bootserver.errors.ConfigError` as
    :func:`~bootserver.dhcp.reservations.check_dhcp` and :func:`~bootserver.dhcp.kea6.kea6_config`."""
    from .kea import kea_text
    from .kea6 import kea6_text

    if config.dhcp is None:
        raise ConfigError(config.source, "dhcp", "not set: add a dhcp: mapping with the interface (docs/config.md)")
    taken = check_dhcp(config, local=False)
    try:
        found = interface_addresses(config.dhcp.interface)
    except NoInterface:
        found = None
    if what not in ("dnsmasq", "kea", "kea6"):
        raise InputError(f"--print: dnsmasq, kea or kea6, not {what!r}")
    subnet = subnet_of(config, found, taken)
    if subnet is None:
        raise ConfigError(config.source, "dhcp.interface", f"{config.dhcp.interface} is not on this machine "
                          "(or has no IPv4 address) and no reservation tells the subnet to answer on")
    if what == "kea6":
        return kea6_text(config, found, taken)
    if what == "kea":
        host = config.server.base_url_for(4).split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)[0]
        next_server = host if _IPV4.match(host) else (str(found.ipv4.ip) if found and found.ipv4 else None)
        return kea_text(config, subnet, taken, next_server)
    return conf_text(config, subnet, None, taken)


__all__ = ["PID_FILE", "STATUS_FILE", "Engine", "EngineError", "FirstMile", "Prepared", "Seen", "dnsmasq_argv",
           "prepare", "print_config", "refusal", "run_engine", "signal_engine", "wait_engine_status", "write_files",
           "write_pid", "write_tftp_root"]
