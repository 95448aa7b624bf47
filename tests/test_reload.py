"""Live reload (issue 32): ``include:`` files, the reload of a running application (a new node served,
an invalid config refused with the old one serving, restart-only keys kept, metrics and the page), and
``bootserver reload`` / SIGHUP against real ``serve`` processes, with ``--workers 3`` too."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from support.helpers import REPO, run_cli, write_config
from support.metrics import metric
from support.reloading import MAC, add_node, main_config
from support.server import ServerProcess

from bootserver.config import load_config
from bootserver.errors import ConfigError
from bootserver.http.app import ADMIN_APP, create_app
from bootserver.http.running import RUNNING
from bootserver.inventory import inventory

NEW_MAC = "52:54:00:00:00:02"


# --- include: -------------------------------------------------------------------------------------------

def test_include_merges_the_nodes_and_profiles_of_every_matching_file(tmp_path: Path, reference: Path) -> None:
    main_config(tmp_path, reference)
    add_node(tmp_path, "b-node", NEW_MAC)
    write_config(tmp_path / "nodes.d" / "a.yaml", {"profiles": {"other": {"stream": "rhcos", "mode": "live"}},
                                                   "nodes": {"a-node": {"profile": "other"}}})
    config = load_config(tmp_path / "bootserver.yaml")
    assert list(config.nodes) == ["steady", "a-node", "b-node"]
    assert set(config.profiles) == {"live", "other"}
    assert inventory(config).find(mac=NEW_MAC).name == "b-node"
    assert config.origins["nodes.b-node"] == str(tmp_path / "nodes.d" / "b-node.yaml")
    # every node's source, the interface of nodes list's SOURCE column and the fleet API
    assert dict(config.node_sources) == {"steady": f"file:{tmp_path / 'bootserver.yaml'}",
                                         "a-node": f"file:{tmp_path / 'nodes.d' / 'a.yaml'}",
                                         "b-node": f"file:{tmp_path / 'nodes.d' / 'b-node.yaml'}"}


def test_a_name_defined_twice_is_refused_naming_both_files(tmp_path: Path, reference: Path) -> None:
    main_config(tmp_path, reference)
    add_node(tmp_path, "twin", NEW_MAC, file="one.yaml")
    add_node(tmp_path, "twin", "52:54:00:00:00:03", file="two.yaml")
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "bootserver.yaml")
    one, two = tmp_path / "nodes.d" / "one.yaml", tmp_path / "nodes.d" / "two.yaml"
    assert str(e.value) == (f"{two}: nodes.twin: node 'twin' is defined in {one} and in {two}; "
                            "a name may be defined once")
    add_node(tmp_path, "steady", NEW_MAC, file="two.yaml")  # also against the main file
    with pytest.raises(ConfigError, match=f"defined in {tmp_path / 'bootserver.yaml'} and in {two}"):
        load_config(tmp_path / "bootserver.yaml")


def test_an_error_in_an_included_node_names_its_file(tmp_path: Path, reference: Path) -> None:
    main_config(tmp_path, reference)
    bad = add_node(tmp_path, "bad", NEW_MAC, profile="nope")
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "bootserver.yaml")
    assert str(e.value) == f"{bad}: nodes.bad.profile: no profile 'nope'"
    write_config(bad, {"nodes": {"bad": {"profile": "live", "mac": ["52:54:00:00:00:01"]}}})
    with pytest.raises(ConfigError, match=rf"^{bad}: nodes.bad.mac: 52:54:00:00:00:01 is already the MAC of node"):
        load_config(tmp_path / "bootserver.yaml")
    write_config(bad, {"x": {}})
    with pytest.raises(ConfigError, match=rf"^{bad}: x: an included file holds only streams, profiles, nodes"):
        load_config(tmp_path / "bootserver.yaml")


def test_a_glob_may_match_nothing_but_a_named_file_must_exist(tmp_path: Path, reference: Path) -> None:
    main_config(tmp_path, reference)
    assert list(load_config(tmp_path / "bootserver.yaml").nodes) == ["steady"]
    main_config(tmp_path, reference, include=["extra.yaml"])
    with pytest.raises(ConfigError, match=r"extra.yaml: cannot read config: No such file"):
        load_config(tmp_path / "bootserver.yaml")


# --- reload of a running application --------------------------------------------------------------------

async def test_reload_serves_a_new_node_and_refuses_an_invalid_config(tmp_path: Path, reference: Path,
                                                                      aiohttp_client: Any, caplog: Any) -> None:
    path = main_config(tmp_path, reference)
    app = create_app(load_config(path))
    client = await aiohttp_client(app)
    admin = await aiohttp_client(app[ADMIN_APP])
    running = app[RUNNING]
    assert "bs-report" in await (await client.get(f"/boot.ipxe?mac={NEW_MAC}")).text()  # not a node: discovery

    add_node(tmp_path, "added", NEW_MAC)
    assert await running.reload()
    r = await client.get(f"/boot.ipxe?mac={NEW_MAC}")
    assert r.status == 200 and "kernel " in await r.text()
    first_at = running.current.at

    # an invalid config: one line naming the file and key, and the running config keeps serving
    bad = add_node(tmp_path, "broken", "52:54:00:00:00:03", profile="nope")
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="bootserver.web"):
        assert not await running.reload()
    [line] = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert line.endswith(f"{bad}: nodes.broken.profile: no profile 'nope'") and "reload refused" in line
    assert running.current.at == first_at
    assert "kernel " in await (await client.get(f"/boot.ipxe?mac={NEW_MAC}")).text()  # still the node's script
    bad.unlink()

    # the metrics and the page say it
    text = await (await admin.get("/metrics")).text()
    assert metric(text, 'bootserver_config_reloads_total{result="ok"}') == 1
    assert metric(text, 'bootserver_config_reloads_total{result="invalid"}') == 1
    assert metric(text, "bootserver_config_loaded_timestamp_seconds") == pytest.approx(first_at)
    page = await (await admin.get("/")).text()
    assert f'data-at="{first_at}"' in page and "added" in page

    # a node removed: gone from the next request on
    (tmp_path / "nodes.d" / "added.yaml").unlink()
    assert await running.reload()
    assert "bs-report" in await (await client.get(f"/boot.ipxe?mac={NEW_MAC}")).text()  # not a node: discovery
    assert "added" not in await (await admin.get("/")).text()


async def test_restart_only_keys_keep_their_running_values_in_one_warning(tmp_path: Path, reference: Path,
                                                                          aiohttp_client: Any, caplog: Any) -> None:
    path = main_config(tmp_path, reference)
    config = load_config(path)
    app = create_app(config)
    await aiohttp_client(app)
    running = app[RUNNING]
    doc = yaml.safe_load(path.read_text())
    doc["server"]["listen"] = "127.0.0.1:1"
    doc["cache_dir"] = "elsewhere"
    doc["server"]["base_url"] = "http://10.0.2.2:9999"  # not restart-only: it follows
    write_config(path, doc)
    with caplog.at_level(logging.WARNING, logger="bootserver.web"):
        assert await running.reload()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["reload: server.listen, cache_dir changed in the config but need a restart; they keep "
                        "their running values until `systemctl restart bootserver`"]
    now = running.current.svc.config
    assert now.server.listen == config.server.listen and now.cache_dir == config.cache_dir
    assert now.server.effective_base_url == "http://10.0.2.2:9999"


async def test_a_reload_that_points_a_stream_elsewhere_serves_its_release(tmp_path: Path, reference: Path,
                                                                         upstream: Any, aiohttp_client: Any,
                                                                         caplog: Any) -> None:
    """Issue 37: a stream's ``metadata`` URL changed by a reload is loaded at once (not the synced copy of the
    old URL), its new release is logged, served in scripts and listed by ``/readyz``; a restart with the
    changed URL does the same (the copy names its source)."""
    for name, release in (("old", "416.94.202405100000-0"), ("new", "417.94.202411270000-0")):
        doc = json.loads((reference / "rhcos-stream-4.16.json").read_text())
        doc["architectures"]["x86_64"]["artifacts"]["metal"]["release"] = release
        upstream.files[f"/{name}.json"] = json.dumps(doc).encode()
    path = main_config(tmp_path, reference, streams={"rhcos": {"metadata": upstream.url + "/old.json"}})
    app = create_app(load_config(path))
    client = await aiohttp_client(app)
    running = app[RUNNING]
    assert "/416.94.202405100000-0/" in await (await client.get(f"/boot.ipxe?mac={MAC}")).text()
    doc = yaml.safe_load(path.read_text())
    doc["streams"]["rhcos"]["metadata"] = upstream.url + "/new.json"
    write_config(path, doc)
    with caplog.at_level(logging.INFO, logger="bootserver.web"):
        assert await running.reload()
        await running.runtime.drain()  # the reload's load of the new source
    assert "reload: stream rhcos serves release 417.94.202411270000-0 (x86_64) (was 416.94.202405100000-0 " \
           "(x86_64))" in [r.getMessage() for r in caplog.records]
    assert "/417.94.202411270000-0/" in await (await client.get(f"/boot.ipxe?mac={MAC}")).text()
    report = await (await client.get("/readyz")).json()
    assert {a["release"] for a in report["artifacts"]} == {"417.94.202411270000-0"}
    # a restart with the URL changed back: the copy of new.json is not taken for old.json
    doc["streams"]["rhcos"]["metadata"] = upstream.url + "/old.json"
    write_config(path, doc)
    again = await aiohttp_client(create_app(load_config(path)))
    assert "/416.94.202405100000-0/" in await (await again.get(f"/boot.ipxe?mac={MAC}")).text()


async def test_a_request_in_flight_finishes_on_the_config_it_started_with(tmp_path: Path, reference: Path,
                                                                           aiohttp_client: Any) -> None:
    """The node's script request is held inside the state store read while its node is removed by a
    reload: it is answered from the config it came in with, and the next request gets the new one's answer
    to an unknown machine (the discovery script)."""
    path = main_config(tmp_path, reference)
    add_node(tmp_path, "leaving", NEW_MAC)
    app = create_app(load_config(path))
    client = await aiohttp_client(app)
    running = app[RUNNING]
    svc = running.current.svc
    entered, release = asyncio.Event(), asyncio.Event()
    read = svc.runtime.state.current

    async def held(node: str) -> Any:
        entered.set()
        await release.wait()
        return await read(node)

    svc.runtime.state.current = held  # type: ignore[method-assign]
    request = asyncio.ensure_future(client.get(f"/boot.ipxe?mac={NEW_MAC}"))
    await asyncio.wait_for(entered.wait(), 10)
    (tmp_path / "nodes.d" / "leaving.yaml").unlink()
    assert await running.reload()
    svc.runtime.state.current = read  # type: ignore[method-assign]
    release.set()
    r = await asyncio.wait_for(request, 10)
    assert r.status == 200 and "kernel " in await r.text()
    assert "bs-report" in await (await client.get(f"/boot.ipxe?mac={NEW_MAC}")).text()  # not a node: discovery


# --- bootserver reload, SIGHUP, --workers -----------------------------------------------------------------

async def test_bootserver_reload_without_a_server_says_so(tmp_path: Path, reference: Path) -> None:
    path = main_config(tmp_path, reference)
    rc, _, err = await run_cli("reload", "--config", str(path))
    assert rc == 2
    assert err.strip() == (f"bootserver: no bootserver serve runs with state_dir {tmp_path / 'state'} "
                           "(no readable serve.pid); nothing to reload")


@pytest.mark.parametrize("workers", [1, 3])
async def test_bootserver_reload_and_sighup_reload_every_worker(tmp_path: Path, reference: Path, workers: int) -> None:
    path = main_config(tmp_path, reference)
    doc = yaml.safe_load(path.read_text())
    write_config(path, {**doc, "dhcp": {"interface": "lo"}})  # a DHCP engine configured, none running
    port = int(doc["server"]["listen"].rsplit(":", 1)[1])
    server = ServerProcess(path, port, *(["--workers", str(workers)] if workers > 1 else []))
    async with aiohttp.ClientSession() as session:
        await server.start(session)
        try:
            pid_file, end = tmp_path / "state" / "serve.pid", time.monotonic() + 15
            while not pid_file.exists():  # with --workers: written once every worker listens
                assert time.monotonic() < end, "no serve.pid within 15 s"
                await asyncio.sleep(0.05)  # polling interval, bounded above
            pid = int(pid_file.read_text())
            assert pid == server.proc.pid  # type: ignore[union-attr]

            add_node(tmp_path, "added", NEW_MAC)
            rc, out, err = await run_cli("reload", "--config", str(path))
            assert rc == 0, err
            assert out.splitlines() == [f"reloaded {path}: 1 stream, 1 profile, 2 nodes",
                                        f"bootserver dhcp: none runs with state_dir {tmp_path / 'state'}; "
                                        "it reads the config when it starts"]
            # every worker reloaded: each counted one, and every answer (whichever worker) knows the node
            text = await (await session.get(server.admin_url + "/metrics")).text()
            assert metric(text, 'bootserver_config_reloads_total{result="ok"}') == workers
            for _ in range(4 * workers):
                async with session.get(f"{server.url}/boot.ipxe?mac={NEW_MAC}") as r:
                    assert r.status == 200 and "kernel " in await r.text()  # the node's script

            # an invalid config: `bootserver reload` refuses it itself (nothing sent, exit 2) ...
            add_node(tmp_path, "broken", "52:54:00:00:00:03", profile="nope")
            rc, _, err = await run_cli("reload", "--config", str(path))
            assert rc == 2 and err.strip().endswith("nodes.broken.profile: no profile 'nope'")
            # ... and a SIGHUP leaves the running config serving in every worker
            sent = time.time()
            os.kill(pid, signal.SIGHUP)
            status = await asyncio.to_thread(_wait_status, tmp_path / "state" / "reload.json", sent)
            assert status["result"] == "invalid" and "no profile 'nope'" in status["message"]
            end = time.monotonic() + 15
            while metric(await (await session.get(server.admin_url + "/metrics")).text(),
                         'bootserver_config_reloads_total{result="invalid"}') != workers:
                assert time.monotonic() < end, "not every worker refused the invalid config within 15 s"
                await asyncio.sleep(0.05)  # polling interval, bounded above
            for _ in range(4 * workers):
                async with session.get(f"{server.url}/boot.ipxe?mac={NEW_MAC}") as r:
                    assert r.status == 200 and "kernel " in await r.text()  # the node's script
        finally:
            await server.stop()
    assert not (tmp_path / "state" / "serve.pid").exists()


def _wait_status(status_file: Path, sent: float) -> dict[str, Any]:
    """The reload outcome written after ``sent`` (polled, at most 15 s)."""
    end = time.monotonic() + 15
    while time.monotonic() < end:
        try:
            doc = json.loads(status_file.read_text())
        except (OSError, ValueError):
            doc = {}
        if doc.get("at", 0) >= sent:
            return doc
        time.sleep(0.05)  # polling interval, bounded above
    raise AssertionError("no reload outcome within 15 s")


# --- under load -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [1, 3])
def test_reloads_under_load_lose_no_request_and_no_transfer(workers: int) -> None:
    """``benchmarks/reload_load.py`` small: wrk on a node's script and a rate-limited 32 MiB rootfs transfer
    in flight while the config is reloaded 10 times (nodes added and removed; SIGHUP, and twice
    ``bootserver reload``): every request answered 200, every reload applied by every worker, the transfer
    complete with the right sha256 (the script exits 1 otherwise). 10 reloads in 10 s of wrk: the reload
    phase took 2.5 s of them with 3 workers at load average 2.6; the test takes about 22 s a run, was 33 s."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "reload_load.py"), "--workers", str(workers),
                           "--reloads", "10", "--rootfs-mb", "32", "--duration", "10", "--connections", "8"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert re.search(r"^\| failed script requests \(non-2xx \+ socket errors\) \| 0 \|$", proc.stdout, re.M)
    assert re.search(r"^\| rootfs transfer complete, sha256 right \| yes \|$", proc.stdout, re.M)
    assert re.search(rf'^\| reloads counted by the server .* \| {10 * workers} \|$', proc.stdout, re.M)
