"""What the e2e tests share (their fixtures are in conftest.py, which no test imports): a real ``bootserver``
stack (stream metadata on a local upstream -> ``sync-images`` -> ``serve``), its nodes and config, running
the command line, waiting for a server's health, and whether the real clients (QEMU + iPXE, Ignition) are
here.

When a client binary is missing the tests skip with the reason, except under ``CI`` (any non-empty
value but ``0``/``false``): there they fail, so CI can never skip them silently.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from support.netns import in_ci

from . import rig

E2E_REPO = Path(__file__).resolve().parents[2]


#: Seconds per guest boot; a healthy one takes ~10-20 s under TCG.
BOOT_TIMEOUT = 120.0


def need(tools: rig.Tools, *names: str) -> None:
    """Skip the calling test (fail it under CI) when any of the named tools is missing."""
    missing = tools.missing(*names)
    if missing:
        msg = "e2e tool missing: " + "; ".join(missing) + " (see docs/testing.md)"
        if in_ci():
            pytest.fail(msg + " [CI is set, so this is a failure, not a skip]", pytrace=False)
        pytest.skip(msg)


def bootserver_command() -> list[str]:
    """The installed ``bootserver`` console script next to this interpreter, else ``python -m bootserver``."""
    script = Path(sys.executable).with_name("bootserver")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    found = shutil.which("bootserver")
    return [found] if found else [sys.executable, "-m", "bootserver"]


def run_bootserver(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run one ``bootserver`` command to completion (killed after ``timeout`` seconds); capture output."""
    return subprocess.run([*bootserver_command(), *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout)


@dataclasses.dataclass
class Node:
    """A node of the e2e config: its name, MAC and mode."""

    name: str
    mac: str
    mode: str


#: The nodes every e2e stack serves.
NODES = {
    "install-0": Node("install-0", "52:54:00:e2:e0:01", "install"),
    "live-0": Node("live-0", "52:54:00:e2:e0:02", "live"),
}

#: A node whose profile allows Ignition spec 3.4.0 (``ignition_version``), newer than the 3.3.0 that
#: Debian's Ignition 2.14 reads: it gets a stub it can read only through version negotiation (Accept).
NEWER_SPEC_NODE = Node("live-34", "52:54:00:e2:e0:03", "live")
NEWER_SPEC = "3.4.0"


#: A node with a static network, for the boot image (``bootserver iso``): its address is in QEMU's user
#: network (10.0.2.0/24, gateway 10.0.2.2, DNS 10.0.2.3), so the guest needs no DHCP to reach us.
ISO_NODE = Node("iso-0", "52:54:00:e2:e0:04", "install")
ISO_NETWORK = {
    "interfaces": [{"name": "nic0", "type": "ethernet", "mac-address": ISO_NODE.mac,
                    "ipv4": {"enabled": True, "address": [{"ip": "10.0.2.15", "prefix-length": 24}]}}],
    "routes": {"config": [{"destination": "0.0.0.0/0", "next-hop-address": "10.0.2.2"}]},
    "dns-resolver": {"config": {"server": ["10.0.2.3"]}},
}


#: A node whose machine sits behind an IPMI BMC (tests/e2e/test_ipmi_boot.py): live mode, found by its MAC
#: through the generic entry, as a DHCP server's chain URL finds it; its BMC settings are the test's.
IPMI_NODE = Node("ipmi-0", "52:54:00:e2:e0:05", "live")


@dataclasses.dataclass
class Stack:
    """A running ``bootserver serve`` subprocess with its config, and what it was fed."""

    config: Path
    port: int
    base_url: str  # what the server puts into scripts and stubs (the clients' view)
    artifacts: dict[str, bytes]  # kind (kernel, initramfs, rootfs) -> the bytes served upstream
    metadata: dict  # the stream metadata document bootserver synced
    real_ignition: Path  # the profiles' real Ignition config file
    log: Path  # the server's stdout+stderr

    def local_url(self, path: str) -> str:
        """``http://127.0.0.1:<port><path>``: how the test itself reaches the server."""
        return f"http://127.0.0.1:{self.port}{path}"

    def render(self, what: str, node: str) -> str:
        """Return ``bootserver render <what> <node>``'s output; fails the test on a non-zero exit."""
        p = run_bootserver("render", what, node, "--config", str(self.config), timeout=60)
        assert p.returncode == 0, f"bootserver render {what} {node} exited {p.returncode}: {p.stderr}"
        return p.stdout

    def chain_path(self, node: str) -> str:
        """Path and query of the node's signed chain URL, as ``bootserver url NODE`` issues it."""
        p = run_bootserver("url", node, "--config", str(self.config), timeout=60)
        assert p.returncode == 0, f"bootserver url {node} exited {p.returncode}: {p.stderr}"
        parts = urllib.parse.urlsplit(p.stdout.splitlines()[0])
        return f"{parts.path}?{parts.query}"

    def stub_url(self, node: str) -> str:
        """The node's signed stub URL, as its script's kargs carry it."""
        return self.base_url + self.stub_path(node)

    def stub_path(self, node: str) -> str:
        """Path and query of the node's signed stub URL, taken from the kargs of its script."""
        for word in self.render("ipxe", node).split():
            if word.startswith(("coreos.inst.ignition_url=", "ignition.config.url=")):
                parts = urllib.parse.urlsplit(word.split("=", 1)[1])
                return f"{parts.path}?{parts.query}"
        raise AssertionError(f"no stub URL in the script of {node}")

    def sha256(self, kind: str) -> str:
        """The sha256 the stream metadata gives for artifact ``kind``."""
        return self.metadata["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["pxe"][kind]["sha256"]


#: The console karg of the e2e profiles: the guest's second serial port (tests/e2e/rig.py, ``qemu_command``).
SERIAL_CONSOLE = "console=ttyS1,115200n8"

#: The real Ignition config the e2e profiles merge: self-contained (no further remote sources).
REAL_IGNITION = {
    "ignition": {"version": "3.2.0"},
    "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE2Ee2E e2e"]}]},
    "storage": {"files": [{"path": "/etc/e2e-marker", "mode": 420,
                           "contents": {"source": "data:,bootserver%20e2e%20real%20config%0A"}}]},
}


def stream_metadata(upstream_url: str, artifacts: dict[str, bytes], release: str = "40.20240101.3.0",
                    arch: str = "x86_64") -> dict:
    """A CoreOS stream metadata document (FCOS format) whose ``arch`` metal PXE artifacts live on
    ``upstream_url`` with the sha256 of ``artifacts`` (kind -> bytes)."""
    names = {"kernel": f"fedora-coreos-{release}-live-kernel.{arch}",
             "initramfs": f"fedora-coreos-{release}-live-initramfs.{arch}.img",
             "rootfs": f"fedora-coreos-{release}-live-rootfs.{arch}.img"}
    pxe = {kind: {"location": f"{upstream_url}/{release}/{names[kind]}",
                  "sha256": hashlib.sha256(data).hexdigest()} for kind, data in artifacts.items()}
    return {
        "stream": "e2e",
        "metadata": {"last-modified": "2024-01-01T00:00:00Z", "generator": "bootserver e2e"},
        "architectures": {arch: {"artifacts": {"metal": {"release": release, "formats": {"pxe": pxe}}}}},
    }



def serve_release(upstream: rig.StaticServer, artifacts: dict[str, bytes], arch: str = "x86_64") -> dict:
    """Put ``artifacts`` (kind -> bytes) on ``upstream`` at the places :func:`stream_metadata` names for
    ``arch``, and return that metadata document."""
    doc = stream_metadata(upstream.url(""), artifacts, arch=arch)
    for kind, art in doc["architectures"][arch]["artifacts"]["metal"]["formats"]["pxe"].items():
        upstream.routes[art["location"].removeprefix(upstream.url(""))] = artifacts[kind]
    return doc


def write_stack_config(work: Path, name: str, port: int, base_url: str, state_dir: Path | None = None) -> Path:
    """Write a bootserver config in ``work`` (shared cache, metadata from ``stream.json``) and return it.

    ``state_dir`` (the node timeline, boot-once) defaults to ``work/state``; give each server its own,
    or one test's boots change what the next test's nodes are served."""
    doc = {
        "server": {"listen": f"127.0.0.1:{port}", "base_url": base_url},
        "cache_dir": str(work / "cache"),
        "state_dir": str(state_dir or work / "state"),
        "streams": {"fcos-e2e": {"metadata": str(work / "stream.json")}},
        # the nodes have no provider, so platform metal, which names no console: the profiles name the
        # guest's second serial port, which the rig reads (as an operator names their machines' own)
        "profiles": {
            "e2e-install": {"stream": "fcos-e2e", "mode": "install", "install_dev": "/dev/vda",
                            "ignition": "real.ign", "console": SERIAL_CONSOLE},
            "e2e-live": {"stream": "fcos-e2e", "mode": "live", "ignition": "real.ign", "console": SERIAL_CONSOLE},
            # a machine behind a BMC boots platform metal, which names no console: this one says where
            "e2e-live-ttys0": {"stream": "fcos-e2e", "mode": "live", "ignition": "real.ign",
                               "console": "console=ttyS0,115200n8"},
            "e2e-live-newer-spec": {"stream": "fcos-e2e", "mode": "live", "ignition": "real.ign",
                                    "ignition_version": NEWER_SPEC, "console": SERIAL_CONSOLE},
        },
        # selectable: /boot.ipxe?mac= may hand out the script (the guest reaches us through a forwarder
        # on 127.0.0.1, so a source-address binding would prove nothing here)
        "nodes": {n.name: {"profile": f"e2e-{n.mode}", "mac": n.mac, "selectable": True} for n in NODES.values()},
    }
    doc["nodes"][NEWER_SPEC_NODE.name] = {"profile": "e2e-live-newer-spec", "mac": NEWER_SPEC_NODE.mac}
    doc["nodes"][ISO_NODE.name] = {"profile": "e2e-install", "mac": ISO_NODE.mac, "network": ISO_NETWORK}
    doc["nodes"][IPMI_NODE.name] = {"profile": "e2e-live-ttys0", "mac": IPMI_NODE.mac, "selectable": True,
                                    "provider": "ipmi"}
    path = work / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


