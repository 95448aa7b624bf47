"""The fleet API's tokens (docs/api.md, "Authentication, tokens and scopes"): making one
(:func:`new_token`: shown once, only its SHA-256 kept) and telling who a presented token is
(:class:`TokenCache`: the store's tokens held in memory, refreshed every :data:`POLL` seconds so a token
created or revoked on any replica is known to every one within 2 s, and compared in constant time).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import re
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from ..errors import BootserverError, InputError
from ..state.apistore import USE_WRITE_INTERVAL, ApiStore, TokenRecord, token_hash
from ..values import NAME_RE, NAME_RULE
from .operations import GRANTS, SCOPES

log = logging.getLogger("bootserver.api")

#: The prefix of every token (so a secret scanner, and a person, can tell one).
PREFIX = "bst_"
#: The name of ``server.admin.token_file``'s token (refused to ``tokens create``).
ADMIN_NAME = "admin"
#: Seconds between two reads of the store's tokens (a revoked token is refused within this plus a read).
POLL = 1.0


@dataclass(frozen=True)
class Caller:
    """Who sent a request: the ``token``'s name (``admin`` for ``server.admin.token_file``'s) and what its
    scopes grant (:data:`~bootserver.api.operations.GRANTS`)."""

    token: str
    grants: frozenset[str]


def grants_of(scopes: tuple[str, ...]) -> frozenset[str]:
    """What a token with ``scopes`` may do (the union of each scope's grants)."""
    return frozenset().union(*(GRANTS.get(s, frozenset()) for s in scopes))


def new_token(name: str, scopes: list[str], expires_in: int | None,
              now: float | None = None) -> tuple[str, TokenRecord]:
    """A new token for ``name`` with ``scopes`` (expiring ``expires_in`` seconds from now, ``None``:
    never): ``(the token, what the store keeps)``. Raises :class:`~bootserver.errors.InputError` for a bad
    name (:data:`~bootserver.values.NAME_RE`, not ``admin``) or scope."""
    if not re.match(NAME_RE, name) or "\n" in name:
        raise InputError(f"token name {name!r}: {NAME_RULE}")
    if name == ADMIN_NAME:
        raise InputError("token name admin: taken by server.admin.token_file's token; choose another")
    bad = [s for s in scopes if s not in SCOPES]
    if bad or not scopes:
        raise InputError(f"token {name}: scope must be one of {', '.join(SCOPES)}, got {', '.join(bad) or 'none'}")
    at = time.time() if now is None else now
    token = PREFIX + secrets.token_urlsafe(32)
    return token, TokenRecord(name, token_hash(token), tuple(dict.fromkeys(scopes)), at,
                              None if expires_in is None else at + expires_in)


class TokenCache:
    """The tokens a server accepts: ``admin_token`` (``server.admin.token_file``'s, scope ``admin``) and the
    store's, held in memory and read again every :data:`POLL` seconds by :meth:`running`; each use noted
    and written back as the token's ``last_used`` at most every
    :data:`~bootserver.state.apistore.USE_WRITE_INTERVAL` seconds."""

    def __init__(self, store: ApiStore, admin_token: str | None) -> None:
        self.store = store
        self.admin = admin_token.encode() if admin_token is not None else None
        self.records: tuple[TokenRecord, ...] = ()
        self._used: dict[str, float] = {}
        self._written: dict[str, float] = {}
        self._failing = False

    def caller(self, given: str, now: float | None = None) -> Caller | None:
        """The caller ``given`` (a presented bearer token) authenticates, or ``None`` (unknown, revoked or
        expired). Every kept hash is compared, in constant time, whichever matches."""
        raw = given.encode()
        if self.admin is not None and hmac.compare_digest(raw, self.admin):
            return Caller(ADMIN_NAME, GRANTS["admin"])
        digest = token_hash(given).encode()
        found = None
        for record in self.records:
            if hmac.compare_digest(digest, record.hash.encode()):
                found = record
        at = time.time() if now is None else now
        if found is None or found.expired(at):
            return None
        self._used[found.name] = at
        return Caller(found.name, grants_of(found.scopes))

    async def refresh(self) -> None:
        """Read the store's tokens again and write the due ``last_used`` times. A store that does not
        answer keeps the tokens in hand (one warning until it answers again)."""
        due = {n: at for n, at in self._used.items() if at - self._written.get(n, 0.0) >= USE_WRITE_INTERVAL}
        try:
            if due:
                await self.store.touch_tokens(due)
                self._written.update(due)
            self.records = tuple(await self.store.tokens())
        except BootserverError as e:
            if not self._failing:
                log.warning("API tokens: cannot read the state store (the tokens in hand stay): %s", e)
            self._failing = True
        else:
            self._failing = False

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Read the tokens now, then every :data:`POLL` seconds until the block ends."""
        await self.refresh()

        async def poll() -> None:
            while True:
                await asyncio.sleep(POLL)
                await self.refresh()

        task = asyncio.create_task(poll())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
