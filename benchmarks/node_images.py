"""Benchmark: per-node boot images share their release's bytes (issue 31, item 2). Goals: at most 64 KiB
of disk per further node, a further node's first bytes within 50 ms, and a node's image byte for byte
what ``bootserver iso NODE`` writes.

A real ``bootserver serve`` on 127.0.0.1 with ``--nodes`` nodes (each its own static network, so each
its own region). The first node's ``GET /iso/<node>.iso`` builds the base (loaders, one xorriso run);
every further node's first GET makes only its region. Measured per node: time to the first body byte
and to the last (aiohttp client), the disk the cache's ``iso/`` folder grew by (``st_blocks``), and
whether the bytes equal ``bootserver iso NODE``'s file (for ``--cli`` of them). Prints Markdown.
Usage: ``.venv/bin/python benchmarks/node_images.py [--nodes 50] [--cli 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BOOTSERVER, Bootserver, free_port, markdown_table, rmtree, run_main, write_config
from iso_build import config_doc


def disk(folder: Path) -> int:
    """Bytes of disk the files under ``folder`` take (allocated blocks)."""
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


async def fetch(session: aiohttp.ClientSession, url: str) -> tuple[float, float, bytes]:
    """(seconds to the first body byte, seconds to the last, the body) of one GET."""
    start = time.perf_counter()
    async with session.get(url) as r:
        r.raise_for_status()
        first = await r.content.readany()
        ttfb = time.perf_counter() - start
        rest = await r.read()
    return ttfb, time.perf_counter() - start, first + rest


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=50, help="nodes (default 50)")
    ap.add_argument("--cli", type=int, default=3, help="of them, compared with `bootserver iso` (default 3)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-node-images-"))
    try:
        port = free_port()
        doc = config_doc(work, args.nodes)
        doc["server"] |= {"listen": f"127.0.0.1:{port}", "base_url": f"http://127.0.0.1:{port}"}
        config = write_config(work / "bootserver.yaml", doc)
        names = list(doc["nodes"])
        urls = {}
        for name in names:
            p = subprocess.run([*BOOTSERVER, "url", name, "--iso", "--config", str(config)], capture_output=True,
                               text=True, check=True, timeout=120)
            urls[name] = p.stdout.strip()
        iso = work / "cache" / "iso"
        ttfbs: list[float] = []
        totals: list[float] = []
        per_node: list[int] = []
        async with Bootserver(config, port), aiohttp.ClientSession() as session:
            first_ttfb, first_total, body = await fetch(session, urls[names[0]])
            size = len(body)
            base_disk = disk(iso)
            for name in names[1:]:
                before = disk(iso)
                ttfb, total, _ = await fetch(session, urls[name])
                ttfbs.append(ttfb * 1000)
                totals.append(total * 1000)
                per_node.append(disk(iso) - before)
            again = [(await fetch(session, urls[name]))[0] * 1000 for name in names[1:]]
            equal = 0
            for name in names[:args.cli]:
                out = work / f"{name}.iso"
                subprocess.run([*BOOTSERVER, "iso", name, "-o", str(out), "--config", str(config)], check=True,
                               capture_output=True, timeout=120)
                equal += out.read_bytes() == (await fetch(session, urls[name]))[2]
        rows = [
            ("first node (base built: loaders, xorriso)", 1, f"{first_ttfb * 1000:.1f}", f"{first_total * 1000:.1f}",
             f"{base_disk}"),
            ("a further node (its region only)", len(ttfbs), f"{statistics.median(ttfbs):.1f} / {max(ttfbs):.1f}",
             f"{statistics.median(totals):.1f} / {max(totals):.1f}",
             f"{statistics.median(per_node):.0f} / {max(per_node)}"),
            ("a node again (region cached)", len(again), f"{statistics.median(again):.1f} / {max(again):.1f}", "-",
             "0"),
        ]
        print(f"Image size: {size} bytes; {args.nodes} nodes; `bootserver iso NODE` byte for byte equal to the "
              f"served image: {equal} of {args.cli}\n")
        print(markdown_table(["GET /iso/NODE.iso", "n", "first byte ms (median / max)", "whole image ms (median / max)",
                              "disk bytes (median / max per node)"], rows))
        print(f"\nDisk of {args.nodes} nodes' images: {disk(iso)} bytes (base and loaders {base_disk}, "
              f"regions {disk(iso / 'nodes')})")
    finally:
        rmtree(work)


if __name__ == "__main__":
    run_main(main)
