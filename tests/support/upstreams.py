"""Fake upstreams on 127.0.0.1 (stream metadata and artifacts, as the mirrors serve them) and the
stand-in bytes they serve: :class:`Upstream` (counts GETs) and :class:`FaultyUpstream` (pauses, drops,
wrong bytes, error statuses). The fixtures ``upstream`` and ``faulty`` (``conftest.py``) start them."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.test_utils import TestServer


def payload(kind: str, size: int = 64 * 1024) -> bytes:
    """Deterministic stand-in bytes for an artifact of ``kind`` (``size`` bytes)."""
    seed = hashlib.sha256(kind.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def rewrite_stream(source: Path, upstream: str, payloads: dict[str, bytes],
                   arches: tuple[str, ...] = ("x86_64",)) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Copy real stream metadata with each metal PXE location moved to ``upstream`` (same URL path)
    and its sha256 set to the bytes we will serve; their ``signature`` is dropped (the stand-in bytes
    have none: tests/artifacts/test_openpgp.py signs its own). Returns ``(document, {url path: bytes})``."""
    doc = json.loads(source.read_text())
    files: dict[str, bytes] = {}
    for arch in arches:
        pxe = doc["architectures"][arch]["artifacts"]["metal"]["formats"]["pxe"]
        for kind, art in pxe.items():
            path = urlsplit(art["location"]).path
            data = payloads[kind] + arch.encode()
            art["location"] = upstream + path
            art["sha256"] = hashlib.sha256(data).hexdigest()
            art.pop("signature", None)
            files[path] = data
    return doc, files


class Upstream:
    """A fake upstream on 127.0.0.1 serving ``files`` (URL path -> bytes); counts GETs per path."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.gets: dict[str, int] = {}
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.gets[request.path] = self.gets.get(request.path, 0) + 1
        data = self.files.get(request.path)
        if data is None:
            return web.Response(status=404, text="not found")
        return web.Response(body=data, content_type="application/octet-stream")

    @classmethod
    @asynccontextmanager
    async def serving(cls) -> AsyncIterator[Upstream]:
        """A new upstream served on 127.0.0.1 (:func:`serve_on_loopback`) for the block, on the running loop."""
        up = cls()
        async with serve_on_loopback(up.handle) as up.url:
            yield up


@asynccontextmanager
async def serve_on_loopback(handle: Callable[..., Any]) -> AsyncIterator[str]:
    """Serve every GET with ``handle`` on 127.0.0.1 and a free port, on the running event loop, for the
    block (aiohttp's ``TestServer``, as pytest-aiohttp's ``aiohttp_server``); yields the base URL without a
    trailing slash."""
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


class FaultyUpstream:
    """A fake upstream that can pause mid-body, drop the connection, send wrong bytes, answer error
    statuses (per path prefix, optionally only the first N times), and ignore ``Range``.

    ``log`` records ``(path, Range header or None)`` of every GET, in order.
    """

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.log: list[tuple[str, str | None]] = []
        self.status_for: dict[str, int] = {}         # path prefix -> status, every time
        self.stall: set[str] = set()                 # path prefixes that answer nothing until the gate opens
        self.fail_first: dict[str, list[int]] = {}   # path -> statuses answered first, one per GET
        self.wrong: set[str] = set()                 # paths served with one byte flipped
        self.ignore_range = False
        self.pause: dict[str, int] = {}              # path -> offset where the next response pauses (once)
        self.paused = asyncio.Event()
        self.gate = asyncio.Event()
        self.drop: dict[str, int] = {}               # path -> offset where the next response is cut (once)
        self.url = ""

    def gets(self, path: str) -> list[str | None]:
        """The Range headers of the GETs of ``path`` (``None`` for a plain GET)."""
        return [r for p, r in self.log if p == path]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        self.log.append((path, request.headers.get("Range")))
        for prefix, status in self.status_for.items():
            if path.startswith(prefix):
                return web.Response(status=status, text="no")
        if any(path.startswith(prefix) for prefix in self.stall):
            await self.gate.wait()
            return web.Response(status=504, text="too late")
        queue = self.fail_first.get(path)
        if queue:
            return web.Response(status=queue.pop(0), text="try later")
        data = self.files.get(path)
        if data is None:
            return web.Response(status=404, text="not found")
        if path in self.wrong:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        start, status, headers = 0, 200, {}
        rng = request.headers.get("Range")
        if rng and not self.ignore_range:
            m = re.fullmatch(r"bytes=(\d+)-", rng)
            assert m, rng
            start, status = int(m[1]), 206
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        resp = web.StreamResponse(status=status, headers=headers)
        resp.content_length = len(data) - start
        await resp.prepare(request)
        pause_at, drop_at = self.pause.pop(path, None), self.drop.pop(path, None)
        pos = start
        while pos < len(data):
            end = min(len(data), pos + 65536)
            for mark in (pause_at, drop_at):
                if mark is not None and pos < mark < end:
                    end = mark
            await resp.write(data[pos:end])
            pos = end
            if pos == pause_at:
                self.paused.set()
                await self.gate.wait()
            if pos == drop_at:
                assert request.transport is not None
                request.transport.close()
                return resp
        await resp.write_eof()
        return resp
