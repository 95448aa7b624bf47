"""The tests' fixtures: per-test user folders, the reference data in tests/data (see its SOURCES.md), the
fake upstreams, a cached kernel, the start of a sync -> serve test and the test client of the test's
``config``. What they are built from lives in ``tests/support/``, which tests import; nothing imports
this file."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import pytest_asyncio
from playwright.async_api import Browser, async_playwright
from support.clients import start_app
from support.helpers import REFERENCE, free_port, write_config
from support.stores import backend, pg  # noqa: F401 - fixtures: the store of each backend, a PostgreSQL cluster
from support.upstreams import FaultyUpstream, Upstream, payload, rewrite_stream, serve_on_loopback
from xdist.scheduler import LoadGroupScheduling

CHROMIUM = "/usr/bin/chromium"

#: ``make test`` runs the suite on two pytest-xdist workers with ``--dist loadgroup`` (docs/testing.md,
#: "Time"): the tests of a group run one after another on one worker, every other test goes to whichever
#: worker is free. A node ID's start -> its group, the first that matches: the whole lives of the stand-in
#: CoreOS (``test_life.py``, ``test_playground.py``: about a third of the boots' time) one after the other
#: on one worker, sharing the stand-in's build and its synced stream (``life_source``, the cache
#: ``standin.standin_dir``); every other QEMU boot (the rest of tests/e2e, a new file there too) on one
#: worker, one machine at a time, sharing the session's guest initramfs and synced cache
#: (tests/e2e/conftest.py) as a serial run does; the automation clients on one, sharing their session's
#: ``serve`` and ansible-test's one copy of the collection (tests/clients/conftest.py,
#: support.automation); the browser tests on one, sharing the session's chromium.
XDIST_GROUPS = {"tests/e2e/test_life.py": "lives", "tests/e2e/test_playground.py": "lives", "tests/e2e/": "boots",
                "tests/clients/": "clients", "tests/http/test_page.py": "browser"}


class _GroupedScheduling(LoadGroupScheduling):
    """xdist's ``loadgroup`` scheduling with the groups of :data:`XDIST_GROUPS` read from each test's node
    ID on the controller. (An ``xdist_group`` mark added at collection is lost with pytest 9.2, whose node
    IDs no longer take xdist's ``@group`` suffix: pytest-xdist issue 1386; a mark a test carries itself
    still counts where it works.)"""

    # xdist's private method this overrides: if a release renames it the groups would be lost in silence
    # (the boots on both workers), so the run stops here instead
    assert hasattr(LoadGroupScheduling, "_split_scope"), "pytest-xdist no longer has LoadGroupScheduling._split_scope"

    def _split_scope(self, nodeid: str) -> str:
        return next((group for prefix, group in XDIST_GROUPS.items() if nodeid.startswith(prefix)),
                    None) or super()._split_scope(nodeid)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadGroupScheduling | None:
    """The scheduler of ``--dist loadgroup``: :class:`_GroupedScheduling` (pytest-xdist's hook)."""
    return _GroupedScheduling(config, log) if config.getvalue("dist") == "loadgroup" else None


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


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    """An :class:`Upstream` on 127.0.0.1 for the test, on its event loop."""
    async with Upstream.serving() as up:
        yield up


@pytest.fixture
async def faulty() -> AsyncIterator[FaultyUpstream]:
    """A :class:`FaultyUpstream` on 127.0.0.1 (its gate is opened at the end)."""
    up = FaultyUpstream()
    async with serve_on_loopback(up.handle) as up.url:
        yield up
        up.gate.set()  # never leave a handler waiting


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def chromium() -> AsyncIterator[Browser]:
    """Debian's chromium driven by Playwright (``executable_path``: Playwright's own browser download
    cannot work here), launched once per session on the first browser test, closed at its end. Tests use
    it through ``browser``."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (.ci/apt-packages.txt)")
    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], timeout=30_000)
        try:
            yield b
        finally:
            await b.close()


@pytest_asyncio.fixture(loop_scope="session")
async def browser(chromium: Browser, request: pytest.FixtureRequest) -> AsyncIterator[Browser]:
    """The session's chromium for one test, which opens its own contexts (``browser.new_context()``: no
    cookies, storage or pages of another test); every context left open is closed after the test.
    Playwright's objects belong to the loop that made them, so the test and the async fixtures that serve
    it during its run (``upstream``, a ``serve``) run on the session's loop:
    ``@pytest.mark.asyncio(loop_scope="session")`` and ``@pytest_asyncio.fixture(loop_scope="session")``
    (tests/http/test_page.py); a test that is not is failed here with that advice."""
    marker = request.node.get_closest_marker("asyncio")
    if marker is None or marker.kwargs.get("loop_scope") != "session":
        pytest.fail("a browser test runs on the session's event loop, as the shared chromium: mark it "
                    '@pytest.mark.asyncio(loop_scope="session")', pytrace=False)
    yield chromium
    for context in chromium.contexts:
        await context.close()


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


@pytest.fixture
async def client(aiohttp_client: Callable[..., Any], config: Any) -> Any:
    """A test client of the test's ``config`` (a fixture the test module declares), with the fixed signer
    and ``client.admin`` for the admin listener: :func:`support.clients.start_app`."""
    return await start_app(aiohttp_client, config)
