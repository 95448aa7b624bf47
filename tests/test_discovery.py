"""Discovery and adoption (issue 32): the script an unknown machine gets, its reports recorded in the
state store (sqlite and PostgreSQL; bounded, rate-limited per address), ``nodes discovered`` and
``nodes adopt``, and values a machine reports staying inert in the script, the store, the table, the
YAML written, the log and the page."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from support.discovery import UNKNOWN, UUID, report_path
from support.helpers import run_cli, write_config
from support.reloading import MAC, add_node, main_config
from support.server import ServerProcess

from bootserver.config import load_config
from bootserver.discovery import MAX_ADDRESSES, Discovered, ReportError, read_report
from bootserver.http.app import ADMIN_APP, create_app
from bootserver.http.running import RUNNING
from bootserver.state.backends import open_store
from bootserver.state.sqlite_timeline import Timeline

#: Reports of the flood test: the unbounded WAL was 285 MB after 10,000 (its bound is Timeline.WAL_BOUND),
#: so 10,000 still show it; 20,000 took 19-29 s of `make test`.
REPORTS = 10_000
#: What a machine may report: quotes, a newline, iPXE's ${, markup, a YAML special, a comment start.
NASTY = {"serial": '"; reboot #', "manufacturer": "<script>alert(1)</script>", "product": "a\nb ${net0/mac} && x",
         "asset": "- [yaml]: {x: *y}", "buildarch": "x86_64", "platform": "efi"}


def test_a_report_keeps_known_keys_as_cut_text_and_needs_a_mac() -> None:
    mac, uuid, facts = read_report({"mac": "52-54-00-AA-BB-01", "uuid": UUID.upper(), "serial": "x" * 500,
                                    "net1": "not-a-mac", "net2": "52:54:00:AA:BB:02", "evil": "1", "asset": ""})
    assert (mac, uuid) == (UNKNOWN, UUID)
    assert facts == {"serial": "x" * 128, "net2": "52:54:00:aa:bb:02"}
    assert read_report({"mac": UNKNOWN, "uuid": "00000000-0000-0000-0000-000000000000"})[1] is None
    with pytest.raises(ReportError):
        read_report({"uuid": UUID})


async def test_store_keeps_reports_bounded_and_counted(backend: Any) -> None:
    store = open_store(backend())
    await store.start()
    try:
        for i in range(12):
            await store.discover(Discovered(f"52:54:00:00:01:{i:02x}", None, {"serial": str(i)}, "10.0.0.9",
                                            100.0 + i, 100.0 + i), keep=5)
        await store.discover(Discovered("52:54:00:00:01:0b", UUID, NASTY, "10.0.0.7", 200.0, 200.0), keep=5)
        found = await store.discovered()
        assert [d.mac for d in found] == ["52:54:00:00:01:0b", *(f"52:54:00:00:01:{i:02x}" for i in (10, 9, 8, 7))]
        first = found[0]
        assert (first.uuid, first.facts, first.address, first.first_seen, first.last_seen, first.reports) == (
            UUID, {**NASTY, "serial": "11"}, "10.0.0.7", 111.0, 200.0, 2)  # the first serial kept
        assert await store.forget_discovered(["52:54:00:00:01:0b", "52:54:00:00:09:09"]) == 1
        assert len(await store.discovered()) == 4
    finally:
        await store.close()


async def test_a_later_report_never_erases_a_fact_and_a_second_address_is_a_conflict(backend: Any) -> None:
    """Issue 52: a second report of a MAC from another address became the recorded address and blanked
    the UUID. Each fact keeps its first non-empty value; every address is kept (bounded, the first one
    always), and two of them are a conflict."""
    store = open_store(backend())
    await store.start()
    try:
        first = await store.discover(Discovered(UNKNOWN, UUID, {"serial": "S1", "manufacturer": "QEMU"}, "10.0.0.5",
                                                100.0, 100.0), keep=5)
        assert not first.conflict and dict(first.addresses) == {"10.0.0.5": 100.0}
        other = await store.discover(Discovered(UNKNOWN, None, {"product": "P"}, "10.0.0.66", 110.0, 110.0), keep=5)
        again = await store.discover(Discovered(UNKNOWN, "0badc0de-7b1e-4c7e-9a4d-2f6e3b1c0d5e", {"serial": "S2"},
                                                "10.0.0.5", 120.0, 120.0), keep=5)
        assert other.conflict and again.conflict
        [d] = await store.discovered()
        assert d == again
        assert (d.uuid, dict(d.facts), d.address, d.first_seen, d.last_seen, d.reports) == (
            UUID, {"serial": "S1", "manufacturer": "QEMU", "product": "P"}, "10.0.0.5", 100.0, 120.0, 3)
        assert dict(d.addresses) == {"10.0.0.5": 120.0, "10.0.0.66": 110.0}
        assert d.as_dict()["addresses"] == ["10.0.0.5", "10.0.0.66"] and d.as_dict()["conflict"] is True
        for i in range(MAX_ADDRESSES + 4):  # a flood of addresses claiming it: bounded, the first kept
            d = await store.discover(Discovered(UNKNOWN, None, {}, f"10.1.0.{i}", 200.0 + i, 200.0 + i), keep=5)
        assert len(d.addresses) == MAX_ADDRESSES and next(iter(d.addresses)) == "10.0.0.5"
        assert "10.1.0.0" not in d.addresses and f"10.1.0.{MAX_ADDRESSES + 3}" in d.addresses
        assert [x.addresses for x in await store.discovered()] == [d.addresses]
    finally:
        await store.close()


async def test_a_conflict_is_logged_shown_and_adopted_only_with_the_address_to_trust(
        tmp_path: Path, reference: Path, aiohttp_client: Any, caplog: Any) -> None:
    """A MAC reported from a second address: one warning, the page and ``nodes discovered`` show the
    conflict, ``nodes adopt`` refuses it in one line (exit 2) with the DHCP engine's lease as evidence in
    ``full`` mode, and adopts it pinned to the address ``--addresses`` names."""
    path = main_config(tmp_path, reference, dhcp={"interface": "lo", "mode": "full",
                                                   "range": "127.0.0.100-127.0.0.200"})
    app = create_app(load_config(path))
    client = await aiohttp_client(app)
    admin = await aiohttp_client(app[ADMIN_APP])
    caplog.set_level(logging.INFO, logger="bootserver.service")
    assert (await client.get(report_path(serial="S1"))).status == 200  # from 127.0.0.1
    svc = app[RUNNING].current.svc
    assert await app[RUNNING].intake.report(svc.config, {"mac": UNKNOWN}, "127.0.0.66")  # emptier, elsewhere
    assert await app[RUNNING].intake.report(svc.config, {"mac": UNKNOWN}, "127.0.0.66") is False  # per_address
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.getMessage().startswith(f'discovered machine {UNKNOWN} reported from 2 addresses '
                                           '("127.0.0.1", "127.0.0.66"): two machines claim this MAC')
    page = await (await admin.get("/")).text()
    assert 'class="conflict"' in page and "127.0.0.1, 127.0.0.66 (conflict: 2 addresses claim this MAC)" in page

    rc, out, err = await run_cli("nodes", "discovered", "--config", str(path))
    assert rc == 0, err
    _, row, note = out.splitlines()
    assert row.startswith(f"{UNKNOWN}  {UUID}  ") and "127.0.0.1,127.0.0.66 CONFLICT" in row and "S1" in row
    leases = tmp_path / "state" / "dhcp" / "leases"
    assert note.startswith(f"conflict: {UNKNOWN} was reported from 2 addresses (127.0.0.1, 127.0.0.66)")
    assert note.endswith(f"; the DHCP engine's lease file ({leases}) holds no lease for it")

    for lines, evidence in (
            ([], f"the DHCP engine's lease file ({leases}) holds no lease for it"),
            (["0 52:54:00:aa:bb:09 127.0.0.150 other *", f"1893456000 {UNKNOWN} 127.0.0.66 m1 01:52:54:00:aa:bb:01",
              "duid 00:01:00:01:2c:1f:aa:bb:52:54:00:00:00:01"],
             f"the DHCP engine leased 127.0.0.66 until 2030-01-01T00:00:00Z to it ({leases})")):
        if lines:
            leases.parent.mkdir(parents=True, exist_ok=True)
            leases.write_text("\n".join(lines) + "\n")
        rc, out, err = await run_cli("nodes", "adopt", "--file=", UNKNOWN, "--name", "rack1-09", "--profile", "live",
                                     "--config", str(path))
        assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        assert (f'machine {UNKNOWN} was reported from 2 addresses ("127.0.0.1", "127.0.0.66"): two machines claim '
                "its MAC; pass --addresses naming the one to trust; " + evidence) in err
        assert list((tmp_path / "nodes.d").iterdir()) == []
    rc, out, err = await run_cli("nodes", "adopt", "--file=", UNKNOWN, "--name", "rack1-09", "--profile", "live",
                                 "--addresses", "127.0.0.66", "--config", str(path))
    assert rc == 0, err
    assert out.splitlines()[-1].endswith(f"; bootserver dhcp: none runs with state_dir {tmp_path / 'state'}; "
                                         "it reads the config when it starts"), out  # dhcp: set, no engine
    node = yaml.safe_load((tmp_path / "nodes.d" / "rack1-09.yaml").read_text())["nodes"]["rack1-09"]
    assert (node["addresses"], node["uuid"]) == (["127.0.0.66"], UUID)


async def test_an_unknown_machine_is_told_to_report_and_wait_and_is_recorded_once_per_wait(
        tmp_path: Path, reference: Path, aiohttp_client: Any, caplog: Any) -> None:
    path = main_config(tmp_path, reference, server={"listen": "127.0.0.1:8080", "discovery": {"per_address": 60}})
    add_node(tmp_path, "hidden", "52:54:00:00:00:09", selectable=False)
    app = create_app(load_config(path))
    client = await aiohttp_client(app)
    admin = await aiohttp_client(app[ADMIN_APP])

    r = await client.get(f"/boot.ipxe?mac={UNKNOWN}")
    script = await r.text()
    assert r.status == 200 and script.startswith("#!ipxe\n")
    assert f"set bs-mac {UNKNOWN}\n" in script
    assert "imgfetch --name bs-report discover?${bs-facts}" in script and "sleep 30 " in script
    assert "chain --replace --autofree boot.ipxe?mac=${bs-mac:uristring}&uuid=${uuid}" in script
    # a registered node that may not be handed out here gets the same answer (but for its own mac)
    hidden = await (await client.get("/boot.ipxe?mac=52:54:00:00:00:09")).text()
    assert hidden == script.replace(UNKNOWN, "52:54:00:00:00:09")
    # a mac that is no MAC is not echoed: iPXE's own is used
    odd = await (await client.get("/boot.ipxe?mac=%22%3B%20reboot%20%23")).text()
    assert "set bs-mac ${net0/mac}\n" in odd and "reboot" not in odd

    caplog.set_level(logging.INFO, logger="bootserver.service")
    r = await client.get(report_path(**NASTY))
    assert (r.status, await r.text()) == (200, "ok\n")
    svc = app[RUNNING].current.svc
    [d] = await svc.runtime.state.discovered()
    assert (d.mac, d.uuid, d.address) == (UNKNOWN, UUID, "127.0.0.1")
    assert {k: d.facts[k] for k in NASTY} == NASTY and d.facts["net0chip"] == "virtio-net"
    # one log line, every reported value a JSON string: no raw newline, quote or markup breaks it
    [line] = [rec.getMessage() for rec in caplog.records if "discovered machine" in rec.getMessage()]
    assert "\n" not in line and '\\"; reboot #' in line and "a\\nb" in line
    # a second report from the same address within per_address: answered alike, not recorded
    assert (await (await client.get(report_path("52:54:00:aa:bb:02"))).text()) == "ok\n"
    assert [x.mac for x in await svc.runtime.state.discovered()] == [UNKNOWN]
    # a node's MAC is never recorded, and answered alike; a report without a valid MAC is a 400
    app[RUNNING].intake._reported.clear()
    assert (await (await client.get(report_path("52:54:00:00:00:09"))).text()) == "ok\n"
    assert [x.mac for x in await svc.runtime.state.discovered()] == [UNKNOWN]
    assert (await client.get("/discover?serial=x")).status == 400

    # the page shows the machine with every value as text, not markup
    page = await (await admin.get("/")).text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert" not in page
    assert "&#34;; reboot #" in page or "&quot;; reboot #" in page


async def test_discovery_off_gives_the_404_of_before(tmp_path: Path, reference: Path, aiohttp_client: Any) -> None:
    path = main_config(tmp_path, reference, server={"listen": "127.0.0.1:8080", "discovery": False})
    client = await aiohttp_client(create_app(load_config(path)))
    r = await client.get(f"/boot.ipxe?mac={UNKNOWN}")
    assert (r.status, await r.text()) == (404, f"no node to boot for mac {UNKNOWN} from this address\n")
    assert (await client.get(report_path())).status == 404


async def test_nodes_discovered_and_adopt_then_the_waiting_machine_gets_its_script(
        tmp_path: Path, reference: Path, aiohttp_client: Any) -> None:
    path = main_config(tmp_path, reference)
    app = create_app(load_config(path))
    client = await aiohttp_client(app)
    assert (await client.get(report_path(**NASTY))).status == 200
    await app[RUNNING].runtime.drain()

    rc, out, err = await run_cli("nodes", "discovered", "--config", str(path))
    assert rc == 0, err
    header, row = out.splitlines()
    assert header.split()[:3] == ["MAC", "UUID", "MANUFACTURER"]
    assert row.startswith(f"{UNKNOWN}  {UUID}  <script>alert(1)</scrip…") and '"; reboot #' in row
    assert "a\\nb ${net0/mac}" in row  # the newline written as \n: one line per machine

    # refused, nothing written: a name in use, a profile that does not exist, a file include: does not name
    for args, message in (
            (["--name", "steady", "--profile", "live"], "node steady exists already"),
            (["--name", "new-1", "--profile", "nope"], "--profile nope: no such profile (profiles: live)"),
            (["--name", "new-1", "--profile", "live", "--file", str(tmp_path / "elsewhere.yaml")],
             "is not read by the include:"),
            (["--name", "new-1", "--profile", "live", "--file", str(tmp_path / "nodes.d/sub/deeper/x.yaml")],
             "is not read by the include:"),  # the loader's '*' stays within nodes.d/
            (["--name", "Bad_Name!", "--profile", "live"], "--name 'Bad_Name!'")):
        rc, _, err = await run_cli("nodes", "adopt", "--file=", UNKNOWN, *args, "--config", str(path))
        assert rc == 2 and message in err, err
    assert sorted(p.name for p in (tmp_path / "nodes.d").iterdir()) == []

    rc, out, err = await run_cli("nodes", "adopt", "--file=", UUID, "--name", "rack1-07", "--profile", "live",
                                 "--config", str(path))
    assert rc == 0, err
    written = tmp_path / "nodes.d" / "rack1-07.yaml"
    assert out.splitlines() == [
        f"rack1-07: adopted machine {UNKNOWN} (uuid {UUID}) into {written}",
        "rack1-07: no bootserver serve runs with this state_dir: it reads the node when it starts"]
    text = written.read_text()
    assert yaml.safe_load(text) == {"nodes": {"rack1-07": {"profile": "live", "hostname": "rack1-07", "mac": [UNKNOWN],
                                                           "uuid": UUID, "addresses": ["127.0.0.1"]}}}
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert len(comments) == 2 and json.loads(comments[1].split(": ", 1)[1])["serial"] == NASTY["serial"]
    rc, _, err = await run_cli("nodes", "adopt", "--file=", UNKNOWN, "--name", "again", "--profile", "live",
                               "--config", str(path))
    assert rc == 2 and f"no discovered machine {UNKNOWN}" in err

    # the running server reloads; the machine's next ask gets its node's script
    assert await app[RUNNING].reload()
    r = await client.get(f"/boot.ipxe?mac={UNKNOWN}&uuid={UUID}")
    body = await r.text()
    assert r.status == 200 and "bs-report" not in body and "kernel " in body


async def test_adopt_reloads_a_running_server(tmp_path: Path, reference: Path) -> None:
    path = main_config(tmp_path, reference)
    port = int(yaml.safe_load(path.read_text())["server"]["listen"].rsplit(":", 1)[1])
    server = ServerProcess(path, port)
    async with aiohttp.ClientSession() as session:
        await server.start(session)
        try:
            async with session.get(server.url + report_path()) as r:
                assert r.status == 200
            rc, out, err = await run_cli("nodes", "adopt", "--file=", UNKNOWN, "--name", "rack1-08",
                                         "--profile", "live", "--config", str(path))
            assert rc == 0, err
            assert out.splitlines()[1].startswith("rack1-08: the server reloaded (")
            async with session.get(f"{server.url}/boot.ipxe?mac={UNKNOWN}") as r:
                assert r.status == 200 and "bs-report" not in await r.text()
        finally:
            await server.stop()


async def test_a_flood_of_made_up_macs_stays_within_the_bound_and_the_server_answers(tmp_path: Path,
                                                                                     reference: Path) -> None:
    """10,000 reports (no login needed) as fast as a client sends them: the discovered table stays at its
    bound, scripts keep answering, and the timeline's write-ahead log stays below its bound (it grew
    without end: 285 MB after 10,000 reports, as discovery writes never counted toward a checkpoint)."""
    path = main_config(tmp_path, reference)
    doc = yaml.safe_load(path.read_text())
    doc["server"]["discovery"] = {"keep": 100, "per_address": 0}  # no rate limit: every report is written
    write_config(path, doc)
    port = int(doc["server"]["listen"].rsplit(":", 1)[1])
    server = ServerProcess(path, port, "--log-level", "warning")  # its stderr is a pipe nobody reads meanwhile
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=32)) as session:
        await server.start(session)
        try:
            async def one(i: int) -> int:
                async with session.get(server.url + report_path(f"02:00:00:{i >> 16:02x}:{i >> 8 & 255:02x}:"
                                                                f"{i & 255:02x}", serial=f"s{i}")) as r:
                    return r.status

            wal, biggest = path.parent / doc["state_dir"] / (Timeline.FILENAME + "-wal"), 0
            started = time.monotonic()
            flood = asyncio.ensure_future(asyncio.gather(*(one(i) for i in range(REPORTS))))
            # the server keeps answering scripts while the flood runs
            while not flood.done():
                async with session.get(f"{server.url}/boot.ipxe?mac={MAC}") as r:
                    assert r.status == 200
                await asyncio.wait([flood], timeout=0.05)
                biggest = max(biggest, wal.stat().st_size if wal.exists() else 0)
            statuses = flood.result()
            assert statuses.count(200) == REPORTS, {s: statuses.count(s) for s in set(statuses)}
            assert 0 < biggest < Timeline.WAL_BOUND, biggest
            rc, out, err = await run_cli("nodes", "discovered", "--config", str(path))
            assert rc == 0, err
            assert len(out.splitlines()) == 1 + 100  # the header and the bound
            assert f"02:00:00:00:{(REPORTS - 1) >> 8 & 255:02x}:{(REPORTS - 1) & 255:02x}" in out  # the last is kept
            print(f"{REPORTS} reports in {time.monotonic() - started:.1f} s, WAL at most {biggest} bytes")
        finally:
            await server.stop()
