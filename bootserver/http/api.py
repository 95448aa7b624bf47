"""The fleet API on the admin listener (``/api/v1/``, issue 49; docs/api.md): an aiohttp sub-application
(:func:`create_api`) whose every route is one :class:`~bootserver.api.operations.Operation`, served through
one frame (:func:`frame`) that does, in order, what the operation declares it needs: the request id, the
bearer token and its scope (401/403), the query string (400), what the path names resolved (``node``,
``profile``: 404), the body's media type, size and JSON (415, 413, 400); then the handler, whose
:class:`~bootserver.api.problems.Problem` (and a lost state store's ``UnavailableError``, 503) become RFC
9457 problem details. Nothing a client sends makes a 500: an unexpected error is logged with its
traceback and answered ``internal-error`` with no detail.

Unlike the device listener's front (:func:`bootserver.http.app.front`), nothing is resolved by the shape
of a path: an operation that creates a node names no existing node, and a node's refused body is a 422
with each error's JSON Pointer, not a 502.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import hdrs, web
from pydantic import BaseModel, ValidationError

from ..api import openapi, views
from ..api.operations import OPERATIONS, PREFIX, Operation
from ..api.problems import MEDIA_TYPE, FieldError, Problem, pointer
from ..api.tokens import Caller, TokenCache
from ..config import describe_error
from ..errors import UnavailableError
from .gate import CLIENT_MAX_SIZE
from .running import LOADED, Running

log = logging.getLogger("bootserver.api")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: The header a request id comes in (when a client sends a sane one) and goes back out in.
REQUEST_ID_HEADER = "X-Request-Id"
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")

#: The ``WWW-Authenticate`` of every 401 (RFC 6750 section 3).
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="bootserver"'}


#: The request's caller, id, validated query and JSON body, set by :func:`frame`.
CALLER = web.RequestKey("api_caller", Caller)
REQUEST_ID = web.RequestKey("api_request_id", str)
QUERY = web.RequestKey("api_query", BaseModel)
BODY = web.RequestKey("api_body", object)


def problem_answer(request: web.Request, problem: Problem) -> web.Response:
    """``problem`` as an ``application/problem+json`` answer (its status and headers, ``instance`` the
    request's path), with one log line (kind and detail: never a body or a header's value)."""
    kind = problem.kind
    log.log(logging.WARNING if kind.status >= 500 else logging.INFO, "%s %s: %d %s: %s", request.method,
            request.path, kind.status, kind.kind, problem.detail)
    return web.Response(status=kind.status, body=json.dumps(problem.body(request.path)).encode(),
                        content_type=MEDIA_TYPE, headers=problem.headers)


def json_answer(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """``data`` as an ``application/json`` answer."""
    return web.Response(status=status, body=json.dumps(data).encode(), content_type="application/json",
                        headers=headers)


async def _authenticate(request: web.Request, tokens: TokenCache, op: Operation) -> Caller:
    scheme, _, given = request.headers.get(hdrs.AUTHORIZATION, "").partition(" ")
    given = given.strip()
    if scheme.lower() != "bearer" or not given:
        raise Problem("unauthorized", "send a token: Authorization: Bearer <token>", headers=CHALLENGE)
    caller = tokens.caller(given)
    if caller is None:
        raise Problem("unauthorized", "the token is unknown, revoked or expired", headers=CHALLENGE)
    if op.scope not in caller.grants:
        raise Problem("forbidden", f"this needs a token with scope {op.scope}")
    return caller


def _query(request: web.Request, op: Operation) -> BaseModel | None:
    if op.query is None:
        return None
    given = request.query
    if len(set(given.keys())) != len(given):
        raise Problem("invalid-parameter", "each query parameter at most once")
    try:
        return op.query.model_validate(dict(given))
    except ValidationError as e:
        errors = [FieldError(pointer(err["loc"]), describe_error(err, op.query)[1]) for err in e.errors()]
        names = ", ".join(sorted({str(err["loc"][0]) for err in e.errors() if err["loc"]}))
        raise Problem("invalid-parameter", f"invalid query parameter: {names}", errors=errors) from None


async def _body(request: web.Request, op: Operation) -> Any:
    media = request.content_type
    if media not in op.media:
        raise Problem("unsupported-media-type", f"send the body as {' or '.join(op.media)}",
                      headers={"Accept-Patch" if op.method == "PATCH" else "Accept": ", ".join(op.media)})
    length = request.content_length
    if length is not None and length > CLIENT_MAX_SIZE:
        raise Problem("payload-too-large", f"the body may have at most {CLIENT_MAX_SIZE} bytes")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise Problem("payload-too-large", f"the body may have at most {CLIENT_MAX_SIZE} bytes") from None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as e:
        where = f" (line {e.lineno}, column {e.colno})" if isinstance(e, json.JSONDecodeError) else ""
        raise Problem("malformed-json", f"the body is not JSON{where}") from None


def _resolve(request: web.Request, op: Operation) -> None:
    config = request[LOADED].svc.config
    name = request.match_info.get("name", "")
    if op.resolve == "node" and name not in config.nodes:
        raise Problem("not-found", f"no node {name}")
    if op.resolve == "profile" and name not in config.profiles:
        raise Problem("not-found", f"no profile {name}")


def frame(running: Running, tokens: TokenCache, op: Operation, handler: Handler) -> Handler:
    """``handler`` of ``op`` behind what the operation needs first (see the module docstring); every
    answer carries :data:`REQUEST_ID_HEADER`."""

    async def answer(request: web.Request) -> web.StreamResponse:
        given = request.headers.get(REQUEST_ID_HEADER, "")
        rid = request[REQUEST_ID] = given if _REQUEST_ID.match(given) else uuid.uuid4().hex
        request[LOADED] = running.current
        try:
            if not op.open:
                request[CALLER] = await _authenticate(request, tokens, op)
            query = _query(request, op)
            if query is not None:
                request[QUERY] = query
            _resolve(request, op)
            if op.body is not None:
                request[BODY] = await _body(request, op)
            response = await handler(request)
        except Problem as p:
            response = problem_answer(request, p)
        except UnavailableError as e:
            response = problem_answer(request, Problem("unavailable", e.public or "the state store does not "
                                                       "answer; retry later",
                                                       headers={hdrs.RETRY_AFTER: str(e.retry_after)}))
        except web.HTTPException:
            raise
        except Exception:
            log.exception("%s %s: 500 unexpected error (request %s)", request.method, request.path, rid)
            response = problem_answer(request, Problem("internal-error", f"the server log has the details "
                                                       f"(request {rid})"))
        response.headers[REQUEST_ID_HEADER] = rid
        return response

    return answer


def _unmatched(allowed: tuple[str, ...]) -> Handler:
    async def answer(request: web.Request) -> web.StreamResponse:
        if not allowed:
            return problem_answer(request, Problem("not-found", "no such API resource (GET /api/v1/openapi.json "
                                                   "lists them)"))
        return problem_answer(request, Problem("method-not-allowed", f"allowed: {', '.join(allowed)}",
                                               headers={hdrs.ALLOW: ", ".join(allowed)}))
    return answer


# -- handlers ---------------------------------------------------------------------------------------


async def get_openapi(request: web.Request) -> web.StreamResponse:
    """``GET /api/v1/openapi.json``: the OpenAPI 3.1 document (:mod:`bootserver.api.openapi`)."""
    return web.Response(body=openapi.document_bytes(), content_type="application/json")


async def list_nodes(request: web.Request) -> web.StreamResponse:
    """``GET /api/v1/nodes``: a page of nodes by name, filtered (:class:`~bootserver.api.models.NodeListQuery`)."""
    svc = request[LOADED].svc
    config = svc.config
    q = request[QUERY]
    after = views.page_after(getattr(q, "page_token", None))
    limit: int = getattr(q, "limit", 100)
    profile, source, mac, stage = (getattr(q, k, None) for k in ("profile", "source", "mac", "stage"))
    names = sorted(n for n in config.nodes if after is None or n > after)
    if profile is not None:
        names = [n for n in names if config.nodes[n].profile == profile]
    if source is not None:
        names = [n for n in names if views.node_source(config, n) == source
                 or (source == "file" and views.node_source(config, n).startswith("file:"))]
    if mac is not None:
        names = [n for n in names if views.mac_matches(config, n, mac)]
    state = svc.runtime.state
    await svc.runtime.drain()
    if stage is not None:
        states = {s.node: s for s in await state.nodes(names) if s.stage == stage}
        names = [n for n in names if n in states]
    page = names[:limit]
    if stage is None:
        states = {s.node: s for s in await state.nodes(page)}
    items = [views.node_view(config, n, states[n]) for n in page]
    more = len(names) > limit
    return json_answer({"items": items, "next_page_token": views.page_token(page[-1]) if more else None})


async def get_node(request: web.Request) -> web.StreamResponse:
    """``GET /api/v1/nodes/{name}``: one node, its generation as ``ETag``."""
    svc = request[LOADED].svc
    name = request.match_info["name"]
    await svc.runtime.drain()
    view = views.node_view(svc.config, name, await svc.runtime.state.node(name))
    return json_answer(view, headers={hdrs.ETAG: f'"{view["generation"]}"'})


async def get_node_timeline(request: web.Request) -> web.StreamResponse:
    """``GET /api/v1/nodes/{name}/timeline``: the node's history, oldest first (``?limit=N``: the last N)."""
    name = request.match_info["name"]
    state, events = await request[LOADED].svc.history(name, getattr(request[QUERY], "limit", None))
    return json_answer(views.timeline_view(name, state, events))


async def list_profiles(request: web.Request) -> web.StreamResponse:
    """``GET /api/v1/profiles``: every profile by name."""
    config = request[LOADED].svc.config
    return json_answer({"items": [views.profile_view(config, p) for p in sorted(config.profiles)]})


async def get_profile(request: web.Request) -> web.StreamResponse:
    """``GET /api/v1/profiles/{name}``: one profile."""
    return json_answer(views.profile_view(request[LOADED].svc.config, request.match_info["name"]))


async def list_discovered(request: web.Request) -> web.StreamResponse:
    """``GET /api/v1/discovered``: the machines that reported themselves, last reported first."""
    machines = await request[LOADED].svc.runtime.state.discovered()
    return json_answer({"items": [views.discovered_view(m) for m in machines]})


#: The handler of each operation, by operation name.
HANDLERS: dict[str, Handler] = {
    "getOpenapi": get_openapi, "listNodes": list_nodes, "getNode": get_node,
    "getNodeTimeline": get_node_timeline, "listProfiles": list_profiles, "getProfile": get_profile,
    "listDiscovered": list_discovered,
}


def create_api(running: Running, admin_token: str | None) -> web.Application:
    """The API's sub-application, to mount at :data:`~bootserver.api.operations.PREFIX` on the admin
    application: one route per operation behind :func:`frame`, a ``405`` with ``Allow`` for another method
    on an operation's path and a ``404`` for any other path below the prefix, both as problem details."""
    api = web.Application()
    tokens = TokenCache(running.runtime.state, admin_token)

    async def poll_tokens(app: web.Application) -> AsyncIterator[None]:
        async with tokens.running():
            yield

    api.cleanup_ctx.append(poll_tokens)
    by_path: dict[str, list[Operation]] = {}
    for op in OPERATIONS:
        by_path.setdefault(op.path, []).append(op)
    for path, ops in by_path.items():
        resource = api.router.add_resource(path)
        for op in ops:
            resource.add_route(op.method, frame(running, tokens, op, HANDLERS[op.name]))
        resource.add_route("*", _unmatched(tuple(op.method for op in ops)))
    api.router.add_route("*", "/{tail:.*}", _unmatched(()))
    return api


__all__ = ["PREFIX", "create_api"]
