"""bootserver.desk.ArtifactDesk over the in-memory state store: what an artifact request is, and which node
it is attributed to (the node whose script was last served to that address)."""

from __future__ import annotations

from pathlib import Path

from support.configs import config_doc, load
from support.memory_store import MemoryStore
from support.services import service
from support.signing import fixed_signer


async def test_an_artifact_request_is_attributed_to_the_node_its_address_booted(tmp_path: Path) -> None:
    store = MemoryStore()
    svc = service(load(config_doc(), tmp_path), fixed_signer(), state=store)
    await svc.script("master-0", client="10.0.0.5", record=True)  # loads the metadata, records the address
    release = svc.desk.catalog.cached("rhcos-4.16").releases["x86_64"]
    kernel = (release.stream, release.arch, release.version, release.kernel.filename)
    assert svc.desk.kind(kernel) == "kernel"
    assert svc.desk.kind((release.stream, release.arch, "0.0", release.kernel.filename)) == "other"
    kind, node = await svc.desk.requested(kernel, "10.0.0.5")
    assert (kind, node) == ("kernel", svc.node("master-0"))
    assert (await store.node("master-0")).stage == "kernel"
    assert await svc.desk.requested(kernel, "10.0.0.6") == ("kernel", None)  # no script served there
    svc.desk.answered(svc.node("master-0"), "kernel", "10.0.0.5", status=200, nbytes=10, complete=True)
    await svc.runtime.drain()
    assert [r.event for r in store.records] == ["script", "kernel-requested", "kernel-completed"]
    assert store.records[-1].detail == {"bytes": 10, "status": 200}
