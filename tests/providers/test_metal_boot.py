"""End to end: ``bootserver provision`` against the fake Equinix API, then play the devices it created.

A fake upstream serves the artifacts of a copy of the real rhcos-stream-4.16.json; ``bootserver
sync-images`` caches them; ``bootserver serve`` runs; ``bootserver provision`` (a real subprocess) creates
one device with ``ipxe_script_url`` and one with ``#!ipxe`` userdata. Each device is then played the way
Equinix's iPXE and the live system would: fetch the chain URL it was given, every URL of the script,
the Ignition stub and the config it merges, checking every hash.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import aiohttp
from support.fake_metal import PROJECT, TOKEN, fake_metal_fixture  # noqa: F401 - the fake_metal fixture
from support.helpers import recorded_devices, run_cli
from support.server import synced_server


async def play_device(http: aiohttp.ClientSession, chain_url: str, expected_sha256: set[str], real: bytes) -> None:
    """Do what a device does after iPXE chains to ``chain_url``."""
    async with http.get(chain_url) as r:
        assert r.status == 200, chain_url
        script = await r.text()
    assert script.startswith("#!ipxe\n")
    kernel_line = next(line for line in script.splitlines() if line.startswith("kernel "))
    initrd_line = next(line for line in script.splitlines() if line.startswith("initrd "))
    kargs = dict(w.split("=", 1) for w in kernel_line.split()[2:] if "=" in w)
    got = set()
    for url in (kernel_line.split()[1], initrd_line.split()[3], kargs["coreos.live.rootfs_url"]):
        async with http.get(url) as r:
            assert r.status == 200, url
            got.add(hashlib.sha256(await r.read()).hexdigest())
    assert got == expected_sha256
    async with http.get(kargs["coreos.inst.ignition_url"]) as r:
        assert r.status == 200
        stub = json.loads(await r.read())
    merge = stub["ignition"]["config"]["merge"][0]
    async with http.get(merge["source"]) as r:
        assert r.status == 200
        body = await r.read()
    assert body == real
    assert merge["verification"]["hash"] == "sha512-" + hashlib.sha512(body).hexdigest()


async def test_provision_then_boot_like_the_devices(tmp_path: Path, boot_setup, fake_metal, monkeypatch) -> None:
    setup = boot_setup(100_000, {"master-0": {"profile": "master"}, "master-1": {"profile": "master"}},
                       profile_metal={"plan": "c3.small.x86", "metro": "da", "always_pxe": False},
                       metal={"project": PROJECT})
    config, port, master_ign, expected = setup.config, setup.port, setup.master_ign, setup.expected_sha256
    fake_metal.instant = True  # the subprocess cannot take an injected clock; no real polling pauses
    monkeypatch.setenv("METAL_AUTH_TOKEN", TOKEN)
    monkeypatch.setenv("METAL_API_URL", fake_metal.url)

    async with (synced_server(config, port) as server,
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http):
        rc, out0, err0 = await run_cli("provision", "master-0", "--no-wait", "--config", str(config),
                                       "--log-level", "debug")
        assert rc == 0, err0
        rc, out1, err1 = await run_cli("provision", "master-1", "--no-wait", "--via", "userdata",
                                       "--config", str(config))
        assert rc == 0, err1
        for text in (out0, err0, out1, err1):
            assert TOKEN not in text
        assert fake_metal.invalid_bodies == []

        devices = {d["hostname"]: d for d in fake_metal.devices.values()}
        assert out0 == f"master-0 {devices['master-0']['id']} queued 147.75.0.10,2604:1380::a,10.70.0.10\n"
        state = recorded_devices(tmp_path / "state")["master-0"]
        assert state["id"] == devices["master-0"]["id"]
        assert [a["address"] for a in state["ip_addresses"]] == [
            "147.75.0.10",
            "2604:1380::a",
            "10.70.0.10",
        ]

        # device 0 got an ipxe_script_url: its iPXE fetches that URL as its script
        assert "userdata" not in devices["master-0"]
        await play_device(http, devices["master-0"]["ipxe_script_url"], expected, master_ign.read_bytes())

        # device 1 got userdata: Equinix's iPXE runs it, and it chains to our URL
        userdata = devices["master-1"]["userdata"].splitlines()
        assert userdata[0] == "#!ipxe" and len(userdata) == 2
        verb, flag, chain_url = userdata[1].split(" ")
        assert (verb, flag) == ("chain", "--autofree")
        assert chain_url.startswith(f"{server.url}/ipxe/master-1?exp=") and "&sig=" in chain_url
        await play_device(http, chain_url, expected, master_ign.read_bytes())

        # keys rotate revokes every chain URL (no grace); provision re-points the device
        old_url = devices["master-0"]["ipxe_script_url"]
        rc, _, err = await run_cli("keys", "rotate", "--grace", "0", "--config", str(config))
        assert rc == 0, err
        async with http.get(old_url) as r:
            assert r.status == 403
        rc, _, err = await run_cli("provision", "master-0", "--no-wait", "--config", str(config))
        assert rc == 0, err
        assert [c.path for c in fake_metal.calls("PUT")] == [f"/devices/{devices['master-0']['id']}"]
        assert fake_metal.invalid_bodies == []
        new_url = fake_metal.devices[devices["master-0"]["id"]]["ipxe_script_url"]
        assert new_url != old_url
        async with http.get(new_url) as r:
            assert r.status == 200 and (await r.text()).startswith("#!ipxe\n")

        rc, _out, err = await run_cli("deprovision", "master-0", "master-1", "--config", str(config))
        assert rc == 0, err
        assert fake_metal.devices == {}
