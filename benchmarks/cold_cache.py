"""Benchmark: a cold 1 GB artifact requested by 50 clients at once, against one warm download; and
``bootserver sync-images`` against ``curl`` (wall time, peak RSS from ``/usr/bin/time -v``).

Everything runs on 127.0.0.1: a local upstream (benchmarks/upstream.py, sendfile), a
``bootserver serve`` subprocess, and ``curl`` clients (one process each, so the clients are not the
bottleneck): every client must receive exactly the artifact's size (curl fails on a short body), and
the first client's bytes are hashed against the sha256. Prints a Markdown table. Usage: ``.venv/bin/python benchmarks/cold_cache.py [--size-mb 1024] [--clients 50] [--workers 1]``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp  # noqa: F401  (the bootserver venv; also used by upstream.py)

HERE = Path(__file__).resolve().parent
PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_file(path: Path, size: int) -> str:
    """Write ``size`` bytes of incompressible data; return its sha256."""
    block = os.urandom(1 << 20)
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        i = 0
        while left > 0:
            chunk = (i.to_bytes(8, "big") + block[8:])[:left]
            f.write(chunk)
            h.update(chunk)
            left -= len(chunk)
            i += 1
    return h.hexdigest()


async def wait_http(url: str, deadline: float = 30.0) -> None:
    end = time.monotonic() + deadline
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < end:
            try:
                async with s.get(url) as r:
                    if r.status < 500:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise TimeoutError(url)


async def wait_listeners(port: int, n: int, deadline: float = 30.0) -> None:
    """Wait until ``n`` sockets listen on 127.0.0.1:``port`` (one per ``serve --workers`` worker)."""
    end = time.monotonic() + deadline
    want = f"0100007F:{port:04X}"
    while time.monotonic() < end:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
        if sum(1 for line in lines if line.split()[1] == want and line.split()[3] == "0A") >= n:
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{n} listeners on port {port}")


async def curl(url: str, out: str = "/dev/null") -> tuple[float, float, int]:
    """GET ``url`` with curl; return (time to first byte, total time, bytes). Raises on failure."""
    p = await asyncio.create_subprocess_exec(
        "curl", "-sS", "--fail", "-o", out, "-w", "%{time_starttransfer} %{time_total} %{size_download}", url,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out_b, err_b = await p.communicate()
    if p.returncode != 0:
        raise RuntimeError(f"curl {url}: exit {p.returncode}: {err_b.decode().strip()}")
    ttfb, total, size = out_b.decode().split()
    return float(ttfb), float(total), int(size)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and of its live children (the workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry.name) == pid or int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def time_v(cmd: list[str]) -> tuple[float, int, int]:
    """Run ``cmd`` under /usr/bin/time -v; return (wall seconds, peak RSS KB, exit code)."""
    t0 = time.monotonic()
    p = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    wall = time.monotonic() - t0
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    if p.returncode != 0:
        print(p.stderr[-2000:], file=sys.stderr)
    return wall, int(m[1]) if m else -1, p.returncode


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--workers", type=int, default=1, help="bootserver serve --workers N (default 1)")
    args = ap.parse_args()
    size = args.size_mb << 20
    work = Path(tempfile.mkdtemp(prefix="bootserver-bench-"))
    procs: list[subprocess.Popen] = []
    try:
        up_dir = work / "upstream"
        rel = "prod/builds/1.0/x86_64"
        (up_dir / rel).mkdir(parents=True)
        shas = {}
        for kind, n in (("kernel", 1 << 20), ("initramfs", 1 << 20), ("rootfs", size)):
            shas[kind] = make_file(up_dir / rel / f"live-{kind}.x86_64", n)
        up_port, srv_port = free_port(), free_port()
        up_url = f"http://127.0.0.1:{up_port}"
        doc = {"stream": "bench", "metadata": {"last-modified": "2026-01-01T00:00:00Z"},
               "architectures": {"x86_64": {"artifacts": {"metal": {"release": "1.0", "formats": {"pxe": {
                   k: {"location": f"{up_url}/{rel}/live-{k}.x86_64", "sha256": shas[k]} for k in shas}}}}}}}
        (work / "stream.json").write_text(json.dumps(doc))
        (work / "bootserver.yaml").write_text(
            f"server: {{listen: '127.0.0.1:{srv_port}'}}\ncache_dir: cache\n"
            f"streams: {{bench: {{metadata: {work / 'stream.json'}}}}}\n"
            "profiles: {live: {stream: bench, mode: live}}\n")
        up_log = open(work / "upstream.log", "w")
        procs.append(subprocess.Popen([PY, str(HERE / "upstream.py"), str(up_dir), str(up_port)], stdout=up_log))
        workers = ["--workers", str(args.workers)] if args.workers != 1 else []
        procs.append(subprocess.Popen([PY, "-m", "bootserver", "serve", "--config", str(work / "bootserver.yaml"),
                                       "--log-level", "warning", *workers], stderr=open(work / "serve.log", "w")))
        await wait_http(up_url + "/none")
        srv = f"http://127.0.0.1:{srv_port}"
        await wait_http(srv + "/healthz")
        await wait_listeners(srv_port, args.workers)
        url = f"{srv}/artifacts/bench/x86_64/1.0/live-rootfs.x86_64"
        rows = []
        first_out = str(work / "client0.out")
        server_pid = procs[1].pid
        cpu0 = cpu_seconds(server_pid)
        t0 = time.monotonic()
        cold = await asyncio.gather(*(curl(url, first_out if i == 0 else "/dev/null") for i in range(args.clients)))
        cold_wall = time.monotonic() - t0
        cold_cpu = cpu_seconds(server_pid) - cpu0
        assert all(c[2] == size for c in cold), "short body"
        assert sha256_file(Path(first_out)) == shas["rootfs"], "wrong bytes"
        os.unlink(first_out)
        up_gets = sum(1 for line in (work / "upstream.log").read_text().splitlines() if "live-rootfs" in line)
        warm1 = await curl(url)
        cpu0 = cpu_seconds(server_pid)
        t0 = time.monotonic()
        await asyncio.gather(*(curl(url) for _ in range(args.clients)))
        warm_wall = time.monotonic() - t0
        warm_cpu = cpu_seconds(server_pid) - cpu0
        alone = await curl(f"{up_url}/{rel}/live-rootfs.x86_64")
        ttfbs = sorted(c[0] for c in cold)
        rows.append(("cold: upstream GETs of the rootfs for all clients", f"{up_gets}"))
        rows.append((f"cold: {args.clients} clients, wall time until all have the verified {args.size_mb} MiB",
                     f"{cold_wall:.2f} s"))
        rows.append(("cold: bootserver CPU seconds (user+sys, every process)", f"{cold_cpu:.2f} s"))
        rows.append(("cold: time to first byte, median / max", f"{ttfbs[len(ttfbs) // 2]:.3f} s / {ttfbs[-1]:.3f} s"))
        rows.append(("warm: one client alone", f"{warm1[1]:.2f} s ({size / warm1[1] / 1e6:.0f} MB/s)"))
        rows.append((f"warm: {args.clients} clients at once, wall", f"{warm_wall:.2f} s"))
        rows.append(("warm: bootserver CPU seconds (user+sys, every process)", f"{warm_cpu:.2f} s"))
        rows.append(("cold wall / one warm download", f"{cold_wall / warm1[1]:.1f}x"))
        rows.append(("cold wall / warm wall with the same clients", f"{cold_wall / warm_wall:.2f}x"))
        rows.append(("reference: one curl straight from the upstream", f"{alone[1]:.2f} s"))
        for p in procs[1:]:
            p.terminate()
            p.wait(10)
        procs = procs[:1]
        shutil.rmtree(work / "cache")
        wall, rss, rc = time_v([PY, "-m", "bootserver", "sync-images", "--config", str(work / "bootserver.yaml")])
        assert rc == 0
        rows.append((f"sync-images, cold cache (3 artifacts, {args.size_mb + 2} MiB): wall / peak RSS",
                     f"{wall:.2f} s / {rss / 1024:.0f} MiB"))
        cwall, crss, crc = time_v(["curl", "-sS", "-o", str(work / "curl.out"), f"{up_url}/{rel}/live-rootfs.x86_64"])
        assert crc == 0
        rows.append((f"curl -o file, rootfs only ({args.size_mb} MiB): wall / peak RSS",
                     f"{cwall:.2f} s / {crss / 1024:.0f} MiB"))
        os.unlink(work / "curl.out")
        fwall, _, frc = time_v(["sh", "-c", f"curl -sS -o {work / 'curl.out'} {up_url}/{rel}/live-rootfs.x86_64"
                                f" && sha256sum {work / 'curl.out'} >/dev/null && sync -f {work / 'curl.out'}"])
        assert frc == 0
        rows.append(("curl -o file && sha256sum && sync (same guarantees as sync-images): wall",
                     f"{fwall:.2f} s"))
        print("| measurement | result |\n| --- | --- |")
        for k, v in rows:
            print(f"| {k} | {v} |")
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
