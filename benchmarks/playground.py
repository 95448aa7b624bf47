"""The playground (``make playground``): the whole life of three machines on this one computer, no internet.

The installer is a **stand-in for CoreOS built from Debian's parts** (``tests/e2e/standin.py``: Debian's
kernel, busybox, the real Ignition 2.14, curl, SYSLINUX and GRUB; real CoreOS images cannot be fetched
here). A local upstream on 127.0.0.1 serves it as a stream, ``sync-images`` mirrors it, and ``bootserver
serve`` answers on loopback with the live page. Three QEMU machines (TCG), each with an empty disk and
its NIC first in the boot order, as servers are:

* ``pg-bios``: a node, under SeaBIOS; ``pg-uefi``: a node, under OVMF. Each installs (the live system
  fetches its rootfs and the stub and writes its disk), reboots, gets the local-boot answer on its next
  network boot (boot-once), boots its disk, where the real Ignition merges the real config, and its
  check-in unit reports it ``up``;
* an unknown machine (SMBIOS facts set with ``-smbios``): it shows up as discovered; the playground
  adopts it (and prints the command), and it installs and comes ``up`` too, without a reset.

Every machine reaches the server from 127.0.0.1 through QEMU's forwarder, and artifact requests are
attributed to a node by address (to the node whose boot script that address was served last), so a node
is powered on, and the unknown machine adopted, only once every other node fetched its rootfs. One line
per stage change; the end is a table of every machine's stages with their times since its power-on.

It stops when every machine is ``up`` (exit 0), after ``--minutes`` (default 10; exit 1), or on Ctrl-C,
and always stops its machines and the server.

Usage: python benchmarks/playground.py [--minutes 10] [--screenshot PNG] [--keep DIR]
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

from bootserver.timeline import STAGE_RANK, next_stage

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from e2e import life, rig, standin  # noqa: E402 (tests/ is on sys.path above)
from e2e.conftest import bootserver_command, stream_metadata  # noqa: E402
from support.helpers import free_port  # noqa: E402

NODES = {"pg-bios": ("bios", "52:54:00:9a:00:01"), "pg-uefi": ("uefi", "52:54:00:9a:00:02")}
UNKNOWN_MAC = "52:54:00:9a:00:99"
UNKNOWN_SMBIOS = "type=1,manufacturer=Playground Labs,product=Mystery Box,serial=PG-0042"
ADOPTED = "pg-new"
#: What each stage means, for the line that announces it.
MEANING = {
    "ipxe": "iPXE got its boot script", "kernel": "fetching the live kernel",
    "initramfs": "fetching the live initramfs", "rootfs": "the live system fetches its rootfs",
    "installing": "the installer fetched the Ignition stub and writes the disk",
    "installed": "first boot from the disk: Ignition merged the real config", "up": "its check-in unit reported in",
    "reinstall": "marked for reinstall",
}


def say(text: str) -> None:
    print(f"playground: {text}", flush=True)


def write_config(work: Path, port: int) -> Path:
    doc = {
        "server": {"listen": f"127.0.0.1:{port}", "base_url": f"http://{rig.GUEST_HOST}:{port}",
                   "admin": {"listen": f"127.0.0.1:{port + 1}"}, "discovery": {"every": 5}},
        "cache_dir": str(work / "cache"), "state_dir": str(work / "state"),
        "streams": {"playground": {"metadata": str(work / "stream.json")}},
        # platform metal: a machine of one's own, not an Equinix device; the stand-in's console is ttyS0
        "profiles": {"install": {"stream": "playground", "mode": "install", "install_dev": "/dev/vda",
                                 "platform_id": "metal", "console": "console=ttyS0,115200n8", "ignition": "real.ign"}},
        # selectable: the machines reach the server through a forwarder on 127.0.0.1
        "nodes": {name: {"profile": "install", "mac": [mac], "selectable": True} for name, (_, mac) in NODES.items()},
        "include": ["nodes.d/*.yaml"],
    }
    (work / "nodes.d").mkdir(exist_ok=True)
    path = work / "bootserver.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def fleet(admin: str) -> list[dict]:
    with urllib.request.urlopen(admin + "/nodes", timeout=5) as r:
        return json.load(r)["nodes"]


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
                await page.wait_for_selector("#fleet tbody tr")
                await page.screenshot(path=str(path), full_page=True)
            finally:
                await browser.close()

    asyncio.run(shoot())


class Watch:
    """What the playground has told about each machine: the stages it saw (name -> [(stage, unix s)])."""

    def __init__(self, admin: str) -> None:
        self.admin = admin
        self.seen: dict[str, list[tuple[str, float]]] = {}
        self.localboot: set[tuple[str, float]] = set()

    def poll(self, names: list[str], started: dict[str, float]) -> None:
        for name in names:
            try:
                events = life.node_report(self.admin, name)["events"]
            except OSError:
                continue
            stage, mine = "new", self.seen.setdefault(name, [])
            history: list[tuple[str, float]] = []
            for e in events:
                new = next_stage(stage, e["event"], "install")
                if new != stage:
                    history.append((new, e["at"]))
                    stage = new
                if e["event"] == "localboot" and (name, e["at"]) not in self.localboot:
                    self.localboot.add((name, e["at"]))
                    say(f"{name:8} the firmware's next network boot got the local-boot answer (boot-once): "
                        f"it boots its disk ({e['at'] - started.get(name, e['at']):.0f} s)")
            for st, at in history[len(mine):]:
                mine.append((st, at))
                say(f"{name:8} -> {st:10} {MEANING.get(st, '')} ({at - started.get(name, at):.0f} s)")

    def fetching(self) -> bool:
        """Whether a node is between its boot script and its rootfs (its artifact requests are still to
        come: another node's script now would take them)."""
        return any(seen and STAGE_RANK[seen[-1][0]] < STAGE_RANK["rootfs"] for seen in self.seen.values())

    def up(self, name: str) -> bool:
        return bool(self.seen.get(name)) and self.seen[name][-1][0] == "up"


def summary(watch: Watch, machines: dict[str, str], started: dict[str, float], addresses: dict[str, str]) -> str:
    """The table the playground ends with: every machine, its firmware and address, and the second
    (after its power-on) at which it reached each stage of its life."""
    head = ["node", "firmware", "address", *life.LIFE_STAGES]
    rows = [head]
    for name, firmware in machines.items():
        at = dict(watch.seen.get(name, []))
        rows.append([name, firmware, addresses.get(name, "-"),
                     *(f"{at[s] - started[name]:.0f} s" if s in at and name in started else "-"
                       for s in life.LIFE_STAGES)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def run(args: argparse.Namespace, work: Path) -> int:
    tools = rig.find_tools()
    parts = standin.find_standin_tools(tools)
    missing = tools.missing("qemu", "ovmf", "ipxe_efi_rom", "busybox") + parts.missing()
    if missing:
        say("missing: " + "; ".join(missing) + " (run `make playground`, which installs them as .ci/run does)")
        return 2
    say("the installer is a stand-in for CoreOS built from Debian's parts (Debian's kernel, busybox, "
        "Ignition 2.14, curl, SYSLINUX, GRUB): it installs, reboots and checks in as CoreOS does")
    say(f"working in {work}")
    artifacts = standin.build_standin(parts).artifacts()
    port = free_port()
    admin = f"http://127.0.0.1:{port + 1}"
    procs: list[subprocess.Popen] = []
    machines: dict[str, standin.Machine] = {}
    with rig.StaticServer({}) as upstream:
        doc = stream_metadata(upstream.url(""), artifacts)
        for kind, art in doc["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["pxe"].items():
            upstream.routes[art["location"].removeprefix(upstream.url(""))] = artifacts[kind]
        (work / "stream.json").write_text(json.dumps(doc, indent=2))
        (work / "real.ign").write_text(json.dumps(life.real_config(1)[0], indent=2) + "\n")
        config = write_config(work, port)
        bs = bootserver_command()
        subprocess.run([*bs, "sync-images", "--config", str(config)], check=True, timeout=300,
                       stdout=subprocess.DEVNULL)
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
        # the unknown machine first: until it is adopted it only reports itself (no boot script)
        plan = [("unknown", "bios", UNKNOWN_MAC, ["-smbios", UNKNOWN_SMBIOS])]
        plan += [(name, firmware, mac, []) for name, (firmware, mac) in NODES.items()]
        firmwares = {name: firmware for name, firmware, _, _ in plan}
        firmwares[ADOPTED] = firmwares.pop("unknown")
        started: dict[str, float] = {}
        watch = Watch(admin)
        deadline = time.monotonic() + args.minutes * 60
        adopted, discovery = False, None
        while time.monotonic() < deadline:
            watch.poll([*NODES, *([ADOPTED] if adopted else [])], started)
            booting = watch.fetching() or any(n in started and not watch.seen.get(n) for n in NODES)
            if plan and not booting:
                name, firmware, mac, extra = plan.pop(0)
                disk = standin.blank_disk(work / f"{name}.disk")
                m = standin.Machine(tools, firmware, disk, work / f"{name}.log", port, mac, chain, extra=extra)
                m.power_on()
                machines[name] = m
                started.setdefault(name, time.time())
                what = "an unknown machine" if name == "unknown" else f"node {name}"
                say(f"{what} ({mac}): powered on under {firmware.upper()} with an empty disk "
                    f"(serial console: {work / (name + '.log')})")
                continue  # the next round sees it booting
            for mac, facts in discovered(work / "state"):
                if discovery is None and mac == UNKNOWN_MAC:
                    discovery = mac
                    say(f"discovered {mac}: {facts}")
            if discovery and not adopted and not plan and not booting:
                adopted = True
                argv = [*bs, "nodes", "adopt", discovery, "--name", ADOPTED, "--profile", "install",
                        "--config", str(config)]
                say("adopting it: " + " ".join(argv))
                p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
                say((p.stdout + p.stderr).strip().replace("\n", " / ") or f"exit {p.returncode}")
                started[ADOPTED] = time.time()
            if adopted and all(watch.up(n) for n in firmwares):
                break
            for name, m in machines.items():
                if m.proc is not None and m.proc.poll() is not None:
                    say(f"{name}: QEMU ended: {m.tail(5)}")
                    return 1
            time.sleep(0.5)  # polling interval of the status lines, bounded by --minutes
        addresses = {}
        for row in fleet(admin):
            if row["node"] in firmwares:
                with contextlib.suppress(OSError, IndexError, KeyError):
                    addresses[row["node"]] = life.node_report(admin, row["node"])["events"][-1]["ip"] or "-"
        everyone = all(watch.up(n) for n in firmwares)
        if everyone and args.screenshot:
            screenshot(admin + "/", Path(args.screenshot))
            say(f"the page photographed into {args.screenshot}")
        say(f"summary (seconds after each node's power-on, {ADOPTED}'s after its adoption; the address is the one "
            "the server saw, QEMU's forwarder on 127.0.0.1):")
        for line in summary(watch, firmwares, started, addresses).splitlines():
            say("  " + line)
        if everyone:
            say("every machine is up")
            return 0
        say(f"not every machine was up within {args.minutes} minutes")
        return 1
    finally:
        for m in machines.values():
            m.power_off()
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
    p.add_argument("--minutes", type=float, default=10.0, help="give up after this long (default 10)")
    p.add_argument("--screenshot", metavar="PNG", help="photograph the page once every machine is up")
    p.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temp folder, removed)")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the machines and the server as on Ctrl-C
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
