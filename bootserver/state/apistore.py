"""What the fleet API keeps in the state store (issue 49; docs/api.md): its tokens (only a SHA-256 of
each, with its scopes, creation, expiry and last use) and its audit trail (every write and action: when,
token, client address, request id, method, node, what it did and the changed keys; never a secret's
value). :class:`ApiStore` is the interface both backends implement; the SQL here is written once, with
``?`` placeholders (the PostgreSQL store turns them into ``%s``).
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InputError

#: The tables (both backends: sqlite ``REAL`` is PostgreSQL's ``DOUBLE PRECISION`` by name below).
SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS api_tokens (
    name      TEXT PRIMARY KEY,
    hash      TEXT NOT NULL UNIQUE,       -- hex SHA-256 of the token (the token itself is never kept)
    scopes    TEXT NOT NULL,              -- space-separated: read write actions admin
    created   {real} NOT NULL,            -- unix seconds
    expires   {real},                     -- unix seconds, NULL: never
    last_used {real}                      -- unix seconds (written at most every USE_WRITE_INTERVAL s)
);
CREATE TABLE IF NOT EXISTS api_audit (
    id         {serial},
    at         {real} NOT NULL,           -- unix seconds
    token      TEXT NOT NULL,             -- the token's name (admin: server.admin.token_file's)
    client     TEXT,                      -- the client's address
    request_id TEXT NOT NULL,
    method     TEXT NOT NULL,             -- PUT, PATCH, DELETE, POST
    node       TEXT,
    action     TEXT NOT NULL,             -- created, replaced, patched, deleted, provision, adopt, ...
    changed    TEXT NOT NULL,             -- JSON list of the changed keys (key paths, never values)
    status     INTEGER NOT NULL           -- the answer's HTTP status
);
CREATE INDEX IF NOT EXISTS api_audit_node ON api_audit (node, id);
CREATE INDEX IF NOT EXISTS api_audit_token ON api_audit (token, id)
"""

#: :data:`SCHEMA_SQL` for sqlite and for PostgreSQL.
SQLITE_SCHEMA = SCHEMA_SQL.format(real="REAL", serial="INTEGER PRIMARY KEY AUTOINCREMENT")
POSTGRES_SCHEMA = SCHEMA_SQL.format(real="DOUBLE PRECISION", serial="BIGSERIAL PRIMARY KEY")

TOKENS_SQL = "SELECT name, hash, scopes, created, expires, last_used FROM api_tokens ORDER BY name"
CREATE_TOKEN_SQL = ("INSERT INTO api_tokens (name, hash, scopes, created, expires) VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT (name) DO NOTHING")
REVOKE_TOKEN_SQL = "DELETE FROM api_tokens WHERE name = ?"
TOUCH_TOKEN_SQL = "UPDATE api_tokens SET last_used = ? WHERE name = ? AND (last_used IS NULL OR last_used < ?)"
AUDIT_SQL = ("INSERT INTO api_audit (at, token, client, request_id, method, node, action, changed, status) "
             "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
#: The newest audit entries first, filtered by node and token (``NULL``: any), at most ``?`` of them.
AUDIT_READ_SQL = ("SELECT at, token, client, request_id, method, node, action, changed, status FROM api_audit "
                  "WHERE (CAST(? AS TEXT) IS NULL OR node = ?) AND (CAST(? AS TEXT) IS NULL OR token = ?) "
                  "ORDER BY id DESC LIMIT ?")

#: Seconds between two writes of one token's ``last_used`` (a busy client costs no write per request).
USE_WRITE_INTERVAL = 60.0


class TokenExistsError(InputError):
    """``tokens create NAME`` for a name that is taken (exit 2)."""


def token_hash(token: str) -> str:
    """The hex SHA-256 of ``token`` (tokens are 256-bit random: a slow hash adds nothing)."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class TokenRecord:
    """A token as the store keeps it: ``name``, the hex SHA-256 ``hash``, ``scopes``, ``created``,
    ``expires`` (``None``: never) and ``last_used`` (``None``: never), unix seconds."""

    name: str
    hash: str
    scopes: tuple[str, ...]
    created: float
    expires: float | None = None
    last_used: float | None = None

    def expired(self, now: float) -> bool:
        """Whether the token is past its expiry at ``now``."""
        return self.expires is not None and now >= self.expires


def token_of(row: Sequence[Any]) -> TokenRecord:
    """A row of :data:`TOKENS_SQL` as a :class:`TokenRecord`."""
    return TokenRecord(row[0], row[1], tuple(row[2].split()), float(row[3]),
                       None if row[4] is None else float(row[4]), None if row[5] is None else float(row[5]))


@dataclass(frozen=True)
class AuditEntry:
    """One write or action of the API: ``at`` (unix seconds), the ``token``'s name, the ``client``'s address,
    the ``request_id``, the HTTP ``method``, the ``node`` (``None``: none), the ``action`` (``created``,
    ``replaced``, ``patched``, ``deleted``, ``provision``, ...), the ``changed`` keys (key paths such as
    ``redfish.password``, never a value) and the answer's ``status``."""

    at: float
    token: str
    client: str | None
    request_id: str
    method: str
    node: str | None
    action: str
    changed: tuple[str, ...]
    status: int

    def row(self) -> tuple[Any, ...]:
        """The values of :data:`AUDIT_SQL`."""
        return (self.at, self.token, self.client, self.request_id, self.method, self.node, self.action,
                json.dumps(list(self.changed)), self.status)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able dict (``at`` in unix seconds)."""
        return {"at": self.at, "token": self.token, "client": self.client, "request_id": self.request_id,
                "method": self.method, "node": self.node, "action": self.action, "changed": list(self.changed),
                "status": self.status}


def audit_of(row: Sequence[Any]) -> AuditEntry:
    """A row of :data:`AUDIT_READ_SQL` as an :class:`AuditEntry`."""
    return AuditEntry(float(row[0]), row[1], row[2], row[3], row[4], row[5], row[6], tuple(json.loads(row[7])),
                      int(row[8]))


def audit_params(node: str | None, token: str | None, limit: int) -> tuple[Any, ...]:
    """The parameters of :data:`AUDIT_READ_SQL`."""
    return (node, node, token, token, limit)


class ApiStore(ABC):
    """The fleet API's part of the state store: tokens and the audit trail. Every method raises
    :class:`~bootserver.errors.UnavailableError` when the store does not answer (``StateStoreError`` from
    the command line)."""

    @abstractmethod
    async def create_token(self, record: TokenRecord) -> None:
        """Keep a new token. Raises :class:`TokenExistsError` when its name is taken."""

    @abstractmethod
    async def tokens(self) -> list[TokenRecord]:
        """Every token, by name (expired ones too)."""

    @abstractmethod
    async def revoke_token(self, name: str) -> bool:
        """Remove token ``name``; whether there was one."""

    @abstractmethod
    async def touch_tokens(self, used: Mapping[str, float]) -> None:
        """Record each token's last use (``{name: unix seconds}``; an older time than the kept one is ignored)."""

    @abstractmethod
    async def write_audit(self, entries: Sequence[AuditEntry]) -> None:
        """Append ``entries`` to the audit trail (one transaction)."""

    @abstractmethod
    async def audit(self, node: str | None = None, token: str | None = None, limit: int = 1000) -> list[AuditEntry]:
        """The newest ``limit`` audit entries, newest first, of ``node`` and ``token`` (``None``: any)."""
