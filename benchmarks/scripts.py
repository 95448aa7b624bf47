"""Benchmark (issue 8, target 2): the per-node iPXE script endpoint against a bare aiohttp handler.

bootserver: ``GET /ipxe/{node}?exp=&sig=`` for ``--nodes`` nodes of one install profile (real RHCOS
4.16 stream metadata from ``tests/data``, its artifact locations moved to a local upstream on
127.0.0.1 that also serves the metadata; the server loads it on the first request, so nothing is
synced: the script endpoint needs the metadata only, not the artifacts). Each request does the node
lookup, the signature check, the timeline read and write (sqlite in ``state_dir``) and the render.
The signed chain URLs come from bootserver's own URL builder (what ``bootserver url NODE`` prints).

Reference: benchmarks/bare_ipxe.py, one ``web.Application`` handler returning a constant script of the
same size (with ``--workers N > 1``, N such processes with ``reuse_port``), access log off.

Both are measured the same way with wrk (``-t 2 -c 50 -d 10s --latency``), a Lua script cycling through
the node URLs; rounds alternate (bare, bootserver, ...) after a 2 s warm-up each. Reports requests/s,
latency p50/p99 (ms), non-2xx answers and socket errors per round, the server's CPU time per request
(user + system of its process tree from ``/proc``, in microseconds: steadier than req/s on a shared
machine), and the ratio of the medians.

``--profile FILE`` runs ``py-spy record --format raw --threads --subprocesses`` (PyPI ``py-spy``, the ``bench``
extra) on the bootserver process during its rounds and writes the collapsed stacks to ``FILE`` (flame
graph input); the share of samples per top-level function is printed at the end.

``--baseline REF`` serves git ``REF`` too, from a temporary worktree (``_common.git_tree``: this venv's
libraries, ``PYTHONPATH`` onto the worktree) with its own folder, state store and signed URLs, and
alternates the two trees with the bare handler (every other round reversed); it prints ``this tree /
REF`` for CPU per request and requests/s (ratio of the medians, and per round). docs/benchmarks.md
asks for it before landing a change to the request path.

``--count instructions`` counts work instead of time, for a shared machine where CPU time per request
drifts by 10-20 % between rounds: every server (both trees and the bare handler) runs under Valgrind's
callgrind (Debian's ``valgrind``; ``--instr-atstart=no``, so it runs uninstrumented until measured) with
``PYTHONHASHSEED=0``; each round turns instrumentation on (``callgrind_control -i on``, ``-z``), sends
exactly ``--requests`` requests over ``--connections`` connections (an aiohttp client in this process:
every answer read whole), dumps (``callgrind_control -d``) and turns it off again, and reports the
user-space instructions (callgrind's ``Ir``) of the whole server process per request: the event loop,
its threads and the cyclic GC, not the kernel. The warm-up is ``--requests / 4`` requests uninstrumented.
Each server is first counted idle for ``--idle`` seconds; that rate (its timers: the store revision and
token polls) times a round's wall time is taken off the round (the column "with the timers" keeps the
raw figure). Slow (about 10 ms a request under callgrind) but steady within 1-2 % a round whatever else
the machine runs. It needs no hardware counters (``perf stat -e instructions:u`` has none on a VM
without a virtual PMU). ``--callgrind-option OPT`` passes more to callgrind (``--cache-sim=yes``: the
simulated cache misses per request go to stderr). ``--profile FILE`` keeps round 1's callgrind dumps as
``FILE`` and ``FILE-baseline`` (``callgrind_annotate FILE``). ``--workers`` must be 1.

With ``--state-store postgresql`` the timeline and the keys live in a throwaway PostgreSQL cluster
(tests/support/pgcluster.py: Debian's ``postgresql``, 127.0.0.1, ``fsync=off``) instead of sqlite in
``state_dir``: the per-replica figure of a ``state_store`` deployment (issue 17).

Usage: ``.venv/bin/python benchmarks/scripts.py [--nodes 200] [--workers 1] [--rounds 2]
[--duration 10] [--connections 50] [--threads 2] [--state-store sqlite|postgresql] [--profile FILE]
[--baseline REF] [--count cpu|instructions] [--requests 2000] [--idle 10] [--callgrind-option OPT]``
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp
from _common import (
    HERE,
    PY,
    REFERENCE,
    Bootserver,
    PeakRss,
    Upstream,
    cpu_seconds,
    curl,
    free_port,
    git_tree,
    markdown_table,
    median,
    rewrite_stream_locations,
    rmtree,
    run_main,
    signed_chain_paths,
    start,
    stop,
    throwaway_state_store,
    wait_http,
    write_config,
    write_json,
)

LUA = """\
local paths = {{{paths}}}
local i = 0
request = function()
  i = i % #paths + 1
  return wrk.format("GET", paths[i])
end
"""

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def _ms(value: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", value)
    if not m:
        raise ValueError(f"wrk latency {value!r}")
    return float(m[1]) * _UNITS[m[2]]


def parse_wrk(out: str) -> dict[str, float]:
    """From ``wrk --latency`` output: ``rps`` (requests/s), ``p50``/``p75``/``p90``/``p99`` (ms),
    ``requests``, ``non2xx`` and ``socket_errors`` (counts)."""
    res: dict[str, float] = {"non2xx": 0, "socket_errors": 0}
    res["rps"] = float(re.search(r"Requests/sec:\s+([\d.]+)", out)[1])  # type: ignore[index]
    res["requests"] = int(re.search(r"(\d+) requests in", out)[1])  # type: ignore[index]
    for pct, val in re.findall(r"^\s+(50|75|90|99)%\s+(\S+)$", out, re.M):
        res[f"p{pct}"] = _ms(val)
    if m := re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        res["non2xx"] = int(m[1])
    if m := re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out):
        res["socket_errors"] = sum(int(x) for x in m.groups())
    return res


def wrk(url: str, lua: Path, duration: int, connections: int, threads: int,
        pids: list[int] | None = None) -> dict[str, float]:
    """Run wrk against ``url`` (bounded: ``duration`` + 30 s); return :func:`parse_wrk` of its output,
    with ``cpu_us``: CPU microseconds per request of the process trees ``pids`` over the run."""
    cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration}s", "--latency", "-s", str(lua), url]
    cpu0 = sum(cpu_seconds(p) for p in pids or [])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 30)
    cpu = sum(cpu_seconds(p) for p in pids or []) - cpu0
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr}")
    res = parse_wrk(p.stdout)
    res["cpu_us"] = cpu * 1e6 / max(1, res["requests"])
    return res


@contextlib.contextmanager
def py_spy(pid: int, out: Path | None):
    """``py-spy record`` of ``pid`` (and its workers) into ``out`` (collapsed stacks) while the block
    runs; nothing when ``out`` is ``None``."""
    if out is None:
        yield
        return
    exe = shutil.which("py-spy") or str(Path(PY).parent / "py-spy")
    proc = subprocess.Popen([exe, "record", "--pid", str(pid), "--subprocesses", "--threads", "--gil",
                             "--format", "raw", "--rate", "250", "--output", str(out), "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield
    finally:
        proc.send_signal(2)  # SIGINT: py-spy writes its file and exits
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _stacks(path: Path) -> Iterator[tuple[str, int]]:
    """``(stack, samples)`` of each line of py-spy's raw (collapsed) output; a line whose frame names
    came out garbled (a sample taken while the target changed its memory) is left out."""
    for line in path.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if n.isdigit():
            yield stack, int(n)


def profile_summary(path: Path, top: int = 25) -> str:
    """The share of py-spy samples (busy threads only: py-spy records no idle ones) in each function,
    inclusive (a function's callees count as its own)."""
    total, per = 0, collections.Counter()  # type: ignore[var-annotated]
    for stack, n in _stacks(path):
        total += n
        for f in set(stack.split(";")):
            per[f] += n
    lines = [f"{100 * c / max(1, total):5.1f} %  {f}" for f, c in per.most_common(top)]
    return f"{total} busy samples\n" + "\n".join(lines)


def _function(frame: str) -> str:
    """A py-spy frame ``func (path/to/module.py:LINE)`` as ``func``: the same function in two trees
    matches across moved modules and lines."""
    return frame.split(" (", 1)[0]


def inclusive_us(path: Path, cpu_us: float) -> dict[str, float]:
    """Microseconds per request spent in each function (inclusive, by :func:`_function` name) of a
    py-spy profile: its share of the busy samples times the run's CPU per request ``cpu_us``."""
    total, per = 0, collections.Counter()  # type: ignore[var-annotated]
    for stack, n in _stacks(path):
        total += n
        for f in {_function(f) for f in stack.split(";")}:
            per[f] += n
    return {f: c / max(1, total) * cpu_us for f, c in per.items()}


def profile_versus(this: dict[str, float], base: dict[str, float], top: int = 40) -> str:
    """The functions with the most microseconds per request in either tree, side by side (a table)."""
    skip = ("process ", "thread", "<module>", "_run_code", "_run_module_as_main", "Runner.run", "run",
            "main", "_cmd_serve", "BaseEventLoop.run_forever", "BaseEventLoop.run_until_complete")
    names = [f for f in set(this) | set(base) if not f.startswith(skip)]
    names.sort(key=lambda f: -max(this.get(f, 0.0), base.get(f, 0.0)))
    return markdown_table(["function (inclusive)", "this tree us/request", "baseline us/request", "difference"],
                          [(f"`{f}`", f"{this.get(f, 0.0):.1f}", f"{base.get(f, 0.0):.1f}",
                            f"{this.get(f, 0.0) - base.get(f, 0.0):+.1f}") for f in names[:top]])


def callgrind(out_dir: Path, options: Sequence[str] = ()) -> list[str]:
    """The command prefix that runs a server under Valgrind's callgrind, uninstrumented until
    :func:`count_instructions` turns it on; its dumps go to ``out_dir/callgrind.out.PID.N``. ``options``:
    more callgrind options (e.g. ``--cache-sim=yes``)."""
    return ["valgrind", "--tool=callgrind", "--quiet", "--instr-atstart=no",
            f"--callgrind-out-file={out_dir}/callgrind.out.%p", *options]


def callgrind_totals(dump: Path) -> dict[str, int]:
    """The event totals of one callgrind dump file (format: valgrind's docs, "Callgrind Format
    Specification": its ``events:`` line and the ``totals:`` or ``summary:`` line), e.g. ``{"Ir": ...}``.
    Raises ``ValueError`` naming the file when it has neither."""
    events: list[str] = []
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith(("totals:", "summary:")) and events:
            return dict(zip(events, (int(v) for v in line.split()[1:]), strict=False))
    raise ValueError(f"{dump}: no events/totals lines (not a callgrind dump?)")


def _callgrind_control(pid: int, *args: str) -> None:
    """``callgrind_control ARGS PID`` (bounded: 120 s); raises ``RuntimeError`` with its output."""
    p = subprocess.run(["callgrind_control", *args, str(pid)], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"callgrind_control {' '.join(args)} {pid}: exit {p.returncode}: {p.stdout}{p.stderr}")


async def fixed_requests(url: str, paths: Sequence[str], n: int, connections: int) -> tuple[int, float]:
    """GET ``url`` + the ``paths`` in turn, ``n`` requests in all over ``connections`` keep-alive
    connections, each answer read whole; returns (answers other than 200, wall seconds). A request
    that fails (connection error, 300 s timeout) raises."""
    todo = iter(range(n))
    bad = 0
    timeout = aiohttp.ClientTimeout(total=300)
    t0 = time.monotonic()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=connections), timeout=timeout) as s:
        async def client() -> None:
            nonlocal bad
            for i in todo:
                async with s.get(url + paths[i % len(paths)]) as r:
                    await r.read()
                    bad += r.status != 200
        await asyncio.gather(*(client() for _ in range(connections)))
    return bad, time.monotonic() - t0


async def idle_instructions(pid: int, out_dir: Path, seconds: float, settle: float = 3.0) -> float:
    """User-space instructions per second of the callgrind-run server ``pid`` (dumps in ``out_dir``)
    while it answers nothing for ``seconds``: its timers and polls (store revision, tokens, keys).
    Counting starts ``settle`` seconds after the call, so that what the last requests left queued (the
    timeline's batched writes, slow under callgrind) is done and not taken for a timer."""
    await asyncio.sleep(settle)
    _callgrind_control(pid, "-i", "on")
    _callgrind_control(pid, "-z")
    t0 = time.monotonic()
    await asyncio.sleep(seconds)
    _callgrind_control(pid, "-d")
    elapsed = time.monotonic() - t0
    _callgrind_control(pid, "-i", "off")
    return callgrind_totals(latest_dump(out_dir, pid))["Ir"] / elapsed


async def count_instructions(pid: int, out_dir: Path, url: str, paths: Sequence[str], requests: int,
                             connections: int, idle_rate: float = 0.0) -> dict[str, float]:
    """One ``--count instructions`` round of the callgrind-run server ``pid`` (dumps in ``out_dir``):
    instrumentation on and counters zeroed, ``requests`` requests (:func:`fixed_requests`), a dump,
    instrumentation off. Returns ``instr``: user-space instructions per request, less ``idle_rate``
    (instructions per second, :func:`idle_instructions`) times the round's wall time, as the timers
    would have run anyway (under callgrind a round lasts 50-100 times longer than for real, so they
    would weigh that much more); ``raw``: the same without that; ``requests``, ``seconds`` (wall),
    ``non2xx`` and ``socket_errors`` (0: a failed request raises), and every other event callgrind
    counted (``D1mr``... with ``--cache-sim=yes``) per request, raw. The round's dump is
    :func:`latest_dump` of ``out_dir`` and ``pid``."""
    _callgrind_control(pid, "-i", "on")
    _callgrind_control(pid, "-z")
    t0 = time.monotonic()
    bad, _ = await fixed_requests(url, paths, requests, connections)
    _callgrind_control(pid, "-d")
    seconds = time.monotonic() - t0
    _callgrind_control(pid, "-i", "off")
    totals = callgrind_totals(latest_dump(out_dir, pid))
    ir = totals.pop("Ir")
    return {**{k: v / requests for k, v in totals.items()},
            "instr": (ir - idle_rate * seconds) / requests, "raw": ir / requests, "requests": requests,
            "seconds": seconds, "non2xx": bad, "socket_errors": 0}


def latest_dump(out_dir: Path, pid: int) -> Path:
    """The newest callgrind dump of ``pid`` in ``out_dir`` (``callgrind.out.PID.N``, highest N)."""
    dumps = [(int(d.name.rsplit(".", 1)[1]), d) for d in out_dir.glob(f"callgrind.out.{pid}.*")
             if d.name.rsplit(".", 1)[1].isdigit()]
    if not dumps:
        raise RuntimeError(f"no callgrind dump of {pid} in {out_dir}")
    return max(dumps)[1]


class BareApp:
    """``workers`` processes of benchmarks/bare_ipxe.py on 127.0.0.1:``port`` (``reuse_port`` when more
    than one), each run by the command prefix ``wrap`` (e.g. :func:`callgrind`), answering within
    ``start_deadline`` seconds. Use ``async with``."""

    def __init__(self, port: int, size: int, workers: int, log: Path, wrap: Sequence[str] = (),
                 start_deadline: float = 30.0) -> None:
        self.port, self.size, self.workers, self.log = port, size, workers, log
        self.wrap, self.start_deadline = list(wrap), start_deadline
        self.url = f"http://127.0.0.1:{port}"
        self.procs: list[subprocess.Popen] = []

    async def __aenter__(self) -> BareApp:
        try:
            for _ in range(self.workers):
                self.procs.append(start([*self.wrap, PY, str(HERE / "bare_ipxe.py"), str(self.port), str(self.size),
                                         *(["--reuse-port"] if self.workers > 1 else [])], self.log))
            for p in self.procs:
                await wait_http(self.url + "/ipxe/x", deadline=self.start_deadline, proc=p)
        except BaseException:
            self.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        for p in self.procs:
            stop(p)


def _config(work: Path, port: int, upstream_url: str, nodes: list[str], state_store: dict[str, str]) -> Path:
    """One server's config in ``work``: ``nodes`` in one install profile on 127.0.0.1:``port``."""
    shutil.copy(REFERENCE / "openshift-pointer-master.ign.json", work / "master.ign")
    return write_config(work / "bootserver.yaml", {
        "server": {"listen": f"127.0.0.1:{port}", "base_url": f"http://127.0.0.1:{port}"},
        "cache_dir": "cache", "state_dir": "state", **state_store,
        "streams": {"rhcos-4.16": {"metadata": f"{upstream_url}/streams/rhcos-4.16.json"}},
        "profiles": {"master": {"stream": "rhcos-4.16", "mode": "install", "install_dev": "/dev/sda",
                                "ignition": "master.ign"}},
        "nodes": {n: {"profile": "master"} for n in nodes}})


def _profile_file(profile: Path | None, name: str) -> Path | None:
    """Where the py-spy stacks of server ``name`` go: ``--profile FILE`` itself for this tree, FILE with
    ``-baseline`` before its suffix for the baseline."""
    if profile is None or name == "bootserver":
        return profile
    return profile.with_name(f"{profile.stem}-baseline{profile.suffix}")


def _instructions_summary(res: dict[str, list[dict[str, float]]], names: list[str]) -> list[tuple[str, ...]]:
    """The medians table's rows of ``--count instructions``: instructions per request and its ratio to bare."""
    def med(name: str) -> float:
        return median([w["instr"] for w in res[name]])

    return [("user-space instructions per request (median of rounds)", *(f"{med(n):,.0f}" for n in names), ""),
            ("instructions per request / bare", *("" if n == "bare" else f"{med(n) / med('bare'):.2f}"
                                                  for n in names), "")]


def _summary(res: dict[str, list[dict[str, float]]], names: list[str]) -> list[tuple[str, ...]]:
    """The medians table's rows: req/s, its ratio to bare, p50, p99, CPU per request and its ratio."""
    def med(name: str, key: str) -> float:
        return median([w[key] for w in res[name]])

    b_rps, b_cpu = med("bare", "rps"), med("bare", "cpu_us")
    rows: list[tuple[str, ...]] = [
        ("req/s (median of rounds)", *(f"{med(n, 'rps'):.0f}" for n in names), ""),
        ("req/s / bare", *("" if n == "bare" else f"{med(n, 'rps') / b_rps:.2f}" for n in names),
         f">= 0.8: {'yes' if med('bootserver', 'rps') / b_rps >= 0.8 else 'no'}"),
        ("p50 (ms, median of rounds)", *(f"{med(n, 'p50'):.2f}" for n in names), ""),
        ("p99 (ms, median of rounds)", *(f"{med(n, 'p99'):.2f}" for n in names),
         f"< 20: {'yes' if med('bootserver', 'p99') < 20 else 'no'}"),
        ("server CPU per request (us, median of rounds)", *(f"{med(n, 'cpu_us'):.0f}" for n in names), ""),
        ("CPU per request / bare", *("" if n == "bare" else f"{med(n, 'cpu_us') / b_cpu:.2f}" for n in names), ""),
    ]
    return rows


_RATIOS = {"cpu": (("cpu_us", "CPU per request, this tree / baseline (lower is better)"),
                   ("rps", "req/s, this tree / baseline (higher is better)")),
           "instructions": (("instr", "user-space instructions per request, this tree / baseline "
                                      "(lower is better)"),)}


def _versus(res: dict[str, list[dict[str, float]]], baseline: str,
            count: str = "cpu") -> list[tuple[str, str, str, str]]:
    """This tree against the baseline: the ratio of their medians, and each round's ratio (the two ran
    back to back in it, so a round's ratio is the least disturbed by a shared machine's drift)."""
    cur, base = res["bootserver"], res[baseline]
    rows = []
    for key, what in _RATIOS[count]:
        per_round = [c[key] / b[key] for c, b in zip(cur, base, strict=True)]
        rows.append((what, f"{median([w[key] for w in cur]) / median([w[key] for w in base]):.3f}",
                     f"{median(per_round):.3f}", ", ".join(f"{r:.3f}" for r in per_round)))
    return rows


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=200, help="nodes in the config (default 200)")
    ap.add_argument("--workers", type=int, default=1,
                    help="bootserver serve --workers N (passed only when N != 1) and N bare processes")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per server (default 2)")
    ap.add_argument("--duration", type=int, default=10, help="seconds per wrk run (default 10)")
    ap.add_argument("--connections", type=int, default=50, help="wrk connections (default 50)")
    ap.add_argument("--threads", type=int, default=2, help="wrk threads (default 2)")
    ap.add_argument("--state-store", choices=["sqlite", "postgresql"], default="sqlite",
                    help="where the timeline and keys live (default sqlite in state_dir)")
    ap.add_argument("--profile", type=Path, help="py-spy collapsed stacks of bootserver's rounds to this file "
                                                  "(with --baseline, the baseline's to FILE-baseline)")
    ap.add_argument("--baseline", metavar="REF",
                    help="also serve git REF (a temporary worktree, this venv's libraries) and alternate "
                         "with it: prints this tree / REF for CPU per request and req/s")
    ap.add_argument("--count", choices=["cpu", "instructions"], default="cpu",
                    help="what a round measures: CPU time of the server under wrk for --duration (default), "
                         "or user-space instructions of exactly --requests requests under callgrind "
                         "(steady on a shared machine)")
    ap.add_argument("--requests", type=int, default=2000,
                    help="requests per round with --count instructions (default 2000)")
    ap.add_argument("--callgrind-option", action="append", default=[], metavar="OPT",
                    help="with --count instructions: one more callgrind option, e.g. "
                         "--callgrind-option=--cache-sim=yes (the other events per request go to stderr); repeatable")
    ap.add_argument("--idle", type=float, default=10.0,
                    help="with --count instructions: seconds each server is counted idle, its timers' "
                         "instructions per second taken off each round (default 10; 0: none)")
    args = ap.parse_args()
    counting = args.count == "instructions"
    if counting:
        if args.workers != 1:
            sys.exit("scripts.py: --count instructions runs one server process: --workers must be 1")
        for tool in ("valgrind", "callgrind_control"):
            if not shutil.which(tool):
                sys.exit(f"scripts.py: {tool} not found (make bench-deps: Debian's valgrind)")
        os.environ["PYTHONHASHSEED"] = "0"  # the same dict and set layouts in every server, both trees
    if not shutil.which("wrk"):
        sys.exit("scripts.py: wrk not found (make bench-deps)")
    if args.profile is not None:
        args.profile.parent.mkdir(parents=True, exist_ok=True)

    work = Path(tempfile.mkdtemp(prefix="bootserver-bench-scripts-"))
    cleanup = contextlib.ExitStack()
    try:
        tree = cleanup.enter_context(git_tree(args.baseline)) if args.baseline else None
        base_name = f"baseline {tree.label}" if tree is not None else ""
        if tree is not None:
            print(f"{base_name} checked out in {tree.path}", file=sys.stderr)
        up_dir = work / "upstream"
        doc = json.loads((REFERENCE / "rhcos-stream-4.16.json").read_text())
        nodes = [f"node-{i:04d}" for i in range(args.nodes)]
        up = Upstream(up_dir, work / "upstream.log")
        write_json(up_dir / "streams" / "rhcos-4.16.json", rewrite_stream_locations(doc, up.url))
        async with up, contextlib.AsyncExitStack() as servers:
            # each tree its own folder, port, state store (and so signing key) and signed URLs
            trees: dict[str, tuple[Bootserver, Path]] = {}
            chains: dict[str, list[str]] = {}
            # under callgrind a server starts in about 5-20 s on 2 busy cores
            deadline = 300.0 if counting else 30.0
            for name, t in (("bootserver", None), *(((base_name, tree),) if tree is not None else ())):
                sub = work / ("this" if t is None else "baseline")
                sub.mkdir()
                port = free_port()
                state_store = cleanup.enter_context(throwaway_state_store(args.state_store))
                config = _config(sub, port, up.url, nodes, state_store)
                lua = sub / "paths.lua"
                chains[name] = signed_chain_paths(config, t)
                lua.write_text(LUA.format(paths=", ".join(json.dumps(p) for p in chains[name])))
                bs = await servers.enter_async_context(
                    Bootserver(config, port, workers=args.workers, log=sub / "serve.log", tree=t,
                               wrap=callgrind(sub, args.callgrind_option) if counting else (),
                               start_deadline=deadline))
                trees[name] = (bs, lua)
            bs, lua = trees["bootserver"]
            size = 0
            for name, (server, tree_lua) in trees.items():
                first = re.search(r'"([^"]+)"', tree_lua.read_text().split("\n")[0])[1]  # type: ignore[index]
                _, _, size = await curl(server.url + first, out=str(work / "one.ipxe"))
                text = (work / "one.ipxe").read_text()
                assert text.startswith("#!ipxe") and "kernel " in text, text[:200]
                print(f"script of {nodes[0]} ({name}): {size} bytes", file=sys.stderr)
            bare_port = free_port()
            names = ["bare", *trees]
            rows: list[tuple[object, ...]] = []
            res: dict[str, list[dict[str, float]]] = {n: [] for n in names}
            bare_dir = work / "bare"
            bare_dir.mkdir()
            chains["bare"] = chains["bootserver"]
            with PeakRss(bs.proc.pid) as rss:  # type: ignore[union-attr]
                async with BareApp(bare_port, size, args.workers, work / "bare.log",
                                   wrap=callgrind(bare_dir, args.callgrind_option) if counting else (),
                                   start_deadline=deadline) as bare:
                    targets = {"bare": (bare.url, lua, [p.pid for p in bare.procs]),
                               **{n: (s.url, tl, [s.proc.pid]) for n, (s, tl) in trees.items()}}  # type: ignore[union-attr]
                    dirs = {"bare": bare_dir, **{n: s.config.parent for n, (s, _) in trees.items()}}
                    for name in names:  # warm-up
                        if counting:
                            await fixed_requests(targets[name][0], chains[name], max(1, args.requests // 4),
                                                 args.connections)
                        else:
                            wrk(targets[name][0], targets[name][1], min(2, args.duration), args.connections,
                                args.threads)
                    idle = dict.fromkeys(names, 0.0)
                    for name in names if counting and args.idle > 0 else ():
                        idle[name] = await idle_instructions(targets[name][2][0], dirs[name], args.idle)
                        print(f"{name} idle: {idle[name]:,.0f} instructions/s under callgrind", file=sys.stderr,
                              flush=True)
                    for r in range(1, args.rounds + 1):
                        # every other round in reverse order: neither tree always runs right after bare
                        for name in names if r % 2 else names[::-1]:
                            url, tl, pids = targets[name]
                            if counting:
                                w = await count_instructions(pids[0], dirs[name], url, chains[name], args.requests,
                                                             args.connections, idle[name])
                                spy = _profile_file(args.profile, name) if name != "bare" and r == 1 else None
                                if spy is not None:
                                    shutil.copy(latest_dump(dirs[name], pids[0]), spy)
                                rows.append((r, name, f"{w['instr']:,.0f}", f"{w['raw']:,.0f}", int(w["requests"]),
                                             f"{w['seconds']:.1f}", f"{idle[name]:,.0f}", int(w["non2xx"])))
                                print(f"round {r} {name}: {w['instr']:,.0f} instructions/request "
                                      f"(with the timers' {w['raw']:,.0f}) "
                                      f"({int(w['requests'])} requests in {w['seconds']:.1f} s under callgrind), "
                                      f"non-2xx {int(w['non2xx'])}"
                                      + "".join(f", {k} {v:,.0f}" for k, v in w.items() if k[0].isupper()),
                                      file=sys.stderr, flush=True)
                                res[name].append(w)
                                continue
                            spy = _profile_file(args.profile, name) if name != "bare" and r == 1 else None
                            with py_spy(pids[0], spy):
                                w = wrk(url, tl, args.duration, args.connections, args.threads, pids)
                            res[name].append(w)
                            rows.append((r, name, f"{w['rps']:.0f}", f"{w['p50']:.2f}", f"{w['p99']:.2f}",
                                         f"{w['cpu_us']:.0f}", int(w["non2xx"]), int(w["socket_errors"])))
                            print(f"round {r} {name}: {w['rps']:.0f} req/s, p99 {w['p99']:.2f} ms, "
                                  f"CPU {w['cpu_us']:.0f} us/request, non-2xx {int(w['non2xx'])}",
                                  file=sys.stderr, flush=True)
            up_gets = up.gets("/streams/")
        against = f", against {base_name}" if tree else ""
        if counting:
            print(f"## iPXE script endpoint ({args.nodes} nodes, {args.requests} requests per round over "
                  f"{args.connections} connections under callgrind, state store: {args.state_store}, "
                  f"script {size} bytes{against})\n")
            print(markdown_table(["round", "server", "instructions/request", "with the timers", "requests",
                                  "seconds (callgrind)", "idle instructions/s", "non-2xx"], rows))
        else:
            print(f"## iPXE script endpoint ({args.nodes} nodes, wrk -t{args.threads} -c{args.connections} "
                  f"-d{args.duration}s, workers: {args.workers}, state store: {args.state_store}, "
                  f"script {size} bytes{against})\n")
            print(markdown_table(["round", "server", "req/s", "p50 (ms)", "p99 (ms)", "CPU us/request", "non-2xx",
                                  "socket errors"], rows))
        print()
        print(markdown_table(["measurement", *(n if n != "bootserver" else "bootserver (this tree)" for n in names),
                              "target"], [
            *(_instructions_summary(res, names) if counting else _summary(res, names)),
            *([] if counting else [  # under valgrind the RSS is valgrind's
                ("bootserver peak RSS (sum / max process)", "",
                 f"{rss.total_kb / 1024:.0f} / {rss.max_kb / 1024:.0f} MiB", *([""] * (len(names) - 2)), "")]),
            ("stream metadata GETs from the upstream (all trees)", "", str(up_gets), *([""] * (len(names) - 2)), ""),
        ]))
        if tree is not None:
            print(f"\n## this tree against {base_name}\n")
            print(markdown_table(["ratio", "of the medians", "median of the rounds' ratios", "per round"],
                                 _versus(res, base_name, args.count)))
        for name in trees:
            spy = _profile_file(args.profile, name)
            if counting and spy is not None and spy.exists():
                print(f"\ncallgrind dump of round 1, {name}: {spy} (callgrind_annotate --inclusive=yes {spy})")
            elif spy is not None and spy.exists():
                print(f"\n## py-spy profile of round 1, {name} ({spy})\n\n```\n{profile_summary(spy)}\n```")
        spies = {n: _profile_file(args.profile, n) for n in trees}
        if not counting and tree is not None and all(spy is not None and spy.exists() for spy in spies.values()):
            this = inclusive_us(spies["bootserver"], res["bootserver"][0]["cpu_us"])  # type: ignore[arg-type]
            base = inclusive_us(spies[base_name], res[base_name][0]["cpu_us"])  # type: ignore[arg-type]
            print(f"\n## where the CPU of a request goes, round 1 (py-spy share x CPU per request)\n\n"
                  f"{profile_versus(this, base)}")
        if any(w["non2xx"] or w["socket_errors"] for n in trees for w in res[n]):
            sys.exit("scripts.py: non-2xx answers or socket errors (see the table)")
    finally:
        cleanup.close()
        rmtree(work)


if __name__ == "__main__":
    run_main(main)
