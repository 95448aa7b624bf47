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

import asyncio
import bisect
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

from .. import adoption, node_writes
from .. import provision as provisioning
from ..api import openapi, views, writes
from ..api.models import AdoptBody, rfc3339
from ..api.operations import ACTIONS, OPERATIONS, PREFIX, Operation
from ..api.problems import MEDIA_TYPE, FieldError, Problem, pointer
from ..api.tokens import Caller, TokenCache
from ..config import STORE_SOURCE, describe_error, normalize_mac
from ..config.loader import store_node
from ..errors import (
    BootserverError,
    ChangesExpiredError,
    FileNodeError,
    InputError,
    NodeCheckError,
    NodeConflictError,
    PreconditionFailedError,
    UnavailableError,
)
from ..inventory import inventory
from ..node_writes import Precondition
from ..service import BootService
from ..state.apistore import AuditEntry
from ..timeline import Record
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


def shown_text(text: str) -> str:
    """``text`` on one log line: control characters as escapes (a detail may quote what a client sent)."""
    return text if text.isprintable() else text.encode("unicode_escape").decode()


def problem_answer(request: web.Request, problem: Problem) -> web.Response:
    """``problem`` as an ``application/problem+json`` answer (its status and headers, ``instance`` the
    request's path), with one log line (kind and detail: never a body or a header's value)."""
    kind = problem.kind
    log.log(logging.WARNING if kind.status >= 500 else logging.INFO, "%s %s: %d %s: %s", request.method,
            shown_text(request.path), kind.status, kind.kind, shown_text(problem.detail))
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
    node = svc.inventory.get(name)
    if node is not None and views.is_file_node(node):
        spec = svc.config.nodes[name].model_dump(mode="json", exclude_defaults=True)
        return Found(name, node.source, spec, 0)
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
            log.exception("%s %s: 500 unexpected error (request %s)", request.method, shown_text(request.path), rid)
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


@dataclass
class Listing:
    """The node list's view of the store, kept while the store's revision and the running config stay:
    every node's :class:`Found` (the store's and the file nodes') and their names in order. A page then
    costs one indexed row (the revision) and the page's own work, not a read of every store node."""

    revision: int = -1
    config: object = None
    found: Mapping[str, Found] | None = None
    names: tuple[str, ...] = ()

    async def current(self, svc: BootService) -> tuple[Mapping[str, Found], tuple[str, ...]]:
        """Every node by name and the names in order, read again when the store's revision or the
        running config changed."""
        state, config = svc.runtime.state, svc.config
        revision = await state.inventory_revision()
        if self.found is None or revision != self.revision or config is not self.config:
            inventory = await state.inventory()
            found: dict[str, Found] = {n: Found(n, STORE_SOURCE, s.spec, s.generation)
                                       for n, s in inventory.nodes.items()}
            for n, node in svc.inventory.items():
                if n not in found and views.is_file_node(node):
                    found[n] = Found(n, node.source, {}, 0)
            self.found, self.names = found, tuple(sorted(found))
            self.revision, self.config = inventory.revision, config
        return self.found, self.names


LISTING = web.AppKey("api_listing", Listing)


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
    found, ordered = await request.app[LISTING].current(svc)
    specs = {n: f for n, f in found.items() if not f.in_file}
    nodes = svc.inventory
    names = list(ordered[bisect.bisect_right(ordered, after):] if after is not None else ordered)
    if source is not None:
        names = [n for n in names if (STORE_SOURCE if n in specs else nodes[n].source) == source
                 or (source == "file" and n not in specs)]
    if profile is not None:
        names = [n for n in names if (specs[n].spec.get("profile") if n in specs else nodes[n].profile)
                 == profile]
    if mac is not None:
        want = normalize_mac(mac)
        names = [n for n in names if (want in (m.lower().replace("-", ":") for m in _macs(specs[n].spec))
                                      if n in specs else views.mac_matches(nodes[n], mac))]
    await svc.runtime.drain()
    if stage is not None:
        states = {s.node: s for s in await state.nodes(names) if s.stage == stage}
        names = [n for n in names if n in states]
    page = names[:limit]
    if stage is None:
        states = {s.node: s for s in await state.nodes(page)}
    items = [views.stored_view(n, specs[n].spec, specs[n].generation, states[n]) if n in specs
             else views.node_view(nodes[n], config.nodes[n], states[n]) for n in page]
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
                 after: Mapping[str, Any] | None, status: int, node: str | None = None) -> None:
    """Record a write in the audit trail (the changed keys, never a value); a store that fails here is
    logged: the write itself is done."""
    loaded = request[LOADED]
    entry = AuditEntry(time.time(), request[CALLER].token, loaded.gate.client(request), request[REQUEST_ID],
                       request.method, node or request.match_info.get("name"), action,
                       tuple(writes.changed_keys(before, after)), status)
    try:
        await loaded.svc.runtime.state.write_audit([entry])
    except BootserverError as e:
        log.error("%s %s: the audit entry of request %s was not written: %s", request.method, shown_text(request.path),
                  entry.request_id, e)


def _writable(request: web.Request) -> Found | None:
    found = request.get(FOUND)
    if found is not None and found.in_file:
        raise writes.problem_of(FileNodeError(found.name, found.source), found.name)
    return found


def _normalized(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` as the schema reads it (MACs in lower case, keys at their defaults left out), so a
    representation sent back is unchanged. Raises :class:`Problem` ``invalid-node``."""
    try:
        return store_node(name, spec).model_dump(mode="json", exclude_defaults=True)
    except InputError as e:
        raise writes.problem_of(e, name) from None


async def _write(request: web.Request, found: Found | None, spec: dict[str, Any],
                 pre: Precondition) -> tuple[int, dict[str, Any]]:
    svc = request[LOADED].svc
    name = request.match_info["name"]
    try:
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
    name = request.match_info["name"]
    spec = _normalized(name, writes.spec_of(name, request[BODY], request[LOADED].svc.config.state_dir,
                                            None if found is None else found.spec))
    status, view = await _write(request, found, spec, preconditions(request, found))
    headers = _etag(view)
    if status == 201:
        headers[hdrs.LOCATION] = f"{PREFIX}/nodes/{name}"
    return json_answer(view, status, headers)


async def patch_node(request: web.Request) -> web.StreamResponse:
    """``PATCH /api/v1/nodes/{name}``: a JSON merge patch (RFC 7396) of a store node."""
    found = _writable(request)
    assert found is not None  # resolve="node"
    name = request.match_info["name"]
    patched = writes.merge_patch(found.spec, writes.password_patch(request[BODY]))
    spec = _normalized(name, writes.spec_of(name, patched, request[LOADED].svc.config.state_dir, found.spec,
                                            keep=False))
    _, view = await _write(request, found, spec, preconditions(request, found))
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
    return json_answer({"items": [views.profile_view(p, config.profiles[p]) for p in sorted(config.profiles)]})


async def get_profile(request: web.Request) -> web.StreamResponse:
    """``GET /api/v1/profiles/{name}``: one profile."""
    name = request.match_info["name"]
    return json_answer(views.profile_view(name, request[LOADED].svc.config.profiles[name]))


async def list_discovered(request: web.Request) -> web.StreamResponse:
    """``GET /api/v1/discovered``: the machines that reported themselves, last reported first."""
    machines = await request[LOADED].svc.runtime.state.discovered()
    return json_answer({"items": [views.discovered_view(m) for m in machines]})


def _record(svc: BootService, name: str, spec: Mapping[str, Any], event: str,
            detail: Mapping[str, Any]) -> Record:
    profile = svc.config.profiles.get(str(spec.get("profile")))
    return Record(name, event, profile.mode if profile else "install", time.time(), detail=dict(detail),
                  real_config=profile is None or profile.ignition is not None)


async def _run_action(svc: BootService, action: str, found: Found, request_id: str) -> None:
    """``provision``/``deprovision`` of one node as the commands do them (in a thread: the providers block),
    then the node's timeline records how it ended (``provision`` with the provider's line, or
    ``provision-failed`` with the error's line)."""
    state = svc.runtime.state
    try:
        config = await node_writes.with_store(svc.config, state)
        node = inventory(config)[found.name]  # resolved once, from the config the providers open
        if action == "provision":
            lines = await asyncio.to_thread(provisioning.provision, config, {}, [node], wait=False)
        else:
            lines = await asyncio.to_thread(provisioning.deprovision, config, {}, [node])
        event, detail = action, {"outcome": " ".join(lines)[:500], "request": request_id}
    except BootserverError as e:
        log.warning("%s of node %s (request %s) failed: %s", action, found.name, request_id, e)
        event, detail = f"{action}-failed", {"error": (e.public or str(e))[:500], "request": request_id}
    await state.record(_record(svc, found.name, found.spec, event, detail))


#: The actions running in the background (kept so they are not collected before they end).
_ACTIONS: set[asyncio.Task[None]] = set()


async def post_node_action(request: web.Request) -> web.StreamResponse:
    """``POST /api/v1/nodes/{name}/actions/{reinstall|provision|deprovision}``: 202 with ``Location`` (the
    node); ``reinstall`` is recorded at once, ``provision``/``deprovision`` run in the background and
    the node's timeline records how they ended."""
    action = request.match_info["action"]
    if action not in ACTIONS:
        raise Problem("not-found", f"no action {action} (actions: {', '.join(ACTIONS)})")
    found = request[FOUND]
    svc = request[LOADED].svc
    if not isinstance(found.spec.get("profile"), str) or found.spec["profile"] not in svc.config.profiles:
        raise Problem("unprocessable", f"node {found.name}: its profile is not in the running config yet")
    if action == "reinstall":
        await svc.runtime.state.record(_record(svc, found.name, found.spec, "reinstall",
                                               {"request": request[REQUEST_ID]}))
    else:
        config = await node_writes.with_store(svc.config, svc.runtime.state)
        resolved = inventory(config).get(found.name)
        if resolved is None or resolved.provider is None:
            raise Problem("unprocessable", f"node {found.name} has no provider to {action} it with "
                          "(set provider on the node or its profile)")
        task = asyncio.ensure_future(_run_action(svc, action, found, request[REQUEST_ID]))
        _ACTIONS.add(task)
        task.add_done_callback(_ACTIONS.discard)
    await _audit(request, action, None, None, 202)
    body = {"action": action, "node": found.name, "request_id": request[REQUEST_ID],
            "accepted_at": rfc3339(time.time())}
    return json_answer(body, 202, {hdrs.LOCATION: f"{PREFIX}/nodes/{found.name}"})


async def adopt_discovered(request: web.Request) -> web.StreamResponse:
    """``POST /api/v1/discovered/{mac}/adopt``: the discovered machine becomes a store node, by the rules of
    ``bootserver nodes adopt`` (201, the node)."""
    svc = request[LOADED].svc
    state = svc.runtime.state
    mac = request.match_info["mac"]
    try:
        body = AdoptBody.model_validate(request[BODY])
    except ValidationError as e:
        errors = [FieldError(pointer(err["loc"]), describe_error(err, AdoptBody)[1]) for err in e.errors()]
        raise Problem("unprocessable", f"the body is refused: {errors[0].detail}", errors=errors) from None
    try:
        want = normalize_mac(mac)
    except ValueError:
        raise Problem("not-found", "no discovered machine of that MAC (GET /api/v1/discovered)") from None
    if not any(want in m.macs() for m in await state.discovered()):
        raise Problem("not-found", f"no discovered machine {want} (GET /api/v1/discovered)")
    try:
        adopted = await adoption.adopt(svc.config, state, want, name=body.name, profile=body.profile,
                                       addresses=body.addresses, anywhere=body.anywhere, into_store=True)
    except (NodeConflictError, PreconditionFailedError, NodeCheckError, FileNodeError) as e:
        raise writes.problem_of(e, body.name) from None
    except InputError as e:
        raise Problem("unprocessable", e.public or str(e)) from None
    stored = await state.stored_node(adopted.name)
    if stored is None:  # deleted meanwhile
        raise Problem("not-found", f"no node {adopted.name}")
    view = await _view(svc, Found(adopted.name, STORE_SOURCE, stored.spec, stored.generation))
    await _audit(request, "adopted", None, stored.spec, 201, node=adopted.name)
    return json_answer(view, 201, {**_etag(view), hdrs.LOCATION: f"{PREFIX}/nodes/{adopted.name}"})


async def list_audit(request: web.Request) -> web.StreamResponse:
    """``GET /api/v1/audit?node=&token=&limit=``: the audit trail, newest first."""
    q = request[QUERY]
    entries = await request[LOADED].svc.runtime.state.audit(getattr(q, "node", None), getattr(q, "token", None),
                                                           getattr(q, "limit", 100))
    return json_answer({"items": [{**e.as_dict(), "at": rfc3339(e.at)} for e in entries]})


#: Seconds between two looks at the store's change log and the nodes' stages while someone watches, and
#: between two keep-alive comments.
WATCH_POLL = 1.0
WATCH_KEEPALIVE = 15.0
#: What ends every watch when the server stops (set by the sub-application's shutdown).
_STOPPING = web.AppKey("api_stopping", asyncio.Event)
_CHANGE = {"created": "added", "updated": "changed", "deleted": "deleted"}


def _sse(revision: int, change: str, data: Mapping[str, Any]) -> bytes:
    return f"id: {revision}\nevent: {change}\ndata: {json.dumps(data)}\n\n".encode()


async def watch(request: web.Request) -> web.StreamResponse:
    """``GET /api/v1/watch?since=REVISION`` (or ``Last-Event-ID``): Server-Sent Events, one per node added,
    changed or deleted (from the store's change log, resumable by revision) or changing stage (seen here
    every :data:`WATCH_POLL` seconds, with the store's revision at the time); ``since`` older than the log
    keeps: 410 ``gone``."""
    state = request[LOADED].svc.runtime.state
    since = getattr(request[QUERY], "since", None)
    last_id = request.headers.get("Last-Event-ID", "")
    if since is None and last_id.isdigit():
        since = int(last_id)
    try:
        if since is None:
            since = await state.inventory_revision()
        changes, revision = await state.node_changes(since)
    except ChangesExpiredError as e:
        raise Problem("gone", f"revision {e.since} is older than the store keeps (from {e.oldest}): list the "
                      "nodes again and watch from now") from None
    await request[LOADED].svc.runtime.drain()
    stages = {s.node: s.stage for s in await state.nodes()}
    response = web.StreamResponse(headers={hdrs.CONTENT_TYPE: "text/event-stream", hdrs.CACHE_CONTROL: "no-store",
                                           REQUEST_ID_HEADER: request[REQUEST_ID]})
    await response.prepare(request)
    stopping = request.app[_STOPPING]
    loop = asyncio.get_running_loop()
    quiet_since = loop.time()
    try:
        await response.write(b": watching\n\n")
        while True:
            out = [_sse(c.revision, _CHANGE[c.change], {"revision": c.revision, "name": c.node,
                                                         "change": _CHANGE[c.change], "generation": c.generation})
                   for c in changes]
            since = max([since, revision, *(c.revision for c in changes)])
            now = {s.node: s.stage for s in await state.nodes()}
            out += [_sse(since, "stage", {"revision": since, "name": n, "change": "stage", "stage": st})
                    for n, st in sorted(now.items()) if stages.get(n, "new") != st]
            stages = now
            if out:
                await response.write(b"".join(out))
                quiet_since = loop.time()
            elif loop.time() - quiet_since >= WATCH_KEEPALIVE:
                await response.write(b": keep-alive\n\n")
                quiet_since = loop.time()
            try:
                await asyncio.wait_for(stopping.wait(), WATCH_POLL)
                break
            except TimeoutError:
                pass
            try:
                changes, revision = await state.node_changes(since)
            except ChangesExpiredError:
                await response.write(b"event: gone\ndata: {}\n\n")
                break
            except UnavailableError:
                changes = []
    except (ConnectionError, UnavailableError):  # the client went away, or the store while we streamed
        pass
    return response


#: The handler of each operation, by operation name.
HANDLERS: dict[str, Handler] = {
    "getOpenapi": get_openapi, "listNodes": list_nodes, "getNode": get_node, "putNode": put_node,
    "patchNode": patch_node, "deleteNode": delete_node,
    "getNodeTimeline": get_node_timeline, "listProfiles": list_profiles, "getProfile": get_profile,
    "listDiscovered": list_discovered, "postNodeAction": post_node_action, "adoptDiscovered": adopt_discovered,
    "listAudit": list_audit, "watch": watch,
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
    api[_STOPPING] = asyncio.Event()
    api[LISTING] = Listing()

    async def stop_watches(app: web.Application) -> None:
        app[_STOPPING].set()

    api.on_shutdown.append(stop_watches)
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
