"""Debian's signed boot parts as a stand-in CoreOS release for the Secure Boot e2e tests (the image's,
tests/e2e/test_secureboot.py, and the network's, tests/e2e/test_secureboot_network.py): where
.ci/prepare.d/secureboot-loaders.sh unpacks them, the Secure Boot firmware, a live ISO in CoreOS's layout made
of them, and the kernel without its signature."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

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


