"""The live page with a big fleet (issue 21): ``GET /`` of the admin listener with N nodes in the
timeline (default 1,000, every one with a whole install's history), next to ``GET /nodes`` (the JSON of
the same rows) and a node's page; and how long a recorded event takes to reach a listener of
``/ui/events`` (the page's live updates).

Usage: ``python benchmarks/page.py [--nodes 1000] [--requests 200] [--events 20]``. One ``bootserver serve``
(subprocess, 127.0.0.1, ``--log-level warning``) on a config of N nodes in one install profile (RHCOS
4.16 stream metadata from ``tests/data``, no artifacts needed), its sqlite timeline written beforehand.
Requests are sequential from one aiohttp client after 10 warm-up requests; times are wall-clock from
request to the last body byte (ms). The event latency: an SSE client listens; the script of a node
is fetched (stage ``ipxe``), and the time until that node's ``node`` event arrives is taken.
Target: ``GET /`` under 50 ms with 1,000 nodes; a live update within 2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time
from pathlib import Path

import aiohttp
from _common import (
    BOOTSERVER,
    REFERENCE,
    free_port,
    markdown_table,
    median,
    run_cli,
    run_main,
    start,
    stop,
    wait_http,
    write_config,
)

from bootserver.state.sqlite_timeline import Timeline
from bootserver.timeline import Record

EVENTS = ("script", "kernel-requested", "kernel-completed", "initramfs-requested", "initramfs-completed",
          "rootfs-requested", "rootfs-completed", "stub", "config", "checkin")


def seed(state_dir: Path, nodes: list[str]) -> int:
    """Every node: a whole install's events, a minute apart at most, the last ones an hour ago; one in
    ten stopped earlier (in some stage of the boot), so every stage has rows. Returns the events."""
    tl = Timeline(state_dir)
    t0 = time.time() - 3600
    records = []
    for i, node in enumerate(nodes):
        upto = len(EVENTS) if i % 10 else 1 + i % len(EVENTS)
        records += [Record(node, e, "install", t0 + i * 0.5 + k * 30, f"10.70.{i // 250}.{i % 250}")
                    for k, e in enumerate(EVENTS[:upto])]
    for at in range(0, len(records), 5000):
        tl.record_many(records[at:at + 5000])
    tl.close()
    return len(records)


async def timed_gets(http: aiohttp.ClientSession, url: str, n: int) -> tuple[list[float], int]:
    times, size = [], 0
    for i in range(n + 10):
        started = time.perf_counter()
        async with http.get(url) as r:
            body = await r.read()
            assert r.status == 200, (url, r.status)
        if i >= 10:
            times.append((time.perf_counter() - started) * 1000)
            size = len(body)
    return times, size


async def event_latency(http: aiohttp.ClientSession, admin: str, config: Path, nodes: list[str], n: int) -> list[float]:
    """Seconds from a script request's answer to its ``node`` event on ``/ui/events``, ``n`` times."""
    latencies = []
    async with http.get(admin + "/ui/events", timeout=aiohttp.ClientTimeout(total=120)) as stream:
        assert stream.status == 200
        await stream.content.readline()  # retry:
        await asyncio.sleep(1.5)  # the hub reads the fleet once when the first listener comes (not timed)
        for node in nodes[:n]:
            _, out, _ = await run_cli("url", node, "--config", str(config))
            async with http.get(out.splitlines()[0]) as r:
                assert r.status == 200
            answered = time.perf_counter()
            while True:
                line = (await asyncio.wait_for(stream.content.readline(), 10)).decode()
                if line.startswith("data: ") and json.loads(line[6:]).get("node") == node:
                    latencies.append(time.perf_counter() - answered)
                    break
    return latencies


async def run(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-page-"))
    proc = None
    try:
        port = free_port()
        nodes = [f"rack{i // 40 + 1:02d}-{i % 40 + 1:02d}" for i in range(args.nodes)]
        (work / "master.ign").write_bytes((REFERENCE / "openshift-pointer-master.ign.json").read_bytes())
        config = write_config(work / "bootserver.yaml", {
            "server": {"listen": f"127.0.0.1:{port}"}, "cache_dir": "cache", "state_dir": "state",
            "streams": {"rhcos-4.16": {"metadata": str(REFERENCE / "rhcos-stream-4.16.json")}},
            "profiles": {"master": {"stream": "rhcos-4.16", "install_dev": "/dev/sda", "ignition": "master.ign"}},
            "nodes": {n: {"profile": "master", "mac": [f"52:54:00:00:{i >> 8 & 255:02x}:{i & 255:02x}"]}
                      for i, n in enumerate(nodes)}})
        history = seed(work / "state", nodes)
        proc = start([*BOOTSERVER, "serve", "--config", str(config), "--log-level", "warning"], log=work / "serve.log")
        admin = f"http://127.0.0.1:{port + 1}"
        await wait_http(admin + "/healthz", proc=proc)
        rows = []
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            for label, path in (("GET / (the fleet page)", "/"), ("GET /nodes (JSON)", "/nodes"),
                                (f"GET /ui/nodes/{nodes[1]} (a node's page)", f"/ui/nodes/{nodes[1]}")):
                times, size = await timed_gets(http, admin + path, args.requests)
                times.sort()
                rows.append((label, len(times), f"{median(times):.1f}", f"{times[int(len(times) * 0.95) - 1]:.1f}",
                             f"{times[-1]:.1f}", size))
            latencies = await event_latency(http, admin, config, nodes, args.events)
        print(f"{args.nodes} nodes, {history} events in their history, serve with one process\n")
        print(markdown_table(("request", "n", "median ms", "p95 ms", "max ms", "body bytes"), rows))
        latencies.sort()
        print()
        print(markdown_table(("live update (script answered -> its SSE event)", "n", "median ms", "max ms"),
                             [("/ui/events", len(latencies), f"{median(latencies) * 1000:.0f}",
                               f"{latencies[-1] * 1000:.0f}")]))
    finally:
        stop(proc)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--events", type=int, default=20)
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    run_main(main)
