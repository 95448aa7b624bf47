"""A throwaway PostgreSQL cluster for tests: Debian's ``postgresql`` (``.ci/apt-packages.txt``), its
``initdb`` and ``pg_ctl`` from ``/usr/lib/postgresql/<version>/bin``, on 127.0.0.1 and a free port, in
a temporary folder, trust authentication for the test user only.

PostgreSQL refuses to run as root (CI runs as root): then ``initdb`` and the server run as ``nobody``
(``subprocess``'s ``user=``), the folder is theirs, and the Unix socket lives in the same folder.
Every wait is bounded (``pg_ctl -w -t``).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from support.helpers import free_port

#: Seconds ``pg_ctl`` waits for the server to start or stop.
PG_CTL_WAIT = 60


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


BINDIR = _bindir()


class PgCluster:
    """One PostgreSQL server: :meth:`start`, :meth:`stop`, :meth:`restart`, :meth:`create_database`,
    :meth:`destroy`. ``port`` stays the same across restarts."""

    USER = "bootserver"

    def __init__(self) -> None:
        if BINDIR is None:
            raise RuntimeError("PostgreSQL is not installed (Debian package postgresql)")
        self.root = Path(tempfile.mkdtemp(prefix="bootserver-pg-"))
        self.data = self.root / "data"
        self.port = free_port()  # outside the ephemeral range: the port must stay ours across restarts
        self.as_user: dict[str, str] = {}
        if os.geteuid() == 0:
            self.as_user = {"user": "nobody", "group": "nogroup"}
            shutil.chown(self.root, "nobody", "nogroup")
        self._run("initdb", "-D", str(self.data), "-U", self.USER, "--auth=trust", "-E", "UTF8", "--no-sync")

    def _run(self, tool: str, *args: str) -> None:
        assert BINDIR is not None
        proc = subprocess.run([str(BINDIR / tool), *args], capture_output=True, text=True, timeout=PG_CTL_WAIT + 30,
                              cwd=self.root, **self.as_user)  # type: ignore[call-overload]
        if proc.returncode != 0:
            raise RuntimeError(f"{tool} failed: {proc.stderr.strip() or proc.stdout.strip()}")

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c max_connections=100")
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "log"), "-w",
                  "-t", str(PG_CTL_WAIT), "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", str(PG_CTL_WAIT), "stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create database ``name``; returns its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def destroy(self) -> None:
        """Stop the server (``pg_ctl stop -m immediate``; when that fails, SIGQUIT to the postmaster of
        ``postmaster.pid``, PostgreSQL's own immediate shutdown, waited for up to :data:`PG_CTL_WAIT`
        seconds) and remove its folder. Never raises for a server already gone."""
        try:
            self.stop("immediate")
        except (RuntimeError, subprocess.TimeoutExpired):
            self._quit_postmaster()
        shutil.rmtree(self.root, ignore_errors=True)

    def _quit_postmaster(self) -> None:
        try:
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
            os.kill(pid, signal.SIGQUIT)
        except (OSError, ValueError, IndexError):
            return
        deadline = time.monotonic() + PG_CTL_WAIT
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)  # poll interval, bounded by the deadline
