"""Benchmark: a cold 1 GB artifact requested by 50 clients at once, against one warm download; and
``bootserver sync-images`` against ``curl`` (wall time, peak RSS from ``/usr/bin/time -v``).

Everything runs on 127.0.0.1: a local upstream (benchmarks/upstream.py, sendfile), a
``bootserver serve`` subprocess, and ``curl`` clients (one process each, so the clients are not the
bottleneck): every client must receive exactly the artifact's size (curl fails on a short body), and
the first client's bytes are hashed against the sha256. Prints a Markdown table. Usage:
``.venv/bin/python benchmarks/cold_cache.py [--size-mb 1024] [--clients 50]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    PY,
    Bootserver,
    Upstream,
    bench_stream,
    cpu_seconds,
    curl,
    free_port,
    make_file,
    rmtree,
    run_main,
    sha256_file,
    time_v,
    write_config,
    write_json,
)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=1024, help="rootfs size in MiB (default 1024)")
    ap.add_argument("--clients", type=int, default=50, help="concurrent curl clients (default 50)")
    ap.add_argument("--workers", type=int, default=1, help="bootserver serve --workers N (default 1)")
    args = ap.parse_args()
    size = args.size_mb << 20
    work = Path(tempfile.mkdtemp(prefix="bootserver-bench-"))
    try:
        up_dir = work / "upstream"
        rel = "prod/builds/1.0/x86_64"
        (up_dir / rel).mkdir(parents=True)
        shas = {}
        for kind, n in (("kernel", 1 << 20), ("initramfs", 1 << 20), ("rootfs", size)):
            shas[kind] = make_file(up_dir / rel / f"live-{kind}.x86_64", n)
        srv_port = free_port()
        async with Upstream(up_dir, work / "upstream.log") as up:
            up_url = up.url
            write_json(work / "stream.json", bench_stream(up_url, rel, shas))
            config = write_config(work / "bootserver.yaml", {
                "server": {"listen": f"127.0.0.1:{srv_port}"}, "cache_dir": "cache",
                "streams": {"bench": {"metadata": str(work / "stream.json")}},
                "profiles": {"live": {"stream": "bench", "mode": "live"}}})
            rows = []
            async with Bootserver(config, srv_port, workers=args.workers, log=work / "serve.log") as srv:
                url = f"{srv.url}/artifacts/bench/x86_64/1.0/live-rootfs.x86_64"
                first_out = str(work / "client0.out")
                cpu0 = cpu_seconds(srv.proc.pid)
                t0 = time.monotonic()
                cold = await asyncio.gather(*(curl(url, first_out if i == 0 else "/dev/null")
                                              for i in range(args.clients)))
                cold_wall = time.monotonic() - t0
                cold_cpu = cpu_seconds(srv.proc.pid) - cpu0
                assert all(c[2] == size for c in cold), "short body"
                assert sha256_file(Path(first_out)) == shas["rootfs"], "wrong bytes"
                os.unlink(first_out)
                up_gets = up.gets("live-rootfs")
                warm1 = await curl(url)
                cpu0 = cpu_seconds(srv.proc.pid)
                t0 = time.monotonic()
                await asyncio.gather(*(curl(url) for _ in range(args.clients)))
                warm_wall = time.monotonic() - t0
                warm_cpu = cpu_seconds(srv.proc.pid) - cpu0
            alone = await curl(f"{up_url}/{rel}/live-rootfs.x86_64")
            ttfbs = sorted(c[0] for c in cold)
            rows.append(("cold: upstream GETs of the rootfs for all clients", f"{up_gets}"))
            rows.append((f"cold: {args.clients} clients, wall time until all have the verified {args.size_mb} MiB",
                         f"{cold_wall:.2f} s"))
            rows.append(("cold: time to first byte, median / max",
                         f"{ttfbs[len(ttfbs) // 2]:.3f} s / {ttfbs[-1]:.3f} s"))
            rows.append(("warm: one client alone", f"{warm1[1]:.2f} s ({size / warm1[1] / 1e6:.0f} MB/s)"))
            rows.append((f"warm: {args.clients} clients at once, wall", f"{warm_wall:.2f} s"))
            rows.append(("cold / warm: bootserver CPU seconds (user+sys, every process)",
                         f"{cold_cpu:.2f} s / {warm_cpu:.2f} s"))
            rows.append(("cold wall / one warm download", f"{cold_wall / warm1[1]:.1f}x"))
            rows.append(("cold wall / warm wall with the same clients", f"{cold_wall / warm_wall:.2f}x"))
            rows.append(("reference: one curl straight from the upstream", f"{alone[1]:.2f} s"))
            rmtree(work / "cache")
            wall, rss, rc = time_v([PY, "-m", "bootserver", "sync-images", "--config", str(config)])
            assert rc == 0
            rows.append((f"sync-images, cold cache (3 artifacts, {args.size_mb + 2} MiB): wall / peak RSS",
                         f"{wall:.2f} s / {rss / 1024:.0f} MiB"))
            cwall, crss, crc = time_v(["curl", "-sS", "-o", str(work / "curl.out"),
                                       f"{up_url}/{rel}/live-rootfs.x86_64"])
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
        rmtree(work)


if __name__ == "__main__":
    run_main(main)
