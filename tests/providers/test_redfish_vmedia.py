"""``redfish.boot_source: virtual-media`` against the real ``sushy-emulator`` and a real ``bootserver
serve``: ``provision`` ejects, inserts the node's signed boot image URL as the CD (the emulator downloads
the image from the server), sets the one-time override ``Cd``; the wait ejects the image once the node's
network boot is over (stage ``installing``); ``deprovision`` ejects; bad input is exit 2 before any BMC
call."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import requests
import yaml
from support.helpers import recorded_devices, run_cli, write_config
from support.metrics import iso_requests
from support.server import synced_server
from support.sushy_emulator import RF0_MAC, rf0_setup

from bootserver.cli import build_parser, provider_options
from bootserver.config import load_config
from bootserver.inventory import inventory
from bootserver.provision import WaitPolicy, deprovision, provision


def cd(emulator) -> dict[str, Any]:
    """The emulator's first system's virtual CD (``VirtualMedia/Cd``)."""
    return emulator.get(f"{emulator.path(0)}/VirtualMedia/Cd")


async def test_provision_inserts_the_signed_image_boots_cd_once_and_ejects_after_the_network_boot(
        emulator, bmc_password, boot_setup, tmp_path: Path) -> None:
    setup = rf0_setup(boot_setup, emulator, "virtual-media")
    # the profile has no check-in: done at installed
    doc = yaml.safe_load(setup.config.read_text())
    doc["profiles"]["master"]["checkin"] = False
    write_config(setup.config, doc)
    config = load_config(str(setup.config))
    said: list[str] = []
    seen: dict[str, Any] = {}

    def step_image() -> None:  # what the BMC inserted, as the node's firmware boots it
        media = cd(emulator)
        seen["media"] = media
        image = requests.get(media["Image"], timeout=30)
        assert image.status_code == 200
        seen["image"] = image.content
        grub = re.search(rb"\(http,127\.0\.0\.1:(\d+)\)(/grub/rf-0\?exp=\d+&sig=[\w-]+)", image.content)
        assert grub is not None
        r = requests.get(f"http://127.0.0.1:{grub.group(1).decode()}{grub.group(2).decode()}", timeout=10)
        assert r.status_code == 200  # GRUB's script request: stage ipxe
        seen["grub"] = r.text

    def step_stub() -> None:  # the live installer fetches the stub: its network boot is over
        url = re.search(r"'coreos\.inst\.ignition_url=([^']+)'", seen["grub"]).group(1)
        assert requests.get(url, timeout=10).status_code == 200
        seen["inserted_at_installing"] = cd(emulator)["Inserted"]

    def step_config() -> None:  # the installed system's first boot
        stub = requests.get(re.search(r"'coreos\.inst\.ignition_url=([^']+)'", seen["grub"]).group(1), timeout=10)
        merge = stub.json()["ignition"]["config"]["merge"][0]["source"]
        assert requests.get(merge, timeout=10).status_code == 200

    steps = [step_image, step_stub, step_config]

    def pause(seconds: float) -> None:
        if steps:
            steps.pop(0)()

    args = provider_options(build_parser().parse_args(["provision", "rf-0"]))
    async with synced_server(setup.config, setup.port) as server:
        lines = await asyncio.get_running_loop().run_in_executor(None, lambda: provision(
            config, args, [inventory(config)["rf-0"]], policy=WaitPolicy(timeout=60, interval=0.1), sleep=pause,
            say=lambda node, message: said.append(message)))
        fetched = iso_requests(requests.get(server.admin_url + "/metrics", timeout=10).text)
    media = seen["media"]
    # InsertMedia with our signed image URL, Inserted, WriteProtected; the emulator fetched it from serve
    assert re.fullmatch(rf"http://127\.0\.0\.1:{setup.port}/iso/rf-0\.iso\?exp=\d+&sig=[\w-]+", media["Image"]), media
    assert media["Inserted"] is True and media["WriteProtected"] is True
    assert fetched >= 2, fetched  # the emulator's download at InsertMedia, and the step's
    assert seen["image"][0x8001:0x8006] == b"CD001" and b"set ${nic}/ip 192.0.2.10" in seen["image"]
    # the one-time override is Cd, from the image; then the image is ejected at installing
    assert emulator.system(0)["Boot"]["BootSourceOverrideTarget"] == "Cd"
    path = emulator.path(0)
    assert f"{path}: next boot from its boot image in {path}/VirtualMedia/Cd (once); On (was Off)" in said
    assert seen["inserted_at_installing"] is True
    assert f"{path}/VirtualMedia/Cd: ejected http://127.0.0.1:{setup.port}/iso/rf-0.iso" in said, said
    assert [m for m in said if m.startswith("stage")] == ["stage ipxe", "stage installing", "stage installed"]
    assert said.index(f"{path}/VirtualMedia/Cd: ejected http://127.0.0.1:{setup.port}/iso/rf-0.iso") \
        < said.index("stage installed")
    assert cd(emulator)["Inserted"] is False and not cd(emulator)["Image"]
    assert lines[0].startswith(f"rf-0 {path} ")
    assert "media" not in recorded_devices(tmp_path / "state")["rf-0"]


async def test_no_wait_leaves_the_image_to_the_next_provision_and_deprovision_ejects(
        emulator, bmc_password, boot_setup, tmp_path: Path) -> None:
    setup = rf0_setup(boot_setup, emulator, "virtual-media")
    config = load_config(str(setup.config))
    said: list[str] = []
    args = provider_options(build_parser().parse_args(["provision", "rf-0", "--no-wait"]))
    loop = asyncio.get_running_loop()
    async with synced_server(setup.config, setup.port):
        for _ in range(2):
            await loop.run_in_executor(None, lambda: provision(
                config, args, [inventory(config)["rf-0"]], wait=False, say=lambda node, message: said.append(message)))
        assert cd(emulator)["Inserted"] is True
        assert recorded_devices(tmp_path / "state")["rf-0"]["media"] == f"{emulator.path(0)}/VirtualMedia/Cd"
        dargs = provider_options(build_parser().parse_args(["deprovision", "rf-0", "--grace", "1"]))
        await loop.run_in_executor(None, lambda: deprovision(
            config, dargs, [inventory(config)["rf-0"]], say=lambda node, message: said.append(message)))
    ejected = [m for m in said if m.startswith(f"{emulator.path(0)}/VirtualMedia/Cd: ejected ")]
    assert len(ejected) == 2, said  # by the second provision, then by deprovision
    assert cd(emulator)["Inserted"] is False
    assert "rf-0" not in recorded_devices(tmp_path / "state")


async def test_a_node_whose_image_cannot_be_built_is_exit_2_before_any_bmc_call(
        emulator, bmc_password, boot_setup, tmp_path: Path) -> None:
    v6 = {"interfaces": [{"name": "nic0", "type": "ethernet", "mac-address": RF0_MAC,
                          "ipv6": {"enabled": True, "address": [{"ip": "2001:db8::5", "prefix-length": 64}]}}]}
    setup = rf0_setup(boot_setup, emulator, "virtual-media", v6)
    for command in (["check-config"], ["provision", "rf-0", "--no-wait"]):
        rc, out, err = await run_cli(*command, "--config", str(setup.config))
        assert (rc, out) == (2, ""), err
        # (provision warns first that 127.0.0.1 is no address a device can reach)
        assert err.splitlines()[-1] == (
            "bootserver: node rf-0: nodes.rf-0.network: the boot interface nic0 has only IPv6 addresses; the boot "
            "image sets a static IPv4 address only (add one, or boot it over PXE)")
    assert cd(emulator)["Inserted"] is False
    assert emulator.system(0)["Boot"]["BootSourceOverrideTarget"] != "Cd"


async def test_check_config_wants_plain_http_for_a_node_that_boots_its_image(
        emulator, boot_setup, tmp_path: Path) -> None:
    setup = rf0_setup(boot_setup, emulator, "virtual-media")
    doc = yaml.safe_load(setup.config.read_text())
    doc["server"]["base_url"] = "https://boot.example"
    write_config(setup.config, doc)
    rc, out, err = await run_cli("check-config", "--config", str(setup.config))
    assert (rc, out) == (2, "")
    assert err == (f"bootserver: {setup.config}: server.base_url: node rf-0 boots its image (redfish.boot_source: "
                   "virtual-media), whose GRUB fetches plain http only, not https://boot.example\n")
