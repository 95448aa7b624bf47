"""The listeners of ``bootserver serve``: the sockets the applications of :mod:`bootserver.http.app` answer on.

The device listener is ``server.listen`` (HTTP) and ``server.tls.listen`` (HTTPS, with
:func:`server_ssl_context`); the admin listener is ``server.admin.listen``, a TCP address or a Unix
socket (:func:`bind_unix_socket`). :func:`serve` opens them all, says on which addresses it listens and
how to boot a machine from them (:func:`chain_hint`), and serves until told to stop; :func:`run` until
SIGINT/SIGTERM. ``SIGHUP`` reloads the config (:meth:`bootserver.web.Running.reload`); the process id
is in ``state_dir/serve.pid`` while it serves (:mod:`bootserver.reload`). A socket that cannot be
bound is a :class:`~bootserver.errors.ConfigError` naming its key.
``serve --workers N`` (:mod:`bootserver.workers`) runs :func:`run` in each worker with ``SO_REUSEPORT``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import ssl
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp import web

from .. import __version__, reload
from ..config import Config, split_listen
from ..errors import ConfigError
from ..inventory import inventory
from .app import ADMIN_APP, RUNNING, create_app, runner_kwargs
from .parse_errors import ADMIN_HEADERS, DEVICE_HEADERS, fence

#: Connections the device listeners' kernel queue holds before they are accepted (the kernel caps it at
#: net.core.somaxconn): a power-on storm connects thousands at once, and with aiohttp's default of 128
#: the rest lose their SYN and wait a second or more for its retransmission.
BACKLOG = 4096

log = logging.getLogger("bootserver.listeners")


def server_ssl_context(config: Config) -> ssl.SSLContext:
    """The server's TLS context (TLS 1.2+) from ``server.tls`` cert and key (PEM).

    Raises :class:`~bootserver.errors.ConfigError` naming ``server.tls`` when the files cannot be loaded.
    """
    cert, key, _ = config.tls_files()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(config.source, "server.tls",
                          f"cannot load {cert} / {key}: {getattr(e, 'strerror', None) or e} "
                          "(run `bootserver tls init`?)") from None
    return ctx


def _listen_error(config: Config, key: str, where: str, e: OSError) -> ConfigError:
    # asyncio puts the address into strerror ("error while attempting to bind on address ..."): the errno's
    # own text names the cause once
    return ConfigError(config.source, key, f"cannot listen on {where}: {os.strerror(e.errno) if e.errno else e}")


async def _start_site(config: Config, key: str, site: web.BaseSite, where: str) -> None:
    try:
        await site.start()
    except OSError as e:
        raise _listen_error(config, key, where, e) from None


def chain_hint(config: Config) -> str | None:
    """The one line that tells how to boot a machine from this server: the ``chain`` command for the
    ``default`` node's generic entry, and whether the base URL is reachable from another machine at all;
    ``None`` without a default node."""
    fallback = inventory(config).default
    if fallback is None:
        return None
    base = config.server.effective_base_url
    line = (f"to boot any machine into node {fallback.name} ({fallback.mode} mode): "
            f"at its iPXE prompt, chain {base}/boot.ipxe")
    host = urlsplit(base).hostname or ""
    if host in ("localhost", "127.0.0.1", "::1"):
        line += (" -- that URL reaches this machine only: set server.listen and server.base_url to an address "
                 "the machine can reach (a QEMU guest with user networking reaches this host at 10.0.2.2)")
    return line


def bind_unix_socket(config: Config, path: str) -> socket.socket:
    """A listening Unix stream socket at ``path`` (mode 0660), replacing a stale socket file that no
    server answers on. Raises :class:`~bootserver.errors.ConfigError` naming ``server.admin.listen``
    when the path is in use (a live server, or not a socket) or cannot be bound."""
    key = "server.admin.listen"
    p = Path(path)
    if p.is_socket():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except ConnectionRefusedError:
            p.unlink()  # left behind by a server that is gone
        except OSError:
            pass
        else:
            raise ConfigError(config.source, key, f"cannot listen on {path}: another server answers there")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, 0o660)
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise _listen_error(config, key, path, e) from None
    return sock


async def serve(config: Config, stop: asyncio.Event, *, reuse_port: bool = False,
                ready: Callable[[], None] | None = None, admin_socket: socket.socket | None = None) -> None:
    """Serve ``config`` until ``stop``: the device routes on ``server.listen`` (HTTP) and
    ``server.tls.listen`` (HTTPS), the admin routes on ``server.admin.listen`` (TCP, or a Unix socket:
    ``admin_socket`` when the caller bound it already, as ``serve --workers`` does).

    ``reuse_port`` binds with ``SO_REUSEPORT`` (several worker processes share the ports);
    ``ready()`` is called once every socket listens. Raises :class:`~bootserver.errors.ConfigError`
    naming ``server.listen``, ``server.tls.listen`` or ``server.admin.listen`` when a socket cannot be
    bound (port in use).
    """
    ssl_ctx = server_ssl_context(config) if config.server.tls else None
    app = create_app(config)
    admin = app[ADMIN_APP]
    runner = web.AppRunner(app, **runner_kwargs(app))
    admin_runner = web.AppRunner(admin, **runner_kwargs(admin))
    await runner.setup()
    await admin_runner.setup()
    fence(runner, DEVICE_HEADERS)  # aiohttp's own 400s follow our header rules too
    fence(admin_runner, ADMIN_HEADERS)
    reuse = True if reuse_port else None
    own_socket = None
    where = config.server.admin_listen
    reloads: set[asyncio.Future[bool]] = set()  # SIGHUP: a reload (bootserver.web.Running.reload)
    hup = False
    pid_file = None
    try:
        # every socket is bound before anything says "listening": a port taken is one error, nothing bound
        for listen, (host, port) in zip(config.server.listen, config.server.listens, strict=True):
            await _start_site(config, "server.listen", web.TCPSite(runner, host or None, port, reuse_port=reuse,
                                                                    backlog=BACKLOG), listen)
        if config.server.tls is not None and ssl_ctx is not None:
            thost, tport = split_listen(config.server.tls.listen)
            await _start_site(config, "server.tls.listen",
                              web.TCPSite(runner, thost or None, tport, ssl_context=ssl_ctx, reuse_port=reuse,
                                          backlog=BACKLOG),
                              config.server.tls.listen)
        if where.startswith("/"):
            if admin_socket is None:
                admin_socket = own_socket = bind_unix_socket(config, where)
            site: web.BaseSite = web.SockSite(admin_runner, admin_socket)
        else:
            ahost, aport = split_listen(where)
            site = web.TCPSite(admin_runner, ahost or None, aport, reuse_port=reuse)
        await _start_site(config, "server.admin.listen", site, where)
        log.info("bootserver %s listening on %s, base URL %s, cache %s", __version__,
                 ", ".join(config.server.listen), ", ".join(config.server.effective_base_urls), config.cache_dir)
        if config.server.tls is not None:
            log.info("HTTPS on %s, base URL %s", config.server.tls.listen, config.server.https_base_url)
        log.info("admin endpoints (the page /, /nodes, /metrics) on %s%s", where,
                 "" if config.server.admin.token_file is None else " (bearer token: server.admin.token_file)")
        if not reuse_port:  # with --workers the parent says these once
            warning = unreachable_warning(config)
            if warning is not None:
                log.warning("%s", warning)
            hint = chain_hint(config)
            if hint is not None:
                log.info("%s", hint)

        def on_hup() -> None:
            task = asyncio.ensure_future(app[RUNNING].reload())
            reloads.add(task)
            task.add_done_callback(reloads.discard)

        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, on_hup)
        hup = True
        if not reuse_port:  # with --workers the parent writes it and passes SIGHUP on
            pid_file = reload.write_pid(config)
        if ready is not None:
            ready()
        await stop.wait()
    finally:
        if hup:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        if reloads:
            await asyncio.gather(*reloads, return_exceptions=True)
        if pid_file is not None:
            reload.remove_pid(config)
        await admin_runner.cleanup()
        await runner.cleanup()
        if own_socket is not None:
            own_socket.close()
            Path(where).unlink(missing_ok=True)


def unreachable_warning(config: Config) -> str | None:
    """The warning for a server that listens on every address (``0.0.0.0``, ``::``) but hands out URLs at
    ``localhost``/``127.0.0.1`` (``server.base_url``, or none set): other machines cannot reach them.
    ``None`` otherwise."""
    wild = [where for where, (host, _) in zip(config.server.listen, config.server.listens, strict=True)
            if host in ("", "0.0.0.0", "::")]
    if not wild:
        return None
    bases = config.server.effective_base_urls
    for base in bases:
        host = urlsplit(base).hostname or ""
        if host != "localhost" and not host.startswith("127.") and host != "::1":
            return None
    return (f"server.listen is {', '.join(wild)} but the URLs handed out start with {' or '.join(bases)}: other "
            f"machines cannot reach them; set server.base_url in {config.source} to an address they reach")


def run(config: Config, *, reuse_port: bool = False, ready: Callable[[], None] | None = None,
        admin_socket: socket.socket | None = None) -> None:
    """Serve ``config`` until SIGINT/SIGTERM (see :func:`serve`); then one line says why it stopped, once the
    requests in progress were answered (aiohttp's graceful shutdown). With ``reuse_port`` (a worker of
    ``serve --workers``) the parent says it instead."""
    why: list[str] = []

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        def on_signal(sig: signal.Signals) -> None:
            why.append(sig.name)
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal, sig)
        await serve(config, stop, reuse_port=reuse_port, ready=ready, admin_socket=admin_socket)

    asyncio.run(main())
    if not reuse_port:
        log.info("bootserver stopped (%s): the requests in progress were answered, every listener closed",
                 why[0] if why else "stop requested")
