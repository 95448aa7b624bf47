"""Shared by the tests (moved out of tests/artifacts/test_readthrough.py, which other test modules imported)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bootserver.artifacts.upstream import RetryPolicy
from bootserver.config import parse_config
from bootserver.http.app import SERVICE, create_app
from support.upstreams import FaultyUpstream, payload, rewrite_stream

FAST = RetryPolicy(attempts=5, initial=0.01, maximum=0.05, jitter=0.01)


DEADLINE = 20.0


ROOTFS_SIZE = 3_000_000


def make_stream(tmp_path: Path, reference: Path, up: FaultyUpstream, *, rootfs_size: int = ROOTFS_SIZE
                ) -> tuple[Path, dict[str, str], dict[str, bytes]]:
    """Stream metadata pointing at ``up``: returns (metadata file, {kind: url path}, {url path: bytes})."""
    sizes = {"kernel": 100_000, "initramfs": 200_000, "rootfs": rootfs_size}
    doc, files = rewrite_stream(reference / "rhcos-stream-4.16.json", up.url,
                                {k: payload(k, n) for k, n in sizes.items()})
    up.files.update(files)
    meta = tmp_path / "stream.json"
    meta.write_text(json.dumps(doc))
    pxe = doc["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["pxe"]
    paths = {k: a["location"][len(up.url):] for k, a in pxe.items()}
    return meta, paths, files


def make_config(tmp_path: Path, meta: Path, **extra: Any):
    doc: dict[str, Any] = {
        "cache_dir": "cache",
        "streams": {"rhcos": {"metadata": str(meta)}},
        "profiles": {"live": {"stream": "rhcos", "mode": "live"}},
        "nodes": {"n0": {"profile": "live"}},
    }
    doc.update(extra)
    return parse_config(doc, "t.yaml", tmp_path)


def served_path(paths: dict[str, str], kind: str) -> str:
    """The bootserver URL path of an artifact: /artifacts/rhcos/x86_64/<release>/<file>."""
    parts = paths[kind].rsplit("/", 3)
    return f"/artifacts/rhcos/x86_64/{parts[-3]}/{parts[-1]}"


def published(cache: Path) -> list[str]:
    root = cache / "artifacts"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.is_dir() else []


def tmp_files(cache: Path) -> list[str]:
    return sorted(p.name for p in (cache / "tmp").iterdir()) if (cache / "tmp").is_dir() else []


async def wait_for(cond: Callable[[], bool], what: str, deadline: float = DEADLINE) -> None:
    """Poll ``cond`` until true, failing after ``deadline`` seconds."""
    end = time.monotonic() + deadline
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)  # polling interval, bounded by the deadline


async def settled(rt, paths: dict[str, str], kind: str):
    """Wait (at most DEADLINE) until the artifact ``kind`` is published, joining its download if one is
    running (``ReadThrough.fetch``); return what fetch returned."""
    found = await rt.resolve(tuple(served_path(paths, kind).split("/")[2:]))
    assert found is not None
    return await asyncio.wait_for(rt.fetch(*found), DEADLINE)


async def app_client(aiohttp_client, config, retry: RetryPolicy = FAST):
    app = create_app(config)
    client = await aiohttp_client(app)
    app[SERVICE].runtime.upstream.retry = retry
    return client, app[SERVICE].desk.artifacts
