"""Boot-once and the node timeline through the real command line: ``bootserver serve`` subprocesses
(restarted in between), ``bootserver nodes`` and ``bootserver nodes reinstall`` against the same
state_dir while the server runs, and the JSON access log."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from support.configs import config_doc, write
from support.helpers import free_port, run_cli
from support.server import ServerProcess


def _config(tmp_path: Path, port: int) -> Path:
    doc = config_doc(nodes={"master-0": {"profile": "master"}, "master-1": {"profile": "master"}})
    doc["server"] = {"listen": f"127.0.0.1:{port}"}  # base_url: serve's default from listen
    return write(doc, tmp_path)


async def _get(http: aiohttp.ClientSession, url: str) -> str:
    async with http.get(url) as r:
        assert r.status == 200, url
        return await r.text()


async def test_boot_once_across_restart_then_reinstall(tmp_path: Path, reference: Path) -> None:
    port = free_port()
    config = _config(tmp_path, port)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        server = ServerProcess(config, port)
        try:
            await server.start(http)
            rc, out, err = await run_cli("url", "master-0", "--config", str(config))
            chain = out.splitlines()[0]
            install = await _get(http, chain)
            assert "coreos.inst.install_dev=/dev/sda" in install
            stub_url = re.search(r"coreos\.inst\.ignition_url=(\S+)", install).group(1)
            stub = json.loads(await _get(http, stub_url))                 # coreos-installer
            await _get(http, stub["ignition"]["config"]["merge"][0]["source"])  # the installed system's first boot
        finally:
            await server.stop()

        rc, out, err = await run_cli("nodes", "--config", str(config))
        assert rc == 0, err
        rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
        assert rows["master-0"][1:3] == ["master", "installed"]
        assert rows["master-1"][1:3] == ["master", "new"]

        server = ServerProcess(config, port, "--log-format", "json")
        try:
            await server.start(http)
            localboot = await _get(http, chain)
            assert localboot.startswith("#!ipxe\n") and localboot.rstrip().endswith("\nexit")
            assert "kernel " not in localboot
            rc, out, err = await run_cli("render", "ipxe", "master-0", "--config", str(config))
            assert rc == 0 and out == localboot

            rc, out, err = await run_cli("nodes", "reinstall", "master-0", "--config", str(config))
            assert rc == 0, err
            assert "master-0: marked for reinstall" in out
            assert await _get(http, chain) == install
            nodes = json.loads(await _get(http, f"{server.admin_url}/nodes"))
            assert {n["node"]: n["stage"] for n in nodes["nodes"]} == {"master-0": "ipxe", "master-1": "new"}
            events = json.loads(await _get(http, f"{server.admin_url}/nodes/master-0"))["events"]
            assert [e["event"] for e in events] == ["script", "stub", "config", "localboot", "reinstall", "script"]
        finally:
            await server.stop()
        err = (await server.proc.stderr.read()).decode()  # type: ignore[union-attr]
        lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
        access = [x for x in lines if x["logger"] == "bootserver.access" and x["path"] == "/ipxe/master-0"]
        assert [(x["route"], x["node"], x["status"]) for x in access] == [("/ipxe/{node}", "master-0", 200)] * 2
        assert all(x["bytes"] > 0 and x["duration"] >= 0 for x in access)
        assert "s3cr3t" not in err

        rc, out, err = await run_cli("nodes", "show", "master-0", "--config", str(config))
        assert rc == 0 and [line.split()[2] for line in out.splitlines()] == \
            ["script", "stub", "config", "localboot", "reinstall", "script"]


async def test_nodes_command_refuses_unknown_nodes_and_bad_usage(tmp_path: Path, reference: Path) -> None:
    config = _config(tmp_path, free_port())
    rc, _out, err = await run_cli("nodes", "reinstall", "nobody", "--config", str(config))
    assert rc == 2 and "no node 'nobody'" in err and err.count("\n") == 1
    rc, _out, err = await run_cli("nodes", "reinstall", "--config", str(config))
    assert rc == 2 and "the following arguments are required: NODE" in err


def test_output_cut_short_by_a_closed_pipe_is_not_a_traceback(tmp_path: Path, reference: Path) -> None:
    """``bootserver url NODE | head -1``, as docs and scripts use it."""
    config = _config(tmp_path, free_port())
    proc = subprocess.Popen([sys.executable, "-m", "bootserver", "url", "master-0", "--config", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first line is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=30) == 141
    assert err == ""


@pytest.mark.parametrize("workers", ["1", "2"])
async def test_a_damaged_timeline_stops_serve_with_one_line(tmp_path: Path, reference: Path, workers: str) -> None:
    """Same behaviour with and without --workers: no server that answers 503 to every script."""
    port = free_port()
    config = _config(tmp_path, port)
    (tmp_path / "state").mkdir()
    damaged = tmp_path / "state" / "timeline.sqlite3"
    damaged.write_bytes(b"not sqlite\n" * 1000)
    rc, _out, err = await run_cli("serve", "--workers", workers, "--config", str(config), timeout=30)
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith(f"bootserver: {damaged}: the node timeline is damaged")
    assert "move it aside" in err and "Traceback" not in err
    assert damaged.read_bytes() == b"not sqlite\n" * 1000  # left as found, for the operator


async def test_a_damaged_timeline_stops_db_migrate_with_the_same_line(tmp_path: Path, reference: Path) -> None:
    """`db migrate` reads the schema version first: a file that is no database is the same one line and
    exit 2 as at `serve`, never a driver's message without the file or what to do."""
    config = _config(tmp_path, free_port())
    (tmp_path / "state").mkdir()
    damaged = tmp_path / "state" / "timeline.sqlite3"
    damaged.write_bytes(b"not sqlite\n" * 1000)
    rc, out, err = await run_cli("db", "migrate", "--config", str(config), timeout=30)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"bootserver: {damaged}: the node timeline is damaged")
    assert "move it aside" in err and "Traceback" not in err
    assert damaged.read_bytes() == b"not sqlite\n" * 1000


async def test_nodes_show_reports_coalesced_repeats(tmp_path: Path, reference: Path) -> None:
    config = _config(tmp_path, free_port())
    for _ in range(3):
        rc, out, err = await run_cli("nodes", "reinstall", "master-0", "--config", str(config))
        assert rc == 0, err
    rc, out, err = await run_cli("nodes", "show", "master-0", "--config", str(config))
    (line,) = out.splitlines()
    assert rc == 0 and line.split()[2] == "reinstall" and re.search(r"\(3 times, last at [0-9: -]+\)$", line)


async def test_an_unusable_state_dir_stops_serve_with_one_line(tmp_path: Path, reference: Path) -> None:
    config = _config(tmp_path, free_port())
    (tmp_path / "state").write_text("a file where state_dir should be")
    rc, _out, err = await run_cli("serve", "--config", str(config), timeout=30)
    assert rc == 1 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"bootserver: {tmp_path / 'state' / 'timeline.sqlite3'}: cannot open the node timeline: ")
