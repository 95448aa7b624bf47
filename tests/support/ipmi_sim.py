"""The real IPMI BMC simulator of Debian's ``openipmi`` (``ipmi_sim``), run for a test.

Each simulator gets its own folder: a ``lan.conf`` (one RMCP+ LAN channel on 127.0.0.1 and a free UDP
port, privilege up to admin, user 2 :data:`USERNAME` / :data:`PASSWORD`, a GUID, and, unless told not
to, ``chassis_control`` running tests/support/ipmi_chassis.py, the machine behind the BMC), a command file
(``debug msg``, one management controller at 0x20) and a state folder. Its standard input stays open (a
pipe held by the test): ``ipmi_sim`` ends at its end. With ``debug msg`` it logs each request it receives
and each response, with their bytes, to its standard output (``sim.log``): :meth:`Sim.requests` reads
them. Without ``chassis_control`` it refuses boot parameter 5 and chassis control with completion code
``0xcc``, as a BMC that answers a request with an error.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.helpers import free_port

USERNAME = "ipmi-admin"
PASSWORD = "ipmi-secret-5d2a"  # IPMI v2.0 passwords are at most 20 bytes

CHASSIS_PROGRAM = Path(__file__).with_name("ipmi_chassis.py")

_RECEIVED = re.compile(r"netfn=(0x[0-9a-f]+) cmd=(0x[0-9a-f]+)")


def free_udp_port() -> int:
    """A port free for both TCP (:func:`helpers.free_port`'s choice, below the ephemeral range) and UDP
    on 127.0.0.1, a moment ago."""
    for _ in range(50):
        port = free_port()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError("no free UDP port")


@dataclass
class Sim:
    """A running ``ipmi_sim``: its ``port`` on 127.0.0.1, its ``folder`` and the machine's ``state`` folder."""

    port: int
    folder: Path
    state: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> str:
        """What the simulator logged so far (``debug msg``), without the empty lines of its ``\\n\\r`` line ends."""
        text = (self.folder / "sim.log").read_text(errors="replace")
        return "\n".join(line for line in text.splitlines() if line.strip())

    def requests(self, netfn: int, cmd: int) -> list[str]:
        """The data bytes (``"05 a0 04 00 00 00"``) of every request with ``netfn``/``cmd`` it received."""
        out = []
        lines = self.log.splitlines()
        for i, line in enumerate(lines):
            if line.strip() != "Receive message:" or i + 1 >= len(lines):
                continue
            m = _RECEIVED.search(lines[i + 1])
            if not m or (int(m.group(1), 16), int(m.group(2), 16)) != (netfn, cmd):
                continue
            data = []
            for follow in lines[i + 3:]:
                if not re.fullmatch(r"\s*([0-9a-f]{2}\s*)+", follow):
                    break
                data += follow.split()
            out.append(" ".join(data))
        return out

    def calls(self) -> list[str]:
        """The chassis program's calls so far (``set boot pxe``, ``set power 1``...)."""
        path = self.state / "calls.log"
        return path.read_text().splitlines() if path.exists() else []

    def guest_pid(self) -> int | None:
        """The process id of the machine's QEMU guest, if one was started."""
        path = self.state / "qemu.pid"
        return int(path.read_text()) if path.exists() else None

    def stop(self) -> None:
        """Stop the simulator (end its input, then terminate; kill after 10 s) and any guest it started."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(OSError):
                if self.proc.stdin is not None:
                    self.proc.stdin.close()
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        pid = self.guest_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def start_sim(folder: Path, *, chassis: bool = True, guest: dict | None = None, deadline: float = 20.0) -> Sim:
    """Start ``ipmi_sim`` in ``folder`` (see the module docstring); ``chassis=False`` leaves out the
    ``chassis_control`` program; ``guest`` (``{"argv": [...]}``) makes the machine a QEMU guest
    (tests/support/ipmi_chassis.py). Returns once the simulator answers a session on its port (at most
    ``deadline`` seconds)."""
    folder.mkdir(parents=True, exist_ok=True)
    state = folder / "machine"
    state.mkdir(exist_ok=True)
    (folder / "sim-state").mkdir(exist_ok=True)
    if guest is not None:
        (state / "guest.json").write_text(json.dumps(guest))
    port = free_udp_port()
    chassis_line = f'  chassis_control "{sys.executable} {CHASSIS_PROGRAM} {state} 0x20"\n' if chassis else ""
    (folder / "lan.conf").write_text(
        f'name "bootserver-test-{port}"\n'
        "set_working_mc 0x20\n"
        "  startlan 1\n"
        f"    addr 127.0.0.1 {port}\n"
        "    priv_limit admin\n"
        "    allowed_auths_callback md5\n"
        "    allowed_auths_user md5\n"
        "    allowed_auths_operator md5\n"
        "    allowed_auths_admin md5\n"
        "    guid a123456789abcdefa123456789abcdef\n"
        "  endlan\n"
        f"{chassis_line}"
        f'user 2 true "{USERNAME}" "{PASSWORD}" admin 10 md5\n')
    (folder / "sim.emu").write_text("debug msg\nmc_setbmc 0x20\n"
                                    "mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02\nmc_enable 0x20\n")
    log = (folder / "sim.log").open("wb")
    proc = subprocess.Popen(["ipmi_sim", "-c", str(folder / "lan.conf"), "-f", str(folder / "sim.emu"),
                             "-s", str(folder / "sim-state")],
                            stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, cwd=folder)
    sim = Sim(port, folder, state, proc)
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"ipmi_sim exited {proc.returncode}: {sim.log[-2000:]}")
        probe = subprocess.run(["ipmitool", "-I", "lanplus", "-H", "127.0.0.1", "-p", str(port), "-U", USERNAME,
                                "-E", "-C", "3", "-N", "1", "-R", "0", "raw", "0x06", "0x01"],
                               env={"IPMI_PASSWORD": PASSWORD, "PATH": os.environ.get("PATH", "")},
                               capture_output=True, timeout=10, check=False)
        if probe.returncode == 0:
            return sim
    sim.stop()
    raise TimeoutError("ipmi_sim did not answer in time")


@pytest.fixture(name="bmc_password")
def password_fixture(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulator's password in ``$BMC_PASSWORD``, where the configs' ``password_env`` names it."""
    monkeypatch.setenv("BMC_PASSWORD", PASSWORD)


@pytest.fixture(name="sim")
def sim_fixture(tmp_path: Path):
    """A running :class:`Sim` whose machine is a power switch (no guest), stopped after the test."""
    sim = start_sim(tmp_path / "ipmi")
    try:
        yield sim
    finally:
        sim.stop()
