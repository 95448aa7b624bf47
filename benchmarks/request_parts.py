"""Benchmark (issue 22, item 3): what some building blocks of a script request cost on this machine,
each alone in a loop (CPU microseconds per call, ``time.process_time``): the figures behind the choices
in ``bootserver.http.gate.Limits`` (one deadline watch instead of an ``asyncio.timeout`` per request)
and ``bootserver.signing.Signer`` (the keys file looked at once per millisecond, verified signatures
remembered), and issue 43's: a stream's metadata looked at with a ``stat``, the device listener's
headers set in ``front`` rather than by a per-answer hook; and parts of a cold node boot (issue 40 item 3).
Run with ``PYTHONPATH`` on a worktree of an older tree, it times that tree's parts (``-`` where the
tree has no such part).
A loop alone flatters every part (warm caches, no other work in between): under load the
shares in a py-spy profile (``scripts.py --profile``) are the figures that count; these say what a part
costs at best.

Usage: ``.venv/bin/python benchmarks/request_parts.py [--calls 100000]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REFERENCE, markdown_table, run_main

from bootserver.signing import Keyring, Signer


def per_call(calls: int, f: Callable[[], object]) -> float:
    """CPU microseconds per call of ``f`` over ``calls`` calls."""
    t = time.process_time()
    for _ in range(calls):
        f()
    return (time.process_time() - t) / calls * 1e6


async def per_await(calls: int, f: Callable[[], Awaitable[object]]) -> float:
    """CPU microseconds per ``await f()`` over ``calls`` awaits."""
    t = time.process_time()
    for _ in range(calls):
        await f()
    return (time.process_time() - t) / calls * 1e6


def _metadata_look(n: int) -> list[tuple[str, str]]:
    """A look at a stream's synced metadata copy (``StreamCatalog.cached``, at most once per
    millisecond per stream, issue 43): opened without links below ``cache_dir`` and ``fstat`` (each
    look until 99cca21), against one ``stat`` of its path (now; opened only when it changed)."""
    from bootserver.files import open_file

    with tempfile.TemporaryDirectory(prefix="bootserver-bench-parts-") as d:
        root = Path(d)
        (root / "streams").mkdir()
        (root / "streams" / "rhcos-4.16.json").write_text("{}")
        path = str(root / "streams" / "rhcos-4.16.json")

        def opened() -> None:
            fd = open_file(root, Path("streams/rhcos-4.16.json"))
            os.fstat(fd)
            os.close(fd)

        return [("a stream's metadata copy opened without links, `fstat`", f"{per_call(n, opened):.2f}"),
                ("the same looked at with one `stat`", f"{per_call(n, lambda: os.stat(path)):.2f}")]


async def _answer_headers(n: int) -> list[tuple[str, str]]:
    """The two ways of putting ``Server`` and ``nosniff`` on every answer (issue 43): an application's
    ``on_response_prepare`` signal with a hook setting them (what aiohttp runs per answer: its
    ``send``), and setting them on the answer (what ``bootserver.http.app.front`` does)."""
    from aiohttp import hdrs, web
    from aiohttp.test_utils import make_mocked_request

    async def hook(request: web.Request, response: web.StreamResponse) -> None:
        response.headers[hdrs.SERVER] = "bootserver"
        response.headers["X-Content-Type-Options"] = "nosniff"

    app = web.Application()
    app.on_response_prepare.append(hook)
    app.freeze()
    request = make_mocked_request("GET", "/ipxe/node-0", app=app)
    response = web.Response(text="#!ipxe\n", content_type="text/plain")

    def direct() -> None:
        response.headers[hdrs.SERVER] = "bootserver"
        response.headers["X-Content-Type-Options"] = "nosniff"

    return [("the two headers through an `on_response_prepare` hook (the signal's `send`)",
             f"{await per_await(n, lambda: app.on_response_prepare.send(request, response)):.2f}"),
            ("the two headers set on the answer", f"{per_call(n, direct):.2f}")]


def _cold_boot_parts(n: int) -> list[tuple[str, str]]:
    """Parts of a cold node boot (issue 40 item 3): a published artifact and its sha256 sidecar opened
    without links (``ArtifactCache.open_published``, two per boot), the boot's start read for the
    boot-duration metric (the latest boot's rows, against the whole history the worker thread read
    before), the artifact attribution on a timeline whose 10,000 scripts went to one address (the storm
    benchmark's case), a real config's path resolved (per stub and config request before), the stub's
    ``Accept`` negotiated, and a client's address family parsed (per script request, remembered now)."""
    from bootserver.artifacts.cache import ArtifactCache
    from bootserver.config import IGNITION_VERSIONS
    from bootserver.ignition import negotiate_version
    from bootserver.state.sqlite_timeline import Timeline
    from bootserver.values import host_family

    rows = []
    with tempfile.TemporaryDirectory(prefix="bootserver-bench-parts-") as d:
        root = Path(d)
        release = root / "cache" / "artifacts" / "rhcos" / "x86_64" / "416.94"
        release.mkdir(parents=True)
        (release / "kernel").write_bytes(bytes(65536))
        (release / ".kernel.sha256").write_text("0" * 64 + "\n")
        cache = ArtifactCache(root / "cache")

        def published() -> None:
            found = cache.open_published(("rhcos", "x86_64", "416.94", "kernel"))
            assert found is not None
            os.close(found.fd)

        rows.append(("a published artifact and its sidecar opened without links (`open_published`)",
                     f"{per_call(n // 10, published):.2f}"))
        timeline = Timeline(root / "state")
        try:
            now = time.time()
            rows_made = min(10_000, n // 5)  # 10,000 at the default --calls; few in the test's short run
            for i in range(rows_made):
                timeline.record(f"n{i:05d}", "script", mode="install", ip="127.0.0.1", at=now - rows_made + i)
            middle = f"n{rows_made // 2:05d}"
            started = getattr(timeline, "boot_started", None)  # None in a tree before issue 40's change
            rows += [("the boot's start: the latest boot's rows on the read connection (`Timeline.boot_started`)",
                      "-" if started is None else f"{per_call(n // 10, lambda: started(middle)):.2f}"),
                     ("the same from the whole history (`Timeline.events`, in a worker thread before)",
                      f"{per_call(n // 10, lambda: timeline.events(middle)):.2f}"),
                     (f"artifact attribution, {rows_made:,} scripts to one address (`Timeline.attribute`)",
                      f"{per_call(n // 10, lambda: timeline.attribute('127.0.0.1')):.2f}")]
        finally:
            timeline.close()
        ign = root / "master.ign"
        ign.write_text("{}")
        rows.append(("a real config's path resolved (`Path.resolve`)", f"{per_call(n // 10, ign.resolve):.2f}"))
    accept = "application/vnd.coreos.ignition+json;version=3.4.0, */*;q=0.1"
    parse = getattr(negotiate_version, "__wrapped__", negotiate_version)  # not remembered before issue 40
    rows += [("the stub's `Accept` negotiated, remembered (`negotiate_version`)",
              f"{per_call(n, lambda: negotiate_version(accept, '3.4.0', IGNITION_VERSIONS)):.2f}"),
             ("the same parsed each time",
              f"{per_call(n, lambda: parse(accept, '3.4.0', IGNITION_VERSIONS)):.2f}"),
             ("a client's address family parsed (`host_family`: `ipaddress`)",
              f"{per_call(n, lambda: host_family('127.0.0.1')):.2f}")]
    return rows


def _batch_beside_a_busy_thread(batches: int) -> list[tuple[str, str]]:
    """A storm's timeline batches (``Timeline.record_many``: 21 machines x the 8 events of a cold boot,
    168 records each, as a 2,000-machine storm commits them) while another thread runs Python the whole
    time, as the event loop does in a storm: the writer's own CPU (``time.thread_time``) and wall time
    per record. sqlite3 lets go of the GIL around every step, so a statement per row waits for the busy
    thread each time (issue 40: ``state.sqlite_batch``)."""
    import threading

    from bootserver.state.sqlite_timeline import Timeline
    from bootserver.timeline import Record

    events = ("script", "kernel-requested", "kernel-completed", "initramfs-requested", "initramfs-completed",
              "stub", "config", "checkin")
    work = []
    for b in range(batches):
        machines = [(f"n{b * 21 + i:05d}", f"127.1.{(b * 21 + i) // 250}.{(b * 21 + i) % 250 + 1}") for i in range(21)]
        work.append([Record(node, event, "install", 1e9 + b, ip,
                            {"bytes": 65536, "status": 200} if event.endswith("completed") else None)
                     for event in events for node, ip in machines])
    stop = threading.Event()

    def busy() -> None:
        x = 0
        while not stop.is_set():
            x += 1

    with tempfile.TemporaryDirectory(prefix="bootserver-bench-parts-") as d:
        timeline = Timeline(Path(d) / "state")
        spinner = threading.Thread(target=busy)
        spinner.start()
        try:
            cpu, wall = time.thread_time(), time.perf_counter()
            for batch in work:
                timeline.record_many(batch)
            cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
        finally:
            stop.set()
            spinner.join()
            timeline.close()
    records = batches * len(events) * 21
    return [(f"a storm's timeline batch beside a busy thread: the writer's CPU per record ({records:,} records)",
             f"{cpu / records * 1e6:.2f}"),
            ("the same, wall time per record", f"{wall / records * 1e6:.2f}")]


async def _first_renders(nodes: int) -> list[tuple[str, str]]:
    """A node's first boot script and stub (what a cold boot renders once per node): ``BootService``'s
    render of each of ``nodes`` fresh nodes of one install profile (RHCOS 4.16 metadata from
    ``tests/data`` as a local file, a real config), CPU us per node."""
    import shutil

    from bootserver.config import parse_config
    from bootserver.runtime import Runtime
    from bootserver.service import BootService

    with tempfile.TemporaryDirectory(prefix="bootserver-bench-parts-") as d:
        root = Path(d)
        shutil.copy(REFERENCE / "rhcos-stream-4.16.json", root / "stream.json")
        shutil.copy(REFERENCE / "openshift-pointer-master.ign.json", root / "master.ign")
        names = [f"n{i:05d}" for i in range(nodes + 1)]
        config = parse_config({
            "server": {"base_url": "http://127.0.0.1:8080"}, "cache_dir": "cache", "state_dir": "state",
            "streams": {"rhcos": {"metadata": str(root / "stream.json")}},
            "profiles": {"p": {"stream": "rhcos", "install_dev": "/dev/sda", "ignition": "master.ign"}},
            "nodes": {n: {"profile": "p"} for n in names}}, "parts.yaml", root)
        svc = BootService(config, Runtime(config))
        await svc.runtime.start()
        try:
            await svc.script(names[0])  # the metadata loaded, the keys made
            t = time.process_time()
            for n in names[1:]:
                await svc.script(svc.node(n))
            script = (time.process_time() - t) / nodes * 1e6
            t = time.process_time()
            for n in names[1:]:
                await svc.stub(svc.node(n))
            stub = (time.process_time() - t) / nodes * 1e6
        finally:
            await svc.runtime.close()
    return [(f"a node's first boot script (`BootService.script`, {nodes} fresh nodes)", f"{script:.2f}"),
            (f"a node's first stub (`BootService.stub`, {nodes} fresh nodes)", f"{stub:.2f}")]


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=100_000, help="calls per part (default 100000)")
    args = ap.parse_args()
    n = args.calls

    async def handler() -> int:
        return 1

    async def bare() -> int:
        return await handler()

    async def with_timeout() -> int:
        async with asyncio.timeout(60):
            return await handler()

    rows = [("await a handler", f"{await per_await(n, bare):.2f}"),
            ("the same inside `asyncio.timeout(60)`", f"{await per_await(n, with_timeout):.2f}")]
    with tempfile.TemporaryDirectory(prefix="bootserver-bench-parts-") as d:
        keys = Keyring.load_or_create(Path(d))
        rows.append(("`os.stat` of the keys file", f"{per_call(n, lambda: os.stat(keys.path)):.2f}"))
        signer = Signer(keys)
        query = dict(p.split("=", 1) for p in signer.query("node-0", "/ipxe/node-0", 3600).split("&"))
        exp, sig = query["exp"], query["sig"]
        fresh = Signer(keys)

        def first_sight() -> bool:
            fresh._verified.clear()  # measuring the HMAC path on purpose
            return fresh.check("node-0", "/ipxe/node-0", exp, sig)

        rows.append(("`Signer.check`, a signature seen for the first time", f"{per_call(n, first_sight):.2f}"))
        rows.append(("`Signer.check`, the same signature again (remembered)",
                     f"{per_call(n, lambda: signer.check('node-0', '/ipxe/node-0', exp, sig)):.2f}"))
    rows += _metadata_look(n)
    rows += await _answer_headers(n)
    rows += _cold_boot_parts(n)
    rows += _batch_beside_a_busy_thread(max(2, min(100, n // 1000)))
    rows += await _first_renders(max(10, min(1000, n // 50)))
    print(f"## Parts of a script request, each alone ({n} calls, CPU us per call)\n")
    print(markdown_table(["part", "us"], rows))


if __name__ == "__main__":
    run_main(main)
