"""The served boot image and its GRUB config: ``GET /iso/{node}.iso`` (signed, 403 when tampered, Range
and HEAD as for artifacts, built once per node and inputs, rebuilt when the network or the key changes),
and ``bootserver url NODE --iso``. The GRUB config the image's UEFI boot sources (``GET /grub/{node}``)
is in tests/test_grub.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.helpers import run_cli, write_config
from support.iso import doc
from support.networks import STATIC
from support.signing import fixed_signer, relative, signed

from bootserver.config import load_config, parse_config
from bootserver.http.app import create_app

KEY_B = bytes(range(1, 33))


@pytest.fixture
def config(reference: Path, tmp_path: Path):
    return parse_config(doc(reference), "t.yaml", tmp_path)


async def test_the_image_is_served_signed_with_range_and_head(aiohttp_client, config) -> None:
    client = await aiohttp_client(create_app(config, fixed_signer()))
    r = await client.get(signed("/iso/master-0.iso"))
    assert r.status == 200 and r.content_type == "application/x-iso9660-image"
    image = await r.read()
    assert image[0x8001:0x8006] == b"CD001" and int(r.headers["Content-Length"]) == len(image)
    assert b"set ${nic}/ip 192.0.2.10" in image  # BIOS: iPXE's commands
    assert b"net_add_addr bootserver $bootnic 192.0.2.10" in image  # UEFI: GRUB's
    assert b"(http,boot.example.net:8080)/grub/master-0?exp=" in image
    # BMCs read virtual media in ranges, after a HEAD for the size.
    r = await client.get(signed("/iso/master-0.iso"), headers={"Range": "bytes=32768-32773"})
    assert r.status == 206 and await r.read() == image[32768:32774]
    assert r.headers["Content-Range"] == f"bytes 32768-32773/{len(image)}"
    r = await client.head(signed("/iso/master-0.iso"))
    assert r.status == 200 and int(r.headers["Content-Length"]) == len(image) and await r.read() == b""
    # Signed like every per-node URL: the same 403 without, with a tampered or another node's signature.
    for path in ("/iso/master-0.iso", signed("/iso/master-0.iso").replace("sig=", "sig=A"),
                 signed("/iso/master-0.iso", key=KEY_B),
                 signed("/ipxe/master-0").replace("/ipxe/master-0", "/iso/master-0.iso")):
        r = await client.get(path)
        assert (r.status, await r.text()) == (403, "forbidden\n"), path


async def test_an_image_is_built_once_and_again_when_the_network_or_the_key_changes(
        aiohttp_client, reference: Path, tmp_path: Path) -> None:
    images = tmp_path / "cache" / "iso" / "nodes"
    config = parse_config(doc(reference), "t.yaml", tmp_path)
    client = await aiohttp_client(create_app(config, fixed_signer()))
    first = await (await client.get(signed("/iso/master-0.iso"))).read()
    (built,) = images.iterdir()
    mtime = built.stat().st_mtime_ns
    assert await (await client.get(signed("/iso/master-0.iso"))).read() == first
    assert [p.stat().st_mtime_ns for p in images.iterdir()] == [mtime]  # not built again
    await client.close()
    # another address: a new image replaces the old one
    other = {**STATIC, "interfaces": [{**STATIC["interfaces"][0], "ipv4": {"enabled": True, "address": [
        {"ip": "192.0.2.11", "prefix-length": 24}]}}]}
    client = await aiohttp_client(create_app(parse_config(doc(reference, other), "t.yaml", tmp_path), fixed_signer()))
    second = await (await client.get(signed("/iso/master-0.iso"))).read()
    assert b"set ${nic}/ip 192.0.2.11" in second and b"192.0.2.10" not in second
    assert [p.name for p in images.iterdir()] != [built.name] and len(list(images.iterdir())) == 1
    await client.close()
    # another signing key (keys rotate): the image's URLs are signed again
    client = await aiohttp_client(create_app(parse_config(doc(reference, other), "t.yaml", tmp_path),
                                             fixed_signer(key=KEY_B)))
    third = await (await client.get(signed("/iso/master-0.iso", key=KEY_B))).read()
    assert third != second
    assert len(list(images.iterdir())) == 1


async def test_url_iso_prints_a_url_the_server_accepts(aiohttp_client, reference: Path, tmp_path: Path) -> None:
    path = write_config(tmp_path / "bootserver.yaml", {**doc(reference), "cache_dir": str(tmp_path / "cache"),
                                                       "state_dir": str(tmp_path / "state")})
    rc, out, err = await run_cli("url", "master-0", "--iso", "--config", str(path))
    assert rc == 0, err
    (url,) = out.splitlines()
    assert url.startswith("http://boot.example.net:8080/iso/master-0.iso?exp=") and "&sig=" in url
    assert err.startswith("bootserver: master-0: this URL expires ")
    client = await aiohttp_client(create_app(load_config(path)))  # the keys in state_dir
    r = await client.get(relative(url))
    assert r.status == 200 and (await r.read())[0x8001:0x8006] == b"CD001"


async def test_a_node_whose_image_cannot_be_built_is_500_without_internals(aiohttp_client, reference: Path,
                                                                          tmp_path: Path) -> None:
    v6 = {"interfaces": [{"name": "nic0", "type": "ethernet", "mac-address": "52:54:00:00:00:01",
                          "ipv6": {"enabled": True, "address": [{"ip": "2001:db8::5", "prefix-length": 64}]}}]}
    client = await aiohttp_client(create_app(parse_config(doc(reference, v6), "t.yaml", tmp_path), fixed_signer()))
    r = await client.get(signed("/iso/master-0.iso"))
    assert (r.status, await r.text()) == (500, "node master-0: its boot image cannot be built from its "
                                               "settings; the server log has the details\n")
    images = tmp_path / "cache" / "iso" / "nodes"
    assert not images.exists() or not list(images.iterdir())  # nothing half-written
