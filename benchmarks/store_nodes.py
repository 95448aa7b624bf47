"""Benchmark (issue 48 item 6): 10,000 nodes in the state store.

On a throwaway PostgreSQL cluster (tests/support/pgcluster.py, ``fsync=off``) and two replica configs
(RHCOS 4.16 stream metadata from ``tests/data``, one live profile, no file nodes):

1. ``bootserver nodes apply -f FILE`` of ``--nodes`` nodes in one file (one transaction): wall time of
   the command (its Python start-up included) and of the store's write alone, as the command prints;
2. ``bootserver serve`` of replica B with those nodes: start-up time (from the command to ``/healthz``
   answering 200) and peak memory (``VmHWM`` of its process tree, :class:`_common.PeakRss`);
3. replica A's ``serve`` too, then ``--writes`` times: ``bootserver nodes apply`` of one new node
   through A's config, and the time from the command's return to replica B answering that node's
   script (``GET /boot.ipxe?mac=...``, polled every 10 ms): median and max. With ``--since-start`` the
   time counts from before the command instead (its Python start-up, about a second, included).

Usage: ``.venv/bin/python benchmarks/store_nodes.py [--nodes 10000] [--writes 20] [--state-store
postgresql|sqlite]`` (sqlite: both replicas are one machine's, sharing ``state_dir``: only B serves).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import PY, REFERENCE, Bootserver, PeakRss, run_main, throwaway_state_store, write_json

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.helpers import free_port


def config(folder: Path, port: int, store: dict[str, str], state_dir: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return write_json(folder / "bootserver.yaml", {  # JSON is YAML
        "server": {"listen": f"127.0.0.1:{port}", "admin": {"listen": f"127.0.0.1:{free_port()}"}},
        "cache_dir": str(folder / "cache"), "state_dir": str(state_dir), "read_through": False, **store,
        "streams": {"rhcos": {"metadata": str(REFERENCE / "rhcos-stream-4.16.json")}},
        "profiles": {"live": {"stream": "rhcos", "mode": "live"}},
    })


def mac(i: int) -> str:
    return f"52:54:{(i >> 24) & 255:02x}:{(i >> 16) & 255:02x}:{(i >> 8) & 255:02x}:{i & 255:02x}"


def nodes_yaml(first: int, count: int) -> str:
    return "nodes:\n" + "".join(f'  n{i:06d}: {{profile: live, mac: ["{mac(i)}"], addresses: [127.0.0.1]}}\n'
                                for i in range(first, first + count))


def cli(*args: str, stdin: str | None = None) -> tuple[float, str]:
    start = time.monotonic()
    p = subprocess.run([PY, "-m", "bootserver", *args], input=stdin, capture_output=True, text=True, timeout=600)
    took = time.monotonic() - start
    if p.returncode != 0:
        raise SystemExit(f"bootserver {' '.join(args)}: {p.stderr.strip()}")
    return took, p.stdout


def served(url: str, i: int) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/boot.ipxe?mac={mac(i)}", timeout=5) as r:
            return f"node n{i:06d}" in r.read().decode()
    except OSError:
        return False


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--writes", type=int, default=20)
    ap.add_argument("--state-store", choices=["postgresql", "sqlite"], default="postgresql")
    ap.add_argument("--since-start", action="store_true", help="time a write from before its command")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp, throwaway_state_store(args.state_store) as store:
        root = Path(tmp)
        shared = root / "state"
        pa, pb = free_port(), free_port()
        a = config(root / "a", pa, store, shared if not store else root / "a" / "state")
        b = config(root / "b", pb, store, shared if not store else root / "b" / "state")
        cli("db", "migrate", "--config", str(a))
        took, out = cli("nodes", "apply", "-f", "-", "--config", str(a), stdin=nodes_yaml(0, args.nodes))
        assert out.count(" created\n") == args.nodes, out[-300:]
        print(f"nodes apply of {args.nodes} nodes in one file: {took:.2f} s (the command, start-up included)")

        start = time.monotonic()
        async with Bootserver(b, pb, log=root / "b.log", log_level="info") as server_b:
            up = time.monotonic() - start
            assert server_b.proc is not None
            with PeakRss(server_b.proc.pid) as rss:
                assert served(server_b.url, args.nodes - 1)
                rss.sample()
            print(f"serve with {args.nodes} store nodes: up in {up:.2f} s, peak RSS {rss.total_kb / 1024:.0f} MiB "
                  f"({rss.processes} processes)")
            async with Bootserver(a, pa, log=root / "a.log", log_level="info") if store else _nothing():
                times = []
                for w in range(args.writes):
                    i = args.nodes + w
                    before = time.monotonic()
                    cli("nodes", "apply", "-f", "-", "--config", str(a), stdin=nodes_yaml(i, 1))
                    after = time.monotonic()
                    while not served(server_b.url, i):
                        if time.monotonic() - after > 30:
                            raise SystemExit(f"n{i:06d} not served by B within 30 s")
                        await asyncio.sleep(0.01)
                    times.append(time.monotonic() - (before if args.since_start else after))
                print(f"nodes apply of one node -> served by replica B, over {args.writes} writes "
                      f"({'from before the command' if args.since_start else 'from the command returned'}): "
                      f"median {statistics.median(times):.2f} s, max {max(times):.2f} s")


class _nothing:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    run_main(main)
