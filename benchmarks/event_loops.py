"""Benchmark (issue 40): asyncio's default event loop against uvloop's, under the two loads of a boot
server, on the same bare aiohttp app (``benchmarks/bare_boot.py``, the floor of ``boot_storm.py --floor``).

Each round starts, for each loop in turn (asyncio first in odd rounds, uvloop first in even ones), a
fresh ``bare_boot.py --loop LOOP`` on 127.0.0.1 and measures on it, one after the other:

- **cold storm**: ``--nodes`` machines powered on at once with ``boot_storm.py``'s client (iPXE's,
  Ignition's and the check-in unit's rules, each machine on its own source address and connection:
  script, kernel, initramfs, stub, real config, check-in; 64 KiB artifacts, hashes checked), on the
  fresh server; reported: machines booted and failed, the last ``up``, server CPU per boot (ms);
- **downloads**: ``--clients`` ``curl -o /dev/null`` processes at once, each GETting one ``--size-mb``
  MiB file from the same app (aiohttp's ``FileResponse``: ``loop.sendfile``, the kernel's sendfile, on
  asyncio's loop; uvloop has no ``loop.sendfile`` (MagicStack/uvloop#228), so aiohttp falls back to
  reads in the default executor and writes); the file is read once before each measure, so it comes
  from the page cache; every client must get exactly the file's size. Reported: server CPU seconds per
  GiB served and aggregate MB/s (clients x size / wall until the last finished; MB = 10^6 bytes).

Server CPU is user + system of the server's process and its threads (``/proc/<pid>/stat``,
``_common.cpu_seconds``), read before and after each measure. Printed: a Markdown table per measure
with every round and the medians, and uvloop / asyncio of each round and of the medians (below 1:
uvloop spends less CPU, or moves more MB/s).

Usage: ``.venv/bin/python benchmarks/event_loops.py [--rounds 3] [--nodes 2000] [--clients 4]
[--size-mb 1024]``. Needs the ``bench`` extra (``make bench-deps``: uvloop) and ``curl``; without uvloop:
exit 2 with one line. Exit 1 when a machine failed to boot or a download failed (the tables are printed
first).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    REFERENCE,
    BareBoot,
    cpu_seconds,
    curl_many,
    make_file,
    markdown_table,
    median,
    read_through_page_cache,
    rmtree,
    run_main,
)
from boot_storm import MACHINES_PER_CLIENT, SERVER_KEEPALIVE, storm_phases

LOOPS = ("asyncio", "uvloop")
#: The storm's artifacts (kernel, initramfs, rootfs), as ``boot_storm.py``'s default.
ARTIFACT_KB = 64
#: The downloads' file, beside the storm's artifacts in the bare app's folder.
BIG = "big.bin"
GIB = 1 << 30


@dataclass
class Round:
    """One loop's measures in one round: the cold storm (machines booted, failed, last up in s, server
    CPU s) and the downloads (bytes served, wall s, server CPU s; ``None`` when they failed)."""

    loop: str
    round: int
    nodes: int
    booted: int = 0
    failed: int = 0
    last_up: float = 0.0
    storm_cpu: float = 0.0
    served: int = 0
    wall: float = 0.0
    download_cpu: float = 0.0
    error: str | None = None

    @property
    def cpu_ms_per_boot(self) -> float:
        return 1000 * self.storm_cpu / self.nodes

    @property
    def cpu_per_gib(self) -> float:
        return self.download_cpu / (self.served / GIB) if self.served else float("nan")

    @property
    def mb_per_s(self) -> float:
        return self.served / self.wall / 1e6 if self.wall else float("nan")


async def one_loop(args: argparse.Namespace, storm_args: argparse.Namespace, work: Path, loop: str,
                   rnd: int, folder: Path, shas: dict[str, str]) -> Round:
    """A fresh ``bare_boot.py --loop LOOP`` serving ``folder``: a cold storm, then the downloads."""
    res = Round(loop, rnd, args.nodes)
    async with BareBoot(folder, REFERENCE / "openshift-pointer-master.ign.json", work / f"bare-{loop}-{rnd}.log",
                        loop=loop, keepalive=SERVER_KEEPALIVE) as bare:
        pid = bare.proc.pid  # type: ignore[union-attr]
        urls = [f"{bare.url}/ipxe/node-{i:05d}" for i in range(args.nodes)]
        (storm,) = await storm_phases(storm_args, f"bare aiohttp ({loop})", rnd, [pid], 1, urls, shas, None)
        res.booted, res.failed = storm.storm.booted, sum(storm.storm.failed.values())
        res.last_up, res.storm_cpu = storm.storm.last_up, storm.server_cpu
        size = args.size_mb << 20
        read_through_page_cache([folder / BIG])
        cpu0 = cpu_seconds(pid)
        try:
            res.wall, _ = await curl_many([f"{bare.url}/artifacts/bench/x86_64/1.0/{BIG}"] * args.clients,
                                          expect_size=size)
            res.served = args.clients * size
        except RuntimeError as e:
            res.error = str(e).splitlines()[0]
        res.download_cpu = cpu_seconds(pid) - cpu0
    print(f"round {rnd} {loop}: downloads {res.served / 1e6:.0f} MB in {res.wall:.2f} s, server CPU "
          f"{res.download_cpu:.2f} s{'; ' + res.error if res.error else ''}", file=sys.stderr, flush=True)
    return res


def ratio(a: float, b: float) -> str:
    """``a / b`` with two decimals, ``-`` when ``b`` is 0 or not a number."""
    return f"{a / b:.2f}" if b and b == b else "-"


def report(results: list[Round], args: argparse.Namespace, load: tuple[str, str]) -> None:
    """The two Markdown tables (module docstring)."""
    by = {(r.round, r.loop): r for r in results}
    rounds = range(1, args.rounds + 1)
    print(f"## Event loops: asyncio against uvloop on bare_boot.py ({args.rounds} rounds, alternating; "
          f"load average {load[0]} before, {load[1]} after)\n")
    print("loop.sendfile: " + ", ".join(f"{loop} {sendfile_of(loop)}" for loop in LOOPS) + "\n")
    print(f"### Cold storm: {args.nodes} machines at once, boot_storm.py's client, {ARTIFACT_KB} KiB artifacts\n")
    rows = []
    for n in rounds:
        a, u = by[n, "asyncio"], by[n, "uvloop"]
        rows.append((n, f"{a.booted} / {a.failed}", f"{u.booted} / {u.failed}", f"{a.cpu_ms_per_boot:.2f}",
                     f"{u.cpu_ms_per_boot:.2f}", ratio(u.cpu_ms_per_boot, a.cpu_ms_per_boot),
                     f"{a.last_up:.1f}", f"{u.last_up:.1f}"))
    med = {loop: [r for r in results if r.loop == loop] for loop in LOOPS}
    ma, mu = (median([r.cpu_ms_per_boot for r in med[loop]]) for loop in LOOPS)
    la, lu = (median([r.last_up for r in med[loop]]) for loop in LOOPS)
    rows.append(("median", "", "", f"{ma:.2f}", f"{mu:.2f}", ratio(mu, ma), f"{la:.1f}", f"{lu:.1f}"))
    print(markdown_table(["round", "asyncio: booted / failed", "uvloop: booted / failed",
                          "asyncio: CPU per boot (ms)", "uvloop: CPU per boot (ms)", "uvloop / asyncio",
                          "asyncio: last up (s)", "uvloop: last up (s)"], rows))
    print()
    print(f"### Downloads: {args.clients} curl clients at once, each one {args.size_mb} MiB file "
          f"(FileResponse, from the page cache)\n")
    rows = []
    for n in rounds:
        a, u = by[n, "asyncio"], by[n, "uvloop"]
        rows.append((n, f"{a.cpu_per_gib:.3f}", f"{u.cpu_per_gib:.3f}", ratio(u.cpu_per_gib, a.cpu_per_gib),
                     f"{a.mb_per_s:.0f}", f"{u.mb_per_s:.0f}", ratio(u.mb_per_s, a.mb_per_s)))
    ga, gu = (median([r.cpu_per_gib for r in med[loop]]) for loop in LOOPS)
    sa, su = (median([r.mb_per_s for r in med[loop]]) for loop in LOOPS)
    rows.append(("median", f"{ga:.3f}", f"{gu:.3f}", ratio(gu, ga), f"{sa:.0f}", f"{su:.0f}", ratio(su, sa)))
    print(markdown_table(["round", "asyncio: CPU per GiB (s)", "uvloop: CPU per GiB (s)", "uvloop / asyncio",
                          "asyncio: MB/s", "uvloop: MB/s", "uvloop / asyncio"], rows))
    print()
    for r in results:
        if r.error:
            print(f"round {r.round} {r.loop}: downloads failed: {r.error}")


def sendfile_of(loop: str) -> str:
    """Whether ``loop``'s event loop has a ``loop.sendfile`` of its own (asyncio's: ``os.sendfile`` on a
    plain socket) or only ``AbstractEventLoop``'s, which raises ``NotImplementedError`` (uvloop 0.23:
    MagicStack/uvloop#228), whereupon aiohttp's ``FileResponse`` copies through reads and writes."""
    import uvloop  # the bench extra; checked in main()

    cls = uvloop.Loop if loop == "uvloop" else asyncio.SelectorEventLoop  # asyncio's default on Linux
    return "none: reads and writes" if cls.sendfile is asyncio.AbstractEventLoop.sendfile else "its own"


def loadavg() -> str:
    """The 1-minute load average (``/proc/loadavg``)."""
    return Path("/proc/loadavg").read_text().split()[0]


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each loop once per round (default 3)")
    ap.add_argument("--nodes", type=int, default=2000, help="machines of each cold storm (default 2000)")
    ap.add_argument("--clients", type=int, default=4, help="curl clients downloading at once (default 4)")
    ap.add_argument("--size-mb", type=int, default=1024, help="size of the downloaded file, MiB (default 1024)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="bound of each storm, seconds (default 1800)")
    args = ap.parse_args()
    if min(args.rounds, args.nodes, args.clients, args.size_mb) < 1:
        ap.error("--rounds, --nodes, --clients and --size-mb must be at least 1")
    if importlib.util.find_spec("uvloop") is None:
        print("event_loops.py: uvloop is not installed: run `make bench-deps` (the bench extra)", file=sys.stderr)
        return 2
    # what boot_storm.py's storm_phases reads: one cold storm, its client processes and bounds
    storm_args = argparse.Namespace(nodes=args.nodes, phases=["cold"], timeout=args.timeout, connections=15000,
                                    clients=max(2, -(-args.nodes // MACHINES_PER_CLIENT)))
    t0 = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="bootserver-bench-loops-"))
    try:
        folder = work / "artifacts"
        folder.mkdir()
        shas = {f"live-{k}.x86_64": make_file(folder / f"live-{k}.x86_64", ARTIFACT_KB << 10)
                for k in ("kernel", "initramfs", "rootfs")}
        make_file(folder / BIG, args.size_mb << 20)
        load0 = loadavg()
        results = []
        for rnd in range(1, args.rounds + 1):
            for loop in LOOPS if rnd % 2 else LOOPS[::-1]:
                results.append(await one_loop(args, storm_args, work, loop, rnd, folder, shas))
        report(sorted(results, key=lambda r: (r.round, r.loop)), args, (load0, loadavg()))
        print(f"event_loops.py: {time.monotonic() - t0:.0f} s", file=sys.stderr)
        return 1 if any(r.failed or r.error for r in results) else 0
    finally:
        rmtree(work)


if __name__ == "__main__":
    run_main(main)
