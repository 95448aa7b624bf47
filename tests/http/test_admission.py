"""Admission under a storm (bootserver.http.admission, issue 40): every 503 carries a Retry-After paced
by the measured service rate and spread over the schedule, machines in their boot are served before new
arrivals, a machine refused before goes ahead of first-time arrivals, and /metrics shows the queue.

The Limits run real handlers (coroutines) on aiohttp's own test requests; time is a clock the test moves,
so the pacing arithmetic is checked exactly without sleeping."""

from __future__ import annotations

import asyncio
import collections
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from support.security import holding_the_only_slot, make_config
from support.signing import signed

from bootserver.http.admission import Limits
from bootserver.http.app import ADMIN_APP
from bootserver.urls import ARTIFACT, CHAIN, CHECKIN, STUB


class Clock:
    """Monotonic seconds the test sets."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def request(path: str) -> web.Request:
    return make_mocked_request("GET", path)


async def answered(limits: Limits, route, path: str, gate: asyncio.Event | None = None,
                   entered: asyncio.Event | None = None) -> web.StreamResponse:
    """One request through ``limits``: its handler sets ``entered`` (if any), waits for ``gate`` (if any),
    then answers 200."""

    async def handler(_r: web.Request) -> web.StreamResponse:
        if entered is not None:
            entered.set()
        if gate is not None:
            await gate.wait()
        return web.Response(text="ok")

    return await limits.run(request(path), route, handler)


async def held(limits: Limits, route, path: str) -> tuple[asyncio.Task[web.StreamResponse], asyncio.Event]:
    """A request that holds a slot until the returned event is set."""
    gate, entered = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(answered(limits, route, path, gate, entered))
    await asyncio.wait_for(entered.wait(), 5)  # its handler runs: it holds its slot
    return task, gate


async def queued(limits: Limits, cls: str, count: int) -> None:
    """Wait until ``count`` requests of class ``cls`` (``new``, ``in_boot``) wait in ``limits``' queue.
    The requests here do no I/O, so a few loop turns are enough; at most 100 (no time passes)."""
    for _ in range(100):
        if limits.pacing().waiting[cls] == count:
            return
        await asyncio.sleep(0)  # one loop turn: the tasks created before run up to their wait
    raise AssertionError(f"{limits.pacing().waiting[cls]} {cls} requests waiting, not {count}")


async def test_refused_machines_are_paced_at_the_measured_rate_and_spread() -> None:
    clock = Clock()
    limits = Limits(2, 60, max_queued=0, clock=clock, spread=lambda: 0.0)
    first, release_first = await held(limits, CHAIN, "/ipxe/a")
    # a busy second: 5 boots of 5 requests each (script, kernel, initramfs, stub, check-in) go through
    # the other slot while one more machine is refused (so the window counts as busy)
    second, release_second = await held(limits, CHAIN, "/ipxe/b")
    assert (await answered(limits, CHAIN, "/ipxe/c")).status == 503
    release_second.set()
    await second
    for i in range(5):
        for route, path in ((CHAIN, f"/ipxe/n{i}"), (ARTIFACT, "/artifacts/k"), (ARTIFACT, "/artifacts/i"),
                            (STUB, f"/ignition/n{i}"), (CHECKIN, f"/checkin/n{i}")):
            assert (await answered(limits, route, path)).status == 200
    second, release_second = await held(limits, CHAIN, "/ipxe/b2")
    clock.now += 2.0  # 26 requests in 2 s: 13 per second; 6 of them scripts
    refused = [await answered(limits, CHAIN, f"/ipxe/storm-{i}") for i in range(40)]
    assert all(r.status == 503 for r in refused)
    assert abs(limits.rate - 13.0) < 1e-9
    seconds = [int(r.headers["Retry-After"]) for r in refused]
    # one schedule at the service rate: each refused machine brings ~26/6 requests, so about 3 machines
    # come back per second, in order, from 1 s up to 40 * (26/6) / 13 = 13.3 s
    assert seconds == sorted(seconds) and seconds[0] == 1 and seconds[-1] == 14
    per_second = collections.Counter(seconds)
    assert max(per_second.values()) <= 4, per_second
    # a step of a boot is paced by the queue ahead of it (none waits: the two running), not behind the
    # new arrivals' schedule; the next new arrival comes after every step told to come back
    late = [await answered(limits, STUB, f"/ignition/x{i}") for i in range(13)]  # its queue has room 0 too
    assert [int(r.headers["Retry-After"]) for r in late] == [1] * 11 + [2] * 2  # 13 a second, from 2/13 s on
    after = await answered(limits, CHAIN, "/ipxe/storm-40")
    assert int(after.headers["Retry-After"]) == 14  # 40 * (26/6) / 13 = 13.3 s, then this one
    release_first.set()
    release_second.set()
    await asyncio.gather(first, second)
    assert limits.pacing().running == 0


async def test_the_spread_scatters_a_wave_within_its_seconds() -> None:
    clock = Clock()
    draws = iter([0.0, 0.99] * 10)
    limits = Limits(1, 60, max_queued=0, clock=clock, spread=lambda: next(draws))
    task, release = await held(limits, CHAIN, "/ipxe/a")
    seconds = {int((await answered(limits, CHAIN, f"/ipxe/{i}")).headers["Retry-After"]) for i in range(4)}
    assert seconds == {1, 2}  # the same place in the schedule, two whole seconds apart by the spread
    release.set()
    await task


async def test_machines_in_their_boot_go_before_new_arrivals_and_returning_ones_before_first_timers() -> None:
    clock = Clock()
    limits = Limits(1, 60, max_queued=1, clock=clock)
    order: list[str] = []

    async def one(route, path: str) -> int:
        async def handler(r: web.Request) -> web.StreamResponse:
            order.append(r.raw_path)
            return web.Response()

        return (await limits.run(request(path), route, handler)).status

    task, release = await held(limits, CHAIN, "/ipxe/holder")
    waiting_new = asyncio.create_task(one(CHAIN, "/ipxe/first-timer"))
    await queued(limits, "new", 1)
    assert await one(CHAIN, "/ipxe/returner?sig=s") == 503  # the new-arrival queue is full: told to come back
    waiting_boot = asyncio.create_task(one(STUB, "/ignition/half-way"))  # a queue of its own
    await queued(limits, "in_boot", 1)
    release.set()
    await asyncio.gather(task, waiting_new, waiting_boot)
    assert order == ["/ignition/half-way", "/ipxe/first-timer"]

    # the refused machine's retry (same path and query) goes ahead of a first-time arrival that came before it
    order.clear()
    task, release = await held(limits, CHAIN, "/ipxe/holder")
    limits.max_queued = 2
    clock.now += 5  # the first-timer arrives after the returner's first refusal, and asks before its retry
    fresh = asyncio.create_task(one(CHAIN, "/ipxe/fresh"))
    await queued(limits, "new", 1)
    clock.now += 1
    back = asyncio.create_task(one(CHAIN, "/ipxe/returner?sig=s"))
    await queued(limits, "new", 2)
    release.set()
    await asyncio.gather(task, fresh, back)
    assert order == ["/ipxe/returner?sig=s", "/ipxe/fresh"]


async def test_a_wait_longer_than_the_request_timeout_is_refused_at_once() -> None:
    clock = Clock()
    limits = Limits(1, 2, max_queued=1000, clock=clock)
    limits.rate = 1.0  # as measured: one request a second
    task, release = await held(limits, CHAIN, "/ipxe/holder")
    waiting = [asyncio.create_task(answered(limits, CHAIN, f"/ipxe/w{i}")) for i in range(3)]
    await queued(limits, "new", 3)
    r = await answered(limits, CHAIN, "/ipxe/fourth")  # 3 ahead at 1/s: not before the 2 s timeout
    assert r.status == 503 and int(r.headers["Retry-After"]) >= 4
    release.set()
    assert [x.status for x in await asyncio.gather(task, *waiting)] == [200] * 4


async def test_a_waiter_that_goes_away_leaves_no_slot_behind() -> None:
    limits = Limits(1, 60, max_queued=10)
    task, release = await held(limits, CHAIN, "/ipxe/holder")
    gone = asyncio.create_task(answered(limits, CHAIN, "/ipxe/gone"))
    await queued(limits, "new", 1)
    gone.cancel()
    release.set()
    await task
    assert (await asyncio.wait_for(answered(limits, CHAIN, "/ipxe/next"), 5)).status == 200
    assert limits.pacing().running == 0


async def test_metrics_show_the_refusals_and_the_queue(aiohttp_client, reference, tmp_path: Path) -> None:
    config = make_config(tmp_path, server={"max_concurrent": 1, "max_queued": 0})
    client, first, release = await holding_the_only_slot(aiohttp_client, config)
    r = await client.get(signed("/ipxe/n0", "n0"))
    assert r.status == 503 and int(r.headers["Retry-After"]) >= 1
    release.set()
    assert (await first).status == 200
    admin = await aiohttp_client(client.server.app[ADMIN_APP])
    text = await (await admin.get("/metrics")).text()
    assert 'bootserver_admission_refused_total{class="new"} 1.0' in text
    assert 'bootserver_admission_waiting{class="in_boot"} 0.0' in text
    assert "bootserver_admission_retry_after_seconds_count 1.0" in text
