"""``bootserver sync-images`` against a fake upstream on 127.0.0.1, through the real command line."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from support.helpers import run_cli, write_config
from support.upstreams import payload, rewrite_stream


def setup(tmp_path: Path, reference: Path, upstream, *, corrupt: str | None = None) -> tuple[Path, dict]:
    doc, files = rewrite_stream(reference / "rhcos-stream-4.16.json", upstream.url,
                                {k: payload(k, 100_000) for k in ("kernel", "initramfs", "rootfs")},
                                arches=("x86_64", "aarch64"))
    for path, data in files.items():
        upstream.files[path] = (b"X" + data[1:]) if corrupt and path.endswith(corrupt) else data
    upstream.files["/rhcos.json"] = json.dumps(doc).encode()
    config = write_config(tmp_path / "bootserver.yaml", {
        "cache_dir": "cache",
        "streams": {"rhcos-4.16": {"metadata": upstream.url + "/rhcos.json", "architectures": ["x86_64", "aarch64"]},
                    "local": {"metadata": str(reference / "fcos-stream-stable.json")}},
        "facilities": {"da11": {}, "sv15": {}},
        "profiles": {"x86": {"stream": "rhcos-4.16", "mode": "live"},
                     "arm": {"stream": "rhcos-4.16", "arch": "aarch64", "mode": "live"},
                     "fcos": {"stream": "local", "mode": "live"}},
        "nodes": {"a": {"profile": "x86", "facility": "da11"}, "b": {"profile": "arm", "facility": "sv15"}},
    })
    return config, doc


def cache_files(tmp_path: Path) -> list[str]:
    root = tmp_path / "cache"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


async def test_facility_filter_and_summary_lines(tmp_path: Path, reference: Path, upstream) -> None:
    config, _doc = setup(tmp_path, reference, upstream)
    rc, out, err = await run_cli("sync-images", "--config", str(config), "--facility", "sv15")
    assert rc == 0, err
    lines = out.splitlines()
    assert len(lines) == 3 and all(" aarch64 " in line and line.endswith("sha256 ok") for line in lines)
    assert not any("x86_64" in f for f in cache_files(tmp_path) if f.startswith("artifacts"))
    assert "streams/rhcos-4.16.json" in cache_files(tmp_path)


async def test_hash_mismatch_publishes_nothing_and_exits_1(tmp_path: Path, reference: Path, upstream) -> None:
    config, doc = setup(tmp_path, reference, upstream, corrupt="rootfs.x86_64.img")
    rc, _out, err = await run_cli("sync-images", "--config", str(config), "--stream", "rhcos-4.16")
    assert rc == 1
    rootfs = doc["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["pxe"]["rootfs"]
    failure, summary = err.strip().splitlines()
    release = doc["architectures"]["x86_64"]["artifacts"]["metal"]["release"]
    assert failure.startswith(f"bootserver: rhcos-4.16 x86_64 {release} rootfs: {rootfs['location']}: sha256 "
                              f"mismatch: expected {rootfs['sha256']}, got ")
    assert summary == "bootserver: sync-images: 1 of 6 artifacts failed (each named above); the others are synced"
    published = [f for f in cache_files(tmp_path) if f.startswith("artifacts/") and not f.endswith(".sha256")]
    assert not any("rootfs.x86_64" in f for f in published)
    assert not any(f.startswith("tmp/") for f in cache_files(tmp_path))


async def test_every_artifact_is_tried_and_each_failure_is_one_line(tmp_path: Path, reference: Path,
                                                                    upstream) -> None:
    """Issue 52: sync-images stopped at the first failed artifact. Two fail (a wrong sha256, a 404):
    both named, one line each, the four others downloaded, exit 1 at the end."""
    config, doc = setup(tmp_path, reference, upstream, corrupt="kernel-x86_64")
    arm = doc["architectures"]["aarch64"]["artifacts"]["metal"]["formats"]["pxe"]
    del upstream.files[arm["initramfs"]["location"].removeprefix(upstream.url)]
    rc, out, err = await run_cli("sync-images", "--config", str(config), "--stream", "rhcos-4.16")
    assert rc == 1
    lines = err.strip().splitlines()
    assert len(lines) == 3, err
    assert sorted(line.split(": ", 2)[1] for line in lines[:2]) == [
        f"rhcos-4.16 aarch64 {doc['architectures']['aarch64']['artifacts']['metal']['release']} initramfs",
        f"rhcos-4.16 x86_64 {doc['architectures']['x86_64']['artifacts']['metal']['release']} kernel"]
    assert any("HTTP 404" in line for line in lines[:2]) and any("sha256 mismatch" in line for line in lines[:2])
    assert lines[2] == "bootserver: sync-images: 2 of 6 artifacts failed (each named above); the others are synced"
    assert len([line for line in out.splitlines() if line.endswith("sha256 ok")]) == 4


async def test_unknown_stream_is_usage_error(tmp_path: Path, reference: Path, upstream) -> None:
    config, _ = setup(tmp_path, reference, upstream)
    rc, _out, err = await run_cli("sync-images", "--config", str(config), "--stream", "nope")
    assert rc == 2 and "no stream 'nope'" in err


async def test_metadata_404_names_the_url(tmp_path: Path, reference: Path, upstream) -> None:
    config, _ = setup(tmp_path, reference, upstream)
    del upstream.files["/rhcos.json"]
    rc, _out, err = await run_cli("sync-images", "--config", str(config), "--stream", "rhcos-4.16")
    assert rc == 1
    assert err.strip().splitlines() == [
        f"bootserver: rhcos-4.16 metadata: {upstream.url}/rhcos.json: HTTP 404 Not Found",
        "bootserver: sync-images: the metadata of 1 of 1 streams failed (each named above)"]


async def test_malformed_metadata_is_exit_2_and_keeps_old_copy(tmp_path: Path, reference: Path, upstream) -> None:
    config, _ = setup(tmp_path, reference, upstream)
    rc, _, err = await run_cli("sync-images", "--config", str(config), "--stream", "rhcos-4.16")
    assert rc == 0, err
    good = (tmp_path / "cache/streams/rhcos-4.16.json").read_bytes()
    upstream.files["/rhcos.json"] = (reference / "rhcos-legacy-4.3.json").read_bytes()
    rc, _, err = await run_cli("sync-images", "--config", str(config), "--stream", "rhcos-4.16")
    assert rc == 2
    assert "legacy pre-stream RHCOS metadata" in err and f"{upstream.url}/rhcos.json" in err
    assert (tmp_path / "cache/streams/rhcos-4.16.json").read_bytes() == good


# --- one retry policy for stream metadata and artifacts (issue 16, item 13) --------------------------

def _url_stream_config(tmp_path: Path, reference: Path, faulty, **extra):
    from bootserver.config import parse_config

    doc, files = rewrite_stream(reference / "rhcos-stream-4.16.json", faulty.url,
                                {k: payload(k, 100_000) for k in ("kernel", "initramfs", "rootfs")})
    faulty.files.update(files)
    faulty.files["/rhcos.json"] = json.dumps(doc).encode()
    return parse_config({"cache_dir": "cache", "streams": {"rhcos": {"metadata": faulty.url + "/rhcos.json"}},
                         "profiles": {"live": {"stream": "rhcos", "mode": "live"}}, **extra},
                        "t.yaml", tmp_path)


async def test_stream_metadata_is_retried_like_artifacts(tmp_path: Path, reference: Path, faulty) -> None:
    from support.readthrough import FAST
    from support.services import service

    config = _url_stream_config(tmp_path, reference, faulty)
    faulty.fail_first["/rhcos.json"] = [503]
    faulty.drop["/rhcos.json"] = 1000  # the second answer is cut after 1000 bytes of its Content-Length
    svc = service(config)
    svc.runtime.upstream.retry = FAST
    try:
        meta = await svc.desk.catalog.refresh("rhcos")
    finally:
        await svc.runtime.close()
    assert "x86_64" in meta.releases
    assert faulty.gets("/rhcos.json") == [None, None, None]


async def test_stream_metadata_404_is_not_retried(tmp_path: Path, reference: Path, faulty) -> None:
    import pytest
    from support.readthrough import FAST
    from support.services import service

    from bootserver.errors import FetchError

    config = _url_stream_config(tmp_path, reference, faulty)
    faulty.fail_first["/rhcos.json"] = [404]
    svc = service(config)
    svc.runtime.upstream.retry = FAST
    try:
        with pytest.raises(FetchError, match=rf"{faulty.url}/rhcos.json: HTTP 404"):
            await svc.desk.catalog.refresh("rhcos")
    finally:
        await svc.runtime.close()
    assert faulty.gets("/rhcos.json") == [None]


# --- one download per artifact across processes (issue 16, item 10) --------------------------------

async def _lines_until(stream, needle: str, count: int, deadline: float = 20.0) -> str:
    """Read ``stream`` (a subprocess's stderr) until ``needle`` appeared on ``count`` lines; return
    what was read. Fails after ``deadline`` seconds."""
    import asyncio

    seen, text = 0, ""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while seen < count:
        line = (await asyncio.wait_for(stream.readline(), max(0.1, end - loop.time()))).decode()
        assert line, f"stream ended before {count} x {needle!r}: {text}"
        text += line
        seen += needle in line
    return text


def _local_stream_config(tmp_path: Path, meta: Path, **server) -> Path:
    doc = {"cache_dir": "cache", "streams": {"rhcos": {"metadata": str(meta)}},
           "profiles": {"live": {"stream": "rhcos", "mode": "live"}}}
    if server:
        doc["server"] = server
    return write_config(tmp_path / "bootserver.yaml", doc)


async def test_two_sync_images_at_once_download_each_artifact_once(tmp_path: Path, reference: Path,
                                                                    faulty) -> None:
    import asyncio
    import subprocess

    from support.helpers import BOOTSERVER
    from support.readthrough import DEADLINE, make_stream, wait_for

    from bootserver.artifacts.cache import ArtifactCache

    meta, _paths, files = make_stream(tmp_path, reference, faulty)
    config = _local_stream_config(tmp_path, meta)
    for path, data in files.items():
        faulty.pause[path] = len(data) // 2
    cache = ArtifactCache(tmp_path / "cache")
    parts = [cache.tmp / f"{hashlib.sha256(d).hexdigest()}.part" for d in files.values()]
    first = await asyncio.create_subprocess_exec(*BOOTSERVER, "sync-images", "--config", str(config),
                                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    second = None
    try:
        # the first sync holds half of every artifact, its upstream paused
        await wait_for(
            lambda: all(
                p.exists() and p.stat().st_size == len(d) // 2
                for p, d in zip(parts, files.values(), strict=False)
            ),
            "the first sync's partial files",
        )
        second = await asyncio.create_subprocess_exec(*BOOTSERVER, "sync-images", "--config", str(config),
                                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        err2 = await _lines_until(second.stderr, "being downloaded by another process; following it", 3)
        faulty.gate.set()
        _out1, err1 = await asyncio.wait_for(first.communicate(), DEADLINE)
        out2, rest2 = await asyncio.wait_for(second.communicate(), DEADLINE)
    finally:
        faulty.gate.set()
        for proc in (first, second):
            if proc is not None and proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert first.returncode == 0, err1.decode()
    assert second.returncode == 0, err2 + rest2.decode()
    assert {p: faulty.gets(p) for p in files} == {p: [None] for p in files}
    assert all(line.endswith("sha256 ok") and "by another process" in line
               for line in out2.decode().splitlines()), out2.decode()
    for path, data in files.items():
        rel = path.rsplit("/", 3)
        assert (cache.root / "rhcos/x86_64" / rel[-3] / rel[-1]).read_bytes() == data
    assert sorted(p.name for p in cache.tmp.iterdir()) == []


async def test_sync_images_follows_a_download_that_serve_runs(tmp_path: Path, reference: Path,
                                                              faulty) -> None:
    import asyncio

    import aiohttp
    from support.helpers import BOOTSERVER, free_port
    from support.readthrough import DEADLINE, make_stream, served_path
    from support.server import ServerProcess

    meta, paths, files = make_stream(tmp_path, reference, faulty)
    port = free_port()
    config = _local_stream_config(tmp_path, meta, listen=f"127.0.0.1:{port}")
    rootfs, data = paths["rootfs"], files[paths["rootfs"]]
    faulty.pause[rootfs] = len(data) // 2
    server = ServerProcess(config, port)
    async with aiohttp.ClientSession() as session:
        await server.start(session)
        sync = None
        try:
            r = await session.get(server.url + served_path(paths, "rootfs"))
            assert r.status == 200
            await asyncio.wait_for(faulty.paused.wait(), DEADLINE)
            sync = await asyncio.create_subprocess_exec(*BOOTSERVER, "sync-images", "--config", str(config),
                                                        stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.PIPE)
            err = await _lines_until(sync.stderr, "being downloaded by another process; following it", 1)
            faulty.gate.set()
            assert await asyncio.wait_for(r.read(), DEADLINE) == data
            out, rest = await asyncio.wait_for(sync.communicate(), DEADLINE)
            assert sync.returncode == 0, err + rest.decode()
        finally:
            faulty.gate.set()
            if sync is not None and sync.returncode is None:
                sync.kill()
                await sync.wait()
            await server.stop()
    assert faulty.gets(rootfs) == [None]
    assert "rootfs: downloaded" in out.decode() and "by another process" in out.decode()


async def test_upstream_read_timeout_bounds_a_hung_artifact_upstream(tmp_path: Path, reference: Path,
                                                                    faulty) -> None:
    import asyncio

    import pytest
    from support.readthrough import DEADLINE, FAST
    from support.services import service

    from bootserver.errors import FetchError

    config = _url_stream_config(tmp_path, reference, faulty, upstream={"read_timeout": "1"})
    svc = service(config)
    svc.runtime.upstream.retry = FAST
    try:
        rel = (await svc.desk.catalog.refresh("rhcos")).releases["x86_64"]
        kernel = rel.kernel.url[len(faulty.url):]
        faulty.stall.add(kernel)  # answers nothing (until the test ends)
        with pytest.raises(FetchError, match="Timeout"):
            await asyncio.wait_for(svc.runtime.upstream.download(svc.runtime.cache, rel, rel.kernel), DEADLINE)
    finally:
        await svc.runtime.close()
    assert len(faulty.gets(kernel)) == FAST.attempts
    assert not svc.runtime.cache.is_cached(rel, rel.kernel)
