"""``bootserver openshift import DIR`` (bootserver.openshift_import): an install directory becomes one
included file (stream, profiles, nodes), passwords in 0600 files beside it, nothing of the pull secret
or SSH key anywhere; all or nothing; a second import changes nothing; a running server reloads and
serves the imported nodes."""

from __future__ import annotations

import asyncio
import fcntl
import itertools
import re
import shlex
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from support.helpers import run_cli
from support.reloading import main_config
from support.server import ServerProcess
from support.walkthroughs import doc_blocks, walkthrough_config

from bootserver.openshift import read_cluster
from bootserver.openshift_import import read_install_dir, render

DATA = Path(__file__).parent / "data"
PULL_SECRET = '{"auths": {"quay.io": {"auth": "c3VwZXItc2VjcmV0Cg=="}}}'
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIImportTestKeyOnly"


def install_dir(tmp_path: Path, **host: Any) -> Path:
    """An install directory as a user has it: install-config.yaml (two masters and a worker, Redfish and
    IPMI BMCs, one static address), the role pointer configs and rhcos.json."""
    d = tmp_path / "install"
    d.mkdir(exist_ok=True)
    hosts = [
        {"name": "m0", "role": "master", "bootMACAddress": "52:54:00:0a:00:01",
         "rootDeviceHints": {"deviceName": "/dev/vda"},
         "bmc": {"address": "redfish+http://127.0.0.1:8000/redfish/v1/Systems/m0", "username": "admin",
                 "password": "bmc-pass-m0", "disableCertificateVerification": True},
         "networkConfig": {"interfaces": [{"name": "nic0", "type": "ethernet", "state": "up",
                                           "mac-address": "52:54:00:0a:00:01",
                                           "ipv4": {"enabled": True, "dhcp": False,
                                                    "address": [{"ip": "192.0.2.10", "prefix-length": 24}]}}],
                           "routes": {"config": [{"destination": "0.0.0.0/0", "next-hop-address": "192.0.2.1",
                                                  "next-hop-interface": "nic0", "table-id": 254}]}}},
        {"name": "m1", "bootMACAddress": "52:54:00:0a:00:02", "rootDeviceHints": {"deviceName": "/dev/sda"},
         "bmc": {"address": "ipmi://127.0.0.1:6230", "username": "admin", "password": "bmc-pass-m1"}},
        {"name": "w0", "role": "worker", "bootMACAddress": "52:54:00:0a:00:03",
         "rootDeviceHints": {"deviceName": "/dev/vda"}},
    ]
    hosts[0].update(host)
    ic = {"apiVersion": "v1", "baseDomain": "example.com", "metadata": {"name": "lab"},
          "controlPlane": {"name": "master", "replicas": 2}, "compute": [{"name": "worker", "replicas": 1}],
          "networking": {"machineNetwork": [{"cidr": "192.0.2.0/24"}]},
          "platform": {"baremetal": {"apiVIPs": ["192.0.2.5"], "ingressVIPs": ["192.0.2.4"], "hosts": hosts}},
          "pullSecret": PULL_SECRET, "sshKey": SSH_KEY}
    (d / "install-config.yaml").write_text(yaml.safe_dump(ic))
    for role in ("master", "worker"):
        shutil.copy(DATA / "openshift-pointer-master.ign.json", d / f"{role}.ign")
    shutil.copy(DATA / "rhcos-stream-4.16.json", d / "rhcos.json")
    return d


async def openshift_import(config: Path, *args: str) -> tuple[int, str, str]:
    return await run_cli("openshift", "import", "--config", str(config), *args)


def written(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


async def test_import_writes_the_cluster_and_a_second_import_changes_nothing(tmp_path: Path,
                                                                             reference: Path) -> None:
    config = main_config(tmp_path, reference)
    inst = install_dir(tmp_path)
    out = tmp_path / "nodes.d" / "lab.yaml"
    rc, stdout, stderr = await openshift_import(config, str(inst), "--output", str(out))
    assert rc == 0, stderr
    assert stdout.splitlines() == ["m0: created", "m1: created", "w0: created",
                                   "no bootserver serve runs with this state_dir: it reads the file when it starts"]
    assert stderr == ""
    doc = yaml.safe_load(out.read_text())
    assert doc["streams"] == {"lab": {"metadata": str(inst / "rhcos.json"), "architectures": ["x86_64"]}}
    assert doc["profiles"] == {
        "lab-master": {"stream": "lab", "arch": "x86_64", "mode": "install", "install_dev": "/dev/vda",
                       "ignition": str(inst / "master.ign"), "platform_id": "metal"},
        "lab-master-sda": {"stream": "lab", "arch": "x86_64", "mode": "install", "install_dev": "/dev/sda",
                           "ignition": str(inst / "master.ign"), "platform_id": "metal"},
        "lab-worker": {"stream": "lab", "arch": "x86_64", "mode": "install", "install_dev": "/dev/vda",
                       "ignition": str(inst / "worker.ign"), "platform_id": "metal"}}
    passwords = tmp_path / "nodes.d" / "lab.passwords"
    assert doc["nodes"]["m0"]["redfish"] == {
        "address": "http://127.0.0.1:8000", "system": "/redfish/v1/Systems/m0", "username": "admin",
        "verify_tls": False, "boot_mode": "uefi", "password_file": str(passwords / "m0")}
    assert doc["nodes"]["m1"]["profile"] == "lab-master-sda"  # an empty role, filled: the second master
    assert doc["nodes"]["m1"]["ipmi"]["port"] == 6230
    assert "provider" not in doc["nodes"]["w0"] and doc["nodes"]["w0"]["addresses"] == ["192.0.2.0/24"]
    # secrets: the passwords only in their 0600 files, the pull secret and the SSH key nowhere
    assert stat.S_IMODE(passwords.stat().st_mode) == 0o700
    assert {p.name: (p.read_text(), stat.S_IMODE(p.stat().st_mode)) for p in passwords.iterdir()} == {
        "m0": ("bmc-pass-m0\n", 0o600), "m1": ("bmc-pass-m1\n", 0o600)}
    files = written(tmp_path / "nodes.d")
    for secret in ("bmc-pass", "c3VwZXItc2VjcmV0", "ImportTestKeyOnly"):
        assert not any(secret.encode() in data for p, data in files.items() if p.parent != passwords), secret
        assert secret not in stdout + stderr
    rc, _, err = await run_cli("check-config", "--config", str(config))
    assert rc == 0, err
    # the same files again: nothing changes, not a byte
    rc, stdout, stderr = await openshift_import(config, str(inst), "--output", str(out))
    assert (rc, stderr) == (0, "")
    assert stdout.splitlines() == ["m0: unchanged", "m1: unchanged", "w0: unchanged", "nothing changed: no reload"]
    assert written(tmp_path / "nodes.d") == files
    # a changed password and a new host: updated and created, the rest unchanged
    inst = install_dir(tmp_path, bmc={"address": "redfish+http://127.0.0.1:8000/redfish/v1/Systems/m0",
                                      "username": "admin", "password": "bmc-pass-new"})
    rc, stdout, stderr = await openshift_import(config, str(inst), "--output", str(out), "--bootstrap-mac",
                                                "52:54:00:0a:00:09", "--install-dev", "/dev/vda")
    assert rc == 2 and "bootstrap.ign: missing" in stderr
    shutil.copy(DATA / "openshift-pointer-master.ign.json", inst / "bootstrap.ign")
    rc, stdout, stderr = await openshift_import(config, str(inst), "--output", str(out), "--bootstrap-mac",
                                                "52:54:00:0a:00:09", "--install-dev", "/dev/vda")
    assert rc == 0, stderr
    assert stdout.splitlines()[:4] == ["m0: updated", "m1: unchanged", "w0: unchanged", "bootstrap: created"]
    assert (passwords / "m0").read_text() == "bmc-pass-new\n"


def test_the_install_directory_is_named_in_one_comment_line_whatever_its_name(tmp_path: Path) -> None:
    """The file's first line names the install directory; a newline in the folder's name stays escaped,
    so the name cannot add YAML of its own to the file."""
    inst = install_dir(tmp_path).rename(tmp_path / "install\nnodes: {}")
    install = read_install_dir(inst)
    cluster = read_cluster(install.install_config, install.agent_config)
    text, _ = render(cluster, install, tmp_path / "lab.yaml")
    assert text.splitlines()[0] == (f"# written by `bootserver openshift import {tmp_path}/install\\nnodes: {{}}`: "
                                    "a new import replaces this file.")
    assert list(yaml.safe_load(text)["nodes"]) == ["m0", "m1", "w0"]


async def test_two_imports_with_one_state_dir_run_one_after_the_other(tmp_path: Path, reference: Path) -> None:
    """An import waits for the state_dir's import lock (state_dir/openshift-import.lock, held here as another
    import would hold it): seen blocked on it in /proc/locks, nothing written meanwhile; it goes on once
    the lock is given up."""
    config = main_config(tmp_path, reference)
    out = tmp_path / "nodes.d" / "lab.yaml"
    lock = tmp_path / "state" / "openshift-import.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bootserver", "openshift", "import", "--config", str(config),
            str(install_dir(tmp_path)), "--output", str(out),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            waiter = re.compile(rf"^\d+: -> FLOCK\s+ADVISORY\s+WRITE\s+{proc.pid}\s+\S+:{lock.stat().st_ino}\s", re.M)
            async with asyncio.timeout(30):
                while not waiter.search(Path("/proc/locks").read_text()):
                    assert proc.returncode is None
                    await asyncio.sleep(0.05)
            assert not out.exists() and not (tmp_path / "nodes.d" / "lab.passwords").exists()
        except BaseException:
            if proc.returncode is None:
                proc.kill()
            raise
        fcntl.flock(held, fcntl.LOCK_UN)
    async with asyncio.timeout(60):
        stdout, stderr = await proc.communicate()
    assert proc.returncode == 0, stderr
    assert stdout.decode().splitlines()[:3] == ["m0: created", "m1: created", "w0: created"]


async def test_refusals_write_nothing(tmp_path: Path, reference: Path) -> None:
    config = main_config(tmp_path, reference)
    before = written(tmp_path)
    inst = install_dir(tmp_path, bmc={"address": "idrac://10.0.0.9", "username": "root", "password": "calvin"},
                       bootMode="UEFISecureBoot")
    out = tmp_path / "nodes.d" / "cluster" / "lab.yaml"
    rc, stdout, stderr = await openshift_import(config, str(inst), "--output", str(out))
    assert (rc, stdout) == (2, "")
    assert stderr.splitlines() == [
        "bootserver: install-config.yaml: host m0: bmc.address: idrac:// is the vendor's own protocol, which "
        "bootserver does not speak: write the same BMC as idrac-redfish://10.0.0.9",
        "bootserver: 1 refused; nothing written"]
    assert "calvin" not in stderr
    # an output the config's include: does not read: refused, nothing left behind (not even its folder)
    inst = install_dir(tmp_path)
    rc, stdout, stderr = await openshift_import(config, str(inst), "--output", str(out))
    assert rc == 2
    assert stderr == (f"bootserver: {out} is not read by the include: of {config} (its patterns: nodes.d/*.yaml; "
                      "'*' stays within one folder): add it, or pass an --output it reads\n")
    # a config that would not load with the file (a node name taken): refused by the check, nothing written
    main_config(tmp_path, reference, nodes={"m0": {"profile": "live", "mac": ["52:54:00:ff:00:01"]}})
    before = written(tmp_path)
    rc, stdout, stderr = await openshift_import(config, str(inst), "--output", str(tmp_path / "nodes.d" / "lab.yaml"))
    assert rc == 2
    assert "node 'm0' is defined in" in stderr
    assert written(tmp_path) == before and not (tmp_path / "nodes.d" / "cluster").exists()


async def test_a_running_server_reloads_and_serves_the_imported_nodes(tmp_path: Path, reference: Path) -> None:
    config = main_config(tmp_path, reference)
    port = int(yaml.safe_load(config.read_text())["server"]["listen"].rsplit(":", 1)[1])
    inst = install_dir(tmp_path)
    server = ServerProcess(config, port)
    async with aiohttp.ClientSession() as session:
        await server.start(session)
        try:
            rc, stdout, stderr = await openshift_import(config, str(inst), "--output",
                                                        str(tmp_path / "nodes.d" / "lab.yaml"))
            assert rc == 0, stderr
            assert stdout.splitlines()[-1].startswith("the server reloaded (")
            rc, script, err = await run_cli("render", "ipxe", "m0", "--config", str(config))
            assert rc == 0, err
            assert "coreos.inst.install_dev=/dev/vda" in script and "ifname=nic0:52:54:00:0a:00:01" in script
            async with session.get(f"{server.admin_url}/nodes") as r:
                names = {n["node"] for n in (await r.json())["nodes"]}
            assert {"m0", "m1", "w0"} <= names
        finally:
            await server.stop()


async def test_nodes_to_store_puts_the_nodes_into_the_state_store_with_sealed_passwords(
        tmp_path: Path, reference: Path) -> None:
    from bootserver.sealing import unseal

    config = main_config(tmp_path, reference)
    inst = install_dir(tmp_path)
    out = tmp_path / "nodes.d" / "lab.yaml"
    rc, stdout, stderr = await openshift_import(config, str(inst), "--output", str(out), "--nodes-to-store")
    assert rc == 0, stderr
    assert stdout.splitlines() == [
        "m0: created", "m1: created", "w0: created",
        "no bootserver serve runs with this state_dir: it reads the file when it starts; the nodes are in the "
        "state store: every server reads them by itself"]
    doc = yaml.safe_load(out.read_text())
    assert set(doc) == {"streams", "profiles"}  # the file keeps the stream and profiles
    assert not (tmp_path / "nodes.d" / "lab.passwords").exists()
    rc, exported, err = await run_cli("nodes", "export", "--config", str(config))
    assert rc == 0, err
    nodes = yaml.safe_load(exported)["nodes"]
    assert set(nodes) == {"m0", "m1", "w0"} and nodes["m1"]["profile"] == "lab-master-sda"
    sealed = nodes["m0"]["redfish"]["password_sealed"]
    assert unseal(tmp_path / "state", "m0", "redfish", sealed) == "bmc-pass-m0"
    # the password is nowhere in clear: not in the store's files, the config's files, the output
    for path, data in written(tmp_path).items():
        assert b"bmc-pass-m" not in data or path.parent == inst, path
    assert "bmc-pass" not in stdout + stderr + exported
    rc, listed, err = await run_cli("nodes", "list", "--config", str(config))
    assert rc == 0 and "store" in listed, err
    # the same files again: nothing changes (the sealed passwords are kept, not sealed anew)
    rc, stdout, stderr = await openshift_import(config, str(inst), "--output", str(out), "--nodes-to-store")
    assert (rc, stderr) == (0, "")
    assert stdout.splitlines() == ["m0: unchanged", "m1: unchanged", "w0: unchanged",
                                   "the profiles are unchanged: no reload"]
    rc, again, err = await run_cli("nodes", "export", "--config", str(config))
    assert again == exported
    # a changed password: that node is updated, sealed anew
    inst = install_dir(tmp_path, bmc={"address": "redfish+http://127.0.0.1:8000/redfish/v1/Systems/m0",
                                      "username": "admin", "password": "bmc-pass-new"})
    rc, stdout, stderr = await openshift_import(config, str(inst), "--output", str(out), "--nodes-to-store")
    assert rc == 0, stderr
    assert stdout.splitlines()[:3] == ["m0: updated", "m1: unchanged", "w0: unchanged"]


async def test_the_upi_walkthroughs_run_as_written(tmp_path: Path) -> None:
    """docs/openshift.md, walkthroughs 1 and 2: its install-config, its bootserver config and its import
    command as written (only /etc/bootserver and the machine's folders moved into the test's folder),
    with openshift-install's outputs stood in for (pointer configs, the 4.16 stream metadata); the
    output is the one the page shows."""
    ic_text = next(b for b in doc_blocks("yaml") if b.startswith("apiVersion: v1\n"))
    shell = next(b for b in doc_blocks("sh") if "bootserver openshift import ocp" in b)
    etc = walkthrough_config(tmp_path).parent
    main = (etc / "bootserver.yaml").read_text()
    ocp = tmp_path / "ocp"
    ocp.mkdir()
    (ocp / "install-config.yaml").write_text(ic_text)
    for role in ("bootstrap", "master", "worker"):  # what `create ignition-configs` writes
        shutil.copy(DATA / "openshift-pointer-master.ign.json", ocp / f"{role}.ign")
    shutil.copy(DATA / "rhcos-stream-4.16.json", ocp / "rhcos.json")  # `coreos print-stream-json`
    lines = shell.replace("\\\n", " ").splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("bootserver openshift import"))
    command = shlex.split(lines[at].replace("/etc/bootserver", str(etc)))
    shown = [line.removeprefix("# ") for line in itertools.takewhile(lambda x: x.startswith("# "), lines[at + 1:])]
    rc, stdout, stderr = await run_cli(*command[1:], cwd=tmp_path)
    assert (rc, stderr) == (0, ""), stderr
    assert stdout.splitlines() == shown
    doc = yaml.safe_load((etc / "clusters" / "ocp.yaml").read_text())
    assert doc["nodes"]["ocp-master-1"]["redfish"]["boot_source"] == "virtual-media"
    assert doc["nodes"]["ocp-worker-0"]["redfish"]["verify_tls"] is False
    assert doc["nodes"]["ocp-master-2"]["provider"] == "ipmi"
    rc, _, err = await run_cli("check-config", "--config", str(etc / "bootserver.yaml"))
    assert rc == 0, err

    # walkthrough 2: the agent-config hosts, with an install-config of platform none
    ac_text = next(b for b in doc_blocks("yaml") if b.startswith("apiVersion: v1beta1\n"))
    ic = yaml.safe_load(ic_text)
    ic["platform"] = {"none": {}}
    (ocp / "install-config.yaml").write_text(yaml.safe_dump(ic))
    (ocp / "agent-config.yaml").write_text(ac_text)
    rc, stdout, stderr = await run_cli("openshift", "import", "ocp", "--config", str(etc / "bootserver.yaml"),
                                       "--output", str(etc / "clusters" / "ocp.yaml"), cwd=tmp_path)
    assert rc == 0, stderr
    assert stdout.splitlines()[:5] == ["ocp-master-0: updated", "ocp-master-1: removed", "ocp-master-2: removed",
                                       "ocp-worker-0: removed", "bootstrap: removed"]
    node = yaml.safe_load((etc / "clusters" / "ocp.yaml").read_text())["nodes"]["ocp-master-0"]
    assert node["mac"] == ["52:54:00:00:20:00"] and node["addresses"] == ["192.0.2.0/24"]
    assert node["network"]["interfaces"][0]["ipv4"]["address"] == [{"ip": "192.0.2.20", "prefix-length": 24}]
    # the DHCP engine reserves the host's static address, as the page shows
    dhcp = next(b for b in doc_blocks("yaml") if b.startswith("dhcp:\n"))
    (etc / "bootserver.yaml").write_text(main + dhcp)
    shown_dhcp = next(b for b in doc_blocks("sh") if "bootserver dhcp --print" in b).splitlines()[1].removeprefix("# ")
    rc, printed, err = await run_cli("dhcp", "--print", "--config", str(etc / "bootserver.yaml"))
    assert rc == 0, err
    assert [line for line in printed.splitlines() if line.startswith("dhcp-host=")] == [shown_dhcp]
    (etc / "bootserver.yaml").write_text(main)
    # an agent directory (boot-artifacts/) without the agent's files: refused, naming the first one missing
    (tmp_path / "agent" / "boot-artifacts").mkdir(parents=True)
    shutil.copy(ocp / "install-config.yaml", tmp_path / "agent")
    rc, stdout, stderr = await run_cli("openshift", "import", "agent", "--config", str(etc / "bootserver.yaml"),
                                       "--output", str(etc / "clusters" / "agent.yaml"), cwd=tmp_path)
    assert rc == 2 and "agent.x86_64-vmlinuz: cannot read: No such file or directory" in stderr
