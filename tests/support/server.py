"""A real ``bootserver serve`` subprocess for the tests that need one (:class:`ServerProcess`)."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import aiohttp

from bootserver.config import load_config
from support.helpers import BOOTSERVER


class ServerProcess:
    """A ``bootserver serve`` subprocess; ``url`` is its base URL once ``/healthz`` answers, ``admin_url``
    its admin listener's (``/nodes``, ``/metrics``: ``server.admin.listen``, when that is host:port)."""

    def __init__(self, config: Path, port: int, *extra_args: str) -> None:
        self.config = config
        self.extra_args = extra_args
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.admin_url = "http://" + load_config(config).server.admin_listen
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, session: Any, deadline: float = 20.0) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *BOOTSERVER, "serve", "--config", str(self.config), *self.extra_args,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
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
