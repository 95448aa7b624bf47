"""Read-through cache, upstream chain, resume, retry, crash safety, disk full, readiness and prune,
against a fault-injecting fake upstream on 127.0.0.1."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from support.helpers import BOOTSERVER, run_cli, write_config
from support.readthrough import (
    DEADLINE,
    FAST,
    ROOTFS_SIZE,
    app_client,
    make_config,
    make_stream,
    published,
    served_path,
    settled,
    tmp_files,
    wait_for,
)
from support.services import service
from support.upstreams import FaultyUpstream

from bootserver.artifacts.cache import ArtifactCache
from bootserver.artifacts.upstream import RetryPolicy, Upstream, source_urls
from bootserver.config import parse_config
from bootserver.errors import DiskFullError, FetchError, IntegrityError
from bootserver.http.app import SERVICE, create_app

# --- 1. read-through, single flight ------------------------------------------------------------------

async def test_50_concurrent_cold_requests_make_one_upstream_get(tmp_path, reference, faulty, aiohttp_client):
    meta, paths, files = make_stream(tmp_path, reference, faulty)
    config = make_config(tmp_path, meta)
    client, rt = await app_client(aiohttp_client, config)
    rootfs, data = paths["rootfs"], files[paths["rootfs"]]
    faulty.pause[rootfs] = ROOTFS_SIZE // 2

    # the first client sees bytes while upstream is still paused halfway: streamed, not store-and-forward
    first = await client.get(served_path(paths, "rootfs"))
    assert first.status == 200 and first.headers["Content-Length"] == str(len(data))
    assert first.headers["ETag"] == f'"{hashlib.sha256(data).hexdigest()}"'
    head = await first.content.readexactly(100_000)
    assert head == data[:100_000]
    await asyncio.wait_for(faulty.paused.wait(), DEADLINE)

    # 49 more clients get their headers while upstream is still paused: all on the one download
    others = await asyncio.wait_for(asyncio.gather(*(client.get(served_path(paths, "rootfs"))
                                                     for _ in range(49))), DEADLINE)
    assert all(r.status == 200 and r.headers["Content-Length"] == str(len(data)) for r in others)
    ready, report = rt.readiness()
    assert ready and {i["kind"]: i["status"] for i in report["artifacts"]}["rootfs"] == "fetching"
    faulty.gate.set()
    bodies = await asyncio.wait_for(asyncio.gather(*(r.read() for r in others)), DEADLINE)
    assert head + await first.read() == data
    assert all(b == data for b in bodies)
    assert faulty.gets(rootfs) == [None]
    assert (await settled(rt, paths, "rootfs")).path.read_bytes() == data
    # a warm request is a plain file response with Range support
    r = await client.get(served_path(paths, "rootfs"), headers={"Range": "bytes=10-19"})
    assert r.status == 206 and await r.read() == data[10:20]
    assert faulty.gets(rootfs) == [None]


async def test_wrong_bytes_abort_every_client_and_publish_nothing(tmp_path, reference, faulty, aiohttp_client,
                                                                  caplog):
    caplog.set_level("INFO", logger="bootserver")
    meta, paths, files = make_stream(tmp_path, reference, faulty)
    client, _rt = await app_client(aiohttp_client, make_config(tmp_path, meta))
    rootfs = paths["rootfs"]
    faulty.wrong.add(rootfs)
    faulty.pause[rootfs] = ROOTFS_SIZE - 1000

    # 5 clients have their headers (and most of the bytes) before the last bytes turn out wrong
    responses = await asyncio.wait_for(asyncio.gather(*(client.get(served_path(paths, "rootfs"))
                                                        for _ in range(5))), DEADLINE)
    assert all(r.status == 200 and r.headers["Content-Length"] == str(len(files[rootfs])) for r in responses)
    await asyncio.wait_for(faulty.paused.wait(), DEADLINE)
    faulty.gate.set()
    results = await asyncio.wait_for(asyncio.gather(*(r.read() for r in responses), return_exceptions=True),
                                     DEADLINE)
    assert all(isinstance(r, aiohttp.ClientPayloadError) for r in results), results
    assert published(config_cache(tmp_path)) == []
    assert tmp_files(config_cache(tmp_path)) == []
    # nothing servable: the next request starts a new download (and fails again) rather than a 200 body
    r = await client.get(served_path(paths, "rootfs"))
    with pytest.raises(aiohttp.ClientPayloadError):
        await r.read()
    # the log says what happened: a sha256 mismatch, for the download and for each aborted transfer
    aborts = [r.getMessage() for r in caplog.records if "aborting the transfer" in r.getMessage()]
    assert len(aborts) >= 5 and all("sha256 mismatch" in m for m in aborts), aborts
    assert "restarted" not in caplog.text


async def test_a_transfer_aborted_for_wrong_bytes_logs_the_bytes_the_client_got(tmp_path, reference, faulty,
                                                                                aiohttp_client, caplog):
    """Issue 52: a read-through aborted on a sha256 mismatch logged ``bytes=0`` though the client had
    received nearly the whole body; the access log counts the bytes sent."""
    from aiohttp.test_utils import TestServer

    from bootserver.http.app import runner_kwargs

    caplog.set_level("INFO", logger="bootserver")
    meta, paths, _ = make_stream(tmp_path, reference, faulty)
    app = create_app(make_config(tmp_path, meta))
    app[SERVICE].runtime.upstream.retry = FAST
    server = TestServer(app)
    await server.start_server(**runner_kwargs(app))
    client = await aiohttp_client(server)
    rootfs = paths["rootfs"]
    faulty.wrong.add(rootfs)
    got = 0
    r = await client.get(served_path(paths, "rootfs"))
    assert r.status == 200
    with pytest.raises(aiohttp.ClientPayloadError):
        async for chunk in r.content.iter_any():
            got += len(chunk)
    assert got > ROOTFS_SIZE // 2
    path = served_path(paths, "rootfs")
    await wait_for(lambda: any(f"GET {path} 200" in x.getMessage() for x in caplog.records), "the access-log line")
    [line] = [x.getMessage() for x in caplog.records if f"GET {path} 200" in x.getMessage()]
    sent = int(line.split(" bytes=")[1].split()[0])
    assert got <= sent < ROOTFS_SIZE and line.endswith(" incomplete"), (got, line)


def config_cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


async def test_client_disconnect_does_not_cancel_the_download(tmp_path, reference, faulty, aiohttp_client):
    from aiohttp import web

    meta, paths, files = make_stream(tmp_path, reference, faulty)
    app = create_app(make_config(tmp_path, meta))
    app[SERVICE].runtime.upstream.retry = FAST
    ended = asyncio.Event()

    @web.middleware
    async def note_the_end(request, handler):  # the test's own view of the request's life
        try:
            return await handler(request)
        finally:
            ended.set()

    app.middlewares.insert(0, note_the_end)
    client, rt = await aiohttp_client(app), app[SERVICE].desk.artifacts
    rootfs = paths["rootfs"]
    faulty.pause[rootfs] = ROOTFS_SIZE // 2
    r = await client.get(served_path(paths, "rootfs"))
    await r.content.readexactly(1000)
    await asyncio.wait_for(faulty.paused.wait(), DEADLINE)
    r.close()  # the only client goes away
    await asyncio.wait_for(ended.wait(), DEADLINE)  # the server noticed: the client's handler is over
    assert faulty.gets(rootfs) == [None] and rt.status(*(await rt.resolve(
        tuple(served_path(paths, "rootfs").split("/")[2:])))) == "fetching"  # type: ignore[misc]
    faulty.gate.set()
    assert (await settled(rt, paths, "rootfs")).path.read_bytes() == files[rootfs]
    assert faulty.gets(rootfs) == [None]


async def test_unknown_file_is_404_and_read_through_can_be_off(tmp_path, reference, faulty, aiohttp_client):
    meta, paths, files = make_stream(tmp_path, reference, faulty)
    client, _rt = await app_client(aiohttp_client, make_config(tmp_path, meta))
    good = served_path(paths, "kernel")
    for bad in (good.rsplit("/", 1)[0] + "/other-file", good.replace("/x86_64/", "/aarch64/"),
                good.replace("416.94", "415.94"), "/artifacts/nostream/x86_64/1/f"):
        r = await client.get(bad)
        assert r.status == 404, bad
        assert "not a known artifact" in await r.text()
    assert faulty.log == []
    r = await client.get(good)
    assert r.status == 200 and await r.read() == files[paths["kernel"]]

    client2, _rt2 = await app_client(aiohttp_client, make_config(tmp_path / "off", meta, read_through=False))
    r = await client2.get(served_path(paths, "initramfs"))
    assert r.status == 404 and "not in cache" in await r.text()
    assert faulty.gets(paths["initramfs"]) == []


# --- 2. upstream chain ------------------------------------------------------------------------------

async def test_mirror_chain_falls_through_in_order(tmp_path, reference, faulty, aiohttp_client, caplog):
    meta, paths, files = make_stream(tmp_path, reference, faulty)
    faulty.status_for = {"/m404/": 404, "/m503/": 503}
    config = make_config(tmp_path, meta, server={"facility": "da11"}, facilities={
        "da11": {"mirrors": [faulty.url + "/m404", faulty.url + "/m503/"]}, "sv15": {}})
    client, rt = await app_client(aiohttp_client, config, RetryPolicy(attempts=1))
    caplog.set_level("INFO", logger="bootserver")
    r = await client.get(served_path(paths, "kernel"))
    assert r.status == 200 and await r.read() == files[paths["kernel"]]
    k = paths["kernel"]
    assert [p for p, _ in faulty.log] == ["/m404" + k, "/m503" + k, k]
    await settled(rt, paths, "kernel")
    assert f"from {faulty.url}{k}" in caplog.text


def test_mirror_url_is_base_plus_upstream_path() -> None:
    assert source_urls("https://builds.example.org/prod/streams/stable/builds/42/x86_64/k?x=1",
                       ["http://m.example/fcos", "http://n.example"]) == [
        "http://m.example/fcos/prod/streams/stable/builds/42/x86_64/k?x=1",
        "http://n.example/prod/streams/stable/builds/42/x86_64/k?x=1",
        "https://builds.example.org/prod/streams/stable/builds/42/x86_64/k?x=1"]


async def test_mirror_with_wrong_bytes_falls_through_to_origin(tmp_path, reference, faulty) -> None:
    meta, paths, files = make_stream(tmp_path, reference, faulty)
    k = paths["kernel"]
    faulty.files["/bad" + k] = b"Y" + files[k][1:]
    config = make_config(tmp_path, meta)
    svc = service(config)
    rel = (await svc.desk.catalog.get("rhcos")).releases["x86_64"]
    async with Upstream(mirrors=[faulty.url + "/bad"], retry=FAST) as up:
        _size, used = await up.download(svc.runtime.cache, rel, rel.kernel)
    assert used == faulty.url + k and svc.runtime.cache.is_cached(rel, rel.kernel)


# --- 3. resume and retry ----------------------------------------------------------------------------

async def _download(tmp_path: Path, reference: Path, faulty: FaultyUpstream, kind: str = "rootfs",
                    retry: RetryPolicy = FAST):
    meta, paths, files = make_stream(tmp_path, reference, faulty)
    svc = service(make_config(tmp_path, meta))
    rel = (await svc.desk.catalog.get("rhcos")).releases["x86_64"]
    art = next(a for a in rel.artifacts if a.kind == kind)
    return svc.runtime.cache, rel, art, paths[kind], files[paths[kind]]


async def test_dropped_connection_resumes_with_range(tmp_path, reference, faulty) -> None:
    cache, rel, art, path, data = await _download(tmp_path, reference, faulty)
    faulty.drop[path] = 1_234_567
    async with Upstream(retry=FAST) as up:
        size, _used = await up.download(cache, rel, art)
    assert size == len(data) and cache.path(rel, art).read_bytes() == data
    assert faulty.gets(path) == [None, "bytes=1234567-"]
    assert tmp_files(cache.cache_dir) == []


async def test_upstream_ignoring_range_starts_over(tmp_path, reference, faulty) -> None:
    cache, rel, art, path, data = await _download(tmp_path, reference, faulty)
    cache.tmp.mkdir(parents=True)
    cache.partial_path(art).write_bytes(data[:500_000])
    faulty.ignore_range = True
    async with Upstream(retry=FAST) as up:
        await up.download(cache, rel, art)
    assert faulty.gets(path) == ["bytes=500000-"]
    assert cache.path(rel, art).read_bytes() == data and tmp_files(cache.cache_dir) == []


async def test_resumed_bytes_failing_the_hash_start_over(tmp_path, reference, faulty) -> None:
    cache, rel, art, path, data = await _download(tmp_path, reference, faulty)
    cache.tmp.mkdir(parents=True)
    cache.partial_path(art).write_bytes(b"garbage" + data[7:500_000])
    async with Upstream(retry=FAST) as up:
        await up.download(cache, rel, art)
    assert faulty.gets(path) == ["bytes=500000-", None]
    assert cache.path(rel, art).read_bytes() == data


async def test_503_is_retried_with_backoff_then_succeeds(tmp_path, reference, faulty) -> None:
    cache, rel, art, path, _data = await _download(tmp_path, reference, faulty, "kernel")
    faulty.fail_first[path] = [503, 429, 502]
    async with Upstream(retry=FAST) as up:
        await up.download(cache, rel, art)
    assert faulty.gets(path) == [None] * 4 and cache.is_cached(rel, art)


async def test_retries_are_bounded(tmp_path, reference, faulty) -> None:
    cache, rel, art, path, _data = await _download(tmp_path, reference, faulty, "kernel")
    faulty.fail_first[path] = [503] * 10
    async with Upstream(retry=FAST) as up:
        with pytest.raises(FetchError, match=r"HTTP 503"):
            await up.download(cache, rel, art)
    assert len(faulty.gets(path)) == 5 and not cache.is_cached(rel, art)


@pytest.mark.parametrize("status", [403, 404, 410])
async def test_4xx_is_not_retried(tmp_path, reference, faulty, status: int) -> None:
    cache, rel, art, path, _data = await _download(tmp_path, reference, faulty, "kernel")
    faulty.fail_first[path] = [status] * 3
    async with Upstream(retry=FAST) as up:
        with pytest.raises(FetchError, match=rf"{faulty.url}{path}: HTTP {status}"):
            await up.download(cache, rel, art)
    assert len(faulty.gets(path)) == 1


async def test_hash_mismatch_from_the_only_source_raises_and_cleans(tmp_path, reference, faulty) -> None:
    cache, rel, art, path, _data = await _download(tmp_path, reference, faulty, "kernel")
    faulty.wrong.add(path)
    async with Upstream(retry=FAST) as up:
        with pytest.raises(IntegrityError):
            await up.download(cache, rel, art)
    assert published(cache.cache_dir) == [] and tmp_files(cache.cache_dir) == []


# --- 4. crash safety: SIGKILL mid-download, then resume ---------------------------------------------

async def test_sigkill_mid_download_leaves_nothing_servable_and_rerun_resumes(tmp_path, reference, faulty):
    meta, paths, files = make_stream(tmp_path, reference, faulty)
    config = write_config(tmp_path / "bootserver.yaml", {
        "cache_dir": "cache", "streams": {"rhcos": {"metadata": str(meta)}},
        "profiles": {"live": {"stream": "rhcos", "mode": "live"}}})
    rootfs, data = paths["rootfs"], files[paths["rootfs"]]
    half = 1_500_000
    faulty.pause[rootfs] = half
    cache = ArtifactCache(tmp_path / "cache")
    sha = hashlib.sha256(data).hexdigest()
    part = cache.tmp / f"{sha}.part"
    proc = await asyncio.create_subprocess_exec(*BOOTSERVER, "sync-images", "--config", str(config),
                                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await asyncio.wait_for(faulty.paused.wait(), DEADLINE)
        await wait_for(lambda: part.exists() and part.stat().st_size == half, "the partial file")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()
    assert proc.returncode == -signal.SIGKILL
    faulty.gate.set()
    rootfs_url_path = served_path(paths, "rootfs").removeprefix("/artifacts/")
    assert rootfs_url_path not in published(cache.cache_dir)
    assert cache.open_published(tuple(rootfs_url_path.split("/"))) is None
    assert part.stat().st_size == half

    rc, _out, err = await run_cli("sync-images", "--config", str(config))
    assert rc == 0, err
    assert faulty.gets(rootfs) == [None, f"bytes={half}-"]
    assert (cache.root / rootfs_url_path).read_bytes() == data
    assert tmp_files(cache.cache_dir) == []


async def test_stale_temp_files_are_cleaned_but_locked_ones_kept(tmp_path: Path) -> None:
    import fcntl

    cache = ArtifactCache(tmp_path)
    cache.tmp.mkdir(parents=True)
    (cache.tmp / "old.abc.part").write_bytes(b"x")
    (cache.tmp / ("a" * 64 + ".part")).write_bytes(b"keep me")
    busy = cache.tmp / "busy.part"
    busy.write_bytes(b"y")
    with open(busy, "rb") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        removed = cache.clean_tmp(keep=["a" * 64])
    assert [p.name for p in removed] == ["old.abc.part"]
    assert tmp_files(tmp_path) == ["a" * 64 + ".part", "busy.part"]


# --- 5. retention -----------------------------------------------------------------------------------

async def test_prune_keeps_current_and_newest_releases(tmp_path, reference, faulty) -> None:
    meta, paths, _files = make_stream(tmp_path, reference, faulty)
    cache = tmp_path / "cache"
    arch_dir = cache / "artifacts/rhcos/x86_64"
    for i, name in enumerate(["old-1", "old-2", "old-3"]):
        d = arch_dir / name
        d.mkdir(parents=True)
        (d / "f").write_bytes(b"x")
        (d / ".f.sha256").write_text("0" * 64)
        t = 1_700_000_000 + i * 1000
        os.utime(d / ".f.sha256", (t, t))
    (cache / "artifacts/gone-stream/x86_64/1").mkdir(parents=True)
    (cache / "tmp").mkdir()
    (cache / "tmp/stale.part").write_bytes(b"s")
    config = write_config(tmp_path / "bootserver.yaml", {
        "cache_dir": "cache", "streams": {"rhcos": {"metadata": str(meta), "keep_releases": 2}},
        "profiles": {"live": {"stream": "rhcos", "mode": "live"}}})
    rc, out, err = await run_cli("sync-images", "--config", str(config), "--prune")
    assert rc == 0, err
    current = served_path(paths, "kernel").split("/")[4]
    assert sorted(p.name for p in arch_dir.iterdir()) == sorted([current, "old-3"])
    assert not (cache / "artifacts/gone-stream").exists()
    assert tmp_files(cache) == []
    assert "pruned artifacts/rhcos/x86_64/old-1" in out and "pruned tmp/stale.part" in out


# --- 6. disk full -----------------------------------------------------------------------------------

async def test_disk_full_is_refused_early_and_keeps_the_cache(tmp_path, reference, faulty, monkeypatch) -> None:
    import shutil

    from bootserver.artifacts import upstream

    cache, rel, art, path, data = await _download(tmp_path, reference, faulty)
    async with Upstream(retry=FAST) as up:
        await up.download(cache, rel, rel.kernel)
        kernel = cache.path(rel, rel.kernel).read_bytes()
        real = shutil.disk_usage

        def tiny(p: Any) -> Any:
            return real(p)._replace(free=1000)

        monkeypatch.setattr(upstream.shutil, "disk_usage", tiny)
        with pytest.raises(DiskFullError) as info:
            await up.download(cache, rel, art)
    msg = str(info.value)
    assert str(cache.path(rel, art)) in msg and f"{len(data)} more bytes needed, 1000 free" in msg
    assert cache.path(rel, rel.kernel).read_bytes() == kernel and not cache.path(rel, art).exists()
    assert tmp_files(cache.cache_dir) == []
    assert len(faulty.gets(path)) == 1  # not retried


async def test_disk_full_on_real_tmpfs(tmp_path, reference, faulty) -> None:
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        meta, _paths, _files = make_stream(tmp_path, reference, faulty)
        svc = service(parse_config({"cache_dir": str(mnt), "streams": {"rhcos": {"metadata": str(meta)}}},
                                       "t.yaml", tmp_path))
        rel = (await svc.desk.catalog.get("rhcos")).releases["x86_64"]
        async with Upstream(retry=FAST) as up:
            await up.download(svc.runtime.cache, rel, rel.kernel)
            with pytest.raises(DiskFullError, match=str(svc.runtime.cache.path(rel, rel.rootfs))):
                await up.download(svc.runtime.cache, rel, rel.rootfs)
        assert svc.runtime.cache.is_cached(rel, rel.kernel) and not svc.runtime.cache.path(rel, rel.rootfs).exists()
        assert tmp_files(mnt) == []
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


async def test_disk_full_while_writing_names_path_and_size(tmp_path, reference, faulty, monkeypatch) -> None:
    import errno

    from bootserver.artifacts import cache as cache_mod

    cache, rel, art, path, _data = await _download(tmp_path, reference, faulty)
    real_fdopen = os.fdopen

    class FillingFile:
        """A file that runs out of space after 1 MB, like a full disk (ENOSPC from write)."""

        def __init__(self, f: Any) -> None:
            self._f, self._n = f, 0

        def write(self, b: bytes) -> int:
            self._n += len(b)
            if self._n > 1_000_000:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self._f.write(b)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._f, name)

    monkeypatch.setattr(cache_mod.os, "fdopen", lambda *a, **k: FillingFile(real_fdopen(*a, **k)))
    async with Upstream(retry=FAST) as up:
        with pytest.raises(DiskFullError) as info:
            await up.download(cache, rel, art)
    assert str(info.value).startswith(f"{cache.path(rel, art)}: not enough disk space")
    assert "more bytes needed" in str(info.value)
    assert tmp_files(cache.cache_dir) == [] and not cache.path(rel, art).exists()
    assert len(faulty.gets(path)) == 1


# --- 7. readiness -----------------------------------------------------------------------------------

async def test_readyz(tmp_path, reference, faulty, aiohttp_client) -> None:
    meta, _paths, _files = make_stream(tmp_path, reference, faulty)
    client, _rt = await app_client(aiohttp_client, make_config(tmp_path, meta, read_through=False))
    r = await client.get("/readyz")
    assert r.status == 503
    report = await r.json()
    assert report["read_through"] is False
    assert sorted((i["kind"], i["status"]) for i in report["artifacts"]) == [
        ("initramfs", "missing"), ("kernel", "missing"), ("rootfs", "missing")]
    assert all(i["profiles"] == ["live"] for i in report["artifacts"])
    rc, _out, err = await run_cli("sync-images", "--config", str(write_config(tmp_path / "c.yaml", {
        "cache_dir": "cache", "streams": {"rhcos": {"metadata": str(meta)}},
        "profiles": {"live": {"stream": "rhcos", "mode": "live"}}})))
    assert rc == 0, err
    r = await client.get("/readyz")
    assert r.status == 200
    assert {i["status"] for i in (await r.json())["artifacts"]} == {"cached"}

    client2, _ = await app_client(aiohttp_client, make_config(tmp_path / "other", meta))
    r = await client2.get("/readyz")
    assert r.status == 200 and {i["status"] for i in (await r.json())["artifacts"]} == {"missing"}


# --- config -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("doc,key", [
    ({"server": {"facility": "nope"}}, "server.facility"),
    ({"streams": {"s": {"metadata": "http://x/s.json", "keep_releases": 0}}}, "streams.s.keep_releases"),
    ({"read_through": "yes"}, "read_through"),
    ({"upstream": {"read_timeout": 0}}, "upstream.read_timeout"),
    ({"upstream": {"read_timeout": "forever"}}, "upstream.read_timeout"),
])
def test_new_config_keys_are_checked(tmp_path: Path, doc: dict, key: str) -> None:
    from bootserver.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        parse_config(doc, "t.yaml", tmp_path)
    assert f"t.yaml: {key}: " in str(info.value)


async def test_sigkill_of_serve_mid_read_through_then_restart_resumes(tmp_path, reference, faulty) -> None:
    from support.helpers import free_port
    from support.server import ServerProcess

    meta, paths, files = make_stream(tmp_path, reference, faulty)
    port = free_port()
    config = write_config(tmp_path / "bootserver.yaml", {
        "server": {"listen": f"127.0.0.1:{port}"}, "cache_dir": "cache",
        "streams": {"rhcos": {"metadata": str(meta)}},
        "profiles": {"live": {"stream": "rhcos", "mode": "live"}}})
    rootfs, data = paths["rootfs"], files[paths["rootfs"]]
    half = 1_000_000
    faulty.pause[rootfs] = half
    part = tmp_path / "cache/tmp" / f"{hashlib.sha256(data).hexdigest()}.part"
    url_path = served_path(paths, "rootfs")
    server = ServerProcess(config, port)
    async with aiohttp.ClientSession() as session:
        await server.start(session)
        try:
            r = await session.get(server.url + url_path)
            assert r.status == 200
            await asyncio.wait_for(faulty.paused.wait(), DEADLINE)
            await wait_for(lambda: part.exists() and part.stat().st_size == half, "the partial file")
            assert server.proc is not None
            server.proc.kill()
            await server.proc.wait()
            with pytest.raises(aiohttp.ClientPayloadError):
                await r.read()
        finally:
            await server.stop()
        faulty.gate.set()
        assert published(tmp_path / "cache") == []
        server = ServerProcess(config, port)
        await server.start(session)
        try:
            async with session.get(server.url + url_path) as r:
                assert r.status == 200 and await r.read() == data
        finally:
            await server.stop()
    assert faulty.gets(rootfs) == [None, f"bytes={half}-"]
    assert tmp_files(tmp_path / "cache") == []


async def test_head_on_a_miss_and_upstream_404_is_502(tmp_path, reference, faulty, aiohttp_client,
                                                      caplog) -> None:
    meta, paths, files = make_stream(tmp_path, reference, faulty)
    client, _rt = await app_client(aiohttp_client, make_config(tmp_path, meta))
    r = await client.head(served_path(paths, "initramfs"))
    assert r.status == 200 and r.headers["Content-Length"] == str(len(files[paths["initramfs"]]))
    del faulty.files[paths["kernel"]]
    r = await client.get(served_path(paths, "kernel"))
    assert r.status == 502
    assert (await r.text()).startswith("upstream problem: ")
    assert f"{faulty.url}{paths['kernel']}: HTTP 404" in caplog.text  # the details go to the log


async def test_mirror_that_times_out_falls_through(tmp_path, reference, faulty) -> None:
    cache, rel, art, path, data = await _download(tmp_path, reference, faulty, "kernel")
    faulty.stall.add("/slow/")
    async with Upstream(mirrors=[faulty.url + "/slow"], retry=FAST, read_timeout=0.3) as up:
        _size, used = await up.download(cache, rel, art)
    assert used == faulty.url + path and cache.path(rel, art).read_bytes() == data
    assert [p for p, _ in faulty.log] == ["/slow" + path, path]


async def test_sync_images_uses_the_facility_mirrors(tmp_path, reference, faulty) -> None:
    meta, _paths, files = make_stream(tmp_path, reference, faulty)
    for p, d in files.items():
        faulty.files["/good" + p] = d
    faulty.status_for = {"/m404/": 404}
    config = write_config(tmp_path / "bootserver.yaml", {
        "server": {"facility": "sv15"}, "cache_dir": "cache", "streams": {"rhcos": {"metadata": str(meta)}},
        "facilities": {"da11": {"mirrors": [faulty.url + "/m404", faulty.url + "/good"]},
                       "sv15": {"mirrors": [faulty.url + "/sv15"]}},
        "profiles": {"live": {"stream": "rhcos", "mode": "live"}},
        "nodes": {"n": {"profile": "live", "facility": "da11"}}})
    rc, out, err = await run_cli("sync-images", "--config", str(config), "--facility", "da11")
    assert rc == 0, err
    assert sorted(p for p, _ in faulty.log) == sorted([m + p for p in files for m in ("/m404", "/good")])
    assert all(line.endswith("sha256 ok") for line in out.splitlines())


async def test_fetch_is_shielded_from_a_cancelled_caller(tmp_path, reference, faulty) -> None:
    meta, paths, files = make_stream(tmp_path, reference, faulty)
    svc = service(make_config(tmp_path, meta))
    svc.runtime.upstream.retry = FAST
    rt = svc.desk.artifacts
    rel = (await svc.desk.catalog.get("rhcos")).releases["x86_64"]
    faulty.pause[paths["rootfs"]] = 500_000
    async with svc.runtime.upstream:
        caller = asyncio.create_task(rt.fetch(rel, rel.rootfs))
        await asyncio.wait_for(faulty.paused.wait(), DEADLINE)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        assert rt.status(rel, rel.rootfs) == "fetching"
        joined = asyncio.create_task(rt.fetch(rel, rel.rootfs))
        faulty.gate.set()
        path = (await asyncio.wait_for(joined, DEADLINE)).path
        await rt.close()
    assert path.read_bytes() == files[paths["rootfs"]] and faulty.gets(paths["rootfs"]) == [None]
    assert rt.status(rel, rel.rootfs) == "cached"


# --- clients that go away mid-body (issue 16, item 8) -------------------------------------------------

async def _abort_after(port: int, path: str, nbytes: int) -> int:
    """A raw HTTP client that reads ``nbytes`` of the answer, then resets the connection; returns the
    bytes it received (headers included)."""
    import socket
    import struct

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    got = 0
    while got < nbytes:
        data = await asyncio.wait_for(reader.read(65536), DEADLINE)
        if not data:
            break
        got += len(data)
    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
    return got


async def test_aborting_clients_log_one_line_each_with_the_bytes_sent(tmp_path, reference, faulty) -> None:
    import re

    from support.helpers import free_port
    from support.server import ServerProcess

    size = 40_000_000
    meta, paths, files = make_stream(tmp_path, reference, faulty, rootfs_size=size)
    port = free_port()
    config = write_config(tmp_path / "bootserver.yaml", {
        "server": {"listen": f"127.0.0.1:{port}"}, "cache_dir": "cache",
        "streams": {"rhcos": {"metadata": str(meta)}},
        "profiles": {"live": {"stream": "rhcos", "mode": "live"}}})
    url_path = served_path(paths, "rootfs")
    faulty.pause[paths["rootfs"]] = size // 4
    server = ServerProcess(config, port)
    async with aiohttp.ClientSession() as session:
        await server.start(session)
        try:
            # 10 clients give up on a read-through transfer, 10 on the cached file (sendfile)
            cold = [asyncio.create_task(_abort_after(port, url_path, 1_000_000)) for _ in range(10)]
            received = await asyncio.wait_for(asyncio.gather(*cold), DEADLINE)
            faulty.gate.set()
            async with session.get(server.url + url_path) as r:
                assert r.status == 200 and await r.read() == files[paths["rootfs"]]
            received += [await _abort_after(port, url_path, 1_000_000) for _ in range(10)]
        finally:
            await server.stop()
    assert all(n >= 1_000_000 for n in received)
    err = (await server.proc.stderr.read()).decode()  # type: ignore[union-attr]
    assert "Traceback" not in err and "Error handling request" not in err, err
    lines = [line for line in err.splitlines()
             if f"GET {url_path} 200" in line and line.endswith(" incomplete")]
    assert len(lines) == 20, err
    sent = [int(re.search(r" bytes=(\d+) ", line)[1]) for line in lines]  # type: ignore[index]
    assert all(0 < n < size for n in sent), sent
