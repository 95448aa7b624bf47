"""Shared fixtures: the reference data in tests/data (see its SOURCES.md), a fake upstream, configs, and a running
``bootserver serve`` subprocess."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import pytest
from aiohttp import web
from helpers import BOOTSERVER, REFERENCE, REPO, free_port, run_cli, write_config  # noqa: F401 (shared)

SCHEMAS = REPO / "ignition" / "schema"


@pytest.fixture(autouse=True)
def _private_user_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Configs without ``state_dir``/``cache_dir`` use per-user dirs: point them at a temp folder."""
    home = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))


@pytest.fixture(scope="session")
def reference() -> Path:
    """The folder of public reference data (stream metadata, pointer configs, the Equinix Metal OpenAPI spec),
    copied unmodified into ``tests/data`` with its provenance in ``tests/data/SOURCES.md``."""
    return REFERENCE


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


async def serve_on_loopback(aiohttp_server: Callable[..., Any], handle: Callable[..., Any]) -> str:
    """Serve every GET with ``handle`` on 127.0.0.1 (pytest-aiohttp's server, stopped after the test);
    returns the base URL without a trailing slash."""
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    server = await aiohttp_server(app, host="127.0.0.1")
    return str(server.make_url("")).rstrip("/")


@pytest.fixture
async def upstream(aiohttp_server: Callable[..., Any]) -> Upstream:
    up = Upstream()
    up.url = await serve_on_loopback(aiohttp_server, up.handle)
    return up


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


@pytest.fixture
async def faulty(aiohttp_server: Callable[..., Any]) -> FaultyUpstream:
    """A :class:`FaultyUpstream` on 127.0.0.1 (its gate is opened at the end)."""
    up = FaultyUpstream()
    up.url = await serve_on_loopback(aiohttp_server, up.handle)
    yield up
    up.gate.set()  # never leave a handler waiting


class ServerProcess:
    """A ``bootserver serve`` subprocess; ``url`` is its base URL once ``/healthz`` answers, ``admin_url``
    its admin listener's (``/nodes``, ``/metrics``: ``server.admin.listen``, when that is host:port)."""

    def __init__(self, config: Path, port: int, *extra_args: str) -> None:
        self.config = config
        self.extra_args = extra_args
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        from bootserver.config import load_config

        self.admin_url = "http://" + load_config(config).server.admin_listen
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
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


#: A fixed signing key and clock (2026-01-01T00:00:00Z, unix seconds) for deterministic signed URLs.
FIXED_KEY = bytes(range(32))
FIXED_NOW = 1_767_225_600


def fixed_signer(now: float = FIXED_NOW, key: bytes = FIXED_KEY):
    """A :class:`bootserver.signing.Signer` with a fixed key and a fixed clock (unix seconds)."""
    from bootserver.signing import KeyEntry, Keyring, Signer

    return Signer(Keyring(Path("/nonexistent/keys.json"), [KeyEntry(key, 0)]), now=lambda: now)


def relative(url: str) -> str:
    """Path and query of an absolute URL (for the aiohttp test client)."""
    parts = urlsplit(url)
    return parts.path + ("?" + parts.query if parts.query else "")


class SigningClient:
    """Wrap an aiohttp test client so per-node paths (``/ipxe/N``, ``/ignition/N``, ``/ignition/N/config``)
    are sent with a valid signature from the app's own URL builder, as a device would have them."""

    _NODE_PATH = re.compile(r"^/(ipxe|ignition)/([^/?]+)(/config)?$")

    def __init__(self, client: Any) -> None:
        self.client = client

    def sign(self, path: str) -> str:
        from bootserver.http.app import SERVICE

        m = self._NODE_PATH.match(path)
        if not m:
            return path
        urls = self.client.app[SERVICE].urls
        node = m.group(2)
        url = urls.chain(node) if m.group(1) == "ipxe" else (urls.real_config(node) if m.group(3) else urls.stub(node))
        return relative(url)

    async def get(self, path: str, **kwargs: Any) -> Any:
        return await self.client.get(self.sign(path), **kwargs)

    async def head(self, path: str, **kwargs: Any) -> Any:
        return await self.client.head(self.sign(path), **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


class CachedArtifact(NamedTuple):
    """An artifact published into a test cache: its URL ``path`` (``/artifacts/...``), its bytes and
    the release (:class:`bootserver.streams.Release`) it belongs to."""

    path: str
    data: bytes
    release: Any


@pytest.fixture
def publish_kernel(reference: Path) -> Callable[..., CachedArtifact]:
    """``publish_kernel(config, size)``: publish a ``size``-byte stand-in for the x86_64 kernel of
    rhcos-stream-4.16.json (stream ``rhcos-4.16``) into ``config.cache_dir`` through the real cache
    writer, as if its sha256 were the metadata's."""
    from bootserver.artifacts.cache import ArtifactCache
    from bootserver.streams import parse_stream

    def publish(config: Any, size: int) -> CachedArtifact:
        data = payload("kernel", size)
        meta = parse_stream((reference / "rhcos-stream-4.16.json").read_bytes(), name="rhcos-4.16",
                            source="x", architectures=("x86_64",))
        rel = meta.releases["x86_64"]
        art = rel.kernel.__class__(kind="kernel", url="http://up/k", sha256=hashlib.sha256(data).hexdigest(),
                                   signature=None, filename=rel.kernel.filename)
        cache = ArtifactCache(config.cache_dir)
        with cache.writer(rel, art) as w:
            w.write(data)
            w.commit(art.url)
        return CachedArtifact(f"/artifacts/rhcos-4.16/x86_64/{rel.version}/{rel.kernel.filename}", data, rel)

    return publish


@dataclass
class BootSetup:
    """What :func:`boot_setup` prepared: the config file, the port ``serve`` will listen on, the real
    Ignition config (``master.ign``, openshift-install's pointer config), the rewritten stream
    document and the files the fake upstream serves (URL path -> bytes)."""

    config: Path
    port: int
    master_ign: Path
    doc: dict[str, Any]
    files: dict[str, bytes]

    @property
    def expected_sha256(self) -> set[str]:
        """The sha256 of the x86_64 kernel, initramfs and rootfs in the stream document."""
        pxe = self.doc["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["pxe"]
        return {a["sha256"] for a in pxe.values()}


@pytest.fixture
def boot_setup(tmp_path: Path, reference: Path, upstream: Upstream) -> Callable[..., BootSetup]:
    """``boot_setup(size, nodes, profile_metal=None, metal=None)``: the common start of a sync -> serve
    test. The fake upstream serves a copy of rhcos-stream-4.16.json (at ``/streams/rhcos-4.16.json``)
    whose artifacts are ``size``-byte stand-ins; ``tmp_path/bootserver.yaml`` names it as stream
    ``rhcos-4.16``, listens on a free port of 127.0.0.1, and has one install-mode profile ``master``
    (``/dev/sda``, ``master.ign``, ``metal: profile_metal`` when given), the ``nodes`` mapping and the
    top-level ``metal`` when given."""

    def make(size: int, nodes: dict[str, Any], profile_metal: dict[str, Any] | None = None,
             metal: dict[str, Any] | None = None) -> BootSetup:
        doc, files = rewrite_stream(reference / "rhcos-stream-4.16.json", upstream.url,
                                    {k: payload(k, size) for k in ("kernel", "initramfs", "rootfs")})
        upstream.files.update(files)
        metadata_path = "/streams/rhcos-4.16.json"
        upstream.files[metadata_path] = json.dumps(doc).encode()
        master_ign = tmp_path / "master.ign"
        shutil.copy(reference / "openshift-pointer-master.ign.json", master_ign)
        port = free_port()
        profile: dict[str, Any] = {"stream": "rhcos-4.16", "mode": "install", "install_dev": "/dev/sda",
                                   "ignition": "master.ign"}
        if profile_metal is not None:
            profile["metal"] = profile_metal
        config: dict[str, Any] = {
            "server": {"listen": f"127.0.0.1:{port}", "base_url": f"http://127.0.0.1:{port}"},
            "cache_dir": "cache", "state_dir": "state",
        }
        if metal is not None:
            config["metal"] = metal
        config |= {"streams": {"rhcos-4.16": {"metadata": upstream.url + metadata_path}},
                   "profiles": {"master": profile}, "nodes": nodes}
        return BootSetup(write_config(tmp_path / "bootserver.yaml", config), port, master_ign, doc, files)

    return make
