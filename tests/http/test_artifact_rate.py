"""``server.artifact_rate`` and a profile's ``artifact_rate`` (issue 40): an artifact answer is held to
the rate (within 10 %) on a real connection on 127.0.0.1, per connection (two paced transfers at once
each get the whole rate), and a transfer without a rate beside it is not slowed. Nodes are told apart
by their source address (127.0.0.2, 127.0.0.3: the loopback network), as the timeline attributes an
artifact to the node whose script that address fetched."""

from __future__ import annotations

import asyncio
import socket
import struct
from pathlib import Path

import aiohttp
import pytest
from support.configs import config_doc, load, master_profile, write
from support.helpers import free_port, run_cli
from support.server import ServerProcess
from support.signing import fixed_signer, signed

from bootserver.config import load_config, parse_config
from bootserver.errors import ConfigError
from bootserver.http.app import create_app
from bootserver.values import parse_rate

MAC = "52:54:00:52:07:01"
RATE = 512 << 10  # bytes per second
SIZE = 3 << 19  # the kernel: 3 s at RATE


async def fetch(base: str, source: str, path: str) -> tuple[float, bytes]:
    """GET ``base + path`` from address ``source``: (the rate its body came at, bytes per second; body).
    The rate is taken between the 10th and the 90th percent of the body, so a late start or a late last
    read of a busy test machine does not count (the server and this client share one event loop)."""
    connector = aiohttp.TCPConnector(local_addr=(source, 0))
    async with aiohttp.ClientSession(connector=connector) as session, session.get(base + path) as r:
        assert r.status == 200
        loop = asyncio.get_running_loop()
        total = r.content_length or 0
        marks: list[tuple[float, int]] = []
        body = bytearray()
        async for chunk in r.content.iter_any():
            body += chunk
            marks.append((loop.time(), len(body)))
    (t0, b0), (t1, b1) = (next((t, b) for t, b in marks if b >= share * total) for share in (0.1, 0.9))
    return ((b1 - b0) / (t1 - t0) if t1 > t0 else float("inf")), bytes(body)


async def serve(aiohttp_server, config):
    server = await aiohttp_server(create_app(config, fixed_signer()), host="127.0.0.1")
    return f"http://127.0.0.1:{server.port}"


def held(measured: float, rate: int = RATE) -> bool:
    return 0.9 <= measured / rate <= 1.1


async def test_a_profiles_rate_holds_its_nodes_transfer_and_slows_no_other(aiohttp_server, tmp_path: Path,
                                                                          publish_kernel) -> None:
    config = load(config_doc(
        profiles={"master": master_profile(), "slow-nic": master_profile(artifact_rate=f"{RATE // 1024}Ki")},
        nodes={"slow-0": {"profile": "slow-nic"}, "fast-0": {"profile": "master"}}), tmp_path)
    path, data = publish_kernel(config, SIZE)[:2]
    base = await serve(aiohttp_server, config)
    async with asyncio.timeout(60):
        for node, source in (("slow-0", "127.0.0.2"), ("fast-0", "127.0.0.3")):  # each node's script
            await fetch(base, source, signed(f"/ipxe/{node}", node))
        (slow, slow_body), (fast, fast_body) = await asyncio.gather(
            fetch(base, "127.0.0.2", path), fetch(base, "127.0.0.3", path))
    assert slow_body == fast_body == data
    assert held(slow), f"{slow:.0f} bytes/s, asked {RATE}"
    assert fast > 4 * slow, f"the other transfer came at {fast:.0f} bytes/s beside {slow:.0f}"


async def test_the_servers_rate_holds_each_connection_on_its_own(aiohttp_server, tmp_path: Path,
                                                                publish_kernel) -> None:
    config = load(config_doc(server={"artifact_rate": RATE}), tmp_path)
    path, data = publish_kernel(config, SIZE)[:2]
    base = await serve(aiohttp_server, config)
    async with asyncio.timeout(60):
        both = await asyncio.gather(fetch(base, "127.0.0.2", path), fetch(base, "127.0.0.3", path))
    for measured, body in both:
        assert body == data
        assert held(measured), f"{measured:.0f} bytes/s, asked {RATE} on each connection"


def test_rates_are_written_as_bytes_per_second_with_units(tmp_path: Path) -> None:
    assert [parse_rate(v) for v in (12500000, "100M", "12MB/s", "512Ki", "1Gi")] == [
        12_500_000, 100_000_000, 12_000_000, 512 << 10, 1 << 30]
    base = {"streams": {}, "profiles": {}}
    with pytest.raises(ConfigError, match=r"^t.yaml: server.artifact_rate: .*not a byte rate"):
        parse_config({**base, "server": {"artifact_rate": "fast"}}, "t.yaml", tmp_path)
    with pytest.raises(ConfigError, match=r"^t.yaml: server.artifact_rate: .*at least 1024"):
        parse_config({**base, "server": {"artifact_rate": 10}}, "t.yaml", tmp_path)


async def test_a_client_that_goes_away_from_a_paced_answer_is_a_log_line_and_a_failed_event(
        tmp_path: Path, publish_kernel) -> None:
    """Issue 52: with a rate, a client that went away between two paced steps got asyncio's
    ``RuntimeError: Transport is closing`` out of the next sendfile: a traceback, no access-log line and
    no ``kernel-failed`` event. Now it ends as an unpaced answer's broken connection does. A real
    ``serve`` (aiohttp's test server cancels a handler whose client left, which ``serve`` does not)."""
    port = free_port()
    doc = config_doc(server={"listen": f"127.0.0.1:{port}", "base_url": f"http://127.0.0.1:{port}",
                             "artifact_rate": RATE},
                     nodes={"master-0": {"profile": "master", "mac": [MAC], "selectable": True}})
    path = write(doc, tmp_path)
    kernel, data = publish_kernel(load_config(path), SIZE)[:2]
    server = ServerProcess(path, port)
    async with aiohttp.ClientSession() as session:
        await server.start(session)
        try:
            async with asyncio.timeout(30):
                await fetch(server.url, "127.0.0.2", f"/boot.ipxe?mac={MAC}")  # the node's script
                reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))
                writer.write(f"GET {kernel} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
                got = 0
                while got < 200_000:  # a few paced steps, then gone (reset), as a NIC that stalls for good
                    chunk = await reader.read(65536)
                    assert chunk
                    got += len(chunk)
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
                while "kernel-failed" not in (out := (await run_cli("nodes", "show", "master-0",
                                                                     "--config", str(path)))[1]):
                    await asyncio.sleep(0.1)
        finally:
            await server.stop()
    err = (await server.proc.stderr.read()).decode()  # type: ignore[union-attr]
    assert "Traceback" not in err and "Error handling request" not in err, err
    [line] = [x for x in err.splitlines() if f"GET {kernel} 200" in x]
    assert line.endswith(" incomplete") and 0 < int(line.split(" bytes=")[1].split()[0]) < len(data), line
    assert [x for x in out.splitlines() if "kernel-failed" in x]
