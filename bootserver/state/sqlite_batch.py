"""A batch of timeline records on a sqlite connection (:func:`run_batch`): :func:`~bootserver.timeline.plan_batch`'s
writes, the inserts many rows per statement (:func:`execute_rows`). Used by the sqlite engine
(:mod:`bootserver.state.sqlite_timeline`) inside its write transaction.
"""

from __future__ import annotations

import functools
import itertools
import sqlite3
from collections.abc import Sequence
from typing import Any

from ..timeline import BATCH_ROWS_SQL, INSERT_SQL, NODE_SQL, Record, Writes, plan_batch


def run_batch(db: sqlite3.Connection, records: Sequence[Record], keep_events: int) -> Writes:
    """:func:`plan_batch` on a sqlite connection inside an open write transaction: one read of the
    batch's node rows, then the writes: the inserts many rows per statement (:func:`execute_rows`), the
    rest one ``executemany`` per kind. Returns what was written. Raises ``sqlite3.Error``."""
    names = sorted({r.node for r in records})
    sql = BATCH_ROWS_SQL.format(nodes=f"IN ({','.join('?' * len(names))})")
    rows = {r[0]: r[1:] for r in db.execute(sql, names)}
    (last,) = db.execute("SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0), "
                         "coalesce((SELECT max(id) FROM events), 0))").fetchone()
    w = plan_batch(records, rows, itertools.count(last + 1), keep_events)
    for sql, params in w.statements():
        if sql in ROWS_AT_ONCE:
            execute_rows(db, sql, params)
        else:
            db.executemany(sql, params)
    return w


#: The statements :func:`execute_rows` runs many rows at a time (one ``VALUES`` list per statement).
ROWS_AT_ONCE = frozenset({INSERT_SQL, NODE_SQL})
#: Rows per statement of :func:`execute_rows` (at most: the rest goes in halving sizes, so at most
#: a handful of statement texts exist per kind and sqlite's statement cache keeps each compiled).
ROWS_PER_STATEMENT = 64


@functools.lru_cache(maxsize=32)
def _rows_sql(sql: str, rows: int) -> str:
    head, _, tail = sql.partition(" VALUES ")
    one, close, rest = tail.partition(")")
    return f"{head} VALUES {', '.join([one + close] * rows)}{rest}"


def execute_rows(db: sqlite3.Connection, sql: str, params: Sequence[Sequence[Any]]) -> None:
    """``db.executemany(sql, params)`` for an ``INSERT ... VALUES (?, ...)`` statement, as statements of
    many ``VALUES`` rows each: sqlite3 lets go of the GIL around every step, so ``executemany`` hands it
    to the event loop's thread and back once per row, which under a boot storm cost more CPU than the
    inserts themselves (issue 40: with the loop busy, 9.2 -> 4.2 us of the writer's CPU per record, and
    404 -> 25 us of wall time). The rows go in order; at most :data:`ROWS_PER_STATEMENT` per statement.
    ``sql``: one of :data:`ROWS_AT_ONCE` (a single ``VALUES (?, ...)`` list, then an optional
    ``ON CONFLICT`` clause). Raises ``sqlite3.Error``."""
    i, n = 0, len(params)
    size = ROWS_PER_STATEMENT
    while i < n:
        while size > n - i:
            size //= 2
        db.execute(_rows_sql(sql, size), [v for row in params[i:i + size] for v in row])
        i += size
