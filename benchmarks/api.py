"""The fleet API measured (issue 49): ``GET /api/v1/nodes`` for N store nodes (default 10,000), a page at a
time (``limit`` 100 and 1000: time per page and bytes per page, every page walked by its
``next_page_token``), ``GET /api/v1/nodes/{name}``; and how long a ``PUT`` through one replica takes to be
served by another (``--replicas 2``: two ``serve`` on one throwaway PostgreSQL, tests/support/pgcluster.py):
the time from the ``PUT``'s answer on replica A to the first ``/boot.ipxe?mac=`` of that node answered
with its script by replica B (polled every 20 ms), median and max over ``--writes`` new nodes.

Usage: ``python benchmarks/api.py [--nodes 10000] [--rounds 3] [--replicas 1|2] [--writes 20]``. Each
``serve`` is a subprocess on 127.0.0.1 (``--log-level warning``), RHCOS 4.16 stream metadata from
``tests/data`` (no artifacts needed); the nodes are written by ``bootserver nodes apply`` (one
transaction) before the server starts; a ``read``/``write`` token from ``bootserver tokens create``.
Times are wall-clock from the request to the last body byte, from one sequential aiohttp client.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml
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
    throwaway_state_store,
    wait_http,
    write_config,
)


def _config(work: Path, store: dict[str, str]) -> Path:
    port = free_port()
    (work / "master.ign").write_bytes((REFERENCE / "openshift-pointer-master.ign.json").read_bytes())
    return write_config(work / "bootserver.yaml", {
        "server": {"listen": f"127.0.0.1:{port}", "admin": {"listen": f"127.0.0.1:{port + 1}"}},
        "cache_dir": "cache", "state_dir": "state", **store,
        "streams": {"rhcos-4.16": {"metadata": str(REFERENCE / "rhcos-stream-4.16.json")}},
        "profiles": {"master": {"stream": "rhcos-4.16", "install_dev": "/dev/sda", "ignition": "master.ign"}},
        "nodes": {}})


def _ports(config: Path) -> tuple[str, str]:
    listen = yaml.safe_load(config.read_text())["server"]
    return "http://" + listen["listen"], "http://" + listen["admin"]["listen"]


async def _cli(*args: str) -> str:
    rc, out, err = await run_cli(*args)
    if rc != 0:
        raise RuntimeError(f"bootserver {' '.join(args[:2])}: {err}")
    return out


async def list_pages(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-api-"))
    proc = None
    try:
        config = _config(work, {})
        nodes = {f"rack{i // 40 + 1:03d}-{i % 40 + 1:02d}": {
            "profile": "master", "mac": [f"52:54:01:{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}"]}
            for i in range(args.nodes)}
        batch = write_config(work / "nodes.yaml", {"nodes": nodes})
        started = time.perf_counter()
        await _cli("nodes", "apply", "-f", str(batch), "--config", str(config))
        applied = time.perf_counter() - started
        token = (await _cli("tokens", "create", "bench", "--scope", "read", "--config", str(config))).strip()
        proc = start([*BOOTSERVER, "serve", "--config", str(config), "--log-level", "warning"], log=work / "serve.log")
        _, admin = _ports(config)
        await wait_http(admin + "/healthz", proc=proc)
        auth = {"Authorization": f"Bearer {token}"}
        rows = []
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120), headers=auth) as http:
            for limit in (100, 1000):
                times: list[float] = []
                sizes: list[int] = []
                for _ in range(args.rounds):
                    seen, page = 0, None
                    while True:
                        t = time.perf_counter()
                        params = {"limit": str(limit), **({"page_token": page} if page else {})}
                        async with http.get(admin + "/api/v1/nodes", params=params) as r:
                            body = await r.read()
                            assert r.status == 200, body[:300]
                        times.append((time.perf_counter() - t) * 1000)
                        sizes.append(len(body))
                        doc = json.loads(body)
                        seen += len(doc["items"])
                        page = doc["next_page_token"]
                        if page is None:
                            break
                    assert seen == args.nodes, seen
                times.sort()
                rows.append((f"GET /api/v1/nodes?limit={limit} (every page)", len(times), f"{median(times):.1f}",
                             f"{times[int(len(times) * 0.95) - 1]:.1f}", f"{times[-1]:.1f}", f"{median(sizes):,.0f}"))
            one: list[float] = []
            for i in range(200):
                t = time.perf_counter()
                async with http.get(f"{admin}/api/v1/nodes/{list(nodes)[i * 37 % len(nodes)]}") as r:
                    body = await r.read()
                one.append((time.perf_counter() - t) * 1000)
            one.sort()
            rows.append(("GET /api/v1/nodes/{name}", len(one), f"{median(one):.1f}",
                         f"{one[int(len(one) * 0.95) - 1]:.1f}", f"{one[-1]:.1f}", f"{len(body):,}"))
        print(f"{args.nodes} store nodes (sqlite; nodes apply of all of them: {applied:.1f} s), serve with one "
              "process\n")
        print(markdown_table(("request", "n", "median ms", "p95 ms", "max ms", "bytes per page"), rows))
    finally:
        stop(proc)
        shutil.rmtree(work, ignore_errors=True)


async def propagation(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-api-"))
    procs: list[Any] = []
    try:
        with throwaway_state_store("postgresql") as store:
            configs = []
            for name in ("a", "b"):
                (work / name).mkdir()
                configs.append(_config(work / name, store))
            token = (await _cli("tokens", "create", "bench", "--scope", "write", "--config",
                                str(configs[0]))).strip()
            for i, config in enumerate(configs):
                procs.append(start([*BOOTSERVER, "serve", "--config", str(config), "--log-level", "warning"],
                                   log=work / f"serve-{i}.log", cwd=config.parent))
            (_, admin_a), (device_b, _) = _ports(configs[0]), _ports(configs[1])
            for (device, _), proc in zip((_ports(c) for c in configs), procs, strict=True):
                await wait_http(device + "/healthz", proc=proc)
            lags: list[float] = []
            auth = {"Authorization": f"Bearer {token}"}
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
                for i in range(args.writes):
                    mac = f"52:54:02:00:00:{i:02x}"
                    async with http.put(f"{admin_a}/api/v1/nodes/prop-{i}", headers=auth,
                                        json={"profile": "master", "mac": [mac], "selectable": True}) as r:
                        assert r.status == 201, await r.text()
                    written = time.perf_counter()
                    while True:
                        async with http.get(f"{device_b}/boot.ipxe", params={"mac": mac}) as r:
                            text = await r.text()
                        if r.status == 200 and "coreos.inst.install_dev" in text:
                            break
                        assert time.perf_counter() - written < 10, (r.status, text[:200])
                        await asyncio.sleep(0.02)  # poll interval, bounded above
                    lags.append(time.perf_counter() - written)
            lags.sort()
            print(markdown_table(("PUT on replica A -> its script served by replica B", "n", "median ms", "max ms"),
                                 [("two serve on one PostgreSQL", len(lags), f"{median(lags) * 1000:.0f}",
                                   f"{lags[-1] * 1000:.0f}")]))
    finally:
        for proc in procs:
            with contextlib.suppress(Exception):
                stop(proc)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=10000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--replicas", type=int, choices=(1, 2), default=1)
    p.add_argument("--writes", type=int, default=20)
    args = p.parse_args()
    asyncio.run(propagation(args) if args.replicas == 2 else list_pages(args))


if __name__ == "__main__":
    run_main(main)
