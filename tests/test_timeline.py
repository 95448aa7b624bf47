"""The node timeline on its own: stage model, persistence, attribution of shared artifact URLs."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

from bootserver.discovery import Discovered
from bootserver.fleet import FleetNode
from bootserver.nodes_view import format_events, format_table
from bootserver.state.sqlite import GroupCommit
from bootserver.state.sqlite_timeline import SCHEMA_VERSION, Timeline, TimelineDamagedError
from bootserver.timeline import (
    ATTRIBUTION_WINDOW,
    INSTALLED_STAGES,
    Record,
    artifact_event,
    next_stage,
)

INSTALL = ["script", "kernel-requested", "kernel-completed", "initramfs-requested", "initramfs-completed",
           "rootfs-requested", "rootfs-completed", "stub", "localboot", "config"]


@pytest.mark.parametrize("mode,events,stages", [
    ("install", INSTALL, ["ipxe", "kernel", "kernel", "initramfs", "initramfs", "rootfs", "rootfs",
                          "installing", "installing", "installed"]),
    ("live", [*INSTALL[:8], "config"], ["ipxe", "kernel", "kernel", "initramfs", "initramfs", "rootfs",
                                        "rootfs", "ignition", "running"]),
    ("install", ["stub", "config", "rootfs-requested", "reinstall", "script"],
     ["installing", "installed", "installed", "reinstall", "ipxe"]),
])
def test_stage_model(mode: str, events: list[str], stages: list[str]) -> None:
    stage, seen = "new", []
    for event in events:
        stage = next_stage(stage, event, mode)
        seen.append(stage)
    assert seen == stages


#: The stage order (docs/design.md, "Stage order"): (stage, event, mode, stage after), for every stage a
#: finished or later round can be in and each event that must not take it back, then what starts a round.
STAGE_ORDER = [
    *((stage, event, mode, stage) for stage, mode in
      [("up", "install"), ("up", "live"), ("installed", "install"), ("running", "live"),
       ("unconfirmed", "install"), ("installing", "install"), ("ignition", "live")]
      for event in ("stub", "config", "localboot", "kernel-requested", "initramfs-completed", "rootfs-failed")
      if not (event == "config" and stage in ("installing", "ignition"))),
    ("installing", "config", "install", "installed"), ("ignition", "config", "live", "running"),
    ("rootfs", "kernel-requested", "install", "rootfs"), ("initramfs", "kernel-completed", "live", "initramfs"),
    ("kernel", "initramfs-requested", "install", "initramfs"), ("new", "stub", "install", "installing"),
    ("reinstall", "stub", "install", "installing"), ("new", "config", "live", "running"),
    # a new round: a boot script served (a network boot), or `nodes reinstall`
    ("up", "script", "live", "ipxe"), ("installed", "script", "install", "ipxe"),
    ("up", "reinstall", "install", "reinstall"), ("running", "reinstall", "live", "reinstall"),
]


@pytest.mark.parametrize(("stage", "event", "mode", "after"), STAGE_ORDER)
def test_stages_never_go_back_but_for_a_new_round(stage: str, event: str, mode: str, after: str) -> None:
    assert next_stage(stage, event, mode) == after


def test_unknown_event_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown timeline event"):
        next_stage("new", "bogus", "install")


def test_events_and_stage_survive_reopening(tmp_path: Path) -> None:
    tl = Timeline(tmp_path / "state")
    assert tl.stage("m0") == "new"
    tl.record("m0", "script", mode="install", ip="10.0.0.5", detail={"mode": "install"}, at=100.0)
    tl.record("m0", "kernel-completed", mode="install", ip="10.0.0.5", detail={"bytes": 42}, at=101.0)
    tl.record("m0", "stub", mode="install", at=160.0)
    tl.close()

    tl = Timeline(tmp_path / "state")
    assert tl.stage("m0") == "installing"
    events = tl.events("m0")
    assert [(e.event, e.at) for e in events] == [("script", 100.0), ("kernel-completed", 101.0), ("stub", 160.0)]
    assert events[1].detail == {"bytes": 42}
    assert [e.event for e in tl.events("m0", limit=1)] == ["stub"]
    (state,) = tl.nodes()
    assert (state.stage, state.stage_at, state.last_event, state.last_at) == ("installing", 160.0, "stub", 160.0)
    # localboot does not change the stage, nor when it was entered
    tl.record("m0", "localboot", mode="install", at=200.0)
    (state,) = tl.nodes()
    assert (state.stage, state.stage_at, state.last_event) == ("installing", 160.0, "localboot")
    # wal mode, so a reader and a writer in two processes do not block each other
    assert tl._db().execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.parametrize("nodes", [1, 63, 64, 65, 130])
def test_a_batch_of_any_size_writes_every_row_in_order(tmp_path: Path, nodes: int) -> None:
    """One batch's inserts and node rows go many ``VALUES`` rows per statement (``sqlite_batch``): every
    record of a batch of any size is read back, in order, with its stage, new nodes and known ones alike."""
    tl = Timeline(tmp_path / "state")
    names = [f"m{i:03d}" for i in range(nodes)]
    tl.record_many([Record(n, "script", "install", 100.0, f"10.0.{i // 250}.{i % 250}") for i, n in enumerate(names)])
    batch = [Record(n, event, "install", 101.0 + k, None, {"bytes": i} if event == "kernel-completed" else None)
             for k, event in enumerate(("kernel-requested", "kernel-completed", "stub")) for i, n in enumerate(names)]
    assert tl.record_many(batch) == ["kernel"] * nodes * 2 + ["installing"] * nodes
    for i, n in enumerate(names):
        events = tl.events(n)
        assert [(e.event, e.at, e.ip) for e in events] == [
            ("script", 100.0, f"10.0.{i // 250}.{i % 250}"), ("kernel-requested", 101.0, None),
            ("kernel-completed", 102.0, None), ("stub", 103.0, None)]
        assert events[2].detail == {"bytes": i}
    assert [(s.node, s.stage, s.stage_at, s.last_event) for s in tl.nodes()] == [
        (n, "installing", 103.0, "stub") for n in names]


def test_a_late_event_does_not_undo_a_newer_stage(tmp_path: Path) -> None:
    """Another worker process may commit a node's ``script`` after this one committed its ``stub``."""
    tl = Timeline(tmp_path)
    assert tl.record("m0", "stub", mode="install", at=200.0) == "installing"
    assert tl.record("m0", "script", mode="install", at=150.0) == "installing"
    assert [e.event for e in tl.events("m0")] == ["script", "stub"]
    assert tl.record("m0", "script", mode="install", at=250.0) == "ipxe"  # a new boot still does


async def test_group_commit_keeps_order_and_fails_a_whole_batch(tmp_path: Path) -> None:
    tl = Timeline(tmp_path)
    writes = GroupCommit(tl)
    try:
        stages = await asyncio.gather(*(writes.record(Record("m0", event, "install", at))
                                        for event, at in [("script", 1.0), ("stub", 2.0), ("localboot", 3.0)]))
        assert stages == ["ipxe", "installing", "installing"]
        assert [e.event for e in tl.events("m0")] == ["script", "stub", "localboot"]

        with sqlite3.connect(tl.path) as other:  # breaks every write that follows
            other.execute("DROP TABLE nodes")
        results = await asyncio.gather(*(writes.record(Record(n, "script", "install", 4.0)) for n in ("m0", "m1")),
                                       return_exceptions=True)
        assert all(isinstance(r, sqlite3.OperationalError) for r in results)
        assert [e.event for e in tl.events("m0")] == ["script", "stub", "localboot"]
        assert tl.events("m1") == []
    finally:
        writes.close()
        tl.close()


def test_record_refuses_an_unknown_event() -> None:
    with pytest.raises(ValueError, match="unknown timeline event 'bogus'"):
        Record("m0", "bogus", "install", 1.0)


def test_attribution_by_client_ip_within_window(tmp_path: Path) -> None:
    tl = Timeline(tmp_path)
    tl.record("m0", "script", mode="install", ip="10.0.0.5", at=1000.0)
    tl.record("m1", "script", mode="install", ip="10.0.0.6", at=1001.0)
    assert tl.attribute("10.0.0.5", now=1002.0) == "m0"
    assert tl.attribute("10.0.0.6", now=1002.0) == "m1"
    assert tl.attribute("10.0.0.7", now=1002.0) is None
    assert tl.attribute("10.0.0.5", now=1000.0 + ATTRIBUTION_WINDOW + 1) is None
    # the same address booting another node later (a reused IP) goes to the later node
    tl.record("m2", "script", mode="install", ip="10.0.0.5", at=1500.0)
    assert tl.attribute("10.0.0.5", now=1501.0) == "m2"


def test_table_lists_configured_nodes_without_events(tmp_path: Path) -> None:
    tl = Timeline(tmp_path)
    tl.record("m0", "config", mode="install", at=1000.0)
    text = format_table([FleetNode(st, {"m0": "master", "w0": "worker"}[st.node], None,
                                   source={"m0": "file:/etc/bootserver.yaml", "w0": "store"}[st.node])
                         for st in tl.nodes(["m0", "w0"])], 1000.0 + 300)
    lines = text.splitlines()
    assert lines[0].split() == ["NODE", "PROFILE", "STAGE", "SINCE", "STALLED", "LAST", "EVENT", "WHEN", "SOURCE"]
    assert lines[1].split() == ["m0", "master", "installed", "5m", "ago", "-", "config", "5m", "ago",
                                "file:/etc/bootserver.yaml"]
    assert lines[2].split() == ["w0", "worker", "new", "-", "-", "-", "-", "store"]
    # past its deadline by 3 minutes
    text = format_table([FleetNode(st, "master", 1000.0 + 120) for st in tl.nodes(["m0"])], 1000.0 + 300)
    assert text.splitlines()[1].split() == ["m0", "master", "installed", "5m", "ago", "stalled", "3m",
                                            "config", "5m", "ago", "-"]


async def test_group_commit_checkpoints_the_wal_off_the_commit_path(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Commits leave pages in the WAL; a separate checkpoint copies them into the database file."""
    tl = Timeline(tmp_path)
    writes = GroupCommit(tl)
    monkeypatch.setattr(Timeline, "CHECKPOINT_EVERY", 50)
    detail = {"pad": "x" * 2000}
    try:
        await writes.record(Record("m0", "script", "install", 0.0, detail=detail))
        assert tl._db().execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        empty = tl.path.stat().st_size
        await asyncio.gather(*(writes.record(Record(f"m{i}", "script", "install", float(i), detail=detail))
                               for i in range(1, 40)))
        assert tl.path.stat().st_size == empty  # 40 records: no checkpoint yet, all in the WAL
        await asyncio.gather(*(writes.record(Record(f"m{i}", "script", "install", float(i), detail=detail))
                               for i in range(40, 80)))
        writes.close()  # waits for the checkpoint started after the 50th record
        assert tl.path.stat().st_size > empty + 40 * 2000
        assert len(tl.nodes()) == 80
    finally:
        writes.close()
        tl.close()


def test_every_write_counts_toward_the_checkpoint_not_only_history_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Discovery reports and device records alone (no history record) get the WAL checkpointed."""
    tl = Timeline(tmp_path)
    tl.auto_checkpoint = False
    monkeypatch.setattr(Timeline, "CHECKPOINT_EVERY", 50)
    try:
        tl.write_devices({"m0": {"id": "d-0"}})
        empty = tl.path.stat().st_size
        for i in range(40):
            tl.discover(Discovered(f"52:54:00:00:02:{i:02x}", None, {"serial": "x" * 100}, "10.0.0.9",
                                   float(i), float(i)), keep=1000)
        tl.wait_checkpoint()
        assert tl.path.stat().st_size == empty  # 41 writes: all in the WAL
        tl.write_devices({f"m{i}": {"id": "d" * 1000} for i in range(10)})
        tl.wait_checkpoint()
        assert tl.path.stat().st_size > empty + 10 * 1000
    finally:
        tl.close()


def test_a_write_waits_for_another_process_write_then_gives_up(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``serve --workers`` processes and ``nodes reinstall`` share the database: a writer waits in short
    steps while another holds the write lock, and fails after ``WRITE_WAIT`` seconds."""
    import threading

    import bootserver.state.sqlite_timeline as timeline_mod

    tl = Timeline(tmp_path)
    tl.record("m0", "script", mode="install", at=1.0)
    other = sqlite3.connect(tl.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process is writing
    waiting = threading.Event()
    real_sleep = timeline_mod.time.sleep

    def sleep(seconds: float) -> None:
        waiting.set()
        real_sleep(seconds)

    monkeypatch.setattr(timeline_mod.time, "sleep", sleep)
    result: list[object] = []
    writer = threading.Thread(target=lambda: result.append(tl.record("m0", "stub", mode="install", at=2.0)))
    writer.start()
    assert waiting.wait(10)  # the writer found the lock taken and waits
    other.execute("COMMIT")
    writer.join(10)
    assert result == ["installing"]

    monkeypatch.setattr(Timeline, "WRITE_WAIT", 0.05)
    other.execute("BEGIN IMMEDIATE")
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        tl.record("m0", "config", mode="install", at=3.0)
    other.execute("ROLLBACK")
    assert tl.stage("m0") == "installing"
    other.close()
    tl.close()


def test_repeats_that_change_nothing_share_one_row(tmp_path: Path) -> None:
    """iPXE retrying its script, or a probe of a signed URL: one row with a count and the last time."""
    tl = Timeline(tmp_path)
    for at in (100.0, 101.0, 102.5):
        assert tl.record("m0", "script", mode="install", ip="10.0.0.5", detail={"release": "1"}, at=at) == "ipxe"
    tl.record("m0", "script", mode="install", ip="10.0.0.6", detail={"release": "1"}, at=103.0)  # another client
    tl.record("m0", "script", mode="install", ip="10.0.0.6", detail={"release": "2"}, at=104.0)  # another release
    tl.record("m0", "kernel-requested", mode="install", ip="10.0.0.6", at=105.0)
    tl.record("m0", "kernel-requested", mode="install", ip="10.0.0.6", at=106.0)  # same stage: coalesced
    tl.record("m0", "reinstall", mode="install", at=107.0)
    tl.record("m0", "reinstall", mode="install", at=108.0)
    tl.record("m0", "script", mode="install", ip="10.0.0.6", detail={"release": "2"}, at=109.0)  # a new boot
    rows = [(e.event, e.ip, e.count, e.at, e.last_at) for e in tl.events("m0")]
    assert rows == [("script", "10.0.0.5", 3, 100.0, 102.5), ("script", "10.0.0.6", 1, 103.0, 103.0),
                    ("script", "10.0.0.6", 1, 104.0, 104.0), ("kernel-requested", "10.0.0.6", 2, 105.0, 106.0),
                    ("reinstall", None, 2, 107.0, 108.0), ("script", "10.0.0.6", 1, 109.0, 109.0)]
    (state,) = tl.nodes()
    assert (state.stage, state.stage_at, state.last_event, state.last_at) == ("ipxe", 109.0, "script", 109.0)
    # attribution follows the last of the coalesced scripts, not the first
    tl.record("m1", "script", mode="install", ip="10.0.0.5", at=200.0)
    tl.record("m0", "script", mode="install", ip="10.0.0.5", detail={"release": "1"}, at=300.0)
    assert tl.attribute("10.0.0.5", now=301.0) == "m0"
    assert tl.events("m0")[0].as_dict()["count"] == 3


def test_a_stage_change_is_never_coalesced(tmp_path: Path) -> None:
    tl = Timeline(tmp_path)
    tl.record("m0", "stub", mode="install", at=1.0)
    tl.record("m0", "reinstall", mode="install", at=2.0)
    tl.record("m0", "stub", mode="install", at=3.0)  # installing again: a new row
    tl.record("m0", "stub", mode="install", at=4.0)  # the same again: coalesced
    assert [(e.event, e.count) for e in tl.events("m0")] == [("stub", 1), ("reinstall", 1), ("stub", 2)]


def test_history_is_bounded_per_node_and_says_what_it_dropped(tmp_path: Path) -> None:
    tl = Timeline(tmp_path, keep_events=10)
    for i in range(25):  # a boot loop: script, kernel, script, kernel, ... never coalesced
        tl.record("m0", "script" if i % 2 == 0 else "kernel-requested", mode="install", ip="10.0.0.5", at=float(i))
    tl.record("m1", "script", mode="install", at=0.5)
    events = tl.events("m0")
    assert [e.at for e in events] == [float(i) for i in range(15, 25)]
    assert tl.node("m0").dropped == 15 and tl.node("m1").dropped == 0
    assert len(tl.events("m1")) == 1
    text = format_events(events, tl.node("m0"), tl.keep_events)
    assert text.splitlines()[0] == "(15 older events dropped: timeline.keep_events keeps 10 per node)"
    assert len(text.splitlines()) == 11
    tl.close()
    assert Timeline(tmp_path, keep_events=10).node("m0").as_dict(30.0)["dropped_events"] == 15


def test_nodes_show_text_marks_coalesced_rows(tmp_path: Path) -> None:
    tl = Timeline(tmp_path)
    tl.record("m0", "localboot", mode="install", ip="10.0.0.5", detail={"stage": "installed"}, at=1000.0)
    tl.record("m0", "localboot", mode="install", ip="10.0.0.5", detail={"stage": "installed"}, at=4600.0)
    (line,) = format_events(tl.events("m0"), tl.node("m0"), tl.keep_events).splitlines()
    assert line.split()[2:5] == ["localboot", "10.0.0.5", "stage=installed"]
    last = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(4600.0))
    assert line.endswith(f"(2 times, last at {last})")


def test_a_schema_1_timeline_is_migrated_in_place(tmp_path: Path) -> None:
    """A state_dir written before coalescing keeps its history, stages and boot-once marks."""
    old = sqlite3.connect(tmp_path / Timeline.FILENAME)
    old.executescript("""
        CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, node TEXT NOT NULL, at REAL NOT NULL,
                             event TEXT NOT NULL, ip TEXT, detail TEXT);
        CREATE INDEX events_node ON events (node, at, id);
        CREATE INDEX events_script_ip ON events (ip, at) WHERE event = 'script';
        CREATE TABLE nodes (node TEXT PRIMARY KEY, stage TEXT NOT NULL, stage_at REAL NOT NULL,
                            last_event TEXT NOT NULL, last_at REAL NOT NULL);
        INSERT INTO events (node, at, event, ip, detail) VALUES
            ('m0', 1.0, 'script', '10.0.0.5', '{"release": "1"}'), ('m0', 2.0, 'stub', '10.0.0.5', NULL);
        INSERT INTO nodes VALUES ('m0', 'installing', 2.0, 'stub', 2.0);
    """)
    old.close()
    tl = Timeline(tmp_path, keep_events=10)
    assert tl.stage("m0") == "installing"
    assert tl.attribute("10.0.0.5", now=3.0) == "m0"
    assert [(e.event, e.count, e.last_at) for e in tl.events("m0")] == [("script", 1, 1.0), ("stub", 1, 2.0)]
    tl.record("m0", "stub", mode="install", ip="10.0.0.5", at=3.0)  # coalesces with the migrated row
    assert [(e.event, e.count) for e in tl.events("m0")] == [("script", 1), ("stub", 2)]
    for i in range(12):
        tl.record("m0", "script" if i % 2 else "reinstall", mode="install", at=10.0 + i)
    assert len(tl.events("m0")) == 10 and tl.node("m0").dropped == 4
    assert tl._db().execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    tl.write_devices({"m0": {"provider": "equinix", "id": "d-1"}})  # schema 3: device records
    assert tl.current("m0").device == {"provider": "equinix", "id": "d-1"}


def test_a_schema_2_timeline_gains_device_records_and_keeps_its_rows(tmp_path: Path) -> None:
    tl = Timeline(tmp_path, keep_events=10)
    tl.record("m0", "stub", mode="install", ip="10.0.0.5", at=2.0)
    db = tl._db()
    db.execute("DROP TABLE devices")
    db.execute("PRAGMA user_version = 2")
    tl.close()
    tl = Timeline(tmp_path, keep_events=10)
    assert tl.current("m0").stage == "installing" and tl.current("m0").device is None
    assert tl.write_devices({"m0": {"id": "d-1"}}) == ["m0"]
    assert tl.current("m0").device == {"id": "d-1"}
    assert tl._db().execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    tl.close()


def test_a_schema_4_timeline_keeps_its_discovered_machines_and_gains_their_addresses(tmp_path: Path) -> None:
    """Version 5 keeps every address that reported a MAC (issue 52); a record of before stands for its
    last address, and a report from another address is a conflict."""
    tl = Timeline(tmp_path)
    tl.discover(Discovered("52:54:00:aa:bb:01", None, {"serial": "S1"}, "10.0.0.5", 100.0, 100.0), keep=10)
    db = tl._db()
    db.execute("ALTER TABLE discovered DROP COLUMN addresses")
    db.execute("PRAGMA user_version = 4")
    tl.close()
    tl = Timeline(tmp_path)
    [d] = tl.discovered()
    assert (d.facts, dict(d.addresses), d.conflict) == ({"serial": "S1"}, {"10.0.0.5": 100.0}, False)
    d = tl.discover(Discovered("52:54:00:aa:bb:01", None, {}, "10.0.0.66", 110.0, 110.0), keep=10)
    assert d.conflict and tl.discovered() == [d] and d.facts == {"serial": "S1"}
    assert tl._db().execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    tl.close()


@pytest.mark.parametrize("damage", [b"this is not a database at all" * 200, None])
def test_a_damaged_timeline_is_refused_naming_the_file(tmp_path: Path, damage: bytes | None) -> None:
    tl = Timeline(tmp_path)
    for i in range(300):
        tl.record(f"m{i}", "script", mode="install", ip="10.0.0.5", detail={"pad": "x" * 200}, at=float(i))
    tl.close()
    Timeline(tmp_path).checkpoint()
    if damage is None:  # a torn write in the middle of the file: valid header, broken pages
        data = bytearray(tl.path.read_bytes())
        data[8192:16384] = b"\xff" * 8192
        tl.path.write_bytes(bytes(data))
    else:
        tl.path.write_bytes(damage)
    with pytest.raises(TimelineDamagedError) as e:
        Timeline(tmp_path).check()
    assert str(e.value).startswith(f"{tl.path}: the node timeline is damaged (")
    assert "move it aside" in str(e.value) and "\n" not in str(e.value)
    assert e.value.exit_code == 2


def test_a_sound_timeline_passes_the_check(tmp_path: Path) -> None:
    tl = Timeline(tmp_path / "new")
    tl.check()  # creates it
    tl.record("m0", "script", mode="install", at=1.0)
    tl.check()
    assert tl.stage("m0") == "ipxe"


@pytest.mark.parametrize("status,complete,event", [
    (200, True, "kernel-completed"), (200, False, "kernel-failed"), (206, True, "kernel-partial"),
    (206, False, "kernel-failed"), (304, True, "kernel-unchanged"), (404, True, "kernel-failed"),
    (503, True, "kernel-failed")])
def test_artifact_event_from_status(status: int, complete: bool, event: str) -> None:
    assert artifact_event("kernel", status, complete) == event


@pytest.mark.parametrize("mode", ["install", "live"])
def test_a_stub_without_real_config_is_unconfirmed_and_stays(mode: str) -> None:
    stage = next_stage("rootfs", "stub", mode, real_config=False)
    assert stage == "unconfirmed" and stage in INSTALLED_STAGES
    assert next_stage(stage, "rootfs-requested", mode) == "unconfirmed"
    assert next_stage(stage, "script", mode) == "ipxe"


async def test_write_behind_repeats_merge_and_survive_a_failed_batch(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Repeats queued behind merge into one record per node; a batch that fails (nothing written) keeps
    them for the next one, where they are counted once; a write-through record commits at once, after
    the repeats queued before it."""
    tl = Timeline(tmp_path)
    writes = GroupCommit(tl)
    failing = [True]
    commit = writes._commit

    async def flaky(records: list[Record]) -> list[str]:
        if failing[0]:
            failing[0] = False
            raise sqlite3.OperationalError("disk I/O error")
        return await commit(records)

    writes._commit = flaky  # the batch's database error, once
    try:
        for i in range(5):
            writes.record_behind(Record("m0", "script", "install", float(i), "10.0.0.5"))
        writes.record_behind(Record("m1", "script", "install", 1.0, "10.0.0.6"))
        with pytest.raises(sqlite3.OperationalError):
            await writes.record(Record("m2", "script", "install", 9.0))  # fails with its batch
        assert tl.events("m0") == []
        assert await writes.record(Record("m0", "stub", "install", 10.0, "10.0.0.5")) == "installing"
        assert [(e.event, e.count, e.at, e.last_at) for e in tl.events("m0")] == [
            ("script", 5, 0.0, 4.0), ("stub", 1, 10.0, 10.0)]
        assert [(e.event, e.count) for e in tl.events("m1")] == [("script", 1)]
        assert [r.getMessage() for r in caplog.records if r.name == "bootserver.timeline"] == [
            "node timeline: 6 repeated events wait for the next batch: disk I/O error",
            "node timeline: batches commit again"]
    finally:
        await writes.drained(closing=True)
        writes.close()
        tl.close()
