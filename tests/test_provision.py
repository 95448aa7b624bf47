"""Provider-neutral provisioning with the Equinix provider against the local fake API: create or reuse
(and re-point), record, follow the node timeline, delete."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.configs import config_doc, load, master_profile
from support.fake_metal import PROJECT, TOKEN, fake_metal_fixture  # noqa: F401 - the fake_metal fixture

from bootserver.cli import build_parser, provider_options
from bootserver.errors import BootserverError
from bootserver.inventory import inventory
from bootserver.providers.base import ProviderError
from bootserver.provision import (
    DeviceFailed,
    ProvisionTimeout,
    WaitPolicy,
    deprovision,
    provision,
)
from bootserver.signing import Keyring, verify
from bootserver.state.sqlite_timeline import Timeline
from bootserver.urls import CHAIN, Urls


class FakeClock:
    """A monotonic clock whose sleep advances it (no real waiting); ``during_sleep`` runs at each pause
    (what the node does while ``provision`` waits)."""

    def __init__(self, during_sleep: list[Any] | None = None) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        self.during_sleep = list(during_sleep or ())

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self.during_sleep:
            self.during_sleep.pop(0)()


@pytest.fixture
def env(fake_metal, monkeypatch):
    monkeypatch.setenv("METAL_AUTH_TOKEN", TOKEN)
    monkeypatch.setenv("METAL_API_URL", fake_metal.url)
    return fake_metal


def make_config(tmp_path: Path, reference: Path, mode: str = "install", **profile: Any):
    doc = config_doc(metal={"project": PROJECT}, state_dir=str(tmp_path / "state"),
                     profiles={"p": master_profile(mode=mode, ignition=None,
                                                   metal={"plan": "c3.small.x86", "metro": "da"}, **profile)},
                     nodes={n: {"profile": "p"} for n in ("master-0", "master-1", "master-2")})
    return load(doc, tmp_path, str(tmp_path / "c.yaml"))


def recorded(config, node: str) -> dict[str, Any] | None:
    """The node's device record in the config's state store (sqlite in state_dir), ``None`` without one."""
    timeline = Timeline(config.state_dir)
    try:
        return timeline.devices([node]).get(node)
    finally:
        timeline.close()


def args(*argv: str):
    return provider_options(build_parser().parse_args(["provision", "master-0", *argv]))


def run(config, nodes, clock=None, *argv: str, **kw):
    clock = clock or FakeClock()
    said: list[str] = []
    lines = provision(config, args(*argv), [inventory(config)[n] for n in nodes], clock=clock, sleep=clock.sleep,
                      say=lambda n, m: said.append(f"{n}: {m}"), **kw)
    return lines, said


def test_no_wait_creates_records_and_prints_the_devices(env, tmp_path, reference):
    config = make_config(tmp_path, reference)
    lines, said = run(config, ["master-0"], wait=False)
    [device] = env.devices.values()
    assert lines == [f"master-0 {device['id']} queued 147.75.0.10,2604:1380::a,10.70.0.10"]
    assert said == [f"master-0: created device {device['id']} (queued)"]
    assert env.calls("GET", "/devices/") == []
    state = recorded(config, "master-0")
    assert (state["provider"], state["project"], state["id"]) == ("equinix", PROJECT, device["id"])
    assert state["ip_addresses"] == [
        {"address": "147.75.0.10", "address_family": 4, "cidr": 31, "gateway": "147.75.0.11", "public": True},
        {"address": "2604:1380::a", "address_family": 6, "cidr": 127, "gateway": "2604:1380::b", "public": True},
        {"address": "10.70.0.10", "address_family": 4, "cidr": 31, "gateway": "10.70.0.11", "public": False},
    ]
    assert state["network_ports"] == [
        {"type": "NetworkBondPort", "name": "bond0", "network_type": "layer3"},
        {"type": "NetworkPort", "name": "eth0", "data": {"mac": "b8:ce:f6:00:0a:00"}, "bond": {"name": "bond0"}},
        {"type": "NetworkPort", "name": "eth1", "data": {"mac": "b8:ce:f6:00:0a:01"}, "bond": {"name": "bond0"}},
    ]
    assert env.invalid_bodies == []


def test_wait_follows_the_timeline_to_up_with_a_line_per_stage(env, tmp_path, reference):
    config = make_config(tmp_path, reference)
    timeline = Timeline(config.state_dir)
    boot = [lambda: timeline.record("master-0", "script", mode="install"),
            lambda: timeline.record("master-0", "stub", mode="install"),
            lambda: timeline.record("master-0", "config", mode="install"),
            lambda: timeline.record("master-0", "checkin", mode="install")]
    clock = FakeClock(boot)
    lines, said = run(config, ["master-0"], clock)
    timeline.close()
    device_id = next(iter(env.devices))
    assert said == [
        f"master-0: created device {device_id} (queued)",
        "master-0: waiting for stage up: its system checks in once on the network (now new)",
        # the fake answers queued first, then moves one state per GET
        f"master-0: device {device_id} is provisioning",
        "master-0: stage ipxe",
        f"master-0: device {device_id} is active",
        "master-0: stage installing",
        "master-0: stage installed",
        "master-0: stage up",
    ]
    assert clock.sleeps == [5.0, 7.5, 11.25, 16.875]  # today's polling backoff
    assert lines[0].startswith(f"master-0 {device_id} active ")
    assert recorded(config, "master-0")["state"] == "active"


def test_without_checkin_install_mode_waits_for_installed(env, tmp_path, reference):
    config = make_config(tmp_path, reference, checkin=False)
    timeline = Timeline(config.state_dir)
    clock = FakeClock([lambda: timeline.record("master-0", "stub", mode="install"),
                       lambda: timeline.record("master-0", "config", mode="install")])
    _, said = run(config, ["master-0"], clock)
    timeline.close()
    assert said[1] == "master-0: waiting for stage installed (now new)"
    assert [m for m in said if ": stage " in m] == ["master-0: stage installing", "master-0: stage installed"]
    assert len(clock.sleeps) == 2


def test_live_mode_without_checkin_waits_for_running(env, tmp_path, reference):
    config = make_config(tmp_path, reference, mode="live", checkin=False)
    timeline = Timeline(config.state_dir)
    clock = FakeClock([lambda: timeline.record("master-0", "stub", mode="live"),
                       lambda: timeline.record("master-0", "config", mode="live")])
    _, said = run(config, ["master-0"], clock)
    timeline.close()
    assert said[1] == "master-0: waiting for stage running (now new)"
    assert [m for m in said if ": stage " in m] == ["master-0: stage ignition", "master-0: stage running"]


def test_a_profile_without_a_real_config_that_checks_in_waits_for_up(env, tmp_path, reference):
    config = make_config(tmp_path, reference, mode="live")  # no ignition, but the stub's unit checks in
    timeline = Timeline(config.state_dir)
    clock = FakeClock([lambda: timeline.record("master-0", "stub", mode="live", real_config=False),
                       lambda: timeline.record("master-0", "checkin", mode="live", real_config=False)])
    _, said = run(config, ["master-0"], clock)
    timeline.close()
    assert said[1] == "master-0: waiting for stage up: its system checks in once on the network (now new)"
    assert [m for m in said if ": stage " in m] == ["master-0: stage unconfirmed", "master-0: stage up"]
    assert len(clock.sleeps) == 2


def test_a_profile_without_a_real_config_nor_checkin_is_done_at_unconfirmed(env, tmp_path, reference):
    # no ignition and no check-in: the stub is the last request the server sees
    config = make_config(tmp_path, reference, checkin=False)
    timeline = Timeline(config.state_dir)
    clock = FakeClock([lambda: timeline.record("master-0", "script", mode="install", real_config=False),
                       lambda: timeline.record("master-0", "stub", mode="install", real_config=False)])
    _, said = run(config, ["master-0"], clock)
    timeline.close()
    assert [m for m in said if ": stage " in m] == ["master-0: stage ipxe", "master-0: stage unconfirmed"]
    assert len(clock.sleeps) == 2


def test_an_installed_node_that_boots_once_is_done_at_once(env, tmp_path, reference):
    config = make_config(tmp_path, reference)
    timeline = Timeline(config.state_dir)
    timeline.record("master-0", "stub", mode="install")
    timeline.record("master-0", "config", mode="install")
    timeline.close()
    clock = FakeClock()
    _, said = run(config, ["master-0"], clock)
    assert said[1] == "master-0: already installed; it boots its disk until `bootserver nodes reinstall master-0`"
    assert clock.sleeps == []


def test_failed_device_ends_the_wait_with_every_line(env, tmp_path, reference):
    env.fail_hostnames.add("master-1")
    env.instant = True
    config = make_config(tmp_path, reference)
    with pytest.raises(DeviceFailed, match=r"device provisioning failed: master-1 \(") as info:
        run(config, ["master-0", "master-1"])
    assert info.value.exit_code == 1
    assert [line.split()[2] for line in info.value.lines] == ["active", "failed"]
    assert recorded(config, "master-1")["state"] == "failed"


def test_wait_gives_up_after_the_timeout_naming_the_stage(env, tmp_path, reference):
    config = make_config(tmp_path, reference)
    timeline = Timeline(config.state_dir)
    clock = FakeClock([lambda: timeline.record("master-0", "script", mode="install")])
    with pytest.raises(ProvisionTimeout, match=r"gave up waiting after 60 s: master-0 at stage ipxe"):
        run(config, ["master-0"], clock, policy=WaitPolicy(timeout=60, interval=5, max_interval=20, factor=2))
    timeline.close()
    assert clock.sleeps == [5, 10, 20, 20, 5]


def test_provision_is_idempotent_and_leaves_a_current_url_alone(env, tmp_path, reference):
    config = make_config(tmp_path, reference)
    run(config, ["master-0"], wait=False)
    _, said = run(config, ["master-0"], wait=False)
    [device] = env.devices.values()
    assert said == [f"master-0: reusing device {device['id']} (queued)"]
    assert len(env.calls("POST")) == 1 and env.calls("PUT") == []


def test_a_reused_device_is_re_pointed_after_keys_rotate(env, tmp_path, reference):
    config = make_config(tmp_path, reference)
    run(config, ["master-0"], wait=False)
    [device] = env.devices.values()
    old = device["ipxe_script_url"]
    Keyring.load_or_create(config.state_dir).rotate(grace=0)
    run(config, ["master-0"], wait=False)
    [put] = env.calls("PUT")
    new = put.body["ipxe_script_url"]
    assert put.path == f"/devices/{device['id']}" and put.body["userdata"] == ""
    assert env.invalid_bodies == []
    assert device["ipxe_script_url"] == new != old
    urls = Urls(config)
    assert urls.chain_is_current("master-0", new) and not urls.chain_is_current("master-0", old)
    query = dict(p.split("=", 1) for p in new.split("?", 1)[1].split("&"))
    ring = Keyring.load_or_create(config.state_dir)
    assert verify([ring.current], "master-0", CHAIN.path(node="master-0"), query["exp"], query["sig"], 0)
    # a second run finds it current again: no more PUT
    run(config, ["master-0"], wait=False)
    assert len(env.calls("PUT")) == 1


def test_switching_to_userdata_re_points_the_device(env, tmp_path, reference):
    config = make_config(tmp_path, reference)
    run(config, ["master-0"], wait=False)
    run(config, ["master-0"], None, "--via", "userdata", wait=False)
    [device] = env.devices.values()
    assert "ipxe_script_url" not in device
    assert device["userdata"] == Urls(config).userdata("master-0")
    assert env.invalid_bodies == []


def test_same_hostname_without_our_tag_is_not_reused(env, tmp_path, reference):
    foreign = env.add_device("master-0", ["someone-else"])
    run(make_config(tmp_path, reference), ["master-0"], wait=False)
    assert len(env.devices) == 2 and len(env.calls("POST")) == 1 and foreign in env.devices


def test_two_managed_devices_with_one_hostname_is_an_error(env, tmp_path, reference):
    a = env.add_device("master-0", ["bootserver"])
    b = env.add_device("master-0", ["bootserver"])
    with pytest.raises(ProviderError, match=f"2 devices named 'master-0' with tag 'bootserver': {a}, {b}"):
        run(make_config(tmp_path, reference), ["master-0"], wait=False)
    assert env.calls("POST") == []


def test_several_nodes_share_one_lookup(env, tmp_path, reference):
    lines, _ = run(make_config(tmp_path, reference), ["master-0", "master-1", "master-2"], wait=False)
    assert [line.split()[0] for line in lines] == ["master-0", "master-1", "master-2"]
    assert len(env.calls("GET", "/projects/")) == 1


def test_deprovision_deletes_and_clears_state(env, tmp_path, reference):
    config = make_config(tmp_path, reference)
    run(config, ["master-0"], wait=False)
    [device_id] = env.devices
    said: list[str] = []
    dargs = provider_options(build_parser().parse_args(["deprovision", "master-0"]))
    assert deprovision(config, dargs, [inventory(config)["master-0"]], say=lambda n, m: said.append(m)) == [
        f"master-0 {device_id} deleted"]
    assert said == [f"deleted device {device_id}"]
    assert env.devices == {} and recorded(config, "master-0") is None
    assert deprovision(config, dargs, [inventory(config)["master-0"]]) == ["master-0 - absent"]


def test_deprovision_of_a_device_deleted_elsewhere_clears_state(env, tmp_path, reference):
    config = make_config(tmp_path, reference)
    run(config, ["master-0"], wait=False)
    [device_id] = env.devices
    env.devices.clear()
    dargs = provider_options(build_parser().parse_args(["deprovision", "master-0"]))
    assert deprovision(config, dargs, [inventory(config)["master-0"]]) == [f"master-0 {device_id} absent"]
    assert recorded(config, "master-0") is None


def test_device_records_live_in_the_state_store_not_in_files(env, tmp_path, reference):
    config = make_config(tmp_path, reference)
    run(config, ["master-0"], wait=False)
    assert recorded(config, "master-0")["id"] == next(iter(env.devices))
    assert not (config.state_dir / "nodes").exists()  # what older versions wrote: `db migrate` moves it in


def test_unwritable_state_dir_is_a_runtime_error_naming_the_store(env, tmp_path, reference):
    config = make_config(tmp_path, reference)
    config.state_dir.parent.mkdir(parents=True, exist_ok=True)
    config.state_dir.write_text("a file where the folder should be")
    with pytest.raises(BootserverError, match=r"^node timeline .*/state/timeline\.sqlite3: ") as info:
        run(config, ["master-0"], wait=False)
    assert info.value.exit_code == 1
    assert env.calls("POST") == []  # the records are read before anything is created
