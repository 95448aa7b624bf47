"""``bootserver serve --workers N``: N worker processes share the listening ports (``SO_REUSEPORT``).

The parent process:

1. does the one-time set-up that must not race, once: ``state_dir`` (the state store itself was
   prepared just before, by :func:`bootserver.state.backends.prepare_store`: its schema, integrity and
   signing keys), the TLS files (loaded once as a check), and a bind test of ``server.listen``,
   ``server.tls.listen`` and a TCP ``server.admin.listen`` (a port in use is one error line, exit 2,
   before any worker starts); a Unix-socket ``server.admin.listen`` is bound here and inherited by
   every worker (``SO_REUSEPORT`` cannot share one), and removed when the parent exits;
2. creates a fresh prometheus multiprocess directory (a temp directory, removed when it exits);
3. forks N workers. It has no event loop and no thread at that point, so ``os.fork`` is safe and the
   workers inherit the loaded :class:`~bootserver.config.Config` (no pickling, no re-reading). Each
   worker runs the aiohttp app (:func:`bootserver.http.listeners.run`) with ``SO_REUSEPORT`` and tells the parent
   over a pipe when it listens, or the one-line error that stopped it (printed once, by the parent);
4. writes ``state_dir/serve.pid`` once every worker listens, passes SIGHUP (a reload: each worker
   reads and checks the config itself) on to the workers, forwards SIGTERM and SIGINT to the workers,
   waits for them, exits 0 after a clean stop. A worker that exits on its own (crash, ``kill -9``) is
   logged with its exit status, the others are stopped, and the parent exits 1 (systemd's
   ``Restart=on-failure`` starts the service again): no half-alive server keeps running with fewer
   workers than configured. Workers get SIGTERM if the parent dies.

Why not gunicorn with ``aiohttp.GunicornWebWorker`` (compared in 2026-11): it serves one app on every
bound socket with one TLS setting, while bootserver serves plain HTTP and HTTPS with different rules
(real configs only over HTTPS) and a separate admin listener; a port in use is its two log lines and
exit 1 after retries, not one line naming ``server.listen`` and exit 2; it respawns a killed worker
where we stop and let systemd restart the unit; and prometheus multiprocess mode would still need
hooks. What it would replace is this module's fork/pipe/wait loop (about 150 lines).

Cross-worker behaviour lives elsewhere: metrics in :mod:`bootserver.metrics` (multiprocess mode), one
upstream download per artifact in :mod:`bootserver.artifacts.readthrough` (followers of a locked partial).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
from typing import NoReturn

from .config import Config, split_listen
from .errors import BootserverError, ConfigError
from .http.listeners import bind_unix_socket, chain_hint, run, server_ssl_context, unreachable_warning
from .metrics import enable_multiprocess, mark_process_dead
from .reload import remove_pid, write_pid

log = logging.getLogger("bootserver.workers")

_SIGNALS = {signal.SIGTERM, signal.SIGINT}
#: Blocked while forking: the stop signals and SIGHUP (a reload, passed on to every worker).
_FORK_MASK = _SIGNALS | {signal.SIGHUP}


def prepare(config: Config) -> None:
    """The one-time set-up before workers start (see the module docstring; the state store is
    :func:`bootserver.state.backends.prepare_store`'s). Raises
    :class:`~bootserver.errors.BootserverError` (state_dir, TLS files, port in use)."""
    config.state_dir.mkdir(parents=True, exist_ok=True)
    if config.server.tls is not None:
        server_ssl_context(config)
        check_listen(config, "server.tls.listen", config.server.tls.listen)
    for listen in config.server.listen:
        check_listen(config, "server.listen", listen)
    if not config.server.admin_listen.startswith("/"):
        check_listen(config, "server.admin.listen", config.server.admin_listen)


def check_listen(config: Config, key: str, listen: str) -> None:
    """Bind (and release) every address of ``listen`` as the server will, without ``SO_REUSEPORT``,
    so a port held by anyone (even another ``--workers`` server) fails here. Raises
    :class:`~bootserver.errors.ConfigError` naming ``key``."""
    host, port = split_listen(listen)
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, type_, proto, _, addr in {(i[0], i[1], i[2], i[3], i[4]) for i in infos}:
            with socket.socket(family, type_, proto) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                s.bind(addr)
    except OSError as e:
        raise ConfigError(config.source, key, f"cannot listen on {listen}: {e.strerror or e}") from None


def describe(code: int) -> str:
    """A worker's exit code (as :func:`os.waitstatus_to_exitcode`) in words."""
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def serve_workers(config: Config, workers: int) -> int:
    """Run ``workers`` (>= 2) worker processes until SIGTERM/SIGINT; returns the exit status (0 after a
    clean stop, 1 when a worker died, the error's status when a worker could not start)."""
    prepare(config)
    admin = config.server.admin_listen
    admin_socket = None
    if admin.startswith("/"):  # a Unix socket cannot be shared with SO_REUSEPORT: the workers inherit it
        admin_socket = bind_unix_socket(config, admin)
    mp_dir = tempfile.mkdtemp(prefix="bootserver-metrics-")
    try:
        return _Supervisor(config, workers, mp_dir, admin_socket).run()
    finally:
        shutil.rmtree(mp_dir, ignore_errors=True)
        if admin_socket is not None:
            admin_socket.close()
            os.unlink(admin)


class _Supervisor:
    def __init__(self, config: Config, workers: int, mp_dir: str, admin_socket: socket.socket | None) -> None:
        self.config = config
        self.workers = workers
        self.mp_dir = mp_dir
        self.admin_socket = admin_socket
        self.children: dict[int, int] = {}  # pid -> read end of its readiness pipe
        self.stopping = False
        #: The signal that stopped the server (its name), for the one line that says so.
        self.stopped_by: str | None = None

    def _on_signal(self, signum: int, frame: object) -> None:
        self.stopping = True
        self.stopped_by = self.stopped_by or signal.Signals(signum).name
        self._signal_all(signum)

    def _on_hup(self, signum: int, frame: object) -> None:
        """A reload: every worker reads the config again (:meth:`bootserver.web.Running.reload`)."""
        self._signal_all(signal.SIGHUP)

    def _signal_all(self, signum: int) -> None:
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def _stop(self) -> None:
        if not self.stopping:
            self.stopping = True
            self._signal_all(signal.SIGTERM)

    def run(self) -> int:
        if threading.active_count() != 1:  # fork copies only this thread; never fork a threaded parent
            raise BootserverError("serve --workers: the server process has threads before forking")
        old = {s: signal.signal(s, self._on_signal) for s in _SIGNALS}
        old[signal.SIGHUP] = signal.signal(signal.SIGHUP, self._on_hup)
        try:
            return self._run()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            remove_pid(self.config)

    def _run(self) -> int:
        for _ in range(self.workers):
            if self.stopping:
                break
            self._fork()
        status = 0
        error = None
        for pid, fd in list(self.children.items()):
            message = _read_line(fd)
            if message == "ok" or self.stopping:
                continue
            if error is None:
                error = message or f"worker {pid} exited while starting"
                code, _, text = error.partition(" ")
                status, error = (int(code), text) if code.isdigit() else (1, error)
                print(f"bootserver: {error}", file=sys.stderr, flush=True)
            self._stop()
        if error is None and not self.stopping:
            log.info("%d workers serving (pids %s)", len(self.children), " ".join(map(str, self.children)))
            write_pid(self.config)
            warning = unreachable_warning(self.config)
            if warning is not None:
                log.warning("%s", warning)
            hint = chain_hint(self.config)
            if hint is not None:
                log.info("%s", hint)
        while self.children:
            try:
                pid, wait_status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            child_fd = self.children.pop(pid, None)
            if child_fd is None:
                continue
            os.close(child_fd)
            _mark_dead(pid, self.mp_dir)
            exit_code = os.waitstatus_to_exitcode(wait_status)
            if not self.stopping:
                log.error("worker %d stopped unexpectedly (%s); stopping the other workers", pid, describe(exit_code))
                status = 1
                self._stop()
            elif exit_code not in (0, -signal.SIGTERM, -signal.SIGINT) and error is None:
                log.error("worker %d: %s while stopping", pid, describe(exit_code))
                status = status or 1
        if self.stopped_by is not None and error is None:
            log.info("bootserver stopped (%s): the workers answered the requests in progress and closed every "
                     "listener", self.stopped_by)
        return status

    def _fork(self) -> None:
        read_fd, write_fd = os.pipe()
        parent = os.getpid()
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, _FORK_MASK)
        pid = os.fork()
        if pid == 0:  # the worker
            os.close(read_fd)
            for fd in self.children.values():
                os.close(fd)
            self.children = {}
            for s in _SIGNALS:
                signal.signal(s, signal.SIG_DFL)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the worker's loop reloads on it
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            _worker(self.config, self.mp_dir, write_fd, parent, self.admin_socket)
        self.children[pid] = read_fd
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(write_fd)


def _read_line(fd: int) -> str:
    """What a worker wrote on its readiness pipe (up to EOF or newline), stripped."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").strip()


def _mark_dead(pid: int, mp_dir: str) -> None:
    with contextlib.suppress(OSError):
        mark_process_dead(pid, mp_dir)


def _die_with_parent(parent: int) -> None:
    """Have the kernel send this process SIGTERM when the parent dies (Linux ``PR_SET_PDEATHSIG``)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _worker(config: Config, mp_dir: str, ready_fd: int, parent: int, admin_socket: socket.socket | None
            ) -> NoReturn:
    """A worker process: serve until SIGTERM/SIGINT, then ``os._exit`` (never returns to the caller)."""
    code = 0
    reported = False

    def report(line: str) -> None:
        nonlocal reported
        if not reported:
            reported = True
            with contextlib.suppress(OSError):
                os.write(ready_fd, (line + "\n").encode())
            os.close(ready_fd)

    try:
        _die_with_parent(parent)
        enable_multiprocess(mp_dir)
        run(config, reuse_port=True, ready=lambda: report("ok"), admin_socket=admin_socket)
    except BootserverError as e:
        code = e.exit_code
        if reported:
            log.error("%s", e)
        report(f"{code} {e}")
    except KeyboardInterrupt:
        code = 0
    except BaseException as e:  # a crash: one line in the log, exit 1 (the parent stops the others)
        code = 1
        log.exception("worker crashed: %s: %s", type(e).__name__, e)
        report(f"1 worker {os.getpid()}: {type(e).__name__}: {e}")
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)
