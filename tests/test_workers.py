"""``bootserver serve --workers N``: worker processes sharing the port, metrics across workers, one
upstream download per artifact across processes (followers of a locked partial), start-up errors and
signals. Real processes and sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import re
import signal
import socket
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from support.helpers import free_port, run_cli, write_config
from support.metrics import metric
from support.readthrough import (
    DEADLINE,
    ROOTFS_SIZE,
    app_client,
    make_config,
    make_stream,
    published,
    served_path,
    settled,
    wait_for,
)
from support.server import ServerProcess

from bootserver.artifacts.cache import ArtifactCache

HEALTHZ = 'bootserver_http_requests_total{method="GET",route="/healthz",status="200"}'


def server_config(tmp_path: Path, port: int, **extra: Any) -> Path:
    doc: dict[str, Any] = {"server": {"listen": f"127.0.0.1:{port}"}, "cache_dir": "cache", "state_dir": "state"}
    doc.update(extra)
    return write_config(tmp_path / "bootserver.yaml", doc)


def worker_pids(text: str) -> dict[int, float]:
    """``bootserver_worker_requests{pid}`` as {pid: requests}."""
    return {int(pid): float(v) for pid, v in
            re.findall(r'^bootserver_worker_requests\{pid="(\d+)"\} (\S+)$', text, flags=re.MULTILINE)}


def children(pid: int) -> set[int]:
    """The pids of the processes whose parent is ``pid``."""
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.add(int(entry.name))
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def fresh_session() -> aiohttp.ClientSession:
    """A client that opens a new connection per request (so the kernel picks a worker each time)."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))


async def all_serving(server: ServerProcess) -> str:
    """Read the server's log until the parent says every worker listens; returns the lines read
    (``ServerProcess.start`` returns as soon as one worker answers)."""
    assert server.proc is not None and server.proc.stderr is not None
    seen = b""
    while b" workers serving " not in seen:
        line = await asyncio.wait_for(server.proc.stderr.readline(), DEADLINE)
        assert line, seen.decode()
        seen += line
    return seen.decode()


async def scrape(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url + "/metrics") as r:
        assert r.status == 200
        return await r.text()


async def wait_metric(session: aiohttp.ClientSession, url: str, name: str, at_least: float) -> str:
    """Scrape until ``name`` reaches ``at_least`` (a worker updates its counters right after it answered)."""
    end = time.monotonic() + DEADLINE
    while True:
        text = await scrape(session, url)
        if (metric(text, name) or 0) >= at_least or time.monotonic() > end:
            return text
        await asyncio.sleep(0.02)  # polling interval, bounded by the deadline


async def test_two_workers_share_the_port_and_metrics_count_every_worker(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where the parent makes its metrics directory
    port = free_port()
    server = ServerProcess(server_config(tmp_path, port), port, "--workers", "2")
    async with fresh_session() as session:
        await server.start(session)
        try:
            assert server.proc is not None
            log = await all_serving(server)
            workers = children(server.proc.pid)
            assert len(workers) == 2
            assert [p.name for p in tmp_path.iterdir() if p.name.startswith("bootserver-metrics-")]
            k = 40
            for _ in range(k):  # one connection each; with SO_REUSEPORT the kernel spreads them
                async with session.get(server.url + "/healthz") as r:
                    assert r.status == 200
            before = await wait_metric(session, server.admin_url, HEALTHZ, k + 1)  # + the start-up probe
            assert metric(before, HEALTHZ) == k + 1
            per_worker = worker_pids(before)
            assert set(per_worker) == workers and all(v > 0 for v in per_worker.values()), per_worker
            assert metric(before, 'bootserver_downloads_in_flight') == 0
        finally:
            await server.stop()
        assert server.proc.returncode == 0
        err = log + (await server.proc.stderr.read()).decode()  # type: ignore[union-attr]
    assert not any(alive(p) for p in workers)
    # every access log line names the worker that answered; both did
    pids = {int(p) for p in re.findall(r"bootserver\.access\[(\d+)\]: .* /healthz 200", err)}
    assert pids == workers
    assert "2 workers serving" in err
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("bootserver-metrics-")]


async def test_sigterm_stops_every_worker_and_exits_0(tmp_path: Path) -> None:
    port = free_port()
    server = ServerProcess(server_config(tmp_path, port, server={"listen": f"127.0.0.1:{port}", "workers": 3}),
                           port)
    async with fresh_session() as session:
        await server.start(session)
        assert server.proc is not None
        await all_serving(server)
        workers = children(server.proc.pid)
        assert len(workers) == 3  # server.workers from the config
        server.proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(server.proc.wait(), DEADLINE) == 0
    assert not any(alive(p) for p in workers)


async def test_a_dying_worker_stops_the_server_with_exit_1(tmp_path: Path) -> None:
    port = free_port()
    server = ServerProcess(server_config(tmp_path, port), port, "--workers", "2")
    async with fresh_session() as session:
        await server.start(session)
        try:
            assert server.proc is not None
            await all_serving(server)
            victim, other = sorted(children(server.proc.pid))
            os.kill(victim, signal.SIGKILL)
            assert await asyncio.wait_for(server.proc.wait(), DEADLINE) == 1
        finally:
            await server.stop()
        err = (await server.proc.stderr.read()).decode()  # type: ignore[union-attr]
    assert f"worker {victim} stopped unexpectedly (killed by signal SIGKILL); stopping the other workers" in err
    assert not alive(other)


@pytest.mark.parametrize("workers", ["1", "3"])
async def test_port_in_use_is_one_line_and_exit_2(tmp_path: Path, workers: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = server_config(tmp_path, port)
        rc, _out, err = await run_cli("serve", "--config", str(config), "--workers", workers)
    assert rc == 2
    # (this config names no node: serve's one warning says so before it binds)
    lines = [line for line in err.strip().splitlines() if " WARNING bootserver.cli" not in line]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"bootserver: {config}: server.listen: cannot listen on 127.0.0.1:{port}:"), err
    assert "in use" in lines[0]


async def test_bad_workers_value_is_refused(tmp_path: Path) -> None:
    config = server_config(tmp_path, free_port(), server={"workers": 0})
    rc, _, err = await run_cli("serve", "--config", str(config))
    assert rc == 2 and "server.workers" in err
    rc, _, err = await run_cli("serve", "--config", str(config), "--workers", "zero")
    assert rc == 2 and "--workers" in err


async def test_cold_artifact_through_two_workers_is_fetched_once(tmp_path, reference, faulty) -> None:
    meta, paths, files = make_stream(tmp_path, reference, faulty)
    rootfs, data = paths["rootfs"], files[paths["rootfs"]]
    faulty.pause[rootfs] = ROOTFS_SIZE // 2
    port = free_port()
    config = server_config(tmp_path, port, streams={"rhcos": {"metadata": str(meta)}},
                           profiles={"live": {"stream": "rhcos", "mode": "live"}})
    server = ServerProcess(config, port, "--workers", "2")
    url_path = served_path(paths, "rootfs")
    async with fresh_session() as session:
        await server.start(session)
        try:
            log = await all_serving(server)

            async def one() -> bytes:
                async with session.get(server.url + url_path) as r:
                    assert r.status == 200 and r.headers["Content-Length"] == str(len(data))
                    return await r.read()

            clients = [asyncio.create_task(one()) for _ in range(30)]
            await asyncio.wait_for(faulty.paused.wait(), DEADLINE)
            # every worker (30 connections: both, but for a 2**-29 chance) reports the download
            for _ in range(10):
                async with session.get(server.url + "/readyz") as r:
                    report = await r.json()
                assert {i["kind"]: i["status"] for i in report["artifacts"]}["rootfs"] == "fetching", report
            faulty.gate.set()
            bodies = await asyncio.wait_for(asyncio.gather(*clients), DEADLINE)
            assert all(b == data for b in bodies)
            text = await wait_metric(session, server.admin_url, 'bootserver_upstream_fetches_total{result="ok"}', 1)
            assert metric(text, 'bootserver_upstream_fetches_total{result="ok"}') == 1
            assert metric(text, 'bootserver_upstream_fetches_total{result="error"}') == 0
        finally:
            await server.stop()
        err = log + (await server.proc.stderr.read()).decode()  # type: ignore[union-attr]
    assert faulty.gets(rootfs) == [None]
    assert "being downloaded by another process; following it" in err, err


# --- followers, in one process: a download "in another process" is a writer holding the lock --------

async def _foreign_writer(app_rt: Any, paths: dict[str, str], kind: str = "rootfs"):
    found = await app_rt.resolve(tuple(served_path(paths, kind).split("/")[2:]))
    assert found is not None
    release, artifact = found
    return app_rt.cache.writer(release, artifact, resume=True)


async def test_follower_streams_a_foreign_download_and_ends_after_it_is_published(
        tmp_path, reference, faulty, aiohttp_client) -> None:
    meta, paths, files = make_stream(tmp_path, reference, faulty)
    client, rt = await app_client(aiohttp_client, make_config(tmp_path, meta))
    data = files[paths["rootfs"]]
    writer = await _foreign_writer(rt, paths)
    with writer:
        writer.expected_size = len(data)
        writer.write(data[:1_000_000])
        r = await client.get(served_path(paths, "rootfs"))
        assert r.status == 200 and r.headers["Content-Length"] == str(len(data))
        assert r.headers["ETag"] == f'"{hashlib.sha256(data).hexdigest()}"'
        assert await r.content.readexactly(999_999) == data[:999_999]
        _ready, report = rt.readiness()
        assert {i["kind"]: i["status"] for i in report["artifacts"]}["rootfs"] == "fetching"
        writer.write(data[1_000_000:])
        # every byte is in the file, but the last one waits for the publish
        rest = await asyncio.wait_for(r.content.readexactly(len(data) - 1 - 999_999), DEADLINE)
        assert rest == data[999_999:-1] and r.content.read_nowait() == b""
        writer.commit("test://foreign")
    assert await asyncio.wait_for(r.read(), DEADLINE) == data[-1:]
    assert faulty.gets(paths["rootfs"]) == []


async def test_follower_aborts_when_the_foreign_download_stops_unpublished(
        tmp_path, reference, faulty, aiohttp_client) -> None:
    meta, paths, files = make_stream(tmp_path, reference, faulty)
    client, rt = await app_client(aiohttp_client, make_config(tmp_path, meta))
    data = files[paths["rootfs"]]
    writer = await _foreign_writer(rt, paths)
    writer.__enter__()
    try:
        writer.expected_size = len(data)
        writer.write(data[:500_000])
        r = await client.get(served_path(paths, "rootfs"))
        assert r.status == 200 and r.headers["Content-Length"] == str(len(data))
        assert await r.content.readexactly(499_999) == data[:499_999]
    finally:
        writer.__exit__(ConnectionResetError, ConnectionResetError(), None)  # keeps the partial, unlocks
    with pytest.raises(aiohttp.ClientPayloadError):
        await asyncio.wait_for(r.read(), DEADLINE)
    assert faulty.gets(paths["rootfs"]) == []
    assert published(tmp_path / "cache") == []
    # the next request downloads it here, resuming the partial the other process left
    r = await client.get(served_path(paths, "rootfs"))
    assert r.status == 200 and await r.read() == data
    assert faulty.gets(paths["rootfs"]) == ["bytes=500000-"]


async def test_follower_takes_over_when_no_byte_was_sent(tmp_path, reference, faulty, aiohttp_client,
                                                        caplog) -> None:
    caplog.set_level("INFO", logger="bootserver.readthrough")
    meta, paths, files = make_stream(tmp_path, reference, faulty)
    client, rt = await app_client(aiohttp_client, make_config(tmp_path, meta))
    data = files[paths["rootfs"]]
    cache: ArtifactCache = rt.cache
    writer = await _foreign_writer(rt, paths)
    writer.__enter__()  # locked, no size known yet: the client waits for its headers
    task = asyncio.create_task(client.get(served_path(paths, "rootfs")))
    await wait_for(lambda: "being downloaded by another process; following it" in caplog.text, "the follower")
    writer.__exit__(ConnectionResetError, ConnectionResetError(), None)
    r = await asyncio.wait_for(task, DEADLINE)
    assert r.status == 200 and await r.read() == data
    assert faulty.gets(paths["rootfs"]) == [None]
    assert "the download in another process stopped; fetching it here" in caplog.text
    await settled(rt, paths, "rootfs")
    assert cache.expected_size(writer.artifact) is None  # the size file went with the download


def test_clean_tmp_keeps_the_size_file_of_a_download_in_progress(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    cache.tmp.mkdir(parents=True)
    busy, stale = "a" * 64, "b" * 64
    for sha in (busy, stale):
        (cache.tmp / f"{sha}.part").write_bytes(b"x")
        (cache.tmp / f"{sha}.size").write_text("10")
    fd = os.open(cache.tmp / f"{busy}.part", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        cache.clean_tmp()
        assert sorted(p.name for p in cache.tmp.iterdir()) == [f"{busy}.part", f"{busy}.size"]
    finally:
        os.close(fd)


async def test_cold_artifact_over_https_through_two_workers(tmp_path, reference, faulty) -> None:
    """The TLS listener is shared too, and a read-through transfer over TLS (where asyncio's sendfile
    falls back to reading and writing itself) sends the verified bytes."""
    import ssl

    meta, paths, files = make_stream(tmp_path, reference, faulty)
    rootfs, data = paths["rootfs"], files[paths["rootfs"]]
    port, tport = free_port(), free_port()
    config = server_config(tmp_path, port, server={"listen": f"127.0.0.1:{port}",
                                                   "tls": {"listen": f"127.0.0.1:{tport}"}},
                           streams={"rhcos": {"metadata": str(meta)}},
                           profiles={"live": {"stream": "rhcos", "mode": "live"}})
    rc, _, err = await run_cli("tls", "init", "--config", str(config))
    assert rc == 0, err
    ca = ssl.create_default_context(cafile=str(tmp_path / "state/tls/ca.crt"))
    server = ServerProcess(config, port, "--workers", "2")
    async with fresh_session() as session:
        await server.start(session)
        try:
            await all_serving(server)

            async def one() -> bytes:
                async with session.get(f"https://127.0.0.1:{tport}{served_path(paths, 'rootfs')}", ssl=ca) as r:
                    assert r.status == 200 and r.headers["Content-Length"] == str(len(data))
                    return await r.read()

            bodies = await asyncio.wait_for(asyncio.gather(*(one() for _ in range(8)),
                                                           return_exceptions=True), DEADLINE)
            # and warm, as aiohttp's FileResponse
            bodies += await asyncio.wait_for(asyncio.gather(*(one() for _ in range(8)),
                                                            return_exceptions=True), DEADLINE)
        finally:
            await server.stop()
        err = (await server.proc.stderr.read()).decode()  # type: ignore[union-attr]
    assert all(b == data for b in bodies), err
    assert faulty.gets(rootfs) == [None]


async def test_a_second_workers_server_on_the_same_port_is_refused(tmp_path: Path) -> None:
    """SO_REUSEPORT would let a second server of the same user share the port silently: the parent's
    bind test (without it) refuses, once."""
    port = free_port()
    config = server_config(tmp_path, port)
    server = ServerProcess(config, port, "--workers", "2", "--log-format", "json")
    async with fresh_session() as session:
        await server.start(session)
        try:
            log = await all_serving(server)
            rc, _, err = await run_cli("serve", "--config", str(config), "--workers", "2")
            # (this config names no node: serve's one warning says so before it binds)
            errors = [line for line in err.strip().splitlines() if " WARNING bootserver.cli" not in line]
            assert rc == 2 and len(errors) == 1 and "server.listen" in err, err
        finally:
            await server.stop()
        err = log + (await server.proc.stderr.read()).decode()  # type: ignore[union-attr]
    import json

    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert lines and all(isinstance(line["pid"], int) for line in lines)  # --log-format json names the worker


@pytest.mark.parametrize("workers", ["1", "2"])
async def test_admin_listener_on_a_unix_socket(tmp_path: Path, workers: str) -> None:
    """``server.admin.listen`` as a Unix socket path: /nodes and /metrics answer there (from any worker),
    not on the device port; a stale socket file is replaced; the socket is removed on exit."""
    port = free_port()
    sock = tmp_path / "admin.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(sock))  # a file left by a server that is gone: nobody listens on it
    stale.close()
    config = server_config(tmp_path, port, server={"listen": f"127.0.0.1:{port}", "admin": {"listen": str(sock)}},
                           nodes={})
    server = ServerProcess(config, port, "--workers", workers)
    async with fresh_session() as session:
        await server.start(session)
        try:
            async with session.get(server.url + "/metrics") as r:
                assert r.status == 404
            async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(sock))) as admin:
                for _ in range(4):  # new connections: with 2 workers either may answer
                    async with admin.get("http://admin/metrics", headers={"Connection": "close"}) as r:
                        assert r.status == 200 and "bootserver_http_requests_total" in await r.text()
                async with admin.get("http://admin/nodes") as r:
                    assert r.status == 200 and (await r.json())["nodes"] == []
            assert sock.stat().st_mode & 0o777 == 0o660
        finally:
            await server.stop()
    assert server.proc is not None and server.proc.returncode == 0
    assert not sock.exists()


async def test_metrics_scraped_all_through_start_up_never_answer_500(tmp_path: Path) -> None:
    """Scrapes from the moment ``serve --workers 3`` starts until every worker serves (and a little
    after, while each worker creates the files of its first histogram): every answer is 200. The admin
    listener is a Unix socket bound by the parent before it forks, so scrapes queue there from the
    start and are answered by whichever worker listens first (issue 22: one 500 seen in start-up)."""
    port = free_port()
    sock = tmp_path / "admin.sock"
    config = server_config(tmp_path, port, server={"listen": f"127.0.0.1:{port}", "admin": {"listen": str(sock)}},
                           nodes={})
    server = ServerProcess(config, port, "--workers", "3")
    statuses: dict[int, int] = {}
    serving = asyncio.Event()

    async def scrape_until_served() -> None:
        connector = aiohttp.UnixConnector(path=str(sock), force_close=True)
        async with aiohttp.ClientSession(connector=connector) as admin:
            end = time.monotonic() + DEADLINE
            after = None  # scrapes go on for 1 s after every worker serves
            while time.monotonic() < end and (after is None or time.monotonic() < after):
                if after is None and serving.is_set():
                    after = time.monotonic() + 1.0
                try:
                    async with admin.get("http://admin/metrics") as r:
                        await r.read()
                        statuses[r.status] = statuses.get(r.status, 0) + 1
                except aiohttp.ClientConnectionError:  # the socket file is not there yet
                    await asyncio.sleep(0.01)  # polling interval, bounded by the deadline

    async with fresh_session() as session:
        scraper = asyncio.create_task(scrape_until_served())
        try:
            await server.start(session)
            await all_serving(server)
            for _ in range(6):  # each worker's first script-less requests create its histogram file
                async with session.get(server.url + "/healthz") as r:
                    assert r.status == 200
            serving.set()
            await asyncio.wait_for(scraper, DEADLINE)
        finally:
            scraper.cancel()
            await server.stop()
    assert statuses.get(200, 0) > 10 and set(statuses) == {200}, statuses


async def test_a_worker_metrics_file_caught_empty_does_not_fail_the_scrape(tmp_path: Path, monkeypatch) -> None:
    """prometheus-client creates a worker's metrics file and sizes it a moment later; a scrape that
    finds it at 0 bytes (a worker starting, or one killed in that moment) still answers 200 with every
    worker's values."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where the parent makes its metrics directory
    port = free_port()
    server = ServerProcess(server_config(tmp_path, port), port, "--workers", "2")
    async with fresh_session() as session:
        await server.start(session)
        try:
            await all_serving(server)
            (mp_dir,) = [p for p in tmp_path.iterdir() if p.name.startswith("bootserver-metrics-")]
            (mp_dir / "histogram_4194301.db").touch()  # as a worker leaves it between create and size
            (mp_dir / "counter_4194301.db").touch()
            for _ in range(6):  # new connections: either worker may answer
                text = await scrape(session, server.admin_url)
                assert (metric(text, HEALTHZ) or 0) >= 1
        finally:
            await server.stop()
