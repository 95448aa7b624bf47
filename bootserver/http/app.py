"""The aiohttp applications of ``bootserver serve``: the device application and the admin application
(:mod:`bootserver.http.listeners` opens the sockets they answer on).

Routes come from :data:`bootserver.urls.ROUTES` (each declared once: pattern, signed, timed, capped,
listener); :data:`HANDLERS` names the handler of each. One front (:func:`front`, bound to each route)
does what every request needs before its handler: concurrency cap and timeout, signature check, and the
node it concerns resolved once (``request[RESOLVED]``, matchbox's select -> context -> handler). Handlers
stay thin: read the resolved node, call one :class:`~bootserver.service.BootService` method, shape the
response. Errors map to statuses in one place (:func:`error_answer`): unknown node 404, not available
yet 503, bad upstream 502; every refusal is a plain-text reason for a device operator and one log line
with the details, never a bare 500 and never a local path in a public body.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable

from aiohttp import hdrs, web
from aiohttp.typedefs import Middleware

from ..artifacts.readthrough import Transfer
from ..config import Config
from ..discovery import ReportError
from ..errors import (
    BootserverError,
    DiskFullError,
    FetchError,
    InputError,
    UnavailableError,
    UnknownNodeError,
    shown,
)
from ..files import LinkRefused, open_file
from ..ignition import MEDIA_TYPE, NotAcceptableError
from ..metrics import Metrics
from ..runtime import Runtime
from ..service import BootService
from ..signing import Signer
from ..state import StateStore
from ..urls import ADMIN, DEVICE, GENERIC, GENERIC_GRUB, ROUTES, Route
from . import accesslog, api, page
from .accesslog import NODE, ROUTE
from .admission import LIMITS, Limits
from .fileanswer import FileAnswer, plan, send_pieces, sendfile_ranges
from .gate import (
    CLIENT_MAX_SIZE,
    DEVICE_HEADERS,
    admin_headers,
    body_too_large,
    forbidden,
    host_middleware,
    unmatched,
)
from .running import LOADED, RESOLVED, RUNNING, Loaded, Running

log = logging.getLogger("bootserver.web")

#: The service the application was built with (tests; a reload replaces it: :data:`RUNNING`).
SERVICE = web.AppKey("service", BootService)
#: What outlives a reload (:class:`~bootserver.runtime.Runtime`), shared by both applications.
RUNTIME = web.AppKey("runtime", Runtime)
#: The admin application (``/nodes``, ``/metrics``) sharing the device application's service.
ADMIN_APP = web.AppKey("admin_app", web.Application)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _text(status: int, reason: str) -> web.Response:
    return web.Response(status=status, text=reason + "\n", content_type="text/plain")


#: ``(error class, status, public text when the error has none)``, first match wins. Public texts say
#: what failed in a device operator's words; the details (paths, sizes, URLs) go to the log.
ERROR_ANSWERS: tuple[tuple[type[BootserverError], int, str], ...] = (
    (UnknownNodeError, 404, "no such node"),
    (UnavailableError, 503, "not available now, retry later"),
    (DiskFullError, 500, "the server's artifact cache is full; the server log has the details"),
    (FetchError, 502, "upstream problem: stream metadata or an artifact could not be downloaded; "
                      "the server log has the details"),
    (InputError, 502, "stream metadata unusable; the server log has the details"),
    (BootserverError, 500, "internal error; the server log has the details"),
)


def error_answer(request: web.Request, e: BootserverError) -> web.Response:
    """The answer to a request whose handling raised ``e``: its status and public text
    (:data:`ERROR_ANSWERS`), ``Retry-After`` on a 503, and one log line with ``str(e)``."""
    status, public = next((status, public) for cls, status, public in ERROR_ANSWERS if isinstance(e, cls))
    log.log(logging.WARNING if status < 500 or status == 503 else logging.ERROR, "%s %s: %d %s",
            request.method, request.path, status, e)
    answer = _text(status, e.public or public)
    if isinstance(e, UnavailableError):
        answer.headers[hdrs.RETRY_AFTER] = str(e.retry_after)
    return answer


def _service(request: web.Request) -> BootService:
    return request[LOADED].svc


def _client(request: web.Request) -> str | None:
    """The client address the timeline records (resolved through ``server.trusted_proxies``)."""
    return request[LOADED].gate.client(request)


def front(running: Running, limits: Limits, spec: Route, handler: Handler, *, stamp: bool = False) -> Handler:
    """``handler`` of route ``spec`` behind what every request needs first: notes the route
    (``request[ROUTE]``) and the config it is answered with (``request[LOADED]``, the one ``running``
    serves now, kept for the whole request), runs the handler under
    :class:`~bootserver.http.admission.Limits`, refuses signed routes that fail :meth:`Gate.refusal` (the one
    403), resolves the node (``request[RESOLVED]``, its name in ``request[NODE]``: by name from the path,
    or for the generic entry by selector and source address) and maps domain errors with :func:`error_answer`.

    With ``stamp`` (the device listener) every answer gets :data:`DEVICE_HEADERS` here (the returned
    one, a raised ``HTTPException``, a plain 500 for an unexpected error, logged) instead of in an
    ``on_response_prepare`` hook, whose signal every answer would run (0.4 us alone, 2.6 us of a loaded
    run's samples: docs/benchmarks.md).

    Bound to each route when the application is built rather than run as a middleware: an
    application without middlewares calls its handlers directly, which saves every request two
    coroutine layers and a route lookup (docs/benchmarks.md). aiohttp's own 404/405 answers come
    without it (:func:`~bootserver.http.gate.unmatched`; the access log names them ``unmatched``)."""
    named = spec.signed or "{node}" in spec.pattern
    intake = running.intake

    async def answer(request: web.Request) -> web.StreamResponse:
        if request.can_read_body and await body_too_large(request):
            log.warning("%s %s: 413 request body over %d bytes", request.method, request.path, CLIENT_MAX_SIZE)
            refused = _text(413, f"request body too large: at most {CLIENT_MAX_SIZE} bytes")
            refused.force_close()  # the rest of the body is never read
            return refused
        loaded = request[LOADED] = running.current
        svc, gate = loaded.svc, loaded.gate
        try:
            if named:
                name = request[NODE] = request.match_info["node"]
                if spec.signed:
                    reason = gate.refusal(request, spec, name)
                    if reason is not None:
                        log.warning("%s %s: 403 %s", request.method, request.rel_url.raw_path, reason)
                        return forbidden()
                request[RESOLVED] = svc.inventory.find(name=name)
            elif spec is GENERIC or spec is GENERIC_GRUB:
                q = request.query
                try:
                    selected = svc.inventory.select(gate.address(request), mac=q.get("mac"),
                                                    uuid=q.get("uuid"), hostname=q.get("hostname"))
                    request[NODE] = selected.name
                    request[RESOLVED] = selected
                except UnknownNodeError:
                    if not svc.config.server.discovery.enabled:
                        raise  # off: 404; on: the same script whether no node matches or not here
                    script = intake.script(svc.config, q.get("mac"), grub=spec is GENERIC_GRUB)
                    return web.Response(text=script, content_type="text/plain")
            return await handler(request)
        except web.HTTPException:
            raise
        except BootserverError as e:
            return error_answer(request, e)

    async def fronted(request: web.Request) -> web.StreamResponse:
        request[ROUTE] = spec
        return await limits.run(request, spec, answer)

    if not stamp:
        return fronted

    async def stamped(request: web.Request) -> web.StreamResponse:
        request[ROUTE] = spec
        try:
            response = await limits.run(request, spec, answer)
        except web.HTTPException as e:
            e.headers.update(DEVICE_HEADERS)
            raise
        except Exception:
            if request.writer.output_size:  # the answer's head went out (with the headers): aiohttp closes
                raise
            log.exception("%s %s: 500 unexpected error", request.method, request.path)
            raise web.HTTPInternalServerError(text="internal error; the server log has the details\n",
                                              headers=DEVICE_HEADERS) from None
        if not response.prepared:
            headers = response.headers
            headers[hdrs.SERVER] = "bootserver"
            headers["X-Content-Type-Options"] = "nosniff"
        return response

    return stamped


def add_route(app: web.Application, route: Route, handler: Handler, *, stamp: bool = False) -> None:
    """Serve ``route`` on ``app`` (one of :func:`create_app`'s) with ``handler`` behind :func:`front`
    (``stamp``: the device listener's headers, see there)."""
    fronted = front(app[RUNNING], app[LIMITS], route, handler, stamp=stamp)
    if route.method == "GET":  # and HEAD
        app.router.add_get(route.pattern, fronted, name=route.name or None)
    else:
        app.router.add_route(route.method, route.pattern, fronted, name=route.name or None)


async def ipxe_script(request: web.Request) -> web.Response:
    """``GET /ipxe/{node}`` and ``GET /boot.ipxe?mac=|uuid=|hostname=``: the node's iPXE script."""
    script = await _service(request).script(request[RESOLVED], client=_client(request), record=True)
    return web.Response(text=script, content_type="text/plain")


async def discover(request: web.Request) -> web.Response:
    """``GET /discover?mac=...&uuid=...&serial=...``: a machine that matches no node reports what iPXE
    knows of it (:meth:`bootserver.intake.DiscoveryIntake.report`); ``200`` whether or not it was
    recorded, ``400`` without a valid ``mac``, ``404`` while ``server.discovery`` is off."""
    config = _service(request).config
    if not config.server.discovery.enabled:
        return _text(404, "discovery is off")
    try:
        await request.app[RUNNING].intake.report(config, request.query, _client(request))
    except ReportError as e:
        return _text(400, str(e))
    return _text(200, "ok")


async def grub_config(request: web.Request) -> web.Response:
    """``GET /grub/{node}`` and ``GET /boot.grub?mac=|uuid=|hostname=``: the GRUB form of the node's
    script, which its boot image's UEFI boot and the arm64 GRUB source."""
    via = "image" if request[ROUTE].signed else "grub"  # /grub/<node> is the boot image's; /boot.grub a GRUB's
    script = await _service(request).script(request[RESOLVED], grub=True, client=_client(request), record=True,
                                            via=via)
    return web.Response(text=script, content_type="text/plain")


async def boot_image(request: web.Request) -> web.StreamResponse:
    """``GET``/``HEAD /iso/{node}.iso``: the node's boot image (:meth:`BootService.image`), sent as
    its base image's bytes (``loop.sendfile``) with the node's region written in as it goes (docs/design.md,
    "Boot images"). Conditionals, ``Range`` and ``If-Range`` as every file answer
    (:func:`~bootserver.http.fileanswer.plan`), ``HEAD`` and a strong ``ETag``: BMCs read virtual
    media in ranges, after a HEAD for the size. The base image is opened below ``cache_dir`` without
    following a link (a link there is a 404, logged). Bad input (the node's network or release cannot be
    written into an image) is a 500 whose public text names no key or path; the log has both."""
    svc, node = _service(request), request[NODE]
    cache = svc.runtime.cache
    try:
        image = await svc.image(request[RESOLVED])
    except LinkRefused as e:
        cache.refused(e)
        return _text(404, f"node {node}: no boot image")
    except InputError as e:
        raise BootserverError(str(e), public=f"node {node}: its boot image cannot be built from its settings; "
                              "the server log has the details") from None
    answer = plan(request, image.size, image.etag)  # no Last-Modified: a dated If-Range gets the whole image
    start, stop = answer.start, answer.end
    if answer.status in (304, 416):
        return web.Response(status=answer.status, headers=answer.headers)
    try:
        fd = open_file(svc.config.cache_dir, image.base.path.relative_to(svc.config.cache_dir))
    except LinkRefused as e:
        cache.refused(e)
        return _text(404, f"node {node}: no boot image")
    try:
        resp = web.StreamResponse(status=answer.status, headers={
            "Content-Type": "application/x-iso9660-image", "Cache-Control": "no-store", **answer.headers,
            **DEVICE_HEADERS})
        resp.content_length = stop - start
        await resp.prepare(request)
        if request.method == "HEAD":
            return resp
        try:
            await send_pieces(request, resp, fd, image.pieces(start, stop))
        except ConnectionError:  # the client went away: the access log says so ("incomplete")
            return resp
        await resp.write_eof()
        return resp
    finally:
        os.close(fd)


async def loader(request: web.Request) -> web.StreamResponse:
    """``GET``/``HEAD`` of a loader a firmware loads before any script (:meth:`ArtifactDesk.loader`: the arm64
    GRUB, Debian's ``ipxe.efi``, a stream's Secure Boot loaders and their GRUB config; ``bootserver loaders
    DIR`` writes them for TFTP), else 404. Ranges and conditionals as every file answer's
    (:class:`FileAnswer`); below ``cache_dir`` opened without following a link."""
    desk = request[LOADED].desk
    found = await desk.loader(request[ROUTE].name, request.match_info)
    if found is None or isinstance(found, str):
        return _text(404, "no such loader") if found is None else web.Response(text=found, content_type="text/plain")
    cache = desk.runtime.cache
    try:
        if found.is_relative_to(cache.cache_dir):
            fd = open_file(cache.cache_dir, found.relative_to(cache.cache_dir))
        else:  # the system's iPXE build
            fd = os.open(found, os.O_RDONLY)
    except LinkRefused as e:
        cache.refused(e)
        return _text(404, "no such loader")
    return FileAnswer(fd, headers={"Content-Type": "application/efi", "Cache-Control": "no-cache"})


async def ignition_stub(request: web.Request) -> web.Response:
    """``GET /ignition/{node}``: the node's merge-style stub, in the spec version negotiated with the
    ``Accept`` header (406 when none fits); ``Vary: Accept`` either way."""
    try:
        body = await _service(request).stub(request[RESOLVED], accept=request.headers.get(hdrs.ACCEPT),
                                            client=_client(request), record=True)
    except NotAcceptableError as e:
        log.warning("%s %s: 406 %s", request.method, request.path, e)
        response = _text(406, str(e))
    else:
        response = web.Response(body=body, content_type=MEDIA_TYPE)
    response.headers[hdrs.VARY] = hdrs.ACCEPT
    return response


async def ignition_config(request: web.Request) -> web.Response:
    """``GET /ignition/{node}/config``: the node's real config, byte for byte."""
    node = request[NODE]
    data = await _service(request).real_config(request[RESOLVED], client=_client(request), record=True)
    if data is None:
        return _text(404, f"node {node}: its profile has no ignition config")
    return web.Response(body=data, content_type=MEDIA_TYPE)


async def checkin(request: web.Request) -> web.Response:
    """``POST /checkin/{node}``: the node's booted system is on the network (its stub's check-in unit);
    records ``checkin`` (stage ``up``) with the client address. Nothing is read from the body."""
    stage = await _service(request).record(request[RESOLVED], "checkin", ip=_client(request))
    return _text(200, f"{request[NODE]}: {stage}")


async def artifact(request: web.Request) -> web.StreamResponse:
    """``GET``/``HEAD /artifacts/{stream}/{arch}/{release}/{file}``: a cached artifact.

    Range (206, RFC 9110), HEAD, Last-Modified and If-Modified-Since come from :class:`FileAnswer`
    (sendfile of the descriptor the cache opened, never a path again); the ETag is the sha256 and
    ``If-None-Match`` with it answers 304. A link anywhere from ``cache_dir`` to the file is a 404. A GET is
    attributed to a node (:meth:`bootserver.desk.ArtifactDesk.requested`), and how its answer ended is
    reported once the last byte went out (:data:`bootserver.http.accesslog.ON_SENT`). An artifact of a
    private stream (``streams.<name>.private``) needs a URL signed for a node of that stream
    (:meth:`~bootserver.http.gate.Gate.artifact_refusal`; else the one 403), is attributed to that node
    and is not stored by caches.
    """
    desk = request[LOADED].desk
    m = request.match_info
    segments = (m["stream"], m["arch"], m["release"], m["file"])
    rate = desk.config.server.artifact_rate  # bytes/s held to; an attributed node's profile's first
    stream = desk.config.streams.get(segments[0])
    signed = None
    if stream is not None and stream.private:  # only a node of the stream, on its own signed URL
        reason, signed = request[LOADED].gate.artifact_refusal(request, segments)
        if reason is not None:
            log.warning("%s %s: 403 %s", request.method, request.path, reason)
            return forbidden()
    if request.method == "GET":
        client = _client(request)
        kind, node = await desk.requested(segments, client, signed)
        request[accesslog.ARTIFACT_KIND] = kind
        if node is not None:
            request[NODE] = node.name
            rate = node.artifact_rate or rate
            request[accesslog.ON_SENT] = lambda status, nbytes, complete: desk.answered(
                node, kind, client, status=status, nbytes=nbytes, complete=complete)
    found = await desk.open(segments)
    if found is None:
        what = desk.missing()
        log.warning("%s %s: 404 %s", request.method, request.path, what)
        return _text(404, f"{what}: {shown('/'.join(segments), 200)}")
    if isinstance(found, Transfer):
        return await _send_transfer(request, found, rate)
    return FileAnswer(found.fd, etag=found.sha256, rate=rate, headers={
        "Content-Type": "application/octet-stream",
        "Cache-Control": "no-store" if signed is not None else "public, max-age=31536000, immutable"})


async def _send_transfer(request: web.Request, transfer: Transfer, rate: int | None) -> web.StreamResponse:
    """Stream an artifact that is being downloaded (read-through). On a failure after the headers
    went out, abort the connection so the client sees a body short of its Content-Length.

    With a known size the bytes go out with ``loop.sendfile`` (the kernel's sendfile on plain TCP,
    asyncio's own read/write loop over TLS), in ranges as large as the download has ready; without
    one (upstream sent no length) they are written in chunks, chunked-encoded."""
    try:
        size = await transfer.start()
        resp = web.StreamResponse(headers={"Content-Type": "application/octet-stream",
                                           "Cache-Control": "public, max-age=31536000, immutable",
                                           **DEVICE_HEADERS})
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
                await sendfile_ranges(request, resp, transfer, rate)
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


async def readyz(request: web.Request) -> web.Response:
    """``GET /readyz``: every referenced artifact as cached, fetching or missing (:meth:`BootService.readiness`),
    and whether the state store answers (``state_store``: ``{"backend": "sqlite"|"postgresql", "ready":
    bool}``; why not goes to the log) (JSON); 200 when both are ready."""
    ready, report = await _service(request).readiness()
    return web.json_response(report, status=200 if ready else 503)


async def healthz(request: web.Request) -> web.Response:
    """``GET /healthz``: liveness."""
    return web.Response(text="ok\n", content_type="text/plain")


async def _start_service(app: web.Application) -> None:
    await app[RUNNING].runtime.start(watch_stalls=True)
    app[RUNNING].start_watch()


async def nodes(request: web.Request) -> web.Response:
    """``GET /nodes`` (admin): every configured node (and any other with events): stage, since when,
    last event (JSON)."""
    fleet = await _service(request).fleet()
    now = time.time()
    return web.json_response({"now": now, "nodes": [{**seen.state.as_dict(now), "profile": seen.profile}
                                                    for seen in fleet]})


async def node_report(request: web.Request) -> web.Response:
    """``GET /nodes/{node}`` (admin): the node's stage and events, oldest first (``?limit=N``: the last N)."""
    try:
        limit = int(request.query["limit"]) if "limit" in request.query else None
    except ValueError:
        raise web.HTTPBadRequest(text="limit must be an integer\n") from None
    node = request[RESOLVED]
    state, events = await _service(request).history(node.name, limit)
    return web.json_response({**state.as_dict(time.time()), "profile": node.profile,
                              "events": [e.as_dict() for e in events]})


async def metrics(request: web.Request) -> web.Response:
    """``GET /metrics`` (admin): Prometheus text exposition format."""
    body = await request.app[RUNNING].runtime.scrape()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


#: The handler of each route of :data:`bootserver.urls.ROUTES`, by route name.
HANDLERS: dict[str, Handler] = {
    "chain": ipxe_script, "generic": ipxe_script, "discover": discover, "stub": ignition_stub,
    "real_config": ignition_config, "grub": grub_config, "generic_grub": grub_config, "iso": boot_image,
    "loader_arm64": loader, "loader_ipxe": loader, "loader_secureboot": loader, "grub_cfg": loader,
    "checkin": checkin,
    "artifact": artifact, "healthz": healthz, "readyz": readyz, "nodes": nodes, "node": node_report,
    "metrics": metrics, **page.HANDLERS,
}


async def _close_service(app: web.Application) -> None:
    await app[RUNNING].close()


#: Longest request line and header field accepted, in bytes (longer: 400).
MAX_LINE_SIZE = 8190
MAX_FIELD_SIZE = 8190
MAX_HEADERS = 64


def _app(svc: BootService, running: Running, metrics: Metrics, listener: str, limits: Limits,
         token: str | None = None) -> web.Application:
    routes = {r.name: r for r in ROUTES if listener in r.listeners}
    middlewares: list[Middleware] = []
    if listener == ADMIN:
        middlewares.append(host_middleware(svc.config, page.OPEN_PATHS))
        middlewares += [page.token_middleware(token, api.PREFIX)] if token is not None else []
    app = web.Application(client_max_size=CLIENT_MAX_SIZE, middlewares=middlewares)
    if listener == ADMIN:
        app.on_response_prepare.append(admin_headers)
    app[SERVICE] = svc
    app[RUNTIME] = running.runtime
    app[RUNNING] = running
    app[LIMITS] = limits
    app[accesslog.METRICS] = metrics
    for route in routes.values():
        add_route(app, route, HANDLERS[route.name], stamp=listener == DEVICE)
    if listener == DEVICE:  # last: only what no route takes
        app.router.add_route("*", "/{path:.*}", unmatched)
    else:
        app.add_subapp(api.PREFIX, api.create_api(running, token))
    return app


def create_app(config: Config, signer: Signer | None = None, state: StateStore | None = None) -> web.Application:
    """Build the device application for ``config`` (the routes of :data:`~bootserver.urls.ROUTES` on
    the device listener); ``app[ADMIN_APP]`` is the admin application (the live page of
    :mod:`bootserver.http.page`, ``/nodes``, ``/metrics``, ...; behind ``server.admin.token_file``'s token when
    set), which shares its service, metrics and concurrency cap. Run both with :func:`runner_kwargs`.

    ``signer`` signs and verifies per-node URLs (default: the keys of the state store, wall clock);
    ``state`` is the state store (default: the one ``config`` selects, see :class:`BootService`).
    """
    runtime = Runtime(config, signer, state=state, measured=True)
    metrics = runtime.metrics
    assert metrics is not None
    limits = Limits(config.server.max_concurrent, config.server.request_timeout, config.server.max_queued, metrics)
    loaded = Loaded.load(config, runtime, time.time())
    svc = loaded.svc
    live = page.Page(runtime, svc, loaded.at)
    running = Running(loaded, runtime, metrics, live)
    app = _app(svc, running, metrics, DEVICE, limits)
    app.on_startup.append(_start_service)
    app.on_cleanup.append(_close_service)
    token = config.admin_token()
    admin = app[ADMIN_APP] = _app(svc, running, metrics, ADMIN, limits, token)
    admin[page.PAGE] = live
    admin.on_shutdown.append(page.close_hub)
    return app


class ServerKwargs(accesslog.RunnerKwargs):
    """The keyword arguments of :class:`aiohttp.web.AppRunner` for one of our applications (see
    :func:`runner_kwargs`): the access log's, the request limits (bytes) and keep-alive (seconds)."""

    max_line_size: int
    max_field_size: int
    max_headers: int
    keepalive_timeout: float
    lingering_time: float


def runner_kwargs(app: web.Application) -> ServerKwargs:
    """Keyword arguments of :class:`aiohttp.web.AppRunner` (or ``TestServer.start_server``) for ``app``
    (either listener's): our access log (no query strings, counted in the app's metrics, also for
    requests too malformed to reach the app), the request line/header limits (bytes), the keep-alive
    timeout (seconds) and no lingering: aiohttp would read an unread request body for up to 10 s after
    the answer (a 10 MB check-in body whole); the connection closes instead."""
    return {**accesslog.runner_kwargs(app[accesslog.METRICS]), "max_line_size": MAX_LINE_SIZE,
            "max_field_size": MAX_FIELD_SIZE, "max_headers": MAX_HEADERS,
            "keepalive_timeout": app[SERVICE].config.server.keepalive_timeout,
            # a body no route reads (over the limit: 413) is never read on: the connection closes instead
            "lingering_time": 0.0}
