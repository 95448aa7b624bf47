"""What every BMC provider does alike (:mod:`bootserver.providers.bmc`), written once and run against both:
Redfish with the real ``sushy-emulator`` (tests/support/sushy_emulator.py) and IPMI with Debian's real
``ipmi_sim`` through the real ``ipmitool`` (tests/support/ipmi_sim.py). The password sources, the
settings every BMC has, the platform of a BMC node, ``devices`` then ``deprovision --grace`` (power off,
boot setting undone, record cleared), and ``provision`` following the node through a running server.
What only one protocol does is in tests/providers/test_redfish.py and tests/providers/test_ipmi.py."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from support import ipmi_sim, sushy_emulator
from support.configs import STREAM, config_doc
from support.helpers import checkin_command, cli, free_port, recorded_devices, write_config
from support.server import synced_server

from bootserver.cli import build_parser, provider_options
from bootserver.config import load_config
from bootserver.inventory import inventory
from bootserver.provision import WaitPolicy, provision

CHASSIS, SET_BOOT_OPTIONS = 0x00, 0x08


@dataclass
class Kind:
    """One BMC provider as the tests drive it: its ``provider`` name (also its settings key), the node
    the configs name, that node's MAC, and the BMC's user and password."""

    provider: str
    node: str
    mac: str
    username: str
    password: str

    def settings(self, address: Any, **more: Any) -> dict[str, Any]:
        """The profile's BMC settings for a BMC at ``address`` (a URL for Redfish, and the emulator's
        first system; a UDP port on 127.0.0.1 for IPMI), the password in ``$BMC_PASSWORD``."""
        where = ({"address": address, "system": "/redfish/v1/Systems/" + sushy_emulator.SYSTEMS[0]["uuid"]}
                 if self.provider == "redfish" else {"address": "127.0.0.1", "port": address})
        return {**where, "username": self.username, "password_env": "BMC_PASSWORD", "timeout": 5, **more}

    def config(self, tmp_path: Path, reference: Path, address: Any, **more: Any) -> Path:
        """A config with one install-mode profile of this provider and the node."""
        doc = config_doc(server={"listen": "127.0.0.1:8080"},
                         profiles={"onprem": {"stream": STREAM, "install_dev": "/dev/sda", "provider": self.provider,
                                              self.provider: self.settings(address, **more)}},
                         nodes={self.node: {"profile": "onprem", "mac": [self.mac]}})
        return write_config(tmp_path / "bootserver.yaml", doc)


KINDS = {
    "redfish": Kind("redfish", "rf-0", sushy_emulator.SYSTEMS[0]["nics"][0]["mac"], sushy_emulator.USERNAME,
                    sushy_emulator.PASSWORD),
    "ipmi": Kind("ipmi", "bmc-0", "52:54:00:00:00:21", ipmi_sim.USERNAME, ipmi_sim.PASSWORD),
}


@pytest.fixture(params=list(KINDS))
def kind(request: pytest.FixtureRequest) -> Kind:
    return KINDS[request.param]


@dataclass
class Running:
    """A running BMC of ``kind`` and what the tests read of it."""

    kind: Kind
    bmc: Any  # sushy_emulator.Emulator or ipmi_sim.Sim

    @property
    def address(self) -> Any:
        return self.bmc.url if self.kind.provider == "redfish" else self.bmc.port

    @property
    def machine(self) -> str:
        """How output lines name the node's machine: its system path, or its BMC."""
        return self.bmc.path(0) if self.kind.provider == "redfish" else f"127.0.0.1:{self.bmc.port}"

    def config(self, tmp_path: Path, reference: Path, **more: Any) -> Path:
        return self.kind.config(tmp_path, reference, self.address, **more)

    def power(self) -> str:
        """The machine's power as the BMC holds it now (``On``/``Off``)."""
        if self.kind.provider == "redfish":
            return str(self.bmc.system(0)["PowerState"])
        return "On" if (self.bmc.state / "power").read_text().strip() == "1" else "Off"

    def wait_power(self, state: str) -> None:
        """Until the machine's power is ``state`` (the emulator applies a change 1-11 s late)."""
        if self.kind.provider == "redfish":
            self.bmc.wait_power(0, state)
        assert self.power() == state

    def network_boot_asked(self) -> bool:
        """Whether the BMC holds a one-time network boot for the machine now: Redfish's boot override
        target ``Pxe``; IPMI's last boot flags sent, ``05 a0 04 00 00 00``."""
        if self.kind.provider == "redfish":
            return bool(self.bmc.system(0)["Boot"]["BootSourceOverrideTarget"] == "Pxe")
        return bool(self.bmc.requests(CHASSIS, SET_BOOT_OPTIONS)[-1:] == ["05 a0 04 00 00 00"])


@pytest.fixture
def running(kind: Kind, tmp_path: Path) -> Iterator[Running]:
    bmc = (sushy_emulator.start_emulator(tmp_path / "sushy") if kind.provider == "redfish"
           else ipmi_sim.start_sim(tmp_path / "ipmi"))
    try:
        yield Running(kind, bmc)
    finally:
        bmc.stop()


@pytest.fixture
def bmc_password(monkeypatch: pytest.MonkeyPatch, kind: Kind) -> None:
    monkeypatch.setenv("BMC_PASSWORD", kind.password)


def test_a_missing_password_is_bad_input_before_any_call(kind, tmp_path, reference, capsys, monkeypatch):
    monkeypatch.delenv("BMC_PASSWORD", raising=False)
    config = kind.config(tmp_path, reference, "http://127.0.0.1:9" if kind.provider == "redfish" else 9)
    for command in ("provision", "deprovision"):
        rc, out, err = cli(capsys, command, kind.node, "--config", str(config))
        assert (rc, out) == (2, "")
        assert err == f"bootserver: node {kind.node}: {kind.provider}.password_env: $BMC_PASSWORD is not set\n"


@pytest.mark.parametrize(("content", "reason"), [(None, "No such file or directory"), ("\n", "is empty")])
def test_a_password_file_that_cannot_give_a_password_is_one_line(kind, tmp_path, reference, capsys, content,
                                                                 reason):
    config = kind.config(tmp_path, reference, "http://127.0.0.1:9" if kind.provider == "redfish" else 9)
    doc = yaml.safe_load(config.read_text())
    doc["nodes"][kind.node][kind.provider] = {"password_file": "bmc.pw"}  # drops the profile's password_env
    write_config(config, doc)
    if content is not None:
        (tmp_path / "bmc.pw").write_text(content)
    rc, out, err = cli(capsys, "provision", kind.node, "--no-wait", "--config", str(config))
    assert (rc, out) == (2, "")
    assert err.startswith(f"bootserver: node {kind.node}: {kind.provider}.password_file: {tmp_path / 'bmc.pw'}")
    assert reason in err and len(err.splitlines()) == 1


def test_password_file_relative_to_the_config(running, tmp_path, reference, capsys, monkeypatch, caplog):
    kind = running.kind
    monkeypatch.delenv("BMC_PASSWORD", raising=False)
    (tmp_path / "bmc.pw").write_text(kind.password + "\n")
    config = running.config(tmp_path, reference)
    doc = yaml.safe_load(config.read_text())
    doc["nodes"][kind.node][kind.provider] = {"password_file": "bmc.pw"}
    write_config(config, doc)
    rc, out, err = cli(capsys, "provision", kind.node, "--no-wait", "--config", str(config))
    assert rc == 0, err
    assert out.startswith(f"{kind.node} {running.machine} ")
    assert kind.password not in out + err + caplog.text


@pytest.mark.parametrize(("setting", "message"), [
    ({"password_file": "pw"}, "password_env: set password_file or password_env, not both"),
    ({"username": "two words"}, "username: must be a non-empty string without whitespace"),
    ({"timeout": 0}, "timeout: "),
    ({"boot_mode": "bios"}, "boot_mode: "),
])
def test_bad_settings_name_the_key(kind, tmp_path, reference, capsys, setting, message):
    config = kind.config(tmp_path, reference, "https://bmc.example" if kind.provider == "redfish" else 623,
                         **setting)
    rc, out, err = cli(capsys, "check-config", "--config", str(config))
    assert (rc, out) == (2, "")
    assert err.startswith(f"bootserver: {config}: profiles.onprem.{kind.provider}.{message}"), err


def test_a_node_without_an_address_is_one_line_naming_the_key(kind, tmp_path, reference, capsys, bmc_password):
    config = kind.config(tmp_path, reference, "https://bmc.example" if kind.provider == "redfish" else 623)
    doc = yaml.safe_load(config.read_text())
    del doc["profiles"]["onprem"][kind.provider]["address"]
    write_config(config, doc)
    rc, _out, err = cli(capsys, "provision", kind.node, "--config", str(config))
    assert rc == 2
    assert err == (f"bootserver: node {kind.node}: no {kind.provider}.address: set it on the node or its "
                   "profile\n")


def test_bmc_nodes_boot_the_metal_platform_without_a_console(kind, tmp_path, reference, capsys):
    config = kind.config(tmp_path, reference, "https://bmc.example" if kind.provider == "redfish" else 623)
    rc, out, err = cli(capsys, "render", "ipxe", kind.node, "--config", str(config))
    assert rc == 0, err
    kernel = next(line for line in out.splitlines() if line.startswith("kernel ")).split()
    assert "coreos.inst.platform_id=metal" in kernel
    assert not any(w.startswith("console=") for w in kernel)


def test_one_grace_option_reaches_every_bmc_provider(tmp_path, reference, capsys):
    options = provider_options(build_parser().parse_args(["deprovision", "n", "--grace", "7"]))
    assert options["ipmi"].grace == options["redfish"].grace == 7
    assert options["ipmi"] == options["redfish"]  # one options type for the family
    rc, _out, err = cli(capsys, "deprovision", "rf-0", "--grace", "-1", "--config",
                        str(KINDS["redfish"].config(tmp_path, reference, "https://bmc.example")))
    assert (rc, err) == (2, "bootserver: --grace: must not be negative, got -1\n")


def test_devices_then_deprovision_powers_off_and_undoes_the_boot(running, bmc_password, tmp_path, reference,
                                                                 capsys):
    kind = running.kind
    config = running.config(tmp_path, reference)
    secure = " secure-boot:off" if kind.provider == "redfish" else ""
    rc, out, err = cli(capsys, "devices", "--config", str(config))
    assert rc == 0, err
    assert out == f"{kind.node} {running.machine} Off new{secure}\n"
    rc, out, err = cli(capsys, "provision", kind.node, "--no-wait", "--config", str(config))
    assert rc == 0, err
    assert kind.node in recorded_devices(tmp_path / "state")
    assert running.network_boot_asked()
    running.wait_power("On")
    rc, out, err = cli(capsys, "devices", "--config", str(config))
    assert out == f"{kind.node} {running.machine} On new{secure}\n"
    rc, out, err = cli(capsys, "deprovision", kind.node, "--grace", "1", "--config", str(config))
    assert rc == 0, err
    assert out == f"{kind.node} {running.machine} Off\n"
    # shut down within the grace, or forced off after it: the message says which
    assert f"{kind.node}: " in err and (": shut down\n" in err or " after 1 s of " in err), err
    assert running.power() == "Off"
    assert not running.network_boot_asked()
    assert kind.node not in recorded_devices(tmp_path / "state")


def test_devices_says_error_for_a_bmc_that_is_down(kind, bmc_password, tmp_path, reference, capsys, caplog):
    port = free_port()
    config = kind.config(tmp_path, reference, f"http://127.0.0.1:{port}" if kind.provider == "redfish" else port,
                         timeout=2)
    rc, out, err = cli(capsys, "devices", "--config", str(config))
    assert rc == 0, err
    if kind.provider == "redfish":  # the system the settings name; the Secure Boot state unknown
        assert out == f"{kind.node} {kind.settings(port)['system']} error new secure-boot:-\n"
    else:
        assert out == f"{kind.node} 127.0.0.1:{port} error new\n"
    assert f"127.0.0.1:{port}" in caplog.text


async def test_wait_follows_the_node_through_script_stub_and_config(running, bmc_password, tmp_path,
                                                                    boot_setup):
    """``provision`` (with the BMC) waits while the node boots from a running server: its script
    through ``/boot.ipxe?mac=``, the stub, then (its installed system's first boot) the real config,
    then its check-in unit's command. Each poll pause of the wait plays the next step, so every stage
    is seen."""
    kind = running.kind
    setup = boot_setup(100_000, {kind.node: {"profile": "master", "mac": [kind.mac], "addresses": ["127.0.0.1"]}})
    doc = yaml.safe_load(setup.config.read_text())
    doc["server"]["admin"] = {"listen": f"127.0.0.1:{free_port()}"}  # not listen's port + 1, which may be taken
    doc["profiles"]["master"] |= {"provider": kind.provider, kind.provider: kind.settings(running.address)}
    write_config(setup.config, doc)
    config = load_config(str(setup.config))
    seen: dict[str, Any] = {}

    def step_script() -> None:
        r = requests.get(f"http://127.0.0.1:{setup.port}/boot.ipxe?mac={kind.mac}", timeout=10)
        assert r.status_code == 200, r.text
        seen["kargs"] = next(line for line in r.text.splitlines() if line.startswith("kernel ")).split()[2:]

    def step_stub() -> None:
        url = next(w.split("=", 1)[1] for w in seen["kargs"] if w.startswith("coreos.inst.ignition_url="))
        r = requests.get(url, timeout=10)
        assert r.status_code == 200
        seen["stub"] = r.json()
        seen["merge"] = seen["stub"]["ignition"]["config"]["merge"][0]["source"]

    def step_config() -> None:
        r = requests.get(seen["merge"], timeout=10)
        assert r.status_code == 200 and r.content == setup.master_ign.read_bytes()

    def step_checkin() -> None:  # the installed system's check-in unit: its own command, real curl
        done = subprocess.run(checkin_command(seen["stub"]), capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr

    steps: list[Callable[[], None]] = [step_script, step_stub, step_config, step_checkin]
    said: list[str] = []

    def pause(seconds: float) -> None:
        if steps:
            steps.pop(0)()

    args = provider_options(build_parser().parse_args(["provision", kind.node]))
    async with synced_server(setup.config, setup.port):
        lines = await asyncio.get_running_loop().run_in_executor(None, lambda: provision(
            config, args, [inventory(config)[kind.node]], policy=WaitPolicy(timeout=60, interval=0.1), sleep=pause,
            say=lambda node, message: said.append(message)))
    assert [m for m in said if m.startswith(("stage", "waiting"))] == [
        "waiting for stage up: its system checks in once on the network (now new)", "stage ipxe",
        "stage installing", "stage installed", "stage up"]
    assert lines[0].startswith(f"{kind.node} {running.machine} ")
    assert "coreos.inst.platform_id=metal" in seen["kargs"]
    assert not any(w.startswith("console=") for w in seen["kargs"])
    assert running.network_boot_asked()
