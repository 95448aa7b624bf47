"""The benchmark harness itself still runs (a small boot storm through two workers): the figures in
docs/benchmarks.md come from these scripts, so a broken script must fail here, not on the next
measurement. Only the Python parts; nginx and wrk runs stay out of the test suite."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from support.helpers import REPO


def _processes() -> dict[int, tuple[int, str]]:
    """Every process: pid -> (parent pid, command line with spaces)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:  # gone meanwhile
                continue
            found[int(entry.name)] = (int(stat.rsplit(")", 1)[1].split()[1]), cmdline)
    return found


def _left_behind(tmp_path: Path, descendants: set[int] = frozenset()) -> list[str]:  # type: ignore[assignment]
    """The command lines of processes still running that name ``tmp_path`` (the benchmark's servers and
    PostgreSQL cluster: their folders are under it) or are among ``descendants``, waiting up to 10 s for
    them to go."""
    deadline = time.monotonic() + 10
    while True:
        left = [cmd for pid, (_, cmd) in _processes().items()
                if (str(tmp_path) in cmd or pid in descendants) and pid != os.getpid()]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)  # poll interval, bounded by the deadline


def test_small_boot_storm_through_two_workers_boots_every_machine_and_the_floor(tmp_path: Path) -> None:
    """``--floor``: the same client boots every machine through the bare app too (benchmarks/bare_boot.py:
    its script, artifacts' sha256, stub's hash and check-in URL pass the client's checks), and each of this
    tree's storms gets its CPU per boot over the floor's. Its servers end with it (issue 52)."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "boot_storm.py"), "--nodes", "20",
                           "--workers", "2", "--floor"], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _left_behind(tmp_path) == [] and list(tmp_path.iterdir()) == []
    for phase in ("cold", "warm"):  # booted 20, failed 0; a ratio to the floor of the same round
        assert re.search(rf"^\| 1 \| this tree \| {phase} \| 20 \| 0 \|.* \| [0-9.]+ \|$", proc.stdout, re.M), \
            proc.stdout
        assert re.search(rf"^\| 1 \| floor: bare aiohttp \(asyncio\) \| {phase} \| 20 \| 0 \|.* \| - \|$",
                         proc.stdout, re.M), proc.stdout
        assert re.search(rf"^\| {phase} \| this tree \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$",
                         proc.stdout, re.M), proc.stdout
    for step in ("script", "kernel", "initramfs", "stub", "config", "checkin"):
        assert len(re.findall(rf"^\| {step} \| 20 \|", proc.stdout, re.M)) == 4, proc.stdout


@pytest.mark.skipif(not list(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl")),
                    reason="PostgreSQL is not installed (Debian package postgresql)")
def test_a_boot_storm_stopped_by_sigterm_stops_its_replicas_clients_and_postgresql() -> None:
    """Issue 52: ``boot_storm.py --state-store postgresql --replicas 2`` left its PostgreSQL cluster
    running. SIGTERM while its clients storm two replicas: it exits 143 and nothing it started is left
    (its serve processes, their workers, its client processes, the cluster), nor their folders. Its
    temporary folder is one the cluster's user (``nobody`` under root: tests/support/pgcluster.py) can
    enter, which pytest's is not."""
    tmp_path = Path(tempfile.mkdtemp(prefix="bootserver-test-bench-"))
    tmp_path.chmod(0o755)
    try:
        _stopped_by_sigterm(tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _stopped_by_sigterm(tmp_path: Path) -> None:
    out = (tmp_path / "out").open("w")
    bench = subprocess.Popen([sys.executable, str(REPO / "benchmarks" / "boot_storm.py"), "--nodes", "20",
                              "--state-store", "postgresql", "--replicas", "2", "--clients", "2"],
                             stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        deadline = time.monotonic() + 120
        while True:  # the cluster, both replicas and the client processes all running
            procs = _processes()
            mine, todo = set(), [bench.pid]
            while todo:
                pid = todo.pop()
                kids = [p for p, (ppid, _) in procs.items() if ppid == pid]
                mine.update(kids)
                todo += kids
            serving = [p for p in mine if " serve --config " in procs[p][1]]
            clients = [p for p in mine if "multiprocessing" in procs[p][1] and "resource_tracker" not in procs[p][1]]
            postgres = [p for p, (_, cmd) in procs.items() if "postgres -D " + str(tmp_path) in cmd]
            if len(serving) >= 2 and clients and postgres:
                break
            assert bench.poll() is None and time.monotonic() < deadline, (tmp_path / "out").read_text()[-3000:]
            time.sleep(0.1)  # poll interval, bounded by the deadline
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(90) == 128 + signal.SIGTERM, (tmp_path / "out").read_text()[-3000:]
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
        out.close()
    assert "stopped by SIGTERM" in (tmp_path / "out").read_text()
    assert _left_behind(tmp_path, mine) == []
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_event_loops_benchmark_storms_and_downloads_on_asyncio_and_uvloop() -> None:
    """``event_loops.py`` (the bench extra's uvloop; skipped without it): each loop's bare app boots every
    machine of a small cold storm and serves every client the whole file, and each table has its median
    row with both loops' figures and their ratio."""
    pytest.importorskip("uvloop")
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "event_loops.py"), "--nodes", "20",
                           "--clients", "2", "--size-mb", "8", "--rounds", "1"], capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "loop.sendfile: asyncio its own, uvloop " in proc.stdout, proc.stdout
    assert re.search(r"^\| 1 \| 20 / 0 \| 20 / 0 \| [0-9.]+ \| [0-9.]+ \| ([0-9.]+|-) \|", proc.stdout, re.M), \
        proc.stdout
    # the downloads' row: CPU per GiB of each loop and their ratio, MB/s of each (every byte arrived)
    assert re.search(r"^\| 1 \| [0-9.]+ \| [0-9.]+ \| ([0-9.]+|-) \| [1-9][0-9]* \| [1-9][0-9]* \| [0-9.]+ \|$",
                     proc.stdout, re.M), proc.stdout
    assert len(re.findall(r"^\| median \|", proc.stdout, re.M)) == 2, proc.stdout


def test_iso_build_benchmark_runs() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "iso_build.py"), "--nodes", "2", "--cli", "1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"^\| one more node, loaders cached \(in-process\) \| 1 \|", proc.stdout, re.M), proc.stdout


def test_request_parts_benchmark_runs() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "request_parts.py"), "--calls", "200"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"^\| the same inside `asyncio.timeout\(60\)` \| [0-9.]+ \|$", proc.stdout, re.M), proc.stdout
    assert re.search(r"^\| `Signer.check`, the same signature again \(remembered\) \| [0-9.]+ \|$", proc.stdout,
                     re.M), proc.stdout
    assert re.search(r"^\| a storm's timeline batch beside a busy thread: the writer's CPU per record \(336 records\) "
                     r"\| [0-9.]+ \|$", proc.stdout, re.M), proc.stdout


def test_node_images_benchmark_runs() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "node_images.py"), "--nodes", "3", "--cli", "1"],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "byte for byte equal to the served image: 1 of 1" in proc.stdout, proc.stdout
    assert re.search(r"^\| a further node \(its region only\) \| 2 \|", proc.stdout, re.M), proc.stdout


def test_openpgp_benchmark_runs() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "openpgp.py"), "--size-mb", "4", "--runs", "1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"^\| 1 \| sha256 \+ OpenPGP \(gpgv\) \| [0-9.]+ \|", proc.stdout, re.M), proc.stdout


def test_scripts_benchmark_against_a_baseline_tree_prints_both_ratios() -> None:
    """``scripts.py --baseline HEAD``: HEAD served from a temporary git worktree beside this tree, both
    under wrk in turn; the worktree is gone afterwards."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "scripts.py"), "--baseline", "HEAD",
                           "--nodes", "5", "--rounds", "1", "--duration", "1", "--connections", "4",
                           "--threads", "1"], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for ratio in (r"CPU per request, this tree / baseline \(lower is better\)",
                  r"req/s, this tree / baseline \(higher is better\)"):
        assert re.search(rf"^\| {ratio} \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$", proc.stdout, re.M), proc.stdout
    assert re.search(r"^\| 1 \| baseline HEAD \([0-9a-f]{7}\) \| [0-9]+ \|", proc.stdout, re.M), proc.stdout
    where = re.search(r"^baseline HEAD \([0-9a-f]{7}\) checked out in (\S+)$", proc.stderr, re.M)
    assert where, proc.stderr[-3000:]
    listed = subprocess.run(["git", "-C", str(REPO), "worktree", "list"], capture_output=True, text=True).stdout
    assert where[1] not in listed and not Path(where[1]).exists()


def test_scripts_benchmark_counts_instructions_under_callgrind() -> None:
    """``scripts.py --count instructions``: the servers under callgrind, a fixed number of requests counted
    per round; the table gives instructions per request for bare and bootserver, and bootserver does more."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "scripts.py"), "--count", "instructions",
                           "--nodes", "2", "--rounds", "1", "--requests", "8", "--connections", "2", "--idle", "0"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = re.search(r"^\| user-space instructions per request \(median of rounds\) \| ([0-9,]+) \| ([0-9,]+) \|",
                    proc.stdout, re.M)
    assert got, proc.stdout
    bare, bootserver = (int(g.replace(",", "")) for g in got.groups())
    assert 0 < bare < bootserver, proc.stdout


def test_api_benchmark_pages_through_every_store_node() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "api.py"), "--nodes", "120", "--rounds", "1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"^\| GET /api/v1/nodes\?limit=100 \(every page\) \| 2 \| [0-9.]+ \|", proc.stdout, re.M), \
        proc.stdout


def test_store_nodes_benchmark_runs() -> None:
    """``store_nodes.py`` on sqlite with a few nodes: the apply of one file, serve's start with them, one
    node applied and served (docs/benchmarks.md has the 10,000-node PostgreSQL run)."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "store_nodes.py"), "--nodes", "20", "--writes",
                           "2", "--state-store", "sqlite"], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"^nodes apply of 20 nodes in one file: [0-9.]+ s", proc.stdout, re.M), proc.stdout
    assert re.search(r"^serve with 20 store nodes: up in [0-9.]+ s, peak RSS [0-9]+ MiB", proc.stdout, re.M)
    assert re.search(r"over 2 writes .*: median [0-9.]+ s, max [0-9.]+ s$", proc.stdout, re.M), proc.stdout
