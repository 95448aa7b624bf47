"""What every endpoint answers while the state store's database is lost (issue 25): one table, one
real server (the device and admin applications on 127.0.0.1, as ``serve`` runs them) whose state store
is :class:`broken_store.BrokenStore`, gone at every call.

What needs the store to be told (scripts, stubs, the real config, check-ins, GRUB configs, boot images,
the node listings and pages) is a ``503`` with ``Retry-After: 5`` and the store's public text: iPXE
and Ignition retry it, and the server never guesses a stage (guessing could reinstall a node).
What must not depend on it answers as usual: artifacts (attribution is only logged), liveness,
metrics, the cache page, the static files and the live stream. ``readyz`` says the store is not
ready. No body carries a local path, the store's URL or a traceback. The real PostgreSQL outage, with
its timing and recovery, is ``test_replicas.py``'s.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from support.broken_store import LOST, BrokenStore
from support.ops import fill_cache, make_config
from support.signing import FIXED_KEY, relative

from bootserver.http.app import ADMIN_APP, SERVICE, create_app, runner_kwargs
from bootserver.signing import KeyEntry, sign
from bootserver.state import PUBLIC_UNAVAILABLE
from bootserver.urls import CHAIN, ROUTES, Urls

NODE = "master-0"


def foreign_chain(urls: Urls) -> str:
    """``NODE``'s chain URL signed by a key this server does not hold (made by a rotation on another
    replica while the database is away): the server cannot tell it from a forgery until it reads
    the keys again, so it is a 503, not a 403."""
    path, exp = CHAIN.path(node=NODE), int(time.time()) + 3600
    return f"{path}?exp={exp}&sig={sign(bytes(32), NODE, path, exp)}"


Path_ = Callable[[Urls, dict[str, str]], str]

#: ``(route, listener, method, path, status)``: what each route of :data:`bootserver.urls.ROUTES`
#: answers with the store gone. ``path`` is built from the server's own URL builder (signed as a device
#: has it) and the cached artifacts.
ANSWERS: list[tuple[str, str, str, Path_, int]] = [
    ("chain", "device", "GET", lambda u, a: relative(u.chain(NODE)), 503),                  # iPXE script
    ("chain", "device", "GET", lambda u, a: foreign_chain(u), 503),                        # key not in hand
    ("generic", "device", "GET", lambda u, a: "/boot.ipxe?mac=52:54:00:12:34:56", 503),
    ("generic", "device", "GET", lambda u, a: "/boot.ipxe?mac=52:54:00:99:99:99", 200),  # unknown: discovery
    ("discover", "device", "GET", lambda u, a: "/discover?mac=52:54:00:99:99:99&serial=x", 503),
    ("generic_grub", "device", "GET", lambda u, a: "/boot.grub?mac=52:54:00:12:34:56", 503),  # arm64 GRUB's
    ("stub", "device", "GET", lambda u, a: relative(u.stub(NODE)), 503),                    # Ignition stub
    ("real_config", "device", "GET", lambda u, a: relative(u.real_config(NODE)), 503),
    ("checkin", "device", "POST", lambda u, a: relative(u.checkin(NODE)), 503),
    ("grub", "device", "GET", lambda u, a: relative(u.grub(NODE)), 503),                    # GRUB config
    ("iso", "device", "GET", lambda u, a: relative(u.iso(NODE)), 503),                      # boot image
    ("loader_arm64", "device", "GET", lambda u, a: "/loaders/grubaa64.efi", 200),           # needs no store
    ("loader_ipxe", "device", "GET", lambda u, a: "/loaders/ipxe.efi", 200),
    ("loader_secureboot", "device", "GET", lambda u, a: "/loaders/secureboot/rhcos-4.16/bootx64.efi", 404),
    ("grub_cfg", "device", "GET", lambda u, a: "/grub/grub.cfg", 200),                      # Secure Boot GRUB's
    ("artifact", "device", "GET", lambda u, a: a["kernel"], 200),                          # attributed
    ("artifact", "device", "HEAD", lambda u, a: a["kernel"], 200),
    ("healthz", "device", "GET", lambda u, a: "/healthz", 200),
    ("readyz", "device", "GET", lambda u, a: "/readyz", 503),
    ("readyz", "admin", "GET", lambda u, a: "/readyz", 503),
    ("nodes", "admin", "GET", lambda u, a: "/nodes", 503),
    ("node", "admin", "GET", lambda u, a: f"/nodes/{NODE}", 503),
    ("metrics", "admin", "GET", lambda u, a: "/metrics", 200),
    ("fleet", "admin", "GET", lambda u, a: "/", 503),                                       # the live page
    ("page_node", "admin", "GET", lambda u, a: f"/ui/nodes/{NODE}", 503),
    ("page_cache", "admin", "GET", lambda u, a: "/ui/cache", 200),
    ("page_events", "admin", "GET", lambda u, a: "/ui/events?since=0", 200),                # live updates
    ("page_static", "admin", "GET", lambda u, a: "/ui/static/page.css", 200),
]


async def test_every_endpoint_answers_a_lost_database_without_guessing_or_leaking(
        aiohttp_client: Any, reference: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # every route is in the table: a new one fails here until its answer to a lost database is stated
    assert {row[0] for row in ANSWERS} == {route.name for route in ROUTES}
    config = make_config(tmp_path)
    artifacts = {kind: path for kind, (path, _) in fill_cache(config, reference).items()}
    app = create_app(config, state=BrokenStore([KeyEntry(FIXED_KEY, 0)]))
    server = TestServer(app, host="127.0.0.1")
    await server.start_server(**runner_kwargs(app))
    admin = TestServer(app[ADMIN_APP], host="127.0.0.1")
    await admin.start_server(**runner_kwargs(app[ADMIN_APP]))
    clients = {"device": await aiohttp_client(server), "admin": await aiohttp_client(admin)}
    urls = app[SERVICE].urls
    # Public (device) bodies name no local path at all; the admin pages show the cache folder on purpose.
    leaks = {"device": [str(tmp_path), "/run/postgresql", BrokenStore.name, "Traceback", 'File "'],
             "admin": ["/run/postgresql", BrokenStore.name, "Traceback", 'File "']}
    caplog.set_level(logging.INFO)
    wrong = []
    for _, listener, method, path_of, status in ANSWERS:
        path = path_of(urls, artifacts)
        async with clients[listener].request(method, path) as r:
            if r.content_type == "text/event-stream":  # endless: its first message, then hang up
                body = await asyncio.wait_for(r.content.readuntil(b"\n\n"), 10)
            else:
                body = await r.read()
        where = f"{listener} {method} {path.split('?')[0]}: {r.status} {body[:200]!r}"
        if r.status != status:
            wrong.append(f"{where}: not {status}")
        if any(leak.encode() in body for leak in leaks[listener]):
            wrong.append(f"{where}: leaks a local path, the store's URL or a traceback")
        if path == "/readyz":  # not ready; why not is in the log only
            if json.loads(body)["state_store"] != {"backend": "postgresql", "ready": False}:
                wrong.append(f"{where}: the state store shown ready")
        elif r.status == 503 and (r.headers.get("Retry-After") != "5" or body.decode() not in (
                PUBLIC_UNAVAILABLE + "\n", "signing keys cannot be read now; retry later\n")):
            wrong.append(f"{where}: not the store's public 503 with Retry-After: 5")
    assert not wrong, "\n".join(wrong)
    # the artifact was served all the same; the lost attribution is in the log, with the details
    assert any("not recorded in the node timeline" in r.getMessage() and LOST in r.getMessage()
               for r in caplog.records)
    # and no task of the server died of it (the live page's reader keeps going)
    assert not [r.getMessage() for r in caplog.records if "exception was never retrieved" in r.getMessage()]
