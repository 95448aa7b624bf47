"""The check-in: the unit in every node's stub, the signed ``POST /checkin/{node}``, stage ``up``, and the
unit's own command (real curl) run against a real ``serve``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from support.configs import STREAM, config_doc, load, master_profile
from support.helpers import checkin_command, run_cli, write_config
from support.server import ServerProcess
from support.signing import FIXED_NOW, relative, signed

from bootserver.config import load_config
from bootserver.http.app import SERVICE, create_app
from bootserver.signing import expiry
from bootserver.timeline import next_stage


async def node_report(svc: Any, node: str) -> dict[str, Any]:
    """The node's stage and events as ``GET /nodes/<node>`` shows them."""
    state, events = await svc.history(node)
    return {**state.as_dict(time.time()), "events": [e.as_dict() for e in events]}


@pytest.mark.parametrize(("stage", "mode", "after"), [
    ("installed", "install", "up"), ("running", "live", "up"), ("unconfirmed", "install", "up"),
    ("installing", "install", "up"), ("up", "install", "up"), ("new", "live", "up"),
    # marked for reinstall, or network-booting: a check-in of a system booted before changes nothing
    ("reinstall", "install", "reinstall"), ("ipxe", "install", "ipxe"), ("rootfs", "live", "rootfs"),
])
def test_checkin_leads_to_up_except_while_reinstalling_or_network_booting(stage: str, mode: str, after: str) -> None:
    assert next_stage(stage, "checkin", mode) == after


def test_up_keeps_against_stray_artifacts_and_a_new_script_boots_again() -> None:
    assert next_stage("up", "rootfs-requested", "live") == "up"
    assert next_stage("up", "localboot", "install") == "up"
    assert next_stage("up", "script", "live") == "ipxe"


@pytest.fixture
def config(tmp_path: Path):
    return load(config_doc(profiles={"master": master_profile(),
                                     "quiet": {"stream": STREAM, "mode": "live", "checkin": False}},
                           nodes={"master-0": {"profile": "master"}, "quiet-0": {"profile": "quiet"}}), tmp_path)


async def test_the_stub_carries_an_enabled_unit_that_posts_to_the_signed_checkin_url(client, config) -> None:
    svc = client.app[SERVICE]
    stub = json.loads(await svc.stub("master-0"))
    [unit] = stub["systemd"]["units"]
    assert unit["name"] == "bootserver-checkin.service" and unit["enabled"] is True
    lines = unit["contents"].splitlines()
    assert "After=network-online.target" in lines and "Wants=network-online.target" in lines
    assert "WantedBy=multi-user.target" in lines
    # long-lived like the chain URL: it sits on the installed disk
    exp = expiry(FIXED_NOW, config.server.signing.chain_ttl)
    url = f"http://boot.example.net:8080{signed('/checkin/master-0', 'master-0', exp)}"
    command = checkin_command(stub)
    assert command[0] == "/usr/bin/curl" and command[-3:] == ["-X", "POST", url]
    assert {"--fail", "--retry", "--retry-connrefused"} <= set(command)
    # the real config is still merged, unchanged
    assert stub["ignition"]["config"]["merge"][0]["source"].startswith("http://boot.example.net:8080/ignition/")


async def test_checkin_false_leaves_the_unit_out(client) -> None:
    stub = json.loads(await client.app[SERVICE].stub("quiet-0"))
    assert "systemd" not in stub


async def test_a_signed_checkin_moves_the_node_to_up_with_its_address(client) -> None:
    url = relative(checkin_command(json.loads(await client.app[SERVICE].stub("master-0")))[-1])
    r = await client.post(url)
    assert r.status == 200 and await r.text() == "master-0: up\n"
    r = await node_report(client.app[SERVICE], "master-0")
    assert r["stage"] == "up"
    assert [(e["event"], e["ip"]) for e in r["events"]] == [("checkin", "127.0.0.1")]
    assert (await client.get(url)).status == 405  # POST only


@pytest.mark.parametrize("query", ["", "?exp=1&sig=" + "A" * 43, "WRONG"])
async def test_a_bad_or_missing_signature_is_403_and_records_nothing(client, query: str) -> None:
    exp = expiry(FIXED_NOW, 3600)
    if query == "WRONG":  # a valid signature of another node's check-in
        query = signed("/checkin/quiet-0", "quiet-0", exp).removeprefix("/checkin/quiet-0")
    r = await client.post("/checkin/master-0" + query)
    assert r.status == 403 and await r.text() == "forbidden\n"
    report = await node_report(client.app[SERVICE], "master-0")
    assert report["stage"] == "new" and report["events"] == []


async def test_the_units_own_command_run_on_this_host_checks_the_node_in(boot_setup, tmp_path: Path) -> None:
    """The stub a real ``serve`` hands out, its unit's ExecStart (real curl) run here: stage ``up``; the
    stub and the real config fetched again leave it ``up`` (docs/design.md, "Stage order") until
    ``nodes reinstall`` starts a new round."""
    setup = boot_setup(10_000, {"m-0": {"profile": "master"}})
    stub_url = None
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        server = ServerProcess(setup.config, setup.port)
        try:
            await server.start(http)
            rc, out, err = await run_cli("render", "ipxe", "m-0", "--config", str(setup.config))
            assert rc == 0, err
            stub_url = next(w.split("=", 1)[1] for w in out.split() if w.startswith("coreos.inst.ignition_url="))
            async with http.get(stub_url) as r:
                stub = json.loads(await r.read())
            command = checkin_command(stub)
            proc = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=60)
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout == "m-0: up\n"
            rc, out, err = await run_cli("nodes", "--config", str(setup.config))
            assert rc == 0, err
            row = next(line.split() for line in out.splitlines() if line.startswith("m-0 "))
            assert row[2] == "up"
            # fetched again after `up` (a retry, an operator's curl): into the history, the stage stays
            real_config_url = stub["ignition"]["config"]["merge"][0]["source"]
            for url in (stub_url, real_config_url):
                async with http.get(url) as r:
                    assert r.status == 200
            rc, out, err = await run_cli("nodes", "show", "m-0", "--config", str(setup.config))
            assert rc == 0, err
            assert [line.split()[2] for line in out.splitlines()[-2:]] == ["stub", "config"], out
            async with http.get(server.admin_url + "/nodes") as r:
                assert [n["stage"] for n in (await r.json())["nodes"] if n["node"] == "m-0"] == ["up"]
            rc, _, err = await run_cli("nodes", "reinstall", "m-0", "--config", str(setup.config))
            assert rc == 0, err
            async with http.get(stub_url) as r:
                assert r.status == 200
            async with http.get(server.admin_url + "/nodes") as r:
                assert [n["stage"] for n in (await r.json())["nodes"] if n["node"] == "m-0"] == ["installing"]
        finally:
            await server.stop()


@pytest.mark.parametrize(("grace", "status"), [("1h", 200), ("0", 403)])
async def test_a_checkin_url_works_after_keys_rotate_within_the_grace_only(aiohttp_client, reference: Path,
                                                                           tmp_path: Path, grace: str,
                                                                           status: int) -> None:
    path = write_config(tmp_path / "bootserver.yaml", {
        "server": {"base_url": "http://boot.example.net:8080"}, "state_dir": "state",
        "streams": {"r": {"metadata": str(reference / "rhcos-stream-4.16.json")}},
        "profiles": {"live": {"stream": "r", "mode": "live"}}, "nodes": {"live-0": {"profile": "live"}}})
    client = await aiohttp_client(create_app(load_config(str(path))))  # the keys of state_dir, the wall clock
    url = relative(checkin_command(json.loads(await client.app[SERVICE].stub("live-0")))[-1])
    rc, _, err = await run_cli("keys", "rotate", "--grace", grace, "--config", str(path))
    assert rc == 0, err
    r = await client.post(url)
    assert r.status == status
    assert (await node_report(client.app[SERVICE], "live-0"))["stage"] == ("up" if status == 200 else "new")
