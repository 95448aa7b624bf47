"""Live reload of ``bootserver serve``: what a reload reads and checks, what it cannot change, and how
``bootserver reload`` finds the running server.

A reload (``SIGHUP``, ``systemctl reload bootserver``, ``bootserver reload``) reads the config file
again with every file its ``include:`` names (:func:`load_checked`), checks it as ``check-config``
does (:func:`check_config`), and only then replaces the running config, in one step
(:class:`bootserver.web.Running`); an invalid config leaves the running one serving. The keys of
:data:`RESTART_KEYS` keep their running values (:func:`keep_running`): they are sockets, folders and
connections opened once at start.

``serve`` writes its process id into ``state_dir/serve.pid`` once it listens (the parent's with
``--workers``, which passes ``SIGHUP`` on to every worker) and removes it when it stops; each process
writes the outcome of its last reload into ``state_dir/reload.json`` (:func:`write_status`), which
``bootserver reload`` waits for (:func:`wait_status`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .config import Config, check_local_inputs, load_config
from .errors import BootserverError, InputError
from .files import write_atomic
from .images.network import check_boot_networks
from .scripts import check_command_lines
from .values import counted

#: The keys a reload cannot change, each with why: they keep their running values, and a reload that
#: changes them says so in one warning line.
RESTART_KEYS: dict[str, str] = {
    "server.listen": "a listening socket",
    "server.tls": "the HTTPS socket and its certificate, key and CA files",
    "server.admin": "the admin socket and its token",
    "server.workers": "the worker processes",
    "server.max_concurrent": "the request limits",
    "server.max_queued": "the request limits",
    "server.request_timeout": "the request limits",
    "server.keepalive_timeout": "the listeners' keep-alive",
    "cache_dir": "the artifact cache and its downloads in flight",
    "state_dir": "the state store, keys and locks",
    "state_store": "the state store's connections",
    "upstream": "the upstream client session",
}

#: ``state_dir/serve.pid``: the process id of the running ``serve`` (the parent with ``--workers``).
PID_FILE = "serve.pid"
#: ``state_dir/reload.json``: the outcome of the last reload (:func:`write_status`).
STATUS_FILE = "reload.json"


def check_config(config: Config) -> None:
    """Everything ``check-config`` checks beyond loading: the local files the config names
    (:func:`~bootserver.config.check_local_inputs`), every node's kernel command line
    (:func:`~bootserver.scripts.check_command_lines`) and boot network
    (:func:`~bootserver.images.network.check_boot_networks`). Raises :class:`~bootserver.errors.ConfigError`
    naming the file and key."""
    check_local_inputs(config)
    check_command_lines(config)
    check_boot_networks(config)


def load_checked(source: str) -> Config:
    """The config at ``source`` (a path, or ``"<default>"`` for the embedded one) loaded with its
    includes and checked as :func:`check_config` does. Raises
    :class:`~bootserver.errors.ConfigError` (file and key)."""
    config = load_config(None if source == "<default>" else source)
    check_config(config)
    return config


def summary(config: Config) -> str:
    """``<source>: 1 stream, 2 profiles, 41 nodes``: what a config holds, in the reload and
    ``check-config`` lines."""
    return (f"{config.source}: {counted(len(config.streams), 'stream')}, "
            f"{counted(len(config.profiles), 'profile')}, {counted(len(config.nodes), 'node')}")


def _value(config: Config, key: str) -> Any:
    obj: Any = config
    for part in key.split("."):
        obj = getattr(obj, part)
    return obj


def keep_running(running: Config, new: Config) -> tuple[Config, list[str]]:
    """``new`` with the running values of :data:`RESTART_KEYS`, and the keys whose value ``new`` would
    have changed (in :data:`RESTART_KEYS` order)."""
    changed = [key for key in RESTART_KEYS if _value(running, key) != _value(new, key)]
    if not changed:
        return new, []
    server_keys = {k.split(".", 1)[1] for k in RESTART_KEYS if k.startswith("server.")}
    server = new.server.model_copy(update={k: getattr(running.server, k) for k in server_keys})
    kept = dataclasses.replace(new, server=server, cache_dir=running.cache_dir, state_dir=running.state_dir,
                               state_store=running.state_store, upstream=running.upstream)
    return kept, changed


def restart_warning(changed: list[str]) -> str:
    """The one warning line of a reload that would change :data:`RESTART_KEYS` ``changed``."""
    return (f"reload: {', '.join(changed)} changed in the config but need a restart; they keep their running "
            f"values until `systemctl restart bootserver`")


def write_pid(config: Config) -> Path:
    """Write this process's id into ``state_dir/serve.pid``; returns the file."""
    path = config.state_dir / PID_FILE
    write_atomic(path, f"{os.getpid()}\n".encode())
    return path


def remove_pid(config: Config) -> None:
    """Remove ``state_dir/serve.pid`` when it names this process (a later server's stays)."""
    path = config.state_dir / PID_FILE
    with contextlib.suppress(OSError, ValueError):
        if int(path.read_text().strip()) == os.getpid():
            path.unlink()


def _is_server(pid: int) -> bool:
    """Whether process ``pid`` lives and runs bootserver (its command line names it: a pid file left by
    a server that died may name an unrelated process since)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"bootserver" in cmdline and b"serve" in cmdline


def signal_server(config: Config) -> int:
    """Send ``SIGHUP`` to the ``serve`` of ``config``'s ``state_dir``; returns its process id. Raises
    :class:`~bootserver.errors.InputError` (exit 2) when no server runs there."""
    path = config.state_dir / PID_FILE
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        raise InputError(f"no bootserver serve runs with state_dir {config.state_dir} (no readable {PID_FILE}); "
                         "nothing to reload") from None
    if not _is_server(pid):
        raise InputError(f"no bootserver serve runs with state_dir {config.state_dir} ({path} names process "
                         f"{pid}, which is not one); nothing to reload")
    try:
        os.kill(pid, signal.SIGHUP)
    except OSError as e:
        raise BootserverError(f"cannot signal bootserver serve (process {pid}): {e.strerror}") from None
    return pid


def write_status(config: Config, *, ok: bool, message: str, loaded_at: float, at: float | None = None,
                 nodes: Iterable[str] = ()) -> None:
    """Record the outcome of this process's reload in ``state_dir/reload.json``: ``{"pid", "at",
    "result": "ok"|"invalid", "message", "loaded_at", "nodes"}`` (unix seconds; ``nodes``: the names of
    the nodes served after it, sorted). Never raises (logged by the caller)."""
    doc = {"pid": os.getpid(), "at": time.time() if at is None else at, "result": "ok" if ok else "invalid",
           "message": message, "loaded_at": loaded_at, "nodes": sorted(nodes)}
    with contextlib.suppress(OSError):
        write_atomic(config.state_dir / STATUS_FILE, json.dumps(doc).encode())


def read_status(config: Config) -> dict[str, Any] | None:
    """The last reload's outcome (:func:`write_status`), or ``None``."""
    try:
        doc = json.loads((config.state_dir / STATUS_FILE).read_bytes())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def wait_status(config: Config, after: float, timeout: float = 15.0) -> dict[str, Any] | None:
    """The first reload outcome (:func:`read_status`) recorded at or after unix time ``after``, polled
    every 0.1 s for at most ``timeout`` seconds; ``None`` when none came."""
    end = time.monotonic() + timeout
    while True:
        doc = read_status(config)
        if doc is not None and isinstance(doc.get("at"), int | float) and doc["at"] >= after:
            return doc
        if time.monotonic() >= end:
            return None
        time.sleep(0.1)


def reload_server(config: Config, timeout: float = 15.0) -> tuple[int, dict[str, Any] | None]:
    """Reload the running ``serve`` of ``config``'s ``state_dir``: send it ``SIGHUP``
    (:func:`signal_server`) and wait up to ``timeout`` seconds for its outcome (:func:`wait_status`).
    Returns ``(its process id, the outcome or None)``. Raises ``InputError`` (exit 2) when no server
    runs there. What ``bootserver reload`` and ``nodes adopt`` do alike."""
    sent = time.time()
    pid = signal_server(config)
    return pid, wait_status(config, sent, timeout)
