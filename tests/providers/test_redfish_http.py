"""``redfish.boot_source: http`` against the real ``sushy-emulator`` and a real ``bootserver serve``: ``provision``
sets the system's next boot to ``UefiHttp`` with ``HttpBootUri`` the node's signed boot image URL (no DHCP
boot options needed), and a system that offers no ``UefiHttp`` (legacy boot mode) is refused with one line,
exit 2, before any power action.

sushy-tools 2.2's emulator takes such a ``PATCH`` by downloading ``HttpBootUri`` (only for the target
``UefiHttp`` with a URI), then asks its systems driver to keep the URI, which its fake driver (the one that
runs without libvirt) does not implement: it answers ``400``. So the test sees the request arrive as a real
BMC would act on it (the image fetched from the server with its signature) and the BMC's refusal as one
line naming the request, with no power action after it.

Why no emulator reads back ``UefiHttp`` (checked with sushy-tools 2.2.0, the newest on PyPI, and its main
branch of 2026-03): for ``UefiHttp`` with a URI the emulator's ``PATCH`` handler tells its driver to boot
the downloaded image as a CD (target ``Cd``), so ``BootSourceOverrideTarget`` never reads back ``UefiHttp``;
of its systems drivers only the libvirt one stores ``HttpBootUri`` (the fake, nova and ironic drivers raise
"not implemented"), and it first uploads the image into a libvirt storage pool
(``virStorageVolUpload``), which libvirt's in-process ``test:///`` driver does not implement: it needs a
real libvirtd with its storage and QEMU drivers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import requests
from support.helpers import run_cli
from support.metrics import iso_requests
from support.server import synced_server
from support.sushy_emulator import PASSWORD, USERNAME, rf0_setup

from bootserver.cli import build_parser, provider_options
from bootserver.config import load_config
from bootserver.inventory import inventory
from bootserver.providers.base import ProviderError
from bootserver.provision import provision


async def test_provision_sets_uefi_http_with_the_signed_image_url(emulator, bmc_password, boot_setup,
                                                                 tmp_path: Path) -> None:
    setup = rf0_setup(boot_setup, emulator, "http")
    config = load_config(str(setup.config))
    args = provider_options(build_parser().parse_args(["provision", "rf-0", "--no-wait"]))
    async with synced_server(setup.config, setup.port) as server:
        with pytest.raises(ProviderError) as info:
            await asyncio.get_running_loop().run_in_executor(None, lambda: provision(
                config, args, [inventory(config)["rf-0"]], wait=False, say=lambda node, message: None))
        fetched = iso_requests(requests.get(server.admin_url + "/metrics", timeout=10).text)
    path = emulator.path(0)
    # the emulator acted on UefiHttp + HttpBootUri: it fetched the node's signed image from the server
    assert fetched >= 1
    assert str(info.value) == f"BMC {emulator.url}: PATCH {path} Boot: 400: Base.1.0.GeneralError"
    assert emulator.system(0)["PowerState"] == "Off"  # no power action after the BMC's refusal


async def test_a_system_without_uefi_http_is_refused_before_any_power_action(emulator, bmc_password,
                                                                             boot_setup) -> None:
    setup = rf0_setup(boot_setup, emulator, "http")
    # legacy boot mode: the emulator then offers Pxe, Cd and Hdd only
    r = requests.patch(emulator.url + emulator.path(0), json={"Boot": {"BootSourceOverrideMode": "Legacy"}},
                       auth=(USERNAME, PASSWORD), timeout=10)
    assert r.status_code == 204
    assert "UefiHttp" not in emulator.system(0)["Boot"]["BootSourceOverrideTarget@Redfish.AllowableValues"]
    rc, out, err = await run_cli("provision", "rf-0", "--no-wait", "--config", str(setup.config))
    path = emulator.path(0)
    assert (rc, out) == (2, "")
    assert err.splitlines()[-1] == (f"bootserver: node rf-0: {path} offers no UEFI HTTP boot (UefiHttp is not among "
                                    "its boot override targets: Cd, Hdd, Pxe): set redfish.boot_source: virtual-media "
                                    "or pxe, or boot_mode: uefi"), err
    assert emulator.system(0)["PowerState"] == "Off"
