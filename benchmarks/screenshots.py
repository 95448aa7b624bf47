"""Screenshots of the live page for the docs (``make screenshots``): a real ``bootserver serve`` on
127.0.0.1 with a dozen nodes whose timelines are written beforehand (a rack in every stage, one
stalled), photographed by Debian's chromium through Playwright at 1280x800 and at phone width.

Usage: ``python benchmarks/screenshots.py [OUT_DIR]`` (default ``docs/screenshots``). A tool beside the
benchmarks, not a test; it shares ``tests/support/helpers.py`` with them (through ``_common``). Writes
``fleet.png``, ``node.png`` and ``fleet-phone.png``."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.async_api import async_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BOOTSERVER, REFERENCE, free_port, write_config

from bootserver.state.sqlite_timeline import Timeline

CHROMIUM = "/usr/bin/chromium"

def _install(done: str, start: float) -> list[tuple[float, str]]:
    steps = [(0, "script"), (0.1, "kernel-requested"), (0.2, "kernel-completed"), (0.3, "initramfs-requested"),
             (0.5, "initramfs-completed"), (1.0, "rootfs-requested"), (2.2, "rootfs-completed"), (3.0, "stub"),
             (9.5, "config"), (10.4, "checkin")]
    upto = {"kernel": 2, "rootfs": 6, "installing": 8, "installed": 9, "up": 10}[done]
    return [(start - m, e) for m, e in steps[:upto]]


def seed(state_dir: Path) -> None:
    """Write the rack's timelines, times relative to now."""
    tl = Timeline(state_dir)
    now = time.time()
    plan = [("rack1-01", "up", 41), ("rack1-02", "up", 40), ("rack1-03", "up", 39), ("rack1-04", "installed", 12),
            ("rack1-05", "installing", 6), ("rack1-06", "installing", 5), ("rack1-07", "rootfs", 2.5),
            ("rack1-08", "kernel", 25), ("rack1-09", "up", 38), ("rack1-10", "rootfs", 1.5)]
    for i, (node, done, start) in enumerate(plan):
        for minutes, event in _install(done, start):
            detail = {"mode": "install", "release": "416.94.202405291527-0"} if event == "script" else None
            if event.endswith("-completed"):
                detail = {"bytes": 1_048_576, "status": 200}
            tl.record(node, event, mode="install", ip=f"10.70.1.{11 + i}", detail=detail, at=now - minutes * 60)
    # what `bootserver provision` records for a Redfish node (README, Provisioning)
    tl.write_devices({node: {"provider": "redfish", "id": f"/redfish/v1/Systems/{i + 1}", "state": "On"}
                      for i, (node, _, _) in enumerate(plan)})
    tl.close()


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        port = free_port()
        (d / "master.ign").write_bytes((REFERENCE / "openshift-pointer-master.ign.json").read_bytes())
        nodes = {f"rack1-{i:02d}": {"profile": "master", "mac": [f"52:54:00:00:01:{i:02x}"]} for i in range(1, 13)}
        config = write_config(d / "bootserver.yaml", {
            "server": {"listen": f"127.0.0.1:{port}", "base_url": "http://10.70.0.2:8080"},
            "cache_dir": "cache", "state_dir": "state",
            "streams": {"rhcos-4.16": {"metadata": str(REFERENCE / "rhcos-stream-4.16.json")}},
            "profiles": {"master": {"stream": "rhcos-4.16", "install_dev": "/dev/sda", "ignition": "master.ign"}},
            "nodes": nodes, "timeline": {"stall_after": {"kernel": "10m"}}})
        seed(d / "state")
        proc = subprocess.Popen([*BOOTSERVER, "serve", "--config", str(config)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        admin = f"http://127.0.0.1:{port + 1}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    with urllib.request.urlopen(admin + "/healthz", timeout=2):
                        break
                except OSError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise SystemExit("bootserver serve did not start") from None
                    time.sleep(0.1)  # polling interval while waiting for the port, bounded by the deadline
            asyncio.run(shoot(admin, out))
        finally:
            proc.terminate()
            proc.wait(timeout=20)


async def shoot(admin: str, out: Path) -> None:
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            for name, path, viewport, full in (("fleet", "/", {"width": 1280, "height": 800}, False),
                                               ("node", "/ui/nodes/rack1-05", {"width": 1280, "height": 800}, True),
                                               ("fleet-phone", "/", {"width": 390, "height": 844}, False)):
                page = await (await browser.new_context(viewport=viewport, device_scale_factor=1)).new_page()
                await page.goto(admin + path)
                await page.wait_for_selector("#live[data-state=on]")
                await page.screenshot(path=str(out / f"{name}.png"), full_page=full)
                print(out / f"{name}.png")
        finally:
            await browser.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/screenshots"))
