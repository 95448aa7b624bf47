"""bootserver.kargs: a node's kernel arguments (install and live, the console by platform and arch, the
network's and the profile's extra arguments) and the kernel's command line limit. Pure."""

from __future__ import annotations

import pytest

from bootserver.kargs import COMMAND_LINE_SIZE, CommandLineTooLong, build_kargs, check_command_line

ROOTFS, STUB = "http://b/rootfs.img", "http://b/ignition/n?exp=1&sig=x"


def kargs(**given: object) -> tuple[str, ...]:
    return build_kargs(**{"arch": "x86_64", "mode": "install", "rootfs_url": ROOTFS, "stub_url": STUB,
                          "install_dev": "/dev/sda", "console": None, "extra": (), **given})  # type: ignore[arg-type]


def test_install_and_live_carry_their_own_arguments_in_order() -> None:
    assert kargs(platform="metal") == ("initrd=main", f"coreos.live.rootfs_url={ROOTFS}",
                                       "coreos.inst.install_dev=/dev/sda", f"coreos.inst.ignition_url={STUB}",
                                       "coreos.inst.platform_id=metal")
    live = kargs(mode="live", install_dev=None, platform="metal", network=("ip=dhcp6",), extra=("nosmt",))
    assert live[2:] == ("ignition.firstboot", "ignition.platform.id=metal", f"ignition.config.url={STUB}",
                        "ip=dhcp6", "nosmt")


def test_the_console_follows_platform_and_arch() -> None:
    assert "console=ttyS1,115200n8" in kargs(platform="packet")
    assert not [k for k in kargs(platform="metal") if k.startswith("console=")]
    assert "console=ttyAMA0,115200" in kargs(arch="aarch64", platform="metal")
    assert "console=ttyS0" in kargs(platform="packet", console="console=ttyS0")


@pytest.mark.parametrize("given", [{"rootfs_url": "ftp://b/rootfs.img"}, {"platform": "aws"},
                                   {"arch": "ppc64le"}, {"install_dev": None}])
def test_bad_input_is_refused(given: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        kargs(**given)


def test_a_command_line_over_the_kernels_limit_is_refused_naming_the_node() -> None:
    url = "http://b/vmlinuz"
    check_command_line("n0", "x86_64", url, kargs(platform="metal"))
    long = kargs(platform="metal", extra=("x" * COMMAND_LINE_SIZE["x86_64"],))
    with pytest.raises(CommandLineTooLong, match="n0"):
        check_command_line("n0", "x86_64", url, long)
