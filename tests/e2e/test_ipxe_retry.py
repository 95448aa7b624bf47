"""Real iPXE (Debian's ``ipxe.lkrn`` under SeaBIOS in QEMU) against a ``503``, the answer a storm gets
(issue 40; README, "A power-on storm"): a ``chain`` whose first answer is ``503`` with ``Retry-After: 2``
is retried after about 2 s and the machine boots what ``bootserver serve`` hands out; a ``503`` without
``Retry-After`` fails the ``chain`` at once and the machine falls through to its next boot device
(SeaBIOS: none left). This is the behaviour benchmarks/boot_storm.py models.

The ``503`` comes from the test's own HTTP server in front of ours (the standard library's), so its
headers are exactly the ones under test; once it has refused, it redirects the retry to the node's
signed chain URL on ``serve``, and iPXE follows the redirect."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.helpers import free_port

from . import rig
from .stack import NODES, Stack, need

pytestmark = pytest.mark.e2e

BOOT_TIMEOUT = 120.0  # seconds per guest boot; a healthy one takes ~10-20 s under TCG


class Front(http.server.ThreadingHTTPServer):
    """The test's HTTP server: ``/retry-after-2``: a ``503`` with ``Retry-After: 2`` the first time, a
    ``302`` to :attr:`target` after; ``/no-retry-after``: always a ``503`` without it. Notes the
    monotonic time of every request by path (:attr:`seen`)."""

    def __init__(self, port: int, target: str) -> None:
        self.target = target
        self.seen: dict[str, list[float]] = {}
        super().__init__(("127.0.0.1", port), FrontHandler)


class FrontHandler(http.server.BaseHTTPRequestHandler):
    server: Front

    def do_GET(self) -> None:
        seen = self.server.seen.setdefault(self.path, [])
        seen.append(time.monotonic())
        if self.path == "/retry-after-2" and len(seen) > 1:
            self.send_response(302)
            self.send_header("Location", self.server.target)
        else:
            self.send_response(503)
            if self.path == "/retry-after-2":
                self.send_header("Retry-After", "2")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def front(guest_stack: Stack) -> Iterator[Front]:
    server = Front(free_port(), rig.guest_url(guest_stack.port, guest_stack.chain_path(NODES["install-0"].name)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_a_503_with_retry_after_is_retried_and_the_machine_boots(tools: rig.Tools, guest_stack: Stack,
                                                               front: Front, tmp_path: Path) -> None:
    need(tools, "qemu", "ipxe_lkrn")
    port = front.server_address[1]
    result = rig.boot_ipxe(tools, rig.guest_url(port, "/retry-after-2"), tmp_path / "serial.log",
                           port=guest_stack.port, extra_ports=(port,), timeout=BOOT_TIMEOUT,
                           mac=NODES["install-0"].mac)
    first, again = front.seen["/retry-after-2"][:2]
    assert len(front.seen["/retry-after-2"]) == 2, front.seen
    assert 2.0 <= again - first < 10.0, f"iPXE retried after {again - first:.1f} s"
    assert result.reached_init and result.done and result.failure is None, result.tail(60)
    assert result.rootfs_sha256 == guest_stack.sha256("rootfs"), result.tail()


def test_a_503_without_retry_after_fails_the_chain_and_falls_through(tools: rig.Tools, guest_stack: Stack,
                                                                     front: Front, tmp_path: Path) -> None:
    need(tools, "qemu", "ipxe_lkrn")
    port = front.server_address[1]
    result = rig.boot_ipxe(tools, rig.guest_url(port, "/no-retry-after"), tmp_path / "serial.log",
                           port=guest_stack.port, extra_ports=(port,), timeout=BOOT_TIMEOUT,
                           mac=NODES["install-0"].mac)
    assert rig.MARK_BIOS_GAVE_UP in result.log, result.tail(60)  # the next boot device: none here
    assert not result.reached_init
    assert len(front.seen["/no-retry-after"]) == 1, front.seen  # not retried
