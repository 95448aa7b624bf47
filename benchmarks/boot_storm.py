"""Benchmark (issue 8, target 4): a boot storm of ``--nodes`` simulated nodes booting at once.

Setup on 127.0.0.1: a local upstream (benchmarks/upstream.py) serves small fake artifacts (64 KiB
kernel, initramfs and rootfs by default) named in a stream document; ``bootserver sync-images`` caches
them; the install profile's ``ignition`` is the real openshift-install pointer config from
``tests/data``. The config keeps ``server.max_concurrent`` at its default (256).

Load: one aiohttp client (connector without a connection limit) with every node started at once.
Each node, like iPXE and Ignition would: GET its signed chain URL -> parse the script for the kernel
URL, the initrd URL and the stub URL karg (``coreos.inst.ignition_url=`` in install mode,
``ignition.config.url=`` in live mode) -> GET kernel and initramfs and check their sha256 against the
stream metadata -> GET the stub -> GET its ``ignition.config.merge[0].source`` and check the bytes
against the stub's ``verification.hash`` (sha512). A node stops at its first error. By default
nothing is retried, so every ``503`` is an error; with ``--retries N`` a ``503`` is retried after its
``Retry-After`` (as Ignition retries 5xx answers). Errors are counted by kind (``status 503 script``,
``connection kernel``, ``hash initramfs`` ...).

Reports wall time (s) from the first request to the last answer, errors by kind, nodes that completed,
requests/s, the servers' CPU seconds over the storm (user + system from ``/proc``, every replica and
worker), and the server's peak RSS (``VmHWM``, sum over its process tree and largest process).

``--state-store postgresql --replicas 2`` (issue 17): the timeline and keys live in a throwaway
PostgreSQL cluster (tests/support/pgcluster.py, ``fsync=off``) and ``--replicas`` ``serve`` processes share it,
each with its own port, cache (its own ``sync-images``) and ``state_dir``; node i boots through replica
i mod N (a load balancer keeping a node on one replica), with URLs signed by the shared key. The
replicas start at once on an empty database (they migrate it under the migration lock). Peak RSS is
then summed over every replica.

Usage: ``.venv/bin/python benchmarks/boot_storm.py [--nodes 1000] [--workers 1] [--artifact-kb 64]
[--state-store sqlite|postgresql] [--replicas 1]``
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    REFERENCE,
    Bootserver,
    PeakRss,
    Upstream,
    bench_stream,
    cpu_seconds,
    free_port,
    make_file,
    markdown_table,
    rmtree,
    run_cli,
    throwaway_state_store,
    write_config,
    write_json,
)

STUB_KARGS = ("coreos.inst.ignition_url=", "ignition.config.url=")


class NodeError(Exception):
    """One node's boot failed: ``kind`` (e.g. ``status 503 script``) names the error and the step."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class Storm:
    """Shared state of the simulated nodes: the session, expected hashes (hex sha256 by artifact URL
    path suffix), and counters."""

    def __init__(self, session: aiohttp.ClientSession, shas: dict[str, str], retries: int = 0) -> None:
        self.session = session
        self.shas = shas
        self.retries = retries
        self.retried: collections.Counter[str] = collections.Counter()
        self.requests = 0
        self.errors: collections.Counter[str] = collections.Counter()
        self.done = 0
        self.step_times: dict[str, list[float]] = collections.defaultdict(list)

    async def get(self, url: str, step: str) -> bytes:
        """GET ``url``; return the body. A ``503`` is retried after its ``Retry-After`` (seconds) up to
        ``retries`` times. Raises :class:`NodeError` on a non-200 status or a connection problem (kind
        names the step)."""
        t0 = time.monotonic()
        try:
            for attempt in range(self.retries + 1):
                self.requests += 1
                async with self.session.get(url) as r:
                    body = await r.read()
                    if r.status == 503 and attempt < self.retries:
                        self.retried[step] += 1
                        await asyncio.sleep(float(r.headers.get("Retry-After", "1")))
                        continue
                    if r.status != 200:
                        raise NodeError(f"status {r.status} {step}")
                    break
        except aiohttp.ClientError as e:
            raise NodeError(f"connection {step} ({type(e).__name__})") from None
        except TimeoutError:
            raise NodeError(f"timeout {step}") from None
        self.step_times[step].append(time.monotonic() - t0)
        return body

    async def boot(self, chain_url: str) -> None:
        """One node's boot; counts an error (by kind) or a completed node."""
        try:
            script = (await self.get(chain_url, "script")).decode()
            kernel_line = next(ln for ln in script.splitlines() if ln.startswith("kernel "))
            initrd_line = next(ln for ln in script.splitlines() if ln.startswith("initrd "))
            words = kernel_line.split()
            kernel_url, kargs = words[1], words[2:]
            initrd_url = next(w for w in initrd_line.split() if w.startswith(("http://", "https://")))
            stub_url = next((w.split("=", 1)[1] for w in kargs if w.startswith(STUB_KARGS)), None)
            if stub_url is None:
                raise NodeError("parse script (no stub URL)")
            for step, url in (("kernel", kernel_url), ("initramfs", initrd_url)):
                body = await self.get(url, step)
                if hashlib.sha256(body).hexdigest() != self.shas[url.rsplit("/", 1)[1]]:
                    raise NodeError(f"hash {step}")
            stub = json.loads(await self.get(stub_url, "stub"))
            merge = stub["ignition"]["config"]["merge"][0]
            real = await self.get(merge["source"], "config")
            if merge["verification"]["hash"] != "sha512-" + hashlib.sha512(real).hexdigest():
                raise NodeError("hash config")
            self.done += 1
        except NodeError as e:
            self.errors[e.kind] += 1
        except (StopIteration, KeyError, IndexError, ValueError) as e:
            self.errors[f"parse ({type(e).__name__})"] += 1


def pct(values: list[float], p: float) -> float:
    """The ``p``-th percentile (0-100) of ``values`` (nearest rank), 0 for none."""
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000, help="simulated nodes, all at once (default 1000)")
    ap.add_argument("--workers", type=int, default=1, help="bootserver serve --workers N (passed only when N != 1)")
    ap.add_argument("--artifact-kb", type=int, default=64, help="size of each fake artifact, KiB (default 64)")
    ap.add_argument("--retries", type=int, default=0,
                    help="retry a 503 after its Retry-After up to N times (default 0: a 503 is an error)")
    ap.add_argument("--timeout", type=float, default=300.0, help="bound of the whole storm, seconds (default 300)")
    ap.add_argument("--state-store", choices=["sqlite", "postgresql"], default="sqlite",
                    help="where the timeline and keys live (default sqlite in state_dir)")
    ap.add_argument("--replicas", type=int, default=1, help="serve processes sharing the state store "
                    "(more than 1 needs --state-store postgresql; default 1)")
    args = ap.parse_args()
    if args.replicas > 1 and args.state_store != "postgresql":
        sys.exit("boot_storm.py: --replicas > 1 needs --state-store postgresql")

    work = Path(tempfile.mkdtemp(prefix="bootserver-bench-storm-"))
    cleanup = contextlib.ExitStack()
    try:
        state_store = cleanup.enter_context(throwaway_state_store(args.state_store))
        rel = "prod/builds/1.0/x86_64"
        up_dir = work / "upstream"
        (up_dir / rel).mkdir(parents=True)
        shas = {k: make_file(up_dir / rel / f"live-{k}.x86_64", args.artifact_kb << 10)
                for k in ("kernel", "initramfs", "rootfs")}
        shutil.copy(REFERENCE / "openshift-pointer-master.ign.json", work / "master.ign")
        ports = [free_port() for _ in range(args.replicas)]
        nodes = [f"node-{i:04d}" for i in range(args.nodes)]
        configs = []
        async with Upstream(up_dir, work / "upstream.log") as up:
            write_json(work / "stream.json", bench_stream(up.url, rel, shas))
            for r, port in enumerate(ports):
                suffix = "" if args.replicas == 1 else f"-{r}"
                configs.append(write_config(work / f"bootserver{suffix}.yaml", {
                    "server": {"listen": f"127.0.0.1:{port}", "base_url": f"http://127.0.0.1:{port}",
                               "admin": {"listen": f"127.0.0.1:{free_port()}"}},
                    "cache_dir": f"cache{suffix}", "state_dir": f"state{suffix}", **state_store,
                    "streams": {"bench": {"metadata": str(work / "stream.json")}},
                    "profiles": {"master": {"stream": "bench", "mode": "install", "install_dev": "/dev/sda",
                                            "ignition": "master.ign"}},
                    "nodes": {n: {"profile": "master"} for n in nodes}}))
                rc, _out, err = await run_cli("sync-images", "--config", str(configs[-1]), timeout=300)
                if rc != 0:
                    raise RuntimeError(f"sync-images failed ({rc}): {err}")
        from bootserver.config import load_config
        from bootserver.state.backends import open_store
        from bootserver.urls import Urls

        cfgs = [load_config(str(c)) for c in configs]
        by_name = {f"live-{k}.x86_64": sha for k, sha in shas.items()}
        async with contextlib.AsyncExitStack() as servers:
            # every replica at once, on an empty database: they migrate it and create the first key
            # under the migration lock (a race would fail a start)
            replicas = [Bootserver(c, p, workers=args.workers, log=work / f"serve-{r}.log")
                        for r, (c, p) in enumerate(zip(configs, ports, strict=True))]
            await asyncio.gather(*(servers.enter_async_context(bs) for bs in replicas))
            store = open_store(cfgs[0])
            await store.start()  # the shared signing key the replicas created
            keys = store.keyring()
            await store.close()
            chain = [Urls(cfgs[i % len(cfgs)], keys=lambda: keys).chain(n) for i, n in enumerate(nodes)]
            pids = [bs.proc.pid for bs in replicas]  # type: ignore[union-attr]
            server_cpu0 = sum(cpu_seconds(pid) for pid in pids)
            with contextlib.ExitStack() as peaks:
                rsss = [peaks.enter_context(PeakRss(bs.proc.pid)) for bs in replicas]  # type: ignore[union-attr]
                conn = aiohttp.TCPConnector(limit=0, force_close=False)
                timeout = aiohttp.ClientTimeout(total=120, sock_connect=30)
                async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
                    storm = Storm(session, by_name, args.retries)
                    t0 = time.monotonic()
                    cpu0 = time.process_time()
                    await asyncio.wait_for(asyncio.gather(*(storm.boot(u) for u in chain)), args.timeout)
                    wall = time.monotonic() - t0
                    client_cpu = time.process_time() - cpu0
                    server_cpu = sum(cpu_seconds(pid) for pid in pids) - server_cpu0
                for rss in rsss:
                    rss.sample()
        errors = sum(storm.errors.values())
        total_kb = sum(r.total_kb for r in rsss)
        max_kb = max(r.max_kb for r in rsss)
        processes = sum(r.processes for r in rsss)
        print(f"## Boot storm ({args.nodes} nodes at once, {args.artifact_kb} KiB artifacts, "
              f"workers: {args.workers}, replicas: {args.replicas}, state store: {args.state_store}, "
              f"retries of a 503: {args.retries}, server.max_concurrent: default 256)\n")
        print(markdown_table(["measurement", "result"], [
            ("wall time, first request to last answer", f"{wall:.2f} s"),
            ("nodes that completed all 5 steps", f"{storm.done} of {args.nodes}"),
            ("errors (nodes that stopped)", f"{errors}"),
            ("requests sent", f"{storm.requests}"),
            ("503 answers retried (by step)", ", ".join(f"{k} {v}" for k, v in storm.retried.items()) or "0"),
            ("requests/s", f"{storm.requests / wall:.0f}"),
            ("client CPU time (load generator, one process)", f"{client_cpu:.2f} s"),
            ("bootserver CPU time (user + system, every replica and worker)", f"{server_cpu:.2f} s"),
            ("bootserver peak RSS, sum over the process tree(s)", f"{total_kb / 1024:.0f} MiB ({processes} processes)"),
            ("bootserver peak RSS, largest process", f"{max_kb / 1024:.0f} MiB"),
        ]))
        print()
        if storm.errors:
            print(markdown_table(["error kind", "nodes"], sorted(storm.errors.items(), key=lambda kv: -kv[1])))
            print()
        print(markdown_table(["step", "answered 200", "median (s)", "p99 (s)", "max (s)"], [
            (step, len(v), f"{pct(v, 50):.3f}", f"{pct(v, 99):.3f}", f"{max(v):.3f}")
            for step, v in storm.step_times.items()]))
    finally:
        cleanup.close()
        rmtree(work)


if __name__ == "__main__":
    asyncio.run(main())
