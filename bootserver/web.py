"""The aiohttp application of ``bootserver serve``.

Handlers stay thin: parse the request, call one :class:`~bootserver.service.BootService` method, shape
the response. Errors map to statuses in one middleware: unknown node 404, not available yet 503, bad
upstream 502; every refusal is a plain-text reason and one log line, never a bare 500.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from typing import Any, Awaitable, Callable

from aiohttp import hdrs, web

from . import __version__
from .config import Config
from .errors import (BootserverError, ConfigError, FetchError, InputError, UnavailableError,
                     UnknownNodeError)
from .ignition import MEDIA_TYPE, NotAcceptableError
from . import ops
from .security import limits_middleware, selectable_check, signed_route_middleware
from .readthrough import Transfer
from .service import BootService
from .signing import Signer

log = logging.getLogger("bootserver.web")

SERVICE = web.AppKey("service", BootService)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ArtifactResponse(web.FileResponse):
    """A cached artifact sent with sendfile; its ``ETag`` is the artifact's sha256 (set on prepare).

    When the client goes away mid-body, the bytes the kernel did send are recorded for the access log
    (asyncio leaves the file position after the last byte ``sendfile`` sent); aiohttp then logs the
    request as usual, without a traceback."""

    def __init__(self, path: object, sha256: str | None, **kwargs: object) -> None:
        super().__init__(path, **kwargs)  # type: ignore[arg-type]
        self.sha256 = sha256

    async def _sendfile(self, request: web.BaseRequest, fobj: Any, offset: int, count: int
                        ) -> Any:  # aiohttp's FileResponse hook that sends the body
        fobj.seek(offset)
        try:
            return await super()._sendfile(request, fobj, offset, count)  # type: ignore[misc]
        except ConnectionError:
            request[ops.BODY_SENT] = (max(0, fobj.tell() - offset), False)
            raise


async def _artifact_etag(request: web.Request, response: web.StreamResponse) -> None:
    # FileResponse computes an mtime-size ETag while preparing; replace it with the sha256, which
    # names the bytes exactly and is the same on every cache in every facility.
    if isinstance(response, ArtifactResponse) and response.sha256:
        response.etag = response.sha256


def _text(status: int, reason: str) -> web.Response:
    return web.Response(status=status, text=reason + "\n", content_type="text/plain")


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Map domain errors to statuses with a plain-text reason and a log line."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except UnknownNodeError as e:
        log.warning("%s %s: 404 %s", request.method, request.path, e)
        return _text(404, str(e))
    except UnavailableError as e:
        log.warning("%s %s: 503 %s", request.method, request.path, e)
        return _text(503, str(e))
    except (FetchError, InputError) as e:
        log.error("%s %s: 502 %s", request.method, request.path, e)
        return _text(502, f"upstream problem: {e}")
    except BootserverError as e:
        log.error("%s %s: 500 %s", request.method, request.path, e)
        return _text(500, str(e))


def _service(request: web.Request) -> BootService:
    return request.app[SERVICE]


async def ipxe_script(request: web.Request) -> web.Response:
    """``GET /ipxe/{node}``: the node's iPXE script."""
    svc = _service(request)
    node = request[ops.NODE] = svc.find_node(name=request.match_info["node"])
    script = await svc.serve_script(node, request.remote)
    return web.Response(text=script, content_type="text/plain")


async def generic_entry(request: web.Request) -> web.Response:
    """``GET /boot.ipxe?mac=|uuid=|hostname=``: the script of the node the selector matches."""
    svc = _service(request)
    q = request.query
    node = request[ops.NODE] = svc.find_node(mac=q.get("mac"), uuid=q.get("uuid"), hostname=q.get("hostname"))
    selectable_check(request, svc.config, node)
    script = await svc.serve_script(node, request.remote)
    return web.Response(text=script, content_type="text/plain")


async def ignition_stub(request: web.Request) -> web.Response:
    """``GET /ignition/{node}``: the node's merge-style stub, in the spec version negotiated with the
    ``Accept`` header (406 when none fits); ``Vary: Accept`` either way."""
    svc = _service(request)
    node = request[ops.NODE] = svc.find_node(name=request.match_info["node"])
    try:
        body = await svc.serve_stub(node, request.remote, request.headers.get(hdrs.ACCEPT))
    except NotAcceptableError as e:
        log.warning("%s %s: 406 %s", request.method, request.path, e)
        response = _text(406, str(e))
    else:
        response = web.Response(body=body, content_type=MEDIA_TYPE)
    response.headers[hdrs.VARY] = hdrs.ACCEPT
    return response


async def ignition_config(request: web.Request) -> web.Response:
    """``GET /ignition/{node}/config``: the node's real config, byte for byte."""
    svc = _service(request)
    node = request[ops.NODE] = svc.find_node(name=request.match_info["node"])
    data = await svc.serve_real_config(node, request.remote)
    if data is None:
        return _text(404, f"node {node}: its profile has no ignition config")
    return web.Response(body=data, content_type=MEDIA_TYPE)


async def artifact(request: web.Request) -> web.StreamResponse:
    """``GET``/``HEAD /artifacts/{stream}/{arch}/{release}/{file}``: a cached artifact.

    Range (206), HEAD, Last-Modified and If-Modified-Since come from aiohttp's FileResponse (sendfile);
    the ETag is the sha256 and ``If-None-Match`` with it answers 304.
    """
    svc = _service(request)
    m = request.match_info
    segments = (m["stream"], m["arch"], m["release"], m["file"])
    path = await svc.artifacts.open(segments)
    if path is None:
        what = "not a known artifact" if svc.artifacts.enabled else "not in cache"
        log.warning("%s %s: 404 %s", request.method, request.path, what)
        return _text(404, f"{what}: {'/'.join(segments)}")
    if isinstance(path, Transfer):
        return await _send_transfer(request, path)
    sha = svc.store.recorded_sha256(path)
    inm = request.if_none_match
    if sha and inm and any(tag.value in (sha, "*") for tag in inm):
        resp = web.Response(status=304)
        resp.etag = sha
        return resp
    return ArtifactResponse(path, sha, headers={"Content-Type": "application/octet-stream",
                                                 "Cache-Control": "public, max-age=31536000, immutable"})


async def _send_transfer(request: web.Request, transfer: Transfer) -> web.StreamResponse:
    """Stream an artifact that is being downloaded (read-through). On a failure after the headers
    went out, abort the connection so the client sees a body short of its Content-Length.

    With a known size the bytes go out with ``loop.sendfile`` (the kernel's sendfile on plain TCP,
    asyncio's own read/write loop over TLS), in ranges as large as the download has ready; without
    one (upstream sent no length) they are written in chunks, chunked-encoded."""
    try:
        size = await transfer.start()
        resp = web.StreamResponse(headers={"Content-Type": "application/octet-stream",
                                           "Cache-Control": "public, max-age=31536000, immutable"})
        resp.etag = transfer.sha256
        if size is not None:
            resp.content_length = size
        await resp.prepare(request)
        if request.method == "HEAD":
            return resp
        try:
            if size is None:
                async for chunk in transfer.chunks():
                    await resp.write(chunk)
            else:
                await _sendfile_ranges(request, resp, transfer)
        except ConnectionError:  # the client went away: the access log says so ("incomplete"), in one line
            return resp
        except BootserverError as e:
            log.error("%s %s: aborting the transfer: %s", request.method, request.path, e)
            if request.transport is not None:
                request.transport.abort()
            return resp
        await resp.write_eof()
        return resp
    finally:
        transfer.close()


async def _sendfile_ranges(request: web.Request, resp: web.StreamResponse, transfer: Transfer) -> None:
    """Send every range :meth:`Transfer.ranges` yields with ``loop.sendfile`` (the kernel's sendfile,
    as aiohttp's FileResponse does), or with writes of at most 1 MiB over TLS or where the transport
    cannot sendfile.

    TLS gets our own writes: the bytes must pass through Python to be encrypted anyway, and asyncio's
    sendfile fallback, called once per range on an SSL transport, lost bytes in our tests (clients got
    short bodies while the server saw them all sent)."""
    loop = asyncio.get_running_loop()
    fobj = None
    sent = 0  # body bytes sent; with sendfile, asyncio leaves the file position after the last one
    try:
        async for offset, count in transfer.ranges():
            transport = request.transport
            if transport is None or transport.is_closing():
                raise ConnectionResetError("Connection lost")
            if fobj is None:
                fobj = open(transfer.fileno(), "rb", buffering=0, closefd=False)
                use_sendfile = transport.get_extra_info("sslcontext") is None
            if use_sendfile:
                fobj.seek(offset)
                try:
                    await loop.sendfile(transport, fobj, offset, count)
                    sent += count
                    continue
                except NotImplementedError:
                    use_sendfile = False
                except ConnectionError:
                    sent += max(0, fobj.tell() - offset)
                    raise
            end = offset + count
            while offset < end:
                data = os.pread(fobj.fileno(), min(1 << 20, end - offset), offset)
                if not data:
                    raise FetchError(f"{request.path}: data file shorter than expected")
                await resp.write(data)
                offset += len(data)
                sent += len(data)
    except ConnectionError:
        request[ops.BODY_SENT] = (sent, False)
        raise
    finally:
        if fobj is not None:
            fobj.close()


async def readyz(request: web.Request) -> web.Response:
    """``GET /readyz``: every referenced artifact as cached, fetching or missing (JSON); 200 when ready."""
    ready, report = _service(request).artifacts.readiness()
    return web.json_response(report, status=200 if ready else 503)


async def healthz(request: web.Request) -> web.Response:
    """``GET /healthz``: liveness."""
    return web.Response(text="ok\n", content_type="text/plain")


async def _close_service(app: web.Application) -> None:
    await app[SERVICE].close()


#: Largest request body accepted, in bytes (no endpoint takes a body).
CLIENT_MAX_SIZE = 64 * 1024
#: Longest request line and header field accepted, in bytes (longer: 400).
MAX_LINE_SIZE = 8190
MAX_FIELD_SIZE = 8190
MAX_HEADERS = 64


def create_app(config: Config, signer: Signer | None = None) -> web.Application:
    """Build the aiohttp application for ``config`` (routes as in :mod:`bootserver.urls`).

    ``signer`` signs and verifies per-node URLs (default: the keys file in ``state_dir``, wall clock).
    """
    svc = BootService(config, signer)
    app = web.Application(client_max_size=CLIENT_MAX_SIZE, middlewares=[
        ops.ops_middleware,
        limits_middleware(config.server.max_concurrent, config.server.request_timeout,
                          config.server.max_queued),
        signed_route_middleware(config, svc.urls.signer.check),
        error_middleware])
    app[SERVICE] = svc
    svc.artifacts.observer = ops.setup(app, svc).metrics
    app.on_cleanup.append(_close_service)
    app.on_response_prepare.append(_artifact_etag)
    app.router.add_get("/ipxe/{node}", ipxe_script)
    app.router.add_get("/boot.ipxe", generic_entry)
    app.router.add_get("/ignition/{node}", ignition_stub)
    app.router.add_get("/ignition/{node}/config", ignition_config)
    app.router.add_get("/artifacts/{stream}/{arch}/{release}/{file}", artifact)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


def runner_kwargs(config: Config) -> dict[str, object]:
    """Keyword arguments of :class:`aiohttp.web.AppRunner`: our access log (no query strings), the request
    line/header limits (bytes) and the keep-alive timeout (seconds)."""
    return {**ops.runner_kwargs(), "max_line_size": MAX_LINE_SIZE,
            "max_field_size": MAX_FIELD_SIZE, "max_headers": MAX_HEADERS,
            "keepalive_timeout": config.server.keepalive_timeout}


def server_ssl_context(config: Config) -> "ssl.SSLContext":
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
    return ConfigError(config.source, key, f"cannot listen on {where}: {e.strerror or e}")


async def _start_site(config: Config, key: str, site: web.TCPSite, where: str) -> None:
    try:
        await site.start()
    except OSError as e:
        raise _listen_error(config, key, where, e) from None


async def serve(config: Config, stop: "asyncio.Event", *, reuse_port: bool = False,
                ready: Callable[[], None] | None = None) -> None:
    """Serve ``config`` on ``server.listen`` (HTTP) and ``server.tls.listen`` (HTTPS) until ``stop``.

    ``reuse_port`` binds with ``SO_REUSEPORT`` (several worker processes share the ports);
    ``ready()`` is called once every socket listens. Raises :class:`~bootserver.errors.ConfigError`
    naming ``server.listen`` or ``server.tls.listen`` when a socket cannot be bound (port in use).
    """
    ssl_ctx = server_ssl_context(config) if config.server.tls else None
    app = create_app(config)
    runner = web.AppRunner(app, **runner_kwargs(config))  # type: ignore[arg-type]
    await runner.setup()
    reuse = True if reuse_port else None
    try:
        host, port = config.server.host, config.server.port
        await _start_site(config, "server.listen", web.TCPSite(runner, host or None, port, reuse_port=reuse),
                          config.server.listen)
        log.info("bootserver %s listening on %s:%d, base URL %s, cache %s", __version__, host, port,
                 config.server.effective_base_url, config.cache_dir)
        if config.server.tls is not None and ssl_ctx is not None:
            from .config import split_listen

            thost, tport = split_listen(config.server.tls.listen)
            await _start_site(config, "server.tls.listen",
                              web.TCPSite(runner, thost or None, tport, ssl_context=ssl_ctx, reuse_port=reuse),
                              config.server.tls.listen)
            log.info("HTTPS on %s:%d, base URL %s", thost, tport, config.server.https_base_url)
        if ready is not None:
            ready()
        await stop.wait()
    finally:
        await runner.cleanup()


def run(config: Config, *, reuse_port: bool = False, ready: Callable[[], None] | None = None) -> None:
    """Serve ``config`` until SIGINT/SIGTERM (see :func:`serve`)."""
    import signal

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(config, stop, reuse_port=reuse_port, ready=ready)

    asyncio.run(main())
