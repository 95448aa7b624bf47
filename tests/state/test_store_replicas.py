"""Issue 48's "done when", serve's part: two ``bootserver serve`` replicas on one PostgreSQL (B with two
workers). A node applied through replica A's config is served by every worker of replica B within 2 s,
with no SIGHUP and no failed request meanwhile; deleted, it is unknown to both; a bad node is refused in
one line with nothing written; racing writes leave exactly one winner; a config whose file now names a
store node is refused at start, naming both origins. The replicas are shared by the module's cases."""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.helpers import BOOTSERVER, REFERENCE, free_port, write_config
from support.pgcluster import PgCluster
from support.stores import needs_pg

from bootserver.cli import main

pytestmark = needs_pg

#: Seconds within which every worker of every replica serves a store write (issue 48, item 4).
LIVE = 2.0
FILE_MAC = "52:54:00:48:00:01"


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``bootserver ARGS`` in this process (as a shell runs it, without Python's start-up each time)."""
    out, err = io.StringIO(), io.StringIO()
    sys.stdin = io.StringIO(stdin or "")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(list(args))
    finally:
        sys.stdin = sys.__stdin__
    return subprocess.CompletedProcess(args, rc, out.getvalue(), err.getvalue())


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``bootserver ARGS`` as a process of its own."""
    return subprocess.run([*BOOTSERVER, *args], input=stdin, capture_output=True, text=True, timeout=60)


def _get(url: str) -> tuple[int, str]:
    """``GET url`` on a new connection (so ``--workers`` spreads them): ``(status, body)``."""
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class Replica:
    def __init__(self, root: Path, url: str, *args: str) -> None:
        root.mkdir()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = write_config(root / "bootserver.yaml", {
            "server": {"listen": f"127.0.0.1:{self.port}", "admin": {"listen": f"127.0.0.1:{free_port()}"}},
            "cache_dir": "cache", "state_dir": "state", "read_through": False, "state_store": url,
            "streams": {"rhcos-4.16": {"metadata": str(REFERENCE / "rhcos-stream-4.16.json")}},
            "profiles": {"live": {"stream": "rhcos-4.16", "mode": "live"}},
            "nodes": {"filed": {"profile": "live", "mac": [FILE_MAC], "addresses": ["127.0.0.1"]}},
        })
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = root / "serve.log"  # a file, not a pipe: a pipe nobody reads would stop the server

    def start(self) -> None:
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen([*BOOTSERVER, "serve", "--config", str(self.config), *self.args],
                                         stdout=subprocess.DEVNULL, stderr=log)
        end = time.monotonic() + 30
        while time.monotonic() < end:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if _get(self.url + "/healthz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)  # waiting for the port, bounded by the deadline
        raise TimeoutError("serve did not answer /healthz")

    def stop(self) -> str:
        if self.proc is None:
            return ""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.log.read_text()

    def boot(self, mac: str) -> str:
        """The iPXE answer of the generic entry for ``mac`` (a node's script names the node)."""
        status, body = _get(f"{self.url}/boot.ipxe?mac={mac}")
        assert status in (200, 404), (status, body)
        return body


@pytest.fixture(scope="module")
def replicas(pg: PgCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Replica, Replica]]:
    root = tmp_path_factory.mktemp("store-replicas")
    url = pg.create_database("storereplicas")
    a, b = Replica(root / "a", url), Replica(root / "b", url, "--workers", "2")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(Replica.start, (a, b)))
    try:
        yield a, b
    finally:
        logs = [a.stop(), b.stop()]
        assert not any("Traceback" in log for log in logs), logs


def _served(replica: Replica, mac: str, name: str, times: int = 8) -> bool:
    """Whether ``times`` requests in a row (new connections: each worker) get node ``name``'s script."""
    return all(f"/{name}" in replica.boot(mac) for _ in range(times))


def _until(check: Any, seconds: float) -> float:
    """Poll ``check()`` until true; the seconds it took. Fails past ``seconds`` (plus the poll's own time)."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < seconds, f"not within {seconds} s"
        time.sleep(0.02)  # poll interval, bounded by the deadline
    return time.monotonic() - start


def test_a_node_applied_through_one_replica_is_served_by_every_worker_of_the_other(
        replicas: tuple[Replica, Replica], tmp_path: Path) -> None:
    a, b = replicas
    mac = "52:54:00:48:01:01"
    assert "/store-1" not in b.boot(mac)
    failed: list[tuple[int, str]] = []
    stop = threading.Event()

    def steady() -> None:  # a file node's script, asked all along: no request fails during the swaps
        while not stop.is_set():
            status, body = _get(f"{b.url}/boot.ipxe?mac={FILE_MAC}")
            if status != 200 or "/filed" not in body:
                failed.append((status, body))
            time.sleep(0.005)  # a steady stream, not a flood of the 2 cores the replicas share

    asker = threading.Thread(target=steady)
    asker.start()
    try:
        nodes = f'nodes: {{store-1: {{profile: live, mac: ["{mac}"], addresses: [127.0.0.1]}}}}'
        done = _cli("nodes", "apply", "-f", "-", "--config", str(a.config), stdin=nodes)
        assert (done.returncode, done.stdout) == (0, "store-1 created\n"), done.stderr
        took = _until(lambda: _served(b, mac, "store-1") and _served(a, mac, "store-1", 2), LIVE)
        print(f"store-1 served by both replicas {took:.2f} s after nodes apply returned")

        # changed through B: A serves the change
        nodes = nodes.replace("addresses: [127.0.0.1]", "addresses: [127.0.0.1], hostname: web-one")
        done = _cli("nodes", "apply", "-f", "-", "--config", str(b.config), stdin=nodes)
        assert done.stdout == "store-1 updated\n", done.stderr
        _until(lambda: "web-one" in _get(f"{a.url}/ignition/store-1")[1] or _served(a, mac, "store-1"), LIVE)

        # deleted: unknown to both (what a machine no node matches gets), its history stays readable
        done = _cli("nodes", "delete", "store-1", "--config", str(b.config))
        assert done.stdout == "store-1 deleted\n", done.stderr
        _until(lambda: not any("/store-1" in r.boot(mac) for r in (a, a, b, b, b, b)), LIVE)
        shown = _cli("nodes", "show", "store-1", "--config", str(a.config))
        assert shown.returncode == 0 and "script" in shown.stdout, shown
    finally:
        stop.set()
        asker.join()
    assert failed == []


def test_a_bad_node_is_refused_in_one_line_and_racing_writes_leave_one_winner(
        replicas: tuple[Replica, Replica]) -> None:
    a, b = replicas
    bad = _cli("nodes", "apply", "-f", "-", "--config", str(b.config),
               stdin="nodes: {fine: {profile: live}, broken: {profile: live, mac: [nope]}}")
    assert (bad.returncode, bad.stdout) == (2, "") and bad.stderr.count("\n") == 1, bad
    assert bad.stderr.startswith("bootserver: <stdin>: nodes.broken.mac")
    assert "fine" not in _cli("nodes", "export", "--config", str(a.config)).stdout

    for round_ in range(2):
        mac = f"52:54:00:48:02:{round_:02x}"
        asks = [(str(r.config), f'nodes: {{{name}-{round_}: {{profile: live, mac: ["{mac}"]}}}}')
                for name, r in (("racer-a", a), ("racer-b", b))]
        with concurrent.futures.ThreadPoolExecutor(2) as pool:  # two processes, one through each replica
            runs = list(pool.map(lambda ask: _run("nodes", "apply", "-f", "-", "--config", ask[0], stdin=ask[1]),
                                 asks))
        won = [r for r in runs if r.returncode == 0]
        lost = [r for r in runs if r.returncode != 0]
        assert len(won) == 1 and len(lost) == 1, runs
        winner = won[0].stdout.split()[0]
        assert lost[0].stderr == (f"bootserver: nodes.{'racer-b' if winner.startswith('racer-a') else 'racer-a'}"
                                  f"-{round_}.mac: MAC {mac} is already the MAC of node {winner} (the state store)\n")


def test_a_file_that_now_names_a_store_node_is_refused_naming_both(
        replicas: tuple[Replica, Replica], tmp_path: Path) -> None:
    a, _ = replicas
    done = _cli("nodes", "apply", "-f", "-", "--config", str(a.config), stdin="nodes: {twin: {profile: live}}")
    assert done.returncode == 0, done.stderr
    try:
        other = tmp_path / "other.yaml"
        shutil.copy(a.config, other)
        text = other.read_text().replace("nodes:\n", "nodes:\n  twin: {profile: live}\n", 1)
        other.write_text(text.replace(f"127.0.0.1:{a.port}", f"127.0.0.1:{free_port()}"))
        start = _run("serve", "--config", str(other))
        assert start.returncode == 2 and start.stderr.splitlines()[-1] == (
            f"bootserver: nodes.twin: node twin is defined in {other} and in the state store; a name may be "
            "defined once (remove it from the file, or `bootserver nodes delete twin`)")
    finally:
        _cli("nodes", "delete", "twin", "--config", str(a.config))
