"""``bootserver provision / deprovision / devices`` with the IPMI provider against Debian's real BMC
simulator ``ipmi_sim`` (tests/support/ipmi_sim.py) through the real ``ipmitool``: the boot-flags bytes the BMC
receives, power, the faults (wrong password, unknown user, a silent BMC, a BMC refusing the boot flags)
as one line within the node's timeout, the config's refusals. What every BMC provider does alike (password
sources, ``--grace``, ``--wait`` through a running server) is tests/providers/test_bmc.py; the QEMU guest
behind the simulator is tests/e2e/test_ipmi_boot.py."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.configs import STREAM, config_doc
from support.helpers import cli, recorded_devices, write_config
from support.ipmi_sim import (  # noqa: F401 - the fixtures: sim, bmc_password
    PASSWORD,
    USERNAME,
    free_udp_port,
    password_fixture,
    sim_fixture,
    start_sim,
)

from bootserver.providers.ipmi import Bmc, boot_flags, failure_reason

CHASSIS, SET_BOOT_OPTIONS, CHASSIS_CONTROL = 0x00, 0x08, 0x02


def make_config(tmp_path: Path, reference: Path, bmc_port: int, **profile_ipmi: Any) -> Path:
    ipmi = {"address": "127.0.0.1", "port": bmc_port, "username": USERNAME, "password_env": "BMC_PASSWORD",
            "timeout": 4, **profile_ipmi}
    doc = config_doc(server={"listen": "127.0.0.1:8080"},
                     profiles={"onprem": {"stream": STREAM, "install_dev": "/dev/sda", "provider": "ipmi",
                                          "ipmi": ipmi}},
                     nodes={"bmc-0": {"profile": "onprem", "mac": ["52:54:00:00:00:21"]}})
    return write_config(tmp_path / "bootserver.yaml", doc)


def test_boot_flags_are_ironics_bytes():
    assert boot_flags("uefi", False) == (0x05, 0xa0, 0x04, 0, 0, 0)
    assert boot_flags("uefi", True) == (0x05, 0xe0, 0x04, 0, 0, 0)
    assert boot_flags("legacy", False) == (0x05, 0x80, 0x04, 0, 0, 0)
    assert boot_flags("legacy", True) == (0x05, 0xc0, 0x04, 0, 0, 0)


def test_provision_sets_a_one_time_uefi_network_boot_then_powers_on(sim, bmc_password, tmp_path, reference,
                                                                   capsys, caplog):
    config = make_config(tmp_path, reference, sim.port)
    rc, out, err = cli(capsys, "provision", "bmc-0", "--no-wait", "--config", str(config), "--log-level", "debug")
    assert rc == 0, err
    assert out == f"bmc-0 127.0.0.1:{sim.port} On\n"
    assert f"bootserver: bmc-0: BMC 127.0.0.1:{sim.port}: next boot from the network (uefi, once); " \
           "power up (was Off)" in err
    # what the BMC received (ipmi_sim's debug log): Set System Boot Options, parameter 5, 0xa0 = valid,
    # one time, EFI; 0x04 = PXE; then Chassis Control power up
    assert sim.requests(CHASSIS, SET_BOOT_OPTIONS) == ["05 a0 04 00 00 00"]
    assert sim.requests(CHASSIS, CHASSIS_CONTROL) == ["01"]
    assert sim.calls()[-3:] == ["set boot pxe", "set power 1", "get power"]
    state = recorded_devices(tmp_path / "state")["bmc-0"]
    assert {k: state[k] for k in ("provider", "id", "address", "port", "state", "boot")} == {
        "provider": "ipmi", "id": f"127.0.0.1:{sim.port}", "address": "127.0.0.1", "port": sim.port,
        "state": "On", "boot": {"device": "pxe", "mode": "uefi", "persistent": False}}
    assert PASSWORD not in out + err + caplog.text + json.dumps(state)


def test_a_machine_that_is_on_is_power_cycled_and_persistent_legacy_is_sent_when_asked(
        sim, bmc_password, tmp_path, reference, capsys):
    (sim.state / "power").write_text("1")
    config = make_config(tmp_path, reference, sim.port, boot_mode="legacy", persistent=True)
    rc, _out, err = cli(capsys, "provision", "bmc-0", "--no-wait", "--config", str(config))
    assert rc == 0, err
    assert "next boot from the network (legacy, every boot); power cycle (was On)" in err
    assert sim.requests(CHASSIS, SET_BOOT_OPTIONS) == ["05 c0 04 00 00 00"]
    assert sim.requests(CHASSIS, CHASSIS_CONTROL) == ["02"]
    assert "set power 0" in sim.calls()  # the simulator cycles: off, then on a second later


def test_devices_then_deprovision_soft_then_hard_off_and_clear_the_boot_flags(sim, bmc_password, tmp_path,
                                                                             reference, capsys):
    config = make_config(tmp_path, reference, sim.port)
    rc, out, err = cli(capsys, "devices", "--config", str(config))
    assert rc == 0, err
    assert out == f"bmc-0 127.0.0.1:{sim.port} Off new\n"
    rc, _out, err = cli(capsys, "provision", "bmc-0", "--no-wait", "--config", str(config))
    assert rc == 0, err
    rc, out, err = cli(capsys, "devices", "--config", str(config))
    assert out == f"bmc-0 127.0.0.1:{sim.port} On new\n"
    started = time.monotonic()
    rc, out, err = cli(capsys, "deprovision", "bmc-0", "--grace", "1", "--config", str(config))
    assert rc == 0, err
    assert time.monotonic() - started < 10
    assert out == f"bmc-0 127.0.0.1:{sim.port} Off\n"
    assert f"BMC 127.0.0.1:{sim.port}: powered down after 1 s of soft shutdown" in err
    # soft shutdown (0x05; the machine has no ACPI handler and stays on), then power down (0x00)
    assert sim.requests(CHASSIS, CHASSIS_CONTROL)[-2:] == ["05", "00"]
    assert sim.requests(CHASSIS, SET_BOOT_OPTIONS)[-1] == "05 00 00 00 00 00"  # boot flags no longer valid
    assert (sim.state / "power").read_text() == "0"
    assert "bmc-0" not in recorded_devices(tmp_path / "state")


def one_line_error(capsys, config: Path, *, within: float) -> str:
    started = time.monotonic()
    rc, out, err = cli(capsys, "provision", "bmc-0", "--no-wait", "--config", str(config))
    elapsed = time.monotonic() - started
    assert rc == 1, err
    assert out == "" and len(err.splitlines()) == 1, err
    assert PASSWORD not in err
    assert elapsed < within, f"{elapsed:.1f} s"
    return err


def test_a_wrong_password_is_one_line_naming_the_node_and_bmc(sim, tmp_path, reference, capsys, monkeypatch,
                                                              caplog):
    monkeypatch.setenv("BMC_PASSWORD", "not-the-password")
    err = one_line_error(capsys, make_config(tmp_path, reference, sim.port), within=4)
    assert err == (f"bootserver: node bmc-0: BMC 127.0.0.1:{sim.port}: Get Chassis Status: wrong password for "
                   f"user {USERNAME} (RAKP 2 HMAC is invalid)\n")
    assert "not-the-password" not in err + caplog.text
    assert sim.calls() == []


def test_an_unknown_user_is_one_line(sim, bmc_password, tmp_path, reference, capsys):
    err = one_line_error(capsys, make_config(tmp_path, reference, sim.port, username="nobody"), within=4)
    assert err == (f"bootserver: node bmc-0: BMC 127.0.0.1:{sim.port}: Get Chassis Status: no user nobody on "
                   "the BMC (RAKP 2: unauthorized name)\n")


def test_a_cipher_suite_the_bmc_lacks_is_one_line(sim, bmc_password, tmp_path, reference, capsys):
    err = one_line_error(capsys, make_config(tmp_path, reference, sim.port, cipher_suite=17), within=4)
    assert f"node bmc-0: BMC 127.0.0.1:{sim.port}: Get Chassis Status: the BMC does not offer cipher suite 17" in err


def test_a_silent_bmc_is_one_line_within_the_node_timeout(bmc_password, tmp_path, reference, capsys):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:  # takes every datagram, answers none
        silent.bind(("127.0.0.1", free_udp_port()))
        port = silent.getsockname()[1]
        err = one_line_error(capsys, make_config(tmp_path, reference, port, timeout=3), within=3.5)
    assert err == f"bootserver: node bmc-0: BMC 127.0.0.1:{port}: Get Chassis Status: no answer within 3 s\n"


def test_a_bmc_refusing_the_boot_flags_fails_before_anything_is_powered(bmc_password, tmp_path, reference,
                                                                        capsys):
    sim = start_sim(tmp_path / "ipmi", chassis=False)  # refuses boot parameter 5 with 0xcc
    try:
        err = one_line_error(capsys, make_config(tmp_path, reference, sim.port), within=4)
        assert err == (f"bootserver: node bmc-0: BMC 127.0.0.1:{sim.port}: Set System Boot Options (boot flags): "
                       "the BMC answered completion code 0xcc: Invalid data field in request\n")
        assert sim.requests(CHASSIS, SET_BOOT_OPTIONS) == ["05 a0 04 00 00 00"]
        assert sim.requests(CHASSIS, CHASSIS_CONTROL) == []  # nothing was powered
    finally:
        sim.stop()
    assert "bmc-0" not in recorded_devices(tmp_path / "state")


@pytest.mark.parametrize(("where", "key"), [("node", "ipmi"), ("profile", "redfish")])
def test_check_config_refuses_virtual_media_on_an_ipmi_node(tmp_path, reference, capsys, where, key):
    config = make_config(tmp_path, reference, 623)
    doc = yaml.safe_load(config.read_text())
    holder = doc["nodes"]["bmc-0"] if where == "node" else doc["profiles"]["onprem"]
    holder.setdefault(key, {})["boot_source"] = "virtual-media"
    write_config(config, doc)
    rc, _, err = cli(capsys, "check-config", "--config", str(config))
    assert rc == 2
    keypath = "nodes.bmc-0.ipmi.boot_source" if where == "node" else "profiles.onprem.redfish.boot_source"
    assert err.startswith(f"bootserver: {config}: {keypath}: node bmc-0 uses provider ipmi, and IPMI has no "
                          "virtual media")


@pytest.mark.parametrize(("setting", "message"), [
    ({"cipher_suite": 0}, "profiles.onprem.ipmi.cipher_suite: cipher suite 0 authenticates nothing"),
    ({"address": "https://bmc.example"}, "profiles.onprem.ipmi.address: must be the BMC's host name"),
    ({"port": 0}, "profiles.onprem.ipmi.port: "),
    ({"boot_mode": "bios"}, "profiles.onprem.ipmi.boot_mode: "),
    ({"password_file": "pw"}, "set password_file or password_env, not both"),
])
def test_bad_ipmi_settings_name_the_key(tmp_path, reference, capsys, setting, message):
    config = make_config(tmp_path, reference, 623, **setting)
    rc, _, err = cli(capsys, "check-config", "--config", str(config))
    assert rc == 2
    assert message in err, err


def test_failure_reasons_of_ipmitool():
    """ipmitool's own words (``-v``) for what the simulator cannot produce."""
    assert failure_reason("Address lookup for bmc.invalid failed\nCould not open socket!\n"
                          "Error: Unable to establish IPMI v2 / RMCP+ session\n", "u", 3, 5) == \
        "Address lookup for bmc.invalid failed"
    assert failure_reason("RAKP 2 message indicates an error : insufficient resources for session\n"
                          "Error: Unable to establish IPMI v2 / RMCP+ session\n", "u", 3, 5) == \
        "the BMC refused the session: insufficient resources for session"
    assert failure_reason("Error: something new\n", "u", 3, 5) == "Error: something new"


def test_the_password_reaches_ipmitool_in_its_environment_never_on_its_command_line():
    argv = Bmc("bmc-0", "127.0.0.1", 623, USERNAME, PASSWORD).argv(0x00, 0x01)
    assert "-E" in argv and PASSWORD not in " ".join(argv)
    assert PASSWORD not in repr(Bmc("bmc-0", "127.0.0.1", 623, USERNAME, PASSWORD))
