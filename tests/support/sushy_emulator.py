"""The real Redfish emulator of OpenStack's sushy-tools (``sushy-emulator``), run for a test.

``sushy-emulator --help`` and its defaults: it listens on every interface on port 8000 unless told
otherwise, keeps the fake driver's systems in a sqlite file under ``SUSHY_EMULATOR_STATE_DIR`` (default
a shared folder in /tmp) and turns on HTTP basic auth when ``SUSHY_EMULATOR_AUTH_FILE`` names an
htpasswd file (bcrypt hashes only). So each emulator here gets its own config file: 127.0.0.1 and a
free port (also on the command line), the fake systems driver (``--fake``), a private state folder and
an htpasswd file with one bcrypt user. Its fake driver applies a power change 1-11 s after the request
(``pending_power``), like a real BMC; it stores the boot target but always reports
``BootSourceOverrideEnabled: Continuous``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import requests
import yaml

from support.helpers import free_port, write_config

USERNAME = "bmc-admin"
PASSWORD = "bmc-secret-7c1e-do-not-print"

#: Two fake systems: one off, one on, each with one NIC.
SYSTEMS = [
    {"uuid": "8a1e7c52-3c2b-4f1e-9c0a-000000000001", "name": "rf-0", "power_state": "Off",
     "nics": [{"mac": "52:54:00:00:00:01", "ip": "192.0.2.10"}]},
    {"uuid": "8a1e7c52-3c2b-4f1e-9c0a-000000000002", "name": "rf-1", "power_state": "On",
     "nics": [{"mac": "52:54:00:00:00:02", "ip": "192.0.2.11"}]},
]


@dataclass
class Emulator:
    """A running ``sushy-emulator``: ``url`` is its base URL; ``get``/``system`` read it as a client."""

    url: str
    folder: Path
    proc: subprocess.Popen[bytes] | None = None
    systems: list[dict[str, Any]] = field(default_factory=lambda: list(SYSTEMS))

    def path(self, i: int) -> str:
        """The member path of system ``i``."""
        return f"/redfish/v1/Systems/{self.systems[i]['uuid']}"

    def get(self, path: str) -> dict[str, Any]:
        """GET ``path`` with the right credentials; the JSON answer."""
        r = requests.get(self.url + path, auth=(USERNAME, PASSWORD), timeout=10)
        r.raise_for_status()
        return r.json()

    def system(self, i: int) -> dict[str, Any]:
        """The ``ComputerSystem`` resource of system ``i`` as the emulator reports it now."""
        return self.get(self.path(i))

    def wait_power(self, i: int, state: str, seconds: float = 20.0) -> str:
        """Poll system ``i`` until its PowerState is ``state`` (the fake driver applies a change 1-11 s
        after the request), at most ``seconds``; returns the last PowerState seen."""
        deadline = time.monotonic() + seconds
        while True:
            power = self.system(i)["PowerState"]
            if power == state or time.monotonic() > deadline:
                return power
            time.sleep(0.25)  # polling interval of a bounded wait for the emulator's own clock

    def stop(self) -> None:
        """Terminate the emulator (kill it after 10 s)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_emulator(folder: Path, deadline: float = 30.0) -> Emulator:
    """Start ``sushy-emulator`` on 127.0.0.1 with the fake driver, basic auth and :data:`SYSTEMS`;
    return once its service root answers (at most ``deadline`` seconds)."""
    folder.mkdir(parents=True, exist_ok=True)
    htpasswd = folder / "htpasswd"
    digest = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    htpasswd.write_text(f"{USERNAME}:{digest}\n")
    port = free_port()
    conf = folder / "emulator.conf"
    conf.write_text(
        f"SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n"
        f"SUSHY_EMULATOR_LISTEN_PORT = {port}\n"
        f"SUSHY_EMULATOR_FAKE_DRIVER = True\n"
        f"SUSHY_EMULATOR_STATE_DIR = {str(folder / 'state')!r}\n"
        f"SUSHY_EMULATOR_AUTH_FILE = {str(htpasswd)!r}\n"
        f"SUSHY_EMULATOR_FAKE_SYSTEMS = {json.dumps(SYSTEMS)}\n"
    )
    log = (folder / "emulator.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "sushy_tools.emulator.main", "--config", str(conf), "--fake",
         "-i", "127.0.0.1", "-p", str(port)],
        stdout=log, stderr=subprocess.STDOUT)
    emulator = Emulator(f"http://127.0.0.1:{port}", folder, proc)
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"sushy-emulator exited {proc.returncode}: {(folder / 'emulator.log').read_text()}")
        try:
            if requests.get(emulator.url + "/redfish/v1/", timeout=2).status_code == 200:
                return emulator
        except requests.ConnectionError:
            pass
        time.sleep(0.05)  # polling interval while waiting for the port, bounded by the deadline
    emulator.stop()
    raise TimeoutError("sushy-emulator did not answer in time")


@pytest.fixture(name="bmc_password")
def password_fixture(monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulator's password in ``$BMC_PASSWORD``, where the configs' ``password_env`` names it."""
    monkeypatch.setenv("BMC_PASSWORD", PASSWORD)


#: rf-0's NIC (the first of :data:`SYSTEMS`), and a static network for it (NMState).
RF0_MAC = "52:54:00:00:00:01"
RF0_NETWORK = {
    "interfaces": [{"name": "nic0", "type": "ethernet", "mac-address": RF0_MAC,
                    "ipv4": {"enabled": True, "address": [{"ip": "192.0.2.10", "prefix-length": 24}]}}],
    "routes": {"config": [{"destination": "0.0.0.0/0", "next-hop-address": "192.0.2.1"}]},
}


def rf0_setup(boot_setup: Any, emulator: Emulator, boot_source: str, network: Any = RF0_NETWORK) -> Any:
    """``boot_setup`` (the tests' fixture) for node rf-0, the emulator's first system, with ``network``,
    an admin listener and provider ``redfish`` with ``boot_source`` (password in ``$BMC_PASSWORD``)."""
    setup = boot_setup(100_000, {"rf-0": {"profile": "master", "mac": [RF0_MAC], "network": network}})
    doc = yaml.safe_load(setup.config.read_text())
    doc["server"]["admin"] = {"listen": f"127.0.0.1:{free_port()}"}
    doc["profiles"]["master"] |= {"provider": "redfish", "redfish": {
        "address": emulator.url, "system": emulator.path(0), "username": USERNAME,
        "password_env": "BMC_PASSWORD", "timeout": 10, "boot_source": boot_source}}
    write_config(setup.config, doc)
    return setup


@pytest.fixture(name="emulator")
def emulator_fixture(tmp_path: Path):
    """A running :class:`Emulator`, stopped after the test."""
    emulator = start_emulator(tmp_path / "sushy")
    try:
        yield emulator
    finally:
        emulator.stop()
