"""Operations endpoints and per-request bookkeeping of the web app: node timeline, metrics, access log.

- :func:`ops_middleware` (outermost) attributes artifact GETs to a node by client address (see
  :mod:`bootserver.timeline`) and records ``<kind>-requested`` before the answer starts.
- :class:`AccessLogger` runs after the last byte of every answer (aiohttp calls it, also when the
  client went away): one log line, the request metrics, and ``<kind>-completed``, ``-partial``,
  ``-unchanged`` or ``-failed`` (:func:`bootserver.timeline.artifact_event`).
  It must be the runner's ``access_log_class``: use :func:`runner_kwargs`.
- ``GET /nodes`` (every node's stage, JSON), ``GET /nodes/{node}`` (its events), ``GET /metrics``.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from time import time as wallclock
from typing import Any, Awaitable, Callable

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from .errors import UnavailableError
from .metrics import Metrics
from .service import BootService
from .timeline import artifact_event

log = logging.getLogger("bootserver.ops")
access_log = logging.getLogger("bootserver.access")

ARTIFACT_ROUTE = "/artifacts/{stream}/{arch}/{release}/{file}"

#: Request storage: the node a request concerns (set by node handlers, or by artifact attribution).
NODE = web.RequestKey("node", str)
#: Request storage: ``kernel``, ``initramfs``, ``rootfs`` or ``other`` for artifact requests.
ARTIFACT_KIND = web.RequestKey("artifact_kind", str)
#: Request storage: ``hit`` or ``miss``; a read-through handler sets ``miss`` when it fetched upstream
#: (default: ``miss`` for a 404, else ``hit``).
CACHE_RESULT = web.RequestKey("cache_result", str)
#: Request storage: ``(body bytes sent, complete)`` counted by a handler whose client went away during a
#: ``sendfile`` (aiohttp does not count those bytes); :func:`sent_body_bytes` prefers it.
BODY_SENT = web.RequestKey("body_sent", tuple)


class Ops:
    """Per-app state: the metrics and the timeline writes still running."""

    def __init__(self, service: BootService) -> None:
        self.service = service
        self.metrics = Metrics(self._stages)
        self._pending: set[asyncio.Task[Any]] = set()

    def _stages(self) -> list[str]:
        nodes = self.service.config.nodes
        return [s.stage for s in self.service.timeline.nodes(list(nodes)) if s.node in nodes]

    def spawn(self, coro: Awaitable[Any]) -> None:
        """Run a timeline write in the background, kept until done (see :meth:`drain`)."""
        task = asyncio.ensure_future(coro)
        self._pending.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("timeline write failed: %s", task.exception())

    async def drain(self) -> None:
        """Wait for the background timeline writes started so far."""
        if self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)


OPS = web.AppKey("ops", Ops)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def route_of(request: web.BaseRequest) -> str:
    """The request's route pattern (``/ipxe/{node}``), or ``unmatched`` (keeps metric labels bounded)."""
    match_info = getattr(request, "match_info", None)
    route = getattr(match_info, "route", None)
    resource = getattr(route, "resource", None)
    return resource.canonical if resource is not None else "unmatched"


@web.middleware
async def ops_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Attribute artifact GETs to a node and record ``<kind>-requested``; see the module docstring."""
    if request.method == "GET" and route_of(request) == ARTIFACT_ROUTE and request.remote:
        svc = request.app[OPS].service
        m = request.match_info
        kind = svc.artifact_kind((m["stream"], m["arch"], m["release"], m["file"]))
        request[ARTIFACT_KIND] = kind
        try:
            node = svc.timeline.attribute(request.remote)  # one indexed row, on the loop
            if node is not None and node in svc.config.nodes:
                request[NODE] = node
                if kind != "other":
                    await svc.record(node, f"{kind}-requested", ip=request.remote)
        except (UnavailableError, OSError, sqlite3.Error) as e:
            # artifacts are served whatever happens to the timeline
            log.error("%s %s: not recorded in the node timeline: %s", request.method, request.path, e)
    return await handler(request)


def _header_size(response: web.StreamResponse) -> int:
    """Bytes of the status line and headers as aiohttp writes them (HTTP/1.1)."""
    return (len(f"HTTP/1.1 {response.status} {response.reason}\r\n")
            + sum(len(k) + len(v) + 4 for k, v in response.headers.items()) + 2)


def sent_body_bytes(request: web.BaseRequest, response: web.StreamResponse) -> tuple[int, bool]:
    """``(body bytes sent, complete)`` of a finished answer.

    aiohttp counts headers in ``body_length`` and does not count bytes sent with ``sendfile`` at all,
    so: an answer with a ``Content-Length`` whose connection is still up sent exactly that many body
    bytes; otherwise the count is what went through the writer, minus the headers (a lower bound for a
    broken ``sendfile`` transfer). ``complete`` is false when the connection broke.
    """
    counted = request.get(BODY_SENT)
    if counted is not None:
        return counted
    transport = request.transport
    broken = transport is None or transport.is_closing()
    if request.method == "HEAD" or response.status in (204, 304):
        return 0, not broken
    written = max(0, response.body_length - _header_size(response))
    if broken:
        return written, False
    length = response.content_length
    return (length if length is not None else written), True


class AccessLogger(AbstractAccessLogger):
    """One line per request (path without query string, route, node, status, bytes, seconds), the
    request metrics and the artifact completion events. Called by aiohttp after the last byte."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        route = route_of(request)
        node = request.get(NODE) or (request.match_info.get("node") if hasattr(request, "match_info") else None)
        nbytes, complete = sent_body_bytes(request, response)
        status = response.status
        ops = request.app.get(OPS) if hasattr(request, "app") else None
        if ops is not None:
            ops.metrics.request(route, request.method, status, time)
            if route == ARTIFACT_ROUTE:
                kind = request.get(ARTIFACT_KIND, "other")
                ops.metrics.bytes_served.labels(kind).inc(nbytes)
                ops.metrics.cache.labels(request.get(CACHE_RESULT) or ("miss" if status == 404 else "hit")).inc()
                if request.get(NODE) and kind != "other":
                    event = artifact_event(kind, status, complete)
                    detail = {"bytes": nbytes, "status": status}
                    ops.spawn(ops.service.record(request[NODE], event, ip=request.remote, detail=detail,
                                                  at=wallclock()))
        if not self.logger.isEnabledFor(logging.INFO):
            return
        self.logger.info(
            "%s %s %s %s node=%s bytes=%d %.3fs%s", request.remote, request.method, request.path, status,
            node or "-", nbytes, time, "" if complete else " incomplete",
            extra={"remote": request.remote, "method": request.method, "path": request.path, "route": route,
                   "node": node, "status": status, "bytes": nbytes, "duration": round(time, 6)})


def runner_kwargs() -> dict[str, Any]:
    """Keyword arguments for ``web.run_app``/``AppRunner``/``TestServer``: our access logger."""
    return {"access_log_class": AccessLogger, "access_log": access_log}


async def nodes_handler(request: web.Request) -> web.Response:
    """``GET /nodes``: every configured node (and any other with events): stage, since when, last event."""
    ops = request.app[OPS]
    await ops.drain()
    svc = ops.service
    states = await asyncio.to_thread(svc.timeline.nodes, list(svc.config.nodes))
    now = time.time()
    nodes = []
    for st in states:
        d = st.as_dict(now)
        d["profile"] = svc.config.nodes[st.node].profile if st.node in svc.config.nodes else None
        nodes.append(d)
    return web.json_response({"now": now, "nodes": nodes})


async def node_handler(request: web.Request) -> web.Response:
    """``GET /nodes/{node}``: the node's stage and events, oldest first (``?limit=N``: the last N)."""
    ops = request.app[OPS]
    await ops.drain()
    svc = ops.service
    node = svc.find_node(name=request.match_info["node"])
    request[NODE] = node
    try:
        limit = int(request.query["limit"]) if "limit" in request.query else None
    except ValueError:
        raise web.HTTPBadRequest(text="limit must be an integer\n") from None
    events = await asyncio.to_thread(svc.timeline.events, node, limit=limit)
    states = await asyncio.to_thread(svc.timeline.nodes, [node])
    state = next(s for s in states if s.node == node)
    now = time.time()
    return web.json_response({**state.as_dict(now), "profile": svc.config.nodes[node].profile,
                              "events": [e.as_dict() for e in events]})


async def metrics_handler(request: web.Request) -> web.Response:
    """``GET /metrics``: Prometheus text exposition format."""
    ops = request.app[OPS]
    await ops.drain()
    body = await asyncio.to_thread(ops.metrics.render)
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


async def _close(app: web.Application) -> None:
    await app[OPS].drain()
    svc = app[OPS].service
    await asyncio.to_thread(svc.writes.close)
    await asyncio.to_thread(svc.timeline.close)


def setup(app: web.Application, service: BootService) -> Ops:
    """Add the ops state, routes and shutdown hook to ``app`` (``ops_middleware`` is added by the caller,
    outermost). Returns the :class:`Ops`."""
    ops = Ops(service)
    app[OPS] = ops
    app.router.add_get("/nodes", nodes_handler)
    app.router.add_get("/nodes/{node}", node_handler)
    app.router.add_get("/metrics", metrics_handler)
    app.on_cleanup.append(_close)
    return ops
