"""The access log of ``bootserver serve``, and what a request carries for it.

:class:`AccessLogger` runs after the last byte of every answer (aiohttp calls it, also when the client
went away, and also for requests too malformed to reach the app: a TLS ClientHello on the plain port,
an unknown method, an oversized header). It only logs and counts: one log line, the request metrics,
and the handler's :data:`ON_SENT` callback when there is one. It must be the runner's
``access_log_class``: use :func:`runner_kwargs`.

The request keys below are set by :func:`bootserver.http.app.front` and the handlers; a request without
:data:`ROUTE` matched no route of ours (route label ``unmatched``: aiohttp's 404/405, a malformed request).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any, TypedDict

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.http_exceptions import HttpProcessingError

from ..metrics import Metrics
from ..urls import ARTIFACT, Route

access_log = logging.getLogger("bootserver.access")
protocol_log = logging.getLogger("bootserver.protocol")

#: App storage: the server's metrics (shared by the device and admin applications).
METRICS = web.AppKey("metrics", Metrics)
#: Request storage: the :class:`~bootserver.urls.Route` the request matched.
ROUTE = web.RequestKey("route", Route)
#: Request storage: the configured node a request concerns (resolved once by :func:`bootserver.http.app.front`, or for
#: artifact requests attributed by client address).
NODE = web.RequestKey("node", str)
#: Request storage: ``kernel``, ``initramfs``, ``rootfs`` or ``other`` for artifact GETs.
ARTIFACT_KIND = web.RequestKey("artifact_kind", str)
#: Request storage: ``on_sent(status, body bytes sent, complete)``, called once the answer's last byte
#: went out or its connection broke (e.g. :meth:`BootService.artifact_answered`). Like
#: :data:`ARTIFACT_KIND` and :data:`BODY_SENT`, read for the artifact route only.
# (a Callable is not a class, so its type goes in the subscript, as aiohttp's BaseKey documents)
ON_SENT = web.RequestKey[Callable[[int, int, bool], None]]("on_sent")
#: Request storage: ``(body bytes sent, complete)`` counted by a handler whose client went away during a
#: ``sendfile`` (aiohttp does not count those bytes); :func:`sent_body_bytes` prefers it.
BODY_SENT = web.RequestKey("body_sent", tuple)


def _header_size(response: web.StreamResponse) -> int:
    """Bytes of the status line and headers as aiohttp writes them (HTTP/1.1)."""
    return (len(f"HTTP/1.1 {response.status} {response.reason}\r\n")
            + sum(len(k) + len(v) + 4 for k, v in response.headers.items()) + 2)


def sent_body_bytes(request: web.BaseRequest, response: web.StreamResponse,
                    counted: tuple[int, bool] | None = None) -> tuple[int, bool]:
    """``(body bytes sent, complete)`` of a finished answer: ``counted`` (the handler's own count,
    :data:`BODY_SENT`) when given.

    aiohttp counts headers in ``body_length`` and does not count bytes sent with ``sendfile`` at all,
    so: an answer with a ``Content-Length`` whose connection is still up sent exactly that many body
    bytes; otherwise the count is what went through the writer, minus the headers (a lower bound for a
    broken ``sendfile`` transfer). ``complete`` is false when the connection broke.
    """
    if counted is not None:
        return counted
    transport = request.transport
    broken = transport is None or transport.is_closing()
    if request.method == "HEAD" or response.status in (204, 304):
        return 0, not broken
    length = response.content_length
    if length is not None and not broken:
        return length, True
    written = max(0, response.body_length - _header_size(response))
    return written, not broken


class AccessLogger(AbstractAccessLogger):
    """One line per request (path without query string, route, node, status, bytes, seconds) and the
    request metrics in :attr:`metrics`. Called by aiohttp after the last byte. Use a subclass bound to
    one server's metrics (:func:`runner_kwargs`)."""

    metrics: Metrics | None = None

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        spec = request.get(ROUTE)
        route = spec.pattern if spec is not None else "unmatched"
        status = response.status
        metrics = self.metrics
        if metrics is not None:
            metrics.request(route, request.method, status, time)
        logged = self.logger.isEnabledFor(logging.INFO)
        # BODY_SENT, ON_SENT and ARTIFACT_KIND belong to the artifact route: other requests do not look
        # (a missing key of an aiohttp request costs a KeyError raised and caught), and without the
        # log line they need no byte count either (a script request under load: docs/benchmarks.md)
        if spec is ARTIFACT:
            nbytes, complete = sent_body_bytes(request, response, request.get(BODY_SENT))
            if metrics is not None:
                metrics.bytes_served.labels(request.get(ARTIFACT_KIND, "other")).inc(nbytes)
                metrics.cache.labels("miss" if status == 404 else "hit").inc()
            on_sent = request.get(ON_SENT)
            if on_sent is not None:
                on_sent(status, nbytes, complete)
        elif logged:
            nbytes, complete = sent_body_bytes(request, response)
        if not logged:
            return
        node = request.get(NODE)
        self.logger.info(
            "%s %s %s %s node=%s bytes=%d %.3fs%s", request.remote, request.method, request.path, status,
            node or "-", nbytes, time, "" if complete else " incomplete",
            extra={"remote": request.remote, "method": request.method, "path": request.path, "route": route,
                   "node": node, "status": status, "bytes": nbytes, "duration": round(time, 6)})


class ProtocolLog(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's server logger (``RequestHandler(logger=...)``): a request too malformed to parse (an
    ``HttpProcessingError``: TLS on the plain port, a bad method, a header over the limit) is the
    client's doing, already answered 400 and in the access log, so its reason is one DEBUG line with
    no traceback; any other exception keeps its traceback at ERROR."""

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else sys.exc_info()[1]
        if isinstance(exc, HttpProcessingError):
            self.debug("%s: %s %s", str(msg) % args if args else msg, type(exc).__name__,
                       str(exc.message)[:200])
            return
        super().exception(msg, *args, exc_info=exc_info, **kwargs)


class RunnerKwargs(TypedDict):
    """The access-log keyword arguments of :class:`aiohttp.web.AppRunner` (see :func:`runner_kwargs`)."""

    access_log_class: type[AbstractAccessLogger]
    access_log: logging.Logger
    logger: ProtocolLog


def runner_kwargs(metrics: Metrics | None) -> RunnerKwargs:
    """Keyword arguments for ``AppRunner``/``TestServer.start_server``: our access logger, counting in
    ``metrics``, and :class:`ProtocolLog` (see :func:`bootserver.http.app.runner_kwargs`)."""
    bound = type("AccessLogger", (AccessLogger,), {"metrics": metrics})
    return {"access_log_class": bound, "access_log": access_log, "logger": ProtocolLog(protocol_log, {})}
