"""Admission of ``bootserver serve``: the concurrency cap, the queue in front of it, the pacing of the
``503`` answers a storm gets, and the handler timeout (:class:`Limits`).

A boot storm (a rack or a room powered on at once) sends more requests than the server can answer at
once. What a machine does with a refusal decides whether it boots: iPXE (src/net/tcp/httpcore.c,
``http_parse_retry_after``) retries a ``503`` that carries ``Retry-After`` after that many seconds, with
no retry limit, and fails the ``chain`` on a ``503`` without it; Ignition retries with its own backoff;
the check-in unit retries with curl's ``--retry``. So every ``503`` here carries ``Retry-After``, and the
value paces the storm:

- **Queue ahead and service rate.** The server measures how many requests it finishes per second
  (:attr:`Limits.rate`, smoothed over windows of :data:`RATE_WINDOW` seconds). A refused request is given
  the time when the work ahead of it (requests waiting, plus the machines already told to come back)
  will have been served at that rate: the refused requests get successive places in a schedule, each
  place as long as the requests a returning machine brings (a new arrival brings its whole boot: the
  measured requests per script; a step of a boot brings one). Steps of a boot have a schedule of their
  own, ahead of the new arrivals' (which starts behind it): a machine half-way through comes back
  within the seconds its own queue needs, not behind the next rack.
- **Spread.** ``Retry-After`` is whole seconds; each value adds a random fraction of a second before
  rounding up, so machines refused in the same millisecond come back over the seconds the schedule
  gives them, not as one wave.
- **Machines in their boot first.** Requests of a later step of a boot (routes with
  :attr:`~bootserver.urls.Route.in_boot`: artifacts, stub, real config, check-in) and of the admin
  listener wait in a queue of their own, served before new arrivals (scripts), each queue bounded by
  ``max_queued``. Among new arrivals a machine that was refused before (its retry asks for the same
  path and query) goes ahead of machines seen for the first time, oldest refusal first: no machine is
  starved by the next rack.

A request whose wait, at the measured rate, would exceed ``request_timeout`` is refused at once (it
would time out in the queue); one still waiting after ``request_timeout`` is refused then. Handlers of
timed routes are cut at ``request_timeout`` (a paced ``503`` too).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from ..metrics import Metrics
from ..urls import ADMIN, Route

log = logging.getLogger("bootserver.security")

Call = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: Seconds over which the service rate is measured (one window; the rate is smoothed over windows).
RATE_WINDOW = 1.0
#: Requests per second assumed before the first measurement.
INITIAL_RATE = 200.0
#: The longest ``Retry-After`` (seconds) ever sent.
MAX_RETRY_AFTER = 600
#: Refused new arrivals remembered (their retry goes ahead of first-time arrivals); more are not noted.
MAX_RETURNING = 100_000
#: Seconds between two log lines about refusals (a storm refuses thousands a second: one line sums them).
LOG_EVERY = 5.0

#: The two admission classes: a later step of a boot (or the admin listener), and a new arrival.
IN_BOOT, NEW = 0, 1
CLASS_NAMES = ("in_boot", "new")


def admission_class(route: Route) -> int:
    """:data:`IN_BOOT` for a route a machine asks for once its boot is under way
    (:attr:`Route.in_boot`) and for admin routes (an operator's page stays answerable in a storm),
    :data:`NEW` for the rest (scripts: where a boot starts)."""
    return IN_BOOT if route.in_boot or ADMIN in route.listeners else NEW


@dataclass
class Pacing:
    """What :class:`Limits` reports (``/metrics``, the live page): requests in handlers and waiting per
    class, refused since start per class, the measured service rate (requests/s), the seconds until
    the last machine told to come back is due (0: none), and the last ``Retry-After`` sent."""

    running: int
    waiting: dict[str, int]
    refused: dict[str, int]
    rate: float
    horizon: float
    last_retry_after: int


class Limits:
    """The concurrency cap, the two admission queues, the paced ``Retry-After`` of every ``503`` and the
    handler timeout (module docstring): at most ``max_concurrent`` requests in their handlers, at most
    ``max_queued`` waiting per class, each timed route cut at ``request_timeout`` seconds. Routes with
    ``capped=False`` (``/healthz``, the live page's event stream) skip it.

    A request holds its slot while its handler runs: a streamed response that the handler prepares
    itself is counted until sent; a ``FileResponse`` (sendfile) returned unprepared is not.

    The handler timeout is one watch for every timed request rather than an ``asyncio.timeout`` each
    (a timer in the loop's heap per request: 4.5 us per use measured on the benchmark machine, see
    docs/benchmarks.md): the requests in their handlers are noted with their deadlines, and while there
    are any, :meth:`_sweep` runs every :attr:`tick` seconds (a tenth of ``request_timeout``, at most 1 s)
    and cancels the tasks past theirs, which then answer 503 as ``asyncio.timeout`` would have them (the
    cancellation is taken back with ``Task.uncancel``). A handler is cut between ``request_timeout`` and
    ``request_timeout + tick`` seconds.

    ``metrics``: where the queue and the pacing are reported (``bootserver_admission_*``), or ``None``.
    ``clock``: monotonic seconds (tests). ``spread``: a random number in [0, 1) per ``Retry-After``.
    """

    def __init__(self, max_concurrent: int, request_timeout: float, max_queued: int = 0,
                 metrics: Metrics | None = None, clock: Callable[[], float] = time.monotonic,
                 spread: Callable[[], float] = random.random) -> None:
        self.max_concurrent = max_concurrent
        self.request_timeout = request_timeout
        self.max_queued = max_queued
        self.metrics = metrics
        self.clock = clock
        self.spread = spread
        #: Seconds between two looks at the running handlers' deadlines.
        self.tick = max(0.01, min(1.0, request_timeout / 10))
        self._free = max_concurrent
        #: waiting requests: [class, first seen (monotonic s), sequence, future of the slot]
        self._queue: list[tuple[int, float, int, asyncio.Future[None]]] = []
        self._waiting = [0, 0]
        self._seq = itertools.count()
        #: requests finished: by class (the requests a boot brings = all / new), and at the window's start
        self._done = [0, 0]
        self._window = (clock(), 0)
        self._busy = False
        self._measured = 0
        #: measured service rate, requests per second
        self.rate = INITIAL_RATE
        #: per class, monotonic time until which the requests told to come back are scheduled
        self._promised = [0.0, 0.0]
        self._returning: dict[str, float] = {}
        self._refused = [0, 0]
        self._last_retry_after = 0
        self._logged = (0.0, 0)
        #: timed handlers running now: their task -> deadline (``loop.time()``); those cancelled for it
        self._running: dict[asyncio.Task[object], float] = {}
        self._expired: set[asyncio.Task[object]] = set()
        self._watch: asyncio.TimerHandle | None = None

    # --- pacing ---
    def _measure(self, now: float) -> None:
        """Fold the requests finished since the window began into :attr:`rate` once a window passed."""
        start, done_then = self._window
        if now - start < RATE_WINDOW:
            return
        done = self._done[0] + self._done[1]
        # only a busy window (a request waited or was refused in it) says how fast the server can go:
        # one with free slots throughout measured the arrivals
        if self._busy and done > done_then:
            sample = (done - done_then) / (now - start)
            self.rate = sample if self._measured == 0 else 0.5 * self.rate + 0.5 * sample
            self._measured += 1
        self._window = (now, done)
        self._busy = self._free == 0

    def boot_requests(self) -> float:
        """Requests a new arrival brings, measured (finished requests per finished new arrival), 1-16."""
        done_all, done_new = self._done[0] + self._done[1], self._done[NEW]
        return min(16.0, max(1.0, done_all / done_new)) if done_new else 5.0

    def retry_after(self, cls: int) -> int:
        """Seconds (whole, 1 to :data:`MAX_RETRY_AFTER`) a refused request of class ``cls`` is asked to
        wait: its place in the schedule after the work ahead of it at the measured rate, plus a random
        fraction of a second (module docstring). Takes the place in its class's schedule."""
        now = self.clock()
        self._measure(now)
        rate = max(self.rate, 1.0)
        ahead = self._waiting[IN_BOOT] + (self._waiting[NEW] if cls == NEW else 0)
        promised = self._promised
        # a step of a boot comes back behind the steps already told to, never behind the new arrivals;
        # a new arrival behind both
        due = max(now + (ahead + self.max_concurrent - self._free) / rate, promised[IN_BOOT],
                  promised[NEW] if cls == NEW else 0.0)
        due = min(due, now + MAX_RETRY_AFTER - 1)
        promised[cls] = due + (self.boot_requests() if cls == NEW else 1.0) / rate
        seconds = max(1, min(MAX_RETRY_AFTER, math.ceil(due - now + self.spread())))
        self._last_retry_after = seconds
        return seconds

    def busy(self, request: web.Request, cls: int, why: str) -> web.Response:
        """The paced ``503`` for a request of class ``cls`` refused because ``why`` (logged, summed over
        :data:`LOG_EVERY` seconds). A refused new arrival is remembered by its path and query, so its
        retry goes ahead of first-time arrivals."""
        seconds = self.retry_after(cls)
        self._refused[cls] += 1
        if cls == NEW and len(self._returning) < MAX_RETURNING:
            self._returning.setdefault(request.raw_path, self.clock())
        if self.metrics is not None:
            self.metrics.admission_refused(CLASS_NAMES[cls], seconds, self.rate)
        now = self.clock()
        since, count = self._logged
        if now - since >= LOG_EVERY:
            log.warning("%s %s: 503 %s (Retry-After: %d; %d more refused in the last %.0f s)",
                        request.method, request.path, why, seconds, count, min(now - since, LOG_EVERY))
            self._logged = (now, 0)
        else:
            self._logged = (since, count + 1)
        return web.Response(status=503, text="busy, retry later\n", content_type="text/plain",
                            headers={"Retry-After": str(seconds)})

    def pacing(self) -> Pacing:
        """The admission's state now (:class:`Pacing`)."""
        now = self.clock()
        self._measure(now)
        return Pacing(running=self.max_concurrent - self._free,
                      waiting=dict(zip(CLASS_NAMES, self._waiting, strict=True)),
                      refused=dict(zip(CLASS_NAMES, self._refused, strict=True)),
                      rate=self.rate, horizon=max(0.0, max(self._promised) - now),
                      last_retry_after=self._last_retry_after)

    # --- the queue ---
    def _queued(self, cls: int) -> None:
        if self.metrics is not None:
            self.metrics.admission_waiting(CLASS_NAMES[cls], self._waiting[cls])

    def _release(self, cls: int) -> None:
        """A request of class ``cls`` left its handler: its slot goes to the first waiting request, else
        back to the free ones."""
        self._done[cls] += 1
        queue = self._queue
        while queue:
            future = heapq.heappop(queue)[3]
            if not future.done():
                future.set_result(None)  # the slot passes on: never free in between
                return
        self._free += 1

    async def _wait(self, request: web.Request, cls: int) -> web.Response | None:
        """Wait in class ``cls``'s queue for a slot; ``None`` once it is this request's, else the ``503``."""
        self._measure(self.clock())
        self._busy = True
        if self._waiting[cls] >= self.max_queued:
            return self.busy(request, cls, f"{self.max_concurrent} requests in progress and "
                                           f"{self._waiting[cls]} waiting ({CLASS_NAMES[cls]})")
        ahead = self._waiting[IN_BOOT] + (self._waiting[NEW] if cls == NEW else 0)
        if ahead / max(self.rate, 1.0) > self.request_timeout:
            return self.busy(request, cls, f"{ahead} requests ahead at {self.rate:.0f}/s: "
                                           f"longer than {self.request_timeout}s")
        first = self._returning.pop(request.raw_path, None) if cls == NEW and self._returning else None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._queue, (cls, self.clock() if first is None else first, next(self._seq), future))
        self._waiting[cls] += 1
        self._queued(cls)
        try:
            async with asyncio.timeout(self.request_timeout):
                await future
        except TimeoutError:
            if future.done() and not future.cancelled():
                return None  # handed a slot just as the wait ran out: take it
            return self.busy(request, cls, f"no free slot within {self.request_timeout}s")
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release(cls)  # handed a slot just as the client went away: pass it on
            raise
        finally:
            self._waiting[cls] -= 1
            self._queued(cls)
        return None

    # --- the handler timeout ---
    def _sweep(self) -> None:
        """Cancel the timed handlers past their deadline; look again in :attr:`tick` seconds while any run."""
        self._watch = None
        if not self._running:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        for task, deadline in self._running.items():
            if deadline <= now and task not in self._expired:
                self._expired.add(task)
                task.cancel()
        self._watch = loop.call_at(now + self.tick, self._sweep)

    async def _timed(self, request: web.Request, cls: int, call: Call) -> web.StreamResponse:
        """``await call(request)``, cut after ``request_timeout`` seconds (a paced 503)."""
        task = asyncio.current_task()
        assert task is not None
        loop = task.get_loop()
        cancelling = task.cancelling()
        self._running[task] = loop.time() + self.request_timeout
        if self._watch is None:
            self._watch = loop.call_at(loop.time() + self.tick, self._sweep)
        try:
            return await call(request)
        except asyncio.CancelledError:
            if task not in self._expired:
                raise
            self._expired.discard(task)
            if task.uncancel() > cancelling:
                raise  # cancelled by someone else too (shutdown): not ours to answer
            log.warning("%s %s: 503 no answer within %ss", request.method, request.path, self.request_timeout)
            return web.Response(status=503, text="timed out, retry later\n", content_type="text/plain",
                                headers={"Retry-After": str(self.retry_after(cls))})
        finally:
            del self._running[task]
            if task in self._expired:  # cut, but the handler swallowed the cancellation: take it back
                self._expired.discard(task)
                task.uncancel()

    async def run(self, request: web.Request, route: Route, call: Call) -> web.StreamResponse:
        """``await call(request)`` under the cap (queued or refused with a paced ``503`` beyond it) and,
        for a timed ``route``, the timeout."""
        if not route.capped:
            return await call(request)
        cls = admission_class(route)
        if self._free > 0:  # then no one waits: a freed slot goes to the first waiting request at once
            self._free -= 1
        else:
            refused = await self._wait(request, cls)
            if refused is not None:
                return refused
        try:
            if not route.timed:
                return await call(request)
            return await self._timed(request, cls, call)
        finally:
            self._release(cls)


#: The admission of a server's applications (shared by the device and admin applications).
LIMITS = web.AppKey("limits", Limits)
