"""bootserver.intake.DiscoveryIntake over the in-memory state store: the reports of machines no node
matches, recorded once per address and wait; a configured node's report is never recorded."""

from __future__ import annotations

from pathlib import Path

from support.configs import config_doc, load
from support.memory_store import MemoryStore
from support.signing import fixed_signer

from bootserver.intake import DiscoveryIntake
from bootserver.runtime import Runtime

NODE_MAC, OTHER = "52:54:00:12:34:56", "52:54:00:00:00:07"


async def test_reports_of_unknown_machines_are_recorded_once_per_address_and_wait(tmp_path: Path) -> None:
    config = load(config_doc(nodes={"master-0": {"profile": "master", "mac": NODE_MAC}},
                             server={"discovery": {"enabled": True, "per_address": 60}}), tmp_path)
    store, told = MemoryStore(), []
    runtime = Runtime(config, fixed_signer(), state=store)
    runtime.observe(told.append)
    intake = DiscoveryIntake(runtime)
    assert not await intake.report(config, {"mac": NODE_MAC}, "10.0.0.5")  # a node: answered alike, not kept
    assert await intake.report(config, {"mac": OTHER, "uuid": "4c4c4544-0000-0000-0000-000000000009"},
                               "10.0.0.6", at=100.0)
    assert not await intake.report(config, {"mac": OTHER}, "10.0.0.6")  # within per_address of that address
    [machine] = await store.discovered()
    assert (machine.mac, machine.uuid, machine.address) == (OTHER, "4c4c4544-0000-0000-0000-000000000009",
                                                            "10.0.0.6")
    assert [(r.node, r.event) for r in told] == [(OTHER, "discovered")]
    script = intake.script(config, OTHER)
    assert script.startswith("#!ipxe") and OTHER in script
