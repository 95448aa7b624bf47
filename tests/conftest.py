"""Shared fixtures: the reference data in ../shared/reference, a fake upstream, configs, and a running
``bootserver serve`` subprocess."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

import pytest
import yaml
from aiohttp import web

REPO = Path(__file__).resolve().parents[1]
REFERENCE = Path(os.environ.get("BOOTSERVER_REFERENCE", REPO.parent / "shared" / "reference"))
BOOTSERVER = [sys.executable, "-m", "bootserver"]


@pytest.fixture(autouse=True)
def _private_user_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Configs without ``state_dir``/``cache_dir`` use per-user dirs: point them at a temp folder."""
    home = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))


@pytest.fixture(scope="session")
def reference() -> Path:
    """The folder of public reference data (stream metadata, Ignition schemas, pointer configs)."""
    if not REFERENCE.is_dir():
        pytest.fail(f"reference data not found at {REFERENCE} (set BOOTSERVER_REFERENCE)")
    return REFERENCE


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def payload(kind: str, size: int = 64 * 1024) -> bytes:
    """Deterministic stand-in bytes for an artifact of ``kind`` (``size`` bytes)."""
    seed = hashlib.sha256(kind.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def rewrite_stream(source: Path, upstream: str, payloads: dict[str, bytes],
                   arches: tuple[str, ...] = ("x86_64",)) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Copy real stream metadata with each metal PXE location moved to ``upstream`` (same URL path)
    and its sha256 set to the bytes we will serve. Returns ``(document, {url path: bytes})``."""
    doc = json.loads(source.read_text())
    files: dict[str, bytes] = {}
    for arch in arches:
        pxe = doc["architectures"][arch]["artifacts"]["metal"]["formats"]["pxe"]
        for kind, art in pxe.items():
            path = urlsplit(art["location"]).path
            data = payloads[kind] + arch.encode()
            art["location"] = upstream + path
            art["sha256"] = hashlib.sha256(data).hexdigest()
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


@pytest.fixture
async def upstream(aiohttp_server: Callable[..., Any]) -> Upstream:
    up = Upstream()
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", up.handle)
    server = await aiohttp_server(app, host="127.0.0.1")
    up.url = str(server.make_url("")).rstrip("/")
    return up


def write_config(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


async def run_cli(*args: str, timeout: float = 60) -> tuple[int, str, str]:
    """Run ``python -m bootserver ARGS`` without blocking the event loop; returns (rc, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(*BOOTSERVER, *args, stdout=subprocess.PIPE,
                                                stderr=subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode, out.decode(), err.decode()


class ServerProcess:
    """A ``bootserver serve`` subprocess; ``url`` is its base URL once ``/healthz`` answers."""

    def __init__(self, config: Path, port: int, *extra_args: str) -> None:
        self.config = config
        self.extra_args = extra_args
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, session: Any, deadline: float = 20.0) -> None:
        import aiohttp

        self.proc = await asyncio.create_subprocess_exec(
            *BOOTSERVER, "serve", "--config", str(self.config), *self.extra_args,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline
        while loop.time() < end:
            if self.proc.returncode is not None:
                err = await self.proc.stderr.read()  # type: ignore[union-attr]
                raise RuntimeError(f"bootserver serve exited {self.proc.returncode}: {err.decode()}")
            try:
                async with session.get(self.url + "/healthz") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)  # polling interval while waiting for the port, bounded by deadline
        raise TimeoutError("bootserver serve did not answer /healthz in time")

    async def stop(self) -> None:
        if self.proc and self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except asyncio.TimeoutError:
                self.proc.kill()
                await self.proc.wait()
