"""One table of ``Range``, ``If-Range`` and conditional requests, over every route that answers with a
file's bytes (issue 41): a cached artifact, a node's boot image and the arm64 GRUB loader all answer it
alike (:func:`bootserver.http.fileanswer.plan`), as RFC 9110 §13.1 and §14 say. The same table runs
against a real ``serve`` in tests/http/test_trust.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.iso import doc as iso_doc
from support.ranges import ranges
from support.signing import fixed_signer, signed

from bootserver.config import parse_config
from bootserver.http.app import create_app


async def check_table(get: Any, url: str, data: bytes, validators: dict[str, str]) -> None:
    """Every row of :func:`ranges` against ``url`` (``get(url, headers)`` -> ``(status, headers, body)``),
    whose whole body is ``data``; ``validators``: its ``ETag`` and ``Last-Modified`` (if any)."""
    n = len(data)
    for rng, if_range, status, part in ranges(n):
        headers = {"Range": rng}
        if if_range == "LAST_MODIFIED" and "Last-Modified" not in validators:
            status, part = 200, None  # no Last-Modified (a boot image): a date never matches
        if if_range is not None:
            headers["If-Range"] = {"ETAG": validators["ETag"], "W/ETAG": "W/" + validators["ETag"],
                                   "LAST_MODIFIED": validators.get("Last-Modified", "")}.get(if_range, if_range)
        got, answer, body = await get(url, headers)
        assert got == status, (url, rng, if_range, got)
        assert answer.get("Accept-Ranges") == "bytes" and answer.get("ETag") == validators["ETag"], (url, rng)
        if status == 206:
            assert part is not None
            assert body == data[part[0]:part[1]], (url, rng, if_range)
            assert answer["Content-Range"] == f"bytes {part[0]}-{part[1] - 1}/{n}"
            assert int(answer["Content-Length"]) == part[1] - part[0]
        elif status == 200:
            assert body == data and "Content-Range" not in answer, (url, rng, if_range)
        else:
            assert answer["Content-Range"] == f"bytes */{n}" and body == b"", (url, rng)
    # conditionals: the ETag (or *) answers 304 without a body, whatever the Range
    for inm in (validators["ETag"], "*", f'"x", {validators["ETag"]}'):
        got, answer, body = await get(url, {"If-None-Match": inm, "Range": "bytes=0-9"})
        assert (got, body) == (304, b""), (url, inm)
    got, _, body = await get(url, {"If-None-Match": '"other"', "Range": "bytes=0-9"})
    assert (got, body) == (206, data[:10])


@pytest.fixture
def config(reference: Path, tmp_path: Path) -> Any:
    return parse_config(iso_doc(reference), "t.yaml", tmp_path)


@pytest.mark.parametrize("route", ["artifact", "iso", "loader_arm64", "loader_ipxe"])
async def test_every_file_route_answers_one_range_table(aiohttp_client: Any, config: Any, publish_kernel: Any,
                                                        route: str) -> None:
    client = await aiohttp_client(create_app(config, fixed_signer()))
    url = {"artifact": lambda: publish_kernel(config, 20_000).path, "iso": lambda: signed("/iso/master-0.iso"),
           "loader_arm64": lambda: "/loaders/grubaa64.efi", "loader_ipxe": lambda: "/loaders/ipxe.efi"}[route]()

    async def get(path: str, headers: dict[str, str]) -> tuple[int, Any, bytes]:
        r = await client.get(path, headers=headers)
        return r.status, r.headers, await r.read()

    status, headers, data = await get(url, {})
    assert status == 200 and len(data) > 2000
    validators = {k: headers[k] for k in ("ETag", "Last-Modified") if k in headers}
    await check_table(get, url, data, validators)
    r = await client.head(url, headers={"Range": "bytes=0-9"})
    assert (r.status, r.headers["Content-Length"], await r.read()) == (206, "10", b"")
