"""bootserver.runtime.Runtime over the in-memory state store: a recorded event's new stage, what its
observers are told, the boot durations it reports. No server, no database."""

from __future__ import annotations

from pathlib import Path

from support.configs import config_doc, load
from support.memory_store import MemoryStore
from support.signing import fixed_signer

from bootserver.inventory import inventory
from bootserver.runtime import BootDurations, Runtime
from bootserver.timeline import DISCOVERED, Recorded


async def test_a_record_returns_the_new_stage_and_tells_every_observer(tmp_path: Path) -> None:
    config = load(config_doc(), tmp_path)
    store, told = MemoryStore(), []
    async with Runtime(config, fixed_signer(), state=store) as runtime:
        runtime.observe(told.append)
        node = inventory(config)["master-0"]
        assert await runtime.record(node, "script", ip="10.0.0.5", at=100.0) == "ipxe"
        assert await runtime.record(node, "stub", ip="10.0.0.5", at=110.0) == "installing"
        runtime.discovered("52:54:00:00:00:07", 120.0)
        await runtime.drain()
    assert store.started and store.closed
    assert [(r.node, r.event, r.stage) for r in told] == [
        ("master-0", "script", "ipxe"), ("master-0", "stub", "installing"),
        ("52:54:00:00:00:07", DISCOVERED, DISCOVERED)]
    assert [(r.event, r.mode, r.real_config) for r in store.records] == [("script", "install", True),
                                                                         ("stub", "install", True)]


async def test_boot_durations_count_from_the_boots_first_script(tmp_path: Path) -> None:
    config = load(config_doc(), tmp_path)
    store, done = MemoryStore(), []
    async with Runtime(config, fixed_signer(), state=store) as runtime:
        node = inventory(config)["master-0"]
        for event, at in (("script", 100.0), ("stub", 130.0), ("config", 400.0)):
            stage = await runtime.record(node, event, at=at)
        later = BootDurations(store, lambda stage, seconds: done.append((stage, seconds))).recorded(
            Recorded("master-0", "config", stage, "installing", 400.0))
        assert later is not None
        await later
    assert done == [("installed", 300.0)]
