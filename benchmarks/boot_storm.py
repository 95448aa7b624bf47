"""Benchmark (issue 8, target 4; issue 40): a power-on storm of ``--nodes`` machines at once, each
behaving as the real clients of a boot do.

Setup on 127.0.0.1: a local upstream (benchmarks/upstream.py) serves small fake artifacts (64 KiB
kernel, initramfs and rootfs by default) named in a stream document; ``bootserver sync-images`` caches
them; the install profile's ``ignition`` is the real openshift-install pointer config from
``tests/data`` and ``boot_once: false`` (so a second storm boots the same way). The server keeps
``server.max_concurrent`` and ``server.max_queued`` at their defaults.

Each machine, in the client that makes each request in a real boot:

- **iPXE** (script, kernel, initramfs; src/net/tcp/httpcore.c): a ``503`` with ``Retry-After`` is
  retried after that many seconds, with no limit; a ``503`` without it, any other status, or a
  connection error fails the ``chain`` (the boot) or the ``kernel``/``initrd`` command, which the script
  itself tries 3 times, 5 s apart, before it falls through (templates/boot.ipxe.j2).
- **Ignition** (stub, then the real config its ``merge`` source names, checked against the stub's
  sha512; Ignition's docs/operator-notes.md): a ``5xx``, a connection error or no response headers
  within 10 s is retried after a backoff of 100 ms doubling up to 5 s, with no limit; another non-200
  status fails the boot.
- **the check-in unit** (``curl --fail --max-time 30 --retry 30 --retry-delay 10 --retry-connrefused``,
  its URL read from the stub's ``bootserver-checkin.service``): a ``408``/``429``/``5xx``, a connection
  error or a timeout is retried after 10 s, at most 30 times; the machine is ``up`` when it answers 200.

Kernel and initramfs bytes are checked against the stream's sha256. Each machine has its own source
address (127.1.0.1 and up: loopback, so the server attributes its kernel and initramfs to its node as
it would a real machine's; before, every machine was 127.0.0.1) and its own connection, kept idle 5 s
for its next request (below the server's keep-alive timeout); one the server closed meanwhile is
opened again at once. The machines are
spread over ``--clients`` processes (default one per 2,500), powered on at one instant: one Python
process cannot open ten thousand connections and send each its request within the server's keep-alive
timeout (aiohttp closes a connection that sent no request within it), which real machines, each sending
its own, do. For the same reason the servers' ``server.keepalive_timeout`` is 120 s
(:data:`SERVER_KEEPALIVE`). Each
client process has at most ``--connections`` requests in flight: more of its machines wait in the
client.

Reports, per storm: machines booted and failed (by why), the time until the last machine was ``up``,
per-step wait (from the step's first request to its 200, retries included) p50/p99/max, retries by step,
the server's CPU seconds (user + system from ``/proc``, every worker and replica) and CPU per machine
boot, and peak RSS (``VmHWM``). ``cold``: a fresh server (first render of each script and stub, first
check of each signature); ``warm``: the same machines again on the same server right after.
``drain``: the last ``up`` against (server CPU / server processes): 1.0 means the storm drained at the
server's full speed. On a shared machine the server also waits for a core (``/proc/PID/task/*/schedstat``);
``drain with its cores`` counts that wait as time it would have run: 1.0 means it ran or waited for a
core the whole storm, never for work.

``--baseline REF`` runs the same storms against git ``REF`` (a temporary ``git worktree``, this venv's
libraries: ``_common.git_tree``), alternating with this tree for ``--rounds`` rounds, and prints both
side by side. ``--profile FILE``: py-spy collapsed stacks of this tree's cold storm (round 1).

``--floor`` storms, in each round beside the trees and alternating with them, the same number of
machines with the same client against ``benchmarks/bare_boot.py`` (a bare aiohttp app answering the
same six requests with the same shapes and sizes: no lookup, signature check, render or timeline; one
process, on :data:`FLOOR_LOOP`, the event loop of the server under test), and reports each tree's CPU
per boot over the floor's of the same round and storm, and the medians.

``--state-store postgresql --replicas 2`` (issue 17): the timeline and keys live in a throwaway
PostgreSQL cluster (tests/support/pgcluster.py, ``fsync=off``) and ``--replicas`` ``serve`` processes
share it, each with its own port, cache and ``state_dir``; machine i boots through replica i mod N.

Usage: ``.venv/bin/python benchmarks/boot_storm.py [--nodes 1000] [--workers 1] [--artifact-kb 64]
[--clients N] [--state-store sqlite|postgresql] [--replicas 1] [--baseline REF] [--rounds 1]
[--phases cold,warm] [--profile FILE] [--floor]``
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import concurrent.futures
import contextlib
import contextvars
import hashlib
import ipaddress
import json
import multiprocessing
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    REFERENCE,
    BareBoot,
    Bootserver,
    GitTree,
    PeakRss,
    Upstream,
    bench_stream,
    cpu_seconds,
    free_port,
    git_tree,
    make_file,
    markdown_table,
    median,
    pct,
    rmtree,
    run_main,
    runqueue_seconds,
    signed_chain_paths,
    sync_images,
    throwaway_state_store,
    write_config,
    write_json,
)
from scripts import profile_summary, py_spy

STUB_KARGS = ("coreos.inst.ignition_url=", "ignition.config.url=")
STEPS = ("script", "kernel", "initramfs", "stub", "config", "checkin")
#: ``server.keepalive_timeout`` of the servers (default 15 s): aiohttp closes a connection that sent
#: no request within it, and a client process with thousands of machines on a busy 2-core machine
#: was seen writing its requests more than 15 s after connecting.
SERVER_KEEPALIVE = 120
#: Seconds a client keeps an idle connection for its next request (under the server's 15 s).
CLIENT_KEEPALIVE = 5.0
#: Machines one client process powers on by default: the last of them sends its request a few seconds
#: after its connection opened even on a busy 2-core machine (the server's keep-alive timeout is 15 s).
MACHINES_PER_CLIENT = 2500
#: The boot script's own attempts at kernel and initramfs, and its sleep between them (templates/boot.ipxe.j2).
SCRIPT_ATTEMPTS, SCRIPT_RETRY_DELAY = 3, 5.0
#: Seconds Ignition waits for response headers before it cancels and retries (operator-notes.md).
IGNITION_HEADERS_TIMEOUT = 10.0
#: curl's --retry, --retry-delay and --max-time in the check-in unit (bootserver.ignition.checkin_unit).
CHECKIN_RETRIES, CHECKIN_DELAY, CHECKIN_MAX_TIME = 30, 10.0, 30.0
#: Statuses curl --retry retries (curl's man page: "transient" errors).
CURL_TRANSIENT = frozenset({408, 429, 500, 502, 503, 504})
CHECKIN_URL = re.compile(r"-X POST \"?(https?://[^\s\"]+)")
#: The event loop ``--floor``'s bare app runs on: the server's (asyncio's default loop).
FLOOR_LOOP = "asyncio"
FLOOR = f"floor: bare aiohttp ({FLOOR_LOOP})"
REL = "prod/builds/1.0/x86_64"  # the artifacts' folder in the upstream


#: The session of the machine whose boot the running task is (its own connector and source address).
MACHINE: contextvars.ContextVar[aiohttp.ClientSession] = contextvars.ContextVar("machine")


class BootFailed(Exception):
    """One machine's boot failed: ``kind`` (e.g. ``status 503 without Retry-After: script``)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


@dataclass
class Storm:
    """The machines of one storm: the cap of requests in flight (set while it runs), expected sha256 by
    artifact file name, and what happened."""

    slots: asyncio.Semaphore | None
    shas: dict[str, str]
    started: float = field(default_factory=time.time)  # unix time the machines powered on
    requests: int = 0
    booted: int = 0
    last_up: float = 0.0
    failed: collections.Counter[str] = field(default_factory=collections.Counter)
    retries: collections.Counter[str] = field(default_factory=collections.Counter)
    reconnects: int = 0
    waits: dict[str, list[float]] = field(default_factory=lambda: {step: [] for step in STEPS})

    def merge(self, other: Storm) -> None:
        """Add ``other``'s machines (another client process's share of the same storm)."""
        self.requests += other.requests
        self.booted += other.booted
        self.last_up = max(self.last_up, other.last_up)
        self.failed.update(other.failed)
        self.retries.update(other.retries)
        self.reconnects += other.reconnects
        for step, values in other.waits.items():
            self.waits[step].extend(values)

    async def _once(self, method: str, url: str, timeout: aiohttp.ClientTimeout | None = None
                    ) -> tuple[int, dict[str, str], bytes]:
        """One request of the machine whose boot runs (:data:`MACHINE`: its own session and source
        address), within the process's cap of requests in flight (again at once when its kept
        connection turns out closed by the server)."""
        session = MACHINE.get()
        assert self.slots is not None
        for attempt in range(2):
            self.requests += 1
            try:
                async with self.slots, session.request(method, url, timeout=timeout) as r:
                    return r.status, dict(r.headers), await r.read()
            except aiohttp.ServerDisconnectedError:
                if attempt:
                    raise
                self.reconnects += 1
        raise AssertionError("unreachable")

    async def ipxe(self, url: str, step: str) -> bytes:
        """GET ``url`` as iPXE does (module docstring); the body."""
        t0 = time.monotonic()
        while True:
            try:
                status, headers, body = await self._once("GET", url)
            except (aiohttp.ClientError, TimeoutError) as e:
                raise BootFailed(f"connection ({type(e).__name__}): {step}") from None
            if status == 200:
                break
            if status == 503 and "Retry-After" in headers:
                self.retries[step] += 1
                await asyncio.sleep(int(headers["Retry-After"]))
                continue
            raise BootFailed(f"status {status}{' without Retry-After' if status == 503 else ''}: {step}")
        self.waits[step].append(time.monotonic() - t0)
        return body

    async def ignition(self, url: str, step: str) -> bytes:
        """GET ``url`` as Ignition does (module docstring); the body."""
        t0 = time.monotonic()
        backoff = 0.1
        timeout = aiohttp.ClientTimeout(total=None, sock_read=IGNITION_HEADERS_TIMEOUT)
        while True:
            try:
                status, _headers, body = await self._once("GET", url, timeout)
            except (aiohttp.ClientError, TimeoutError):
                status, body = 599, b""
            if status == 200:
                break
            if status < 500:
                raise BootFailed(f"status {status}: {step}")
            self.retries[step] += 1
            await asyncio.sleep(backoff)
            backoff = min(5.0, backoff * 2)
        self.waits[step].append(time.monotonic() - t0)
        return body

    async def checkin(self, url: str) -> None:
        """POST ``url`` as the check-in unit's curl does (module docstring)."""
        t0 = time.monotonic()
        timeout = aiohttp.ClientTimeout(total=CHECKIN_MAX_TIME)
        for attempt in range(CHECKIN_RETRIES + 1):
            try:
                status, _headers, _body = await self._once("POST", url, timeout)
            except (aiohttp.ClientError, TimeoutError):
                status = 0
            if status == 200:
                self.waits["checkin"].append(time.monotonic() - t0)
                return
            if (status and status not in CURL_TRANSIENT) or attempt == CHECKIN_RETRIES:
                break
            self.retries["checkin"] += 1
            await asyncio.sleep(CHECKIN_DELAY)
        raise BootFailed(f"status {status or 'no answer'} after {attempt} retries: checkin")

    async def boot(self, chain_url: str, address: str) -> None:
        """One machine's boot from source address ``address`` (its own connection, kept 5 s between
        its requests), from its chain URL to its check-in; counts it booted or failed."""
        connector = aiohttp.TCPConnector(limit=1, keepalive_timeout=CLIENT_KEEPALIVE, local_addr=(address, 0))
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=60)) as session:
            MACHINE.set(session)  # this task's own (each machine's boot is a task of its own)
            await self._boot(chain_url)

    async def _boot(self, chain_url: str) -> None:
        try:
            script = (await self.ipxe(chain_url, "script")).decode()
            lines = script.splitlines()
            words = next(ln for ln in lines if ln.startswith("kernel ")).split()
            kernel_url, kargs = words[1], words[2:]
            initrd_url = next(w for w in next(ln for ln in lines if ln.startswith("initrd ")).split()
                              if w.startswith(("http://", "https://")))
            stub_url = next(w.split("=", 1)[1] for w in kargs if w.startswith(STUB_KARGS))
            for attempt in range(1, SCRIPT_ATTEMPTS + 1):  # the script's own loop (templates/boot.ipxe.j2)
                try:
                    for step, url in (("kernel", kernel_url), ("initramfs", initrd_url)):
                        body = await self.ipxe(url, step)
                        if hashlib.sha256(body).hexdigest() != self.shas[url.rsplit("/", 1)[1]]:
                            raise BootFailed(f"hash: {step}")
                    break
                except BootFailed:
                    if attempt == SCRIPT_ATTEMPTS:
                        raise
                    self.retries["script's own retry"] += 1
                    await asyncio.sleep(SCRIPT_RETRY_DELAY)
            stub = json.loads(await self.ignition(stub_url, "stub"))
            merge = stub["ignition"]["config"]["merge"][0]
            real = await self.ignition(merge["source"], "config")
            if merge["verification"]["hash"] != "sha512-" + hashlib.sha512(real).hexdigest():
                raise BootFailed("hash: config")
            units = stub.get("systemd", {}).get("units", [])
            found = [m[1] for u in units for m in [CHECKIN_URL.search(u.get("contents", ""))] if m]
            if not found:
                raise BootFailed("no check-in unit in the stub")
            await self.checkin(found[0])
            self.booted += 1
            self.last_up = max(self.last_up, time.time() - self.started)
        except BootFailed as e:
            self.failed[e.kind] += 1
        except (StopIteration, KeyError, IndexError, ValueError) as e:
            self.failed[f"parse ({type(e).__name__})"] += 1


@dataclass
class Result:
    """One storm against one server."""

    tree: str
    round: int
    phase: str  # cold or warm
    nodes: int
    storm: Storm
    wall: float
    server_cpu: float
    processes: int
    runqueue: float  # seconds the server was runnable but waited for a CPU (all its threads)
    rss_mib: float = 0.0

    @property
    def cpu_ms(self) -> float:
        """Server CPU per machine boot, ms."""
        return 1000 * self.server_cpu / self.nodes

    @property
    def drain(self) -> float:
        """The last ``up`` over (server CPU / server processes): 1.0 is the server's full speed."""
        return self.storm.last_up / (self.server_cpu / self.processes) if self.server_cpu else 0.0

    @property
    def starved(self) -> float:
        """The last ``up`` over ((server CPU + its wait for a CPU) / server processes): the drain
        the server would have had with its cores to itself (1.0: it ran or waited for a core all along)."""
        busy = self.server_cpu + self.runqueue
        return self.storm.last_up / (busy / self.processes) if busy else 0.0


def machine_address(i: int) -> str:
    """Machine ``i``'s source address: its own in 127.1.0.0/16 and up (loopback), as real machines
    each have theirs: the server attributes each machine's artifacts to its node by it."""
    return str(ipaddress.IPv4Address(int(ipaddress.IPv4Address("127.1.0.0")) + i + 1))


async def run_share(machines: list[tuple[str, str]], shas: dict[str, str], connections: int, timeout: float,
                    start: float) -> Storm:
    """The machines of ``machines`` (source address, chain URL), all powered on at unix time ``start``,
    at most ``connections`` requests of them in flight. Each keeps its idle connection 5 s, below the
    server's keep-alive timeout (15 s), so it never sends a request on one the server already closed."""
    await asyncio.sleep(max(0.0, start - time.time()))
    storm = Storm(None, shas, started=start)
    storm.slots = asyncio.Semaphore(connections)
    tasks = [asyncio.ensure_future(storm.boot(url, address)) for address, url in machines]
    _done, late = await asyncio.wait(tasks, timeout=timeout)
    for task in late:
        task.cancel()
    await asyncio.gather(*late, return_exceptions=True)
    if late:
        storm.failed[f"not up within --timeout {timeout:g} s"] += len(late)
    storm.slots = None
    return storm


def client_process(machines: list[tuple[str, str]], shas: dict[str, str], connections: int, timeout: float,
                   start: float) -> Storm:
    """One client process's share of a storm (:func:`run_share`), in its own event loop."""
    return asyncio.run(run_share(machines, shas, connections, timeout, start))


async def run_storm(urls: list[str], shas: dict[str, str], args: argparse.Namespace) -> tuple[Storm, float]:
    """Every machine of ``urls`` at once, spread over ``args.clients`` client processes (machine i in
    process i mod N: one Python process cannot open thousands of connections and send each its request
    within the server's keep-alive timeout); the merged storm and its wall time (s)."""
    n = args.clients
    machines = [(machine_address(i), url) for i, url in enumerate(urls)]
    loop = asyncio.get_running_loop()
    with concurrent.futures.ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn")) as pool:
        start = time.time() + 2.0 + 0.5 * n  # every process imported and waiting before the power-on
        try:
            shares = await asyncio.gather(*(loop.run_in_executor(
                pool, client_process, machines[i::n], shas, args.connections, args.timeout, start)
                for i in range(n)))
        except BaseException:  # interrupted (run_main): the clients stop now, not after their --timeout
            for proc in list(getattr(pool, "_processes", {}).values()):  # no public way before Python 3.14
                proc.kill()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    storm = Storm(None, shas, started=start)
    for share in shares:
        storm.merge(share)
    return storm, time.time() - start


async def storm_phases(args: argparse.Namespace, name: str, rnd: int, pids: list[int], processes: int,
                       urls: list[str], by_name: dict[str, str], spy: Path | None) -> list[Result]:
    """The storms of ``args.phases`` in turn against the running server(s) ``pids`` (``processes``
    serving processes in all), machine i at ``urls[i]``; their CPU, wait for a CPU and peak RSS
    measured over the servers' process trees."""
    results = []
    with contextlib.ExitStack() as peaks:
        rsss = [peaks.enter_context(PeakRss(pid)) for pid in pids]
        for phase in args.phases:
            cpu0 = sum(cpu_seconds(pid) for pid in pids)
            queued0 = sum(runqueue_seconds(pid) for pid in pids)
            with py_spy(pids[0], spy if phase == "cold" else None):
                storm, wall = await run_storm(urls, by_name, args)
            cpu = sum(cpu_seconds(pid) for pid in pids) - cpu0
            queued = sum(runqueue_seconds(pid) for pid in pids) - queued0
            results.append(Result(name, rnd, phase, args.nodes, storm, wall, cpu, processes, queued))
            print(f"round {rnd} {name} {phase}: {storm.booted} booted, {sum(storm.failed.values())} "
                  f"failed {dict(storm.failed)}, last up {storm.last_up:.1f} s, server CPU {cpu:.1f} s",
                  file=sys.stderr, flush=True)
        for rss in rsss:
            rss.sample()
    for res in results:
        res.rss_mib = sum(r.total_kb for r in rsss) / 1024
    return results


async def one_floor(args: argparse.Namespace, work: Path, rnd: int, up_dir: Path, shas: dict[str, str]
                    ) -> list[Result]:
    """The storms of ``args.phases`` against a fresh ``bare_boot.py`` (``--floor``) serving the
    upstream's artifacts (the same bytes) and the same real config as the trees' profile."""
    async with BareBoot(up_dir / REL, REFERENCE / "openshift-pointer-master.ign.json", work / "bare.log",
                        loop=FLOOR_LOOP, keepalive=SERVER_KEEPALIVE) as bare:
        urls = [f"{bare.url}/ipxe/node-{i:05d}" for i in range(args.nodes)]
        by_name = {f"live-{k}.x86_64": sha for k, sha in shas.items()}
        return await storm_phases(args, FLOOR, rnd, [bare.proc.pid], 1, urls, by_name,  # type: ignore[union-attr]
                                  None)


async def one_server(args: argparse.Namespace, work: Path, tree: GitTree | None, name: str, rnd: int,
                     up_url: str, rel: str, shas: dict[str, str], spy: Path | None) -> list[Result]:
    """A fresh server (or replicas) of ``tree``: a cold storm, then a warm one."""
    with contextlib.ExitStack() as cleanup:
        state_store = cleanup.enter_context(throwaway_state_store(args.state_store))
        nodes = [f"node-{i:05d}" for i in range(args.nodes)]
        ports = [free_port() for _ in range(args.replicas)]
        configs = []
        for r, port in enumerate(ports):
            suffix = "" if args.replicas == 1 else f"-{r}"
            shutil.copy(REFERENCE / "openshift-pointer-master.ign.json", work / "master.ign")
            write_json(work / "stream.json", bench_stream(up_url, rel, shas))
            configs.append(write_config(work / f"bootserver{suffix}.yaml", {
                "server": {"listen": f"127.0.0.1:{port}", "base_url": f"http://127.0.0.1:{port}",
                           "admin": {"listen": f"127.0.0.1:{free_port()}"},
                           # the clients, starved on a shared machine, may write a request long after
                           # they connected, which a real machine never does (module docstring)
                           "keepalive_timeout": SERVER_KEEPALIVE},
                "cache_dir": f"cache{suffix}", "state_dir": f"state{suffix}", **state_store,
                "streams": {"bench": {"metadata": str(work / "stream.json")}},
                "profiles": {"master": {"stream": "bench", "mode": "install", "install_dev": "/dev/sda",
                                        "ignition": "master.ign", "boot_once": False}},
                "nodes": {n: {"profile": "master"} for n in nodes}}))
            sync_images(configs[-1], tree)
        paths = signed_chain_paths(configs[0], tree)  # creates the (shared) signing key first
        urls = [f"http://127.0.0.1:{ports[i % len(ports)]}{p}" for i, p in enumerate(paths)]
        by_name = {f"live-{k}.x86_64": sha for k, sha in shas.items()}
        async with contextlib.AsyncExitStack() as servers:
            replicas = [Bootserver(c, p, workers=args.workers, log=work / f"serve-{i}.log", tree=tree)
                        for i, (c, p) in enumerate(zip(configs, ports, strict=True))]
            for bs in replicas:
                await servers.enter_async_context(bs)
            pids = [bs.proc.pid for bs in replicas]  # type: ignore[union-attr]
            results = await storm_phases(args, name, rnd, pids, args.replicas * args.workers, urls, by_name, spy)
        if any(res.storm.failed for res in results):  # what the server said about it
            for i in range(len(replicas)):
                lines = (work / f"serve-{i}.log").read_text(errors="replace").splitlines()
                print(f"{name}: serve-{i}.log, {len(lines)} lines, the last 20:", *lines[-20:], sep="\n",
                      file=sys.stderr)
        return results


def report(results: list[Result], names: list[str], args: argparse.Namespace) -> None:
    """Markdown tables: one row per storm, the medians side by side, each tree against the floor
    (``--floor``), and the steps of the first of each."""
    # the floor's CPU per boot by round and storm, when every machine booted through it
    floor = {(r.round, r.phase): r.cpu_ms for r in results if r.tree == FLOOR and not r.storm.failed}

    def over_floor(r: Result) -> list[str]:  # the table's last column, with --floor
        f = floor.get((r.round, r.phase))
        return [] if not args.floor else ["-" if r.tree == FLOOR or not f else f"{r.cpu_ms / f:.2f}"]

    print(f"## Power-on storm ({args.nodes} machines at once, {args.artifact_kb} KiB artifacts, workers: "
          f"{args.workers}, replicas: {args.replicas}, state store: {args.state_store}, clients modelled: "
          f"iPXE, Ignition, the check-in unit)\n")
    print(markdown_table(
        ["round", "tree", "storm", "booted", "failed", "last up (s)", "requests", "reconnects",
         "server CPU (s)", "CPU per boot (ms)", "server waited for a CPU (s)", "drain", "drain with its cores",
         "peak RSS (MiB)", *(["CPU per boot / floor"] if args.floor else [])],
        [(r.round, r.tree, r.phase, r.storm.booted, sum(r.storm.failed.values()), f"{r.storm.last_up:.1f}",
          r.storm.requests, r.storm.reconnects, f"{r.server_cpu:.1f}", f"{r.cpu_ms:.2f}",
          f"{r.runqueue:.1f}", f"{r.drain:.2f}", f"{r.starved:.2f}", f"{r.rss_mib:.0f}", *over_floor(r))
         for r in results]))
    print()
    if len(names) > 1:
        rows = []
        for phase in args.phases:
            med = {n: {k: median([getattr_path(r, k) for r in results if r.tree == n and r.phase == phase])
                       for k in ("storm.last_up", "cpu_ms", "drain", "starved")} for n in names}
            a, b = names
            for k, what in (("storm.last_up", "last up (s)"), ("cpu_ms", "server CPU per boot (ms)"),
                            ("drain", "drain"), ("starved", "drain with its cores")):
                ratio = med[a][k] / med[b][k] if med[b][k] else float("nan")
                rows.append((phase, what, f"{med[a][k]:.2f}", f"{med[b][k]:.2f}", f"{ratio:.2f}"))
        print(markdown_table(["storm", "median of", names[0], names[1], "this / baseline"], rows))
        print()
    if floor:
        rows = []
        for phase in args.phases:
            for n in names:
                mine = [r for r in results if r.tree == n and r.phase == phase and (r.round, phase) in floor]
                if not mine:
                    continue
                ratios = [r.cpu_ms / floor[r.round, phase] for r in mine]
                rows.append((phase, n, f"{median([r.cpu_ms for r in mine]):.2f}",
                             f"{median([floor[r.round, phase] for r in mine]):.2f}", f"{median(ratios):.2f}",
                             ", ".join(f"{x:.2f}" for x in ratios)))
        print(markdown_table(["storm", "tree", "CPU per boot (ms, median)", f"{FLOOR} (ms, median)",
                              "CPU per boot / floor (median of the rounds)", "each round"], rows))
        print()
    for r in results:
        if r.round != 1:
            continue
        print(f"### {r.tree}, {r.phase} storm: waits per step and retries\n")
        print(markdown_table(["step", "answered 200", "p50 (s)", "p99 (s)", "max (s)", "retries"], [
            (step, len(r.storm.waits[step]), f"{pct(r.storm.waits[step], 50):.3f}",
             f"{pct(r.storm.waits[step], 99):.3f}", f"{max(r.storm.waits[step], default=0):.3f}",
             r.storm.retries[step]) for step in STEPS] + [
            ("kernel and initramfs again (the script's own loop)", "", "", "", "", r.storm.retries[k])
            for k in ("script's own retry",) if r.storm.retries[k]]))
        print()
        if r.storm.failed:
            print(markdown_table(["failed because", "machines"], sorted(r.storm.failed.items(), key=lambda kv: -kv[1])))
            print()


def getattr_path(r: Result, key: str) -> float:
    obj: Any = r
    for part in key.split("."):
        obj = getattr(obj, part)
    return float(obj)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000, help="machines, all at once (default 1000)")
    ap.add_argument("--workers", type=int, default=1, help="bootserver serve --workers N (default 1)")
    ap.add_argument("--artifact-kb", type=int, default=64, help="size of each fake artifact, KiB (default 64)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="bound of each storm, seconds (default 1800)")
    ap.add_argument("--connections", type=int, default=15000,
                    help="requests each client process has in flight at most (default 15000)")
    ap.add_argument("--clients", type=int, help="client processes the machines are spread over "
                    "(default: one per 2,500 machines, at least 2)")
    ap.add_argument("--state-store", choices=["sqlite", "postgresql"], default="sqlite",
                    help="where the timeline and keys live (default sqlite in state_dir)")
    ap.add_argument("--replicas", type=int, default=1, help="serve processes sharing the state store "
                    "(more than 1 needs --state-store postgresql; default 1)")
    ap.add_argument("--baseline", metavar="REF", help="also storm git REF (a temporary worktree), alternating")
    ap.add_argument("--rounds", type=int, default=1, help="rounds per tree (default 1)")
    ap.add_argument("--phases", type=lambda v: v.split(","), default=["cold", "warm"],
                    help="storms per server: cold (a fresh server), warm (again right after); default cold,warm")
    ap.add_argument("--profile", type=Path, help="py-spy collapsed stacks of this tree's first cold storm")
    ap.add_argument("--floor", action="store_true", help="also storm a bare aiohttp app answering the same "
                    "requests (benchmarks/bare_boot.py) each round; report CPU per boot / floor")
    args = ap.parse_args()
    if args.replicas > 1 and args.state_store != "postgresql":
        sys.exit("boot_storm.py: --replicas > 1 needs --state-store postgresql")
    if args.profile is not None:
        args.profile.parent.mkdir(parents=True, exist_ok=True)
    if args.clients is None:
        args.clients = max(2, -(-args.nodes // MACHINES_PER_CLIENT))

    work = Path(tempfile.mkdtemp(prefix="bootserver-bench-storm-"))
    try:
        with contextlib.ExitStack() as cleanup:
            tree = cleanup.enter_context(git_tree(args.baseline)) if args.baseline else None
            trees: list[tuple[str, GitTree | None]] = [("this tree", None)]
            if tree is not None:
                trees.append((f"baseline {tree.label}", tree))
            up_dir = work / "upstream"
            (up_dir / REL).mkdir(parents=True)
            shas = {k: make_file(up_dir / REL / f"live-{k}.x86_64", args.artifact_kb << 10)
                    for k in ("kernel", "initramfs", "rootfs")}
            results: list[Result] = []
            runs = trees + [(FLOOR, None)] * args.floor
            async with Upstream(up_dir, work / "upstream.log") as up:
                for rnd in range(1, args.rounds + 1):
                    for name, t in runs if rnd % 2 else runs[::-1]:
                        sub = work / f"{rnd}-{runs.index((name, t))}"
                        sub.mkdir()
                        if name == FLOOR:
                            results += await one_floor(args, sub, rnd, up_dir, shas)
                        else:
                            spy = args.profile if (t is None and rnd == 1) else None
                            results += await one_server(args, sub, t, name, rnd, up.url, REL, shas, spy)
                        rmtree(sub)
        report(results, [n for n, _ in trees], args)
        if args.profile is not None and args.profile.exists():
            print(f"### Where this tree's cold storm spent its CPU (py-spy, {args.profile})\n")
            print(profile_summary(args.profile))
    finally:
        rmtree(work)


if __name__ == "__main__":
    run_main(main)
