"""The test client of the server's applications (:func:`start_app`), served as ``bootserver serve`` serves
them; the ``client`` fixture (``conftest.py``) is one for the test's ``config``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from bootserver.config import Config
from bootserver.http.app import ADMIN_APP, create_app, runner_kwargs
from bootserver.signing import Signer
from support.signing import fixed_signer


async def start_app(aiohttp_client: Callable[..., Any], config: Config, signer: Signer | None = None) -> TestClient:
    """A test client (pytest-aiohttp's ``aiohttp_client``, closed after the test) of
    ``create_app(config, signer)`` (default signer :func:`~support.signing.fixed_signer`) on 127.0.0.1,
    whose runner takes :func:`~bootserver.http.app.runner_kwargs` as ``serve``'s does (our access log, the
    request limits); its ``admin`` attribute is a client of the admin application, started the same way."""
    app = create_app(config, signer or fixed_signer())
    server = TestServer(app)
    await server.start_server(**runner_kwargs(app))
    admin = TestServer(app[ADMIN_APP])
    await admin.start_server(**runner_kwargs(app[ADMIN_APP]))
    client: TestClient = await aiohttp_client(server)
    client.admin = await aiohttp_client(admin)  # type: ignore[attr-defined]
    return client
