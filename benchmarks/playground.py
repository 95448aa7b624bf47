"""The playground (``make playground``): the whole life of three machines on this one computer, no internet.

The installer is a **stand-in for CoreOS built from Debian's parts** (``tests/e2e/standin.py``: Debian's
kernel, busybox, the real Ignition 2.14, curl, SYSLINUX and GRUB; real CoreOS images cannot be fetched
here). A local upstream on 127.0.0.1 serves it as a stream and ``sync-images`` mirrors it. Then a network
of the playground's own (a network namespace with a bridge, ``192.0.2.1/24``; nothing leaves it) runs
``bootserver serve`` and the DHCP engine, ``bootserver dhcp`` (dnsmasq, ``mode: full``: the nodes'
addresses reserved, a pool for other machines, TFTP for the UEFI firmware's PXE). The page is forwarded
to 127.0.0.1 on this computer. Three QEMU machines (TCG) on taps of that bridge, each with an empty disk
and its NIC first in the boot order, as servers are:

* ``pg-bios``: a node at ``192.0.2.11``, under SeaBIOS (iPXE's PXE ROM); ``pg-uefi``: a node at
  ``192.0.2.12``, under OVMF (the firmware's own PXE loads iPXE over TFTP). Each gets its address from the
  engine, installs (the live system fetches its rootfs and the stub and writes its disk), reboots, gets
  the local-boot answer on its next network boot (boot-once), boots its disk, where the real Ignition
  merges the real config, and its check-in unit reports it ``up``;
* an unknown machine (SMBIOS facts set with ``-smbios``), which gets a pool address: it shows up as
  discovered; the playground adopts it (and prints the command), and it installs and comes ``up`` too,
  without a reset.

One line per stage change (``dhcp`` and ``tftp`` too, from the engine); the end is a table of every
machine's address and stages with their times since its power-on, and a line for each reason of a ``-``
in it (a stage that machine's boot has not, or did not reach). It stops when every machine is ``up``
(exit 0), after ``--minutes`` (default 10; exit 1), or on Ctrl-C or SIGTERM, and always stops its
machines, the engine and the server and removes its network. Needs root (the network namespace).

Usage: python benchmarks/playground.py [--minutes 10] [--screenshot PNG] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bootserver.timeline import next_stage

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from e2e import life, netboot, rig, standin  # noqa: E402 (tests/ is on sys.path above)
from e2e.stack import bootserver_command, stream_metadata  # noqa: E402
from support.helpers import free_port  # noqa: E402
from support.netns import BRIDGE, SERVER_IPV4, TestNetwork, unavailable  # noqa: E402

NODES = {"pg-bios": ("bios", "52:54:00:9a:00:01", "192.0.2.11"), "pg-uefi": ("uefi", "52:54:00:9a:00:02", "192.0.2.12")}
#: The engine's pool, for machines that are not nodes (the unknown one).
POOL = "192.0.2.100-192.0.2.150"
UNKNOWN_MAC = "52:54:00:9a:00:99"
UNKNOWN_SMBIOS = "type=1,manufacturer=Playground Labs,product=Mystery Box,serial=PG-0042"
ADOPTED = "pg-new"
#: What each stage means, for the line that announces it.
MEANING = {
    "dhcp": "the DHCP engine answered its firmware", "tftp": "its firmware loaded iPXE over TFTP",
    "ipxe": "iPXE got its boot script", "kernel": "fetching the live kernel",
    "initramfs": "fetching the live initramfs", "rootfs": "the live system fetches its rootfs",
    "installing": "the installer fetched the Ignition stub and writes the disk",
    "installed": "first boot from the disk: Ignition merged the real config", "up": "its check-in unit reported in",
    "reinstall": "marked for reinstall",
}


def say(text: str) -> None:
    print(f"playground: {text}", flush=True)


def write_config(work: Path, admin_port: int) -> Path:
    doc = {
        "server": {"listen": f"{SERVER_IPV4}:{netboot.PORT}", "base_url": netboot.BASE_URL,
                   "admin": {"listen": f"127.0.0.1:{admin_port}"}, "discovery": {"every": 5}},
        "cache_dir": str(work / "cache"), "state_dir": str(work / "state"),
        "streams": {"playground": {"metadata": str(work / "stream.json")}},
        # platform metal: a machine of one's own, not an Equinix device; the stand-in's console is ttyS0
        "profiles": {"install": {"stream": "playground", "mode": "install", "install_dev": "/dev/vda",
                                 "platform_id": "metal", "console": "console=ttyS0,115200n8", "ignition": "real.ign"}},
        # a static address each: the engine reserves it, the kargs carry it (ip=...), and the node's script
        # goes to that address only
        "nodes": {name: {"profile": "install", "mac": mac, "addresses": [ip],
                         "network": netboot.static_network(mac, f"{ip}/24")} for name, (_, mac, ip) in NODES.items()},
        "dhcp": {"interface": BRIDGE, "mode": "full", "range": POOL, "lease_time": "1h"},
        "include": ["nodes.d/*.yaml"],
    }
    (work / "nodes.d").mkdir(exist_ok=True)
    path = work / "bootserver.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


class Forward:
    """The page, forwarded from ``127.0.0.1:<port>`` here to the admin listener on ``127.0.0.1:<port>``
    inside ``net`` (the same port, so the page's own address checks hold): each connection accepted here
    is handed to a ``busybox nc`` run inside the network (``ip netns exec``)."""

    def __init__(self, net: TestNetwork, busybox: str, port: int) -> None:
        import socket
        import threading

        self.sock = socket.create_server(("127.0.0.1", port))
        self.port = port
        self.argv = net.command([busybox, "nc", "127.0.0.1", str(port)])
        self.children: list[subprocess.Popen] = []
        threading.Thread(target=self._serve, name="playground-forward", daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            with conn:
                self.children.append(subprocess.Popen(self.argv, stdin=conn.fileno(), stdout=conn.fileno(),
                                                      stderr=subprocess.DEVNULL))
            self.children = [c for c in self.children if c.poll() is None]

    def close(self) -> None:
        self.sock.close()
        for c in self.children:
            if c.poll() is None:
                c.kill()
            c.wait(timeout=10)


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

    def up(self, name: str) -> bool:
        return bool(self.seen.get(name)) and self.seen[name][-1][0] == "up"


def no_time(name: str, firmware: str, stage: str) -> str:
    """Why ``name``'s row of the summary has ``-`` for ``stage``: the first mile has stages that a
    machine's boot may not have; any other ``-`` is a stage it did not reach."""
    if firmware == "bios" and stage == "tftp":
        return "under SeaBIOS the NIC's option ROM is iPXE itself, so nothing is loaded over TFTP"
    if name == ADOPTED and stage == "dhcp":
        return "its DHCP answer (a pool address) came before its adoption, when it was no node"
    return "not reached"


def summary(watch: Watch, machines: dict[str, str], started: dict[str, float], addresses: dict[str, str]) -> str:
    """The table the playground ends with: every machine, its firmware and address, and the second
    (after its power-on) at which it reached each stage of its life; then a line per reason for a ``-``
    (:func:`no_time`), naming the machines and stages it stands for."""
    stages = ("dhcp", "tftp", *life.LIFE_STAGES)
    head = ["node", "firmware", "address", *stages]
    rows = [head]
    why: dict[str, list[str]] = {}
    for name, firmware in machines.items():
        at = dict(watch.seen.get(name, []))
        rows.append([name, firmware, addresses.get(name, "-"),
                     *(f"{at[s] - started[name]:.0f} s" if s in at and name in started else "-"
                       for s in stages)])
        for s in stages:
            if s not in at or name not in started:
                why.setdefault(no_time(name, firmware, s), []).append(f"{name} {s}")
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    table = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join([*table, *(f"- ({', '.join(where)}): {reason}" for reason, where in why.items())])


def run(args: argparse.Namespace, work: Path) -> int:
    tools = rig.find_tools()
    parts = standin.find_standin_tools(tools)
    missing = tools.missing("qemu", "ovmf", "ipxe_efi_rom", "busybox") + parts.missing()
    if missing or unavailable():
        say("missing: " + "; ".join([*missing, *filter(None, [unavailable()])])
            + " (run `make playground` as root, which installs what is missing as .ci/run does)")
        return 2
    say("the installer is a stand-in for CoreOS built from Debian's parts (Debian's kernel, busybox, "
        "Ignition 2.14, curl, SYSLINUX, GRUB): it installs, reboots and checks in as CoreOS does")
    say(f"working in {work}")
    artifacts = standin.build_standin(parts).artifacts()
    bs = bootserver_command()
    with rig.StaticServer({}) as upstream:
        doc = stream_metadata(upstream.url(""), artifacts)
        for kind, art in doc["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["pxe"].items():
            upstream.routes[art["location"].removeprefix(upstream.url(""))] = artifacts[kind]
        (work / "stream.json").write_text(json.dumps(doc, indent=2))
        (work / "real.ign").write_text(json.dumps(life.real_config(1)[0], indent=2) + "\n")
        admin_port = free_port()
        config = write_config(work, admin_port)
        subprocess.run([*bs, "sync-images", "--config", str(config)], check=True, timeout=300,
                       stdout=subprocess.DEVNULL)
    machines: dict[str, standin.Machine] = {}
    forward = None
    try:
        with TestNetwork("life-pg") as net:
            try:
                net.start([*bs, "serve", "--config", str(config)], log=work / "serve.log")
                end = time.monotonic() + 30
                while net.http_get(f"http://127.0.0.1:{admin_port}/healthz", timeout=2)[0] != 200:
                    if time.monotonic() > end:
                        say("the server did not start: " + (work / "serve.log").read_text()[-2000:])
                        return 1
                net.start([*bs, "dhcp", "--config", str(config)], log=work / "dhcp.log")
                say(f"a network of its own: namespace {net.name}, bridge {BRIDGE} at {SERVER_IPV4}/24; "
                    f"bootserver serve and bootserver dhcp (dnsmasq, full mode, pool {POOL}) run there "
                    f"(logs: {work / 'serve.log'}, {work / 'dhcp.log'})")
                forward = Forward(net, tools.busybox or "", admin_port)
                admin = f"http://127.0.0.1:{forward.port}"
                say(f"the page: {admin}/")
                chain = f"{netboot.BASE_URL}/boot.ipxe?mac=${{net0/mac}}"
                plan = [("unknown", "bios", UNKNOWN_MAC, None, ["-smbios", UNKNOWN_SMBIOS])]
                plan += [(name, firmware, mac, ip, []) for name, (firmware, mac, ip) in NODES.items()]
                firmwares = {**{name: firmware for name, (firmware, _, _) in NODES.items()}, ADOPTED: "bios"}
                started: dict[str, float] = {}
                for i, (name, firmware, mac, ip, extra) in enumerate(plan):
                    disk = standin.blank_disk(work / f"{name}.disk")
                    tap = net.tap(f"tap{i}")
                    m = standin.Machine(tools, firmware, disk, work / f"{name}.log", netboot.PORT, mac, chain,
                                        extra=extra, tap=(net.command([]), tap))
                    m.power_on()
                    machines[name] = m
                    started[name] = time.time()
                    what = "an unknown machine" if name == "unknown" else f"node {name} ({ip})"
                    say(f"{what}, {mac}: powered on under {firmware.upper()} with an empty disk "
                        f"(serial console: {work / (name + '.log')})")
                watch = Watch(admin)
                deadline = time.monotonic() + args.minutes * 60
                adopted = False
                while time.monotonic() < deadline:
                    watch.poll([*NODES, *([ADOPTED] if adopted else [])], started)
                    for mac, facts in discovered(work / "state"):
                        if not adopted and mac == UNKNOWN_MAC:
                            adopted = True
                            say(f"discovered {mac}: {facts}")
                            argv = [*bs, "nodes", "adopt", "--file=", mac, "--name", ADOPTED, "--profile", "install",
                                    "--config", str(config)]
                            say("adopting it: " + " ".join(argv))
                            p = net.run(argv, timeout=120)
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
                for name in firmwares:
                    with contextlib.suppress(OSError, IndexError, KeyError):
                        addresses[name] = next(e["ip"] for e in reversed(life.node_report(admin, name)["events"])
                                               if e["event"] == "checkin")
                everyone = all(watch.up(n) for n in firmwares)
                if everyone and args.screenshot:
                    screenshot(admin + "/", Path(args.screenshot))
                    say(f"the page photographed into {args.screenshot}")
                say(f"summary (seconds after each node's power-on, {ADOPTED}'s after its adoption; the address it "
                    "checked in from):")
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
                if forward is not None:
                    forward.close()
    finally:  # leaving the network stopped serve and the engine (by process group) and removed the namespace
        say("machines, engine and server stopped")


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
