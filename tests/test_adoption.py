"""``bootserver nodes adopt`` says only what is true (issue 41): two adoptions racing for one name leave
exactly one node and name the winner to the other; the node is pinned to the address its machine
reported from unless told otherwise; an architecture the profile does not boot is refused; a reload
that does not bring the node removes its file again and the machine stays discovered."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from support.discovery import UUID, report_path
from support.helpers import run_cli
from support.reloading import main_config
from support.server import ServerProcess

from bootserver.adoption import AdoptionFailed, adopt
from bootserver.config import load_config
from bootserver.http.app import ADMIN_APP, create_app
from bootserver.http.running import RUNNING
from bootserver.state.backends import open_store

#: ``server`` of a config whose discovery records every report (no wait per address), for tests that
#: report several machines from 127.0.0.1.
ANY_RATE = {"listen": "127.0.0.1:8080", "discovery": {"per_address": 0}}


def mac(i: int) -> str:
    return f"52:54:00:ad:00:{i:02x}"


async def report_from(url: str, address: str, path: str) -> None:
    """A report sent from the local address ``address`` (a machine at another address)."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(address, 0))) as s, \
            s.get(url + path) as r:
        assert r.status == 200


async def script_from(url: str, address: str, machine: str) -> tuple[int, str]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(address, 0))) as s, \
            s.get(f"{url}/boot.ipxe?mac={machine}") as r:
        return r.status, await r.text()


async def test_racing_adoptions_leave_one_node_pinned_to_its_reporting_address(tmp_path: Path,
                                                                               reference: Path) -> None:
    path = main_config(tmp_path, reference)
    port = int(yaml.safe_load(path.read_text())["server"]["listen"].rsplit(":", 1)[1])
    server = ServerProcess(path, port)
    async with aiohttp.ClientSession() as session:
        await server.start(session)
        try:
            for i in range(6):
                await report_from(server.url, f"127.0.0.{10 + i}", report_path(mac(i), uuid=""))
            for round_ in range(3):
                one, two = mac(2 * round_), mac(2 * round_ + 1)
                name = f"race-{round_}"
                results = await asyncio.gather(
                    run_cli("nodes", "adopt", "--file=", one, "--name", name, "--profile", "live",
                            "--config", str(path)),
                    run_cli("nodes", "adopt", "--file=", two, "--name", name, "--profile", "live",
                            "--config", str(path)))
                won = [i for i, (rc, _, _) in enumerate(results) if rc == 0]
                assert len(won) == 1, results
                winner, loser = (one, two) if won == [0] else (two, one)
                rc, _, err = results[1 - won[0]]
                # refused naming the winner: still adopting it, or done with it
                assert rc == 2 and name in err and (winner in err or f"{name}.yaml" in err), err
                node = load_config(path).nodes[name]
                assert node.mac == (winner,)
                rc, out, _ = await run_cli("nodes", "discovered", "--config", str(path))
                assert loser in out and winner not in out
                # pinned to the address it reported from: only that address gets its script
                at = f"127.0.0.{10 + int(winner[-2:], 16)}"
                status, body = await script_from(server.url, at, winner)
                assert status == 200 and "kernel " in body
                status, body = await script_from(server.url, "127.0.0.99", winner)
                assert "kernel " not in body and (status == 404 or "bs-report" in body), body  # not its script
            assert sorted(p.name for p in (tmp_path / "nodes.d").iterdir()) == ["race-0.yaml", "race-1.yaml",
                                                                               "race-2.yaml"]
            assert sorted(p.name for p in (tmp_path / "state" / "adopting").iterdir()) == []  # claims released
        finally:
            await server.stop()


async def test_selectable_anywhere_only_when_asked_and_with_a_warning(tmp_path: Path, reference: Path,
                                                                      aiohttp_client: Any) -> None:
    path = main_config(tmp_path, reference, server=ANY_RATE)
    app = create_app(load_config(path))
    client = await aiohttp_client(app)
    for i in range(3):
        assert (await client.get(report_path(mac(i), uuid=""))).status == 200
    await app[RUNNING].runtime.drain()
    rc, _, err = await run_cli("nodes", "adopt", "--file=", mac(0), "--name", "open-0", "--profile", "live",
                                 "--selectable-anywhere", "--config", str(path))
    assert rc == 0 and "warning: node open-0 is selectable from any address" in err, err
    node = yaml.safe_load((tmp_path / "nodes.d" / "open-0.yaml").read_text())["nodes"]["open-0"]
    assert node["selectable"] is True and "addresses" not in node
    rc, _, err = await run_cli("nodes", "adopt", "--file=", mac(1), "--name", "net-1", "--profile", "live",
                                 "--addresses", "10.1.0.0/24,10.2.0.7", "--config", str(path))
    assert rc == 0 and "warning" not in err, err
    node = yaml.safe_load((tmp_path / "nodes.d" / "net-1.yaml").read_text())["nodes"]["net-1"]
    assert node["addresses"] == ["10.1.0.0/24", "10.2.0.7"] and "selectable" not in node
    rc, _, err = await run_cli("nodes", "adopt", "--file=", mac(2), "--name", "bad-2", "--profile", "live",
                                 "--addresses", "10.1.0.300", "--config", str(path))
    assert rc == 2 and err.strip() == ("bootserver: --addresses 10.1.0.300: not an IP address or network "
                                       "(10.0.0.5, 10.0.0.0/24)")


async def test_an_architecture_the_profile_does_not_boot_is_refused(tmp_path: Path, reference: Path,
                                                                    aiohttp_client: Any) -> None:
    path = main_config(tmp_path, reference, server=ANY_RATE)
    app = create_app(load_config(path))
    client = await aiohttp_client(app)
    assert (await client.get(report_path(mac(1), uuid="", buildarch="arm64", platform="efi"))).status == 200
    assert (await client.get(report_path(mac(2), uuid="", buildarch="i386", platform="pcbios"))).status == 200
    await app[RUNNING].runtime.drain()
    rc, out, err = await run_cli("nodes", "discovered", "--config", str(path))
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "aarch64 (arm64)/efi" in rows[mac(1)] and "x86_64 (i386)/pcbios" in rows[mac(2)]
    page = await (await (await aiohttp_client(app[ADMIN_APP])).get("/")).text()
    assert "<td>aarch64 (arm64)/efi</td>" in page and "<td>x86_64 (i386)/pcbios</td>" in page
    assert '<span id="total">1</span> node, ' in page  # one node, not "1 nodes"
    rc, _, err = await run_cli("nodes", "adopt", "--file=", mac(1), "--name", "arm-1", "--profile", "live",
                               "--config", str(path))
    assert rc == 2 and err.strip() == (f"bootserver: machine {mac(1)} is aarch64 (arm64)/efi; profile live boots "
                                       "x86_64: pass a profile of its architecture"), err
    assert not (tmp_path / "nodes.d" / "arm-1.yaml").exists()
    rc, _, err = await run_cli("nodes", "adopt", "--file=", mac(2), "--name", "bios-2", "--profile", "live",
                               "--config", str(path))
    assert rc == 0, err  # iPXE's i386 on a BIOS machine: an x86_64 one


async def test_a_reload_without_an_outcome_removes_the_file_and_the_machine_stays_discovered(
        tmp_path: Path, reference: Path) -> None:
    path = main_config(tmp_path, reference)
    port = int(yaml.safe_load(path.read_text())["server"]["listen"].rsplit(":", 1)[1])
    server = ServerProcess(path, port)
    config = load_config(path)
    async with aiohttp.ClientSession() as session:
        await server.start(session)
        store = open_store(config)
        try:
            async with session.get(server.url + report_path(mac(3), uuid=UUID)) as r:
                assert r.status == 200
            assert server.proc is not None
            os.kill(server.proc.pid, signal.SIGSTOP)  # a server that cannot answer the reload
            try:
                with pytest.raises(AdoptionFailed) as e:
                    await adopt(config, store, mac(3), name="stuck-3", profile="live", reload_timeout=1.0)
            finally:
                os.kill(server.proc.pid, signal.SIGCONT)
            assert str(e.value).startswith("stuck-3: not adopted: bootserver serve (process ")
            assert e.value.exit_code == 1
            assert not (tmp_path / "nodes.d" / "stuck-3.yaml").exists()
            assert [d.mac for d in await store.discovered()] == [mac(3)]
        finally:
            await store.close()
            await server.stop()
