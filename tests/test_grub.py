"""GRUB's form of a node's boot (:mod:`bootserver.grub`), which the UEFI boot of the node's boot image
sources: URLs as GRUB file names, every word quoted, the kernel command line counted with
``BOOT_IMAGE=``, and ``GET /grub/{node}``: the same kernel, initramfs and kargs as its iPXE script, the
same boot-once rule and timeline event. The image's own ``grub.cfg`` is in tests/images/test_iso.py; booting it
in tests/e2e/test_iso_boot.py."""

from __future__ import annotations

import shlex
from dataclasses import replace

import pytest
from support.configs import STREAM, config_doc, load
from support.networks import STATIC
from support.signing import fixed_signer, signed

from bootserver.grub import GrubUnsupported, grub_path, grub_quote, render_grub_config, render_grub_localboot
from bootserver.http.app import ADMIN_APP, create_app
from bootserver.ipxe import ScriptContext, UnsafeValueError, render_boot_script
from bootserver.kargs import CommandLineTooLong

CTX = ScriptContext(node="n0", profile="p", stream="s", release="416.94.1", arch="x86_64", mode="install",
                    kernel_url="http://boot.example.net:8080/artifacts/s/x86_64/416.94.1/kernel?x=1",
                    initramfs_url="http://192.0.2.1/artifacts/s/x86_64/416.94.1/initramfs.img",
                    kargs=("initrd=main", "coreos.live.rootfs_url=http://boot.example.net:8080/r",
                           "ip=192.0.2.10::192.0.2.1:24:n0:nic0:none"))


@pytest.mark.parametrize(("url", "path"), [
    ("http://boot.example.net:8080/grub/n0?exp=1&sig=x", "(http,boot.example.net:8080)/grub/n0?exp=1&sig=x"),
    ("http://192.0.2.1/a/b", "(http,192.0.2.1:80)/a/b"),
    ("http://boot.example.net", "(http,boot.example.net:80)/"),
])
def test_an_http_url_becomes_a_grub_file_name(url: str, path: str) -> None:
    assert grub_path(url) == path


@pytest.mark.parametrize("url", ["https://boot.example.net/grub/n0", "http://[2001:db8::1]:8080/grub/n0",
                                 "tftp://boot.example.net/grub/n0"])
def test_grub_fetches_plain_http_of_a_name_or_ipv4_only(url: str) -> None:
    with pytest.raises(GrubUnsupported) as e:
        grub_path(url)
    assert str(e.value) == f"GRUB fetches plain http URLs of a host name or IPv4 address only, not {url}"
    assert e.value.public == "this node's boot cannot be fetched by GRUB (it needs plain http URLs)"


@pytest.mark.parametrize("word", ["a'b", "${x}", "a b", "", "#x", "a;b && c"])
def test_a_word_grub_would_not_read_literally_is_refused(word: str) -> None:
    with pytest.raises(UnsafeValueError):
        grub_quote(word)


def test_the_grub_config_boots_the_same_kernel_initramfs_and_kargs_as_the_ipxe_script() -> None:
    grub = render_grub_config(CTX)
    linux = next(line for line in grub.splitlines() if line.strip().startswith("if linux "))
    words = shlex.split(linux.strip().removeprefix("if ").removesuffix("; then"))
    # the same kargs, less iPXE's initrd=main (GRUB's initrd hands the EFI stub its initramfs)
    assert words == ["linux", "(http,boot.example.net:8080)/artifacts/s/x86_64/416.94.1/kernel?x=1", *CTX.kargs[1:]]
    assert CTX.kargs[0] == "initrd=main" and "initrd=main" not in grub
    assert "    if initrd '(http,192.0.2.1:80)/artifacts/s/x86_64/416.94.1/initramfs.img'; then\n" in grub
    assert grub.rstrip().endswith("exit")  # three attempts, then the next boot device
    ipxe = render_boot_script(CTX)
    assert " ".join(CTX.kargs) in ipxe


def test_the_command_line_counts_grubs_boot_image_first() -> None:
    kernel = "(http,boot.example.net:8080)/artifacts/s/x86_64/416.94.1/kernel?x=1"
    fixed = len(f"BOOT_IMAGE={kernel} {' '.join(CTX.kargs[1:])}".encode()) + 1  # GRUB's linux: no initrd=main
    fits = replace(CTX, kargs=(*CTX.kargs, "x=" + "a" * (2048 - fixed - 3)))  # " x=..." fills 2048 exactly
    assert "x=aaa" in render_grub_config(fits)
    with pytest.raises(CommandLineTooLong) as e:
        render_grub_config(replace(fits, kargs=(*fits.kargs[:-1], fits.kargs[-1] + "a")))
    assert str(e.value).startswith("node n0: the kernel command line under GRUB needs 2049 bytes (BOOT_IMAGE= "
                                   "included), more than the 2048 of x86_64")


def test_an_unsafe_value_never_reaches_a_grub_config() -> None:
    with pytest.raises(UnsafeValueError):
        render_grub_config(replace(CTX, kargs=(*CTX.kargs, "a'b")))
    with pytest.raises(UnsafeValueError):
        render_grub_localboot("n0 ; reboot", "installed")


def test_the_localboot_answer_exits_to_the_next_boot_device() -> None:
    text = render_grub_localboot("n0", "installed")
    assert text.splitlines()[-2:] == ["echo 'bootserver: node n0 is installed, booting from the local disk'", "exit"]


@pytest.fixture
def config(tmp_path):
    return load(config_doc(profiles={"metal": {"stream": STREAM, "install_dev": "/dev/sda"}},
                           nodes={"master-0": {"profile": "metal", "mac": "52:54:00:00:00:01", "network": STATIC}}),
                tmp_path)


def kernel_line(ipxe: str) -> list[str]:
    return next(line for line in ipxe.splitlines() if line.startswith("kernel ")).split()[1:-3]  # no "|| goto retry"


async def test_the_grub_config_is_the_node_boot_and_follows_boot_once(aiohttp_client, config) -> None:
    client = await aiohttp_client(create_app(config, fixed_signer()))
    ipxe = await (await client.get(signed("/ipxe/master-0"))).text()
    r = await client.get(signed("/grub/master-0"))
    assert r.status == 200 and r.content_type == "text/plain"
    grub = await r.text()
    kernel_url, *kargs = kernel_line(ipxe)
    linux = next(line for line in grub.splitlines() if line.strip().startswith("if linux "))
    words = shlex.split(linux.strip().removeprefix("if ").removesuffix("; then"))
    path = kernel_url.removeprefix("http://boot.example.net:8080")
    # the same kernel and kargs, less iPXE's initrd=main
    assert words == ["linux", f"(http,boot.example.net:8080){path}", *(k for k in kargs if k != "initrd=main")]
    initrd = next(line for line in ipxe.splitlines() if line.startswith("initrd ")).split()[3]
    assert f"initrd '(http,boot.example.net:8080){initrd.removeprefix('http://boot.example.net:8080')}'" in grub
    assert "ip=192.0.2.10::192.0.2.1:24:master-0:nic0:none" in kargs
    # the GRUB config request is a script request for the timeline
    admin = await aiohttp_client(client.app[ADMIN_APP])
    report = await (await admin.get("/nodes/master-0")).json()
    assert report["stage"] == "ipxe"
    # iPXE's and the boot image GRUB's, each saying how it came
    assert [(e["event"], e["count"], e["detail"]["via"]) for e in report["events"]] == [
        ("script", 1, "ipxe"), ("script", 1, "image")], report
    # boot-once: once the installer fetched its stub, GRUB is told to boot the local disk, as iPXE is
    assert (await client.get(signed("/ignition/master-0"))).status == 200
    grub = await (await client.get(signed("/grub/master-0"))).text()
    assert "echo 'bootserver: node master-0 is installed, booting from the local disk'\nexit\n" in grub
    assert "linux" not in grub.split("\n", 2)[2]
    r = await client.get(signed("/grub/master-0").replace("sig=", "sig=A"))
    assert r.status == 403


