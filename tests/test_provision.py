"""Provisioning orchestration against the local fake API: create or reuse, wait, record, delete."""

from __future__ import annotations

import json

import pytest
from fake_metal import PROJECT, fake_metal_fixture  # noqa: F401 - the fake_metal fixture

from bootserver.errors import BootserverError, InputError
from bootserver.metal import DeviceSpec, EquinixMetal, MetalError
from bootserver.provision import (
    DeviceFailed,
    NodeRequest,
    ProvisionTimeout,
    WaitPolicy,
    clear_device,
    deprovision_nodes,
    format_device,
    node_state_path,
    provision_nodes,
    read_node_state,
    record_device,
    write_json_atomic,
)

URL = "http://boot.example:8080/ipxe/{}"


class FakeClock:
    """A monotonic clock whose sleep advances it (no real waiting)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def req(node: str) -> NodeRequest:
    spec = DeviceSpec(hostname=node, plan="c3.small.x86", metro="da", ipxe_script_url=URL.format(node),
                      billing_cycle="hourly", tags=("bootserver",))
    return NodeRequest(node=node, project=PROJECT, spec=spec)


@pytest.fixture
def api(fake_metal):
    with EquinixMetal(fake_metal.token, fake_metal.url, backoff_factor=0, timeout=(5, 10)) as client:
        yield client


def run(api, nodes, state_dir, clock=None, **kw):
    clock = clock or FakeClock()
    events = []
    results = provision_nodes(api, [req(n) for n in nodes], state_dir, tag="bootserver", clock=clock,
                              sleep=clock.sleep, on_event=lambda n, m: events.append(f"{n}: {m}"), **kw)
    return results, events


def test_provision_waits_for_active_with_backoff_and_records_state(api, fake_metal, tmp_path):
    clock = FakeClock()
    [result], events = run(api, ["master-0"], tmp_path, clock)
    device = result.device
    assert result.created
    assert device.state == "active"
    assert events == [
        f"master-0: created device {device.id} (queued)",
        f"master-0: device {device.id} is queued",
        f"master-0: device {device.id} is provisioning",
        f"master-0: device {device.id} is active",
    ]
    assert clock.sleeps == [5.0, 7.5]  # bounded poll with backoff, no real sleep
    state = json.loads((tmp_path / "nodes" / "master-0.json").read_text())
    assert state["node"] == "master-0"
    assert state["device"]["id"] == device.id
    assert state["device"]["state"] == "active"
    assert state["device"]["project"] == PROJECT
    assert state["device"]["provider"] == "equinix"
    assert state["device"]["ip_addresses"] == [
        {"address": "147.75.0.10", "address_family": 4, "cidr": 31, "gateway": "147.75.0.11", "public": True},
        {"address": "2604:1380::a", "address_family": 6, "cidr": 127, "gateway": "2604:1380::b", "public": True},
        {"address": "10.70.0.10", "address_family": 4, "cidr": 31, "gateway": "10.70.0.11", "public": False},
    ]
    assert state["device"]["network_ports"] == [
        {"type": "NetworkBondPort", "name": "bond0", "network_type": "layer3"},
        {"type": "NetworkPort", "name": "eth0", "data": {"mac": "b8:ce:f6:00:0a:00"}, "bond": {"name": "bond0"}},
        {"type": "NetworkPort", "name": "eth1", "data": {"mac": "b8:ce:f6:00:0a:01"}, "bond": {"name": "bond0"}},
    ]
    assert format_device(device, "master-0") == f"master-0 {device.id} active 147.75.0.10,2604:1380::a,10.70.0.10"
    assert fake_metal.invalid_bodies == []


def test_provision_is_idempotent(api, fake_metal, tmp_path):
    [first], _ = run(api, ["master-0"], tmp_path)
    [second], events = run(api, ["master-0"], tmp_path)
    assert not second.created
    assert second.device.id == first.device.id
    assert events[0] == f"master-0: reusing device {first.device.id} (active)"
    assert len(fake_metal.calls("POST")) == 1
    assert len(fake_metal.devices) == 1


def test_same_hostname_without_our_tag_is_not_reused(api, fake_metal, tmp_path):
    foreign = fake_metal.add_device("master-0", ["someone-else"])
    [result], _ = run(api, ["master-0"], tmp_path)
    assert result.created and result.device.id != foreign


def test_two_managed_devices_with_one_hostname_is_an_error(api, fake_metal, tmp_path):
    a = fake_metal.add_device("master-0", ["bootserver"])
    b = fake_metal.add_device("master-0", ["bootserver"])
    with pytest.raises(MetalError, match=f"2 devices named 'master-0' with tag 'bootserver': {a}, {b}"):
        run(api, ["master-0"], tmp_path)
    assert fake_metal.calls("POST") == []


def test_several_nodes_are_created_then_waited_for_together(api, fake_metal, tmp_path):
    results, _ = run(api, ["master-0", "master-1", "master-2"], tmp_path)
    assert [r.node for r in results] == ["master-0", "master-1", "master-2"]
    assert all(r.device.state == "active" for r in results)
    assert len({r.device.id for r in results}) == 3
    assert len(fake_metal.calls("GET", "/projects/")) == 1  # one lookup for the project


def test_failed_device_is_recorded_and_raised(api, fake_metal, tmp_path):
    fake_metal.fail_hostnames.add("master-1")
    with pytest.raises(DeviceFailed, match=r"device provisioning failed: master-1 \(") as info:
        run(api, ["master-0", "master-1"], tmp_path)
    assert info.value.exit_code == 1
    assert read_node_state(tmp_path, "master-1")["device"]["state"] == "failed"
    assert read_node_state(tmp_path, "master-0")["device"]["state"] == "active"


def test_wait_gives_up_after_the_timeout(api, fake_metal, tmp_path):
    fake_metal.stuck_hostnames.add("master-0")
    clock = FakeClock()
    with pytest.raises(ProvisionTimeout, match=r"gave up waiting after 60 s: still not active: .* \(master-0\) provisioning"):
        run(api, ["master-0"], tmp_path, clock, policy=WaitPolicy(timeout=60, interval=5, max_interval=20, factor=2))
    assert clock.sleeps == [5, 10, 20, 20, 5]
    assert sum(clock.sleeps) == 60
    assert read_node_state(tmp_path, "master-0")["device"]["state"] == "provisioning"


def test_no_wait_returns_the_created_device(api, fake_metal, tmp_path):
    [result], _ = run(api, ["master-0"], tmp_path, wait=False)
    assert result.device.state == "queued"
    assert fake_metal.calls("GET", "/devices/") == []
    assert read_node_state(tmp_path, "master-0")["device"]["id"] == result.device.id


def test_deprovision_deletes_and_clears_state(api, fake_metal, tmp_path):
    [result], _ = run(api, ["master-0"], tmp_path)
    events = []
    [out] = deprovision_nodes(api, [("master-0", "master-0", None)], tmp_path, tag="bootserver",
                              on_event=lambda n, m: events.append(m))
    assert out.deleted and out.device_id == result.device.id
    assert events == [f"deleted device {result.device.id}"]
    assert fake_metal.devices == {}
    assert not node_state_path(tmp_path, "master-0").exists()
    # again: nothing left to delete, no error
    [again] = deprovision_nodes(api, [("master-0", "master-0", PROJECT)], tmp_path, tag="bootserver")
    assert again.device_id is None and not again.deleted


def test_deprovision_of_a_device_deleted_elsewhere_clears_state(api, fake_metal, tmp_path):
    [result], _ = run(api, ["master-0"], tmp_path)
    fake_metal.devices.clear()
    [out] = deprovision_nodes(api, [("master-0", "master-0", None)], tmp_path, tag="bootserver")
    assert out.device_id == result.device.id and not out.deleted
    assert read_node_state(tmp_path, "master-0") == {}


def test_deprovision_without_a_project_is_bad_input(api, tmp_path):
    with pytest.raises(InputError, match="no project"):
        deprovision_nodes(api, [("master-0", "master-0", None)], tmp_path, tag="bootserver")


def test_state_file_keeps_other_members_and_leaves_no_temp_files(api, fake_metal, tmp_path):
    path = node_state_path(tmp_path, "n1")
    write_json_atomic(path, {"node": "n1", "timeline": [1, 2]})
    [result], _ = run(api, ["n1"], tmp_path)
    assert read_node_state(tmp_path, "n1")["timeline"] == [1, 2]
    clear_device(tmp_path, "n1")
    assert read_node_state(tmp_path, "n1") == {"node": "n1", "timeline": [1, 2]}
    assert sorted(p.name for p in (tmp_path / "nodes").iterdir()) == ["n1.json"]
    assert path.stat().st_mode & 0o777 == 0o600  # device records stay owner-only
    record_device(tmp_path, "n1", "equinix", PROJECT, result.device)
    assert read_node_state(tmp_path, "n1")["device"]["id"] == result.device.id


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a\\b"])
def test_node_names_that_are_not_file_names_are_rejected(tmp_path, name):
    with pytest.raises(InputError):
        node_state_path(tmp_path, name)


def test_corrupt_state_file_names_the_file(tmp_path):
    path = node_state_path(tmp_path, "n1")
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(InputError, match=str(path)):
        read_node_state(tmp_path, "n1")


def test_unwritable_state_dir_is_a_runtime_error_naming_the_file(api, fake_metal, tmp_path):
    (tmp_path / "nodes").write_text("a file where the folder should be")
    with pytest.raises(BootserverError, match=r"nodes/master-0\.json: cannot (read|write) node state") as info:
        run(api, ["master-0"], tmp_path)
    assert info.value.exit_code == 1
    # the device exists; the next run (with a writable state_dir) reuses it
    (tmp_path / "nodes").unlink()
    [result], _ = run(api, ["master-0"], tmp_path)
    assert not result.created
