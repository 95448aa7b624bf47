"""The node timeline on its own: stage model, persistence, attribution of shared artifact URLs."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from bootserver.timeline import ATTRIBUTION_WINDOW, GroupCommit, Record, Timeline, format_table, next_stage

INSTALL = ["script", "kernel-requested", "kernel-completed", "initramfs-requested", "initramfs-completed",
           "rootfs-requested", "rootfs-completed", "stub", "localboot", "config"]


@pytest.mark.parametrize("mode,events,stages", [
    ("install", INSTALL, ["ipxe", "kernel", "kernel", "initramfs", "initramfs", "rootfs", "rootfs",
                          "installing", "installing", "installed"]),
    ("live", INSTALL[:8] + ["config"], ["ipxe", "kernel", "kernel", "initramfs", "initramfs", "rootfs",
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
    text = format_table(tl.nodes(["m0", "w0"]), 1000.0 + 300, {"m0": "master", "w0": "worker"})
    lines = text.splitlines()
    assert lines[0].split() == ["NODE", "PROFILE", "STAGE", "SINCE", "LAST", "EVENT", "WHEN"]
    assert lines[1].split() == ["m0", "master", "installed", "5m", "ago", "config", "5m", "ago"]
    assert lines[2].split() == ["w0", "worker", "new", "-", "-", "-"]


async def test_group_commit_checkpoints_the_wal_off_the_commit_path(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Commits leave pages in the WAL; a separate checkpoint copies them into the database file."""
    tl = Timeline(tmp_path)
    writes = GroupCommit(tl)
    monkeypatch.setattr(GroupCommit, "CHECKPOINT_EVERY", 50)
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


def test_a_write_waits_for_another_process_write_then_gives_up(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``serve --workers`` processes and ``nodes reinstall`` share the database: a writer waits in short
    steps while another holds the write lock, and fails after ``WRITE_WAIT`` seconds."""
    import threading
    import bootserver.timeline as timeline_mod

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
