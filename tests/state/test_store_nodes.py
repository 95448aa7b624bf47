"""The state store's nodes (issue 48) in both backends: generations, the revision and its change log,
preconditions, claims decided by the store's unique key (a race has one winner, the loser names it),
deletes; and the commands (``nodes apply``, ``delete``, ``export``, ``list``'s SOURCE) through a config
with no server running, a bad node refused in one line with nothing written."""

from __future__ import annotations

import asyncio
import io
import logging
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.helpers import write_config
from support.reloading import MAC, add_node, main_config

from bootserver.cli import main
from bootserver.config import load_config
from bootserver.discovery import Discovered
from bootserver.errors import (
    ChangesExpiredError,
    FileNodeError,
    NodeCheckError,
    NodeConflictError,
    PreconditionFailedError,
    UnknownStoreNodeError,
)
from bootserver.http.app import create_app
from bootserver.http.running import RUNNING
from bootserver.node_writes import Precondition, apply_nodes, delete_nodes
from bootserver.state import nodestore
from bootserver.state.backends import open_store
from bootserver.state.nodestore import NodeWrite


def _write(name: str, mac: str, **spec: Any) -> NodeWrite:
    return NodeWrite(name, {"profile": "master", "mac": [mac], **spec}, (("mac", mac), ("hostname", name)))


async def test_store_nodes_generations_revision_and_changes(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(backend())
    await store.start()
    try:
        assert await store.inventory_revision() == 0
        done = await store.apply_nodes([_write("web-1", "52:54:00:00:01:01"), _write("web-2", "52:54:00:00:01:02")])
        assert [(a.name, a.outcome, a.generation) for a in done] == [("web-1", "created", 1), ("web-2", "created", 1)]
        again = await store.apply_nodes([_write("web-1", "52:54:00:00:01:01"),
                                         _write("web-2", "52:54:00:00:01:02", selectable=True)])
        assert [(a.outcome, a.generation) for a in again] == [("unchanged", 1), ("updated", 2)]
        inventory = await store.inventory()
        assert inventory.revision == 3 == await store.inventory_revision()
        assert {n: (s.generation, dict(s.spec)) for n, s in inventory.nodes.items()} == {
            "web-1": (1, {"profile": "master", "mac": ["52:54:00:00:01:01"]}),
            "web-2": (2, {"profile": "master", "mac": ["52:54:00:00:01:02"], "selectable": True})}
        changes, revision = await store.node_changes(1)
        assert revision == 3
        assert [(c.revision, c.node, c.change, c.generation) for c in changes] == [
            (2, "web-2", "created", 1), (3, "web-2", "updated", 2)]

        # preconditions (If-Match, If-None-Match: *), all or nothing
        with pytest.raises(PreconditionFailedError, match=r"nodes\.web-2: precondition failed: expected "
                           "generation 1, it is at generation 2"):
            await store.apply_nodes([_write("web-3", "52:54:00:00:01:03"),
                                     NodeWrite("web-2", {"profile": "master"}, expect_generation=1)])
        with pytest.raises(PreconditionFailedError, match="expected no such node"):
            await store.apply_nodes([NodeWrite("web-1", {"profile": "master"}, create_only=True)])
        # a MAC another store node holds: refused, naming it; the MAC moves between nodes in one apply
        with pytest.raises(NodeConflictError) as e:
            await store.apply_nodes([_write("web-3", "52:54:00:00:01:01")])
        assert (e.value.key, e.value.holder, e.value.holder_source) == ("mac", "web-1", "store")
        assert await store.inventory_revision() == 3 and set((await store.inventory()).nodes) == {"web-1", "web-2"}
        moved = await store.apply_nodes([_write("web-1", "52:54:00:00:01:09"), _write("web-3", "52:54:00:00:01:01")])
        assert [a.outcome for a in moved] == ["updated", "created"]

        with pytest.raises(UnknownStoreNodeError, match="no node nope in the state store"):
            await store.delete_nodes(["web-3", "nope"])
        with pytest.raises(PreconditionFailedError):
            await store.delete_nodes(["web-3"], {"web-3": 7})
        gone = await store.delete_nodes(["web-3"], {"web-3": 1})
        assert [(c.node, c.change, c.generation) for c in gone] == [("web-3", "deleted", 1)]
        assert await store.stored_node("web-3") is None
        assert (await store.stored_node("web-1")).generation == 2
        await store.apply_nodes([_write("web-4", "52:54:00:00:01:01")])  # its MAC is free again

        # a log that keeps 2 entries: a watch from further back lists the nodes again (the API's 410)
        monkeypatch.setattr(nodestore, "KEEP_CHANGES", 2)
        for mod in ("bootserver.state.sqlite_nodes", "bootserver.state.postgresql"):
            monkeypatch.setattr(f"{mod}.KEEP_CHANGES", 2)
        await store.apply_nodes([_write("web-5", "52:54:00:00:01:05"), _write("web-6", "52:54:00:00:01:06")])
        revision = await store.inventory_revision()
        assert [c.node for c in (await store.node_changes(revision - 2))[0]] == ["web-5", "web-6"]
        with pytest.raises(ChangesExpiredError, match=f"since revision {revision - 3} are no longer kept"):
            await store.node_changes(revision - 3)
    finally:
        await store.close()


async def test_racing_writers_leave_one_winner(backend: Any) -> None:
    """Two stores (two replicas, or two processes of one machine) write nodes claiming one MAC at once:
    one commits, the other is refused naming the winner; creating one name with create_only: the same."""
    config = backend()
    first, second = open_store(config), open_store(config)
    await asyncio.gather(first.start(), second.start())
    try:
        for _ in range(5):
            base = await first.inventory_revision()
            outcomes = await asyncio.gather(
                first.apply_nodes([_write(f"a{base}", f"52:54:00:00:{base % 256:02x}:01")]),
                second.apply_nodes([_write(f"b{base}", f"52:54:00:00:{base % 256:02x}:01")]),
                return_exceptions=True)
            won = [o for o in outcomes if isinstance(o, list)]
            lost = [o for o in outcomes if isinstance(o, NodeConflictError)]
            assert len(won) == 1 and len(lost) == 1, outcomes
            assert lost[0].holder == won[0][0].name and lost[0].key == "mac"
            same = await asyncio.gather(*(s.apply_nodes([NodeWrite(f"c{base}", {"profile": "master"},
                                                                   create_only=True)]) for s in (first, second)),
                                        return_exceptions=True)
            assert sorted(type(o).__name__ for o in same) == ["PreconditionFailedError", "list"], same
        assert len((await first.inventory()).nodes) == 10
    finally:
        await asyncio.gather(first.close(), second.close())


async def test_writes_are_checked_as_check_config_checks_a_file_node(backend: Any) -> None:
    config = backend(profiles={"master": {"stream": "rhcos-4.16", "install_dev": "/dev/sda"},
                               "live": {"stream": "rhcos-4.16", "mode": "live"}})
    store = open_store(config)
    await store.start()
    try:
        cases = [
            ({"w": {"profile": "nope"}}, NodeCheckError, "src.yaml: nodes.w.profile: no profile 'nope'"),
            ({"w": {"profile": "master", "mac": "52:54:00:zz:00:01"}}, NodeCheckError, "src.yaml: nodes.w.mac"),
            ({"w": {"profile": "master", "colour": "red"}}, NodeCheckError, "src.yaml: nodes.w.colour: unknown key"),
            ({"w": {"profile": "master", "default": True}}, NodeCheckError,
             "src.yaml: nodes.w.default: the default node must use a live-mode profile"),
            ({"w": {"profile": "live", "network": {"interfaces": [{"name": "eno1", "type": "ethernet",
                                                                     "ipv4": {"address": [{"ip": "10.0.0.5"}]}}]}}},
             NodeCheckError, "src.yaml: nodes.w.network.interfaces[0].ipv4.address[0].prefix-length"),
            ({"w": {"profile": "master", "provider": "ipmi", "ipmi": {"address": "10.0.0.9",
                                                                       "boot_source": "virtual-media"}}},
             NodeCheckError, "src.yaml: nodes.w.ipmi.boot_source: node w uses provider ipmi"),
            ({"master-0": {"profile": "master"}}, FileNodeError, "nodes.master-0: node master-0 is defined in "),
            ({"w": {"profile": "master", "hostname": "MASTER-1"}}, NodeConflictError,
             "nodes.w.hostname: hostname master-1 is already the hostname of node master-1 ("),
        ]
        for specs, error, message in cases:
            with pytest.raises(error) as e:
                await apply_nodes(config, store, specs, source="src.yaml")
            assert str(e.value).startswith(message), str(e.value)
        with pytest.raises(NodeCheckError) as e:
            await apply_nodes(config, store, {"w": {"profile": "master", "mac": 5, "uuid": "x"}}, source="s")
        assert [path for path, _ in e.value.errors] == ["nodes.w.mac", "nodes.w.uuid"]  # every problem, by key
        assert (await store.inventory()).revision == 0  # nothing written
        done = await apply_nodes(config, store, {"w": {"profile": "master"}},
                                 preconditions={"w": Precondition(create_only=True)})
        assert [a.outcome for a in done] == ["created"]
        with pytest.raises(FileNodeError):
            await delete_nodes(config, store, ["w", "master-0"])
        assert [c.node for c in await delete_nodes(config, store, ["w"])] == ["w"]
    finally:
        await store.close()


def _cli(capsys: pytest.CaptureFixture[str], *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    """``bootserver ARGS`` in this process (its own event loop, as in a shell): ``(rc, stdout, stderr)``."""
    if stdin is not None:
        sys.stdin = io.StringIO(stdin)
    try:
        rc = main(list(args))
    finally:
        sys.stdin = sys.__stdin__
    out, err = capsys.readouterr()
    return rc, out, err


def test_nodes_apply_export_list_delete_commands(tmp_path: Path, reference: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    config = str(main_config(tmp_path, reference))
    nodes = {"web-1": {"profile": "live", "mac": ["52:54:00:00:02:01"]},
             "web-2": {"profile": "live", "mac": "52:54:00:00:02:12", "uuid": "4C4C4544-0000-1111-2222-000000000001",
                       "network": {"interfaces": [{"name": "eno1", "type": "ethernet", "ipv4": {
                           "address": [{"ip": "10.0.0.5", "prefix-length": 24}]}}]}}}
    path = write_config(tmp_path / "web.yaml", {"nodes": nodes})
    assert _cli(capsys, "nodes", "apply", "-f", str(path), "--config", config) == (
        0, "web-1 created\nweb-2 created\n", "")
    rc, out, err = _cli(capsys, "nodes", "export", "--config", config)
    assert rc == 0 and yaml.safe_load(out) == {"nodes": nodes}, err
    assert _cli(capsys, "nodes", "apply", "-f", "-", "--config", config, stdin=out) == (
        0, "web-1 unchanged\nweb-2 unchanged\n", "")
    rc, out, err = _cli(capsys, "nodes", "list", "--config", config)
    rows = [line.split() for line in out.splitlines()]
    assert rows[0][-1] == "SOURCE" and {r[0]: r[-1] for r in rows[1:]} == {
        "steady": f"file:{config}", "web-1": "store", "web-2": "store"}

    # refused: one line naming the node and key, exit 2, nothing written (web-3 is fine, web-4 is not)
    bad = write_config(tmp_path / "bad.yaml", {"nodes": {"web-3": {"profile": "live"},
                                                         "web-4": {"profile": "live", "mac": [MAC]}}})
    assert _cli(capsys, "nodes", "apply", "-f", str(bad), "--config", config) == (
        2, "", f"bootserver: nodes.web-4.mac: MAC {MAC} is already the MAC of node steady ({config})\n")
    for text, line in [("nodes: {web-3: {profile: nope}}", "<stdin>: nodes.web-3.profile: no profile 'nope'"),
                       ("nodes: {steady: {profile: live}}", f"nodes.steady: node steady is defined in {config}; "
                        "change it there, not in the state store"),
                       ("profiles: {}", "<stdin>: profiles: expected a mapping with one key, nodes:")]:
        rc, out, err = _cli(capsys, "nodes", "apply", "-f", "-", "--config", config, stdin=text)
        assert (rc, out) == (2, "") and err.startswith(f"bootserver: {line}") and err.count("\n") == 1, err
    rc, out, err = _cli(capsys, "nodes", "export", "--config", config)
    assert set(yaml.safe_load(out)["nodes"]) == {"web-1", "web-2"}

    rc, out, err = _cli(capsys, "nodes", "delete", "web-1", "steady", "--config", config)
    assert rc == 2 and "node steady is defined in" in err
    assert _cli(capsys, "nodes", "delete", "web-1", "web-2", "--config", config)[:2] == (
        0, "web-1 deleted\nweb-2 deleted\n")
    assert _cli(capsys, "nodes", "export", "--config", config)[:2] == (0, "nodes: {}\n")


def test_nodes_adopt_writes_into_the_store_by_default(tmp_path: Path, reference: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    config = str(main_config(tmp_path, reference))

    async def discovered() -> None:
        store = open_store(load_config(config))
        await store.start()
        try:
            await store.discover(Discovered("52:54:00:00:03:01", "4c4c4544-0000-1111-2222-000000000003",
                                            address="10.0.0.31", last_seen=1.0), 100)
        finally:
            await store.close()

    asyncio.run(discovered())
    rc, out, err = _cli(capsys, "nodes", "adopt", "52:54:00:00:03:01", "--name", "rack-1", "--profile", "live",
                        "--config", config)
    assert rc == 0, err
    assert out.startswith("rack-1: adopted machine 52:54:00:00:03:01 (uuid 4c4c4544-0000-1111-2222-000000000003) "
                          "into the state store\nrack-1: written into the state store "), out
    assert not (tmp_path / "nodes.d" / "rack-1.yaml").exists()
    assert yaml.safe_load(_cli(capsys, "nodes", "export", "--config", config)[1]) == {"nodes": {"rack-1": {
        "profile": "live", "hostname": "rack-1", "mac": ["52:54:00:00:03:01"],
        "uuid": "4c4c4544-0000-1111-2222-000000000003", "addresses": ["10.0.0.31"]}}}
    assert "rack-1" not in _cli(capsys, "nodes", "discovered", "--config", config)[1]


async def test_a_running_server_follows_the_store_and_refuses_a_reload_naming_a_store_node(
        tmp_path: Path, reference: Path, aiohttp_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    """The store watch of one process (each worker runs its own): a write is served at its next step,
    without a reload, a deleted node gets what an unknown machine gets; a reload whose files now name
    a store node is refused in one line naming both origins, and the running config stays."""
    path = main_config(tmp_path, reference)
    config = load_config(path)
    app = create_app(config)
    client = await aiohttp_client(app)
    running = app[RUNNING]
    store = running.runtime.state
    mac = "52:54:00:00:04:01"
    assert not await running.follow_store()  # the first read: nothing in the store, nothing swapped
    assert "bs-report" in await (await client.get(f"/boot.ipxe?mac={mac}")).text()  # discovery

    await apply_nodes(config, store, {"live-1": {"profile": "live", "mac": [mac], "selectable": True}})
    assert await running.follow_store()
    assert running.runtime.config.node_sources["live-1"] == "store"
    body = await (await client.get(f"/boot.ipxe?mac={mac}")).text()
    assert "node live-1" in body and "kernel " in body
    assert not await running.follow_store()  # nothing changed since

    add_node(tmp_path, "live-1", "52:54:00:00:04:02")  # a file now names the store node
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="bootserver.web"):
        assert not await running.reload()
    [line] = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert line.endswith(f"nodes.live-1: node live-1 is defined in {tmp_path / 'nodes.d' / 'live-1.yaml'} "
                         "and in the state store; a name may be defined once (remove it from the file, or "
                         "`bootserver nodes delete live-1`)"), line
    assert "node live-1" in await (await client.get(f"/boot.ipxe?mac={mac}")).text()  # the running config stays
    (tmp_path / "nodes.d" / "live-1.yaml").unlink()

    await delete_nodes(config, store, ["live-1"])
    assert await running.follow_store()
    assert "bs-report" in await (await client.get(f"/boot.ipxe?mac={mac}")).text()  # an unknown machine again
    assert [e.event for e in await store.events("live-1")][:1] == ["script"]  # its history stays
