"""``bootserver provision / deprovision / devices`` against the local fake Equinix API."""

from __future__ import annotations

import logging
import re
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from support.fake_metal import PROJECT, TOKEN, fake_metal_fixture, metal_env_fixture  # noqa: F401 - fixtures
from support.helpers import cli, recorded_devices, write_config

OTHER_PROJECT = "9b2f6a57-5c4e-4b8a-a1d2-3e4f5a6b7c8d"


def make_config(tmp_path: Path, metal: dict | None = None, **node_metal) -> Path:
    (tmp_path / "rhcos.json").write_text("{}")
    doc = {
        "server": {"listen": "127.0.0.1:8080", "base_url": "http://boot.example:8080"},
        "cache_dir": "cache",
        "state_dir": "state",
        "metal": metal if metal is not None else {"project": PROJECT},
        "streams": {"rhcos": {"metadata": "rhcos.json"}},
        "profiles": {"master": {"stream": "rhcos", "mode": "live",
                                "metal": {"plan": "c3.small.x86", "metro": "da", "tags": ["ocp"]}}},
        "nodes": {
            "master-0": {"profile": "master", "metal": node_metal or None},
            "master-1": {"profile": "master", "hostname": "m1"},
        },
    }
    return write_config(tmp_path / "bootserver.yaml", doc)


@pytest.fixture
def env(metal_env):
    return metal_env


def test_provision_prints_devices_and_records_state(env, tmp_path, capsys):
    config = make_config(tmp_path)
    rc, out, err = cli(capsys, "provision", "master-0", "master-1", "--no-wait", "--config", str(config))
    assert rc == 0, err
    lines = out.splitlines()
    assert len(lines) == 2
    ids = {d["hostname"]: d["id"] for d in env.devices.values()}
    assert lines[0] == f"master-0 {ids['master-0']} queued 147.75.0.10,2604:1380::a,10.70.0.10"
    assert lines[1].startswith(f"master-1 {ids['m1']} queued ")
    assert f"bootserver: master-0: created device {ids['master-0']} (queued)" in err
    bodies = {c.body["hostname"]: c.body for c in env.calls("POST")}
    assert re.fullmatch(r"http://boot\.example:8080/ipxe/master-0\?exp=\d+&sig=[\w-]{43}",
                        bodies["master-0"]["ipxe_script_url"])
    assert bodies["m1"]["ipxe_script_url"].startswith("http://boot.example:8080/ipxe/master-1?exp=")
    assert bodies["master-0"]["tags"] == ["bootserver", "ocp"]
    assert bodies["master-0"]["operating_system"] == "custom_ipxe"
    assert env.invalid_bodies == []
    state = recorded_devices(tmp_path / "state")["master-1"]
    assert state["id"] == ids["m1"] and state["state"] == "queued"
    rc, out_show, err = cli(capsys, "nodes", "show", "master-1", "--config", str(config))
    assert rc == 0 and out_show == (f"device: equinix {ids['m1']} queued\nmaster-1: no events yet (stage new): "
                                    "no request of this node has reached the server\n"), err

    # idempotent: a second run reuses both devices (and their chain URLs, still current)
    rc, out2, err = cli(capsys, "provision", "master-0", "master-1", "--no-wait", "--config", str(config))
    assert rc == 0 and out2 == out
    assert env.calls("PUT") == []
    assert len(env.calls("POST")) == 2
    assert "reusing device" in err


def test_userdata_and_cli_overrides(env, tmp_path, capsys):
    config = make_config(tmp_path, always_pxe=True, billing_cycle="monthly")
    rc, _out, err = cli(capsys, "provision", "master-0", "--no-wait", "--config", str(config), "--via", "userdata",
                       "--plan", "m3.large.x86", "--facility", "sv15", "--tag", "extra",
                       "--spot-price-max", "0.75", "--hardware-reservation-id", "next-available")
    assert rc == 0, err
    [call] = env.calls("POST")
    assert re.search(r"/ipxe/master-0\?exp=\d+&sig=[\w-]{43}\n$", call.body["userdata"])
    assert {**call.body, "userdata": re.sub(r"\?exp=\d+&sig=[\w-]+", "", call.body["userdata"])} == {
        "hostname": "master-0",
        "plan": "m3.large.x86",
        "facility": "sv15",
        "operating_system": "custom_ipxe",
        "userdata": "#!ipxe\nchain --autofree http://boot.example:8080/ipxe/master-0\n",
        "billing_cycle": "monthly",
        "tags": ["bootserver", "ocp", "extra"],
        "always_pxe": True,
        "spot_instance": True,
        "spot_price_max": 0.75,
        "hardware_reservation_id": "next-available",
    }
    assert env.invalid_bodies == []
    # the userdata is exactly what `bootserver url` prints
    rc, url_out, url_err = cli(capsys, "url", "master-0", "--config", str(config))
    assert url_out.endswith(call.body["userdata"])
    # ... and says (on stderr, out of the way of `| head -1`) when it expires: in ten years, by default
    exp = int(re.search(r"exp=(\d+)", url_out)[1])
    when = datetime.fromtimestamp(exp, UTC).strftime("%Y-%m-%d %H:%M")
    assert url_err == (f"bootserver: master-0: these URLs expire {when} UTC; `bootserver keys rotate` revokes "
                       "them sooner (once its grace ends)\n")
    assert 3649 * 86400 < exp - time.time() <= 3650 * 86400 + 3600


def test_failed_device_is_exit_1_after_printing(env, tmp_path, capsys):
    env.fail_hostnames.add("m1")
    rc, out, err = cli(capsys, "provision", "master-0", "master-1", "--config", str(make_config(tmp_path)))
    assert rc == 1
    assert " failed " in out.splitlines()[1] and " active " in out.splitlines()[0]
    assert err.splitlines()[-1].startswith("bootserver: device provisioning failed: master-1 (")


def test_api_error_is_exit_1_with_the_api_message(env, tmp_path, capsys):
    rc, _out, err = cli(
        capsys, "provision", "master-0", "--config", str(make_config(tmp_path, {"project": OTHER_PROJECT}))
    )
    assert rc == 1
    assert err.splitlines()[-1] == (
        f"bootserver: Equinix Metal API: GET /projects/{OTHER_PROJECT}/devices: 404 Not Found: Not found"
    )


def test_422_is_exit_1_with_the_errors(env, tmp_path, capsys):
    env.inject("POST", "/projects/", 422, body={"errors": ["c3.small.x86 is not available in da", "try sv"]})
    rc, _out, err = cli(capsys, "provision", "master-0", "--config", str(make_config(tmp_path)))
    assert rc == 1
    assert err.splitlines()[-1] == (
        f"bootserver: Equinix Metal API: POST /projects/{PROJECT}/devices: 422 Unprocessable Entity: "
        "c3.small.x86 is not available in da; try sv"
    )


def test_empty_plan_is_bad_input(env, tmp_path, capsys):
    rc, _out, err = cli(capsys, "provision", "master-0", "--config", str(make_config(tmp_path)), "--plan", "")
    assert rc == 2
    assert err == "bootserver: --plan: must be a non-empty string\n"
    assert env.requests == []


def test_missing_token_is_exit_2_naming_the_variable(fake_metal, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("METAL_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("METAL_API_URL", fake_metal.url)
    for args in (["provision", "master-0"], ["deprovision", "master-0"], ["devices"]):
        rc, _out, err = cli(capsys, *args, "--config", str(make_config(tmp_path)))
        assert rc == 2
        assert err == "bootserver: no Equinix Metal API token: set METAL_AUTH_TOKEN\n"
    assert fake_metal.requests == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["provision", "nope"], "no node 'nope'"),
        (["provision", "master-0", "--project", "abc"], "--project: not a project UUID: 'abc'"),
        (["provision", "master-0", "--timeout", "0"], "--timeout"),
        (["deprovision", "nope"], "no node 'nope'"),
    ],
)
def test_bad_input_is_exit_2_before_any_call(env, tmp_path, capsys, args, message):
    rc, _out, err = cli(capsys, *args, "--config", str(make_config(tmp_path)))
    assert rc == 2
    assert message in err and len(err.splitlines()) == 1
    assert env.requests == []


def test_no_project_is_exit_2(env, tmp_path, capsys):
    rc, _out, err = cli(capsys, "devices", "--config", str(make_config(tmp_path, {})))
    assert rc == 2
    assert err == "bootserver: no Equinix Metal project: pass --project ID or set metal.project in the config\n"


def test_bad_metal_config_is_exit_2_naming_the_key(env, tmp_path, capsys):
    config = make_config(tmp_path, plann="x")
    rc, _, err = cli(capsys, "check-config", "--config", str(config))
    assert rc == 2
    assert err == f"bootserver: {config}: nodes.master-0.metal.plann: unknown key (known: plan, metro, facility, " \
                  "billing_cycle, tags, spot_instance, spot_price_max, hardware_reservation_id, project_ssh_keys, " \
                  "customdata, always_pxe)\n"
    rc, _out, err = cli(capsys, "check-config", "--config", str(make_config(tmp_path, {"project": "x"})))
    assert rc == 2 and "metal.project: must be a project UUID" in err


def test_devices_lists_ours_across_pages_and_deprovision_deletes(env, tmp_path, capsys):
    config = make_config(tmp_path, {"project": PROJECT, "tag": "bs-test"})
    for i in range(120):  # more than one page of 100
        env.add_device(f"extra-{i:03}", ["bs-test"])
    env.add_device("foreign", ["other"])
    rc, out, err = cli(capsys, "provision", "master-0", "--no-wait", "--config", str(config))
    assert rc == 0, err
    rc, out, err = cli(capsys, "devices", "--config", str(config))
    assert rc == 0, err
    lines = out.splitlines()
    assert len(lines) == 121
    assert not any("foreign" in line for line in lines)
    master = next(line for line in lines if line.startswith("master-0 "))
    assert master.endswith(" master-0")  # hostname, id, state, addresses, node
    assert [c.query["page"] for c in env.calls("GET", "/projects/")][-2:] == ["1", "2"]

    device_id = master.split()[1]
    rc, out, err = cli(capsys, "deprovision", "master-0", "--config", str(config))
    assert rc == 0, err
    assert out == f"master-0 {device_id} deleted\n"
    assert [c.path for c in env.calls("DELETE")] == [f"/devices/{device_id}"]
    assert "master-0" not in recorded_devices(tmp_path / "state")
    rc, out, err = cli(capsys, "deprovision", "master-0", "--config", str(config))
    assert rc == 0 and out == "master-0 - absent\n"


def test_token_is_never_printed_or_logged(env, tmp_path, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    config = make_config(tmp_path)
    env.inject("GET", "/projects/", 429, headers={"Retry-After": "0"})
    outputs = []
    for args in (["provision", "master-0", "--no-wait", "--log-level", "debug"], ["devices", "--log-level", "debug"],
                 ["deprovision", "master-0", "--log-level", "debug"]):
        rc, out, err = cli(capsys, *args, "--config", str(config))
        assert rc == 0, err
        outputs += [out, err]
    env.token = "another-token"  # now ours is refused: the 401 message must not echo it
    rc, out, err = cli(capsys, "devices", "--config", str(config))
    assert rc == 1 and "401 Unauthorized" in err
    outputs += [out, err, caplog.text]
    assert "GET" in caplog.text
    for text in outputs:
        assert TOKEN not in text


def test_api_url_from_the_config_key(fake_metal, tmp_path, capsys, monkeypatch):
    fake_metal.instant = True
    monkeypatch.setenv("METAL_AUTH_TOKEN", TOKEN)
    monkeypatch.delenv("METAL_API_URL", raising=False)
    config = make_config(tmp_path, {"project": PROJECT, "api_url": fake_metal.url})
    rc, out, err = cli(capsys, "provision", "master-0", "--no-wait", "--config", str(config))
    assert rc == 0, err
    assert out.split()[2] == "queued"
    assert len(fake_metal.calls("POST")) == 1
    assert fake_metal.calls("GET", "/devices/") == []


def test_loopback_chain_url_is_warned_about(env, tmp_path, capsys):
    config = make_config(tmp_path)
    doc = yaml.safe_load(config.read_text())
    del doc["server"]["base_url"]
    write_config(config, doc)
    rc, _, err = cli(capsys, "provision", "master-0", "--no-wait", "--config", str(config))
    assert rc == 0, err
    assert err.splitlines()[0] == (
        "bootserver: warning: devices cannot reach the chain URL http://127.0.0.1:8080/ipxe/master-0: "
        f"set server.base_url in {config}"
    )
