"""A real ``bootserver serve`` subprocess for the tests that need one: :class:`ServerProcess` (on the
test's event loop; :func:`synced_server`: the cache synced first, then serving for a block) and
:func:`serving` (a blocking context manager: the e2e tests and the packaging test)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from bootserver.config import load_config
from support.forked_cli import ForkedProcess
from support.helpers import BOOTSERVER, run_cli


class ServerProcess:
    """A ``bootserver serve`` process (forked: :class:`support.forked_cli.ForkedProcess`); ``url`` is its
    base URL once ``/healthz`` answers, ``admin_url`` its admin listener's (``/nodes``, ``/metrics``:
    ``server.admin.listen``, when that is host:port)."""

    def __init__(self, config: Path, port: int, *extra_args: str) -> None:
        self.config = config
        self.extra_args = extra_args
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.admin_url = "http://" + load_config(config).server.admin_listen
        self.proc: ForkedProcess | None = None

    async def start(self, session: Any, deadline: float = 20.0) -> None:
        # forked from the session's server that imported the command line (support.forked_cli), stdout
        # discarded, stderr readable as it comes (self.proc.stderr)
        self.proc = ForkedProcess(["serve", "--config", str(self.config), *self.extra_args])
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline
        while loop.time() < end:
            if self.proc.returncode is not None:
                err = await self.proc.stderr.read()  # type: ignore[union-attr]
                raise RuntimeError(f"bootserver serve exited {self.proc.returncode}: {err.decode()}")
            try:
                async with session.get(self.url + "/healthz") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)  # polling interval while waiting for the port, bounded by deadline
        raise TimeoutError("bootserver serve did not answer /healthz in time")

    async def stop(self) -> None:
        if self.proc and self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


@contextlib.asynccontextmanager
async def synced_server(config: Path, port: int) -> AsyncIterator[ServerProcess]:
    """``bootserver sync-images`` with ``config`` (asserted to exit 0), then its :class:`ServerProcess` on
    ``port`` running for the block (healthy when the block starts), stopped after it."""
    rc, _, err = await run_cli("sync-images", "--config", str(config))
    assert rc == 0, err
    server = ServerProcess(config, port)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        try:
            await server.start(http)
            yield server
        finally:
            await server.stop()


def wait_healthy(proc: subprocess.Popen[bytes], url: str, log: Path, deadline_s: float = 30.0) -> None:
    """Poll ``url`` (``/healthz``) until it answers 200, the process exits (``RuntimeError`` with the end of
    ``log``), or ``deadline_s`` passes (``TimeoutError``)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"bootserver serve exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        # wait on the process, not a bare sleep: an exit ends the wait at once
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=min(0.1, max(0.0, end - time.monotonic())))
    raise TimeoutError(f"bootserver serve did not answer {url} within {deadline_s} s:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def serving(args: Sequence[str], health_url: str, log: Path, *, command: Sequence[str] = BOOTSERVER,
            env: Mapping[str, str] | None = None, cwd: Path | None = None,
            deadline_s: float = 30.0) -> Iterator[subprocess.Popen[bytes]]:
    """``bootserver serve ARGS`` (``command`` runs bootserver) with its output in ``log``, once
    ``health_url`` answers 200 (:func:`wait_healthy`); terminated after the block (killed if it does not
    stop within 10 s)."""
    with open(log, "wb") as out:
        proc = subprocess.Popen([*command, "serve", *args], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, env=None if env is None else dict(env), cwd=cwd)
    try:
        wait_healthy(proc, health_url, log, deadline_s)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
