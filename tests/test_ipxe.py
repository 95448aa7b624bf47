"""iPXE scripts: whole-script golden files (smee style) and the rules for what may go into a script."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from support.services import service
from support.signing import fixed_signer

from bootserver.config import parse_config
from bootserver.ipxe import UnsafeValueError, check_script_word
from bootserver.kargs import build_kargs, check_extra_karg

GOLDEN = Path(__file__).parent / "golden"


def golden_config(reference: Path, tmp_path: Path, **live: Any):
    """The golden files' config; ``live``: more keys of the live profile ``fcos-live``."""
    ign = tmp_path / "master.ign"
    ign.write_bytes((reference / "openshift-pointer-master.ign.json").read_bytes())
    return parse_config({
        "server": {"listen": "0.0.0.0:8080", "base_url": "http://boot.example.net:8080"},
        "cache_dir": str(tmp_path / "cache"),
        "streams": {
            "rhcos-4.16": {"metadata": str(reference / "rhcos-stream-4.16.json")},
            "fcos-stable": {"metadata": str(reference / "fcos-stream-stable.json"),
                            "architectures": ["x86_64", "aarch64"]},
        },
        "facilities": {"da11": {"base_url": "http://cache.da11.example.net:8080"}},
        "profiles": {
            "master": {"stream": "rhcos-4.16", "mode": "install", "install_dev": "/dev/sda",
                       "ignition": str(ign), "kargs": ["nosmt"]},
            "fcos-live": {"stream": "fcos-stable", "mode": "live", **live},
            "fcos-arm": {"stream": "fcos-stable", "arch": "aarch64", "mode": "install",
                         "install_dev": "/dev/nvme0n1"},
        },
        "nodes": {
            "master-0": {"profile": "master", "facility": "da11", "mac": "b8:ce:f6:01:02:03"},
            "live-0": {"profile": "fcos-live"},
            "arm-0": {"profile": "fcos-arm", "hostname": "arm-0.example.net"},
        },
    }, "golden.yaml", tmp_path)


@pytest.mark.parametrize("node,golden", [("master-0", "install-rhcos-x86_64.ipxe"),
                                         ("live-0", "live-fcos-x86_64.ipxe"),
                                         ("arm-0", "install-fcos-aarch64.ipxe")])
async def test_script_matches_golden_file(node: str, golden: str, reference: Path, tmp_path: Path) -> None:
    script = await service(golden_config(reference, tmp_path), fixed_signer()).script(node)
    path = GOLDEN / golden
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(script)
    assert script == path.read_text(), f"script differs from {path}; UPDATE_GOLDEN=1 rewrites it"


async def test_live_mode_pairs_platform_packet_with_a_config_url(reference: Path, tmp_path: Path) -> None:
    """An Equinix node in live mode (platform ``packet``) carries a config URL, which outranks the
    platform's userdata (docs/design.md, rule 5)."""
    config = golden_config(reference, tmp_path, provider="equinix")
    script = await service(config, fixed_signer()).script("live-0")
    kernel = next(line for line in script.splitlines() if line.startswith("kernel "))
    assert "ignition.platform.id=packet" in kernel.split()
    assert any(w.startswith("ignition.config.url=http://boot.example.net:8080/ignition/live-0?exp=")
               for w in kernel.split())
    assert "ignition.firstboot" in kernel.split()


@pytest.mark.parametrize("arch,console", [("x86_64", "console=ttyS1,115200n8"),
                                          ("aarch64", "console=ttyAMA0,115200")])
def test_console_by_arch(arch: str, console: str) -> None:
    kargs = build_kargs(arch=arch, mode="install", rootfs_url="http://b/r", stub_url="http://b/s",
                        install_dev="/dev/sda", console=None, extra=())
    assert kargs[0] == "initrd=main"
    assert console in kargs


def test_install_mode_never_emits_platform_id_karg() -> None:
    kargs = build_kargs(arch="x86_64", mode="install", rootfs_url="http://b/r", stub_url="https://b/s",
                        install_dev="/dev/sda", console=None, extra=())
    assert not any(k.startswith("ignition.platform.id") for k in kargs)
    assert "coreos.inst.ignition_url=https://b/s" in kargs and "coreos.inst.platform_id=packet" in kargs


@pytest.mark.parametrize("url", ["ftp://b/r", "tftp://b/r", "file:///r"])
def test_rootfs_and_ignition_urls_must_be_http(url: str) -> None:
    with pytest.raises(ValueError, match="http or https"):
        build_kargs(arch="x86_64", mode="live", rootfs_url=url, stub_url="http://b/s",
                    install_dev=None, console=None, extra=())


@pytest.mark.parametrize("value", ["a${x}", "${net0/mac}", "a&&b", "a||b", "#comment", "two words",
                                   "tab\there", "quote\"d", "it's", "back\\slash", "", "nl\n"])
def test_unsafe_script_words_are_refused(value: str) -> None:
    with pytest.raises(UnsafeValueError):
        check_script_word(value)


@pytest.mark.parametrize("value", ["nosmt", "console=ttyS1,115200n8", "rd.neednet=1", "a#b",
                                   "ip=dhcp", "http://x/y?mac=1&b=2", "$notexpanded"])
def test_safe_script_words_pass(value: str) -> None:
    assert check_script_word(value) == value


@pytest.mark.parametrize("karg", ["initrd=foo", "ignition.platform.id=metal", "coreos.inst.install_dev=/dev/sdb",
                                  "ignition.config.url=http://x", "ignition.firstboot"])
def test_profile_kargs_may_not_override_bootserver_kargs(karg: str) -> None:
    with pytest.raises(UnsafeValueError, match="set by bootserver"):
        check_extra_karg(karg)
