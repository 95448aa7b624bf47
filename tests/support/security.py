"""Shared by the tests (moved out of tests/http/test_security.py, which other test modules imported)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from aiohttp import web

from bootserver.http.app import add_route, create_app
from bootserver.urls import Route
from support.configs import config_doc, load, master_profile
from support.signing import fixed_signer

SECRET = "TOP-SECRET-PULL-SECRET-4f9c2a"


def make_config(tmp_path: Path, server: dict[str, Any] | None = None, nodes: dict[str, Any] | None = None):
    """Profile ``p`` installs with a real config full of secrets (``bootstrap.ign``); nodes ``n0``, ``n1``."""
    ign = {"ignition": {"version": "3.2.0"}, "passwd": {"users": [{"name": "core",
           "sshAuthorizedKeys": [SECRET]}]}}
    (tmp_path / "bootstrap.ign").write_text(json.dumps(ign))
    return load(config_doc(server=server, profiles={"p": master_profile(ignition="bootstrap.ign")},
                           nodes=nodes or {"n0": {"profile": "p", "mac": "52:54:00:12:34:56"},
                                           "n1": {"profile": "p", "mac": "52:54:00:12:34:57"}}), tmp_path)


async def holding_the_only_slot(aiohttp_client, config):
    """A test client of ``config`` (``max_concurrent: 1``) whose one slot is taken by a ``/slow`` request
    in its handler: returns ``(client, that request's task, the event that lets it finish)``."""
    app = create_app(config, fixed_signer())
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        entered.set()
        await release.wait()
        return web.Response(text="done")

    add_route(app, Route("", "/slow"), slow)
    client = await aiohttp_client(app)
    first = asyncio.create_task(client.get("/slow"))
    await entered.wait()
    return client, first, release
