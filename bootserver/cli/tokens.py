"""The fleet API's tokens and audit trail from the command line: ``bootserver tokens create|list|revoke``
and ``bootserver audit [NODE]`` (docs/api.md). They work on the config's state store, with no server
running; every replica on that store knows a created or revoked token within 2 s."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..config import Config
from .common import duration_arg, opened_store

if TYPE_CHECKING:
    from ..state.apistore import AuditEntry
    from .common import Subparsers


def _when(at: float | None, never: str = "never") -> str:
    if at is None:
        return never
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cli_entry(action: str, token: str, changed: tuple[str, ...] = ()) -> AuditEntry:
    """The audit entry of a token command (token ``cli``, method ``CLI``; the token's name as ``node``'s
    place is taken by ``changed``: the token's name and scopes, never the token)."""
    from ..state.apistore import AuditEntry

    return AuditEntry(time.time(), "cli", None, uuid.uuid4().hex, "CLI", None, action, (f"token:{token}", *changed),
                      0)


def tokens_create(args: argparse.Namespace, config: Config) -> int:
    """Make a token: printed once, alone on standard output; what else is said goes to standard error."""
    from ..api.tokens import new_token

    token, record = new_token(args.name, args.scope, args.expires)

    async def create() -> str:
        async with opened_store(config) as store:
            await store.create_token(record)
            await store.write_audit([_cli_entry("token-created", record.name, record.scopes)])
            return store.name

    where = asyncio.run(create())
    print(f"bootserver: token {record.name} ({' '.join(record.scopes)}, expires "
          f"{_when(record.expires)}) kept hashed in {where}; it is shown only now", file=sys.stderr)
    print(token)
    return 0


def tokens_list(args: argparse.Namespace, config: Config) -> int:
    """One line per token: name, scopes, created, expires, last used (never the token)."""
    async def read() -> list[list[str]]:
        async with opened_store(config) as store:
            now = time.time()
            return [[t.name, ",".join(t.scopes), _when(t.created),
                     _when(t.expires) + (" (expired)" if t.expired(now) else ""), _when(t.last_used)]
                    for t in await store.tokens()]

    rows = [["NAME", "SCOPES", "CREATED", "EXPIRES", "LAST USED"], *asyncio.run(read())]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return 0


def tokens_revoke(args: argparse.Namespace, config: Config) -> int:
    """Remove a token: every server on the store refuses it within 2 s. An unknown name is exit 2."""
    async def revoke() -> bool:
        async with opened_store(config) as store:
            if not await store.revoke_token(args.name):
                return False
            await store.write_audit([_cli_entry("token-revoked", args.name)])
            return True

    if not asyncio.run(revoke()):
        print(f"bootserver: no token {args.name!r} (tokens list)", file=sys.stderr)
        return 2
    print(f"bootserver: token {args.name} revoked", file=sys.stderr)
    return 0


def audit(args: argparse.Namespace, config: Config) -> int:
    """The fleet API's audit trail, newest first (of ``NODE``; ``--token NAME``; ``--limit N``)."""
    async def read() -> list[list[str]]:
        async with opened_store(config) as store:
            return [[_when(e.at), e.token, e.client or "-", e.method, e.node or "-", e.action, str(e.status),
                     ",".join(e.changed) or "-", e.request_id]
                    for e in await store.audit(args.node, args.token, args.limit)]

    rows = [["WHEN", "TOKEN", "CLIENT", "METHOD", "NODE", "ACTION", "STATUS", "CHANGED", "REQUEST"],
            *asyncio.run(read())]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return 0


def add_tokens(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Register ``tokens create|list|revoke``."""
    from ..api.operations import SCOPES

    p = sub.add_parser("tokens", help="manage the fleet API's tokens (kept hashed in the state store)")
    tsub = p.add_subparsers(dest="tokens_command", required=True, metavar="ACTION")
    c = tsub.add_parser("create", parents=[common], help="make a token and print it once, alone on stdout")
    c.add_argument("name", metavar="NAME", help="the token's name (audit entries name it)")
    c.add_argument("--scope", action="append", required=True, choices=SCOPES,
                   help="what it may do: read, write (nodes), actions (provision, reinstall, adopt...), admin; "
                   "repeatable")
    c.add_argument("--expires", type=duration_arg, metavar="DURATION", help="e.g. 30d (default: never)")
    c.set_defaults(func=tokens_create)
    ls = tsub.add_parser("list", parents=[common], help="name, scopes, created, expires, last used")
    ls.set_defaults(func=tokens_list)
    r = tsub.add_parser("revoke", parents=[common], help="remove a token (refused by every server within 2 s)")
    r.add_argument("name", metavar="NAME")
    r.set_defaults(func=tokens_revoke)


def add_audit(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Register ``audit [NODE]``."""
    p = sub.add_parser("audit", parents=[common], help="the fleet API's writes and actions, newest first")
    p.add_argument("node", nargs="?", metavar="NODE", help="only this node's")
    p.add_argument("--token", metavar="NAME", help="only this token's")
    p.add_argument("--limit", type=int, default=100, metavar="N", help="at most N entries (default 100)")
    p.set_defaults(func=audit)
