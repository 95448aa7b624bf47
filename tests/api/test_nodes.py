"""The fleet API's node writes (issue 49; docs/api.md, "Nodes"), through the admin application as ``serve``
runs it on the sqlite store: PUT creates (201) and replaces (200), If-None-Match/If-Match (412), PATCH as
a JSON merge patch, DELETE; a file node readable and never written (409); a node the config's checks
refuse is 422 with each error's JSON Pointer and check-config's words; a MAC another node holds is 409
naming it; a BMC password kept sealed, never shown, usable by the provider; 20 racing PUTs with one
If-Match leave one 200 and nineteen 412; every write audited without a secret."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from support.configs import config_doc, load

from bootserver.api.openapi import document
from bootserver.api.tokens import new_token
from bootserver.config import Config
from bootserver.http.app import RUNTIME
from bootserver.inventory import inventory
from bootserver.node_writes import with_store
from bootserver.providers.bmc import BmcOptions
from bootserver.providers.redfish import Redfish

ADMIN = "an-admin-token-of-32-characters!"
AUTH = {"Authorization": f"Bearer {ADMIN}"}
JSON = {**AUTH, "Content-Type": "application/json"}
PATCH = {**AUTH, "Content-Type": "application/merge-patch+json"}
PASSWORD = "s3cret-BMC-passw0rd"
URL = "/api/v1/nodes/web-1"


@pytest.fixture
def config(tmp_path: Path) -> Config:
    (tmp_path / "admin.token").write_text(ADMIN + "\n")
    return load(config_doc(server={"admin": {"token_file": "admin.token"}},
                           nodes={"master-0": {"profile": "master", "mac": ["52:54:00:00:00:01"]}}), tmp_path)


def conforms(body: Any, name: str) -> None:
    jsonschema.validate(body, {"$ref": f"#/components/schemas/{name}", "components": document()["components"]})


async def answer(r: Any) -> Any:
    text = await r.text()
    return json.loads(text) if text else None


def problem(body: dict[str, Any], kind: str) -> None:
    assert body["type"] == f"https://bootserver.dev/problems/{kind}", body
    conforms(body, "Problem")


async def test_a_node_is_created_read_replaced_patched_and_deleted_with_its_generation(client: Any) -> None:
    admin = client.admin
    r = await admin.put(URL, json={"profile": "master", "mac": ["52:54:00:AA:00:01"]}, headers=AUTH)
    body = await answer(r)
    assert r.status == 201, body
    conforms(body, "NodeView")
    assert r.headers["Location"] == URL and r.headers["ETag"] == '"1"'
    assert body["source"] == "store" and body["generation"] == 1 and body["mac"] == ["52:54:00:aa:00:01"]
    assert body["stage"] == "new" and body["since"] is None
    r = await admin.get(URL, headers=AUTH)
    assert (await answer(r)) == body and r.headers["ETag"] == '"1"'
    # the representation sent back is the same node: nothing changes
    r = await admin.put(URL, json=body, headers=AUTH)
    assert r.status == 200 and (await answer(r))["generation"] == 1
    r = await admin.put(URL, json={"profile": "master"}, headers={**AUTH, "If-None-Match": "*"})
    problem(await answer(r), "precondition-failed")
    assert r.status == 412
    r = await admin.put(URL, json={"profile": "master", "hostname": "web-one"}, headers={**AUTH, "If-Match": '"7"'})
    assert r.status == 412
    r = await admin.put(URL, json={"profile": "master", "hostname": "web-one"}, headers={**AUTH, "If-Match": '"1"'})
    body = await answer(r)
    assert r.status == 200 and body["generation"] == 2 and "mac" not in body, body["errors"]
    r = await admin.patch(URL, json={"mac": ["52:54:00:aa:00:02"]}, headers=AUTH)
    assert r.status == 415 and r.headers["Accept-Patch"] == "application/merge-patch+json"
    r = await admin.patch(URL, data=json.dumps({"mac": ["52:54:00:aa:00:02"], "hostname": None}), headers=PATCH)
    body = await answer(r)
    assert r.status == 200, body
    assert body["mac"] == ["52:54:00:aa:00:02"] and "hostname" not in body and body["generation"] == 3
    r = await admin.get("/api/v1/nodes", params={"source": "store"}, headers=AUTH)
    assert [n["name"] for n in (await answer(r))["items"]] == ["web-1"]
    r = await admin.get("/api/v1/nodes", params={"mac": "52-54-00-AA-00-02"}, headers=AUTH)
    assert [n["name"] for n in (await answer(r))["items"]] == ["web-1"]
    r = await admin.delete(URL, headers={**AUTH, "If-Match": '"2"'})
    assert r.status == 412
    r = await admin.delete(URL, headers={**AUTH, "If-Match": '"3"'})
    assert r.status == 204 and await r.text() == ""
    r = await admin.get(URL, headers=AUTH)
    assert r.status == 404
    problem(await answer(r), "not-found")
    entries = await client.app[RUNTIME].state.audit(node="web-1")
    assert [(e.action, e.method, e.token, e.status) for e in entries] == [
        ("deleted", "DELETE", "admin", 204), ("patched", "PATCH", "admin", 200), ("replaced", "PUT", "admin", 200),
        ("created", "PUT", "admin", 201)]
    assert entries[1].changed == ("hostname", "mac") and entries[0].client == "127.0.0.1"


async def test_a_file_node_is_read_only_here(client: Any) -> None:
    admin = client.admin
    for r in (await admin.put("/api/v1/nodes/master-0", json={"profile": "master"}, headers=AUTH),
              await admin.patch("/api/v1/nodes/master-0", data="{}", headers=PATCH),
              await admin.delete("/api/v1/nodes/master-0", headers=AUTH)):
        body = await answer(r)
        assert r.status == 409, body
        problem(body, "file-managed")
    r = await admin.get("/api/v1/nodes/master-0", headers=AUTH)
    assert (await answer(r))["source"].startswith("file:")


@pytest.mark.parametrize(("node", "pointer", "words"), [
    ({"profile": "nope"}, "/profile", "no profile 'nope'"),
    ({"profile": "master", "mac": ["not-a-mac"]}, "/mac", "not a MAC address: 'not-a-mac'"),
    ({"profile": "master", "colour": "red"}, "/colour", "unknown key (known: profile, facility"),
    ({"profile": "master", "redfish": {"address": "bmc"}}, "/redfish/address", "must be an http(s) URL"),
    ({"profile": "master", "redfish": {"password": 5}}, "/redfish/password", "expected a string"),
    ({"mac": []}, "/profile", "required key is missing"),
    ([1, 2], "", "expected a JSON object"),
])
async def test_a_node_the_config_refuses_is_422_with_a_pointer_and_check_config_s_words(
        client: Any, node: Any, pointer: str, words: str) -> None:
    r = await client.admin.put(URL, json=node, headers=AUTH)
    body = await answer(r)
    assert r.status == 422, body
    problem(body, "invalid-node")
    assert [e["pointer"] for e in body["errors"]] == [pointer], body
    assert words in body["errors"][0]["detail"], body
    assert (await client.admin.get(URL, headers=AUTH)).status == 404  # nothing written


async def test_a_mac_another_node_holds_is_409_naming_it(client: Any) -> None:
    r = await client.admin.put(URL, json={"profile": "master", "mac": ["52:54:00:00:00:01"]}, headers=AUTH)
    body = await answer(r)
    assert r.status == 409, body
    problem(body, "conflict")
    assert body["conflicting_node"] == "master-0" and "52:54:00:00:00:01" in body["detail"]


@pytest.mark.parametrize(("data", "headers", "status", "kind"), [
    ("{not json", JSON, 400, "malformed-json"),
    ('{"profile": "master"}', {**AUTH, "Content-Type": "text/plain"}, 415, "unsupported-media-type"),
    ('{"profile": "' + "x" * 70000 + '"}', JSON, 413, "payload-too-large"),
])
async def test_a_body_that_is_not_json_is_refused_as_problem_details(client: Any, data: str, headers: dict,
                                                                    status: int, kind: str) -> None:
    r = await client.admin.put(URL, data=data, headers=headers)
    assert r.status == status
    problem(await answer(r), kind)


async def test_a_read_token_cannot_write(client: Any) -> None:
    token, record = new_token("reader", ["read"], None)
    await client.app[RUNTIME].state.create_token(record)
    for _ in range(60):  # the tokens are read every second
        r = await client.admin.put(URL, json={"profile": "master"}, headers={"Authorization": f"Bearer {token}"})
        if r.status != 401:
            break
        await asyncio.sleep(0.05)  # poll interval, bounded by the loop
    assert r.status == 403
    problem(await answer(r), "forbidden")


async def test_a_bmc_password_is_kept_sealed_never_shown_and_the_provider_reads_it(
        client: Any, config: Config, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    admin = client.admin
    node = {"profile": "master", "provider": "redfish",
            "redfish": {"address": "https://bmc.example", "username": "root", "password": PASSWORD}}
    r = await admin.put(URL, json=node, headers=AUTH)
    text = await r.text()
    assert r.status == 201, text
    assert PASSWORD not in text and "password_sealed" not in text
    assert json.loads(text)["redfish"] == {"address": "https://bmc.example", "username": "root",
                                           "password_set": True}
    store = client.app[RUNTIME].state
    stored = await store.stored_node("web-1")
    assert stored.spec["redfish"]["password_sealed"].startswith("v1:")
    assert PASSWORD not in str(stored.spec)
    # sent back as read, without the password: it stays; a merge patch that changes the address keeps it too
    r = await admin.put(URL, json=json.loads(text), headers=AUTH)
    assert r.status == 200 and (await answer(r))["redfish"]["password_set"] is True
    r = await admin.patch(URL, data=json.dumps({"redfish": {"address": "https://bmc2.example"}}), headers=PATCH)
    assert (await answer(r))["redfish"]["password_set"] is True
    merged = await with_store(config, store)
    provider = Redfish(merged, BmcOptions(), None)  # type: ignore[arg-type]
    assert provider.password(inventory(merged)["web-1"]) == PASSWORD
    for path in ("/api/v1/nodes", URL):
        assert PASSWORD not in await (await admin.get(path, headers=AUTH)).text()
    r = await admin.patch(URL, data=json.dumps({"redfish": {"password": None}}), headers=PATCH)
    assert (await answer(r))["redfish"] == {"address": "https://bmc2.example", "username": "root",
                                            "password_set": False}
    entries = await store.audit(node="web-1")
    assert [e.changed for e in entries] == [("redfish.password",), ("redfish.address",),
                                            ("profile", "provider", "redfish")]
    assert PASSWORD not in caplog.text and all(PASSWORD not in json.dumps(e.as_dict()) for e in entries)
    assert (Path(config.state_dir) / "secrets.key").stat().st_mode & 0o777 == 0o600


async def test_twenty_racing_puts_with_one_if_match_leave_one_200_and_nineteen_412(client: Any) -> None:
    r = await client.admin.put(URL, json={"profile": "master"}, headers=AUTH)
    assert r.status == 201
    tag = r.headers["ETag"]

    async def put(i: int) -> int:
        r = await client.admin.put(URL, json={"profile": "master", "hostname": f"web-{i}"},
                                   headers={**AUTH, "If-Match": tag})
        await r.read()
        return r.status

    statuses = await asyncio.gather(*(put(i) for i in range(20)))
    assert sorted(statuses) == [200] + [412] * 19, statuses
    r = await client.admin.get(URL, headers=AUTH)
    assert r.headers["ETag"] == '"2"'
