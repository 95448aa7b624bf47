"""aiohttp's own answers to requests it cannot parse, under our header rules (issue 41).

aiohttp answers a request it cannot parse (a request line or header over its limits, a bad method, TLS
bytes on the plain port, ``Transfer-Encoding`` with ``Content-Length``, ...) before any of our code
runs: ``RequestHandler.handle_error`` builds the answer, with ``Server: Python/3.x aiohttp/3.x`` and
the parser's message, which quotes the request's bytes (``bytearray(b'...')``), as its body. Neither a
middleware nor ``on_response_prepare`` sees it: the request has no route.

aiohttp (pinned ``>=3.14,<3.15``) offers no public hook for it, so this module fences the private one
in one place: :func:`fence` makes a runner's :class:`aiohttp.web.Server` create protocol handlers whose
``handle_error`` (aiohttp's, which still logs as before) answers with our ``Server``, ``nosniff`` and the
listener's other fixed headers, and a short fixed body per status (:data:`BODIES`), never the request.
tests/http/test_parse_errors.py fails when the names used here move (``aiohttp.web_protocol.RequestHandler.
handle_error`` and its arguments, ``aiohttp.web.Server.__call__``, ``AppRunner.server``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import hdrs, web, web_protocol

#: The body of each status aiohttp answers by itself (its parser's 400, 413, 431, 501; 500 and 504 of
#: a handler that failed outside our own error handling); any other status: ``error``.
BODIES = {400: "bad request", 413: "request too large", 431: "request header fields too large",
          500: "internal error", 501: "not implemented", 504: "gateway timeout"}
#: The headers of every answer of the device listener (and of the admin listener, which adds its own).
DEVICE_HEADERS: Mapping[str, str] = {hdrs.SERVER: "bootserver", "X-Content-Type-Options": "nosniff"}
#: The admin listener's: :data:`DEVICE_HEADERS`, not stored by caches, no ``Referer`` from its pages.
ADMIN_HEADERS: Mapping[str, str] = {**DEVICE_HEADERS, hdrs.CACHE_CONTROL: "no-store",
                                    "Referrer-Policy": "no-referrer"}


class _Handler(web_protocol.RequestHandler):
    """aiohttp's protocol handler whose error answers follow our header rules (see the module docstring)."""

    __slots__ = ()
    #: The fixed headers of the listener (set per runner by :func:`fence`).
    headers: Mapping[str, str] = DEVICE_HEADERS

    def handle_error(self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        super().handle_error(request, status, exc, message)  # aiohttp's log line; raises when a body went out
        answer = web.Response(status=status, text=BODIES.get(status, "error") + "\n", content_type="text/plain",
                              headers=dict(self.headers))
        answer.force_close()
        return answer


class _Server(web.Server):
    handler: type[_Handler] = _Handler

    def __call__(self) -> web_protocol.RequestHandler:
        handler = super().__call__()
        handler.__class__ = self.handler  # the same object, with our handle_error
        return handler


def fence(runner: web.BaseRunner, headers: Mapping[str, str]) -> None:
    """Make the answers aiohttp writes by itself on ``runner``'s sockets carry ``headers``
    (:data:`DEVICE_HEADERS` or :data:`ADMIN_HEADERS`) and a fixed body. Call after ``runner.setup()``,
    before its sites start. Raises ``RuntimeError`` when the runner has no server yet."""
    server: Any = runner.server
    if server is None:
        raise RuntimeError("fence() before runner.setup()")
    handler = type("ListenerHandler", (_Handler,), {"__slots__": (), "headers": dict(headers)})
    server.__class__ = type("ListenerServer", (_Server,), {"handler": handler})
