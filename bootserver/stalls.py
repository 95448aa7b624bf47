"""The stall watch: one warning per node that stays in a stage past ``timeline.stall_after``, and the
``(stage, stalled)`` of every node for the metrics.

A node *stalls* when it is still in a stage past its limit (:func:`bootserver.fleet.stall_deadlines`
over ``timeline.stall_after``; a node's final stage never stalls). The watch (:meth:`StallWatch.run`) is
a task of ``serve`` that reads every configured node from the state store when the next deadline comes,
when an event was recorded (:meth:`StallWatch.recorded`: after the shortest stage limit, which is
the soonest a stage entered then can stall, and at most one read per :data:`STALL_READ_MIN` seconds)
and at least every :data:`STALL_READ_MAX` seconds, and logs each stall once. One process per machine
runs it (the lock ``state_dir``/:data:`STALL_LOCK`), so ``serve --workers N`` logs a stall once, not N
times.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import time

from .config import Config
from .errors import UnavailableError
from .fleet import FleetNode, FleetStore, read_fleet
from .nodes_view import format_age
from .timeline import DISCOVERED, NodeState, Recorded

log = logging.getLogger("bootserver.stalls")

#: The stall watch reads every node at least this often (seconds), and at most once per
#: :data:`STALL_READ_MIN` however many events wake it.
STALL_READ_MAX = 30.0
STALL_READ_MIN = 1.0

#: The file in ``state_dir`` whose lock (``flock``) makes one ``serve`` process of a machine the one that
#: logs stalls (``serve --workers N`` would log each N times).
STALL_LOCK = "stall-watch.lock"


class StallWatch:
    """The stall watch of one server over ``state``, the state store of ``config``'s nodes: its task,
    what it warned about, its lock file, and the stages last read for the metrics."""

    def __init__(self, config: Config, state: FleetStore) -> None:
        self.config = config
        self.state = state
        #: Set after each recorded event (:meth:`recorded`; ``None`` until :meth:`start` started the watch).
        self.wake: asyncio.Event | None = None
        #: What the watch warned about: node -> its stage and ``stage_at`` then.
        self._warned: dict[str, tuple[str, float | None]] = {}
        self._task: asyncio.Task[None] | None = None
        self._lock: int | None = None
        #: The configured nodes' stages and whether each is stalled, as last read (see :meth:`read_stages`).
        self._stages: list[tuple[str, bool]] = []

    def recorded(self, event: Recorded) -> None:
        """An observer of recorded events (:meth:`bootserver.runtime.Runtime.observe`): wakes the
        watch, when it runs, to read the nodes again (see :meth:`run`); a discovered machine's report
        concerns no node."""
        if self.wake is not None and event.event != DISCOVERED:
            self.wake.set()

    async def read_stages(self) -> None:
        """Read every configured node's stage and whether it is stalled for :meth:`node_stages` (before
        a metrics scrape; none when the state store cannot answer: the scrape still answers)."""
        try:
            fleet = [seen for seen in await read_fleet(self.config, self.state) if seen.configured]
        except UnavailableError as e:
            log.warning("metrics: node stages not read: %s", e)
            self._stages = []
            return
        now = time.time()
        self._stages = [(seen.state.stage, seen.stalled(now)) for seen in fleet]

    def node_stages(self) -> list[tuple[str, bool]]:
        """``(stage, stalled)`` of every configured node as last read by :meth:`read_stages` (for metrics)."""
        return self._stages

    def stalls(self, fleet: list[FleetNode], now: float) -> list[NodeState]:
        """The nodes of the ``fleet`` view that became stalled (past their stage's
        ``timeline.stall_after``) and were not reported yet for that stage, each logged once as a
        warning; forgets nodes that left the stage they stalled in. Returns their states, for the
        caller to pass on."""
        limits = self.config.timeline.stall_limits
        new = []
        for seen in fleet:
            st, deadline = seen.state, seen.stall_at
            key = (st.stage, st.stage_at)
            if deadline is None or now < deadline:  # not stalled (any more): a new stall is new
                self._warned.pop(st.node, None)
                continue
            if self._warned.get(st.node) == key:
                continue
            self._warned[st.node] = key
            new.append(st)
            log.warning("node %s: stalled in stage %s for %s (timeline.stall_after.%s: %s)", st.node, st.stage,
                        format_age(now - (st.stage_at or now)).removesuffix(" ago"), st.stage,
                        format_age(limits[st.stage]).removesuffix(" ago"))
        return new

    @staticmethod
    def _next_deadline(fleet: list[FleetNode], now: float) -> float | None:
        later = [seen.stall_at for seen in fleet if seen.stall_at is not None and seen.stall_at > now]
        return min(later, default=None)

    async def run(self, wake: asyncio.Event) -> None:
        """Log each node that becomes stalled once (:meth:`stalls`), until cancelled: reads every
        configured node when the next stall deadline comes, the shortest stage limit after ``wake`` is
        set (an event was recorded; at most once per :data:`STALL_READ_MIN` seconds), and at least every
        :data:`STALL_READ_MAX` seconds. A state store that cannot answer is tried again at the next read."""
        while True:
            wake.clear()
            read_at = time.time()
            try:
                fleet = await read_fleet(self.config, self.state)
            except UnavailableError as e:
                log.debug("stall watch: nodes not read: %s", e)
                fleet = []
            now = time.time()
            self.stalls(fleet, now)
            deadline = self._next_deadline(fleet, now)
            until = now + STALL_READ_MAX if deadline is None else min(deadline, now + STALL_READ_MAX)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, until - time.time())):  # (wait_for may eat a cancel)
                    await wake.wait()
            # Woken by an event: a stage entered from now on stalls no sooner than the shortest limit
            # from now, so the read waits that long (not more often than once per STALL_READ_MIN);
            # a storm's events do not make it read the whole fleet every second (issue 40).
            soonest = time.time() + min(self.config.timeline.stall_limits.values(), default=STALL_READ_MAX)
            await asyncio.sleep(max(0.0, min(until, max(read_at + STALL_READ_MIN, soonest)) - time.time()))

    def _take_lock(self) -> bool:
        """Whether this process holds ``state_dir``/:data:`STALL_LOCK` (taken now, kept until close)."""
        try:
            self.config.state_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.config.state_dir / STALL_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            log.warning("stall watch: %s: %s; every process logs stalls", STALL_LOCK, e.strerror)
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._lock = fd
        return True

    def start(self) -> asyncio.Event | None:
        """Start the watch (:meth:`run`, until :meth:`close`) if this process is the one of this machine
        that holds its lock (``serve``; call on the event loop once the state store started). Returns
        :attr:`wake`, the event to set after each recorded event (``None``: another process watches)."""
        if self._task is None and self._take_lock():
            self.wake = asyncio.Event()
            self._task = asyncio.ensure_future(self.run(self.wake))
        return self.wake

    async def close(self) -> None:
        """Stop the watch and release its lock (nothing to do when it never started)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
