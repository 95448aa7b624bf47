"""Around the fleet API's nodes (issue 49; docs/api.md): actions (202 with Location; the timeline shows
how a provision ended), adopting a discovered machine (the rules of nodes adopt), the audit trail (API and
the node's page) and the watch (Server-Sent Events of node changes and stages; 410 when ``since`` is older
than the change log keeps)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from support.configs import config_doc, load, master_profile
from support.discovery import UNKNOWN, report_path
from support.signing import signed

from bootserver.api.openapi import document
from bootserver.config import Config
from bootserver.http.app import RUNTIME
from bootserver.state import sqlite_nodes

ADMIN = "an-admin-token-of-32-characters!"
AUTH = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture
def config(tmp_path: Path) -> Config:
    (tmp_path / "admin.token").write_text(ADMIN + "\n")
    return load(config_doc(server={"admin": {"token_file": "admin.token"}, "discovery": True},
                           profiles={"master": master_profile(),
                                     "bmc": master_profile(provider="redfish", redfish={
                                         "address": "http://127.0.0.1:9", "username": "root",
                                         "password_env": "NO_SUCH_VARIABLE_HERE", "timeout": 2})},
                           nodes={"master-0": {"profile": "master"}, "bmc-0": {"profile": "bmc"}}), tmp_path)


def conforms(body: Any, name: str) -> None:
    jsonschema.validate(body, {"$ref": f"#/components/schemas/{name}", "components": document()["components"]})


async def _until(check: Any, seconds: float = 10.0) -> Any:
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while not (got := await check()):
        assert loop.time() < end, "not reached in time"
        await asyncio.sleep(0.05)  # poll interval, bounded by the deadline
    return got


async def test_reinstall_is_recorded_and_audited_and_the_node_s_page_lists_the_change(client: Any) -> None:
    r = await client.admin.post("/api/v1/nodes/master-0/actions/reinstall", headers={**AUTH, "X-Request-Id": "r-1"})
    body = await r.json()
    assert r.status == 202, body
    conforms(body, "ActionAccepted")
    assert r.headers["Location"] == "/api/v1/nodes/master-0"
    assert body["action"] == "reinstall" and body["request_id"] == "r-1"
    r = await client.admin.get("/api/v1/nodes/master-0", headers=AUTH)
    assert (await r.json())["stage"] == "reinstall"
    r = await client.admin.get("/api/v1/audit", params={"node": "master-0"}, headers=AUTH)
    audit = await r.json()
    conforms(audit, "AuditList")
    assert [(e["action"], e["token"], e["request_id"], e["status"]) for e in audit["items"]] == [
        ("reinstall", "admin", "r-1", 202)]
    page = await (await client.admin.get("/ui/nodes/master-0", headers=AUTH)).text()
    assert "Changes" in page and "r-1" in page
    r = await client.admin.post("/api/v1/nodes/master-0/actions/explode", headers=AUTH)
    assert r.status == 404


async def test_a_provision_that_fails_is_in_the_node_s_timeline(client: Any) -> None:
    r = await client.admin.post("/api/v1/nodes/master-0/actions/provision", headers=AUTH)
    body = await r.json()
    assert r.status == 422 and "no provider" in body["detail"], body
    r = await client.admin.post("/api/v1/nodes/bmc-0/actions/provision", headers=AUTH)
    assert r.status == 202, await r.text()

    async def failed() -> Any:
        r = await client.admin.get("/api/v1/nodes/bmc-0/timeline", headers=AUTH)
        return [e for e in (await r.json())["items"] if e["event"] == "provision-failed"]

    events = await _until(failed, 30)
    assert "NO_SUCH_VARIABLE_HERE" in events[0]["detail"]["error"]


async def test_a_discovered_machine_is_adopted_into_the_store(client: Any) -> None:
    assert (await client.get(report_path(buildarch="x86_64", platform="efi"))).status == 200
    r = await client.admin.get("/api/v1/discovered", headers=AUTH)
    assert [m["mac"] for m in (await r.json())["items"]] == [UNKNOWN]
    url = f"/api/v1/discovered/{UNKNOWN}/adopt"
    r = await client.admin.post(url, json={"name": "web-9", "profile": "nope"}, headers=AUTH)
    assert r.status == 422 and "no such profile" in (await r.json())["detail"]
    r = await client.admin.post(url, json={"name": "web-9"}, headers=AUTH)
    body = await r.json()
    assert r.status == 422 and body["errors"][0]["pointer"] == "/profile", body
    r = await client.admin.post("/api/v1/discovered/52:54:00:00:00:99/adopt",
                                json={"name": "web-9", "profile": "master"}, headers=AUTH)
    assert r.status == 404
    r = await client.admin.post(url, json={"name": "web-9", "profile": "master", "anywhere": True}, headers=AUTH)
    body = await r.json()
    assert r.status == 201, body
    conforms(body, "NodeView")
    assert body["source"] == "store" and body["mac"] == [UNKNOWN] and r.headers["Location"] == "/api/v1/nodes/web-9"
    r = await client.admin.get("/api/v1/audit", params={"token": "admin"}, headers=AUTH)
    assert [e["action"] for e in (await r.json())["items"]] == ["adopted"]


async def _events(response: Any, count: int) -> list[tuple[str, dict[str, Any]]]:
    got: list[tuple[str, dict[str, Any]]] = []
    event = None
    while len(got) < count:
        line = (await asyncio.wait_for(response.content.readline(), 10)).decode().rstrip("\n")
        if line.startswith("event: "):
            event = line.removeprefix("event: ")
        elif line.startswith("data: "):
            got.append((event or "", json.loads(line.removeprefix("data: "))))
    return got


async def test_the_watch_streams_node_changes_and_stages_and_resumes_by_revision(client: Any) -> None:
    async with client.admin.get("/api/v1/watch", headers=AUTH) as watch:
        assert watch.status == 200 and watch.headers["Content-Type"] == "text/event-stream"
        r = await client.admin.put("/api/v1/nodes/web-1", json={"profile": "master"}, headers=AUTH)
        assert r.status == 201
        (kind, data), = await _events(watch, 1)
        assert kind == "added" and data["name"] == "web-1" and data["change"] == "added"
        first = data["revision"]
        assert (await client.get(signed("/ipxe/master-0"))).status == 200
        (kind, data), = await _events(watch, 1)
        assert (kind, data["name"], data["stage"]) == ("stage", "master-0", "ipxe")
        r = await client.admin.delete("/api/v1/nodes/web-1", headers=AUTH)
        (kind, data), = await _events(watch, 1)
        assert (kind, data["name"], data["revision"]) == ("deleted", "web-1", first + 1)
    async with client.admin.get("/api/v1/watch", params={"since": str(first - 1)}, headers=AUTH) as again:
        assert [(k, d["name"]) for k, d in await _events(again, 2)] == [("added", "web-1"), ("deleted", "web-1")]


async def test_a_watch_from_a_revision_no_longer_kept_is_410(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_nodes, "KEEP_CHANGES", 2)
    for i in range(5):
        r = await client.admin.put(f"/api/v1/nodes/web-{i}", json={"profile": "master"}, headers=AUTH)
        assert r.status == 201
    r = await client.admin.get("/api/v1/watch", params={"since": "0"}, headers=AUTH)
    body = await r.json(content_type=None)
    assert r.status == 410 and body["type"] == "https://bootserver.dev/problems/gone", body
    store = client.app[RUNTIME].state
    assert await store.inventory_revision() == 5
