"""The playground (``make playground``): a boot end to end on one machine, with no internet.

A local stream is built from the Debian kernel (``.ci/prepare.d/e2e-kernel.sh``) and the small
initramfs the e2e tests boot (busybox; its ``/init`` prints its command line, fetches the rootfs the
kernel line names and powers off: it stands in for CoreOS's live system and installs nothing); a local
upstream on 127.0.0.1 serves it, ``sync-images`` mirrors it, and ``bootserver serve`` answers on
loopback with the admin page. Three QEMU machines boot through it (TCG, user networking that reaches
only the server's port):

* ``pg-bios``: a node, under SeaBIOS (Debian's ``ipxe.lkrn``);
* ``pg-uefi``: a node, under OVMF (iPXE's EFI option ROM);
  (all three reach the server from 127.0.0.1 through QEMU's forwarder, and artifact requests are
  attributed to a node by address, so the stages shown may mix the two nodes up; a node counts as
  booted when its serial console shows its ``/init`` ran to the end);
* an unknown machine (SMBIOS facts set with ``-smbios``): it shows up as discovered, and the command
  that adopts it is printed; adopted, it boots without a reset.

It stops its machines and the server on Ctrl-C, after ``--minutes`` (default 20), or with
``--until-seen`` once all three machines were seen (the two nodes booted to the end of their ``/init``,
the unknown machine reported itself; what CI runs). Exit 0 then, 1 when they were not all seen in time.

Usage: python benchmarks/playground.py [--minutes 20] [--until-seen] [--screenshot PNG] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from e2e import rig  # noqa: E402 (tests/ is on sys.path above)
from e2e.conftest import REAL_IGNITION, bootserver_command, stream_metadata  # noqa: E402
from support.helpers import free_port  # noqa: E402

NODES = {"pg-bios": ("bios", "52:54:00:9a:00:01"), "pg-uefi": ("uefi", "52:54:00:9a:00:02")}
UNKNOWN_MAC = "52:54:00:9a:00:99"
UNKNOWN_SMBIOS = "type=1,manufacturer=Playground Labs,product=Mystery Box,serial=PG-0042"


def say(text: str) -> None:
    print(f"playground: {text}", flush=True)


def missing_tools(tools: rig.Tools) -> list[str]:
    return tools.missing("qemu", "ipxe_lkrn", "ovmf", "ipxe_efi_rom", "busybox", "vmlinuz", "modules_dir")


def write_config(work: Path, port: int) -> Path:
    doc = {
        "server": {"listen": f"127.0.0.1:{port}", "base_url": f"http://{rig.GUEST_HOST}:{port}",
                   "admin": {"listen": f"127.0.0.1:{port + 1}"}, "discovery": {"every": 10}},
        "cache_dir": str(work / "cache"), "state_dir": str(work / "state"),
        "streams": {"playground": {"metadata": str(work / "stream.json")}},
        # no provider: platform metal, which names no console; the machines' serial port, which is read here
        "profiles": {"install": {"stream": "playground", "mode": "install", "install_dev": "/dev/vda",
                                 "ignition": "real.ign", "console": "console=ttyS1,115200n8"}},
        # selectable: the machines reach the server through a forwarder on 127.0.0.1
        "nodes": {name: {"profile": "install", "mac": [mac], "selectable": True} for name, (_, mac) in NODES.items()},
        "include": ["nodes.d/*.yaml"],
    }
    (work / "nodes.d").mkdir(exist_ok=True)
    path = work / "bootserver.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def node_stages(admin: str) -> dict[str, str]:
    with urllib.request.urlopen(admin + "/nodes", timeout=5) as r:
        return {n["node"]: f"{n['stage']} ({n.get('last_event') or '-'})" for n in json.load(r)["nodes"]}


def discovered(state_dir: Path) -> list[tuple[str, str]]:
    db_path = state_dir / "timeline.sqlite3"
    if not db_path.exists():
        return []
    with contextlib.closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5)) as db:
        try:
            return db.execute("SELECT mac, facts FROM discovered ORDER BY first_seen").fetchall()
        except sqlite3.OperationalError:  # no table yet
            return []


def screenshot(url: str, path: Path) -> None:
    """Photograph the page at ``url`` (Debian's chromium through Playwright, 1280x900) into ``path`` (PNG)."""
    import asyncio

    from playwright.async_api import async_playwright

    async def shoot() -> None:
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            try:
                page = await (await browser.new_context(viewport={"width": 1280, "height": 900})).new_page()
                await page.goto(url)
                await page.wait_for_selector("#discovered tbody tr")
                await page.screenshot(path=str(path), full_page=True)
            finally:
                await browser.close()

    asyncio.run(shoot())


def run(args: argparse.Namespace, work: Path) -> int:
    tools = rig.find_tools()
    missing = missing_tools(tools)
    if missing:
        say("missing: " + "; ".join(missing) + " (run `make playground`, which installs them as .ci/run does)")
        return 2
    say(f"working in {work}")
    initramfs = work / "initramfs.img"
    rig.build_initramfs(initramfs, tools.busybox or "", tools.modules_dir or "")
    artifacts = {"kernel": Path(tools.vmlinuz or "").read_bytes(), "initramfs": initramfs.read_bytes(),
                 "rootfs": os.urandom(4 << 20)}
    port = free_port()
    admin = f"http://127.0.0.1:{port + 1}"
    procs: list[subprocess.Popen] = []
    with rig.StaticServer({}) as upstream:
        doc = stream_metadata(upstream.url(""), artifacts)
        for kind, art in doc["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["pxe"].items():
            upstream.routes[art["location"].removeprefix(upstream.url(""))] = artifacts[kind]
        (work / "stream.json").write_text(json.dumps(doc, indent=2))
        (work / "real.ign").write_text(json.dumps(REAL_IGNITION, indent=2) + "\n")
        config = write_config(work, port)
        bs = bootserver_command()
        subprocess.run([*bs, "sync-images", "--config", str(config)], check=True, timeout=300)
    try:
        with open(work / "serve.log", "wb") as log:
            procs.append(subprocess.Popen([*bs, "serve", "--config", str(config)], stdin=subprocess.DEVNULL,
                                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        end = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(admin + "/healthz", timeout=2).close()
                break
            except OSError:
                if time.monotonic() > end or procs[0].poll() is not None:
                    say("the server did not start: " + (work / "serve.log").read_text()[-2000:])
                    return 1
                time.sleep(0.1)
        say(f"the page: {admin}/   (the server log: {work / 'serve.log'})")
        chain = rig.guest_url(port, "/boot.ipxe?mac=${net0/mac}")
        for name, (firmware, mac) in NODES.items():
            argv = rig.qemu_command(tools, chain, work / f"{name}.log", port=port, mac=mac, firmware=firmware)
            procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.STDOUT, start_new_session=True))
            say(f"{name}: booting under {firmware.upper()} (serial console: {work / (name + '.log')})")
        argv = [*rig.qemu_command(tools, chain, work / "unknown.log", port=port, mac=UNKNOWN_MAC), "-smbios",
                UNKNOWN_SMBIOS]
        procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.STDOUT, start_new_session=True))
        say(f"an unknown machine ({UNKNOWN_MAC}): booting under BIOS (serial console: {work / 'unknown.log'})")
        deadline = time.monotonic() + args.minutes * 60
        shown: dict[str, str] = {}
        seen: set[str] = set()
        while time.monotonic() < deadline:
            for node, stage in node_stages(admin).items():
                if shown.get(node) != stage:
                    shown[node] = stage
                    say(f"{node}: {stage}")
            for node in NODES:  # its /init ran to the end: kernel, initramfs and rootfs came through
                logs = (work / f"{node}.log", rig.second_serial_log(work / f"{node}.log"))  # UEFI: ttyS1 apart
                serial = "".join(p.read_text(errors="replace") for p in logs if p.exists())
                if rig.MARK_DONE in serial and node not in seen:
                    seen.add(node)
                    sha = rig.parse_serial_log(serial).get("rootfs_sha256")
                    say(f"{node}: booted: its /init fetched the rootfs (sha256 {sha}) and powered off")
            for mac, facts in discovered(work / "state"):
                if mac not in shown:
                    shown[mac] = "discovered"
                    say(f"discovered {mac}: {facts}")
                    say(f"adopt it:  {' '.join(bs)} nodes adopt {mac} --name pg-new --profile install "
                        f"--config {config}")
                seen.add("unknown")
            if {*NODES, "unknown"} <= seen and args.screenshot and "shot" not in seen:
                seen.add("shot")
                screenshot(admin + "/", Path(args.screenshot))
                say(f"the page photographed into {args.screenshot}")
            if args.until_seen and {*NODES, "unknown"} <= seen:
                say("all three machines were seen")
                return 0
            time.sleep(1)  # polling interval of the status lines, bounded by --minutes
        if args.until_seen:
            say(f"not all machines were seen within {args.minutes} minutes: {sorted(seen)}")
            return 1
        say("time is up")
        return 0
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        say("machines and server stopped")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=20.0, help="stop after this long (default 20)")
    p.add_argument("--until-seen", action="store_true", help="stop with exit 0 once all three machines were seen")
    p.add_argument("--screenshot", metavar="PNG", help="photograph the page once all three machines were seen")
    p.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temp folder, removed)")
    args = p.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bootserver-playground-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        return run(args, work)
    except KeyboardInterrupt:
        return 130
    finally:
        if not args.keep:
            import shutil

            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
