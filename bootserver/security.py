"""Request-level security of ``bootserver serve``: signed-URL and source-address checks, the
concurrency cap, handler timeouts and an access log that never shows query strings.

Every refusal is the same ``403`` with the same body (:data:`FORBIDDEN_BODY`), whatever the reason
(missing, forged, expired or other-node signature, wrong source address, plain HTTP where HTTPS is
required), so a client learns nothing about which check failed; the reason goes to our log only.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
from typing import Awaitable, Callable

from aiohttp import web

from .config import Config
from .urls import chain_path, real_config_path, stub_path

log = logging.getLogger("bootserver.security")

FORBIDDEN_BODY = "forbidden\n"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: Signed routes: canonical route -> (route path builder, is a real config).
SIGNED_ROUTES: dict[str, tuple[Callable[[str], str], bool]] = {
    "/ipxe/{node}": (chain_path, False),
    "/ignition/{node}": (stub_path, False),
    "/ignition/{node}/config": (real_config_path, True),
}

#: Routes without the handler timeout (long transfers of public artifacts).
UNTIMED_PREFIXES = ("/artifacts/",)


def forbidden() -> web.Response:
    """The one 403 answer of every refused request."""
    return web.Response(status=403, text=FORBIDDEN_BODY, content_type="text/plain")


@functools.lru_cache(maxsize=4096)
def _network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """``ip_network(cidr)``, parsed once per distinct string (configs hold validated CIDRs)."""
    return ipaddress.ip_network(cidr)


def client_address(request: web.Request, trusted_proxies: tuple[str, ...]) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The request's source address: the peer, or, when the peer is one of ``trusted_proxies``
    (CIDRs), the right-most ``X-Forwarded-For`` entry that is not itself a trusted proxy.

    Returns ``None`` when no address can be told (e.g. a Unix socket or a malformed header).
    """
    try:
        addr = ipaddress.ip_address(request.remote or "")
    except ValueError:
        return None
    nets = [_network(n) for n in trusted_proxies]

    def trusted(a: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
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


def address_allowed(config: Config, node: str, addr: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> bool:
    """True when ``node`` has no ``addresses`` binding or ``addr`` lies in one of them."""
    bound = config.nodes[node].addresses
    if not bound:
        return True
    if addr is None:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:
        addr = addr.ipv4_mapped
    return any(addr in _network(n) for n in bound)


def selectable_check(request: web.Request, config: Config, node: str) -> None:
    """Check ``/boot.ipxe``'s right to hand out ``node``'s script: the source address must match the
    node's ``addresses``, or the node has no binding and is ``selectable``. Raises ``HTTPForbidden``."""
    addr = client_address(request, config.server.trusted_proxies)
    n = config.nodes[node]
    ok = address_allowed(config, node, addr) if n.addresses else n.selectable
    if not ok:
        log.warning("GET /boot.ipxe: 403 node %s not selectable from %s", node, addr)
        raise web.HTTPForbidden(text=FORBIDDEN_BODY, content_type="text/plain")


def signed_route_middleware(config: Config, check: Callable[[str, str, str | None, str | None], bool]):
    """Middleware refusing (403) signed routes without a valid signature for their node and path,
    real configs over plain HTTP when ``server.tls`` is set (unless ``allow_plain_configs``), and
    requests from outside the node's ``addresses``. ``check`` is :meth:`Signer.check`."""
    tls = config.server.tls

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        spec = SIGNED_ROUTES.get(resource.canonical) if resource is not None else None
        if spec is None:
            return await handler(request)
        build, is_config = spec
        node = request.match_info["node"]
        q = request.query
        reason = None
        if not check(node, build(node), q.get("exp"), q.get("sig")):
            reason = "missing, expired or invalid signature"
        elif is_config and tls is not None and not tls.allow_plain_configs and request.scheme != "https":
            reason = "real config over plain HTTP"
        elif node in config.nodes and config.nodes[node].addresses:
            addr = client_address(request, config.server.trusted_proxies)
            if not address_allowed(config, node, addr):
                reason = f"source address {addr} not in the node's addresses"
        if reason is not None:
            log.warning("%s %s: 403 %s", request.method, request.rel_url.raw_path, reason)
            return forbidden()
        return await handler(request)

    return middleware


def limits_middleware(max_concurrent: int, request_timeout: float, max_queued: int = 0):
    """Middleware capping requests in progress at ``max_concurrent``, and bounding each non-artifact
    handler to ``request_timeout`` seconds (then 503 with ``Retry-After: 5``).

    A request over the cap waits, first come first served, for a slot: a boot storm of a thousand
    nodes queues for milliseconds instead of being refused (iPXE does not retry a failed chain).
    Beyond ``max_queued`` waiting requests, or when no slot frees within ``request_timeout`` seconds,
    the answer is 503 with ``Retry-After: 1``. ``/healthz`` is never capped.

    A request holds its slot while its handler runs: a streamed response that the handler prepares
    itself is counted until sent; a ``FileResponse`` (sendfile) returned unprepared is not.
    """
    slots = asyncio.Semaphore(max_concurrent)
    waiting = 0

    def busy(request: web.Request, why: str) -> web.Response:
        log.warning("%s %s: 503 %s", request.method, request.path, why)
        return web.Response(status=503, text="busy, retry later\n", content_type="text/plain",
                            headers={"Retry-After": "1"})

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        nonlocal waiting
        if request.path == "/healthz":
            return await handler(request)
        if slots.locked():
            if waiting >= max_queued:
                return busy(request, f"{max_concurrent} requests in progress and {waiting} waiting")
            waiting += 1
            try:
                async with asyncio.timeout(request_timeout):
                    await slots.acquire()
            except TimeoutError:
                return busy(request, f"no free slot within {request_timeout}s")
            finally:
                waiting -= 1
        else:
            await slots.acquire()
        try:
            if request.path.startswith(UNTIMED_PREFIXES):
                return await handler(request)
            try:
                async with asyncio.timeout(request_timeout):
                    return await handler(request)
            except TimeoutError:
                log.warning("%s %s: 503 no answer within %ss", request.method, request.path,
                            request_timeout)
                return web.Response(status=503, text="timed out, retry later\n",
                                    content_type="text/plain", headers={"Retry-After": "5"})
        finally:
            slots.release()

    return middleware
