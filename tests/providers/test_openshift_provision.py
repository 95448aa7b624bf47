"""``bootserver provision`` boots a host imported from OpenShift's install-config (issue 51, item 5): its
``redfish+http://`` BMC address, username and password (from the 0600 password file the import wrote)
reach the real ``sushy-emulator``, which gets a one-time network boot and a power-on; the password is
never printed."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml
from support.helpers import cli, write_config
from support.sushy_emulator import PASSWORD, USERNAME

DATA = Path(__file__).resolve().parents[1] / "data"


def install_dir(tmp_path: Path, emulator_url: str, system: str) -> Path:
    """An install directory whose one master is the emulator's first system (rf-0, off)."""
    d = tmp_path / "install"
    d.mkdir()
    address = emulator_url.replace("http://", "redfish+http://") + system
    ic = {"apiVersion": "v1", "metadata": {"name": "lab"}, "controlPlane": {"name": "master", "replicas": 1},
          "networking": {"machineNetwork": [{"cidr": "192.0.2.0/24"}]},
          "platform": {"baremetal": {"hosts": [
              {"name": "rf-0", "role": "master", "bootMACAddress": "52:54:00:00:00:01", "bootMode": "UEFI",
               "rootDeviceHints": {"deviceName": "/dev/sda"},
               "bmc": {"address": address, "username": USERNAME, "password": PASSWORD}}]}},
          "pullSecret": '{"auths": {}}', "sshKey": "ssh-ed25519 AAAA test"}
    (d / "install-config.yaml").write_text(yaml.safe_dump(ic))
    shutil.copy(DATA / "openshift-pointer-master.ign.json", d / "master.ign")
    shutil.copy(DATA / "rhcos-stream-4.16.json", d / "rhcos.json")
    return d


def test_an_imported_host_is_provisioned_through_its_bmc(emulator, tmp_path, capsys) -> None:
    config = write_config(tmp_path / "bootserver.yaml", {
        "server": {"listen": "127.0.0.1:8080"}, "cache_dir": "cache", "state_dir": "state",
        "include": ["clusters/*.yaml"]})
    inst = install_dir(tmp_path, emulator.url, emulator.path(0))
    rc, out, err = cli(capsys, "openshift", "import", str(inst), "--config", str(config),
                       "--output", str(tmp_path / "clusters" / "lab.yaml"))
    assert rc == 0, err
    assert out.splitlines()[0] == "rf-0: created"
    rc, out, err = cli(capsys, "provision", "rf-0", "--no-wait", "--config", str(config))
    assert rc == 0, err
    assert f"bootserver: rf-0: {emulator.path(0)}: next boot from the network (once); On (was Off)" in err
    assert emulator.system(0)["Boot"]["BootSourceOverrideTarget"] == "Pxe"
    assert emulator.wait_power(0, "On") == "On"
    assert PASSWORD not in out + err
