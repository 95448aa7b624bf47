"""``bootserver ARGS`` for the tests, in a process of its own that does not import the command line again.

A new ``python -m bootserver`` spends about 0.5 s of CPU importing the command line (pydantic's models,
aiohttp, yaml) before it runs, and the suite runs a few hundred commands: minutes of a 2-core run. So the
commands are forked from one server process per test session that imported ``bootserver.cli`` once:
the standard library's ``multiprocessing`` ``forkserver`` with ``bootserver.cli`` preloaded (the server
is started by exec, so the test process's threads, loops and browser never reach a child).

Each child is what ``python -m bootserver ARGS`` is once its imports are done: its own process in a
session of its own (``setsid``: a timeout kills its whole group), the caller's working directory and
environment at the call, stdin ``/dev/null``, stdout and stderr to files the caller reads back (as a pipe,
not a terminal), ``bootserver.cli.main(ARGS)``'s status as its exit status (``-N``: killed by signal N),
the interpreter's exit functions run at its end. The server process stops with the test session.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import io
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import bootserver

_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(["bootserver.cli"])
#: What ``python -m bootserver`` has as ``sys.argv[0]``.
_MAIN = str(Path(bootserver.__file__).with_name("__main__.py"))


def _command(args: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> None:
    """The child: become ``python -m bootserver ARGS`` after its imports, then run it (exit status: its own)."""
    os.setsid()
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out, os.O_WRONLY), (2, err, os.O_WRONLY)):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    # what an interpreter whose stdout and stderr are pipes has (encoding from the UTF-8 locale)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8")
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
                                  line_buffering=True)
    sys.argv = [_MAIN, *args]
    from bootserver.cli import main

    try:
        code = main(args)
    finally:
        atexit._run_exitfuncs()  # the interpreter's exit runs them; multiprocessing's child ends with os._exit
        sys.stdout.flush()
    sys.exit(code)


class _Forked:
    """One command: its child (started), its output files, and a kill of its whole group."""

    def __init__(self, args: tuple[str, ...], folder: str, cwd: Path | None, env: dict[str, str] | None,
                 stdout: bool = True) -> None:
        self.out, self.err = Path(folder, "stdout") if stdout else Path(os.devnull), Path(folder, "stderr")
        if stdout:
            self.out.touch()
        self.err.touch()
        self.child = _CONTEXT.Process(target=_command, args=(list(args), str(cwd or os.getcwd()),
                                                             dict(os.environ if env is None else env),
                                                             str(self.out), str(self.err)))
        self.child.start()  # a round trip to the fork server (the session's first call starts it: about 1 s)
        assert self.child.pid is not None
        self.pid: int = self.child.pid

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)  # (killed before its setsid)

    def result(self) -> tuple[int, str, str]:
        self.child.join()
        assert self.child.exitcode is not None
        return self.child.exitcode, self.out.read_bytes().decode(), self.err.read_bytes().decode()


async def run_forked(args: tuple[str, ...], timeout: float, cwd: Path | None) -> tuple[int, str, str]:
    """Run ``bootserver ARGS`` as a forked child (module docstring) without blocking the event loop;
    returns ``(exit status, stdout, stderr)``. After ``timeout`` seconds its process group is killed and
    ``TimeoutError`` raised."""
    loop = asyncio.get_running_loop()
    with tempfile.TemporaryDirectory(prefix="bootserver-cli-") as folder:
        forked = _Forked(args, folder, cwd, None)
        ended = loop.create_future()
        loop.add_reader(forked.child.sentinel, lambda: ended.done() or ended.set_result(None))
        try:
            await asyncio.wait_for(ended, timeout)
        except TimeoutError:
            forked.kill()
            await asyncio.to_thread(forked.child.join, 10)
            raise
        finally:
            loop.remove_reader(forked.child.sentinel)
        return forked.result()


def run_forked_sync(args: Sequence[str], timeout: float = 60, cwd: Path | None = None,
                    env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([*BOOTSERVER, *args], capture_output=True, text=True, timeout=..., cwd=..., env=...)``
    as a forked child (module docstring): the same ``CompletedProcess``, and ``subprocess.TimeoutExpired``
    after ``timeout`` seconds (its process group killed)."""
    with tempfile.TemporaryDirectory(prefix="bootserver-cli-") as folder:
        forked = _Forked(tuple(args), folder, cwd, None if env is None else dict(env))
        forked.child.join(timeout)
        if forked.child.exitcode is None:
            forked.kill()
            forked.child.join(10)
            raise subprocess.TimeoutExpired(["bootserver", *args], timeout)
        code, out, err = forked.result()
        text = [t.replace("\r\n", "\n").replace("\r", "\n") for t in (out, err)]  # text=True's newlines
        return subprocess.CompletedProcess(["bootserver", *args], code, *text)


class ForkedProcess:
    """A long-running ``bootserver ARGS`` (``serve``) forked as above, with what
    ``asyncio.create_subprocess_exec(..., stdout=DEVNULL, stderr=PIPE)`` gives :class:`support.server.ServerProcess`:
    ``pid``, ``returncode`` (``None`` while it runs), ``stderr`` (an ``asyncio.StreamReader``, fed from its
    stderr file as it grows, every 50 ms, and at EOF once the process ended), ``send_signal``,
    ``terminate``, ``kill`` and ``wait`` (its exit status). Made on the event loop that reads it."""

    def __init__(self, args: Sequence[str]) -> None:
        self._folder = tempfile.mkdtemp(prefix="bootserver-serve-")
        self._forked = _Forked(tuple(args), self._folder, None, None, stdout=False)
        self.pid = self._forked.pid
        self.stderr = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        self._ended: asyncio.Future[None] = loop.create_future()
        loop.add_reader(self._forked.child.sentinel, self._on_exit)
        self._feeding = loop.create_task(self._feed())

    def _on_exit(self) -> None:
        asyncio.get_running_loop().remove_reader(self._forked.child.sentinel)
        if not self._ended.done():
            self._ended.set_result(None)

    async def _feed(self) -> None:
        try:
            with open(self._forked.err, "rb") as err:
                while not self._ended.done():
                    self.stderr.feed_data(err.read())
                    await asyncio.wait([self._ended], timeout=0.05)  # polling interval of the file, until it ends
                self.stderr.feed_data(err.read())
            self.stderr.feed_eof()
        finally:
            shutil.rmtree(self._folder, ignore_errors=True)

    @property
    def returncode(self) -> int | None:
        return self._forked.child.exitcode if self._ended.done() else None

    def send_signal(self, sig: int) -> None:
        if not self._ended.done():
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    async def wait(self) -> int:
        await asyncio.shield(self._ended)
        await self._feeding
        code = self._forked.child.exitcode
        assert code is not None
        return code
