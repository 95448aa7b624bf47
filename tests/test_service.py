"""bootserver.service.BootService over the in-memory state store (support.memory_store): what one loaded
config answers and records, without a server or a database. The HTTP tests ask the same through the
front; these ask the service by name, in milliseconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.configs import config_doc, load, master_profile
from support.memory_store import MemoryStore
from support.services import service
from support.signing import fixed_signer

from bootserver.ignition import NotAcceptableError
from bootserver.service import BootService, ScriptAnswer


def booted(tmp_path: Path, **profile: object) -> tuple[BootService, MemoryStore]:
    store = MemoryStore()
    config = load(config_doc(profiles={"master": master_profile(**profile),
                                       "live": {"stream": "rhcos-4.16", "mode": "live", "checkin": False}},
                             nodes={"master-0": {"profile": "master"}, "live-0": {"profile": "live"}}), tmp_path)
    return service(config, fixed_signer(), state=store), store


async def test_a_served_script_is_recorded_with_how_the_node_asked(tmp_path: Path) -> None:
    svc, store = booted(tmp_path)
    script = await svc.script("master-0", client="10.0.0.5", record=True)
    assert script.startswith("#!ipxe") and "coreos.inst.install_dev=/dev/sda" in script
    [record] = store.records
    assert (record.node, record.event, record.ip, record.mode) == ("master-0", "script", "10.0.0.5", "install")
    assert record.detail == {"mode": "install", "release": "416.94.202405291527-0", "via": "ipxe",
                             "ip": "IPv4", "secure_boot": "off"}
    assert (await store.node("master-0")).stage == "ipxe"


async def test_a_repeat_is_answered_from_the_named_cache_and_still_recorded(tmp_path: Path) -> None:
    svc, store = booted(tmp_path)
    first = await svc.script("master-0", client="10.0.0.5", record=True)
    answered = svc._answered["master-0"]
    assert isinstance(answered, ScriptAnswer) and answered.how == (False, 4, "ipxe") and answered.script == first
    assert await svc.script("master-0", client="10.0.0.5", record=True) == first
    assert svc._answered["master-0"] is not answered  # the node as read changed (a second row): made again
    assert [r.event for r in store.records] == ["script", "script"]
    assert await svc.script("master-0") == first  # render: the same bytes, nothing recorded
    assert len(store.records) == 2


async def test_boot_once_answers_the_boot_disk_once_installed(tmp_path: Path) -> None:
    svc, store = booted(tmp_path)
    await svc.script("master-0", client="10.0.0.5", record=True)
    await svc.stub("master-0", client="10.0.0.5", record=True)  # coreos-installer fetches the stub
    assert (await store.node("master-0")).stage == "installing"
    await svc.real_config("master-0", client="10.0.0.5", record=True)  # the installed system's first boot
    assert (await store.node("master-0")).stage == "installed"
    script = await svc.script("master-0", client="10.0.0.5", record=True)
    assert "sanboot" in script or "exit" in script
    assert store.records[-1].event == "localboot" and store.records[-1].detail == {"stage": "installed"}


async def test_the_stub_pins_the_real_config_and_names_the_hostname(tmp_path: Path) -> None:
    svc, store = booted(tmp_path)
    stub = json.loads(await svc.stub(svc.node("master-0")))
    merge = stub["ignition"]["config"]["merge"][0]
    assert merge["source"].startswith("http://boot.example.net:8080/ignition/master-0/config?")
    assert merge["verification"]["hash"].startswith("sha512-")
    assert stub["ignition"]["version"] == "3.2.0"
    assert store.records == []  # without record=True nothing is written
    assert await svc.real_config("live-0") is None  # a profile without a real config
    with pytest.raises(NotAcceptableError, match=r"profiles\.master\.ignition_version"):
        await svc.stub("master-0", version="3.4.0")


async def test_a_live_node_without_checkin_gets_no_checkin_unit(tmp_path: Path) -> None:
    svc, _ = booted(tmp_path)
    units = json.loads(await svc.stub("live-0")).get("systemd", {}).get("units", [])
    assert not [u for u in units if u["name"] == "bootserver-checkin.service"]
    assert "bootserver-checkin.service" in (await svc.stub("master-0")).decode()


async def test_history_and_fleet_read_the_store(tmp_path: Path) -> None:
    svc, _ = booted(tmp_path)
    await svc.record("live-0", "script", ip="10.0.0.9")
    state, events = await svc.history("live-0")
    assert state.stage == "ipxe" and [e.event for e in events] == ["script"]
    fleet = {seen.state.node: seen for seen in await svc.fleet()}
    assert set(fleet) == {"master-0", "live-0"} and fleet["live-0"].profile == "live"
    _, report = await svc.readiness()
    assert report["state_store"] == {"backend": "memory", "ready": True}
