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
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import hdrs, web
from pydantic import BaseModel, ValidationError

from .. import node_writes
from ..api import openapi, views, writes
from ..api.operations import OPERATIONS, PREFIX, Operation
from ..api.problems import MEDIA_TYPE, FieldError, Problem, pointer
from ..api.tokens import Caller, TokenCache
from ..config import STORE_SOURCE, describe_error, normalize_mac
from ..config.loader import store_node
from ..errors import BootserverError, FileNodeError, InputError, UnavailableError
from ..node_writes import Precondition
from ..service import BootService
from ..state.apistore import AuditEntry
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


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):  # a stored node's read-only mappings
        return dict(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def json_answer(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """``data`` as an ``application/json`` answer (read-only mappings as objects)."""
    return web.Response(status=status, body=json.dumps(data, default=_plain).encode(),
                        content_type="application/json", headers=headers)


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


_ETAG = re.compile(r'\s*(W/)?"([^"]*)"\s*(,|$)')


def preconditions(request: web.Request, found: Found | None) -> Precondition:
    """The write's precondition from ``If-Match`` (the node's generation as an entity tag, compared
    strongly, or ``*``) and ``If-None-Match: *`` (RFC 9110 section 13.1), checked against ``found`` (the
    node now) and handed to the store, which checks it again inside its transaction. Raises
    :class:`Problem` ``precondition-failed`` when it already fails, ``invalid-parameter`` for an
    ``If-None-Match`` other than ``*``."""
    name = request.match_info["name"]
    none_match = request.headers.get(hdrs.IF_NONE_MATCH)
    if none_match is not None:
        if none_match.strip() != "*":
            raise Problem("invalid-parameter", "If-None-Match: only * (create only) is understood on a write")
        if found is not None:
            raise Problem("precondition-failed", f"node {name} exists (If-None-Match: *)")
        return Precondition(create_only=True)
    match = request.headers.get(hdrs.IF_MATCH)
    if match is None:
        return Precondition()
    if found is None:
        raise Problem("precondition-failed", f"node {name} does not exist (If-Match)")
    if match.strip() == "*":
        return Precondition(generation=found.generation)
    tags, pos = [], 0
    while pos < len(match):
        m = _ETAG.match(match, pos)
        if m is None or m.end() == pos:
            break
        if m.group(1) is None:  # a weak tag never matches If-Match (strong comparison)
            tags.append(m.group(2))
        pos = m.end()
    if str(found.generation) not in tags:
        raise Problem("precondition-failed", f"node {name} is at generation {found.generation} (If-Match)")
    return Precondition(generation=found.generation)


@dataclass(frozen=True)
class Found:
    """A node the path names, as found: its ``source`` (``store`` or ``file:PATH``), its mapping ``spec``
    (a store node's as stored, sealed passwords included; a file node's keys not at their defaults) and
    ``generation`` (0 for a file node)."""

    name: str
    source: str
    spec: Mapping[str, Any]
    generation: int

    @property
    def in_file(self) -> bool:
        """Whether it is a file node (read-only here)."""
        return self.source != STORE_SOURCE


#: The node the path names (``resolve`` ``node``: always; ``node_name``: when it exists).
FOUND = web.RequestKey("api_found", Found)


async def find(svc: BootService, name: str) -> Found | None:
    """Node ``name``: a file node of the running config, else the state store's (read there, so a write
    is read back at once on any replica), else ``None``."""
    config = svc.config
    if views.is_file_node(config, name):
        spec = config.nodes[name].model_dump(mode="json", exclude_defaults=True)
        return Found(name, views.node_source(config, name), spec, 0)
    stored = await svc.runtime.state.stored_node(name)
    return None if stored is None else Found(name, STORE_SOURCE, stored.spec, stored.generation)


async def _resolve(request: web.Request, op: Operation) -> None:
    svc = request[LOADED].svc
    name = request.match_info.get("name", "")
    if op.resolve in ("node", "node_name"):
        found = await find(svc, name)
        if found is not None:
            request[FOUND] = found
        elif op.resolve == "node":
            raise Problem("not-found", f"no node {name}")
    if op.resolve == "profile" and name not in svc.config.profiles:
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
            await _resolve(request, op)
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


def _macs(spec: Mapping[str, Any]) -> list[str]:
    macs = spec.get("mac", [])
    return [macs] if isinstance(macs, str) else [m for m in macs if isinstance(m, str)]


async def list_nodes(request: web.Request) -> web.StreamResponse:
    """``GET /api/v1/nodes``: a page of nodes by name, both sources (the store's read from the store),
    filtered (:class:`~bootserver.api.models.NodeListQuery`)."""
    svc = request[LOADED].svc
    config = svc.config
    q = request[QUERY]
    after = views.page_after(getattr(q, "page_token", None))
    limit: int = getattr(q, "limit", 100)
    profile, source, mac, stage = (getattr(q, k, None) for k in ("profile", "source", "mac", "stage"))
    state = svc.runtime.state
    inventory = await state.inventory()
    specs: dict[str, Found] = {n: Found(n, STORE_SOURCE, s.spec, s.generation) for n, s in inventory.nodes.items()}
    files = {n for n in config.nodes if views.is_file_node(config, n)}
    names = sorted(n for n in files | set(specs) if after is None or n > after)
    if source is not None:
        names = [n for n in names if (STORE_SOURCE if n in specs else views.node_source(config, n)) == source
                 or (source == "file" and n not in specs)]
    if profile is not None:
        names = [n for n in names if (specs[n].spec.get("profile") if n in specs else config.nodes[n].profile)
                 == profile]
    if mac is not None:
        want = normalize_mac(mac)
        names = [n for n in names if (want in (m.lower().replace("-", ":") for m in _macs(specs[n].spec))
                                      if n in specs else views.mac_matches(config, n, mac))]
    await svc.runtime.drain()
    if stage is not None:
        states = {s.node: s for s in await state.nodes(names) if s.stage == stage}
        names = [n for n in names if n in states]
    page = names[:limit]
    if stage is None:
        states = {s.node: s for s in await state.nodes(page)}
    items = [views.stored_view(n, specs[n].spec, specs[n].generation, states[n]) if n in specs
             else views.node_view(config, n, states[n]) for n in page]
    more = len(names) > limit
    return json_answer({"items": items, "next_page_token": views.page_token(page[-1]) if more else None})


async def _view(svc: BootService, found: Found) -> dict[str, Any]:
    await svc.runtime.drain()
    return views.shown(found.name, found.spec, found.source, found.generation,
                       await svc.runtime.state.node(found.name))


def _etag(view: Mapping[str, Any]) -> dict[str, str]:
    return {hdrs.ETAG: f'"{view["generation"]}"'}


async def get_node(request: web.Request) -> web.StreamResponse:
    """``GET /api/v1/nodes/{name}``: one node, its generation as ``ETag``."""
    view = await _view(request[LOADED].svc, request[FOUND])
    return json_answer(view, headers=_etag(view))


async def _audit(request: web.Request, action: str, before: Mapping[str, Any] | None,
                 after: Mapping[str, Any] | None, status: int) -> None:
    """Record a write in the audit trail (the changed keys, never a value); a store that fails here is
    logged: the write itself is done."""
    loaded = request[LOADED]
    entry = AuditEntry(time.time(), request[CALLER].token, loaded.gate.client(request), request[REQUEST_ID],
                       request.method, request.match_info.get("name"), action,
                       tuple(writes.changed_keys(before, after)), status)
    try:
        await loaded.svc.runtime.state.write_audit([entry])
    except BootserverError as e:
        log.error("%s %s: the audit entry of request %s was not written: %s", request.method, request.path,
                  entry.request_id, e)


def _writable(request: web.Request) -> Found | None:
    found = request.get(FOUND)
    if found is not None and found.in_file:
        raise writes.problem_of(FileNodeError(found.name, found.source), found.name)
    return found


async def _write(request: web.Request, found: Found | None, spec: dict[str, Any],
                 pre: Precondition) -> tuple[int, dict[str, Any]]:
    svc = request[LOADED].svc
    name = request.match_info["name"]
    try:  # kept as the schema reads it (MACs in lower case, defaults left out): a read sent back is unchanged
        spec = store_node(name, spec).model_dump(mode="json", exclude_defaults=True)
        applied = (await node_writes.apply_nodes(svc.config, svc.runtime.state, {name: spec},
                                                 preconditions={name: pre}))[0]
    except InputError as e:
        raise writes.problem_of(e, name) from None
    status = 201 if applied.outcome == "created" else 200
    view = await _view(svc, Found(name, STORE_SOURCE, spec, applied.generation))
    if applied.outcome != "unchanged":
        await _audit(request, "created" if status == 201 else "patched" if request.method == "PATCH" else "replaced",
                     None if found is None else found.spec, spec, status)
    return status, view


async def put_node(request: web.Request) -> web.StreamResponse:
    """``PUT /api/v1/nodes/{name}``: create (201) or replace (200) a store node (docs/api.md, "Nodes")."""
    found = _writable(request)
    pre = preconditions(request, found)
    name = request.match_info["name"]
    spec = writes.spec_of(name, request[BODY], request[LOADED].svc.config.state_dir,
                          None if found is None else found.spec)
    status, view = await _write(request, found, spec, pre)
    headers = _etag(view)
    if status == 201:
        headers[hdrs.LOCATION] = f"{PREFIX}/nodes/{name}"
    return json_answer(view, status, headers)


async def patch_node(request: web.Request) -> web.StreamResponse:
    """``PATCH /api/v1/nodes/{name}``: a JSON merge patch (RFC 7396) of a store node."""
    found = _writable(request)
    assert found is not None  # resolve="node"
    pre = preconditions(request, found)
    name = request.match_info["name"]
    patched = writes.merge_patch(found.spec, writes.password_patch(request[BODY]))
    spec = writes.spec_of(name, patched, request[LOADED].svc.config.state_dir, found.spec, keep=False)
    _, view = await _write(request, found, spec, pre)
    return json_answer(view, headers=_etag(view))


async def delete_node(request: web.Request) -> web.StreamResponse:
    """``DELETE /api/v1/nodes/{name}``: delete a store node (204); its history stays readable."""
    found = _writable(request)
    assert found is not None  # resolve="node"
    pre = preconditions(request, found)
    svc = request[LOADED].svc
    try:
        await node_writes.delete_nodes(svc.config, svc.runtime.state, [found.name],
                                       None if pre.generation is None else {found.name: pre.generation})
    except InputError as e:
        raise writes.problem_of(e, found.name) from None
    await _audit(request, "deleted", found.spec, None, 204)
    return web.Response(status=204)


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
    "getOpenapi": get_openapi, "listNodes": list_nodes, "getNode": get_node, "putNode": put_node,
    "patchNode": patch_node, "deleteNode": delete_node,
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
