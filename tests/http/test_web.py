"""The server through aiohttp's test client: scripts, generic entry, stubs, and artifact serving
(Range, HEAD, ETag, 304), with a cache filled by the real cache writer."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from support.configs import config_doc, load
from support.signing import fixed_signer, relative, signed

from bootserver.config import parse_config
from bootserver.http.app import create_app
from bootserver.urls import CHAIN, REAL_CONFIG, STUB


@pytest.fixture
def config(tmp_path: Path):
    return load(config_doc(nodes={"master-0": {
        "profile": "master", "mac": "52:54:00:12:34:56", "uuid": "0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0",
        "hostname": "m0.example.net", "selectable": True}}), tmp_path)


@pytest.fixture
def cached(config, publish_kernel):
    """A stand-in kernel in the cache: ``(URL path, bytes)``."""
    return publish_kernel(config, 300_000)[:2]




async def test_node_script(client) -> None:
    r = await client.get(signed("/ipxe/master-0", "master-0"))
    assert r.status == 200 and r.content_type == "text/plain"
    text = await r.text()
    assert text.startswith("#!ipxe\n")
    assert "initrd --name main http://boot.example.net:8080/artifacts/rhcos-4.16/" in text


@pytest.mark.parametrize("query", ["mac=52%3A54%3A00%3A12%3A34%3A56", "mac=52:54:00:12:34:56",
                                   "mac=52-54-00-12-34-56",
                                   "mac=52%3a54%3a00%3A12%3A34%3A56".upper().replace("MAC", "mac"),
                                   "uuid=0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "hostname=M0.example.net"])
async def test_generic_entry_selects_the_node(client, query: str) -> None:
    direct = await (await client.get(signed("/ipxe/master-0", "master-0"))).text()
    r = await client.get(f"/boot.ipxe?{query}")
    assert r.status == 200
    assert await r.text() == direct


@pytest.mark.parametrize("path,reason", [
    (signed(CHAIN.path(node="nobody"), "nobody"), "no node 'nobody'"),
    (signed(STUB.path(node="nobody"), "nobody"), "no node 'nobody'"),
    (signed(REAL_CONFIG.path(node="nobody"), "nobody"), "no node 'nobody'"),
])
async def test_unknown_node_is_404_with_reason(client, path: str, reason: str) -> None:
    r = await client.get(path)
    assert r.status == 404
    assert r.content_type == "text/plain"
    text = await r.text()
    assert reason in text and "t.yaml" not in text  # no config file name in a public body


@pytest.mark.parametrize("query,reason", [("?mac=52:54:00:00:00:99", "no node to boot for mac 52:54:00:00:00:99"),
                                          ("", "no selector given")])
async def test_generic_entry_without_discovery_is_404_with_reason(aiohttp_client, tmp_path: Path, query: str,
                                                                  reason: str) -> None:
    config = load(config_doc(server={"discovery": False}, nodes={"master-0": {"profile": "master"}}), tmp_path)
    client = await aiohttp_client(create_app(config, fixed_signer()))
    r = await client.get("/boot.ipxe" + query)
    assert r.status == 404 and r.content_type == "text/plain"
    text = await r.text()
    assert reason in text and "t.yaml" not in text


async def test_stub_and_real_config(client, config) -> None:
    r = await client.get(signed("/ignition/master-0", "master-0"))
    assert r.status == 200 and r.content_type == "application/vnd.coreos.ignition+json"
    stub = json.loads(await r.read())
    r = await client.get(relative(stub["ignition"]["config"]["merge"][0]["source"]))
    body = await r.read()
    assert body == (config.base_dir / "master.ign").read_bytes()
    assert stub["ignition"]["config"]["merge"][0]["verification"]["hash"] == \
        "sha512-" + hashlib.sha512(body).hexdigest()


async def test_artifact_get_head_range_etag(client, cached) -> None:
    path, data = cached
    sha = hashlib.sha256(data).hexdigest()
    r = await client.get(path)
    assert r.status == 200
    assert await r.read() == data
    assert r.headers["Content-Length"] == str(len(data))
    assert r.headers["ETag"] == f'"{sha}"'
    assert "Last-Modified" in r.headers

    r = await client.head(path)
    assert r.status == 200 and r.headers["Content-Length"] == str(len(data))
    assert await r.read() == b""

    r = await client.get(path, headers={"Range": "bytes=1000-1999"})
    assert r.status == 206
    assert r.headers["Content-Range"] == f"bytes 1000-1999/{len(data)}"
    assert await r.read() == data[1000:2000]

    r = await client.get(path, headers={"Range": f"bytes={len(data) - 10}-"})
    assert r.status == 206 and await r.read() == data[-10:]

    r = await client.get(path, headers={"If-None-Match": f'"{sha}"'})
    assert r.status == 304 and r.headers["ETag"] == f'"{sha}"'
    r = await client.get(path, headers={"If-None-Match": '"0000"'})
    assert r.status == 200


@pytest.mark.parametrize("path", [
    "/artifacts/rhcos-4.16/x86_64/416.94.202405291527-0/missing",
    "/artifacts/rhcos-4.16/x86_64/416.94.202405291527-0/.rhcos-416.94.202405291527-0-live-kernel-x86_64.sha256",
    "/artifacts/rhcos-4.16/x86_64/%2e%2e/%2e%2e",
    "/artifacts/..%2f..%2f/x86_64/a/b",
])
async def test_artifact_outside_cache_or_missing_is_404(client, cached, path: str) -> None:
    r = await client.get(path)
    assert r.status == 404


async def test_symlink_out_of_cache_is_not_served(client, cached, config, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    link = config.cache_dir / "artifacts/rhcos-4.16/x86_64/416.94.202405291527-0/evil"
    link.symlink_to(secret)
    r = await client.get("/artifacts/rhcos-4.16/x86_64/416.94.202405291527-0/evil")
    assert r.status == 404


async def test_healthz(client) -> None:
    r = await client.get("/healthz")
    assert r.status == 200


async def test_disk_full_read_through_body_names_no_path_or_size(aiohttp_client, boot_setup, tmp_path: Path,
                                                                 monkeypatch, caplog) -> None:
    """A read-through miss on a full disk: the device operator learns the cache is full; the cache path
    and the byte counts go to the log only."""
    import shutil as real_shutil

    from bootserver.artifacts import upstream
    from bootserver.config import load_config

    setup = boot_setup(200_000, {"m0": {"profile": "master"}})
    pxe = setup.doc["architectures"]["x86_64"]["artifacts"]["metal"]
    release, location = pxe["release"], pxe["formats"]["pxe"]["kernel"]["location"]
    disk_usage = real_shutil.disk_usage
    monkeypatch.setattr(upstream.shutil, "disk_usage", lambda p: disk_usage(p)._replace(free=1000))
    client = await aiohttp_client(create_app(load_config(setup.config), fixed_signer()))
    r = await client.get(f"/artifacts/rhcos-4.16/x86_64/{release}/{location.rsplit('/', 1)[1]}")
    text = await r.text()
    assert r.status == 500 and text == "the server's artifact cache is full; the server log has the details\n"
    assert "more bytes needed, 1000 free" in caplog.text and str(tmp_path / "cache") in caplog.text


async def test_unusable_local_metadata_is_not_called_upstream_nor_named(aiohttp_client, reference: Path,
                                                                        tmp_path: Path, caplog) -> None:
    """Stream metadata from a local file that is not JSON: 502 without the file's path in the body."""
    (tmp_path / "stream.json").write_text("<html>not found</html>")
    config = parse_config({
        "server": {"base_url": "http://boot.example.net:8080"}, "cache_dir": "cache", "state_dir": "state",
        "streams": {"s": {"metadata": "stream.json"}},
        "profiles": {"p": {"stream": "s", "mode": "live"}}, "nodes": {"n0": {"profile": "p"}},
    }, "t.yaml", tmp_path)
    client = await aiohttp_client(create_app(config, fixed_signer()))
    r = await client.get(signed("/ipxe/n0", "n0"))
    text = await r.text()
    assert r.status == 502 and text == "stream metadata unusable; the server log has the details\n"
    assert str(tmp_path) not in text and str(tmp_path / "stream.json") in caplog.text


def newcomer_config(reference: Path, tmp_path: Path, **server: object):
    """The embedded default config, with its FCOS stream read from the saved stable.json (no network)."""
    from bootserver.config import default_document

    doc = default_document()
    doc["streams"]["fcos-stable"]["metadata"] = str(reference / "fcos-stream-stable.json")
    doc |= {"cache_dir": "cache", "state_dir": "state"}
    doc["server"] |= server
    doc["nodes"]["m0"] = {"profile": "fcos-live", "mac": "52:54:00:12:34:56"}  # registered, not selectable
    return parse_config(doc, "<default>", tmp_path)


async def test_embedded_default_boots_any_machine_into_live_fcos(aiohttp_client, reference: Path,
                                                                tmp_path: Path) -> None:
    """The newcomer's first run: any iPXE that chains /boot.ipxe (no selector, an unknown MAC, or a
    registered MAC whose node may not be handed out) gets the live FCOS script of the default node, the
    same answer each time."""
    config = newcomer_config(reference, tmp_path)
    client = await aiohttp_client(create_app(config, fixed_signer()))
    answers = set()
    for query in ("", "?mac=52:54:00:99:99:99", "?mac=52:54:00:12:34:56", "?uuid=0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"):
        r = await client.get("/boot.ipxe" + query)
        assert r.status == 200, query
        answers.add(await r.text())
    (script,) = answers
    assert script.startswith("#!ipxe\n") and "/artifacts/fcos-stable/x86_64/" in script
    assert "ignition.config.url=http://127.0.0.1:8080/ignition/fcos-live?exp=" in script
    assert "coreos.inst" not in script  # live: nothing is installed on a machine that chains it


def test_default_node_is_one_and_live_only(reference: Path, tmp_path: Path) -> None:
    from bootserver.config import default_document
    from bootserver.errors import ConfigError

    doc = default_document()
    doc["streams"]["fcos-stable"]["metadata"] = str(reference / "fcos-stream-stable.json")
    doc["nodes"]["second"] = {"profile": "fcos-live-aarch64", "default": True}
    with pytest.raises(ConfigError, match=r"nodes\.second\.default: node 'fcos-live' is the default already"):
        parse_config(doc, "b.yaml", tmp_path)
    doc["nodes"] = {"d": {"profile": "inst", "default": True}}
    doc["profiles"]["inst"] = {"stream": "fcos-stable", "install_dev": "/dev/sda"}
    with pytest.raises(ConfigError, match=r"nodes\.d\.default: the default node must use a live-mode profile"):
        parse_config(doc, "b.yaml", tmp_path)


async def test_readyz_is_not_ready_without_stream_metadata_and_loads_it(aiohttp_client, reference: Path,
                                                                       tmp_path: Path, upstream,
                                                                       monkeypatch) -> None:
    """/readyz with nothing cached and the stream metadata unreachable is 503 (it was 200 with read-through
    on); it starts loading the metadata, and is 200 once the metadata can be had."""
    import asyncio
    import time

    from bootserver import runtime

    monkeypatch.setattr(runtime, "METADATA_RETRY", 0.0)  # retry on every probe instead of every 30 s
    config = parse_config({
        "server": {"base_url": "http://boot.example.net:8080"}, "cache_dir": "cache", "state_dir": "state",
        "streams": {"s": {"metadata": upstream.url + "/stable.json"}},
        "profiles": {"p": {"stream": "s", "mode": "live"}}}, "t.yaml", tmp_path)
    client = await aiohttp_client(create_app(config, fixed_signer()))

    async def probe_until(status: int, reason: str | None = None) -> dict:
        end = time.monotonic() + 20
        while True:
            r = await client.get("/readyz")
            report = await r.json()
            if r.status == status and (reason is None or report["artifacts"][0].get("reason") == reason):
                return report
            assert time.monotonic() < end, report
            await asyncio.sleep(0.05)  # polling interval, bounded by the deadline

    report = await probe_until(503, "stream metadata could not be loaded; the server log has the details")
    assert report["ready"] is False and report["read_through"] is True
    upstream.files["/stable.json"] = (reference / "fcos-stream-stable.json").read_bytes()
    report = await probe_until(200)
    assert report["ready"] is True and {i["status"] for i in report["artifacts"]} == {"missing"}


async def test_serve_prints_the_line_that_chains_the_default_node(reference: Path, tmp_path: Path) -> None:
    import aiohttp
    from support.helpers import free_port, write_config
    from support.server import ServerProcess

    from bootserver.config import default_document

    port = free_port()
    doc = default_document()
    doc["server"] = {"listen": f"127.0.0.1:{port}"}
    doc["streams"]["fcos-stable"]["metadata"] = str(reference / "fcos-stream-stable.json")
    server = ServerProcess(write_config(tmp_path / "b.yaml", doc | {"cache_dir": "c", "state_dir": "s"}), port)
    async with aiohttp.ClientSession() as session:
        await server.start(session)
        await server.stop()
    assert server.proc is not None
    err = (await server.proc.stderr.read()).decode()  # type: ignore[union-attr]
    assert (f"to boot any machine into node fcos-live (live mode): at its iPXE prompt, chain "
            f"http://127.0.0.1:{port}/boot.ipxe -- that URL reaches this machine only") in err


@pytest.mark.parametrize("how", ["rewritten in place", "replaced (a new file renamed over it)"])
async def test_a_new_release_in_the_metadata_file_is_served_without_a_restart(
        tmp_path: Path, aiohttp_client, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    from support.clients import start_app
    from support.configs import METADATA, STREAM

    from bootserver.artifacts import catalog

    monkeypatch.setattr(catalog, "STAT_REUSE", 0.0)  # look at the file on every request
    meta = tmp_path / "stream.json"
    doc = json.loads(METADATA.read_text())
    meta.write_text(json.dumps(doc))
    cfg = load(config_doc(streams={STREAM: {"metadata": str(meta)}}, nodes={"master-0": {"profile": "master"}}),
               tmp_path)
    client = await start_app(aiohttp_client, cfg)
    old = doc["architectures"]["x86_64"]["artifacts"]["metal"]["release"]
    assert f"/{old}/" in await (await client.get(signed("/ipxe/master-0", "master-0"))).text()
    assert f"/{old}/" in await (await client.get(signed("/ipxe/master-0", "master-0"))).text()  # kept
    # another size too: a rewrite within the file system's mtime granularity keeps the mtime
    doc["architectures"]["x86_64"]["artifacts"]["metal"]["release"] = "416.94.20241201-0"
    if how.startswith("replaced"):
        (tmp_path / "new.json").write_text(json.dumps(doc))
        (tmp_path / "new.json").rename(meta)
    else:
        meta.write_text(json.dumps(doc))
    text = await (await client.get(signed("/ipxe/master-0", "master-0"))).text()
    assert "/416.94.20241201-0/" in text and f"/{old}/" not in text


async def test_an_unexpected_error_is_a_plain_500_with_the_device_headers(
        client, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from bootserver.service import BootService

    async def broken(*args: object, **kwargs: object) -> str:
        raise RuntimeError("a bug")

    monkeypatch.setattr(BootService, "script", broken)  # a fault no real input causes
    r = await client.get(signed("/ipxe/master-0", "master-0"))
    assert r.status == 500 and await r.text() == "internal error; the server log has the details\n"
    assert r.headers["Server"] == "bootserver" and r.headers["X-Content-Type-Options"] == "nosniff"
    assert any("500 unexpected error" in rec.getMessage() and rec.exc_info for rec in caplog.records)
