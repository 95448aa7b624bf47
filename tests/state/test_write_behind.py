"""Write-behind of repeats and the in-memory node view on sqlite, with real ``bootserver serve``
processes sharing one ``state_dir`` (as ``serve --workers N`` does): boot-once stays exact across
processes, SIGTERM loses no event, ``kill -9`` loses at most the repeats not yet committed."""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from support.helpers import free_port, run_cli, write_config
from support.server import ServerProcess

from bootserver.state.sqlite_timeline import Timeline

DEADLINE = 20.0


def server(root: Path, reference: Path, state_dir: Path, name: str) -> ServerProcess:
    folder = root / name
    folder.mkdir()
    shutil.copy(reference / "openshift-pointer-master.ign.json", folder / "master.ign")
    port = free_port()
    config = write_config(folder / "bootserver.yaml", {
        "server": {"listen": f"127.0.0.1:{port}", "admin": {"listen": f"127.0.0.1:{free_port()}"}},
        "cache_dir": "cache", "state_dir": str(state_dir), "read_through": False,
        "streams": {"rhcos-4.16": {"metadata": str(reference / "rhcos-stream-4.16.json")}},
        "profiles": {"master": {"stream": "rhcos-4.16", "install_dev": "/dev/sda", "ignition": "master.ign"}},
        "nodes": {"master-0": {"profile": "master"}},
    })
    return ServerProcess(config, port)


async def chain_url(server: ServerProcess) -> str:
    """master-0's signed chain URL on ``server`` (what ``bootserver url`` prints)."""
    rc, out, err = await run_cli("url", "master-0", "--config", str(server.config))
    assert rc == 0, err
    return out.splitlines()[0]


def stub_url(script: str) -> str:
    """The stub URL an install script hands the installer."""
    return re.search(r"coreos\.inst\.ignition_url=(\S+)", script)[1]  # type: ignore[index]


async def get(http: aiohttp.ClientSession, url: str) -> str:
    async with http.get(url) as r:
        body = await r.text()
        assert r.status == 200, (url, r.status, body)
        return body


def history(state_dir: Path) -> list[tuple[str, int]]:
    timeline = Timeline(state_dir)
    try:
        return [(e.event, e.count) for e in timeline.events("master-0")]
    finally:
        timeline.close()


@pytest.fixture
async def two(tmp_path: Path, reference: Path) -> Any:
    state = tmp_path / "state"
    a, b = server(tmp_path, reference, state, "a"), server(tmp_path, reference, state, "b")
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=DEADLINE)) as http:
        await asyncio.gather(a.start(http), b.start(http))
        try:
            yield a, b, state, http
        finally:
            await asyncio.gather(a.stop(), b.stop())


async def test_a_stub_served_by_one_process_makes_the_other_boot_the_disk(two: Any) -> None:
    a, b, _, http = two
    chain = await chain_url(a)
    install = await get(http, chain)  # served by A (the URL signed by `url` names A)
    stub = stub_url(install).replace(a.url, b.url)
    for _ in range(5):  # repeats: A answers them from the node it holds in memory, written behind
        assert await get(http, chain) == install
    await get(http, stub)  # the installer reaches process B
    localboot = await get(http, chain)  # A: at once, the boot-disk script
    assert "kernel " not in localboot and localboot.rstrip().endswith("exit")
    rc, _, err = await run_cli("nodes", "reinstall", "master-0", "--config", str(b.config))
    assert rc == 0, err
    assert await get(http, chain) == install  # A sees the reinstall the command line wrote
    assert await get(http, chain.replace(a.url, b.url)) == install.replace(a.url, b.url)


async def test_sigterm_commits_every_repeat_kill_9_keeps_what_a_write_through_committed(two: Any) -> None:
    a, b, state, http = two
    chain = await chain_url(a)
    stub = stub_url(await get(http, chain)).replace(a.url, b.url)
    for _ in range(29):
        await get(http, chain)  # 29 repeats of the first script's row, written behind by A
    await a.stop()  # SIGTERM: A commits what it holds
    assert history(state) == [("script", 30)]

    assert b.proc is not None
    for _ in range(10):
        await get(http, chain.replace(a.url, b.url))  # B: 10 repeats, held in memory
    await get(http, stub)  # a stub: write-through, committed with the repeats queued before it
    b.proc.send_signal(signal.SIGKILL)
    await asyncio.wait_for(b.proc.wait(), DEADLINE)
    assert history(state) == [("script", 40), ("stub", 1)]


def test_the_generation_changes_only_when_a_stage_or_newest_row_does(tmp_path: Path) -> None:
    """What lets a process keep nodes in memory: any process's commit that adds a row (a stage change
    always does) changes the generation file; a mere repeat does not."""
    one, other = Timeline(tmp_path), Timeline(tmp_path)
    try:
        one.record("m0", "script", mode="install", ip="10.0.0.5", at=1.0)
        seen = other.generation()
        one.record("m0", "script", mode="install", ip="10.0.0.5", at=2.0)  # a repeat: same row
        assert other.generation() == seen
        one.record("m0", "stub", mode="install", ip="10.0.0.5", at=3.0)
        assert other.generation() != seen
        assert (tmp_path / "timeline.generation").stat().st_size == 8
    finally:
        one.close()
        other.close()
