"""``bootserver provision / deprovision / devices`` with the Redfish provider against the real
``sushy-emulator`` (tests/support/sushy_emulator.py): boot override, power, the system recorded, errors as
one line, Secure Boot. What every BMC provider does alike (password sources, ``--grace``, ``devices`` and
``deprovision``, ``--wait`` through a running server) is tests/providers/test_bmc.py."""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path
from typing import Any

import requests
import yaml
from support.configs import STREAM, config_doc
from support.helpers import cli, free_port, recorded_devices, write_config
from support.sushy_emulator import PASSWORD, USERNAME


def make_config(tmp_path: Path, reference: Path, address: str, **profile_redfish: Any) -> Path:
    redfish = {"address": address, "username": USERNAME, "password_env": "BMC_PASSWORD", "timeout": 5,
               **profile_redfish}
    doc = config_doc(
        server={"listen": "127.0.0.1:8080"},
        profiles={"onprem": {"stream": STREAM, "install_dev": "/dev/sda", "provider": "redfish", "redfish": redfish}},
        nodes={
            "rf-0": {"profile": "onprem", "mac": ["52:54:00:00:00:01"],
                     "redfish": {"system": "/redfish/v1/Systems/8a1e7c52-3c2b-4f1e-9c0a-000000000001"}},
            "rf-1": {"profile": "onprem", "redfish": {"system": "8a1e7c52-3c2b-4f1e-9c0a-000000000002"}},
        })
    return write_config(tmp_path / "bootserver.yaml", doc)


def test_provision_sets_pxe_once_powers_on_and_records_the_system(emulator, bmc_password, tmp_path, reference,
                                                                  capsys):
    config = make_config(tmp_path, reference, emulator.url)
    rc, out, err = cli(capsys, "provision", "rf-0", "--no-wait", "--config", str(config), "--log-level", "debug")
    assert rc == 0, err
    path = emulator.path(0)
    assert out == f"rf-0 {path} Off 52:54:00:00:00:01\n"  # the power-on is still pending
    assert f"bootserver: rf-0: {path}: next boot from the network (once); On (was Off)" in err
    # what was sent (sushy's debug log, credentials masked): Pxe, once
    [patch] = [line for line in err.splitlines() if f"HTTP request: PATCH {emulator.url}{path};" in line]
    assert "'BootSourceOverrideTarget': 'Pxe'" in patch and "'BootSourceOverrideEnabled': 'Once'" in patch
    assert PASSWORD not in out + err
    system = emulator.system(0)
    assert system["Boot"]["BootSourceOverrideTarget"] == "Pxe"
    assert emulator.wait_power(0, "On") == "On"
    state = recorded_devices(tmp_path / "state")["rf-0"]
    assert {k: state[k] for k in ("provider", "id", "address", "system", "uuid", "macs")} == {
        "provider": "redfish", "id": path, "address": emulator.url, "system": path,
        "uuid": emulator.systems[0]["uuid"], "macs": ["52:54:00:00:00:01"]}
    assert state["boot"]["target"] == "Pxe"
    assert PASSWORD not in json.dumps(state)


def test_a_system_that_is_on_is_force_restarted(emulator, bmc_password, tmp_path, reference, capsys):
    config = make_config(tmp_path, reference, emulator.url)
    rc, _out, err = cli(capsys, "provision", "rf-1", "--no-wait", "--config", str(config))
    assert rc == 0, err
    assert f"{emulator.path(1)}: next boot from the network (once); ForceRestart (was On)" in err
    assert emulator.system(1)["Boot"]["BootSourceOverrideTarget"] == "Pxe"
    assert emulator.wait_power(1, "On") == "On"


def test_devices_finds_the_system_recorded_at_provision(emulator, bmc_password, tmp_path, reference, capsys):
    """A config that no longer names rf-1's system (the BMC has two): `devices` asks for the system the
    state store recorded when rf-1 was provisioned, instead of failing on "set redfish.system"."""
    config = make_config(tmp_path, reference, emulator.url)
    rc, _out, err = cli(capsys, "provision", "rf-1", "--no-wait", "--config", str(config))
    assert rc == 0, err
    emulator.wait_power(1, "On")
    doc = yaml.safe_load(config.read_text())
    del doc["nodes"]["rf-1"]["redfish"]
    write_config(config, doc)
    rc, out, err = cli(capsys, "devices", "--config", str(config))
    assert rc == 0, err
    assert f"rf-1 {emulator.path(1)} On " in out


def one_line_error(capsys, config: Path, *args: str) -> str:
    rc, out, err = cli(capsys, "provision", "rf-0", "--no-wait", "--config", str(config), *args)
    assert rc == 1, err
    assert out == "" and len(err.splitlines()) == 1, err
    assert PASSWORD not in err
    return err


def test_wrong_credentials_are_one_line(emulator, tmp_path, reference, capsys, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("BMC_PASSWORD", "not-the-password")
    err = one_line_error(capsys, make_config(tmp_path, reference, emulator.url))
    assert err.startswith(f"bootserver: BMC {emulator.url}: GET {emulator.path(0)}: 401 access denied: ")
    assert err.rstrip().endswith("(check redfish.username and the password)")
    assert "not-the-password" not in err + caplog.text


def test_an_unknown_system_is_one_line_with_the_bmc_message(emulator, bmc_password, tmp_path, reference, capsys):
    config = make_config(tmp_path, reference, emulator.url)
    doc = yaml.safe_load(config.read_text())
    doc["nodes"]["rf-0"]["redfish"]["system"] = "nope"
    write_config(config, doc)
    err = one_line_error(capsys, config)
    assert err == (f"bootserver: BMC {emulator.url}: GET /redfish/v1/Systems/nope: 404 not found: "
                   "Fake system nope was not found\n")


def test_a_bmc_that_is_down_is_one_line(bmc_password, tmp_path, reference, capsys):
    address = f"http://127.0.0.1:{free_port()}"
    err = one_line_error(capsys, make_config(tmp_path, reference, address))
    assert err == f"bootserver: BMC {address}: service root: cannot connect: connection refused\n"


def test_a_bmc_that_hangs_is_one_line_after_its_timeout(bmc_password, tmp_path, reference, capsys):
    with socket.socket() as hung:  # accepts connections (the kernel's backlog) and never answers
        hung.bind(("127.0.0.1", 0))
        hung.listen(8)
        address = f"http://127.0.0.1:{hung.getsockname()[1]}"
        err = one_line_error(capsys, make_config(tmp_path, reference, address, timeout=1))
    assert err == f"bootserver: BMC {address}: service root: no answer within 1 s\n"


def test_bad_redfish_settings_name_the_key(tmp_path, reference, capsys):
    config = make_config(tmp_path, reference, "ftp://bmc.example")
    rc, _, err = cli(capsys, "check-config", "--config", str(config))
    assert rc == 2
    assert err.startswith(f"bootserver: {config}: profiles.onprem.redfish.address: must be an http(s) URL")
    config = make_config(tmp_path, reference, "https://bmc.example", password_file="pw")
    rc, _, err = cli(capsys, "check-config", "--config", str(config))
    assert rc == 2 and "set password_file or password_env, not both" in err


def test_a_bmc_error_line_carries_every_extended_info_message():
    """What a real BMC says in ``@Message.ExtendedInfo`` (the emulator's errors carry only ``message``)."""
    import sushy.exceptions

    from bootserver.providers.redfish import _detail

    response = requests.Response()
    response.status_code = 400
    response._content = json.dumps({"error": {
        "code": "Base.1.8.GeneralError", "message": "A general error has occurred.",
        "@Message.ExtendedInfo": [
            {"MessageId": "Base.1.8.PropertyValueNotInList", "Severity": "Warning",
             "Message": "The value Pxe for the property BootSourceOverrideTarget is not in the list of "
                        "acceptable values."},
            {"MessageId": "Base.1.8.Success", "Message": "Successfully Completed Request"}]}}).encode()
    error = sushy.exceptions.BadRequestError("PATCH", "https://bmc.example/redfish/v1/Systems/1", response)
    assert _detail(error) == ("The value Pxe for the property BootSourceOverrideTarget is not in the list of "
                              "acceptable values.; Successfully Completed Request")
    response._content = json.dumps({"error": {"code": "Base.1.8.GeneralError", "message": "Busy"}}).encode()
    assert _detail(sushy.exceptions.ServerSideError("GET", "https://bmc.example/", response)) == "Busy"


def test_secure_boot_on_refuses_a_boot_that_cannot_run_under_it_before_any_power_action(
        emulator, bmc_password, tmp_path, reference, capsys):
    """sushy-tools' systems expose ``SecureBoot``: with it on, ``provision`` of a network-booted node (and of
    an image boot without ``secure_boot``) is one line naming the node and what to set, exit 2, and no
    power action or boot override reaches the BMC; ``devices`` shows the state."""
    r = requests.patch(emulator.url + emulator.path(0) + "/SecureBoot", json={"SecureBootEnable": True},
                       auth=(USERNAME, PASSWORD), timeout=10)
    assert r.status_code in (200, 202, 204), r.text
    assert emulator.get(emulator.path(0) + "/SecureBoot")["SecureBootEnable"] is True
    before = emulator.system(0)
    config = make_config(tmp_path, reference, emulator.url)
    rc, out, err = cli(capsys, "provision", "rf-1", "rf-0", "--no-wait", "--config", str(config))
    assert (rc, out) == (2, "")
    assert err == (f"bootserver: node rf-0: Secure Boot is on in {emulator.path(0)}, and its boot from the "
                   "network (our iPXE) is not signed: set redfish.boot_source: virtual-media and secure_boot: "
                   "true (the release's signed shim, GRUB and kernel), or turn Secure Boot off\n")
    after = emulator.system(0)
    assert after["PowerState"] == before["PowerState"] == "Off" and after["Boot"] == before["Boot"]
    assert emulator.system(1)["Boot"]["BootSourceOverrideTarget"] != "Pxe"  # rf-1 untouched too
    assert recorded_devices(tmp_path / "state") == {}
    # an image boot that is not the Secure Boot one: refused too, naming what to set
    doc = yaml.safe_load(config.read_text())
    doc["profiles"]["onprem"]["redfish"]["boot_source"] = "virtual-media"
    config.write_text(yaml.safe_dump(doc))
    rc, out, err = cli(capsys, "provision", "rf-0", "--no-wait", "--config", str(config))
    assert (rc, out) == (2, "") and err.endswith(
        "its boot image is not the Secure Boot one: set secure_boot: true (the release's signed shim, GRUB "
        "and kernel), or turn Secure Boot off\n"), err
    assert emulator.system(0)["PowerState"] == "Off"
    rc, out, err = cli(capsys, "devices", "--config", str(config))
    assert rc == 0, err
    assert out.splitlines()[0] == f"rf-0 {emulator.path(0)} Off new secure-boot:on"
