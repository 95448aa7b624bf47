"""Debian's signed boot parts as a stand-in CoreOS release for the Secure Boot e2e tests (the image's,
tests/e2e/test_secureboot.py, and the network's, tests/e2e/test_secureboot_network.py): where
.ci/prepare.d/secureboot-loaders.sh unpacks them, the Secure Boot firmware and the QEMU machine that runs
it, a live ISO in CoreOS's layout made of them, the kernel without its signature, and a running
``bootserver serve`` whose two streams offer that release signed and unsigned."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.helpers import free_port
from support.netns import in_ci
from support.server import serving

from . import rig
from .stack import REAL_IGNITION, Stack, bootserver_command, need, run_bootserver, stream_metadata

#: Debian's signed loaders, unpacked by .ci/prepare.d/secureboot-loaders.sh.
SIGNED_DIR = Path(os.environ.get("BOOTSERVER_E2E_SECUREBOOT_DIR", "/var/cache/bootserver-e2e/secureboot"))
SHIM = SIGNED_DIR / "usr/lib/shim/shimx64.efi.signed"
MOKMANAGER = SIGNED_DIR / "usr/lib/shim/mmx64.efi.signed"
CD_GRUB = SIGNED_DIR / "usr/lib/grub/x86_64-efi-signed/gcdx64.efi.signed"
#: Debian's Secure Boot firmware (package ovmf): code with Secure Boot, variables with Microsoft's keys.
OVMF_CODE = Path("/usr/share/OVMF/OVMF_CODE_4M.secboot.fd")
OVMF_VARS = Path("/usr/share/OVMF/OVMF_VARS_4M.ms.fd")


def network(mac: str) -> dict:
    return {"interfaces": [{"name": "nic0", "type": "ethernet", "mac-address": mac,
                            "ipv4": {"enabled": True, "address": [{"ip": "10.0.2.15", "prefix-length": 24}]}}],
            "routes": {"config": [{"destination": "0.0.0.0/0", "next-hop-address": "10.0.2.2"}]},
            "dns-resolver": {"config": {"server": ["10.0.2.3"]}}}


def missing_parts() -> list[str]:
    parts = [(SHIM, "run .ci/prepare.d/secureboot-loaders.sh"), (CD_GRUB, "run .ci/prepare.d/secureboot-loaders.sh"),
             (OVMF_CODE, "Debian package ovmf"), (OVMF_VARS, "Debian package ovmf")]
    found = [f"{p} ({hint})" for p, hint in parts if not p.is_file()]
    found += [f"{tool} (Debian package {pkg})" for tool, pkg in (("sbattach", "sbsigntool"), ("mcopy", "mtools"),
                                                                  ("xorriso", "xorriso")) if not shutil.which(tool)]
    return found


def live_iso(work: Path, kernel: bytes, initramfs: bytes, grub: Path = CD_GRUB) -> bytes:
    """A live ISO in CoreOS's layout made of Debian's signed parts (see the module's docstring); ``grub``
    is the GRUB put in as ``grubx64.efi`` (the network test puts Debian's network GRUB there)."""
    tree = work / "live-tree"
    (tree / "images" / "pxeboot").mkdir(parents=True)
    (tree / "images" / "pxeboot" / "vmlinuz").write_bytes(kernel)
    (tree / "images" / "pxeboot" / "initrd.img").write_bytes(initramfs)
    (tree / "boot" / "grub").mkdir(parents=True)
    (tree / "boot" / "grub" / "grub.cfg").write_text("echo 'the live ISO of the test release'\n")
    (tree / ".disk").mkdir()
    (tree / ".disk" / "info").write_text("bootserver e2e test release\n")
    efi = tree / "images" / "efiboot.img"
    with open(efi, "wb") as f:
        f.truncate(8 << 20)
    subprocess.run(["mformat", "-i", str(efi), "-T", str(8 * 2048), "-h", "64", "-s", "32", "-v", "EFI-SYSTEM", "::"],
                   check=True, timeout=60)
    subprocess.run(["mmd", "-i", str(efi), "::/EFI", "::/EFI/BOOT"], check=True, timeout=60)
    for src, name in ((SHIM, "BOOTX64.EFI"), (grub, "grubx64.efi"), (MOKMANAGER, "mmx64.efi")):
        subprocess.run(["mcopy", "-i", str(efi), str(src), f"::/EFI/BOOT/{name}"], check=True, timeout=60)
    out = work / "live.iso"
    subprocess.run(["xorriso", "-as", "mkisofs", "-quiet", "-o", str(out), "-V", "e2e-live", str(tree)],
                   check=True, timeout=120, capture_output=True)
    shutil.rmtree(tree)
    return out.read_bytes()


def unsigned(kernel: Path, work: Path) -> bytes:
    """``kernel`` with its Authenticode signature removed (``sbattach --remove``)."""
    out = work / "vmlinuz-unsigned"
    shutil.copyfile(kernel, out)
    subprocess.run(["sbattach", "--remove", str(out)], check=True, timeout=60, capture_output=True)
    data = out.read_bytes()
    assert data != kernel.read_bytes()
    return data




def secure_boot_machine(vars_file: Path, log: Path) -> list[str]:
    """The QEMU argv (without disks or NICs) of a q35 machine with SMM and Debian's Secure Boot OVMF
    (:data:`OVMF_CODE` read-only, ``vars_file`` a copy of :data:`OVMF_VARS`), its serial ports logged as
    :func:`rig.run_guest` reads them (``log`` and :func:`rig.second_serial_log`)."""
    return ["qemu-system-x86_64", "-machine", "q35,smm=on,accel=tcg", "-m", "512", "-smp", "1",
            "-nodefaults", "-display", "none", "-no-reboot",
            "-global", "driver=cfi.pflash01,property=secure,value=on", "-global", "ICH9-LPC.disable_s3=1",
            "-drive", f"if=pflash,format=raw,unit=0,file={OVMF_CODE},readonly=on",
            "-drive", f"if=pflash,format=raw,unit=1,file={vars_file}",
            "-chardev", f"file,id=s0,path={log}", "-serial", "chardev:s0",
            "-chardev", f"file,id=s1,path={rig.second_serial_log(log)}", "-serial", "chardev:s1"]


@contextlib.contextmanager
def release_stack(tools: rig.Tools, initramfs: Path, work: Path, streams: tuple[str, str], nodes: dict[str, dict],
                  grub: Path = CD_GRUB, also_missing: tuple[str, ...] = ()) -> Iterator[Stack]:
    """A ``bootserver serve`` (``base_url`` the guest's view, ``rig.GUEST_HOST``) whose two ``secure_boot``
    streams offer the test release, synced through a local upstream: ``streams[0]`` with Debian's signed
    e2e kernel, ``streams[1]`` with the same kernel unsigned, both with the live ISO of :func:`live_iso`
    (``grub`` as its ``grubx64.efi``), the test ``initramfs`` and a random 1 MiB rootfs (``Stack.artifacts``).
    ``nodes`` is the config's ``nodes:`` mapping (a profile per stream, of the stream's name); the files go
    to ``work``. Skips the test (fails it under CI) when a part is missing, ``also_missing`` among them."""
    need(tools, "qemu", "busybox", "vmlinuz")
    missing = [*missing_parts(), *also_missing]
    if missing:
        msg = "Secure Boot e2e parts missing: " + "; ".join(missing)
        if in_ci():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    assert tools.vmlinuz
    kernel, initramfs_bytes = Path(tools.vmlinuz).read_bytes(), initramfs.read_bytes()
    iso = live_iso(work, kernel, initramfs_bytes, grub=grub)
    rootfs = os.urandom(1 << 20)
    with rig.StaticServer({}) as upstream:
        config_streams = {}
        for name, k in zip(streams, (kernel, unsigned(Path(tools.vmlinuz), work)), strict=True):
            arts = {"kernel": k, "initramfs": initramfs_bytes, "rootfs": rootfs}
            doc = stream_metadata(upstream.url(f"/{name}"), arts)
            metal = doc["architectures"]["x86_64"]["artifacts"]["metal"]
            release = metal["release"]
            metal["formats"]["iso"] = {"disk": {"location": upstream.url(f"/{name}/{release}/live.x86_64.iso"),
                                                "sha256": hashlib.sha256(iso).hexdigest()}}
            for kind, art in metal["formats"]["pxe"].items():
                upstream.routes[urllib.parse.urlsplit(art["location"]).path] = arts[kind]
            upstream.routes[f"/{name}/{release}/live.x86_64.iso"] = iso
            (work / f"{name}.json").write_text(json.dumps(doc))
            config_streams[name] = {"metadata": str(work / f"{name}.json")}
        (work / "real.ign").write_text(json.dumps(REAL_IGNITION))
        port = free_port()
        base_url = f"http://{rig.GUEST_HOST}:{port}"
        doc = {"server": {"listen": f"127.0.0.1:{port}", "base_url": base_url},
               "cache_dir": str(work / "cache"), "state_dir": str(work / "state"), "streams": config_streams,
               "profiles": {name: {"stream": name, "mode": "install", "install_dev": "/dev/vda",
                                   "ignition": "real.ign", "secure_boot": True,
                                   # no provider: platform metal, no console of its own; the rig reads ttyS1
                                   "console": "console=ttyS1,115200n8"} for name in config_streams},
               "nodes": nodes}
        config = work / "bootserver.yaml"
        config.write_text(yaml.safe_dump(doc, sort_keys=False))
        p = run_bootserver("sync-images", "--config", str(config), timeout=300)
        assert p.returncode == 0, p.stderr
        log = work / "serve.log"
        with serving(["--config", str(config)], f"http://127.0.0.1:{port}/healthz", log,
                     command=bootserver_command()):
            yield Stack(config=config, port=port, base_url=base_url, artifacts={"rootfs": rootfs}, metadata=doc,
                        real_ignition=work / "real.ign", log=log)
