"""The agent-based installer's PXE files on real firmware (issue 51 item 4): ``bootserver openshift
import`` of an install directory as ``openshift-install agent create pxe-files`` leaves it
(install-config.yaml and agent-config.yaml of the installer's public example
tests/data/openshift/agent-pxe-compact-external.txt, one host added, ``boot-artifacts/`` with the
agent's vmlinuz, initrd.img, rootfs.img and ``agent.x86_64.ipxe``), then one machine under SeaBIOS boots
through iPXE with exactly the installer's kernel line, bootserver's signed URLs in place of the
installer's, and fetches the rootfs; a machine with another MAC, asking as iPXE asks, gets none of it.

Stand-ins, because the real agent cannot run here: the PXE files are the session's guest parts (Debian's
kernel, the test initramfs whose ``/init`` reports ``/proc/cmdline`` and the rootfs's sha256, a random
rootfs: ``e2e_source``); the script's shape is the installer's (its test greps it). One boot, ~15 s.
"""

from __future__ import annotations

import hashlib
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from support.helpers import free_port
from support.server import serving

from . import rig
from .stack import BOOT_TIMEOUT, bootserver_command, need, run_bootserver

pytestmark = pytest.mark.e2e

DATA = Path(__file__).resolve().parents[1] / "data"
MAC, OTHER_MAC = "52:54:00:e2:a9:01", "52:54:00:e2:a9:02"
#: The installer's arguments after its URLs on the external platform (its test greps
#: ``.*ignition.firstboot ignition.platform.id=metal console=ttyS0``; ``rw`` leads the RHCOS live ISO's).
KARGS = "rw ignition.firstboot ignition.platform.id=metal console=ttyS0"
BASE = "http://user-specified-pxe-infra.com"


def agent_dir(path: Path, artifacts: dict[str, bytes]) -> Path:
    """The install directory after ``agent create pxe-files`` (module docstring)."""
    from test_openshift import txtar

    sections = txtar(DATA / "openshift" / "agent-pxe-compact-external.txt")
    ic = yaml.safe_load(sections["install-config.yaml"])
    # the guest reaches the server through QEMU's user network forwarder, which connects from 127.0.0.1
    ic["networking"]["machineNetwork"] = [{"cidr": "127.0.0.0/8"}]
    ac = yaml.safe_load(sections["agent-config.yaml"])
    ac["hosts"] = [{"hostname": "agent-0", "role": "master", "interfaces": [{"name": "nic0", "macAddress": MAC}]}]
    (path / "boot-artifacts").mkdir(parents=True)
    (path / "install-config.yaml").write_text(yaml.safe_dump(ic))
    (path / "agent-config.yaml").write_text(yaml.safe_dump(ac))
    for kind, name in (("kernel", "vmlinuz"), ("initramfs", "initrd.img"), ("rootfs", "rootfs.img")):
        (path / "boot-artifacts" / f"agent.x86_64-{name}").write_bytes(artifacts[kind])
    (path / "boot-artifacts" / "agent.x86_64.ipxe").write_text(
        f"#!ipxe\ninitrd --name initrd {BASE}/agent.x86_64-initrd.img\n"
        f"kernel {BASE}/agent.x86_64-vmlinuz initrd=initrd coreos.live.rootfs_url={BASE}/agent.x86_64-rootfs.img "
        f"{KARGS}\nboot\n")
    return path


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_an_agent_host_boots_the_installers_kernel_line_and_another_mac_gets_none_of_it(
        tools: rig.Tools, e2e_source: tuple[Path, dict[str, bytes], dict], tmp_path: Path) -> None:
    need(tools, "qemu", "ipxe_lkrn", "busybox")
    _, artifacts, _ = e2e_source
    inst = agent_dir(tmp_path / "ostest", artifacts)
    port, admin = free_port(), free_port()
    config = tmp_path / "bootserver.yaml"
    config.write_text(yaml.safe_dump({
        "server": {"listen": f"127.0.0.1:{port}", "base_url": rig.guest_url(port, ""),
                   "admin": {"listen": f"127.0.0.1:{admin}"}},
        "cache_dir": str(tmp_path / "cache"), "state_dir": str(tmp_path / "state"), "include": ["clusters/*.yaml"]}))
    p = run_bootserver("openshift", "import", str(inst), "--config", str(config),
                       "--output", str(tmp_path / "clusters" / "ostest.yaml"))
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "agent-0: created"
    local = f"http://127.0.0.1:{port}"
    with serving(["--config", str(config)], f"{local}/healthz", tmp_path / "serve.log", command=bootserver_command()):
        result = rig.boot_ipxe(tools, rig.guest_url(port, "/boot.ipxe?mac=${net0/mac}"), tmp_path / "serial.log",
                               port=port, timeout=BOOT_TIMEOUT, mac=MAC, firmware="bios")
        assert result.reached_init, f"the guest never ran the initrd's /init:\n{result.tail(60)}"
        assert result.done and result.failure is None, f"/init failed: {result.failure}\n{result.tail(60)}"
        # exactly the installer's kernel line, its two URLs ours (initrd=main: our initrd --name main)
        assert result.cmdline is not None
        words = result.cmdline.split()
        rootfs_url = words[1].removeprefix("coreos.live.rootfs_url=")
        assert " ".join(words) == f"initrd=main coreos.live.rootfs_url={rootfs_url} {KARGS}"
        parts = urllib.parse.urlsplit(rootfs_url)
        assert f"{parts.scheme}://{parts.netloc}" == rig.guest_url(port, "")
        assert parts.path.startswith("/artifacts/ostest-agent/x86_64/agent-")
        assert urllib.parse.parse_qs(parts.query)["node"] == ["agent-0"]
        assert result.rootfs_sha256 == hashlib.sha256(artifacts["rootfs"]).hexdigest()
        # another MAC, asking as iPXE asks: the discovery answer, nothing of the agent's
        status, body = get(f"{local}/boot.ipxe?mac={urllib.parse.quote(OTHER_MAC)}")
        assert status == 200 and b"discover?" in body
        assert b"ostest" not in body and b"/artifacts/" not in body and b"kernel " not in body
        # nor the artifacts: unsigned, or the booted host's URL with another name in it
        query = urllib.parse.parse_qs(parts.query)
        initrd = parts.path.replace("rootfs.img", "initrd.img")
        for path in (initrd, f"{initrd}?node=agent-1&exp={query['exp'][0]}&sig={query['sig'][0]}",
                     f"{initrd}?{parts.query}"):
            assert get(f"{local}{path}") == (403, b"forbidden\n"), path
        # the host fetched its whole rootfs: installing, and its next network boot boots its disk (no install loop)
        deadline = time.monotonic() + 30
        while json.loads(get(f"http://127.0.0.1:{admin}/nodes/agent-0")[1])["stage"] != "installing":
            assert time.monotonic() < deadline, get(f"http://127.0.0.1:{admin}/nodes/agent-0")
            time.sleep(0.2)
        status, body = get(f"{local}/boot.ipxe?mac={urllib.parse.quote(MAC)}")
        assert status == 200 and b"exit 1" in body and b"kernel " not in body, body.decode()
