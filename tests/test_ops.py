"""Operations through aiohttp's test client: the node timeline as /nodes shows it, boot-once, metrics
and the access log."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from support.clients import start_app
from support.helpers import run_cli, write_config
from support.ops import STREAM, fill_cache, make_config
from support.signing import SigningClient, fixed_signer
from support.upstreams import payload

from bootserver.config import load_config, parse_config
from bootserver.http.app import ADMIN_APP, SERVICE, create_app, runner_kwargs
from bootserver.ignition import sha512_hash
from bootserver.signing import Keyring, Signer, sign
from bootserver.streams import parse_stream


@pytest.fixture
def config(tmp_path: Path):
    return make_config(tmp_path)


async def start(aiohttp_client, config, signer=None):
    """:func:`support.clients.start_app` whose per-node paths are signed as a device has them."""
    return SigningClient(await start_app(aiohttp_client, config, signer))


@pytest.fixture
async def client(client):
    """The ``client`` fixture (conftest) signing per-node paths as a device has them."""
    return SigningClient(client)


async def node(client, name: str) -> dict:
    r = await client.admin.get(f"/nodes/{name}")
    assert r.status == 200
    return await r.json()


async def test_timeline_of_an_install_and_boot_once(client, config, reference: Path) -> None:
    files = fill_cache(config, reference)
    r = await client.admin.get("/nodes")
    assert r.status == 200
    listed = {n["node"]: n for n in (await r.json())["nodes"]}
    assert set(listed) == {"master-0", "master-1", "live-0"}
    assert listed["master-0"]["stage"] == "new" and listed["master-0"]["stage_age"] is None

    r = await client.get("/boot.ipxe?mac=52%3A54%3A00%3A12%3A34%3A56")
    install_script = await r.text()
    assert "coreos.inst.install_dev=/dev/sda" in install_script
    assert (await node(client, "master-0"))["stage"] == "ipxe"
    for kind in ("kernel", "initramfs", "rootfs"):
        path, data = files[kind]
        r = await client.get(path)
        assert await r.read() == data
        assert (await node(client, "master-0"))["stage"] == kind
    assert (await client.get("/ignition/master-0")).status == 200
    info = await node(client, "master-0")
    assert info["stage"] == "installing" and info["profile"] == "master"

    # the installer reboots the machine: with always_pxe it asks for its script again and must boot
    # the disk it just wrote, not install once more
    r = await client.get("/ipxe/master-0")
    localboot = await r.text()
    assert r.status == 200 and localboot.startswith("#!ipxe\n")
    assert localboot.rstrip().endswith("exit") and "kernel" not in localboot
    assert (await client.get("/ignition/master-0/config")).status == 200
    info = await node(client, "master-0")
    assert info["stage"] == "installed" and info["last_event"] == "config"
    again = await (await client.get("/ipxe/master-0")).text()
    assert "(stage installed)" in again and again.rstrip().endswith("exit")

    events = info["events"]
    assert [e["event"] for e in events] == [
        "script", "kernel-requested", "kernel-completed", "initramfs-requested", "initramfs-completed",
        "rootfs-requested", "rootfs-completed", "stub", "localboot", "config"]
    assert all(e["ip"] == "127.0.0.1" for e in events)
    assert [e["at"] for e in events] == sorted(e["at"] for e in events)
    assert events[0]["detail"]["mode"] == "install"
    assert events[6]["detail"] == {"bytes": len(files["rootfs"][1]), "status": 200}
    # nothing leaked to the other nodes
    assert (await node(client, "master-1"))["events"] == []

    # marked for reinstall: the next boot installs again
    client.app[SERVICE].runtime.state.timeline.record("master-0", "reinstall", mode="install")
    assert await (await client.get("/ipxe/master-0")).text() == install_script
    assert (await node(client, "master-0"))["stage"] == "ipxe"


async def test_artifacts_from_unknown_addresses_are_not_attributed(client, config, reference: Path) -> None:
    files = fill_cache(config, reference)
    r = await client.get(files["kernel"][0])
    assert r.status == 200
    body = await (await client.admin.get("/nodes")).json()
    assert {n["stage"] for n in body["nodes"]} == {"new"}


async def test_range_and_revalidation_are_neither_completed_nor_failed(client, config, reference: Path) -> None:
    """A 206 range is part of the artifact (``-partial``), a 304 says the client's copy is current
    (``-unchanged``): neither is the whole file sent, nor a failure."""
    files = fill_cache(config, reference)
    await client.get("/ipxe/master-1")
    r = await client.get(files["rootfs"][0], headers={"Range": "bytes=0-99"})
    assert r.status == 206 and len(await r.read()) == 100
    events = (await node(client, "master-1"))["events"]
    assert [e["event"] for e in events][-2:] == ["rootfs-requested", "rootfs-partial"]
    assert events[-1]["detail"] == {"bytes": 100, "status": 206}
    assert (await node(client, "master-1"))["stage"] == "rootfs"

    r = await client.get(files["kernel"][0])
    validators = {k: v for k, v in (("If-None-Match", r.headers.get("ETag")),
                                    ("If-Modified-Since", r.headers.get("Last-Modified"))) if v}
    assert validators and await r.read() == files["kernel"][1]
    r = await client.get(files["kernel"][0], headers=validators)
    assert r.status == 304
    events = (await node(client, "master-1"))["events"]
    assert [e["event"] for e in events][-2:] == ["kernel-requested", "kernel-unchanged"]
    assert events[-1]["detail"] == {"bytes": 0, "status": 304}


@pytest.mark.parametrize("mode", ["install", "live"])
async def test_a_profile_without_real_config_ends_unconfirmed(aiohttp_client, reference: Path, tmp_path: Path,
                                                              mode: str) -> None:
    """No ``ignition``: the stub is the last request the server sees, so the node must not wait in
    ``installing``/``ignition`` forever; install mode with boot-once then boots the disk."""
    config = make_config(tmp_path, ignition=None, mode=mode,
                         install_dev="/dev/sda" if mode == "install" else None)
    client = await start(aiohttp_client, config)
    await client.get("/ipxe/master-1")
    stub = await client.get("/ignition/master-1")
    assert stub.status == 200 and "merge" not in (await stub.json())["ignition"].get("config", {})
    assert (await node(client, "master-1"))["stage"] == "unconfirmed"
    script = await (await client.get("/ipxe/master-1")).text()
    assert ("kernel " not in script) == (mode == "install")


async def test_live_mode_never_boots_the_disk(client) -> None:
    first = await (await client.get("/ipxe/live-0")).text()
    assert (await client.get("/ignition/live-0")).status == 200
    assert (await node(client, "live-0"))["stage"] == "ignition"
    assert (await client.get("/ignition/live-0/config")).status == 200
    assert (await node(client, "live-0"))["stage"] == "running"
    again = await (await client.get("/ipxe/live-0")).text()
    assert again == first and "ignition.config.url=" in again
    assert (await node(client, "live-0"))["stage"] == "ipxe"


async def test_boot_once_off_reinstalls_on_every_boot(aiohttp_client, reference: Path, tmp_path: Path) -> None:
    config = make_config(tmp_path, boot_once=False)
    client = await start(aiohttp_client, config)
    first = await (await client.get("/ipxe/master-0")).text()
    await client.get("/ignition/master-0")
    await client.get("/ignition/master-0/config")
    assert (await node(client, "master-0"))["stage"] == "installed"
    assert await (await client.get("/ipxe/master-0")).text() == first


def test_boot_once_is_refused_for_live_mode(reference: Path, tmp_path: Path) -> None:
    from bootserver.errors import ConfigError

    with pytest.raises(ConfigError, match=r"profiles\.master\.boot_once: .*only be true in install mode"):
        make_config(tmp_path, mode="live", boot_once=True)


async def test_unknown_node_in_nodes_endpoint_is_404(client) -> None:
    r = await client.admin.get("/nodes/nobody")
    assert r.status == 404 and "no node 'nobody'" in await r.text()


async def test_metrics(client, config, reference: Path) -> None:
    files = fill_cache(config, reference)
    await client.get("/ipxe/master-0")
    await client.get(files["kernel"][0])
    await client.get(files["kernel"][0].replace("kernel", "nothing"))
    await client.get("/ipxe/nobody")
    r = await client.admin.get("/metrics")
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = await r.text()
    lines = set(text.splitlines())
    assert 'bootserver_http_requests_total{method="GET",route="/ipxe/{node}",status="200"} 1.0' in lines
    assert 'bootserver_http_requests_total{method="GET",route="/ipxe/{node}",status="404"} 1.0' in lines
    assert f'bootserver_artifact_bytes_served_total{{kind="kernel"}} {float(len(files["kernel"][1]))}' in lines
    assert 'bootserver_cache_requests_total{result="hit"} 1.0' in lines
    assert 'bootserver_cache_requests_total{result="miss"} 1.0' in lines
    assert 'bootserver_nodes{stage="kernel"} 1.0' in lines
    assert 'bootserver_nodes{stage="new"} 2.0' in lines
    assert "bootserver_downloads_in_flight 0.0" in lines
    assert 'bootserver_upstream_fetches_total{result="ok"} 0.0' in lines
    assert any(line.startswith('bootserver_http_request_duration_seconds_count{route="/ipxe/{node}"}')
               for line in lines)


async def test_upstream_download_is_counted(config, reference: Path, upstream) -> None:
    """Upstream downloads report to the app's metrics (the observer the read-through path passes)."""
    data = payload("kernel", 50_000)
    upstream.files["/k"] = data
    meta = parse_stream((reference / STREAM).read_bytes(), name="rhcos-4.16", source="x",
                        architectures=("x86_64",))
    rel = meta.releases["x86_64"]
    good = rel.kernel.__class__(kind="kernel", url=upstream.url + "/k", sha256=hashlib.sha256(data).hexdigest(),
                                signature=None, filename=rel.kernel.filename)
    bad = rel.kernel.__class__(kind="kernel", url=upstream.url + "/k", sha256="0" * 64, signature=None,
                               filename=rel.kernel.filename)
    app = create_app(config)
    svc = app[SERVICE]
    metrics = svc.runtime.metrics
    async with svc.runtime.upstream as up:
        assert (await up.download(svc.runtime.cache, rel, good, observer=metrics))[0] == len(data)
        with pytest.raises(Exception, match="sha256 mismatch"):
            await up.download(svc.runtime.cache, rel, bad, observer=metrics)
    text = metrics.render().decode()
    assert 'bootserver_upstream_fetches_total{result="ok"} 1.0' in text
    assert 'bootserver_upstream_fetches_total{result="error"} 1.0' in text
    assert f"bootserver_upstream_bytes_total {float(2 * len(data))}" in text
    assert "bootserver_downloads_in_flight 0.0" in text


async def test_access_log_has_route_node_status_bytes_and_no_query(client, caplog) -> None:
    caplog.set_level(logging.INFO, logger="bootserver.access")
    r = await client.get("/boot.ipxe?mac=52:54:00:12:34:56&sig=s3cr3t")
    body = await r.read()
    (rec,) = [r for r in caplog.records if r.name == "bootserver.access"]
    assert (rec.route, rec.node, rec.status, rec.bytes, rec.path) == (
        "/boot.ipxe", "master-0", 200, len(body), "/boot.ipxe")
    assert rec.duration >= 0
    assert "s3cr3t" not in rec.getMessage() and "mac=" not in rec.getMessage()
    assert "node=master-0" in rec.getMessage()


async def test_unusable_timeline_refuses_scripts_but_serves_artifacts(aiohttp_client, reference: Path,
                                                                      tmp_path: Path) -> None:
    """Without its timeline the server cannot tell an installed node from a new one: 503, never a guess."""
    config = make_config(tmp_path)
    config.state_dir.parent.mkdir(parents=True, exist_ok=True)
    config.state_dir.write_text("not a folder")
    files = fill_cache(config, reference)
    client = await start(aiohttp_client, config, fixed_signer())  # signing keys need state_dir too
    r = await client.get("/ipxe/master-0")
    assert r.status == 503 and "node timeline" in await r.text()
    r = await client.get("/ignition/master-0")
    assert r.status == 503
    r = await client.get(files["kernel"][0])
    assert r.status == 200 and await r.read() == files["kernel"][1]


def test_localboot_script_matches_golden_file() -> None:
    import os

    from bootserver.ipxe import render_localboot_script

    script = render_localboot_script("master-0", "installed")
    path = Path(__file__).parent / "golden" / "localboot.ipxe"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(script)
    assert script == path.read_text(), f"script differs from {path}; UPDATE_GOLDEN=1 rewrites it"


async def test_scripts_and_stubs_follow_keys_clock_release_and_config(aiohttp_client, reference: Path,
                                                                      tmp_path: Path) -> None:
    """Scripts and stubs are rendered once and reused: each must still change at once with a key
    rotation, the hour of the signatures' expiry, a new release and a new real config."""
    stream = tmp_path / "stream.json"
    shutil.copy(reference / STREAM, stream)
    (tmp_path / "master.ign").write_bytes((reference / "openshift-pointer-master.ign.json").read_bytes())
    config = parse_config({
        "server": {"base_url": "http://127.0.0.1:8080"}, "cache_dir": "cache", "state_dir": "state",
        "streams": {"rhcos": {"metadata": str(stream)}},
        "profiles": {"p": {"stream": "rhcos", "install_dev": "/dev/sda", "ignition": "master.ign",
                           "boot_once": False}},
        "nodes": {"n0": {"profile": "p"}}}, "t.yaml", tmp_path)
    clock = [1_900_000_000.0]
    client = await start(aiohttp_client, config, Signer(Keyring.load_or_create(config.state_dir),
                                                         now=lambda: clock[0]))

    async def stub_url() -> tuple[str, dict[str, str], str]:
        script = await (await client.get("/ipxe/n0")).text()
        url = re.search(r"coreos\.inst\.ignition_url=(\S+)", script).group(1)
        release = re.search(r"/artifacts/rhcos/x86_64/([^/]+)/", script).group(1)
        return url, {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}, release

    async def merge() -> tuple[dict[str, str], str]:
        stub = await (await client.get("/ignition/n0")).json()
        m = stub["ignition"]["config"]["merge"][0]
        return {k: v[0] for k, v in parse_qs(urlsplit(m["source"]).query).items()}, m["verification"]["hash"]

    url, q, release = await stub_url()
    assert (await stub_url())[0] == url
    mq, mhash = await merge()
    assert mhash == sha512_hash((tmp_path / "master.ign").read_bytes())

    rotated = Keyring.load_or_create(config.state_dir).rotate(grace=3600)
    _url2, q2, _ = await stub_url()
    assert q2["sig"] == sign(rotated.current, "n0", "/ignition/n0", int(q2["exp"])) != q["sig"]
    mq2, _ = await merge()
    assert mq2["sig"] == sign(rotated.current, "n0", "/ignition/n0/config", int(mq2["exp"])) != mq["sig"]

    clock[0] += 2 * 3600
    assert int((await stub_url())[1]["exp"]) == int(q2["exp"]) + 2 * 3600
    assert int((await merge())[0]["exp"]) == int(mq2["exp"]) + 2 * 3600

    shutil.copy(reference / "rhcos-stream-4.10.json", stream)
    assert (await stub_url())[2] not in (release, "")
    (tmp_path / "master.ign").write_bytes(b'{"ignition": {"version": "3.2.0"}}')
    assert (await merge())[1] == sha512_hash(b'{"ignition": {"version": "3.2.0"}}')


#: The first bytes of a TLS 1.2 ClientHello, as a browser or scanner sends to an https:// URL.
CLIENT_HELLO = bytes.fromhex("16030100c4010000c00303") + bytes(32) + b"\x00\x00\x02\x13\x01\x01\x00"


async def raw_exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` to 127.0.0.1:``port`` as is and return everything the server answers until it closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


async def test_malformed_requests_get_400_an_access_line_and_a_count(aiohttp_server, config, caplog) -> None:
    """A TLS ClientHello on the plain port, an unknown method and a 12 KB header: each gets its 400, one
    access line and a count in the metrics, and no traceback in the log (a port scanner must not flood
    the journal)."""
    caplog.set_level(logging.INFO)
    app = create_app(config, fixed_signer())
    server = await aiohttp_server(app, host="127.0.0.1", **runner_kwargs(app))
    admin = await aiohttp_server(app[ADMIN_APP], host="127.0.0.1", **runner_kwargs(app[ADMIN_APP]))
    bad = [CLIENT_HELLO,
           b"BR\x01EW / HTTP/1.1\r\nHost: x\r\n\r\n",
           b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 12 * 1024 + b"\r\n\r\n"]
    for data in bad:
        answer = await raw_exchange(server.port, data)
        assert answer.split(b"\r\n")[0].split(b" ")[1] == b"400", (data[:20], answer[:100])
    assert not [r for r in caplog.records if r.exc_info or "Unhandled exception" in r.getMessage()]
    access = [r for r in caplog.records if r.name == "bootserver.access"]
    assert [(r.status, r.route) for r in access] == [(400, "unmatched")] * 3
    text = (await raw_exchange(admin.port, f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{admin.port}\r\n"
                                           "Connection: close\r\n\r\n".encode())).decode()
    assert 'bootserver_http_requests_total{method="UNKNOWN",route="unmatched",status="400"} 3.0' in text.splitlines()


async def test_nodes_and_metrics_are_on_the_admin_listener_only(client) -> None:
    """Node names, stages and client addresses are not for the device network: /nodes, /nodes/{node}
    and /metrics answer 404 there, like any unknown path; /healthz and /readyz answer on both."""
    for path in ("/nodes", "/nodes/master-0", "/metrics"):
        r = await client.get(path)
        assert r.status == 404, path
        assert (await client.admin.get(path)).status == 200, path
    for path in ("/healthz", "/readyz"):
        assert (await client.get(path)).status == (await client.admin.get(path)).status, path
    assert (await client.admin.get("/ipxe/master-0")).status == 404


def test_default_admin_listener_is_the_next_port_tls_does_not_take(tmp_path: Path) -> None:
    def admin(server: dict) -> str:
        return parse_config({"server": server}, "t.yaml", tmp_path).server.admin_listen

    assert admin({"listen": "0.0.0.0:8080"}) == "127.0.0.1:8081"
    assert admin({"listen": "0.0.0.0:8080", "tls": {"listen": "0.0.0.0:8081"}}) == "127.0.0.1:8082"
    assert admin({"listen": "0.0.0.0:65535"}) == "127.0.0.1:65534"
    assert admin({"listen": "0.0.0.0:8080", "admin": {"listen": "/run/bootserver/admin.sock"}}) == \
        "/run/bootserver/admin.sock"
    with pytest.raises(Exception, match=r"server\.admin\.listen"):
        admin({"listen": "0.0.0.0:8080", "admin": {"listen": "admin.sock"}})


@pytest.mark.parametrize("trusted", [True, False])
async def test_the_timeline_records_the_client_address_resolved_through_trusted_proxies(
        aiohttp_client, reference: Path, tmp_path: Path, trusted: bool) -> None:
    """Behind a trusted reverse proxy (here the test client on 127.0.0.1) the timeline records, and
    artifact attribution matches, the address the proxy forwarded; from a peer that is not a trusted
    proxy ``X-Forwarded-For`` is ignored and the peer's own address is recorded. ``bootserver nodes
    show`` prints what was recorded."""
    doc = {
        "server": {"base_url": "http://127.0.0.1:8080", "trusted_proxies": ["127.0.0.1"] if trusted else []},
        "cache_dir": "cache", "state_dir": "state",
        "streams": {"rhcos-4.16": {"metadata": str(reference / STREAM)}},
        "profiles": {"master": {"stream": "rhcos-4.16", "install_dev": "/dev/sda", "ignition": "master.ign"}},
        "nodes": {"master-0": {"profile": "master"}},
    }
    shutil.copy(reference / "openshift-pointer-master.ign.json", tmp_path / "master.ign")
    path = write_config(tmp_path / "bootserver.yaml", doc)
    config = load_config(path)
    files = fill_cache(config, reference)
    client = await start(aiohttp_client, config, Signer(Keyring.load_or_create(config.state_dir)))
    forwarded = {"X-Forwarded-For": "192.0.2.7, 10.1.2.3"}  # the proxy appended the node's address
    assert (await client.get("/ipxe/master-0", headers=forwarded)).status == 200
    assert (await client.get(files["kernel"][0], headers=forwarded)).status == 200
    assert (await client.get("/ignition/master-0", headers=forwarded)).status == 200
    expected = "10.1.2.3" if trusted else "127.0.0.1"
    events = (await node(client, "master-0"))["events"]
    assert [(e["event"], e["ip"]) for e in events] == [
        ("script", expected), ("kernel-requested", expected), ("kernel-completed", expected), ("stub", expected)]
    await client.app[SERVICE].runtime.drain()
    rc, out, err = await run_cli("nodes", "show", "master-0", "--config", str(path))
    assert rc == 0, err
    assert [line.split()[2:4] for line in out.splitlines()] == [
        ["script", expected], ["kernel-requested", expected], ["kernel-completed", expected], ["stub", expected]]
