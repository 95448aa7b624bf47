"""Request-level security of ``bootserver serve``: signed-URL and source-address checks (:class:`Gate`),
the admin listener's names (:class:`AdminNames`), the body size limit, and the headers of every answer
(:data:`DEVICE_HEADERS`, :func:`admin_headers`, :func:`unmatched`). The concurrency cap, the pacing of a
storm and the handler timeouts are :mod:`bootserver.http.admission`'s; the access log (no query strings) is
:mod:`bootserver.http.accesslog`'s.

Every refusal is the same ``403`` with the same body (:data:`FORBIDDEN_BODY`), whatever the reason
(missing, forged, expired or other-node signature, wrong source address, plain HTTP where HTTPS is
required), so a client learns nothing about which check failed; the reason goes to our log only.
A signature that may come from a key this server cannot read yet is not a refusal but a 503
(:class:`bootserver.signing.KeysUnavailableError`, raised by the ``check`` a :class:`Gate` calls).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import hdrs, web
from aiohttp.typedefs import Middleware

from ..config import Config, ResolvedNode, split_listen
from ..inventory import Address, address_allowed, cidr_network, inventory
from ..urls import ARTIFACT, Route

log = logging.getLogger("bootserver.security")

FORBIDDEN_BODY = "forbidden\n"

Call = Callable[[web.Request], Awaitable[web.StreamResponse]]


def forbidden() -> web.Response:
    """The one 403 answer of every refused request."""
    return web.Response(status=403, text=FORBIDDEN_BODY, content_type="text/plain")


#: Largest request body accepted, in bytes (no endpoint takes a body): a longer one is ``413`` (from its
#: ``Content-Length``, or cut there when chunked), see :func:`front`.
CLIENT_MAX_SIZE = 64 * 1024
#: The headers of every answer of the device listener: no product version in ``Server``, and ``nosniff``
#: (the admin listener's: :func:`admin_headers`).
DEVICE_HEADERS = {hdrs.SERVER: "bootserver", "X-Content-Type-Options": "nosniff"}


async def body_too_large(request: web.Request) -> bool:
    """Whether the request's body is over :data:`CLIENT_MAX_SIZE` bytes: told by its ``Content-Length``
    before any of it is read, or, for a chunked body, found while reading it up to the limit (no route
    uses a body: what was read is dropped)."""
    length = request.content_length
    if length is not None:
        return length > CLIENT_MAX_SIZE
    total = 0
    while chunk := await request.content.read(CLIENT_MAX_SIZE + 1 - total):
        total += len(chunk)
        if total > CLIENT_MAX_SIZE:
            return True
    return False


async def unmatched(request: web.Request) -> web.Response:
    """The device listener's answer to a request no route takes (its last route, any method, any path):
    ``405`` with ``Allow`` when a route has the path but not the method, else ``404``, as aiohttp's own
    router answers, with :data:`DEVICE_HEADERS`. No :data:`ROUTE`: the access log names it ``unmatched``."""
    allowed: set[str] = set()
    for resource in request.app.router.resources():
        if resource is not request.match_info.route.resource:
            match, methods = await resource.resolve(request)
            if match is None:
                allowed |= methods
    if allowed:
        return web.Response(status=405, text="405: Method Not Allowed", headers={
            **DEVICE_HEADERS, hdrs.ALLOW: ",".join(sorted(allowed))})
    return web.Response(status=404, text="404: Not Found", headers=DEVICE_HEADERS)


async def admin_headers(request: web.Request, response: web.StreamResponse) -> None:
    """On every answer of the admin listener: :data:`DEVICE_HEADERS`, and since its answers name nodes
    and carry signed URLs, not stored by caches (unless the answer says otherwise, as the page's static
    files do) and no ``Referer`` sent from its pages."""
    headers = response.headers
    headers[hdrs.SERVER] = "bootserver"
    headers["X-Content-Type-Options"] = "nosniff"
    headers.setdefault(hdrs.CACHE_CONTROL, "no-store")
    headers["Referrer-Policy"] = "no-referrer"


def client_address(request: web.BaseRequest, trusted_proxies: tuple[str, ...]) -> Address | None:
    """The request's source address: the peer, or, when the peer is one of ``trusted_proxies``
    (CIDRs), the right-most ``X-Forwarded-For`` entry that is not itself a trusted proxy.

    Returns ``None`` when no address can be told (e.g. a Unix socket or a malformed header).
    """
    try:
        addr = ipaddress.ip_address(request.remote or "")
    except ValueError:
        return None
    nets = [cidr_network(n) for n in trusted_proxies]

    def trusted(a: Address) -> bool:
        return any(a in n for n in nets)

    if not trusted(addr):
        return addr
    hops = [h.strip() for v in request.headers.getall("X-Forwarded-For", []) for h in v.split(",")]
    for hop in reversed(hops):
        try:
            addr = ipaddress.ip_address(hop)
        except ValueError:
            return None
        if not trusted(addr):
            return addr
    return addr


class AdminNames:
    """The names the admin listener answers to (``Host``, docs/config.md ``server.admin.hosts``): its own
    address, ``localhost``, ``127.0.0.1`` and ``[::1]``, each with the port the request arrived on; the
    entries of ``server.admin.hosts`` as given (one without a port stands for that name with any port or
    none); on a wildcard listener (``0.0.0.0``, ``::``) any IP address literal with its port, since an
    address, unlike a DNS name, cannot be rebound to another site's page. A request that arrived on a Unix
    socket, which no web page can reach, may name any host. A request whose target is in absolute form
    (``GET http://host:port/path``) names the target's authority, not its ``Host`` header (RFC 9112
    §3.2.2: a server ignores ``Host`` then)."""

    def __init__(self, config: Config) -> None:
        where = config.server.admin_listen
        host = "" if where.startswith("/") else split_listen(where)[0]
        self.wildcard = host in ("", "0.0.0.0", "::")
        own = f"[{host}]" if ":" in host else host
        self.names = frozenset({own, "localhost", "127.0.0.1", "[::1]"} - {"", "0.0.0.0", "[::]"})
        self.extra = frozenset(config.server.admin.hosts)

    def allowed(self, request: web.BaseRequest) -> bool:
        """Whether ``request`` (on the admin listener) is for one of its names (else ``421``)."""
        transport = request.transport
        sock = transport.get_extra_info("sockname") if transport is not None else None
        if not isinstance(sock, tuple):  # a Unix socket
            return True
        target = request.raw_path
        if target.startswith("/") or target == "*":  # origin form (or OPTIONS *): the Host header
            host = (request.headers.get("Host") or "").strip().lower()
        else:  # absolute form: its authority (no userinfo)
            host = urlsplit(target).netloc.rpartition("@")[2].strip().lower()
        if not host:
            return False
        if host.startswith("["):  # [v6] or [v6]:port
            name, _, rest = host.partition("]")
            name, port = name + "]", rest.removeprefix(":")
        else:
            name, _, port = host.partition(":")
        if host in self.extra or name in self.extra:
            return True
        if port != str(sock[1]):
            return False
        if name in self.names:
            return True
        if not self.wildcard:
            return False
        try:
            ipaddress.ip_address(name.strip("[]"))
        except ValueError:
            return False
        return True


def host_middleware(config: Config, open_paths: frozenset[str]) -> Middleware:
    """The admin application's ``Host`` rule (:class:`~bootserver.http.gate.AdminNames`): a request for
    another name than the listener's own is ``421 Misdirected Request`` with no data, whatever its path
    but ``open_paths`` (``/healthz`` and ``/readyz``: probes use addresses)."""
    names = AdminNames(config)

    @web.middleware
    async def middleware(request: web.Request, handler: Call) -> web.StreamResponse:
        if request.path in open_paths or names.allowed(request):
            return await handler(request)
        log.warning("%s %s: 421 Host %r is not a name of the admin listener (server.admin.hosts)",
                    request.method, request.path, request.headers.get(hdrs.HOST))
        return web.Response(status=421, text="misdirected request\n", content_type="text/plain")

    return middleware


class Gate:
    """The request-level checks of one server: signed routes, plain-HTTP configs, source addresses.

    ``check`` is :meth:`bootserver.signing.Signer.check`.
    """

    def __init__(self, config: Config, check: Callable[[str, str, str | None, str | None], bool]) -> None:
        self.config = config
        #: the config's nodes, resolved once (their ``addresses``)
        self.inventory = inventory(config)
        self.check = check
        #: (route name, configured node) -> the route path a signature covers (built once per pair)
        self._paths: dict[tuple[str, str], str] = {}

    def refusal(self, request: web.Request, route: Route, node: str) -> str | None:
        """Why ``request`` for ``node`` on signed ``route`` must be refused (the reason, for our log
        only: every refusal is the same :func:`forbidden` answer), or ``None``: a missing, expired or
        invalid signature over the node and route path; a real config over plain HTTP when
        ``server.tls`` is set (unless ``allow_plain_configs``); a source outside the node's
        ``addresses``. Raises :class:`~bootserver.signing.KeysUnavailableError` (503) for a signature
        that a key the server cannot read yet may have made."""
        q = request.query
        tls = self.config.server.tls
        path = self._paths.get((route.name, node))
        if path is None:
            path = route.path(node=node)
            if node in self.inventory:  # names from the URL are not kept: only configured ones
                self._paths[(route.name, node)] = path
        if not self.check(node, path, q.get("exp"), q.get("sig")):
            return "missing, expired or invalid signature"
        if route.real_config and tls is not None and not tls.allow_plain_configs and request.scheme != "https":
            return "real config over plain HTTP"
        resolved = self.inventory.get(node)
        if resolved is not None and resolved.addresses:
            addr = self.address(request)
            if not address_allowed(resolved, addr):
                return f"source address {addr} not in the node's addresses"
        return None

    def artifact_refusal(self, request: web.Request, segments: tuple[str, str, str, str]) -> \
            tuple[str | None, ResolvedNode | None]:
        """``(reason, node)`` for a request of an artifact of a private stream (``streams.<name>.private``)
        at URL ``segments`` ``(stream, arch, release, file)``: refused (the reason, for our log only) unless
        its ``?node=`` is a node of a profile of that stream, its ``exp``/``sig`` are valid for that node
        and the artifact's path (:meth:`bootserver.urls.Urls.artifact`), and it comes from the node's
        ``addresses``; else ``(None, the node)``. Raises as :meth:`refusal`."""
        q = request.query
        name = q.get("node")
        resolved = self.inventory.get(name) if name else None
        if resolved is None or resolved.stream != segments[0]:
            return "no node of this private stream named", None
        path = ARTIFACT.path(stream=segments[0], arch=segments[1], release=segments[2], file=segments[3])
        if not self.check(resolved.name, path, q.get("exp"), q.get("sig")):
            return "missing, expired or invalid signature", None
        if resolved.addresses and not address_allowed(resolved, self.address(request)):
            return f"source address {self.address(request)} not in the node's addresses", None
        return None, resolved

    def address(self, request: web.BaseRequest) -> Address | None:
        """:func:`client_address` under ``server.trusted_proxies``."""
        return client_address(request, self.config.server.trusted_proxies)

    def client(self, request: web.BaseRequest) -> str | None:
        """The request's source address as text, as the node timeline records it and artifact
        attribution matches it: :meth:`address` (the forwarded address when the peer is a trusted
        proxy), or without ``server.trusted_proxies`` the peer's address as aiohttp gives it. ``None``
        when no address can be told."""
        if not self.config.server.trusted_proxies:
            return request.remote
        addr = self.address(request)
        return None if addr is None else str(addr)
