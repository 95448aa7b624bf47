"""A network of the tests' own: a Linux network namespace with a bridge and tap devices, for everything
that speaks DHCP, router advertisements or TFTP (shared/DESIGN.md, "A network of the tests' own").

:class:`TestNetwork` makes the namespace ``<prefix>-<pid>-<n>`` (unique per process and use), its
loopback, a bridge ``br0`` with the server's addresses (``192.0.2.1/24`` and ``2001:db8::1/64``,
documentation ranges) and tap devices attached to it (:meth:`TestNetwork.tap`), one per QEMU guest
(``-netdev tap,ifname=...``). Every process of the test runs inside it (:meth:`TestNetwork.start`,
:meth:`TestNetwork.run`: ``ip netns exec``), so nothing it sends can reach or answer the host's own
interfaces. :meth:`TestNetwork.close` (also on failure: use it as a context manager) stops the
processes it started, by process group, and deletes the namespace, which removes its devices.

Needs root and ``ip`` (iproute2). :func:`unavailable` says why a test cannot make one; :func:`lab` makes
one for a test fixture once that and the programs the test runs are there, else skips the test (fails
it under CI, :func:`in_ci`, which installs everything: :func:`skip_or_fail`).
Reused by the DHCP engine's tests (``tests/e2e/test_dhcp_boot.py``) and meant for every test on
the engine's network (HTTP Boot, IPv6, the installer's life, the playground).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, NoReturn

import pytest

#: The server's IPv4 address and prefix on the bridge.
SERVER_IPV4 = "192.0.2.1"
SUBNET_IPV4 = "192.0.2.0/24"
#: The server's IPv6 address and prefix on the bridge.
SERVER_IPV6 = "2001:db8::1"
BRIDGE = "br0"

_count = itertools.count()


def in_ci() -> bool:
    """True when the ``CI`` environment variable says we run in CI (any non-empty value but ``0``, ``false``,
    ``no``): then a missing tool is a failure, not a skip (CI installs every one)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def skip_or_fail(reason: str) -> NoReturn:
    """Skip the calling test for ``reason``, or fail it under CI (:func:`in_ci`)."""
    if in_ci():
        pytest.fail(f"{reason} [CI is set, so this is a failure, not a skip]", pytrace=False)
    pytest.skip(reason)


def program(name: str) -> str | None:
    """The path of program ``name`` (on ``PATH``, or in ``/usr/sbin``, where Debian puts the DHCP servers),
    or of ``name`` itself when it is an absolute path that exists; ``None`` when it is not installed."""
    if os.path.isabs(name):
        return name if os.path.exists(name) else None
    found = shutil.which(name) or f"/usr/sbin/{name}"
    return found if os.path.exists(found) else None


@contextlib.contextmanager
def lab(prefix: str, *programs: tuple[str, str]) -> Iterator[TestNetwork]:
    """A :class:`TestNetwork` named ``prefix``, removed at the end (also on failure), for a test that also
    needs each of ``programs`` (``(program, its Debian package)``: :func:`program`); when this machine
    cannot make one (:func:`unavailable`) or a program is missing, the test is skipped, or fails under CI."""
    reason = unavailable() or next((f"{Path(name).name} is not installed (Debian: {package})"
                                    for name, package in programs if program(name) is None), None)
    if reason:
        skip_or_fail(reason)
    with TestNetwork(prefix) as network:
        yield network


def unavailable() -> str | None:
    """Why this machine cannot make a test network (not root, no ``ip``), or ``None`` when it can."""
    if os.geteuid() != 0:
        return "a test network namespace needs root"
    if shutil.which("ip") is None:
        return "ip (iproute2) is not installed"
    return None


class TestNetwork:
    """A network namespace with ``br0`` (:data:`SERVER_IPV4`/24, :data:`SERVER_IPV6`/64, no STP, no
    forward delay; a veth port ``carrier0`` keeps it running) and taps. ``prefix``: the namespace's
    name prefix (the helper's or test's own)."""

    __test__ = False  # not a pytest test class

    def __init__(self, prefix: str) -> None:
        self.name = f"{prefix}-{os.getpid()}-{next(_count)}"
        self.processes: list[subprocess.Popen[Any]] = []
        self._open = False
        self._peers: list[TestNetwork] = []

    def ip(self, *args: str) -> None:
        """Run ``ip -n <ns> ARGS`` (raises ``CalledProcessError`` with its stderr on failure)."""
        subprocess.run(["ip", "-n", self.name, *args], check=True, capture_output=True, text=True, timeout=30)

    def __enter__(self) -> TestNetwork:
        subprocess.run(["ip", "netns", "add", self.name], check=True, capture_output=True, text=True, timeout=30)
        self._open = True
        try:
            self.ip("link", "set", "lo", "up")
            self.ip("link", "add", BRIDGE, "type", "bridge", "stp_state", "0", "forward_delay", "0")
            self.ip("addr", "add", f"{SERVER_IPV4}/24", "dev", BRIDGE)
            self.ip("addr", "add", f"{SERVER_IPV6}/64", "dev", BRIDGE, "nodad")
            self.ip("link", "set", BRIDGE, "up")
            # a port with carrier from the start, so br0 is RUNNING before any guest opens its tap
            # (Kea, for one, opens no socket on an interface that is not running)
            self.ip("link", "add", "carrier0", "type", "veth", "peer", "name", "carrier1")
            self.ip("link", "set", "carrier0", "master", BRIDGE, "up")
            self.ip("link", "set", "carrier1", "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def tap(self, name: str) -> str:
        """Make tap device ``name`` in the namespace, attached to ``br0`` and up; returns its name
        (QEMU inside the namespace opens it: ``-netdev tap,id=n0,ifname=NAME,script=no,downscript=no``)."""
        self.ip("tuntap", "add", name, "mode", "tap")
        self.ip("link", "set", name, "master", BRIDGE, "up")
        return name

    def interface(self, name: str, address: str | None = None) -> str:
        """Make an interface ``name`` (with ``address``, a CIDR, or none) in the namespace, up, outside the
        bridge: one end of a veth pair whose other end (``<name>p``) stays unused."""
        self.ip("link", "add", name, "type", "veth", "peer", "name", f"{name}p"[:15])
        if address:
            self.ip("addr", "add", address, "dev", name)
        self.ip("link", "set", name, "up")
        return name

    def peer(self, suffix: str, address: str) -> TestNetwork:
        """Another machine on the bridge: a namespace ``<name>-<suffix>`` joined to ``br0`` by a veth pair,
        its end ``eth0`` at ``address`` (a CIDR, e.g. ``192.0.2.2/24``), e.g. the site's own DHCP server.
        Closed with this network (its processes first). Returns it (:meth:`start`, :meth:`run` work there)."""
        other = TestNetwork.__new__(TestNetwork)
        other.name, other.processes, other._open, other._peers = f"{self.name}-{suffix}", [], False, []
        subprocess.run(["ip", "netns", "add", other.name], check=True, capture_output=True, text=True, timeout=30)
        other._open = True
        self._peers.append(other)
        link = f"v{suffix}"[:15]
        self.ip("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", other.name)
        self.ip("link", "set", link, "master", BRIDGE, "up")
        other.ip("link", "set", "lo", "up")
        other.ip("addr", "add", address, "dev", "eth0")
        other.ip("link", "set", "eth0", "up")
        return other

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def start(self, argv: list[str], log: Path | None = None, env: dict[str, str] | None = None,
              stdout: int | IO[Any] | None = None) -> subprocess.Popen[Any]:
        """Start ``argv`` inside the namespace in a process group of its own (stopped by :meth:`close`),
        its stdout and stderr into the file ``log`` (or ``stdout``); returns the process."""
        out: int | IO[Any] | None = stdout
        handle = None
        if log is not None:
            handle = open(log, "ab")  # noqa: SIM115 (the child holds it; closed below)
            out = handle
        try:
            proc = subprocess.Popen(self.command(argv), stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT if out is not None else None,
                                    env=env, start_new_session=True)
        finally:
            if handle is not None:
                handle.close()
        self.processes.append(proc)
        return proc

    def run(self, argv: list[str], timeout: float = 60.0, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside the namespace to completion (killed after ``timeout`` seconds), output captured."""
        return subprocess.run(self.command(argv), capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=timeout, **kwargs)

    def stop(self, proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout: float = 10.0) -> int | None:
        """Stop ``proc`` (its process group: ``sig``, then SIGKILL after ``timeout`` seconds); its exit status."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=timeout)
        return proc.returncode

    def close(self) -> None:
        """Stop every process started here and in its peers (SIGTERM, then SIGKILL), then delete the
        namespaces."""
        for peer in self._peers:
            peer.close()
        self._peers.clear()
        for proc in reversed(self.processes):
            with contextlib.suppress(Exception):
                self.stop(proc, timeout=5.0)
        self.processes.clear()
        if self._open:
            # anything still inside (a process of a process) goes with its namespace's last reference
            pids = subprocess.run(["ip", "netns", "pids", self.name], capture_output=True, text=True,
                                  timeout=30).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30)
            self._open = False

    def http_get(self, url: str, timeout: float = 10.0) -> tuple[int, str]:
        """``GET url`` from inside the namespace (curl): ``(status, body)``; status 0 when nothing answered."""
        p = self.run(["curl", "-s", "-m", str(timeout), "-o", "-", "-w", "\n%{http_code}", url], timeout=timeout + 5)
        body, _, status = p.stdout.rpartition("\n")
        return (int(status) if status.isdigit() else 0), body


__all__ = ["BRIDGE", "SERVER_IPV4", "SERVER_IPV6", "SUBNET_IPV4", "TestNetwork", "unavailable"]
