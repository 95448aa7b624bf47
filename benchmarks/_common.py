"""Shared helpers of the benchmark scripts in ``benchmarks/`` (not part of bootserver itself).

Everything here talks to 127.0.0.1 only, and every process it starts runs in its own process group so
that :func:`stop` can end it (and its children, e.g. ``serve --workers N``) for sure. Units: sizes in
bytes unless a name says otherwise (``*_kb`` is KiB as the kernel reports it), times in seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
# the one copy of what the tests use too
from support.helpers import BOOTSERVER, REFERENCE, REPO, free_port, run_cli, write_config  # noqa: E402,F401

PY = sys.executable
MB = 1_000_000  # throughput figures are in MB/s = 10^6 bytes per second


def run_main(main: Callable[[], Any]) -> None:
    """Run a benchmark's ``main`` (a coroutine function through ``asyncio.run``, or a plain function)
    so that whatever ends it, the servers and clusters it started stop with it: SIGTERM and SIGHUP
    become SIGINT (a plain function gets ``KeyboardInterrupt``; ``asyncio.run`` cancels the main task),
    so every ``finally`` and context manager on the way out runs, as at a normal end or an exception.
    Exits with ``main``'s return value (an int) or 0, 128 + the signal's number after a signal."""
    got: list[int] = []

    def interrupted(signum: int, _frame: object) -> None:
        got.append(signum)
        signal.raise_signal(signal.SIGINT)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupted)
    try:
        result = asyncio.run(main()) if inspect.iscoroutinefunction(main) else main()
    except KeyboardInterrupt:
        sig = got[0] if got else signal.SIGINT
        print(f"{Path(sys.argv[0]).name}: stopped by {signal.Signals(sig).name}; the servers and clusters "
              "it started are stopped", file=sys.stderr)
        sys.exit(128 + sig)
    sys.exit(result if isinstance(result, int) else 0)


def make_file(path: Path, size: int) -> str:
    """Write ``size`` bytes of incompressible data to ``path``; return its sha256 (hex)."""
    block = os.urandom(1 << 20)
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        i = 0
        while left > 0:
            chunk = (i.to_bytes(8, "big") + block[8:])[:left]
            f.write(chunk)
            h.update(chunk)
            left -= len(chunk)
            i += 1
    return h.hexdigest()


def sha256_file(path: Path) -> str:
    """The sha256 (hex) of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def read_through_page_cache(paths: Iterable[Path]) -> None:
    """Read every file once (1 MiB blocks, discarded) so later reads come from the page cache."""
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 20):
                pass


async def wait_http(url: str, deadline: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    """Poll ``url`` every 50 ms until it answers with a status below 500, for at most ``deadline``
    seconds (``TimeoutError``); with ``proc``, fail at once (``RuntimeError``) if that process exited."""
    end = time.monotonic() + deadline
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s:
        while time.monotonic() < end:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{proc.args!r} exited {proc.returncode} before answering {url}")
            try:
                async with s.get(url) as r:
                    if r.status < 500:
                        return
            except (TimeoutError, aiohttp.ClientError):
                pass
            await asyncio.sleep(0.05)
    raise TimeoutError(url)


async def curl(url: str, out: str = "/dev/null", timeout: float = 600.0) -> tuple[float, float, int]:
    """GET ``url`` with one ``curl`` process; return (time to first byte, total time, bytes received).

    Raises ``RuntimeError`` on an HTTP error, a short body (curl checks ``Content-Length``) or when
    curl takes longer than ``timeout`` seconds (``--max-time``).
    """
    p = await asyncio.create_subprocess_exec(
        "curl", "-sS", "--fail", "--max-time", str(timeout), "-o", out,
        "-w", "%{time_starttransfer} %{time_total} %{size_download}", url,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out_b, err_b = await p.communicate()
    if p.returncode != 0:
        raise RuntimeError(f"curl {url}: exit {p.returncode}: {err_b.decode().strip()}")
    ttfb, total, size = out_b.decode().split()
    return float(ttfb), float(total), int(size)


async def curl_many(urls: Sequence[str], expect_size: int | None = None,
                    timeout: float = 600.0) -> tuple[float, list[tuple[float, float, int]]]:
    """Start one ``curl -o /dev/null`` per URL at once; return (wall seconds until the last finished,
    per-client results as :func:`curl`). Raises ``RuntimeError`` if any client failed or, with
    ``expect_size``, received another number of bytes."""
    t0 = time.monotonic()
    results = await asyncio.gather(*(curl(u, timeout=timeout) for u in urls))
    wall = time.monotonic() - t0
    if expect_size is not None:
        bad = [r[2] for r in results if r[2] != expect_size]
        if bad:
            raise RuntimeError(f"{len(bad)} clients got a wrong size ({bad[:3]}..., expected {expect_size})")
    return wall, results


def time_v(cmd: list[str]) -> tuple[float, int, int]:
    """Run ``cmd`` under /usr/bin/time -v; return (wall seconds, peak RSS KiB, exit code)."""
    t0 = time.monotonic()
    p = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    wall = time.monotonic() - t0
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    if p.returncode != 0:
        print(p.stderr[-2000:], file=sys.stderr)
    return wall, int(m[1]) if m else -1, p.returncode


# --- processes ---------------------------------------------------------------------------------------

def start(cmd: Sequence[str], log: Path | None = None, **kwargs: Any) -> subprocess.Popen:
    """Start ``cmd`` in a new session (its own process group), stdout and stderr to ``log`` (or
    /dev/null)."""
    out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115 - closed in finally
    try:
        return subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                **kwargs)
    finally:
        if log is not None:
            out.close()  # type: ignore[union-attr]


def stop(proc: subprocess.Popen | None, grace: float = 10.0) -> None:
    """SIGTERM ``proc``'s process group, wait up to ``grace`` seconds, then SIGKILL the group.
    Never raises for a process that is already gone."""
    if proc is None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
        # the leader is gone; make sure no child of the group survives it
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        return


async def wait_listeners(port: int, n: int, deadline: float = 30.0) -> None:
    """Wait until ``n`` sockets listen on 127.0.0.1:``port`` (``/proc/net/tcp``; one per worker of
    ``serve --workers N``). Raises ``TimeoutError`` after ``deadline`` seconds."""
    end = time.monotonic() + deadline
    want = f"0100007F:{port:04X}"
    while time.monotonic() < end:
        rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
        if sum(1 for r in rows if r[1] == want and r[3] == "0A") >= n:
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{n} listeners on 127.0.0.1:{port}")


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants alive now (from the ppid field of ``/proc/*/stat``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds (``/proc/<pid>/stat`` utime + stime) of ``pid`` and its live
    descendants (``serve --workers N``'s workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in process_tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


def runqueue_seconds(pid: int) -> float:
    """Seconds the threads of ``pid`` and its live descendants spent runnable but waiting for a CPU
    (``/proc/<pid>/task/<tid>/schedstat``, second field, ns): on a shared machine, the time the server
    would have run had a core been free."""
    total = 0
    for p in process_tree(pid):
        for stat in Path(f"/proc/{p}/task").glob("*/schedstat"):
            with contextlib.suppress(OSError, IndexError, ValueError):
                total += int(stat.read_text().split()[1])
    return total / 1e9


def vm_hwm_kb(pid: int) -> int | None:
    """The process's peak resident set size (``VmHWM`` of ``/proc/<pid>/status``, KiB), or ``None``."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class PeakRss:
    """Samples ``VmHWM`` of a process and all its descendants every ``interval`` seconds in a thread,
    keeping each pid's last value (so a worker that exits still counts).

    ``total_kb``: sum over the tree (an upper bound of the tree's peak: each process's own peak,
    even if they peaked at different times); ``max_kb``: the largest single process; ``processes``:
    how many pids were seen. Use as a context manager around the measured work; call :meth:`sample`
    for a last reading before the process is stopped.
    """

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        self.pid = pid
        self.interval = interval
        self.peaks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        for p in process_tree(self.pid):
            kb = vm_hwm_kb(p)
            if kb is not None:
                self.peaks[p] = max(kb, self.peaks.get(p, 0))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sample()

    @property
    def total_kb(self) -> int:
        return sum(self.peaks.values())

    @property
    def max_kb(self) -> int:
        return max(self.peaks.values(), default=0)

    @property
    def processes(self) -> int:
        return len(self.peaks)

    def describe(self) -> str:
        """``"<sum> MiB (max process <max> MiB, <n> processes)"``."""
        return (f"{self.total_kb / 1024:.0f} MiB (max process {self.max_kb / 1024:.0f} MiB, "
                f"{self.processes} process{'es' if self.processes != 1 else ''})")


# --- bootserver ----------------------------------------------------------------------------------------

def serve_args(workers: int) -> list[str]:
    """Extra ``bootserver serve`` arguments for ``workers`` processes: none for 1 (works on every
    version), ``--workers N`` otherwise (needs a bootserver that has the flag)."""
    return [] if workers == 1 else ["--workers", str(workers)]


class Bootserver:
    """A ``bootserver serve --config CONFIG`` subprocess on 127.0.0.1:``port`` (own process group).

    ``log_level`` defaults to ``warning``: the per-request access log lines are off, as nginx's
    ``access_log off`` in the comparison. ``tree``: serve another checkout's bootserver
    (:func:`git_tree`, e.g. the tree before a change) instead of this venv's. ``wrap``: a command that
    runs the server (e.g. ``valgrind --tool=callgrind ...``), ``start_deadline``: seconds it may take to
    answer ``/healthz``. Use ``async with``; the server is stopped on exit.
    """

    def __init__(self, config: Path, port: int, *, workers: int = 1, log: Path | None = None,
                 log_level: str = "warning", tree: GitTree | None = None, wrap: Sequence[str] = (),
                 start_deadline: float = 30.0) -> None:
        self.config = config
        self.tree = tree
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.cmd = [*wrap, *BOOTSERVER, "serve", "--config", str(config), "--log-level", log_level,
                    *serve_args(workers)]
        self.log = log
        self.workers = workers
        self.start_deadline = start_deadline
        self.proc: subprocess.Popen | None = None

    async def __aenter__(self) -> Bootserver:
        self.proc = start(self.cmd, self.log, cwd=self.config.parent,
                          env=self.tree.env if self.tree is not None else None)
        try:
            await wait_http(self.url + "/healthz", deadline=self.start_deadline, proc=self.proc)
            await wait_listeners(self.port, self.workers)
        except BaseException:
            self.stop()
            if self.log is not None and self.log.exists():
                print(self.log.read_text()[-2000:], file=sys.stderr)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        stop(self.proc)


def sync_images(config: Path, tree: GitTree | None = None) -> None:
    """``bootserver sync-images`` with ``tree``'s bootserver (default this venv's)."""
    p = subprocess.run([*BOOTSERVER, "sync-images", "--config", str(config)], capture_output=True, text=True,
                       timeout=300, cwd=config.parent, env=tree.env if tree is not None else None)
    if p.returncode != 0:
        raise RuntimeError(f"sync-images failed ({p.returncode}): {p.stderr[-2000:]}")


@dataclass(frozen=True)
class GitTree:
    """A checkout of git ref :attr:`ref` (commit :attr:`commit`) at :attr:`path`, run with this venv's
    interpreter and libraries: :attr:`env` puts :attr:`path` first on ``PYTHONPATH`` (ahead of the
    venv's editable install of this checkout), so ``python -m bootserver`` there is that tree's."""

    ref: str
    commit: str
    path: Path
    env: Mapping[str, str]

    @property
    def label(self) -> str:
        """``REF (abcdef1)``, or the short commit alone when REF is one."""
        short = self.commit[:7]
        return short if self.commit.startswith(self.ref) else f"{self.ref} ({short})"


@contextlib.contextmanager
def git_tree(ref: str, repo: Path = REPO) -> Iterator[GitTree]:
    """``ref`` of ``repo`` checked out in a temporary ``git worktree`` (detached), removed on exit also on
    errors (``git worktree remove --force``). The side-by-side runs against the tree before a change
    (``benchmarks/scripts.py --baseline REF``) start its server as ``Bootserver(..., tree=tree)``.

    Raises ``SystemExit`` with one line naming ``ref`` when git cannot resolve or check it out.
    Libraries come from this venv: a ref that needs one the venv lacks fails at its server's start."""
    rev = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                         capture_output=True, text=True)
    if rev.returncode != 0:
        raise SystemExit(f"--baseline {ref}: not a commit of {repo}")
    commit = rev.stdout.strip()
    parent = Path(tempfile.mkdtemp(prefix="bootserver-baseline-"))
    path = parent / commit[:12]
    add = subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", "--quiet", str(path), commit],
                         capture_output=True, text=True)
    try:
        if add.returncode != 0:
            raise SystemExit(f"--baseline {ref}: git worktree add failed: {add.stderr.strip()}")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(path), *filter(None, [os.environ.get("PYTHONPATH")])])}
        yield GitTree(ref, commit, path, env)
    finally:
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(path)],
                       capture_output=True)
        subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True)
        rmtree(parent)


#: Run by :func:`signed_chain_paths` with a tree's interpreter environment: prints the path and query
#: of every configured node's signed chain URL (JSON list, config order), as ``bootserver url NODE``.
_CHAIN_PATHS = """
import asyncio, json, sys
from pathlib import Path
from urllib.parse import urlsplit
from bootserver.config import load_config
try:
    from bootserver.state.backends import open_store
except ImportError:  # an older tree (e.g. 26ff16e, the issue 22 baseline)
    from bootserver.state import open_store
from bootserver.urls import Urls

async def main():
    cfg = load_config(Path(sys.argv[1]))
    store = open_store(cfg)
    await store.start()  # creates the first signing key
    keys = store.keyring()
    await store.close()
    urls = Urls(cfg, keys=lambda: keys)
    print(json.dumps([urlsplit(u).path + "?" + urlsplit(u).query for u in map(urls.chain, cfg.nodes)]))

asyncio.run(main())
"""


def signed_chain_paths(config: Path, tree: GitTree | None = None) -> list[str]:
    """Path and query of each configured node's signed chain URL (``/ipxe/NODE?exp=&sig=``, config
    order), built by ``tree``'s bootserver (default this venv's) from the keys in its state store
    (created when there are none yet: run it before the server starts). Raises ``RuntimeError`` with
    the tree's error output when that fails."""
    p = subprocess.run([PY, "-c", _CHAIN_PATHS, str(config)], capture_output=True, text=True, timeout=120,
                       cwd=config.parent, env=tree.env if tree is not None else None)
    if p.returncode != 0:
        raise RuntimeError(f"signed chain URLs ({tree.label if tree else 'this tree'}): {p.stderr[-2000:]}")
    return json.loads(p.stdout)


class Upstream:
    """``benchmarks/upstream.py serving folder ``root`` on 127.0.0.1 (sendfile; one stdout line per
    GET into ``log``). Use ``async with``."""

    def __init__(self, root: Path, log: Path) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.proc: subprocess.Popen | None = None

    async def __aenter__(self) -> Upstream:
        self.proc = start([PY, str(HERE / "upstream.py"), str(self.root), str(self.port)], self.log)
        try:
            await wait_http(self.url + "/none", proc=self.proc)
        except BaseException:
            stop(self.proc)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        stop(self.proc)

    def gets(self, needle: str) -> int:
        """GET lines in the log whose path contains ``needle``."""
        return sum(1 for line in self.log.read_text().splitlines() if line.startswith("GET ") and needle in line)


class BareBoot:
    """``benchmarks/bare_boot.py`` on 127.0.0.1 (a free port): the bare app answering a cold boot's six
    requests, artifacts from folder ``artifacts``, ``config`` as the real config, on event loop ``loop``
    (``asyncio`` or ``uvloop``), aiohttp's keep-alive timeout ``keepalive`` seconds; output into
    ``log``. Use ``async with``; stopped on exit."""

    def __init__(self, artifacts: Path, config: Path, log: Path, *, loop: str = "asyncio",
                 keepalive: float = 75.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [PY, str(HERE / "bare_boot.py"), str(self.port), str(artifacts), str(config), "--loop", loop,
                    "--keepalive-timeout", str(keepalive)]
        self.log = log
        self.proc: subprocess.Popen | None = None

    async def __aenter__(self) -> BareBoot:
        self.proc = start(self.cmd, self.log)
        try:
            await wait_http(self.url + "/none", proc=self.proc)
        except BaseException:
            stop(self.proc)
            if self.log.exists():
                print(self.log.read_text()[-2000:], file=sys.stderr)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        stop(self.proc)


def bench_stream(upstream_url: str, rel: str, shas: dict[str, str], release: str = "1.0",
                 names: dict[str, str] | None = None) -> dict[str, Any]:
    """A minimal stream metadata document (x86_64 metal PXE ``kernel``, ``initramfs``, ``rootfs``) whose
    locations are ``<upstream_url>/<rel>/<name>`` (default name ``live-<kind>.x86_64``)."""
    names = names or {k: f"live-{k}.x86_64" for k in shas}
    return {"stream": "bench", "metadata": {"last-modified": "2026-01-01T00:00:00Z"},
            "architectures": {"x86_64": {"artifacts": {"metal": {"release": release, "formats": {"pxe": {
                k: {"location": f"{upstream_url}/{rel}/{names[k]}", "sha256": shas[k]} for k in shas}}}}}}}


def rewrite_stream_locations(doc: dict[str, Any], upstream_url: str) -> dict[str, Any]:
    """Point every metal PXE location of a real stream document at ``upstream_url`` (same URL path), so
    nothing the benchmark runs can reach the internet; their ``signature`` is dropped (the benchmarks'
    stand-in bytes have none). Changes ``doc`` in place and returns it."""
    from urllib.parse import urlsplit

    for arch in doc["architectures"].values():
        pxe = arch.get("artifacts", {}).get("metal", {}).get("formats", {}).get("pxe", {})
        for art in pxe.values():
            art["location"] = upstream_url + urlsplit(art["location"]).path
            art.pop("signature", None)
    return doc


def write_json(path: Path, doc: Any) -> Path:
    """Write ``doc`` as JSON to ``path`` (parents created); return ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def median(values: Sequence[float]) -> float:
    """The median of a non-empty sequence."""
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def pct(values: list[float], p: float) -> float:
    """The ``p``-th percentile (0-100) of ``values`` (nearest rank), 0 for none."""
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def rmtree(path: Path) -> None:
    """Remove a folder, ignoring errors."""
    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def throwaway_state_store(kind: str) -> Iterator[dict[str, str]]:
    """The config keys of ``--state-store KIND``: ``{}`` for ``sqlite`` (the default, in ``state_dir``);
    for ``postgresql`` ``{"state_store": URL}`` of a database in a throwaway cluster
    (tests/support/pgcluster.py, Debian's ``postgresql``), destroyed on exit."""
    if kind != "postgresql":
        yield {}
        return
    from support.pgcluster import PgCluster  # tests/ is on sys.path (above)

    cluster = PgCluster()
    try:
        cluster.start()
        yield {"state_store": cluster.create_database("bootserver")}
    finally:
        cluster.destroy()
