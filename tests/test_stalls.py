"""Stalls: ``timeline.stall_after`` (defaults, durations, stages), the STALLED column of ``bootserver nodes``,
the ``/metrics`` gauge and one warning line per stall, and the boot-duration histograms; against a real
``serve``."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import aiohttp
import pytest
import yaml
from support.helpers import checkin_command, run_cli, write_config
from support.server import ServerProcess

from bootserver.config import parse_config
from bootserver.fleet import stall_deadlines
from bootserver.timeline import DEFAULT_STALL_AFTER, Event, NodeState, boot_started


def config_with(tmp_path: Path, reference: Path, stall_after: dict | None, checkin: bool = True):
    return parse_config({
        "state_dir": "state",
        "streams": {"r": {"metadata": str(reference / "rhcos-stream-4.16.json")}},
        "profiles": {"p": {"stream": "r", "install_dev": "/dev/sda", "checkin": checkin}},
        "nodes": {"n": {"profile": "p"}},
        "timeline": {} if stall_after is None else {"stall_after": stall_after},
    }, "t.yaml", tmp_path)


def test_stall_after_takes_durations_over_the_defaults_and_null_turns_one_off(tmp_path, reference) -> None:
    limits = config_with(tmp_path, reference, {"kernel": "90s", "installing": "2h", "new": "1d",
                                               "rootfs": None}).timeline.stall_limits
    assert limits["kernel"] == 90 and limits["installing"] == 7200 and limits["new"] == 86400
    assert "rootfs" not in limits and limits["ipxe"] == DEFAULT_STALL_AFTER["ipxe"] == 600


@pytest.mark.parametrize(("value", "message"), [
    ({"kernal": "10m"}, "timeline.stall_after: unknown stage 'kernal' (stages: new, reinstall, dhcp, tftp, ipxe,"),
    ({"kernel": "10 minutes"}, "timeline.stall_after.kernel: not a duration"),
])
async def test_a_bad_stall_after_is_one_line_naming_the_key(tmp_path, reference, value, message) -> None:
    path = write_config(tmp_path / "c.yaml", {"timeline": {"stall_after": value}})
    rc, _, err = await run_cli("check-config", "--config", str(path))
    assert rc == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(("stage", "checkin", "stalls"), [
    ("kernel", True, True), ("installed", True, True), ("installed", False, False),
    ("up", True, False), ("new", True, False),
])
def test_a_node_stalls_past_its_stages_limit_except_in_its_final_stage(tmp_path, reference, stage, checkin,
                                                                        stalls) -> None:
    config = config_with(tmp_path, reference, {"kernel": "10m", "installed": "10m"}, checkin)
    at = None if stage == "new" else 1000.0
    [deadline] = stall_deadlines(config, [NodeState("n", stage, at, None, at)]).values()
    assert (deadline == 1600.0) if stalls else deadline is None


def test_a_boot_starts_at_its_first_script_after_the_previous_boot() -> None:
    def ev(at: float, name: str) -> Event:
        return Event("n", at, name)
    history = [ev(1, "script"), ev(2, "stub"), ev(3, "checkin"),  # an earlier boot
               ev(10, "script"), ev(11, "kernel-failed"), ev(12, "script"), ev(13, "stub"), ev(14, "config")]
    assert boot_started(history) == 10
    assert boot_started(history[6:]) is None  # trimmed by keep_events: no script left


async def _stderr_until(server: ServerProcess, pattern: str, seen: list[str], deadline: float) -> None:
    """Read the server's stderr lines into ``seen`` until one matches ``pattern`` (bounded by ``deadline``,
    monotonic seconds)."""
    assert server.proc is not None and server.proc.stderr is not None
    while not any(re.search(pattern, line) for line in seen):
        line = await asyncio.wait_for(server.proc.stderr.readline(), max(0.1, deadline - time.monotonic()))
        assert line, f"server exited before {pattern!r}:\n" + "".join(seen)
        seen.append(line.decode())


def metric(text: str, name: str, **labels: str) -> float:
    want = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
    return float(next(line.split()[-1] for line in text.splitlines() if line.startswith(want + " ")))


async def test_a_served_node_stalls_once_shows_in_nodes_and_metrics_and_boot_times_are_measured(
        boot_setup, tmp_path: Path) -> None:
    setup = boot_setup(10_000, {"m-0": {"profile": "master"}, "m-1": {"profile": "master"},
                                "m-2": {"profile": "master"}})
    doc = yaml.safe_load(setup.config.read_text())
    doc["timeline"] = {"stall_after": {"ipxe": "2s"}}
    write_config(setup.config, doc)
    seen: list[str] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        server = ServerProcess(setup.config, setup.port)
        try:
            await server.start(http)

            async def script(node: str) -> str:
                _, out, _ = await run_cli("url", node, "--config", str(setup.config))
                async with http.get(out.splitlines()[0]) as r:
                    assert r.status == 200
                    return await r.text()

            await script("m-0")
            end = time.monotonic() + 20
            await _stderr_until(server, r"node m-0: stalled in stage ipxe", seen, end)
            async with http.get(server.admin_url + "/metrics") as r:
                text = await r.text()
            assert metric(text, "bootserver_nodes_stalled", stage="ipxe") == 1.0
            assert metric(text, "bootserver_nodes_stalled", stage="kernel") == 0.0
            _, out, _ = await run_cli("nodes", "--config", str(setup.config))
            rows = {line.split()[0]: line for line in out.splitlines()[1:]}
            assert re.search(r" ipxe .* stalled \d+s ", rows["m-0"]) and " stalled " not in rows["m-1"]
            # m-0 stays stalled (its repeated script requests wake the watch) while m-1 stalls later:
            # by m-1's line the watch read m-0 again several times, and said nothing more of it
            for _ in range(3):
                await script("m-0")
            await script("m-1")
            await _stderr_until(server, r"node m-1: stalled in stage ipxe", seen, end)
            assert len([line for line in seen if "node m-0: stalled" in line]) == 1, "".join(seen)
            assert re.search(r"WARNING .*node m-0: stalled in stage ipxe for \d+s "
                             r"\(timeline.stall_after.ipxe: 2s\)", "".join(seen)), "".join(seen)

            # a whole install of m-2: script, stub, real config, check-in -> the boot-time histograms
            install = await script("m-2")
            stub_url = re.search(r"coreos\.inst\.ignition_url=(\S+)", install).group(1)
            async with http.get(stub_url) as r:
                stub = json.loads(await r.read())
            async with http.get(stub["ignition"]["config"]["merge"][0]["source"]) as r:
                assert r.status == 200
            proc = await asyncio.create_subprocess_exec(*checkin_command(stub), stdout=asyncio.subprocess.PIPE)
            assert (await asyncio.wait_for(proc.communicate(), 60))[0] == b"m-2: up\n"
            async with http.get(server.admin_url + "/metrics") as r:
                text = await r.text()
            assert metric(text, "bootserver_boot_seconds_count", stage="installed") == 1.0
            assert metric(text, "bootserver_boot_seconds_count", stage="up") == 1.0
            assert metric(text, "bootserver_boot_seconds_count", stage="running") == 0.0
            assert 0 < metric(text, "bootserver_boot_seconds_sum", stage="up") < 60
            assert metric(text, "bootserver_nodes", stage="up") == 1.0
            assert metric(text, "bootserver_nodes_stalled", stage="up") == 0.0
        finally:
            await server.stop()
