"""The fleet API's tokens (docs/api.md, "Authentication, tokens and scopes"): ``bootserver tokens
create|list|revoke`` on both backends (the token printed once, alone on stdout; only its hash kept), and a
server that accepts a store token by its scopes, refuses an expired one and, once revoked, refuses it
within 2 s; ``server.admin.token_file``'s token is ``admin``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from support.configs import config_doc, load
from support.helpers import cli, write_config
from support.pgcluster import PgCluster
from support.stores import db_names, needs_pg

from bootserver.api.tokens import grants_of, new_token
from bootserver.config import Config
from bootserver.http.app import RUNTIME

ADMIN = "an-admin-token-of-32-characters!"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=needs_pg)])
def config_file(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    doc = config_doc()
    if request.param == "postgresql":
        cluster: PgCluster = request.getfixturevalue("pg")
        doc["state_store"] = cluster.create_database(f"t{next(db_names)}")
    load(doc, tmp_path)  # puts the profile's master.ign beside it
    return write_config(tmp_path / "bootserver.yaml", doc)


def test_tokens_are_created_listed_and_revoked_and_only_a_hash_is_kept(capsys: Any, config_file: Path,
                                                                       tmp_path: Path) -> None:
    rc, out, err = cli(capsys, "tokens", "create", "ci", "--scope", "write", "--expires", "30d",
                       "--config", str(config_file))
    assert rc == 0, err
    token = out.strip()
    assert out == token + "\n" and token.startswith("bst_") and len(token) > 40  # alone on stdout
    assert "token ci (write, expires 20" in err and token not in err
    rc, out, err = cli(capsys, "tokens", "create", "ci", "--scope", "read", "--config", str(config_file))
    assert rc == 2 and out == "" and "token ci: the name is taken" in err
    rc, out, err = cli(capsys, "tokens", "create", "admin", "--scope", "read", "--config", str(config_file))
    assert rc == 2 and "server.admin.token_file" in err
    rc, out, err = cli(capsys, "tokens", "create", "reader", "--scope", "read", "--scope", "actions",
                       "--config", str(config_file))
    assert rc == 0, err
    rc, out, err = cli(capsys, "tokens", "list", "--config", str(config_file))
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "SCOPES", "CREATED", "EXPIRES", "LAST", "USED"]
    assert [line.split()[:2] for line in lines[1:]] == [["ci", "write"], ["reader", "read,actions"]]
    assert lines[2].split()[3:] == ["never", "never"] and token not in out
    for f in (tmp_path / "state").rglob("*"):  # sqlite: nowhere on disk (PostgreSQL: the same rows)
        assert token.encode() not in f.read_bytes()
    rc, out, err = cli(capsys, "tokens", "revoke", "ci", "--config", str(config_file))
    assert rc == 0 and out == "", err
    rc, out, err = cli(capsys, "tokens", "revoke", "ci", "--config", str(config_file))
    assert rc == 2 and "no token 'ci'" in err
    rc, out, err = cli(capsys, "audit", "--config", str(config_file))
    assert rc == 0, err
    assert [line.split()[5] for line in out.splitlines()[1:]] == ["token-revoked", "token-created", "token-created"]


def test_scopes_grant_what_docs_api_md_says() -> None:
    assert grants_of(("read",)) == {"read"}
    assert grants_of(("write",)) == {"read", "write"}
    assert grants_of(("actions",)) == {"read", "actions"}
    assert grants_of(("admin",)) == {"read", "write", "actions", "admin"}
    assert grants_of(("read", "actions")) == {"read", "actions"}


@pytest.fixture
def config(tmp_path: Path) -> Config:
    (tmp_path / "admin.token").write_text(ADMIN + "\n")
    return load(config_doc(server={"admin": {"token_file": "admin.token"}}), tmp_path)


async def _status(client: Any, token: str) -> int:
    r = await client.admin.get("/api/v1/nodes", headers={"Authorization": f"Bearer {token}"})
    return r.status


async def test_a_store_token_works_until_it_expires_or_is_revoked(client: Any) -> None:
    store = client.app[RUNTIME].state
    token, record = new_token("ci", ["read"], 3600)
    stale, old = new_token("old", ["admin"], 1, now=time.time() - 10)
    await store.create_token(record)
    await store.create_token(old)
    deadline = time.monotonic() + 2.0  # every server knows a new token within 2 s
    while await _status(client, token) != 200:
        assert time.monotonic() < deadline, "a created token is not accepted within 2 s"
        await asyncio.sleep(0.05)  # poll interval, bounded by the deadline
    assert await _status(client, ADMIN) == 200  # server.admin.token_file's token is admin
    assert await _status(client, stale) == 401  # expired
    assert await _status(client, token[:-1] + ("A" if token[-1] != "A" else "B")) == 401
    assert await store.revoke_token("ci")
    deadline = time.monotonic() + 2.0
    while await _status(client, token) != 401:
        assert time.monotonic() < deadline, "a revoked token is still accepted after 2 s"
        await asyncio.sleep(0.05)  # poll interval, bounded by the deadline
    r = await client.admin.get("/api/v1/nodes", headers={"Authorization": f"Bearer {token}"})
    assert r.headers["Content-Type"] == "application/problem+json"
    assert (await r.json(content_type=None))["type"] == "https://bootserver.dev/problems/unauthorized"
