"""The fleet API's frame and read-only routes (issue 49; docs/api.md), through the admin application as
``serve`` runs it: tokens and scopes, problem details for every refusal, the OpenAPI document (checked by
openapi-spec-validator), nodes, profiles, a node's history and the discovered machines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
from openapi_spec_validator import validate
from support.configs import config_doc, load
from support.signing import signed

from bootserver.api.openapi import document
from bootserver.config import Config

TOKEN = "a-token-of-32-characters-for-api"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PROBLEM = "application/problem+json"


@pytest.fixture
def config(tmp_path: Path) -> Config:
    (tmp_path / "admin.token").write_text(TOKEN + "\n")
    nodes = {f"node-{i:02d}": {"profile": "master", "mac": [f"52:54:00:00:00:{i:02x}"]} for i in range(25)}
    nodes["bmc-node"] = {"profile": "live", "redfish": {"address": "https://bmc.example", "username": "root",
                                                        "password_file": "bmc.pw"}}
    doc = config_doc(server={"admin": {"token_file": "admin.token"}},
                     profiles={"master": {"stream": "fcos", "install_dev": "/dev/sda"},
                               "live": {"stream": "fcos", "mode": "live"}}, nodes=nodes)
    doc["streams"] = {"fcos": doc["streams"].popitem()[1]}
    return load(doc, tmp_path)


def _schema(name: str) -> dict[str, Any]:
    """The document's schema of component ``name``, resolvable on its own (its refs into the document)."""
    doc = document()
    return {"$ref": f"#/components/schemas/{name}", "components": doc["components"]}


def conforms(body: Any, name: str) -> None:
    jsonschema.validate(body, _schema(name))


def is_problem(r: Any, body: dict[str, Any], status: int, kind: str) -> None:
    assert r.status == status, body
    assert r.headers["Content-Type"] == PROBLEM
    assert body["type"] == f"https://bootserver.dev/problems/{kind}" and body["status"] == status, body
    assert body["title"] and body["detail"]
    conforms(body, "Problem")


def test_the_document_is_valid_openapi_3_1_with_every_operation_and_problem_type() -> None:
    doc = document()
    validate(doc)
    assert doc["openapi"] == "3.1.0"
    ops = {op["operationId"] for path in doc["paths"].values() for op in path.values()}
    assert {"listNodes", "getNode", "getNodeTimeline", "listProfiles", "getProfile", "listDiscovered"} <= ops
    types = doc["components"]["schemas"]["Problem"]["properties"]["type"]["enum"]
    assert "https://bootserver.dev/problems/invalid-node" in types
    assert doc["paths"]["/api/v1/nodes/{name}"]["get"]["security"] == [{"bearer": ["read"]}]


async def test_the_document_is_served_without_a_token_and_only_on_the_admin_listener(client: Any) -> None:
    r = await client.admin.get("/api/v1/openapi.json")
    assert r.status == 200 and r.headers["Content-Type"].startswith("application/json")
    assert (await r.json())["paths"]
    r = await client.get("/api/v1/openapi.json")  # the device listener never answers the API
    assert r.status == 404
    r = await client.get("/api/v1/nodes", headers=AUTH)
    assert r.status == 404


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong-token-wrong-token"},
                                     {"Authorization": f"Basic {TOKEN}"}, {"Authorization": "Bearer "}])
async def test_without_a_good_token_every_route_is_401_problem_details(client: Any, headers: dict) -> None:
    for path in ("/api/v1/nodes", "/api/v1/nodes/node-01", "/api/v1/profiles", "/api/v1/discovered"):
        r = await client.admin.get(path, headers=headers)
        body = await r.json(content_type=None)
        is_problem(r, body, 401, "unauthorized")
        assert r.headers["WWW-Authenticate"].startswith("Bearer")
        assert TOKEN not in await r.text()


async def test_nodes_are_listed_a_page_at_a_time_with_filters(client: Any) -> None:
    seen: list[str] = []
    token = None
    while True:
        r = await client.admin.get("/api/v1/nodes", params={"limit": "10", **({"page_token": token} if token else {})},
                                   headers=AUTH)
        body = await r.json()
        assert r.status == 200, body
        conforms(body, "NodeList")
        assert len(body["items"]) <= 10
        seen += [n["name"] for n in body["items"]]
        token = body["next_page_token"]
        if token is None:
            break
    assert seen == sorted(seen) and len(seen) == 26
    r = await client.admin.get("/api/v1/nodes", params={"mac": "52-54-00-00-00-0A"}, headers=AUTH)
    assert [n["name"] for n in (await r.json())["items"]] == ["node-10"]
    r = await client.admin.get("/api/v1/nodes", params={"profile": "live"}, headers=AUTH)
    assert [n["name"] for n in (await r.json())["items"]] == ["bmc-node"]
    r = await client.admin.get("/api/v1/nodes", params={"stage": "new", "source": "file", "limit": "1000"},
                               headers=AUTH)
    assert len((await r.json())["items"]) == 26
    r = await client.admin.get("/api/v1/nodes", params={"source": "store"}, headers=AUTH)
    assert (await r.json())["items"] == []


@pytest.mark.parametrize("query", [{"limit": "0"}, {"limit": "x"}, {"stage": "flying"}, {"mac": "nope"},
                                   {"page_token": "not-ours"}, {"unknown": "1"}])
async def test_a_bad_query_is_400_naming_the_parameter(client: Any, query: dict) -> None:
    r = await client.admin.get("/api/v1/nodes", params=query, headers=AUTH)
    is_problem(r, await r.json(content_type=None), 400, "invalid-parameter")


async def test_a_file_node_shows_its_keys_source_stage_and_never_a_password(client: Any, config: Config) -> None:
    r = await client.admin.get("/api/v1/nodes/bmc-node", headers=AUTH)
    body = await r.json()
    assert r.status == 200, body
    conforms(body, "NodeView")
    assert r.headers["ETag"] == f'"{body["generation"]}"'
    assert body["source"] == f"file:{config.source}"
    assert body["stage"] == "new" and body["since"] is None
    assert body["redfish"] == {"address": "https://bmc.example", "username": "root", "password_file": "bmc.pw",
                               "password_set": True}
    assert "ipmi" not in body and "metal" not in body  # keys at their defaults are left out
    r = await client.admin.get("/api/v1/nodes/nobody", headers=AUTH)
    is_problem(r, await r.json(content_type=None), 404, "not-found")


async def test_a_node_s_history_is_its_events_oldest_first(client: Any) -> None:
    assert (await client.get(signed("/ipxe/node-03"))).status == 200
    r = await client.admin.get("/api/v1/nodes/node-03/timeline", headers=AUTH)
    body = await r.json()
    assert r.status == 200, body
    conforms(body, "Timeline")
    assert [e["event"] for e in body["items"]] == ["script"] and body["stage"] == "ipxe"
    assert body["items"][0]["at"].endswith("Z")
    r = await client.admin.get("/api/v1/nodes/node-03", headers=AUTH)
    assert (await r.json())["stage"] == "ipxe"
    r = await client.admin.get("/api/v1/nodes", params={"stage": "ipxe"}, headers=AUTH)
    assert [n["name"] for n in (await r.json())["items"]] == ["node-03"]


async def test_profiles_and_discovered_machines_are_read_only_lists(client: Any) -> None:
    r = await client.admin.get("/api/v1/profiles", headers=AUTH)
    body = await r.json()
    conforms(body, "ProfileList")
    assert [p["name"] for p in body["items"]] == ["live", "master"]
    r = await client.admin.get("/api/v1/profiles/live", headers=AUTH)
    assert await r.json() == {"stream": "fcos", "mode": "live", "name": "live"}
    r = await client.admin.get("/api/v1/profiles/none", headers=AUTH)
    is_problem(r, await r.json(content_type=None), 404, "not-found")
    r = await client.admin.get("/api/v1/discovered", headers=AUTH)
    body = await r.json()
    conforms(body, "DiscoveredList")
    assert body == {"items": []}
    assert (await client.get("/discover?mac=52:54:00:aa:bb:01&serial=S1")).status == 200
    r = await client.admin.get("/api/v1/discovered", headers=AUTH)
    body = await r.json()
    conforms(body, "DiscoveredList")
    [machine] = body["items"]
    assert (machine["mac"], machine["facts"], machine["addresses"], machine["conflict"]) == (
        "52:54:00:aa:bb:01", {"serial": "S1"}, ["127.0.0.1"], False)
    r = await client.admin.post("/api/v1/profiles", headers=AUTH)
    is_problem(r, await r.json(content_type=None), 405, "method-not-allowed")
    assert r.headers["Allow"] == "GET"
    r = await client.admin.get("/api/v1/nothing/here", headers=AUTH)
    is_problem(r, await r.json(content_type=None), 404, "not-found")


async def test_every_answer_carries_a_request_id(client: Any) -> None:
    r = await client.admin.get("/api/v1/profiles", headers={**AUTH, "X-Request-Id": "abc-123"})
    assert r.headers["X-Request-Id"] == "abc-123"
    r = await client.admin.get("/api/v1/profiles", headers={**AUTH, "X-Request-Id": "bad id\t"})
    assert len(r.headers["X-Request-Id"]) == 32
