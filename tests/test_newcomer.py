"""A newcomer sees why nothing boots (issue 41): without network, a script request is answered ``503``
with ``Retry-After`` at once (not a ``502`` after the upstream's retries), and the live page's header names
the stream whose metadata could not be loaded, its source, the error and the next try."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from support.helpers import free_port
from support.signing import fixed_signer

from bootserver.artifacts.upstream import RetryPolicy
from bootserver.config import parse_config
from bootserver.http.app import ADMIN_APP, RUNNING, create_app

MAC = "52:54:00:12:34:56"


def offline_config(tmp_path: Path) -> Any:
    """A stream whose metadata URL answers nothing (a closed port on 127.0.0.1: as no network)."""
    return parse_config({
        "server": {"base_url": "http://boot.example.net:8080"}, "cache_dir": "cache", "state_dir": "state",
        "streams": {"s": {"metadata": f"http://127.0.0.1:{free_port()}/stream.json"}},
        "profiles": {"p": {"stream": "s", "mode": "live"}},
        "nodes": {"n0": {"profile": "p", "mac": MAC, "selectable": True}}}, "t.yaml", tmp_path)


async def test_without_network_a_script_request_is_503_at_once(aiohttp_client: Any, tmp_path: Path) -> None:
    client = await aiohttp_client(create_app(offline_config(tmp_path), fixed_signer()))
    started = time.monotonic()
    r = await client.get(f"/boot.ipxe?mac={MAC}")  # the upstream retries go on in the background
    took = time.monotonic() - started
    assert r.status == 503 and took < 3, (r.status, took)
    assert r.headers["Retry-After"] == "1"
    assert await r.text() == "stream metadata not loaded yet (no network?); retry shortly\n"


async def test_the_page_says_which_metadata_could_not_be_loaded_and_when_it_is_tried_again(
        aiohttp_client: Any, tmp_path: Path) -> None:
    config = offline_config(tmp_path)
    app = create_app(config, fixed_signer())
    app[RUNNING].current.svc.runtime.upstream.retry = RetryPolicy(attempts=1)  # the load fails at once
    client = await aiohttp_client(app)
    r = await client.get(f"/boot.ipxe?mac={MAC}")
    assert r.status == 503 and 25 <= int(r.headers["Retry-After"]) <= 30, r.headers.get("Retry-After")
    admin = await aiohttp_client(app[ADMIN_APP])
    source = config.streams["s"].metadata
    for path in ("/", "/ui/cache"):
        page = await (await admin.get(path)).text()
        assert (f'<p class="alert" role="alert" data-stream="s">Stream s: its metadata could not be loaded '
                f"from <code>{source}</code>: ") in page, path
        assert "next try in " in page and "onnect" in page, path  # the error: connection refused
