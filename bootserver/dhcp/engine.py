"""``bootserver dhcp``: dnsmasq as the DHCP and TFTP engine of the provisioning network, run in the
foreground as our child, its files written from the config, its log relayed into ours and onto the
node timeline, its reservations kept live across reloads.

**Start** (:func:`run_engine`): the ``dhcp:`` checks (:func:`~bootserver.dhcp.reservations.check_dhcp`,
against the interface as it is now); then the engine claims its ``state_dir`` and its interface
(:func:`claim`: an ``flock`` on ``state_dir/dhcp/engine.lock`` and an abstract socket named for the
interface), so a second engine of either is refused in one line naming the first's process id (exit 2);
a dnsmasq of this ``state_dir`` that outlived its engine (its pid file) is stopped
(:func:`stop_stale_dnsmasq`, a warning line). Then the files under ``state_dir/dhcp/``
(:mod:`bootserver.dhcp.dnsmasq`; the TFTP root gets ``bootserver loaders``' files and ``proxy`` mode's
PXE menu files, and, in the background, the ``secure_boot`` streams' signed loader sets, rewritten after
every reload: :func:`write_secure_boot_sets`), then dnsmasq (``--keep-in-foreground``, its own options
file only, no ``/etc/dnsmasq.conf``, no DNS, bound to ``dhcp.interface`` alone, as the user bootserver
runs as), which dies with the engine (``PR_SET_PDEATHSIG``), however the engine ends. It is up once it
logs ``started``; when it exits before that, its last line becomes ours, naming the key at fault
(``dhcp.interface`` for an unknown interface or a port in use), exit 2 (config) or 1.

**Its log** (stderr) goes into ours line by line under the logger ``bootserver.dnsmasq`` (escaped by
:class:`bootserver.logs.TextFormatter`, like every line; ``log-dhcp``'s detail lines at debug). The
first mile goes onto the timeline (:class:`FirstMile`): ``DHCPACK`` (``full``) or a ``PXE`` answer
(``proxy``) of a node's MAC is a ``dhcp`` event (address, boot file), a TFTP ``sent`` to that address a
``tftp`` event (file), written to the state store of the config like any other event.

**Reload** (``SIGHUP``; ``bootserver reload`` and ``nodes adopt`` send it to the process in
``state_dir/dhcp/engine.pid`` too, and the systemd unit follows the server's reload): the config is read
again and checked; an invalid one is one error line and the running one stays. The reservations are
rewritten (``hosts/nodes``, ``opts/nodes``) and dnsmasq gets ``SIGHUP``, on which it re-reads them whole
(a removed or changed reservation is gone at once) and keeps its leases: no restart. Only a change of
dnsmasq's own options (``dhcp:`` keys, ``server.base_url``, the ``secure_boot`` nodes and their MACs:
:func:`~bootserver.dhcp.dnsmasq.secure_boot_lines`) restarts it, once ``dnsmasq --test`` accepted the new
options (its lease file keeps the leases); when the new one does not start, the old options are started
again. The outcome (``state_dir/dhcp/reload.json``, :func:`wait_engine_status`) is written when dnsmasq
serves it (it logged re-reading the reservations, or it restarted) and says how many reservations changed.

**The state store's nodes** (issue 48): the engine reads them at start beside the files' (a file that
names one: exit 2, naming both origins) and then polls the store's revision every
:data:`~bootserver.node_writes.POLL` seconds (:meth:`Engine.follow_store`): a node written, changed or
deleted with ``bootserver nodes apply``/``delete`` (through any replica's config) has its reservation
written, changed or removed as a reload would (:meth:`Engine.serve`: no restart unless dnsmasq's own
options changed), within about a second, and each node whose reservation changed gets a
``reservation`` event on its timeline (``added``, ``changed``, ``removed``, with its MAC and address).

**Stop**: ``SIGTERM`` or ``SIGINT`` stop dnsmasq (``SIGTERM``, ``SIGKILL`` after 5 s) and return 0.
dnsmasq ending on its own ends the engine (exit 1) with a line naming its exit status or signal and its
last line.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import errno
import fcntl
import grp
import ipaddress
import json
import logging
import os
import pwd
import re
import shutil
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import Config, load_config
from ..desk import ArtifactDesk
from ..errors import BootserverError, ConfigError, InputError
from ..files import write_atomic, write_changed
from ..images.firmware import write_loaders
from ..images.netsecure import loader_set, secure_boot_streams, write_secureboot_loaders
from ..inventory import carry_over, inventory
from ..node_writes import POLL, StoreNodes
from ..runtime import Runtime
from ..state import StateStore, StateStoreError, TimelineStore
from ..state.backends import open_store
from ..state.nodestore import NodeStore
from ..timeline import Record
from ..values import host_family
from .dnsmasq import DNSMASQ, Layout, add_reservations, conf_text, layout, tagged, write_reservations
from .iface import NoInterface, interface_addresses
from .reservations import Reservation, check_dhcp, subnet_of, unselectable
from .rules import menu_files, menu_script, secure_boot_unlisted

log = logging.getLogger("bootserver.dhcp")
relay = logging.getLogger("bootserver.dnsmasq")

#: ``state_dir/dhcp/engine.pid``: the process id of the running ``bootserver dhcp``.
PID_FILE = "engine.pid"
#: ``state_dir/dhcp/reload.json``: the outcome of the engine's last reload (:func:`wait_engine_status`).
STATUS_FILE = "reload.json"
#: ``state_dir/dhcp/engine.lock``: locked (``flock``) by the engine of this ``state_dir`` while it runs, and
#: holding its process id; never removed (two engines must lock the same file).
LOCK_FILE = "engine.lock"
#: The abstract Unix socket an engine listens on while it answers on an interface (Linux: the name space of
#: abstract sockets is the network namespace's, as the interface's name is).
IFACE_SOCKET = "bootserver-dhcp:{interface}"
#: ``state_dir/dhcp/dnsmasq.pid``: dnsmasq's own pid file (``--pid-file``).
DNSMASQ_PID = "dnsmasq.pid"

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
            write_changed(files.tftp_root / name, menu_script(config).encode())
        elif source in written:
            write_changed(files.tftp_root / name, written[source].read_bytes())


async def write_secure_boot_sets(config: Config, files: Layout) -> tuple[list[Path], list[str]]:
    """Write the network loader set of every ``secure_boot`` stream (:func:`~bootserver.images.netsecure.\
secure_boot_streams`) into the TFTP root of ``files``, as ``bootserver loaders`` does: ``secureboot/<stream>/``
    with the release's signed shim (``bootx64.efi``, the boot file the engine hands those nodes), GRUB,
    MokManager and the generic GRUB config, and ``grub/grub.cfg`` (:func:`~bootserver.images.netsecure.\
write_secureboot_loaders`); each stream's live ISO is fetched through the cache on first use. Not the
    nodes' own TFTP configs (``secureboot/nodes/``, for a vendor GRUB without ``http``: ``bootserver
    loaders`` writes those). Returns the files written and one line per stream that could not be
    written (no live ISO, a failed fetch), naming it."""
    streams = secure_boot_streams(config)
    if not streams:
        return [], []
    sets: dict[str, Path] = {}
    failed: list[str] = []
    async with Runtime(config) as runtime:
        desk = ArtifactDesk(config, runtime, inventory(config))
        for stream in streams:
            try:
                sets[stream] = await loader_set(config, desk.catalog, desk.artifacts, stream)
            except (BootserverError, OSError) as e:
                failed.append(f"stream {stream}: {e}")
    written = await asyncio.to_thread(write_secureboot_loaders, files.tftp_root, sets, config.server.base_url_for(4))
    return written, failed


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
    return [program, "--keep-in-foreground", f"--conf-file={files.conf}", f"--pid-file={files.root / DNSMASQ_PID}",
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


class EngineRunning(InputError):
    """Another ``bootserver dhcp`` runs for this ``state_dir`` or answers on this interface (exit 2); the
    message names its process id (:func:`claim`)."""


#: linux/prctl.h: the signal a process gets when the thread that forked it ends.
_PR_SET_PDEATHSIG = 1


def _socket_holder(name: bytes) -> int | None:
    """The process id listening on the abstract socket ``name`` (``SO_PEERCRED``), or ``None``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as peer:
        peer.settimeout(1.0)
        try:
            peer.connect(name)
            creds = peer.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        except OSError:
            return None
    return int(struct.unpack("3i", creds)[0])


def _lock_holder(path: Path) -> int | None:
    """The process id in the lock file ``path`` (its holder writes it right after locking: up to 1 s)."""
    end = time.monotonic() + 1.0
    while True:
        with contextlib.suppress(OSError):
            text = path.read_text().strip()
            if text.isdigit():
                return int(text)
        if time.monotonic() >= end:
            return None
        time.sleep(0.05)


@dataclass
class Claim:
    """An engine's hold on its ``state_dir`` (``fd``: :data:`LOCK_FILE`, locked) and on its interface
    (``sock``: :data:`IFACE_SOCKET`, listening); the kernel drops both when the process ends, however it
    ends (``SIGKILL`` too), so no stale lock is ever left."""

    fd: int
    sock: socket.socket

    def answer(self) -> None:
        """Accept and close what connected to the socket (another engine asking for our process id)."""
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                conn.close()

    def release(self) -> None:
        """Give both up (the lock file stays: see :data:`LOCK_FILE`)."""
        self.sock.close()
        os.close(self.fd)


def _pid_text(pid: int | None) -> str:
    return f"process {pid}" if pid is not None else "process id unknown"


def claim(config: Config) -> Claim:
    """Take ``config``'s ``state_dir`` and ``dhcp.interface`` for this process: an exclusive ``flock`` on
    ``state_dir/dhcp/engine.lock`` (:data:`LOCK_FILE`, which then holds our process id), and the abstract
    Unix socket of the interface (:data:`IFACE_SOCKET`). Raises :class:`EngineRunning` naming the engine
    that holds either (its process id: the lock file's, or the socket's ``SO_PEERCRED``), and ``OSError``
    when ``state_dir/dhcp`` cannot be written."""
    assert config.dhcp is not None
    files = layout(config)
    files.root.mkdir(parents=True, exist_ok=True)
    path = files.root / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise EngineRunning(f"{config.source}: state_dir: bootserver dhcp ({_pid_text(_lock_holder(path))}) "
                            f"already runs for {config.state_dir}: one engine per state_dir") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    iface = config.dhcp.interface
    name = b"\0" + IFACE_SOCKET.format(interface=iface).encode()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(name)
        sock.listen(16)
    except OSError as e:
        sock.close()
        os.close(fd)
        if e.errno != errno.EADDRINUSE:
            raise
        raise EngineRunning(f"{config.source}: dhcp.interface: bootserver dhcp ({_pid_text(_socket_holder(name))}) "
                            f"already answers on {iface}: one engine per interface (two DHCP servers would "
                            "answer one network)") from None
    sock.setblocking(False)
    return Claim(fd, sock)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


async def stop_stale_dnsmasq(files: Layout) -> int | None:
    """Stop a dnsmasq of ``files`` that outlived its engine: the process in ``state_dir/dhcp/dnsmasq.pid``
    (:data:`DNSMASQ_PID`) when it is a dnsmasq whose command line names our ``--conf-file`` (``SIGTERM``,
    ``SIGKILL`` after :data:`STOP_TIMEOUT` seconds). Called with the ``state_dir`` claimed (:func:`claim`):
    no running engine of ours owns it. Returns its process id, or ``None`` when there was none. Raises
    :class:`EngineError` when it cannot be stopped (another user's process)."""
    try:
        pid = int((files.root / DNSMASQ_PID).read_text().strip())
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    if os.path.basename(argv[0]) != DNSMASQ.encode() or f"--conf-file={files.conf}".encode() not in argv:
        return None
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return pid
        except PermissionError:
            raise EngineError(f"{files.root / DNSMASQ_PID}: dnsmasq (process {pid}) of this state_dir outlived "
                              "its engine and this user cannot stop it: stop it, then start bootserver dhcp") from None
        end = time.monotonic() + STOP_TIMEOUT
        while _alive(pid) and time.monotonic() < end:
            await asyncio.sleep(0.05)
        if not _alive(pid):
            return pid
    return pid


def _die_with_engine(engine: int) -> Callable[[], None]:
    """dnsmasq's ``preexec_fn``: ``PR_SET_PDEATHSIG`` (prctl(2)) gives it ``SIGTERM`` when the engine
    (process ``engine``) ends, also by ``SIGKILL``; when the engine already ended before that, it exits."""
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != engine:
            os._exit(1)

    return preexec


def exit_text(code: int) -> str:
    """A process's end from its ``returncode`` ``code`` (asyncio's: negative for a signal):
    ``was killed by SIGKILL (signal 9)`` or ``exited with status 3``."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "a signal"
        return f"was killed by {name} (signal {-code})"
    return f"exited with status {code}"


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


def _write_status(files: Layout, *, result: str, message: str) -> None:
    doc = {"pid": os.getpid(), "at": time.time(), "result": result, "message": message}
    with contextlib.suppress(OSError):
        write_atomic(files.root / STATUS_FILE, json.dumps(doc).encode())


def wait_engine_status(config: Config, after: float, timeout: float) -> dict[str, Any] | None:
    """The engine's first reload outcome recorded at or after unix time ``after`` (``{"pid", "at",
    "result", "message"}`` from ``state_dir/dhcp/reload.json``; ``result``: ``ok``, ``invalid`` (the
    config was refused, nothing changed) or ``failed`` (dnsmasq did not start with the new options; the
    old ones serve again)), polled every 0.1 s for at most ``timeout`` seconds; ``None`` when none came.
    The outcome is written once the reload is done: after dnsmasq re-read the reservations, or after
    its restart."""
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


def not_running(config: Config) -> str:
    """What ``reload``, ``nodes adopt`` and ``openshift import`` say when ``config`` has a ``dhcp:``
    mapping and no engine runs with its ``state_dir``."""
    return f"bootserver dhcp: none runs with state_dir {config.state_dir}; it reads the config when it starts"


def engine_outcome(config: Config, pid: int, sent: float, timeout: float) -> tuple[int, str]:
    """The outcome of the reload of ``bootserver dhcp`` (process ``pid``, signalled at unix time ``sent``)
    as the engine records it once dnsmasq serves it (:func:`wait_engine_status`, up to ``timeout``
    seconds): ``(exit code, line)``, 0 reloaded (``bootserver dhcp reloaded: 13 reservations ...``), 2
    refused (an invalid config: the running one stays), 1 failed (dnsmasq did not start with the new
    options; the old ones serve again) or no outcome in time. The one reading of the outcome, for
    ``reload`` and for :func:`reload_engine`."""
    status = wait_engine_status(config, sent, timeout)
    if status is None:
        return 1, f"sent SIGHUP to bootserver dhcp (process {pid}); no outcome within {timeout:g} s: see its log"
    if status.get("result") == "failed":
        return 1, f"bootserver dhcp could not apply the reload: {status.get('message')}"
    if status.get("result") != "ok":
        return 2, f"bootserver dhcp refused the reload, its running config stays: {status.get('message')}"
    return 0, f"bootserver dhcp reloaded: {status.get('message')}"


def reload_engine(config: Config, timeout: float) -> str | None:
    """Signal a running ``bootserver dhcp`` of ``config``'s ``state_dir`` (:func:`signal_engine`) and wait
    up to ``timeout`` seconds for its outcome; the outcome's line (:func:`engine_outcome`; with no engine
    running, :func:`not_running`), or ``None`` without a ``dhcp:`` mapping. What ``nodes adopt`` and
    ``openshift import`` add to their server's reload."""
    if config.dhcp is None:
        return None
    sent = time.time()
    engine = signal_engine(config)
    if engine is None:
        return not_running(config)
    return engine_outcome(config, engine, sent, timeout)[1]


#: The first dnsmasq version that re-reads reservations with a tag (``set:``) on ``SIGHUP`` without crashing
#: once it answered their machines (2.90 aborts in ``dhcp_netid_list_free``; upstream commit f006be7).
SIGHUP_SAFE = (2, 91)


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def dnsmasq_version(program: str) -> tuple[int, ...]:
    """dnsmasq's version (``dnsmasq --version``'s first line, ``Dnsmasq version 2.90 ...``), e.g.
    ``(2, 90)``; ``(0,)`` when it cannot be told."""
    try:
        out = subprocess.run([program, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return (0,)
    match = re.match(r"Dnsmasq version (\d+(?:\.\d+)*)", out)
    return tuple(int(x) for x in match.group(1).split(".")) if match else (0,)


#: Seconds dnsmasq has to re-read its reservations after ``SIGHUP`` (its ``read <file>`` lines).
REREAD_TIMEOUT = 5.0


class Engine:
    """One ``bootserver dhcp`` run: dnsmasq as its child, the relay of its log (:attr:`pump_task`),
    reloads. See the module docstring; :func:`run_engine` is the entry point."""

    def __init__(self, config: Config, store: TimelineStore | None) -> None:
        self.config = config
        #: The config of the files alone (what a change of the state store's nodes is merged into).
        self.files = config
        #: The state store's nodes as last read (:meth:`follow_store`).
        self.store_nodes = StoreNodes()
        self.store = store
        self.prepared = prepare(config)
        self.child: asyncio.subprocess.Process | None = None
        self.pump_task: asyncio.Future[None] | None = None
        self.last_line = ""
        self.first_mile = self._first_mile()
        self._awaited: tuple[set[str], asyncio.Future[None]] | None = None
        self.sets_task: asyncio.Future[None] | None = None
        self.version = dnsmasq_version(dnsmasq_argv(self.prepared.files)[0])

    def _first_mile(self) -> FirstMile:
        assert self.config.dhcp is not None
        known = {str(r.ipv4.ip): r.mac for r in self.prepared.taken if r.ipv4 is not None}
        return FirstMile(self.config.dhcp.mode, known)

    async def start(self) -> None:
        """Write the files and start dnsmasq (it dies with this process: :func:`_die_with_engine`);
        returns once it logged ``started``, its log then relayed by :attr:`pump_task`. Raises as
        :func:`refusal`."""
        write_files(self.config, self.prepared)
        self.last_line = ""
        self.child = await asyncio.create_subprocess_exec(
            *dnsmasq_argv(self.prepared.files), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            preexec_fn=_die_with_engine(os.getpid()))
        assert self.child.stderr is not None
        end = time.monotonic() + START_TIMEOUT
        while True:
            try:
                raw = await asyncio.wait_for(self.child.stderr.readline(), max(0.1, end - time.monotonic()))
            except TimeoutError:
                await self.stop()
                raise EngineError(f"dnsmasq did not start within {START_TIMEOUT:g} s (last line: "
                                  f"{self.last_line!r})") from None
            if not raw:
                code = await self.child.wait()
                raise refusal(self.config, self.last_line or f"it {exit_text(code)} without a line")
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self._relay(line)
            if re.match(r"^dnsmasq(\[\d+\])?: started, version", line):
                break
        self.pump_task = asyncio.ensure_future(self.pump())
        log.info("dnsmasq (process %d) answers on %s in %s mode: %d reservations, files in %s", self.child.pid,
                 self.config.dhcp.interface if self.config.dhcp else "", self.config.dhcp.mode if self.config.dhcp
                 else "", len(self.prepared.taken), self.prepared.files.root)

    def keep_secure_boot_sets(self) -> None:
        """(Re)write the TFTP root's Secure Boot sets for the running config in the background
        (:func:`write_secure_boot_sets`: a live ISO may have to be fetched first), replacing a write in
        progress; each stream it cannot write is a warning line."""
        if self.sets_task is not None and not self.sets_task.done():
            self.sets_task.cancel()
        self.sets_task = asyncio.ensure_future(self._write_sets(self.config))

    async def _write_sets(self, config: Config) -> None:
        files = layout(config)
        try:
            written, failed = await write_secure_boot_sets(config, files)
        except (BootserverError, OSError) as e:
            written, failed = [], [str(e)]
        for line in failed:
            log.warning("%s: its secure_boot nodes get no shim from %s until it can be written", line, files.tftp_root)
        if written:
            log.info("the Secure Boot loaders of %s are in %s", ", ".join(sorted(
                {p.relative_to(files.tftp_root).parts[1] for p in written
                 if p.relative_to(files.tftp_root).parts[0] == "secureboot"})), files.tftp_root)

    async def stop_sets(self) -> None:
        """Cancel a Secure Boot sets write in progress (:meth:`keep_secure_boot_sets`)."""
        task, self.sets_task = self.sets_task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _relay(self, line: str) -> None:
        match = _LINE.match(line)
        msg = match.group("msg") if match else line
        answer = re.match(r"^\d+ (?:DHCPACK|DHCPOFFER|PXE|DHCPREPLY|DHCPADVERTISE)", msg)
        level = logging.DEBUG if re.match(r"^\d+ ", msg) and not answer else logging.INFO
        relay.log(level, "%s", line)
        if line:
            self.last_line = line
        if self._awaited is not None and msg in self._awaited[0]:
            self._awaited[0].discard(msg)
            if not self._awaited[0] and not self._awaited[1].done():
                self._awaited[1].set_result(None)

    async def _record(self, seen: list[Seen]) -> None:
        for s in seen:
            node = inventory(self.config).by_mac(s.mac)
            if node is None or self.store is None:
                continue
            try:
                await self.store.record(Record(node.name, s.event, node.mode, s.at or time.time(), s.ip, s.detail,
                                               real_config=node.ignition is not None))
            except (StateStoreError, OSError) as e:
                log.warning("node %s: %s not recorded on the timeline: %s", node.name, s.event, e)

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
        """Stop dnsmasq: SIGTERM, then SIGKILL after :data:`STOP_TIMEOUT` seconds; its log relayed to the end."""
        child, self.child = self.child, None
        pump, self.pump_task = self.pump_task, None
        if child is not None and child.returncode is None:
            child.terminate()
            try:
                await asyncio.wait_for(child.wait(), STOP_TIMEOUT)
            except TimeoutError:
                child.kill()
                await child.wait()
        if pump is not None:
            await pump

    async def died(self) -> EngineError:
        """The error of dnsmasq ending on its own (:attr:`pump_task` done): how it ended and its last line."""
        assert self.child is not None
        code = await self.child.wait()
        last = f"its last line: {self.last_line}" if self.last_line else "it wrote no line"
        return EngineError(f"dnsmasq (process {self.child.pid}) {exit_text(code)} while answering on "
                           f"{self.config.dhcp.interface if self.config.dhcp else ''}; {last}")

    async def _confirmed(self, lines: list[str], act: Callable[[], object]) -> bool:
        """Do ``act`` and wait until dnsmasq logged each of ``lines`` (its messages, without the
        ``dnsmasq-dhcp[PID]: `` prefix); ``False`` when it did not within :data:`REREAD_TIMEOUT` seconds."""
        assert self.child is not None
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._awaited = (set(lines), done)
        try:
            act()
            if lines:
                await asyncio.wait_for(done, REREAD_TIMEOUT)
            return True
        except (TimeoutError, ProcessLookupError):
            return False
        finally:
            self._awaited = None

    async def _restart(self, old: tuple[Config, Prepared]) -> str | None:
        """Restart dnsmasq with :attr:`prepared`'s options (checked with ``dnsmasq --test`` first); when
        the new one does not start, the old files and options (``old``) are written and started again.
        Returns ``None``, or why the new options failed. Raises :class:`EngineError` when the old ones
        do not start again either."""
        files = self.prepared.files
        candidate = files.root / "dnsmasq.conf.new"
        write_atomic(candidate, self.prepared.conf.encode())
        argv = [a if not a.startswith("--conf-file=") else f"--conf-file={candidate}"
                for a in dnsmasq_argv(files)]
        test = await asyncio.create_subprocess_exec(*argv, "--test", stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await test.communicate()
        with contextlib.suppress(OSError):
            candidate.unlink()
        if test.returncode != 0:
            lines = out.decode("utf-8", "replace").strip().splitlines()
            return f"dnsmasq --test refused the new options: {lines[-1] if lines else 'no message'}"
        await self.stop()
        try:
            await self.start()
            return None
        except BootserverError as e:
            failed = str(e)
        await self.stop()
        self.config, self.prepared = old
        log.error("dnsmasq did not start with the new options (%s); starting it again with the old ones", failed)
        await self.start()
        return f"dnsmasq did not start with the new options: {failed}"

    async def reload(self) -> None:
        """Read the config again (see the module docstring) and record the outcome (:func:`_write_status`)
        once dnsmasq serves it: after it re-read the reservations, or after its restart. An invalid config
        is logged and changes nothing; a restart that fails brings the old options back."""
        try:
            files = load_config(self.config.source)
            # the state store's nodes as last read; a file that now names one of them refuses the reload
            new, skipped = self.store_nodes.merged(files, strict=True)
            prepared = prepare(new)
        except BootserverError as e:
            log.error("reload refused, the running config stays: %s", e)
            _write_status(self.prepared.files, result="invalid", message=str(e))
            return
        for line in skipped:
            log.error("%s", line)
        self.files = files
        await self.serve(new, prepared, "reload")

    async def follow_store(self, store: NodeStore) -> bool:
        """One step of the store watch (every :data:`~bootserver.node_writes.POLL` seconds): read what
        changed in the state store's nodes and, when something did, write the reservations of the files'
        config with them (:meth:`serve`: a file per new one, ``SIGHUP`` for a changed or removed one;
        dnsmasq keeps running). Returns whether something changed. A store node this config cannot serve
        is left out with one error line; a config the engine refuses (``dhcp:`` checks) changes nothing.
        Raises ``UnavailableError``."""
        changed = await self.store_nodes.refresh(store)
        if not changed:
            return False
        new, skipped = self.store_nodes.merged(self.files, strict=False, written=changed)
        carry_over(new, self.config, changed)
        for line in skipped:
            log.error("%s", line)
        try:
            prepared = prepare(new)
        except BootserverError as e:
            log.error("store nodes %s: not served by the DHCP engine, the running reservations stay: %s",
                      ", ".join(sorted(changed)), e)
            return True
        await self.serve(new, prepared, "store")
        return True

    async def serve(self, new: Config, prepared: Prepared, cause: str) -> None:
        """Serve ``new`` (``prepared``): rewrite the reservations without restarting dnsmasq where it can
        (see the module docstring), record each node's reservation change on its timeline (event
        ``reservation``: ``added``, ``changed`` or ``removed``, with its address) and the outcome
        (:func:`_write_status`); ``cause`` (``reload``, ``store``) starts the log line."""
        what = "reload" if cause == "reload" else "store nodes"
        added, removed, changed = _reservation_changes(self.prepared.taken, prepared.taken)
        counts = f"{len(prepared.taken)} reservations ({added} added, {removed} removed, {changed} changed)"
        restart = prepared.conf != self.prepared.conf
        old, (self.config, self.prepared) = (self.config, self.prepared), (new, prepared)
        self.first_mile = self._first_mile()
        before = {r.node: r for r in old[1].taken}
        fresh = tuple(r for r in prepared.taken if r.node not in before)
        gone = len(before) + len(fresh) != len(prepared.taken) or any(
            before[r.node] != r for r in prepared.taken if r.node in before)
        files = prepared.files
        await self._record_reservations(old[0], old[1].taken, prepared.taken)
        if not restart and old[1].taken == prepared.taken:
            message = counts
        elif restart or (gone and tagged(old[0], old[1].taken) and self.version < SIGHUP_SAFE):
            why = ("dnsmasq's options changed" if restart else f"dnsmasq {_dotted(self.version)} cannot re-read "
                   f"tagged reservations in place (before {_dotted(SIGHUP_SAFE)} it crashes on SIGHUP)")
            log.info("%s: %s; %s: restarting it", what, counts, why)
            try:
                failed = await self._restart(old)
            except BootserverError as e:
                _write_status(files, result="failed", message=f"{e}; the old config did not start again either: "
                              "bootserver dhcp ends")
                raise
            if failed is not None:
                log.error("%s: %s; the old config serves again", what, failed)
                _write_status(files, result="failed", message=f"{failed}; the old config serves again")
                return
            assert self.child is not None
            message = f"{counts}; {why}: restarted it (process {self.child.pid})"
        else:
            child = self.child
            assert child is not None
            if gone:  # dnsmasq drops what it read and reads the files again: SIGHUP
                write_reservations(new, files, prepared.taken)
                ok = await self._confirmed([f"read {files.opts_file}"], lambda: child.send_signal(signal.SIGHUP))
            else:  # added only: a file each, which dnsmasq reads as it appears
                ok = await self._confirmed([f"inotify: {files.hosts_added / r.node} new or modified" for r in fresh],
                                           lambda: add_reservations(new, files, fresh))
            if not ok:
                message = f"{counts}; dnsmasq did not confirm reading them within {REREAD_TIMEOUT:g} s"
                log.error("%s: %s", what, message)
                _write_status(files, result="failed", message=message)
                return
            message = f"{counts} without restarting dnsmasq"
        log.info("%s: %s", what, message)
        _write_status(prepared.files, result="ok", message=message)

    async def _record_reservations(self, old: Config, before: tuple[Reservation, ...],
                                   after: tuple[Reservation, ...]) -> None:
        """Record each node whose reservation was added, changed or removed (event ``reservation``)."""
        if self.store is None:
            return
        was, now = {r.node: r for r in before}, {r.node: r for r in after}
        for name in sorted(was.keys() | now.keys()):
            if was.get(name) == now.get(name):
                continue
            change = "added" if name not in was else "removed" if name not in now else "changed"
            r = now.get(name) or was[name]
            node = inventory(self.config if name in now else old).get(name)
            if node is None:
                continue
            detail = {"change": change, "mac": r.mac, **({"address": str(r.ipv4.ip)} if r.ipv4 else {})}
            try:
                await self.store.record(Record(name, "reservation", node.mode, time.time(), None, detail,
                                               real_config=node.ignition is not None))
            except (StateStoreError, OSError) as e:
                log.warning("node %s: reservation not recorded on the timeline: %s", name, e)


async def run_engine(config: Config) -> int:
    """``bootserver dhcp``: run the engine until SIGTERM/SIGINT (returns 0). Raises
    :class:`~bootserver.errors.ConfigError` and :class:`EngineError` as :func:`prepare` and :func:`refusal`,
    :class:`EngineRunning` as :func:`claim`; dnsmasq dying on its own is an :class:`EngineError` naming how
    it ended (:func:`exit_text`) and its last line."""
    engine = Engine(config, None)  # checks the config and the interface first: nothing opened on a refusal
    held = claim(config)
    loop = asyncio.get_running_loop()
    loop.add_reader(held.sock, held.answer)
    store: StateStore | None = None
    pid_file: Path | None = None
    stop, hup = asyncio.Event(), asyncio.Event()
    try:
        stale = await stop_stale_dnsmasq(engine.prepared.files)
        if stale is not None:
            log.warning("dnsmasq (process %d) of %s outlived its engine: stopped it", stale, engine.prepared.files.root)
        for line in (*unselectable(config, engine.prepared.taken), *secure_boot_unlisted(config)):
            log.warning("%s", line)
        try:
            store = open_store(config)
            assert store is not None
            await store.start()
        except (StateStoreError, OSError) as e:
            log.warning("the state store cannot be opened (%s): the first mile will not be on the timeline", e)
            store = None
        engine.store = store
        if store is not None:  # the state store's nodes beside the files' (a file naming one: exit 2)
            try:
                await engine.store_nodes.load(store)
            except BootserverError as e:
                log.warning("the state store's nodes cannot be read (%s): the files' nodes only, for now", e)
            config, skipped = engine.store_nodes.merged(config, strict=True)
            for line in skipped:
                log.error("%s", line)
            if config.nodes != engine.config.nodes:
                engine.config, engine.prepared = config, prepare(config)
                engine.first_mile = engine._first_mile()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        loop.add_signal_handler(signal.SIGHUP, hup.set)
        await engine.start()
        pid_file = write_pid(config)
        engine.keep_secure_boot_sets()
        failing = False
        while True:
            assert engine.pump_task is not None
            waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(hup.wait())]
            watched: list[asyncio.Future[Any]] = [*waits, engine.pump_task]
            await asyncio.wait(watched, timeout=POLL, return_when=asyncio.FIRST_COMPLETED)
            for w in waits:
                w.cancel()
            if stop.is_set():
                await engine.stop()
                return 0
            if engine.pump_task.done():
                raise await engine.died()
            if hup.is_set():
                hup.clear()
                await engine.reload()
                engine.keep_secure_boot_sets()
            elif store is not None:  # the store watch: a store write reserved within POLL and a re-read
                try:
                    if await engine.follow_store(store):
                        engine.keep_secure_boot_sets()
                    failing = False
                except BootserverError as e:
                    if not failing:
                        log.warning("store watch: the state store's nodes cannot be read, the running "
                                    "reservations stay: %s", e)
                    failing = True
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(signum)
        await engine.stop_sets()
        await engine.stop()
        if pid_file is not None:  # ours alone: the state_dir is claimed
            with contextlib.suppress(OSError):
                pid_file.unlink()
        if store is not None:
            await store.close()
        loop.remove_reader(held.sock)
        held.release()


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


__all__ = ["DNSMASQ_PID", "IFACE_SOCKET", "LOCK_FILE", "PID_FILE", "REREAD_TIMEOUT", "SIGHUP_SAFE", "STATUS_FILE",
           "Claim", "Engine", "EngineError", "EngineRunning", "FirstMile", "Prepared", "Seen", "claim", "dnsmasq_argv",
           "dnsmasq_version", "engine_outcome", "exit_text", "not_running",
           "prepare", "print_config", "refusal", "reload_engine", "run_engine",
           "signal_engine", "stop_stale_dnsmasq", "wait_engine_status", "write_files", "write_pid",
           "write_secure_boot_sets", "write_tftp_root"]
