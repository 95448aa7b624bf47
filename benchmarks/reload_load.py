"""Reloads under load (issue 32): wrk on a node's script while a large artifact transfer is in flight
and the config is reloaded N times (nodes added and removed through an included file; SIGHUP as
``systemctl reload`` sends it, every fifth time ``bootserver reload``). Every request must succeed and
the transfer must complete with the right bytes.

Usage: python benchmarks/reload_load.py [--workers 1] [--reloads 20] [--rootfs-mb 512] [--duration 30]
       [--connections 20]

Prints a Markdown table; exits 1 when a request failed, a reload was not applied by every worker, the
transfer was not in flight during every reload, or its bytes differ.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from _common import (
    Bootserver,
    Upstream,
    bench_stream,
    free_port,
    make_file,
    markdown_table,
    rmtree,
    run_cli,
    run_main,
    sha256_file,
    write_config,
    write_json,
)

MAC = "52:54:00:00:00:01"


async def outcome(status_file: Path, sent: float, deadline: float = 30.0) -> dict:
    """The reload outcome the server records (``state_dir/reload.json``) at or after unix time ``sent``,
    polled every 20 ms for at most ``deadline`` seconds (``{}`` when none came)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            doc = json.loads(status_file.read_text())
        except (OSError, ValueError):
            doc = {}
        if doc.get("at", 0) >= sent:
            return doc
        await asyncio.sleep(0.02)
    return {}


async def reloads_ok(admin: str) -> float:
    """``bootserver_config_reloads_total{result="ok"}`` of the server (every worker's)."""
    async with aiohttp.ClientSession() as s, s.get(admin) as r:
        text = await r.text()
    return float(re.search(r'^bootserver_config_reloads_total\{result="ok"\} (\S+)$', text, re.M)[1])  # type: ignore[index]


async def reloads_counted(admin: str, want: int, deadline: float = 30.0) -> bool:
    """Whether the server counts ``want`` successful reloads within ``deadline`` seconds (polled every 20 ms)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if await reloads_ok(admin) >= want:
            return True
        await asyncio.sleep(0.02)
    return False


def wrk_errors(out: str) -> tuple[int, int, int]:
    """``(requests, non-2xx/3xx answers, socket errors)`` from wrk's report."""
    requests = int(re.search(r"(\d+) requests in", out)[1])  # type: ignore[index]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return requests, int(non2xx[1]) if non2xx else 0, sum(map(int, sock.groups())) if sock else 0


async def run(args: argparse.Namespace, tmp: Path) -> int:
    root = tmp / "upstream" / "rel"
    root.mkdir(parents=True)
    sizes = {"kernel": 1 << 20, "initramfs": 1 << 20, "rootfs": args.rootfs_mb << 20}
    shas = {k: make_file(root / f"live-{k}.x86_64", n) for k, n in sizes.items()}
    async with Upstream(tmp / "upstream", tmp / "upstream.log") as up:
        write_json(tmp / "stream.json", bench_stream(up.url, "rel", shas))
        port = free_port()
        config = write_config(tmp / "bootserver.yaml", {
            "server": {"listen": f"127.0.0.1:{port}"}, "cache_dir": "cache", "state_dir": "state",
            "read_through": False,
            "streams": {"bench": {"metadata": str(tmp / "stream.json")}},
            "profiles": {"live": {"stream": "bench", "mode": "live"}},
            "nodes": {"steady": {"profile": "live", "mac": [MAC], "selectable": True}},
            "include": ["nodes.d/*.yaml"]})
        (tmp / "nodes.d").mkdir()
        rc, _, err = await run_cli("sync-images", "--config", str(config), timeout=600)
        if rc != 0:
            print(err, file=sys.stderr)
            return 1
    async with Bootserver(config, port, workers=args.workers, log=tmp / "serve.log") as server:
        url = f"{server.url}/artifacts/bench/x86_64/1.0/live-rootfs.x86_64"
        rate = max(1, (args.rootfs_mb << 20) // (args.duration + 10))  # still in flight when wrk ends
        out = tmp / "rootfs.out"
        transfer = await asyncio.create_subprocess_exec(
            "curl", "-sS", "--fail", "--limit-rate", str(rate), "-o", str(out), url,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wrk = await asyncio.create_subprocess_exec(
            "wrk", f"-t{min(2, args.connections)}", f"-c{args.connections}", f"-d{args.duration}s", "--latency",
            f"{server.url}/boot.ipxe?mac={MAC}", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        reload_seconds, in_flight, applied = [], True, 0
        admin = f"http://127.0.0.1:{port + 1}/metrics"
        t0 = time.monotonic()
        for i in range(args.reloads):
            count = (i % 5) * 10  # 0, 10, 20, 30, 40, 0, ... nodes in the included file: added and removed
            nodes = {f"extra-{j}": {"profile": "live", "mac": [f"52:54:01:00:{j // 256:02x}:{j % 256:02x}"]}
                     for j in range(count)}
            write_config(tmp / "nodes.d" / "extra.yaml", {"nodes": nodes})
            started, sent = time.monotonic(), time.time()
            ok = True
            if i % 5 == 4:  # every fifth through the command, the others as systemctl reload does (SIGHUP)
                rc, outp, err = await run_cli("reload", "--config", str(config), timeout=60)
                ok = rc == 0 and f", {count + 1} node{'s' if count else ''}" in outp
                if rc != 0:
                    print(f"reload {i + 1}: exit {rc}: {err.strip()}", file=sys.stderr)
            else:
                os.kill(int((tmp / "state" / "serve.pid").read_text()), signal.SIGHUP)
            # applied once every worker counted it (and the recorded outcome names the new node count)
            ok = ok and await reloads_counted(admin, (i + 1) * args.workers)
            status = await outcome(tmp / "state" / "reload.json", sent)
            held = f", {count + 1} node{'s' if count else ''}"  # the node count of the recorded outcome
            ok = ok and status.get("result") == "ok" and held in status.get("message", "")
            reload_seconds.append(time.monotonic() - started)
            applied += ok
            in_flight = in_flight and transfer.returncode is None
        reloads_wall = time.monotonic() - t0
        counted = await reloads_ok(admin)
        wrk_out = (await wrk.communicate())[0].decode()
        _, curl_err = await transfer.communicate()
    requests, non2xx, sock = wrk_errors(wrk_out)
    got = sha256_file(out) if out.exists() else "-"
    ok_bytes = transfer.returncode == 0 and got == shas["rootfs"]
    rps = re.search(r"Requests/sec:\s+(\S+)", wrk_out)
    p99 = re.search(r"^\s+99%\s+(\S+)", wrk_out, re.M)
    print(markdown_table(["measure", "value"], [
        ("workers", args.workers), ("reloads (nodes 1, 11, 21, 31, 41, 1, ...)", args.reloads),
        ("reloads applied (counted by every worker, the recorded outcome with the new node count)", applied),
        ("reloads counted by the server (bootserver_config_reloads_total{result=\"ok\"})", f"{counted:g}"),
        ("seconds per reload (median; SIGHUP, every fifth `bootserver reload`, to the recorded outcome)",
         f"{sorted(reload_seconds)[len(reload_seconds) // 2]:.2f}"),
        (f"seconds of the reload phase (within wrk's {args.duration} s)", f"{reloads_wall:.1f}"),
        ("script requests (wrk)", requests), ("script requests/s", rps[1] if rps else "-"),
        ("script p99", p99[1] if p99 else "-"),
        ("failed script requests (non-2xx + socket errors)", non2xx + sock),
        (f"rootfs transfer ({args.rootfs_mb} MiB) in flight during every reload", "yes" if in_flight else "no"),
        ("rootfs transfer complete, sha256 right", "yes" if ok_bytes else f"no ({curl_err.decode().strip()})"),
    ]))
    good = (non2xx + sock == 0 and applied == args.reloads and counted == args.reloads * args.workers
            and in_flight and ok_bytes and requests > 0 and reloads_wall < args.duration)
    if not good:
        print((tmp / "serve.log").read_text()[-3000:], file=sys.stderr)
    return 0 if good else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--reloads", type=int, default=20)
    p.add_argument("--rootfs-mb", type=int, default=512)
    p.add_argument("--duration", type=int, default=30, help="seconds of wrk (the reloads must fit in it)")
    p.add_argument("--connections", type=int, default=20)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-reload-"))
    try:
        return asyncio.run(run(args, tmp))
    finally:
        rmtree(tmp)


if __name__ == "__main__":
    run_main(main)
