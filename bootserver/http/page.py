"""The live page on the admin listener (``server.admin.listen``, never the device listener): the fleet,
a node, the cache; updated by Server-Sent Events from the node timeline.

Routes (:data:`bootserver.urls.ROUTES`, admin only): ``GET /`` the fleet (one row per configured node,
counts per stage, ``?stage=`` and ``?q=`` filter by stage and by name or MAC), ``GET /ui/nodes/{node}``
a node (its events, time per stage as an inline SVG bar chart, its iPXE script and Ignition stub as
``bootserver render`` prints them, its signed chain URL), ``GET /ui/cache`` the artifact cache,
``GET /ui/events`` the live updates (``text/event-stream``, W3C HTML "Server-sent events"), and
``GET /ui/static/{file}`` the stylesheet and the page's script. Pages are rendered server-side with
Jinja2 from ``templates/page/`` (autoescaped); the script (``page.js``, ours, no library) only applies
the events to the rows and counts already on the page, and recomputes ages and stalls locally; no CDN,
no build step. Every page answer carries a ``Content-Security-Policy`` allowing only this origin.

**Live updates** (:class:`Hub`): while at least one browser listens, one task reads every configured
node (one query) when an event was recorded in this process (at most every :attr:`Hub.READ_MIN`
seconds) and at least every :attr:`Hub.READ_MAX` seconds (events recorded by other workers or
replicas), and sends each node whose row changed as one ``node`` event (its row as JSON) to every
listener. A listener that falls :attr:`Hub.QUEUE` events behind gets a ``reload`` event instead. At most
:attr:`Hub.MAX_LISTENERS` listeners (then ``503``); a connection is closed after
:attr:`Hub.MAX_SECONDS` (the browser's ``EventSource`` reconnects) and at shutdown.

**Admin token** (:func:`token_middleware`): with ``server.admin.token_file`` every admin route but
``/healthz`` and ``/readyz`` needs ``Authorization: Bearer <token>`` (``401`` without, ``403`` with a
wrong one), or the cookie that ``GET /?token=<token>`` sets (``HttpOnly``, ``SameSite=Strict``) for a
browser, which cannot send a bearer header itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import jinja2
from aiohttp import web
from markupsafe import Markup

from .. import __version__
from ..config import ResolvedNode
from ..errors import BootserverError
from ..nodes_view import format_age
from ..resources import data_dir
from ..runtime import Runtime
from ..service import BootService
from ..timeline import STAGES, Event, Recorded, final_stages, next_stage
from .admission import LIMITS

log = logging.getLogger("bootserver.page")

#: The files ``GET /ui/static/{file}`` serves (from ``templates/page/static/``), with their media types.
STATIC = {"page.css": "text/css", "page.js": "text/javascript"}

#: Every page answer's Content-Security-Policy: this origin only, no inline script or style.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")

#: The cookie ``GET /?token=`` sets when ``server.admin.token_file`` is configured.
TOKEN_COOKIE = "bootserver_admin"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(data_dir("templates") / "page")),
                             autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True)
    env.filters["ago"] = format_age
    env.filters["span"] = lambda seconds: format_age(seconds).removesuffix(" ago")
    env.filters["clock"] = lambda t: "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    env.filters["size"] = human_size
    env.filters["duration"] = duration
    return env


def duration(seconds: float) -> str:
    """A stage's length for the page: ``4.2 s`` under two minutes, else ``3m 04s``, ``1h 05m``, ``2d 03h``."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    s = int(seconds)
    if s < 7200:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 172800:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"


def human_size(n: int | None) -> str:
    """``n`` bytes as ``1.2 GiB``/``340 MiB``/``12 KiB``/``512 B`` (``-`` for ``None``)."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


class Hub:
    """The page's live updates (see the module docstring): listeners, and the task that reads the
    nodes while anyone listens. Call :meth:`recorded` on every recorded event (a hook of
    :class:`~bootserver.runtime.Runtime`), :meth:`close` at shutdown."""

    #: Reads of every node: at most once per READ_MIN seconds, at least every READ_MAX seconds.
    READ_MIN = 0.2
    READ_MAX = 1.0
    #: Listeners at most (more: 503), events a listener may lag behind, seconds a connection lives.
    MAX_LISTENERS = 64
    QUEUE = 2000
    MAX_SECONDS = 3600.0
    #: Seconds between keep-alive comments (a closed connection is noticed when writing one).
    KEEPALIVE = 15.0

    def __init__(self, page: Page) -> None:
        self.page = page
        #: each listener's queue of ``(node, SSE message)`` (node ``None``: for every page; ``None``: end)
        self._listeners: set[asyncio.Queue[tuple[str | None, str] | None]] = set()
        self._rows: dict[str, dict[str, Any]] = {}
        self._discovered: list[dict[str, Any]] | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._closed = False

    def recorded(self, event: Recorded) -> None:
        """An observer of recorded events (:meth:`bootserver.runtime.Runtime.observe`): an event (or a
        discovered machine's report) was recorded in this process, read the nodes soon."""
        self._wake.set()

    def listen(self) -> asyncio.Queue[tuple[str | None, str] | None] | None:
        """A new listener's queue of ``(node, SSE message)`` (``None`` ends it), or ``None`` when there
        are :attr:`MAX_LISTENERS` already or the hub is closed."""
        if self._closed or len(self._listeners) >= self.MAX_LISTENERS:
            return None
        queue: asyncio.Queue[tuple[str | None, str] | None] = asyncio.Queue(self.QUEUE)
        self._listeners.add(queue)
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
        return queue

    def leave(self, queue: asyncio.Queue[tuple[str | None, str] | None]) -> None:
        """Forget a listener (its connection ended)."""
        self._listeners.discard(queue)

    def _send(self, node: str, message: str) -> None:
        for queue in list(self._listeners):
            try:
                queue.put_nowait((node, message))
            except asyncio.QueueFull:  # too far behind: it reloads instead
                with contextlib.suppress(asyncio.QueueEmpty):
                    while True:
                        queue.get_nowait()
                queue.put_nowait((None, "event: reload\ndata: {}\n\n"))

    async def _run(self) -> None:
        try:
            try:
                self._rows = {r["node"]: r for r in await self.page.rows()}
                self._discovered = await self.page.discovered()
            except BootserverError as e:  # the state store is away: every row is news at the first read
                log.debug("page: nodes not read: %s", e)
            while self._listeners and not self._closed:
                read_at = time.monotonic()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.READ_MAX):  # (wait_for may eat a cancel)
                        await self._wake.wait()
                await asyncio.sleep(max(0.0, read_at + self.READ_MIN - time.monotonic()))
                self._wake.clear()
                try:
                    rows = await self.page.rows()
                except BootserverError as e:  # the state store is away: try again at the next read
                    log.debug("page: nodes not read: %s", e)
                    continue
                for row in rows:
                    if self._rows.get(row["node"]) != row:
                        self._rows[row["node"]] = row
                        self._send(row["node"], f"event: node\ndata: {json.dumps(row)}\n\n")
                try:
                    found = await self.page.discovered()
                except BootserverError as e:
                    log.debug("page: discovered machines not read: %s", e)
                    continue
                if found != self._discovered:
                    self._discovered = found
                    self._send("", f"event: discovered\ndata: {json.dumps(found)}\n\n")
        finally:
            self._task = None

    async def close(self) -> None:
        """End every listener's stream and the reading task (at shutdown)."""
        self._closed = True
        for queue in list(self._listeners):
            with contextlib.suppress(asyncio.QueueEmpty):
                while True:
                    queue.get_nowait()
            queue.put_nowait(None)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


class Page:
    """What the page shows, read from one :class:`~bootserver.service.BootService`; and its
    :class:`Hub`. The handlers below reach it as ``request.app[PAGE]``."""

    def __init__(self, runtime: Runtime, svc: BootService, loaded_at: float) -> None:
        self.env = _environment()
        self._row_template = self.env.get_template("row.html.j2")
        self.runtime = runtime
        self.hub = Hub(self)
        runtime.observe(self.hub.recorded)
        self.use(svc, loaded_at)

    def use(self, svc: BootService, loaded_at: float) -> None:
        """Show ``svc`` from now on (a reload: its config loaded at unix time ``loaded_at``), in one step;
        the live listeners stay (they observe the runtime every config shares)."""
        self.svc = svc
        self.loaded_at = loaded_at
        #: what a row shows that only the config decides (it is immutable): node -> profile, mode,
        #: configured provider, MACs
        self._static = {name: (node.profile, node.mode, node.provider or "-", list(node.mac))
                        for name, node in svc.inventory.items()}
        #: each fleet row's cells that only the config decides, escaped once (:class:`RowView`)
        self.row_heads = {name: Markup('<th scope="row"><a href="/ui/nodes/{0}">{0}</a></th><td>{1}</td><td>{2}</td>')
                          .format(name, profile, mode) for name, (profile, mode, _, _) in self._static.items()}
        #: each node's last rendered fleet row (``row.html.j2``) and the view it was rendered from
        self._row_html: dict[str, tuple[RowView, Markup]] = {}

    def render(self, template: str, **context: Any) -> web.Response:
        """``templates/page/<template>`` rendered as an HTML answer with :data:`CSP`; its header names each
        stream whose metadata could not be loaded (source, error, next try: a newcomer without network sees
        why nothing boots; the loads are started by script requests and ``/readyz``)."""
        loads, catalog = self.svc.runtime.metadata, self.svc.desk.catalog
        body = self.env.get_template(template).render(version=__version__, stages=STAGES, rendered=time.time(),
                                                      config_loaded=self.loaded_at,
                                                      metadata_problems=loads.problems(catalog), **context)
        return web.Response(text=body, content_type="text/html", headers={
            "Content-Security-Policy": CSP, "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer"})

    def row_html(self, view: RowView) -> Markup:
        """The fleet table's row for ``view`` (``templates/page/row.html.j2``), rendered again only when
        the view changed: the ages in it change every second at most, so a fleet of a thousand nodes
        costs a thousand comparisons, not a thousand renders."""
        hit = self._row_html.get(view.node)
        if hit is not None and hit[0] == view:
            return hit[1]
        html = Markup(self._row_template.render(v=view).strip())
        self._row_html[view.node] = (view, html)
        return html

    async def rows(self) -> list[dict[str, Any]]:
        """One JSON-able row per configured node, by name: ``node``, ``profile``, ``mode``, ``provider``,
        ``device`` (id) and ``device_state`` (its provider's last word), ``stage``, ``stage_at`` and
        ``last_at`` (unix seconds), ``stall_at`` (unix seconds from which it is stalled, or ``None``),
        ``last_event``, ``last_ip``, ``macs``. Raises ``UnavailableError``."""
        svc, static = self.svc, self._static  # as they were when the request came (a reload may follow)
        rows = []
        for seen in await svc.fleet(devices=True):
            if not seen.configured:
                continue
            st = seen.state
            profile, mode, provider, macs = static[st.node]
            device = seen.device or {}
            rows.append({
                "node": st.node, "profile": profile, "mode": mode, "provider": device.get("provider") or provider,
                "device": device.get("id"), "device_state": device.get("state"),
                "stage": st.stage, "stage_at": st.stage_at, "stall_at": seen.stall_at,
                "last_event": st.last_event, "last_at": st.last_at, "last_ip": st.last_ip, "macs": macs,
            })
        return rows

    async def discovered(self) -> list[dict[str, Any]]:
        """The discovered machines that are not nodes (adopted by hand: their MAC or UUID is in the
        config), last reported first, as JSON-able dicts (:meth:`Discovered.as_dict
        <bootserver.discovery.Discovered.as_dict>`). Raises ``UnavailableError``."""
        nodes = self.svc.inventory
        return [d.as_dict() for d in await self.runtime.state.discovered()
                if nodes.by_mac(d.mac) is None and not (d.uuid and nodes.by_uuid(d.uuid))]

    async def node(self, node: ResolvedNode) -> dict[str, Any]:
        """What a node's page shows: its row, its events (oldest first), the time spent in each stage
        (:func:`stage_spans`), its script and stub (as ``bootserver render`` prints them; an error's
        public text when they cannot be rendered now), its chain URL and its changes through the fleet
        API (the audit trail, newest first, at most 100)."""
        svc, name = self.svc, node.name
        row = next(r for r in await self.rows() if r["node"] == name)
        state, events = await svc.history(name)
        try:
            script = await svc.script(node)
        except BootserverError as e:
            script = f"(cannot be rendered now: {e.public or e})"
        try:
            stub = (await svc.stub(node)).decode()
        except BootserverError as e:
            stub = f"(cannot be rendered now: {e.public or e})"
        now = time.time()
        spans = stage_spans(events, node.mode, real_config=node.ignition is not None,
                            final=final_stages(node.mode, checkin=node.checkin), now=now)
        changes = await svc.runtime.state.audit(node=name, limit=100)
        return {"row": row, "events": events, "state": state, "spans": spans, "script": script, "stub": stub,
                "chain": svc.chain_url(name), "now": now, "checkin": node.checkin,
                "keep_events": svc.config.timeline.keep_events, "changes": changes}


@dataclass(frozen=True, slots=True)
class RowView:
    """One fleet row as the template prints it: every cell a plain attribute holding its text already
    (attribute lookups and escaping are what rendering a thousand rows costs), from a row of
    :meth:`Page.rows` at unix time ``now`` (:meth:`of`)."""

    node: str
    head: Markup
    provider: str
    stage: str
    last_event: str
    last_ip: str
    hidden: bool
    macs: str
    stage_at: str
    stall_at: str
    last_at: str
    device: str
    since: str
    stalled: str
    last_age: str

    @classmethod
    def of(cls, r: dict[str, Any], head: Markup, visible: bool, now: float) -> RowView:
        """The view of row ``r`` at unix time ``now``; ``head``: its first cells (:attr:`Page.row_heads`);
        ``visible``: it matches the page's filter."""
        stall_at, stage_at, last_at = r["stall_at"], r["stage_at"], r["last_at"]
        device = r["device"] or "-"
        if r["device"] and r["device_state"]:
            device = f"{r['device']} ({r['device_state']})"
        return cls(r["node"], head, r["provider"], r["stage"], r["last_event"] or "-",
                   r["last_ip"] or "-", not visible, " ".join(r["macs"]),
                   "" if stage_at is None else repr(stage_at), "" if stall_at is None else repr(stall_at),
                   "" if last_at is None else repr(last_at), device,
                   "-" if stage_at is None else format_age(now - stage_at),
                   "" if stall_at is None or now < stall_at else format_age(now - stall_at).removesuffix(" ago"),
                   "" if last_at is None else format_age(now - last_at))


def stage_spans(events: list[Event], mode: str, *, real_config: bool, final: tuple[str, ...],
                now: float) -> list[dict[str, Any]]:
    """The stages a node went through, from its history (oldest first, replayed with
    :func:`~bootserver.timeline.next_stage` from ``new``): ``[{"stage", "start", "seconds"}]`` (unix
    seconds; the current stage runs until ``now`` unless it is one of the node's ``final`` stages, then
    it has ``seconds`` ``None``). Rows older than the stage (recorded late) do not change it, as in the
    timeline itself."""
    spans: list[dict[str, Any]] = []
    stage, stage_at = "new", None
    for e in events:
        if stage_at is not None and e.at < stage_at:
            continue
        new = next_stage(stage, e.event, mode, real_config=real_config)
        if new != stage:
            if spans:
                spans[-1]["seconds"] = e.at - spans[-1]["start"]
            spans.append({"stage": new, "start": e.at, "seconds": None})
            stage, stage_at = new, e.at
    if spans and spans[-1]["stage"] not in final:
        spans[-1]["seconds"] = max(0.0, now - spans[-1]["start"])
    return spans


def _request_token(request: web.Request) -> str | None:
    auth = request.headers.get("Authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.cookies.get(TOKEN_COOKIE)


#: Admin routes every probe may ask without the token.
OPEN_PATHS = frozenset({"/healthz", "/readyz"})


def token_middleware(token: str, own_auth: str) -> Any:
    """The admin application's check of ``server.admin.token_file``'s ``token`` (see the module
    docstring): ``401`` (with ``WWW-Authenticate: Bearer``) without a token, ``403`` with a wrong one,
    compared in constant time; ``GET /?token=<token>`` sets the cookie and redirects to ``/``. Paths
    below ``own_auth`` (the fleet API's ``/api/v1/``, which checks its own tokens) pass unchecked."""
    want = token.encode()
    prefix = own_auth.rstrip("/") + "/"

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS or request.path.startswith(prefix):
            return await handler(request)
        if request.path == "/" and "token" in request.query:
            if not hmac.compare_digest(request.query["token"].encode(), want):
                log.warning("%s %s: 403 wrong admin token", request.method, request.path)
                return web.Response(status=403, text="forbidden\n", content_type="text/plain")
            response = web.HTTPSeeOther("/")
            response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="Strict", path="/")
            return response
        given = _request_token(request)
        if given is None:
            return web.Response(status=401, text="admin token required (server.admin.token_file)\n",
                                content_type="text/plain", headers={"WWW-Authenticate": 'Bearer realm="bootserver"'})
        if not hmac.compare_digest(given.encode(), want):
            log.warning("%s %s: 403 wrong admin token", request.method, request.path)
            return web.Response(status=403, text="forbidden\n", content_type="text/plain")
        return await handler(request)

    return middleware


PAGE = web.AppKey("page", Page)


async def fleet(request: web.Request) -> web.Response:
    """``GET /`` (admin): the fleet. ``?stage=S`` shows the nodes in stage S, ``?q=TEXT`` those whose name
    or a MAC contains TEXT (case-insensitive); the other rows are sent hidden (the page's script filters
    as one types, and a row that changes stage may come into view); counts per stage are of every node."""
    page = request.app[PAGE]
    heads = page.row_heads  # of the config rows() reads (no await in between)
    rows = await page.rows()
    counts = dict.fromkeys(STAGES, 0)
    for r in rows:
        counts[r["stage"]] = counts.get(r["stage"], 0) + 1
    stage = request.query.get("stage", "")
    q = request.query.get("q", "").strip()
    needle = q.lower()
    now = time.time()
    views = [RowView.of(r, heads[r["node"]], (not stage or r["stage"] == stage) and (
        not needle or needle in r["node"].lower() or any(needle in m.lower() for m in r["macs"])), now) for r in rows]
    found = await page.discovered()
    pacing = request.app[LIMITS].pacing()
    return page.render("fleet.html.j2", rows=[page.row_html(v) for v in views], total=len(rows), counts=counts,
                       pacing=pacing,
                       shown=sum(not v.hidden for v in views), stalled=sum(bool(v.stalled) for v in views),
                       stage=stage, q=q, discovered=found, now=now,
                       discovery=page.svc.config.server.discovery.enabled)


async def node_page(request: web.Request) -> web.Response:
    """``GET /ui/nodes/{node}`` (admin): one node."""
    page = request.app[PAGE]
    # a configured node: the front (bootserver.http.app) answered 404 for any other name
    return page.render("node.html.j2", **await page.node(page.svc.node(request.match_info["node"])))


async def cache_page(request: web.Request) -> web.Response:
    """``GET /ui/cache`` (admin): the artifact cache per stream, architecture and release."""
    page = request.app[PAGE]
    report = page.svc.desk.report()  # a few stat calls on the cache; reads the in-flight downloads
    return page.render("cache.html.j2", **report)


async def events(request: web.Request) -> web.StreamResponse:
    """``GET /ui/events`` (admin): the live updates as ``text/event-stream`` (``?node=N``: only N's).
    ``?since=T`` (unix seconds, when the page was rendered): first every row whose last event is not
    older than T, so what happened while the page loaded is not missed."""
    page = request.app[PAGE]
    only = request.query.get("node")
    try:
        since = float(request.query["since"]) if "since" in request.query else None
    except ValueError:
        since = None
    queue = page.hub.listen()
    if queue is None:
        return web.Response(status=503, text="too many live pages open, retry later\n", content_type="text/plain",
                            headers={"Retry-After": "10"})
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store",
                                           "X-Accel-Buffering": "no"})
    try:
        await response.prepare(request)
        await response.write(b"retry: 2000\n\n")
        if since is not None:
            try:
                rows = await page.rows()
            except BootserverError as e:  # the state store is away: the page keeps what it rendered
                log.debug("page: nodes not read: %s", e)
                rows = []
            for row in rows:
                if (only is None or row["node"] == only) and (row["last_at"] or 0) >= since - 1:
                    await response.write(f"event: node\ndata: {json.dumps(row)}\n\n".encode())
        end = time.monotonic() + Hub.MAX_SECONDS
        while time.monotonic() < end:
            try:
                async with asyncio.timeout(Hub.KEEPALIVE):
                    message = await queue.get()
            except TimeoutError:
                await response.write(b": keep-alive\n\n")
                continue
            if message is None:
                break
            node, text = message
            if only is None or node is None or node == only:
                await response.write(text.encode())
    except ConnectionError:
        pass
    finally:
        page.hub.leave(queue)
    return response


async def static(request: web.Request) -> web.Response:
    """``GET /ui/static/{file}`` (admin): the stylesheet and the page's script."""
    name = request.match_info["file"]
    if name not in STATIC:
        return web.Response(status=404, text="no such file\n", content_type="text/plain")
    body = await asyncio.to_thread((data_dir("templates") / "page" / "static" / name).read_bytes)
    return web.Response(body=body, headers={"Content-Type": f"{STATIC[name]}; charset=utf-8",
                                            "Cache-Control": "max-age=300", "X-Content-Type-Options": "nosniff"})


#: The page's handlers by route name (:data:`bootserver.urls.ROUTES`).
HANDLERS: dict[str, Handler] = {"fleet": fleet, "page_node": node_page, "page_cache": cache_page,
                                "page_events": events, "page_static": static}


async def close_hub(app: web.Application) -> None:
    """``on_shutdown`` of the admin application: end the live streams so shutdown does not wait."""
    await app[PAGE].hub.close()
