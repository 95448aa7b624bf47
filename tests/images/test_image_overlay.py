"""Per-node images share their base's bytes (issue 31, item 2): a node's image is the base image with
the node's region written over it. Two nodes' images differ only inside the region; the server's image
is byte for byte what ``bootserver iso NODE`` writes; Range reads across the region's edges give the
image's bytes; a further node costs its region on disk (at most 64 KiB) and no new base."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from support.helpers import run_cli, write_config
from support.networks import STATIC
from support.signing import relative

from bootserver.config import load_config
from bootserver.http.app import create_app
from bootserver.images.base import REGION_FILE_SIZE, BaseImage, RegionTooSmall
from bootserver.images.netboot import netboot_base
from bootserver.urls import Urls


def node_network(i: int) -> dict[str, Any]:
    network = copy.deepcopy(STATIC)
    network["interfaces"][0]["mac-address"] = f"52:54:00:00:01:{i:02x}"
    network["interfaces"][0]["ipv4"]["address"][0]["ip"] = f"192.0.2.{10 + i}"
    return network


def doc(reference: Path, tmp_path: Path, nodes: int) -> dict[str, Any]:
    return {
        "server": {"base_url": "http://boot.example.net:8080"},
        "cache_dir": str(tmp_path / "cache"), "state_dir": str(tmp_path / "state"),
        "streams": {"fcos": {"metadata": str(reference / "fcos-stream-stable.json")}},
        "profiles": {"metal": {"stream": "fcos", "mode": "install", "install_dev": "/dev/sda"}},
        "nodes": {f"node-{i}": {"profile": "metal", "mac": f"52:54:00:00:01:{i:02x}", "network": node_network(i)}
                  for i in range(nodes)},
    }


@pytest.fixture
def served(reference: Path, tmp_path: Path):
    """(config path, loaded config, its URLs) of five nodes, with the keys in state_dir."""
    path = write_config(tmp_path / "bootserver.yaml", doc(reference, tmp_path, 5))
    return path, load_config(path)


async def test_two_nodes_differ_only_inside_the_region_and_the_server_sends_what_iso_writes(
        aiohttp_client, served, tmp_path: Path) -> None:
    path, config = served
    images = {}
    for node in ("node-0", "node-1"):
        out = tmp_path / f"{node}.iso"
        rc, _, err = await run_cli("iso", node, "-o", str(out), "--config", str(path))
        assert rc == 0, err
        images[node] = out.read_bytes()
    client = await aiohttp_client(create_app(load_config(path)))  # the keys in state_dir, the same cache
    urls = Urls(config)
    for node, written in images.items():
        r = await client.get(relative(urls.iso(node)))
        assert r.status == 200 and await r.read() == written, node  # byte for byte
    base = netboot_base(config.cache_dir)
    lo, hi = base.offset, base.offset + base.region_size
    a, b = images["node-0"], images["node-1"]
    assert len(a) == len(b) == base.size and base.region_size == 2 * REGION_FILE_SIZE
    assert a[:lo] == b[:lo] and a[hi:] == b[hi:]  # the same outside the region
    assert a[lo:hi] != b[lo:hi]
    assert b"set ${nic}/ip 192.0.2.10 " in a[lo:hi] and b"set ${nic}/ip 192.0.2.11 " in b[lo:hi]
    assert b"net_add_addr bootserver $bootnic 192.0.2.10\n" in a[lo:hi]
    assert base.path.read_bytes()[:lo] == a[:lo] and base.path.read_bytes()[hi:] == a[hi:]


async def test_range_reads_across_the_region_edges(aiohttp_client, served, tmp_path: Path) -> None:
    path, config = served
    client = await aiohttp_client(create_app(load_config(path)))
    url = relative(Urls(config).iso("node-2"))
    r = await client.get(url)
    whole, etag = await r.read(), r.headers["ETag"]
    assert r.headers["Accept-Ranges"] == "bytes" and etag.startswith('"')
    base = netboot_base(config.cache_dir)
    lo, hi, size = base.offset, base.offset + base.region_size, len(whole)
    ranges = [(lo - 100, lo + 99), (lo, lo), (hi - 50, hi + 49), (lo - 1, hi), (0, size - 1), (hi, hi + 10),
              (lo + 5, hi - 5), (size - 10, size - 1)]
    for first, last in ranges:
        r = await client.get(url, headers={"Range": f"bytes={first}-{last}"})
        assert r.status == 206, (first, last)
        assert r.headers["Content-Range"] == f"bytes {first}-{last}/{size}"
        assert await r.read() == whole[first:last + 1], (first, last)
    r = await client.get(url, headers={"Range": f"bytes={lo}-"})  # open end
    assert r.status == 206 and await r.read() == whole[lo:]
    r = await client.get(url, headers={"Range": "bytes=-3000"})  # the last 3000 bytes
    assert r.status == 206 and await r.read() == whole[-3000:]
    r = await client.get(url, headers={"Range": f"bytes={lo}-{size + 100}"})  # clipped to the image
    assert r.status == 206 and r.headers["Content-Range"] == f"bytes {lo}-{size - 1}/{size}"
    for unsatisfiable in (f"bytes={size}-", "bytes=-0"):
        r = await client.get(url, headers={"Range": unsatisfiable})
        assert (r.status, r.headers["Content-Range"]) == (416, f"bytes */{size}"), unsatisfiable
    # RFC 9110 §14.2 (issue 30): another unit, an invalid range and several ranges get the whole image
    for whole_image in ("bytes=5-1", "items=1-2", "bytes=0-1,5-6"):
        r = await client.get(url, headers={"Range": whole_image})
        assert (r.status, await r.read()) == (200, whole), whole_image
    # If-Range: the range only while the image is still the one the client has
    r = await client.get(url, headers={"Range": f"bytes={lo}-{lo + 9}", "If-Range": etag})
    assert r.status == 206 and await r.read() == whole[lo:lo + 10]
    r = await client.get(url, headers={"Range": f"bytes={lo}-{lo + 9}", "If-Range": '"other"'})
    assert r.status == 200 and await r.read() == whole
    r = await client.head(url)
    assert (r.status, int(r.headers["Content-Length"]), r.headers["ETag"]) == (200, size, etag)
    assert await r.read() == b""
    r = await client.head(url, headers={"Range": f"bytes={lo}-{hi}"})
    assert r.status == 206 and int(r.headers["Content-Length"]) == hi - lo + 1


async def test_a_further_node_costs_its_region_and_no_base(aiohttp_client, served) -> None:
    path, config = served
    client = await aiohttp_client(create_app(load_config(path)))
    urls = Urls(config)
    assert (await client.get(relative(urls.iso("node-0")))).status == 200
    iso = config.cache_dir / "iso"
    bases = sorted(p for p in iso.iterdir() if p.name.startswith("netboot-"))
    (base,) = bases
    built = (base / "image.iso").stat().st_mtime_ns
    before = sum(p.stat().st_blocks * 512 for p in iso.rglob("*") if p.is_file())
    for node in ("node-1", "node-2", "node-3", "node-4"):
        assert (await client.get(relative(urls.iso(node)))).status == 200
    after = sum(p.stat().st_blocks * 512 for p in iso.rglob("*") if p.is_file())
    per_node = (after - before) / 4
    assert per_node <= 64 * 1024, f"{per_node:.0f} bytes of disk per further node"
    assert sorted(p for p in iso.iterdir() if p.name.startswith("netboot-")) == bases
    assert (base / "image.iso").stat().st_mtime_ns == built
    assert len(list((iso / "nodes").iterdir())) == 5


def test_a_node_file_larger_than_its_place_is_refused(tmp_path: Path) -> None:
    base = BaseImage(tmp_path / "image.iso", 1 << 20, 65536, ("node/grub.cfg", "node/isolinux.cfg"))
    region = base.region({"node/grub.cfg": "linux x\n", "node/isolinux.cfg": "DEFAULT x\n"}, "n")
    assert region == (b"linux x\n".ljust(REGION_FILE_SIZE, b"\n") + b"DEFAULT x\n".ljust(REGION_FILE_SIZE, b"\n"))
    with pytest.raises(RegionTooSmall, match=f"^node n: /node/grub.cfg of its boot image is {REGION_FILE_SIZE + 1} "
                                             f"bytes, more than the {REGION_FILE_SIZE} its image holds"):
        base.region({"node/grub.cfg": "#" * (REGION_FILE_SIZE + 1), "node/isolinux.cfg": ""}, "n")
