"""Benchmark (issue 8, target 1): warm-cache artifact throughput of ``bootserver serve`` against nginx.

Both servers serve the same files under the same URL paths (``/artifacts/<stream>/<arch>/<release>/
<file>``) on 127.0.0.1: the cache is filled by a real ``bootserver sync-images`` from a local upstream
(benchmarks/upstream.py), then nginx (Debian's, ``sendfile on``, ``access_log off``, ``worker_processes
auto``, started here with a generated config) gets ``root <cache_dir>``. Every file is read once before
the runs, so both serve from the page cache. Clients are one ``curl -o /dev/null`` process each; every
client must receive exactly the file's size.

Rounds alternate (nginx, bootserver, nginx, bootserver, ...): ``--rounds`` per server and workload.
Aggregate throughput of a round = clients x file size / wall time from the first start to the last
finish, in MB/s (10^6 bytes per second). Reports every round, the medians, the ratio bootserver/nginx
(target >= 0.95) and bootserver's peak RSS (``VmHWM``; sum over its process tree and the largest
single process; target < 150 MB).

Usage: ``.venv/bin/python benchmarks/artifacts.py [--workers 1] [--rounds 3] [--small-mb 100]
[--small-clients 20] [--big-mb 1024] [--big-clients 4]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    MB,
    Bootserver,
    PeakRss,
    Upstream,
    bench_stream,
    curl_many,
    free_port,
    make_file,
    markdown_table,
    median,
    read_through_page_cache,
    rmtree,
    run_cli,
    run_main,
    start,
    stop,
    wait_http,
    write_config,
    write_json,
)

NGINX_CONF = """\
daemon off;
worker_processes auto;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    sendfile on;
    access_log off;
    default_type application/octet-stream;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location / {{ }}
    }}
}}
"""


class Nginx:
    """nginx in the foreground (own process group) with :data:`NGINX_CONF`, serving ``root`` on
    127.0.0.1:``port``. Use ``async with``."""

    def __init__(self, root: Path, tmp: Path, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        self.conf = tmp / "nginx.conf"
        self.conf.write_text(NGINX_CONF.format(tmp=tmp, port=port, root=root))
        self.proc = None

    async def __aenter__(self) -> Nginx:
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        self.proc = start([nginx, "-p", f"{self.tmp}/", "-e", f"{self.tmp}/nginx-error.log", "-c", str(self.conf)],
                          self.tmp / "nginx.out")
        try:
            await wait_http(self.url + "/", proc=self.proc)
        except BaseException:
            stop(self.proc)
            print((self.tmp / "nginx.out").read_text(), file=sys.stderr)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        stop(self.proc)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=1,
                    help="bootserver serve --workers N (passed only when N != 1; default 1)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per server and workload (default 3)")
    ap.add_argument("--small-mb", type=int, default=100, help="size of the small file, MiB (default 100)")
    ap.add_argument("--small-clients", type=int, default=20, help="clients of the small file (default 20)")
    ap.add_argument("--big-mb", type=int, default=1024, help="size of the big file, MiB (default 1024)")
    ap.add_argument("--big-clients", type=int, default=4, help="clients of the big file (default 4)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (prints its path)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bootserver-bench-artifacts-"))
    os.chmod(work, 0o755)  # nginx workers run as another user when started as root
    try:
        rel = "prod/builds/1.0/x86_64"
        up_dir = work / "upstream"
        (up_dir / rel).mkdir(parents=True)
        sizes = {"kernel": args.small_mb << 20, "initramfs": 1 << 20, "rootfs": args.big_mb << 20}
        shas = {k: make_file(up_dir / rel / f"live-{k}.x86_64", n) for k, n in sizes.items()}
        srv_port = free_port()
        async with Upstream(up_dir, work / "upstream.log") as up:
            write_json(work / "stream.json", bench_stream(up.url, rel, shas))
            config = write_config(work / "bootserver.yaml", {
                "server": {"listen": f"127.0.0.1:{srv_port}"},
                "cache_dir": "cache", "state_dir": "state",
                "streams": {"bench": {"metadata": str(work / "stream.json")}},
                "profiles": {"live": {"stream": "bench", "mode": "live"}}})
            rc, _out, err = await run_cli("sync-images", "--config", str(config), timeout=300)
            if rc != 0:
                raise RuntimeError(f"sync-images failed ({rc}): {err}")
        rmtree(up_dir)  # only the cache copy is served (and kept in the page cache)
        art_dir = work / "cache" / "artifacts" / "bench" / "x86_64" / "1.0"
        files = {k: art_dir / f"live-{k}.x86_64" for k in sizes}
        for k, p in files.items():
            assert p.stat().st_size == sizes[k], p
        read_through_page_cache(files.values())
        path = "/artifacts/bench/x86_64/1.0/"
        workloads = [(f"{args.small_clients} x {args.small_mb} MiB", "kernel", args.small_clients),
                     (f"{args.big_clients} x {args.big_mb} MiB", "rootfs", args.big_clients)]
        results: dict[tuple[str, str], list[float]] = {}
        per_round: list[tuple[str, int, str, float, float]] = []
        async with Nginx(work / "cache", work / "nginx", free_port()) as ngx, \
                Bootserver(config, srv_port, workers=args.workers, log=work / "serve.log") as bs:
            with PeakRss(bs.proc.pid) as rss:  # type: ignore[union-attr]
                for name, kind, clients in workloads:
                    size = sizes[kind]
                    for base in (ngx.url, bs.url):  # warm-up: one client each (connection setup, lazy imports)
                        await curl_many([base + path + files[kind].name], expect_size=size)
                    for r in range(1, args.rounds + 1):
                        for server, base in (("nginx", ngx.url), ("bootserver", bs.url)):
                            wall, _ = await curl_many([base + path + files[kind].name] * clients,
                                                      expect_size=size)
                            mbps = clients * size / wall / MB
                            results.setdefault((name, server), []).append(mbps)
                            per_round.append((name, r, server, wall, mbps))
                            print(f"{name} round {r} {server}: {wall:.2f} s, {mbps:.0f} MB/s", file=sys.stderr,
                                  flush=True)
                rss.sample()
        print(f"## Artifacts from a warm cache (bootserver workers: {args.workers}, rounds: {args.rounds})\n")
        print(markdown_table(["workload", "round", "server", "wall (s)", "aggregate MB/s"],
                             [(n, r, s, f"{w:.2f}", f"{m:.0f}") for n, r, s, w, m in per_round]))
        print()
        rows = []
        for name, _, _ in workloads:
            ng, bs_ = median(results[(name, "nginx")]), median(results[(name, "bootserver")])
            rows.append((name, f"{ng:.0f}", f"{bs_:.0f}", f"{bs_ / ng:.2f}", "yes" if bs_ / ng >= 0.95 else "no"))
        print(markdown_table(["workload", "nginx median MB/s", "bootserver median MB/s",
                              "bootserver / nginx", ">= 0.95"], rows))
        print()
        ok = "yes" if rss.total_kb * 1024 < 150 * MB else "no"
        print(markdown_table(["bootserver peak RSS (VmHWM)", "result"], [
            ("sum over the process tree", f"{rss.total_kb / 1024:.0f} MiB ({rss.processes} processes)"),
            ("largest single process", f"{rss.max_kb / 1024:.0f} MiB"),
            ("< 150 MB (sum)", ok)]))
        if args.keep:
            print(f"\nwork folder kept: {work}", file=sys.stderr)
    finally:
        if not args.keep:
            rmtree(work)


if __name__ == "__main__":
    run_main(main)
