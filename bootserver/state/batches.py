"""Group commit with write-behind of repeats (:class:`Batches`): the batching both state store
backends write through (the sqlite store on its writer thread, :class:`~bootserver.state.sqlite.GroupCommit`;
the PostgreSQL store in a pipeline).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from ..timeline import Record

log = logging.getLogger("bootserver.timeline")


class Batches:
    """Group commit on one event loop, with write-behind for repeats.

    :meth:`record` queues a record and waits for its commit (write-through); :meth:`record_behind`
    queues one without waiting (write-behind: a repeat that only counts into the node's newest row,
    see :meth:`Current.coalesces`), merged in memory with an equal record of the same node still
    queued. One drain task hands everything queued to ``commit`` (one transaction: all or nothing),
    in order; what arrives meanwhile forms the next batch. A write-through record starts a batch at
    once; write-behind records alone wait up to :attr:`WINDOW` seconds for one. So ``kill -9`` loses
    at most the repeats of the last window (plus the batch being committed); :meth:`drained` (the
    ``close`` of a store, on SIGTERM) commits everything queued. Used by
    :class:`~bootserver.state.sqlite.GroupCommit` (sqlite, on a writer thread) and the PostgreSQL store."""

    #: Seconds a write-behind record waits for its batch when no write-through record starts one.
    WINDOW = 0.25

    def __init__(self, commit: Callable[[list[Record]], Awaitable[list[str]]]) -> None:
        self._commit = commit
        self._queue: list[tuple[Record, asyncio.Future[str] | None]] = []
        #: node -> ``[index in _queue, count, last_at, into, key]`` of its newest entry when that entry is
        #: a write-behind record (merged repeats are counted here, not copied per request; ``key``: see
        #: :meth:`count_again`)
        self._behind: dict[str, list[Any]] = {}
        self._urgent = False
        self._draining: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closing = False
        self._failing = False  # the last batch failed (its write-behind records wait for the next)

    async def record(self, record: Record) -> str:
        """Commit ``record``; return the node's stage after it. Raises what ``commit`` raised for its
        batch (then nothing of that batch was written)."""
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        held = self._behind.pop(record.node, None)
        if held is not None:  # later repeats must not merge across this record
            self._seal(held)
        self._queue.append((record, fut))
        self._kick(urgent=True)
        return await fut

    def record_behind(self, record: Record, into: int | None = None, key: object = None) -> None:
        """Queue ``record`` without waiting for its commit (call on the loop); ``into``: the history
        row it repeats (:attr:`Record.into`); ``key``: what :meth:`count_again` may count further
        repeats of it by. When its batch fails (nothing of it was written) it waits for the next one;
        see :meth:`drained` for shutdown."""
        held = self._behind.get(record.node)
        if held is not None and held[3] == into and self._queue[held[0]][0].repeats(record, held[2]):
            held[1] += record.count
            held[2] = record.last
            held[4] = key
            return
        self._behind[record.node] = [len(self._queue), record.count, record.last, into, key]
        self._queue.append((record, None))
        self._kick(urgent=False)

    def count_again(self, node: str, key: object, at: float) -> bool:
        """Count one more event at unix time ``at`` into ``node``'s queued write-behind record, without
        making a :class:`Record`, when that record was queued with a ``key`` equal to ``key`` (the caller's
        name for everything the record holds and the node's state it repeats: equal keys, equal records)
        and ``at`` is not older than its last event: what :meth:`record_behind` of the same record would
        merge. ``False`` (nothing counted) otherwise: the caller records it the long way."""
        held = self._behind.get(node)
        if held is None or key is None or at < held[2] or held[4] != key:
            return False
        held[1] += 1
        held[2] = at
        return True

    def _take(self) -> list[tuple[Record, asyncio.Future[str] | None]]:
        """Everything queued, as one batch (merged repeats made into one record each)."""
        for held in self._behind.values():
            self._seal(held)
        batch, self._queue, self._behind, self._urgent = self._queue, [], {}, False
        return batch

    def _seal(self, held: list[Any]) -> None:
        """Write a write-behind entry's merged count into its queued record."""
        i, count, last, into, _ = held
        r = self._queue[i][0]
        if count != r.count or into is not None:
            self._queue[i] = (replace(r, count=count, last_at=last, into=into), None)

    def _requeue(self, behind: list[Record]) -> None:
        """Put the write-behind records of a failed batch back before what was queued since."""
        since = self._take()
        self._queue = [(r, None) for r in behind] + since
        self._urgent = any(fut is not None for _, fut in since)

    def _start(self) -> asyncio.Task[None]:
        """Start the drain now (no drain runs): the window's timer, if any, is cancelled."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._draining = task = asyncio.create_task(self._drain())
        return task

    def _kick(self, urgent: bool) -> None:
        self._urgent = self._urgent or urgent
        if self._draining is not None:
            return  # the running drain takes it
        if self._urgent:
            self._start()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.WINDOW, self._window_over)

    def _window_over(self) -> None:
        self._timer = None
        self._kick(urgent=True)

    def committed(self, count: int) -> None:
        """Called on the loop after each committed batch of ``count`` records (a hook)."""

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch = self._take()
                try:
                    stages = await self._commit([r for r, _ in batch])
                except asyncio.CancelledError:
                    for _, fut in batch + self._queue:
                        if fut is not None:
                            fut.cancel()
                    raise
                except Exception as e:  # every waiter of the batch gets the error
                    for _, fut in batch:
                        if fut is not None and not fut.done():
                            fut.set_exception(e)
                    # nothing of the batch was written: its write-behind records wait for the next one
                    behind = [r for r, fut in batch if fut is None]
                    if behind:
                        if not self._failing:  # once per outage, not once per window
                            log.warning("node timeline: %d repeated events wait for the next batch: %s",
                                        sum(r.count for r in behind), e)
                        self._failing = True
                        self._requeue(behind)
                    if self._closing:
                        break
                else:
                    for (_, fut), stage in zip(batch, stages, strict=True):
                        if fut is not None and not fut.done():
                            fut.set_result(stage)
                    if self._failing:
                        log.warning("node timeline: batches commit again")
                        self._failing = False
                    self.committed(len(batch))
                if not self._urgent:
                    break  # only write-behind records came meanwhile: they wait for their window
        finally:
            self._draining = None
            if self._queue:
                self._kick(urgent=False)

    async def drained(self, closing: bool = False) -> None:
        """Commit everything queued so far, write-behind records included, and return (a failed batch
        is tried once more; its write-behind records then wait for the next one). With ``closing``
        (the store closes) what still cannot be committed is dropped, with a log line."""
        self._closing = closing
        try:
            for _ in range(2):  # the batch in progress, then one of everything queued before the call
                draining = self._draining
                if draining is None:
                    if not self._queue:
                        break
                    self._urgent = True
                    draining = self._start()
                await asyncio.gather(draining, return_exceptions=True)
            if closing and self._queue:
                log.error("node timeline: %d repeated events not recorded at shutdown",
                          sum(r.count for r, _ in self._take()))
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
        finally:
            self._closing = False

