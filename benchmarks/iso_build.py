"""Benchmark: how long one node's boot image takes to build (issue 23: under 5 s once the node-independent
parts are cached).

A temporary config with ``--nodes`` nodes, each with its own static network. First one node's image with
an empty cache (the loaders are copied and GRUB is built into ``cache_dir/iso``), then every other node's
image in-process (:func:`bootserver.images.netboot.node_image`, what ``GET /iso/<node>.iso`` runs), then every node's
again (a cache hit), and ``--cli`` nodes through the command line (``bootserver iso NODE``: the same keys
in ``state_dir``, so the image is a cache hit; Python start-up, config load and the state store
included). Prints a Markdown table of seconds (median and max). Usage:
``.venv/bin/python benchmarks/iso_build.py [--nodes 20] [--cli 5]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BOOTSERVER, REFERENCE, rmtree, run_main, write_config

from bootserver.config import load_config
from bootserver.images.netboot import node_image
from bootserver.inventory import inventory
from bootserver.urls import Urls


def config_doc(work: Path, nodes: int) -> dict:
    def node(i: int) -> dict:
        mac = f"52:54:00:00:{i // 256:02x}:{i % 256:02x}"
        return {"profile": "metal", "mac": mac, "network": {
            "interfaces": [{"name": "nic0", "type": "ethernet", "mac-address": mac,
                            "ipv4": {"enabled": True, "address": [{"ip": f"10.1.{i // 250}.{i % 250 + 2}",
                                                                   "prefix-length": 16}]}}],
            "routes": {"config": [{"destination": "0.0.0.0/0", "next-hop-address": "10.1.0.1"}]},
            "dns-resolver": {"config": {"server": ["10.1.0.1"]}}}}

    return {"server": {"base_url": "http://boot.example.net:8080"},
            "cache_dir": str(work / "cache"), "state_dir": str(work / "state"),
            "streams": {"fcos": {"metadata": str(REFERENCE / "fcos-stream-stable.json")}},
            "profiles": {"metal": {"stream": "fcos", "mode": "install", "install_dev": "/dev/sda"}},
            "nodes": {f"node-{i}": node(i) for i in range(nodes)}}


def row(name: str, seconds: list[float]) -> str:
    return f"| {name} | {len(seconds)} | {statistics.median(seconds):.3f} | {max(seconds):.3f} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=20, help="nodes built in-process (default 20)")
    ap.add_argument("--cli", type=int, default=5, help="of them, also through `bootserver iso` (default 5)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-iso-"))
    try:
        path = write_config(work / "bootserver.yaml", config_doc(work, args.nodes))
        config = load_config(path)
        urls = Urls(config)
        names = list(inventory(config).values())
        start = time.perf_counter()
        size = node_image(config, urls, names[0]).size
        cold = time.perf_counter() - start
        warm, hits = [], []
        for name in names[1:]:
            start = time.perf_counter()
            node_image(config, urls, name)
            warm.append(time.perf_counter() - start)
        for name in names:
            start = time.perf_counter()
            node_image(config, urls, name)
            hits.append(time.perf_counter() - start)
        cli = []
        for name in names[:args.cli]:
            start = time.perf_counter()
            subprocess.run([*BOOTSERVER, "iso", name.name, "-o", str(work / f"{name.name}.iso"),
                            "--config", str(path)],
                           check=True, capture_output=True, timeout=120)
            cli.append(time.perf_counter() - start)
        print(f"Image size: {size} bytes\n")
        print("| build | n | median s | max s |\n| --- | --- | --- | --- |")
        print(row("first node, empty cache (loaders copied, GRUB built)", [cold]))
        print(row("one more node, loaders cached (in-process)", warm))
        print(row("a node again, image cached (in-process)", hits))
        print(row("`bootserver iso NODE` (whole command, image cached)", cli))
    finally:
        rmtree(work)


if __name__ == "__main__":
    run_main(main)
