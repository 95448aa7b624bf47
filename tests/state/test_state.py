"""The state store interface against both backends: sqlite in state_dir (the default) and a real
PostgreSQL server (a throwaway cluster, tests/support/pgcluster.py). Timeline rules, signing keys and boot-once
must behave the same on both; the PostgreSQL-only parts (schema migration under a lock, losing and
regaining the database) follow."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support.pgcluster import PgCluster
from support.services import service
from support.stores import db_names, make_config, needs_pg

from bootserver.errors import UnavailableError
from bootserver.signing import Signer
from bootserver.state import StateStore, StateStoreError, repeat_key
from bootserver.state import postgresql as pgstate
from bootserver.state.backends import open_store
from bootserver.state.batches import Batches
from bootserver.state.sqlite_timeline import SCHEMA_VERSION
from bootserver.timeline import Record, boot_started


@pytest.fixture
async def stores(backend) -> AsyncIterator[list[StateStore]]:
    """Two started stores over the same state (two replicas, or two processes of one machine)."""
    made = [open_store(backend(timeline={"keep_events": 10})) for _ in range(2)]
    for s in made:
        await s.start()
    try:
        yield made
    finally:
        for s in made:
            await s.close()


def rec(node: str, event: str, at: float, ip: str | None = None, **detail: Any) -> Record:
    return Record(node, event, "install", at, ip, detail or None)


async def test_stage_coalescing_retention_and_attribution(stores: list[StateStore]) -> None:
    a, b = stores
    assert await a.stage("master-0") == "new"
    assert await a.record(rec("master-0", "script", 100.0, "10.0.0.5", release="1")) == "ipxe"
    assert await a.record(rec("master-0", "script", 101.0, "10.0.0.5", release="1")) == "ipxe"
    assert await b.record(rec("master-0", "kernel-requested", 102.0, "10.0.0.5")) == "kernel"
    assert await b.record(rec("master-0", "stub", 103.0, "10.0.0.5")) == "installing"
    assert await a.record(rec("master-0", "script", 99.0, "10.0.0.5")) == "installing"  # late: no undo
    assert await a.stage("master-0") == await b.stage("master-0") == "installing"
    rows = [(e.event, e.count, e.at, e.last_at) for e in await b.events("master-0")]
    assert rows == [("script", 1, 99.0, 99.0), ("script", 2, 100.0, 101.0), ("kernel-requested", 1, 102.0, 102.0),
                    ("stub", 1, 103.0, 103.0)]
    assert [e.event for e in await a.events("master-0", limit=1)] == ["stub"]
    assert await b.attribute("10.0.0.5", now=200.0) == "master-0"
    assert await b.attribute("10.0.0.9", now=200.0) is None

    for i in range(20):  # a boot loop: never coalesced, bounded at keep_events rows
        await a.record(rec("master-1", "script" if i % 2 else "reinstall", 1000.0 + i))
    assert len(await b.events("master-1")) == 10
    state = await b.node("master-1")
    assert (state.stage, state.dropped, state.last_at) == ("ipxe", 10, 1019.0)
    listed = {s.node: s.stage for s in await a.nodes(["master-0", "master-1", "w-9"])}
    assert listed == {"master-0": "installing", "master-1": "ipxe", "w-9": "new"}


async def test_batches_from_two_writers_interleave_without_losing_events(stores: list[StateStore]) -> None:
    """Group commit on both sides at once (two replicas, or two workers): every event is kept."""
    a, b = stores
    records = [rec(f"n{i % 7}", "kernel-requested" if i % 2 else "script", 10.0 + i, f"10.0.1.{i}")
               for i in range(120)]
    await asyncio.gather(*(s.record(r) for s, r in zip(itertools.cycle((a, b)), records)))
    for n in range(7):
        sent = sum(1 for r in records if r.node == f"n{n}")
        kept, state = await b.events(f"n{n}"), await b.node(f"n{n}")
        assert len(kept) == min(sent, 10) and len(kept) + state.dropped == sent


async def test_signing_keys_are_shared_and_rotation_reaches_the_other(stores: list[StateStore],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = stores
    sa, sb = Signer(a.keyring()), Signer(b.keyring())
    query = dict(p.split("=") for p in sa.query("master-0", "/ipxe/master-0", 3600).split("&"))
    assert sb.check("master-0", "/ipxe/master-0", query["exp"], query["sig"])
    before = b.keyring().current
    await a.rotate_keys(600)
    deadline = time.monotonic() + 4 * pgstate.KEYS_POLL + 5
    while sb.state(3600)[1] == before:  # the other replica picks the new key up by itself
        assert time.monotonic() < deadline, "rotation did not reach the other store"
        await asyncio.sleep(0.1)  # poll interval, bounded by the deadline above
    assert sb.state(3600)[1] == sa.state(3600)[1] != before
    # the old key is still accepted during the grace period, by both
    assert sb.check("master-0", "/ipxe/master-0", query["exp"], query["sig"])
    assert sa.check("master-0", "/ipxe/master-0", query["exp"], query["sig"])


async def test_boot_once_and_reinstall_hold_whichever_service_answers(backend) -> None:
    """Replica B serves the stub; replica A's next script boots the disk, although A holds the node in
    memory and wrote its repeats behind; a reinstall through either store makes both install again."""
    a, b = service(backend()), service(backend())
    await a.runtime.start()
    await b.runtime.start()
    try:
        install = await a.script("master-0", client="10.0.0.5", record=True)
        assert "coreos.inst.install_dev=/dev/sda" in install
        for _ in range(3):  # repeats: A answers them from what it holds, and writes them behind
            assert await a.script("master-0", client="10.0.0.5", record=True) == install
        await b.stub("master-0", client="10.0.0.5", record=True)
        localboot = await a.script("master-0", client="10.0.0.5", record=True)
        assert "kernel " not in localboot and localboot.rstrip().endswith("exit 1")
        await b.record("master-0", "reinstall")
        assert await a.script("master-0", client="10.0.0.5", record=True) == install
        assert (await b.history("master-0"))[0].stage == "ipxe"
    finally:
        await a.runtime.close()
        await b.runtime.close()


async def test_repeats_are_written_behind_and_lose_nothing_on_close(backend) -> None:
    """A repeat of a node's newest row answers before it is committed; it is merged in memory with the
    repeats that follow, committed with the next write-through event or the next window, and on close
    (SIGTERM) whatever is still queued is committed: every event is counted once, in its row."""
    a, b = service(backend()), service(backend())
    await a.runtime.start()
    await b.runtime.start()
    try:
        await a.script("master-0", client="10.0.0.5", record=True)  # a new row: committed before the answer
        for _ in range(5):
            await a.script("master-0", client="10.0.0.5", record=True)
        assert [(e.event, e.count) for e in await b.runtime.state.events("master-0")] == [("script", 1)]  # not yet
        await a.stub("master-0", client="10.0.0.5", record=True)  # write-through: commits the queued repeats before it
        assert [(e.event, e.count) for e in await b.runtime.state.events("master-0")] == [("script", 6), ("stub", 1)]
        for _ in range(4):
            await a.script("master-0", client="10.0.0.5", record=True)  # localboot: one new row, then repeats
        await b.script("master-0", client="10.0.0.5", record=True)  # another replica's repeat of the same row
        await b.runtime.close()
        await a.runtime.close()  # commits what is queued
        c = service(backend())
        await c.runtime.start()
        try:
            assert [(e.event, e.count) for e in await c.runtime.state.events("master-0")] == [
                ("script", 6), ("stub", 1), ("localboot", 5)]
        finally:
            await c.runtime.close()
    finally:
        await a.runtime.close()
        await b.runtime.close()


async def test_a_write_behind_repeat_counts_into_the_row_it_repeated(stores: list[StateStore]) -> None:
    """A repeat read against the node's newest row counts into that row even when another process
    added a newer row before the repeat was committed (the history reads as if written through)."""
    a, b = stores
    await a.record(rec("master-0", "script", 1.0, "10.0.0.5"))
    current = await a.current("master-0")
    assert await a.record(rec("master-0", "script", 2.0, "10.0.0.5"), current) == "ipxe"  # behind
    await b.record(rec("master-0", "kernel-requested", 3.0, "10.0.0.5"))
    await a.flush()
    assert [(e.event, e.count, e.last_at) for e in await b.events("master-0")] == [
        ("script", 2, 2.0), ("kernel-requested", 1, 3.0)]
    assert (await b.node("master-0")).stage == "kernel"


async def test_a_repeat_is_counted_into_its_queued_record_only_by_an_equal_key(stores: list[StateStore]) -> None:
    """What a script request counts without making a record (issue 43): one more into the node's
    write-behind record queued for an equal key, never an older one, never across a write-through event."""
    a, b = stores
    await a.record(rec("master-0", "script", 1.0, "10.0.0.5"))
    current = await a.current("master-0")
    key = repeat_key(current, "master-0", "script", "10.0.0.5", None, "install", True)
    assert not a.count_again(key, 2.0)  # nothing queued behind yet
    assert await a.record(rec("master-0", "script", 2.0, "10.0.0.5"), current) == "ipxe"  # behind
    assert not a.count_again(repeat_key(current, "master-0", "script", "10.0.0.6", None, "install", True), 3.0)
    assert not a.count_again(key, 1.5)  # older than the last one counted
    assert a.count_again(key, 3.0) and a.count_again(key, 4.0)
    await a.record(rec("master-0", "kernel-requested", 5.0, "10.0.0.5"))  # write-through: the repeats end
    assert not a.count_again(key, 6.0)
    await a.flush()
    assert [(e.event, e.count, e.last_at) for e in await b.events("master-0")] == [
        ("script", 4, 4.0), ("kernel-requested", 1, 5.0)]


async def test_a_boot_starts_at_its_first_script_as_each_store_reads_it(stores: list[StateStore]) -> None:
    """What the boot-duration metric measures from (sqlite reads only the latest boot's rows, issue 40)."""
    a, b = stores
    assert await b.boot_started("master-0") is None
    for at, event in [(1.0, "script"), (2.0, "stub"), (3.0, "checkin"),  # an earlier boot
                      (10.0, "script"), (11.0, "kernel-failed"), (12.0, "script"), (13.0, "stub"), (14.0, "config")]:
        await a.record(rec("master-0", event, at, "10.0.0.5"))
    assert await b.boot_started("master-0") == 10.0
    assert boot_started(await b.events("master-0")) == 10.0


async def test_device_records_are_shared_and_read_with_the_node_row(stores: list[StateStore]) -> None:
    """A device recorded through one store (one replica's config, or one process) is what the other
    reads, alone and with the node's row (the script path); a node may have a device and no events."""
    a, b = stores
    device = {"provider": "equinix", "id": "d-1", "state": "queued", "ip_addresses": [{"address": "10.0.0.5"}]}
    assert (await b.current("master-0")).device is None
    await a.set_device("master-0", device)
    assert await b.device("master-0") == device
    current = await b.current("master-0")
    assert (current.stage, current.device) == ("new", device)
    await b.record(rec("master-0", "script", 100.0, "10.0.0.5"))
    current = await a.current("master-0")
    assert (current.stage, current.device) == ("ipxe", device)
    await b.set_device("master-0", {**device, "state": "active"})
    assert (await a.current("master-0")).device == {**device, "state": "active"}
    assert await a.devices(["master-0", "master-1"]) == {"master-0": {**device, "state": "active"}}

    # add_devices (what `db migrate` uses) keeps a record already there, in one transaction
    assert await b.add_devices({"master-0": {"id": "old"}, "master-1": {"id": "r-1"}}) == ["master-1"]
    assert await a.devices() == {"master-0": {**device, "state": "active"}, "master-1": {"id": "r-1"}}
    assert await a.clear_device("master-0") is True
    assert await b.clear_device("master-0") is False
    assert (await b.current("master-0")).device is None and await b.device("master-0") is None
    assert (await b.current("master-0")).stage == "ipxe"  # the timeline is untouched


# -- PostgreSQL only -------------------------------------------------------------------------------


class RoundTrips:
    """A TCP relay on 127.0.0.1 between bootserver and PostgreSQL that counts round trips: each burst
    of bytes from the server that follows bytes from the client is one (the client sent, then waited
    for the answer). PostgreSQL sends results only at a Sync, a Flush or a simple query, so a pipeline
    is one burst however many statements it holds."""

    def __init__(self, port: int) -> None:
        self.upstream_port = port
        self.count = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> RoundTrips:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        last = ["client"]

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, side: str) -> None:
            try:
                while data := await src.read(65536):
                    if side == "server" and last[0] == "client":
                        self.count += 1
                    last[0] = side
                    dst.write(data)
                    await dst.drain()
            finally:
                dst.close()

        for t in (asyncio.create_task(pump(reader, up_writer, "client")),
                  asyncio.create_task(pump(up_reader, writer, "server"))):
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)


#: An Equinix Metal layer3 device record as `provision` stores it (network: provider builds bond0 from it).
EQUINIX_DEVICE = {
    "provider": "equinix", "id": "d-1", "state": "active",
    "ip_addresses": [{"address": "147.75.0.10", "address_family": 4, "cidr": 31, "gateway": "147.75.0.11",
                      "public": True}],
    "network_ports": [{"type": "NetworkBondPort", "name": "bond0", "network_type": "layer3"},
                      {"type": "NetworkPort", "name": "eth0", "data": {"mac": "b8:ce:f6:00:0a:00"},
                       "bond": {"name": "bond0"}},
                      {"type": "NetworkPort", "name": "eth1", "data": {"mac": "b8:ce:f6:00:0a:01"},
                       "bond": {"name": "bond0"}}],
}

#: docs/design.md ("Replicas"): round trips to PostgreSQL of a script request before its answer (the
#: node's row and newest history row in one statement), and of one batch of events, whatever its size.
ROUND_TRIPS_PER_SCRIPT = 1
ROUND_TRIPS_PER_BATCH = 2


@needs_pg
async def test_round_trips_of_a_script_request_and_of_a_batch(pg: PgCluster, tmp_path: Path, reference: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pgstate, "KEYS_POLL", 3600.0)  # no key poll in the middle of the count
    # nor a write-behind batch whose 0.25 s window ends in the middle of the 60 repeats on a busy machine:
    # the repeats are committed by the drain below, as one batch
    monkeypatch.setattr(Batches, "WINDOW", 3600.0)
    url = pg.create_database(f"t{next(db_names)}")
    async with RoundTrips(pg.port) as relay:
        nodes: dict[str, Any] = {f"n{i}": {"profile": "master"} for i in range(20)}
        nodes["p0"] = {"profile": "master", "network": "provider"}
        svc = service(make_config(tmp_path, url.replace(f":{pg.port}/", f":{relay.port}/"),
                                      nodes=nodes))
        await svc.runtime.start()
        try:
            relay.count = 0
            await svc.script("n0", client="10.0.0.5", record=True)  # a new row: read, then its batch before the answer
            assert relay.count == ROUND_TRIPS_PER_SCRIPT + ROUND_TRIPS_PER_BATCH
            for i in range(1, 20):
                await svc.script(f"n{i}", client="10.0.0.5", record=True)
            relay.count = 0
            for _ in range(3):
                for i in range(20):  # 60 repeats: one read each, written behind
                    await svc.script(f"n{i}", client="10.0.0.5", record=True)
            assert relay.count == 60 * ROUND_TRIPS_PER_SCRIPT
            await svc.runtime.drain()  # the 60 repeats of 20 nodes: one batch
            assert relay.count == 60 * ROUND_TRIPS_PER_SCRIPT + ROUND_TRIPS_PER_BATCH
            assert [(e.event, e.count) for e in await svc.runtime.state.events("n7")] == [("script", 4)]

            # network: provider: the device record comes with the node's row, no round trip of its own
            await svc.runtime.state.set_device("p0", EQUINIX_DEVICE)
            await svc.script("p0", client="10.0.0.6", record=True)
            relay.count = 0
            for _ in range(5):
                assert "bond=bond0:" in await svc.script("p0", client="10.0.0.6", record=True)
            assert relay.count == 5 * ROUND_TRIPS_PER_SCRIPT
        finally:
            await svc.runtime.close()


@needs_pg
async def test_replicas_starting_at_once_migrate_once(pg: PgCluster, tmp_path: Path, reference: Path) -> None:
    url = pg.create_database(f"t{next(db_names)}")
    stores = [open_store(make_config(tmp_path, url)) for _ in range(4)]
    try:
        results = await asyncio.gather(*(s.migrate() for s in stores))
        n = len(pgstate.MIGRATIONS)
        assert sorted(results) == [(0, n), (n, n), (n, n), (n, n)]
        await asyncio.gather(*(s.start() for s in stores))
        assert len({s.keyring().current for s in stores}) == 1  # one first key, not four
    finally:
        for s in stores:
            await s.close()


@needs_pg
async def test_a_newer_schema_is_refused(pg: PgCluster, tmp_path: Path, reference: Path) -> None:
    import psycopg

    url = pg.create_database(f"t{next(db_names)}")
    store = open_store(make_config(tmp_path, url))
    await store.migrate()
    await store.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO bootserver_schema (version) VALUES (99)")
    store = open_store(make_config(tmp_path, url))
    with pytest.raises(StateStoreError, match=rf"schema version 99 is newer than this bootserver knows "
                                              rf"\({len(pgstate.MIGRATIONS)}\)"):
        await store.start()
    await store.close()


@needs_pg
async def test_a_schema_3_database_keeps_its_discovered_machines_and_gains_their_addresses(
        pg: PgCluster, tmp_path: Path) -> None:
    """The migration that keeps every address that reported a MAC (issue 52): a record of before stands
    for its last address; a report from another address is then a conflict."""
    import psycopg

    from bootserver.discovery import Discovered

    url = pg.create_database(f"t{next(db_names)}")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE bootserver_schema (version INTEGER NOT NULL)")
        for version, sql in enumerate(pgstate.MIGRATIONS[:3], 1):
            conn.execute(sql.encode())
            conn.execute("INSERT INTO bootserver_schema (version) VALUES (%s)", (version,))
        conn.execute("INSERT INTO discovered (mac, uuid, facts, address, first_seen, last_seen) VALUES "
                     "('52:54:00:aa:bb:01', NULL, '{\"serial\": \"S1\"}', '10.0.0.5', 100, 100)")
    store = open_store(make_config(tmp_path, url))
    await store.start()
    try:
        [d] = await store.discovered()
        assert (d.facts, dict(d.addresses), d.conflict) == ({"serial": "S1"}, {"10.0.0.5": 100.0}, False)
        d = await store.discover(Discovered("52:54:00:aa:bb:01", None, {}, "10.0.0.66", 110.0, 110.0), keep=10)
        assert d.conflict and await store.discovered() == [d] and d.facts == {"serial": "S1"}
    finally:
        await store.close()


@needs_pg
async def test_an_unreachable_database_is_one_line_without_password(tmp_path: Path, reference: Path) -> None:
    from support.helpers import free_port

    (tmp_path / "pw").write_text("s3cr3t\n")
    config = make_config(tmp_path,
                         {"url": f"postgresql://bs@127.0.0.1:{free_port()}/bs", "password_file": "pw"})
    store = open_store(config)
    with pytest.raises(StateStoreError) as e:
        await store.start()
    await store.close()
    assert str(e.value).startswith("postgresql://bs@127.0.0.1:") and "cannot connect" in str(e.value)
    assert "\n" not in str(e.value) and "s3cr3t" not in str(e.value)


@needs_pg
async def test_losing_the_database_refuses_then_recovers_by_itself(tmp_path: Path, reference: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = PgCluster()
    cluster.start()
    try:
        url = cluster.create_database("bs")
        svc = service(make_config(tmp_path, url))
        await svc.runtime.start()
        try:
            await svc.stub("master-0", client="10.0.0.5", record=True)
            cluster.stop()
            with pytest.raises(UnavailableError, match="state store postgresql://"):
                await svc.script("master-0", client="10.0.0.5", record=True)  # never a guess: not the install script
            with pytest.raises(UnavailableError):
                await svc.stub("master-1", client="10.0.0.6", record=True)
            assert await svc.runtime.state.ready() is not None
            key = svc.runtime.state.keyring().current  # the keys in hand stay
            cluster.start()
            deadline = time.monotonic() + 30
            while True:
                try:
                    script = await svc.script("master-0", client="10.0.0.5", record=True)
                    break
                except UnavailableError:
                    assert time.monotonic() < deadline, "did not recover"
                    await asyncio.sleep(0.2)  # retry interval of a client, bounded by the deadline
            assert "kernel " not in script  # boot-once survived the restart
            assert await svc.runtime.state.ready() is None and svc.runtime.state.keyring().current == key
            assert [e.event for e in await svc.runtime.state.events("master-0")] == ["stub", "localboot"]
        finally:
            await svc.runtime.close()
    finally:
        cluster.destroy()


async def test_db_migrate_command(backend, tmp_path: Path) -> None:
    """``bootserver db migrate`` creates the schema, then finds it up to date; a second store opens it."""
    from support.helpers import run_cli, write_config

    config = backend()
    doc: dict[str, Any] = {"state_dir": str(config.state_dir), "cache_dir": str(config.cache_dir)}
    if config.state_store is not None:
        doc["state_store"] = config.state_store.url
    path = write_config(tmp_path / "db.yaml", doc)
    rc, out, err = await run_cli("db", "migrate", "--config", str(path))
    assert rc == 0, err
    name = str(config.state_dir / "timeline.sqlite3") if config.state_store is None else \
        config.state_store.url
    version = SCHEMA_VERSION if config.state_store is None else len(pgstate.MIGRATIONS)
    nothing = f"{config.state_dir / 'nodes'}: no device record files, nothing to move\n"
    assert out == f"{name}: schema at version {version} (was 0)\n{nothing}"
    rc, out, err = await run_cli("db", "migrate", "--config", str(path))
    assert rc == 0 and out == f"{name}: schema at version {version} (up to date)\n{nothing}"

    # the device record files of an older version: moved in once; a record already in the store wins
    folder = config.state_dir / "nodes"
    folder.mkdir(parents=True)
    for node in ("master-0", "master-1"):
        (folder / f"{node}.json").write_text(json.dumps({"node": node, "device": {"id": f"old-{node}"}}))
    store = open_store(config)
    await store.start()
    try:
        await store.set_device("master-1", {"id": "new"})
        rc, out, err = await run_cli("db", "migrate", "--config", str(path))
        assert rc == 0, err
        assert out.splitlines()[1:] == [
            f"{folder}/master-0.json: device record of node master-0 moved into {name} "
            "(file kept as master-0.json.migrated)",
            f"{folder}/master-1.json: node master-1 already has a device record in {name}, kept that one "
            "(file kept as master-1.json.migrated)"]
        assert await store.devices() == {"master-0": {"id": "old-master-0"}, "master-1": {"id": "new"}}
    finally:
        await store.close()
    rc, out, err = await run_cli("db", "migrate", "--config", str(path))
    assert rc == 0 and out == f"{name}: schema at version {version} (up to date)\n{nothing}"


async def test_node_rows_carry_the_newest_rows_client_address(stores: list[StateStore]) -> None:
    """``nodes()``/``node()`` give each node's newest history row's client address (the page's and
    ``GET /nodes``' last client), in both stores; a node without events has none."""
    a, b = stores
    await a.record(rec("master-0", "script", 1.0, "10.0.0.5"))
    await a.record(rec("master-0", "stub", 2.0, "10.0.0.6"))
    states = {s.node: s for s in await b.nodes(["master-0", "master-1"])}
    assert (states["master-0"].stage, states["master-0"].last_ip) == ("installing", "10.0.0.6")
    assert states["master-1"].last_ip is None
    assert (await b.node("master-0")).last_ip == "10.0.0.6"
