"""``bootserver openshift import DIR`` in agent mode (issue 51 item 4): the agent's PXE files of
``openshift-install agent create pxe-files`` become a private local release (sha256 recorded at import,
served from the cache, a changed file refused), booted with the installer's kernel line and our signed
URLs, to the imported hosts' MACs alone; boot-once after the rootfs, until ``nodes reinstall``.

The install directory is the installer's own public example (tests/data/openshift/
agent-pxe-compact-external.txt: its install-config and agent-config) with two hosts added to its
agent-config; the PXE files are stand-ins (a few bytes each: nothing boots them here; the e2e test
tests/e2e/test_agent_boot.py boots real firmware), and ``agent.x86_64.ipxe`` has the shape the example's
test asserts."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shlex
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from support.clients import start_app
from support.helpers import run_cli
from support.reloading import main_config
from support.walkthroughs import doc_blocks, walkthrough_config
from test_openshift import txtar

from bootserver.config import load_config
from bootserver.errors import InputError
from bootserver.openshift_import import agent_kargs

DATA = Path(__file__).parent / "data"
MAC_A, MAC_B = "52:54:00:a9:00:01", "52:54:00:a9:00:02"
STRANGER = "52:54:00:a9:00:99"
#: The KARGS of the installer's script for the external platform (DESIGN.md: the ISO's kargs.json default
#: without coreos.liveiso=, then console=ttyS0), as agent-pxe-compact-external.txt greps them.
KARGS = ["rw", "ignition.firstboot", "ignition.platform.id=metal", "console=ttyS0"]
BASE = "http://user-specified-pxe-infra.com"


def ipxe_script(arch: str = "x86_64") -> str:
    """``agent.<arch>.ipxe`` as ``openshift-install agent create pxe-files`` writes it with
    ``bootArtifactsBaseURL`` (cmd/openshift-install/testdata/agent/pxe/configurations/*.txt)."""
    return (f"#!ipxe\ninitrd --name initrd {BASE}/agent.{arch}-initrd.img\n"
            f"kernel {BASE}/agent.{arch}-vmlinuz initrd=initrd coreos.live.rootfs_url={BASE}/agent.{arch}-rootfs.img "
            f"{' '.join(KARGS)}\nboot\n")


def agent_dir(tmp_path: Path, files: dict[str, bytes] | None = None, *, script: bool = True,
              machine_network: str = "127.0.0.0/8") -> Path:
    """The install directory after ``agent create pxe-files``: the example's install-config (its
    machineNetwork ``machine_network``, where the test's machines ask from) and agent-config with two
    hosts, ``boot-artifacts/`` with ``files`` (stand-ins by default) and, with ``script``, the iPXE script."""
    sections = txtar(DATA / "openshift" / "agent-pxe-compact-external.txt")
    d = tmp_path / "ostest"
    (d / "boot-artifacts").mkdir(parents=True, exist_ok=True)
    ic = yaml.safe_load(sections["install-config.yaml"])
    ic["networking"]["machineNetwork"] = [{"cidr": machine_network}]
    (d / "install-config.yaml").write_text(yaml.safe_dump(ic))
    ac = yaml.safe_load(sections["agent-config.yaml"])
    ac["hosts"] = [{"hostname": "agent-0", "role": "master", "interfaces": [{"name": "nic0", "macAddress": MAC_A}]},
                   {"hostname": "agent-1", "role": "master", "interfaces": [{"name": "nic0", "macAddress": MAC_B}]}]
    (d / "agent-config.yaml").write_text(yaml.safe_dump(ac))
    for name, data in (files or stand_ins()).items():
        (d / "boot-artifacts" / name).write_bytes(data)
    if script:
        (d / "boot-artifacts" / "agent.x86_64.ipxe").write_text(ipxe_script())
    return d


def stand_ins() -> dict[str, bytes]:
    return {"agent.x86_64-vmlinuz": b"kernel stand-in\n", "agent.x86_64-initrd.img": b"initrd with the secrets\n",
            "agent.x86_64-rootfs.img": b"rootfs stand-in\n" * 1000}


async def openshift_import(config: Path, *args: str, timeout: float = 60) -> tuple[int, str, str]:
    return await run_cli("openshift", "import", "--config", str(config), *args, timeout=timeout)


async def imported_with(tmp_path: Path, config: Path, **agent_0: Any) -> None:
    """The installer's example (:func:`agent_dir`) imported through ``config`` into
    ``nodes.d/ostest.yaml``, then node ``agent-0``'s keys ``agent_0`` set in that file by hand."""
    out = tmp_path / "nodes.d" / "ostest.yaml"
    rc, _, stderr = await openshift_import(config, str(agent_dir(tmp_path)), "--output", str(out))
    assert rc == 0, stderr
    doc = yaml.safe_load(out.read_text())
    doc["nodes"]["agent-0"].update(agent_0)
    out.write_text(yaml.safe_dump(doc))


def kernel_line(script: str) -> list[str]:
    """The words of the script's ``kernel`` command (up to its ``|| goto retry``)."""
    words = next(shlex.split(line) for line in script.splitlines() if line.startswith("kernel "))
    return words[:words.index("||")] if "||" in words else words


def test_the_kernel_line_is_read_from_the_installers_script() -> None:
    assert agent_kargs(ipxe_script(), "agent.x86_64.ipxe") == tuple(KARGS)
    with pytest.raises(InputError, match=r"agent\.x86_64\.ipxe: kernel line: .*\$\{"):
        agent_kargs("#!ipxe\nkernel http://x/k initrd=initrd ${net0/mac}\nboot\n", "agent.x86_64.ipxe")
    with pytest.raises(InputError, match=r"agent\.x86_64\.ipxe: no kernel line"):
        agent_kargs("#!ipxe\nboot\n", "agent.x86_64.ipxe")


async def test_agent_import_writes_a_private_release_and_a_second_import_changes_nothing(
        tmp_path: Path, reference: Path) -> None:
    config = main_config(tmp_path, reference)
    inst = agent_dir(tmp_path)
    out = tmp_path / "nodes.d" / "ostest.yaml"
    rc, stdout, stderr = await openshift_import(config, str(inst), "--output", str(out))
    assert rc == 0, stderr
    assert stdout.splitlines() == ["agent-0: created", "agent-1: created",
                                   "no bootserver serve runs with this state_dir: it reads the file when it starts"]
    doc = yaml.safe_load(out.read_text())
    release_file = tmp_path / "nodes.d" / "ostest.release.json"
    assert doc["streams"] == {"ostest-agent": {"metadata": str(release_file), "architectures": ["x86_64"],
                                               "private": True}}
    assert doc["profiles"] == {"ostest-agent": {"stream": "ostest-agent", "arch": "x86_64", "mode": "agent",
                                                "kargs": KARGS}}
    assert {n: e["mac"] for n, e in doc["nodes"].items()} == {"agent-0": [MAC_A], "agent-1": [MAC_B]}
    pxe = json.loads(release_file.read_text())["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["pxe"]
    for kind, name in (("kernel", "vmlinuz"), ("initramfs", "initrd.img"), ("rootfs", "rootfs.img")):
        path = inst / "boot-artifacts" / f"agent.x86_64-{name}"
        assert pxe[kind] == {"location": path.as_uri(), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    assert b"secrets" not in out.read_bytes() + release_file.read_bytes()
    rc, _, err = await run_cli("check-config", "--config", str(config))
    assert rc == 0, err
    before = {p: p.read_bytes() for p in (out, release_file)}
    rc, stdout, stderr = await openshift_import(config, str(inst), "--output", str(out), "--mode", "agent")
    assert (rc, stderr) == (0, "")
    assert stdout.splitlines() == ["agent-0: unchanged", "agent-1: unchanged", "nothing changed: no reload"]
    assert {p: p.read_bytes() for p in before} == before
    sync = ("sync-images", "--stream", "ostest-agent", "--config", str(config))
    rc, _, err = await run_cli(*sync)
    assert rc == 0, err
    (old_release,) = (tmp_path / "cache" / "private" / "ostest-agent" / "x86_64").iterdir()
    # new PXE files (a new `agent create pxe-files`): a new release, every node updated
    (inst / "boot-artifacts" / "agent.x86_64-initrd.img").write_bytes(b"a new initrd\n")
    rc, stdout, stderr = await openshift_import(config, str(inst), "--output", str(out))
    assert rc == 0, stderr
    assert stdout.splitlines()[:2] == ["agent-0: updated", "agent-1: updated"]
    assert release_file.read_bytes() != before[release_file] and out.read_bytes() == before[out]
    # --prune keeps only the current private release: the superseded one held secrets too
    rc, stdout, err = await run_cli(*sync, "--prune")
    assert rc == 0, err
    assert f"pruned {old_release.relative_to(tmp_path / 'cache')}" in stdout.splitlines()
    (new_release,) = (tmp_path / "cache" / "private" / "ostest-agent" / "x86_64").iterdir()
    assert new_release.name != old_release.name


async def test_agent_import_without_the_script_takes_the_installers_default_kargs(
        tmp_path: Path, reference: Path) -> None:
    config = main_config(tmp_path, reference)
    inst = agent_dir(tmp_path, script=False)
    out = tmp_path / "nodes.d" / "ostest.yaml"
    rc, _, stderr = await openshift_import(config, str(inst), "--output", str(out))
    assert rc == 0, stderr
    assert stderr == (f"bootserver: warning: {inst / 'boot-artifacts' / 'agent.x86_64.ipxe'}: none (agent-config.yaml "
                      "sets no bootArtifactsBaseURL): the hosts boot the installer's default kernel arguments: "
                      "ignition.firstboot ignition.platform.id=metal console=ttyS0\n")
    # the example's platform is external: console=ttyS0 follows the default, as the installer writes it
    assert yaml.safe_load(out.read_text())["profiles"]["ostest-agent"]["kargs"] == [
        "ignition.firstboot", "ignition.platform.id=metal", "console=ttyS0"]


async def test_agent_refusals_write_nothing(tmp_path: Path, reference: Path) -> None:
    config = main_config(tmp_path, reference)
    inst = agent_dir(tmp_path)
    out = tmp_path / "nodes.d" / "ostest.yaml"
    rc, stdout, stderr = await openshift_import(config, str(inst), "--output", str(out), "--install-dev", "/dev/sda",
                                                "--bootstrap-mac", "52:54:00:a9:00:09")
    assert (rc, stdout) == (2, "")
    assert stderr.splitlines() == [
        "bootserver: --install-dev: not in agent mode (the agent installs to the disk of the host's rootDeviceHints)",
        "bootserver: --bootstrap-mac: not in agent mode (the rendezvous host bootstraps the cluster)",
        "bootserver: 2 refused; nothing written"]
    (inst / "boot-artifacts" / "agent.x86_64-rootfs.img").unlink()
    rc, _, stderr = await openshift_import(config, str(inst), "--output", str(out))
    assert rc == 2
    assert stderr == (f"bootserver: {inst / 'boot-artifacts' / 'agent.x86_64-rootfs.img'}: cannot read: No such file "
                      "or directory (run `openshift-install agent create pxe-files`; the agent's vmlinuz, initrd.img "
                      "and rootfs.img are needed)\n")
    assert not out.exists() and not out.with_suffix(".release.json").exists()


async def wait_stage(client: Any, node: str, stage: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while True:
        async with client.admin.get(f"/nodes/{node}") as r:
            now = (await r.json())["stage"]
        if now == stage:
            return
        assert time.monotonic() < deadline, f"{node} stays in stage {now}, not {stage}"
        await asyncio.sleep(0.1)


async def test_only_the_imported_macs_get_the_agent_boot_and_its_artifacts(
        tmp_path: Path, reference: Path, aiohttp_client: Any) -> None:
    config = main_config(tmp_path, reference)
    inst = agent_dir(tmp_path)
    rc, _, stderr = await openshift_import(config, str(inst), "--output", str(tmp_path / "nodes.d" / "ostest.yaml"))
    assert rc == 0, stderr
    client = await start_app(aiohttp_client, load_config(config))
    async with client.get("/boot.ipxe", params={"mac": MAC_A}) as r:
        assert r.status == 200
        script = await r.text()
    words = kernel_line(script)
    kernel_url, args = words[1], words[2:]
    rootfs_url = args[1].removeprefix("coreos.live.rootfs_url=")
    # exactly the installer's kernel line, its URLs ours (initrd=main names our initrd --name main)
    assert args == ["initrd=main", f"coreos.live.rootfs_url={rootfs_url}", *KARGS]
    assert "ignition.config.url" not in script and "/ignition/" not in script  # no stub of ours
    urls = {kernel_url, rootfs_url, *(w for line in script.splitlines() if line.startswith("initrd ")
                                      for w in shlex.split(line) if w.startswith("http"))}
    assert len(urls) == 3
    for url in urls:
        parts = urlsplit(url)
        assert parts.path.startswith("/artifacts/ostest-agent/x86_64/agent-")
        assert parse_qs(parts.query)["node"] == ["agent-0"]
    files = stand_ins()
    path_of = {urlsplit(u).path.rsplit("/", 1)[1]: u for u in urls}
    initrd_url = path_of["agent.x86_64-initrd.img"]
    rel = urlsplit(initrd_url)
    async with client.get(f"{rel.path}?{rel.query}") as r:  # read through from the file, checked, 0600 in the cache
        assert r.status == 200
        assert await r.read() == files["agent.x86_64-initrd.img"]
        assert r.headers["Cache-Control"] == "no-store"
    cached = list((tmp_path / "cache" / "private").rglob("agent.x86_64-initrd.img"))
    assert len(cached) == 1 and cached[0].stat().st_mode & 0o777 == 0o600
    assert not (tmp_path / "cache" / "artifacts" / "ostest-agent").exists()
    async with client.admin.get("/ui/cache") as r:  # the cache page lists it (on the admin listener)
        page = await r.text()
    assert r.status == 200 and "agent.x86_64-initrd.img" in page and "verified" in page
    # an unknown machine: the discovery answer, nothing of the agent's
    async with client.get("/boot.ipxe", params={"mac": STRANGER}) as r:
        stranger = await r.text()
    assert r.status == 200 and "imgfetch --name bs-report discover?" in stranger
    assert "ostest" not in stranger and "/artifacts/" not in stranger and "kernel" not in stranger
    # the artifact route: no URL, another node's name on A's signature, A's signature on another file: 403
    q = parse_qs(rel.query)
    forged = [rel.path, f"{rel.path}?node=agent-1&exp={q['exp'][0]}&sig={q['sig'][0]}",
              f"{rel.path.replace('initrd.img', 'rootfs.img')}?{rel.query}",
              f"{rel.path}?node=steady&exp={q['exp'][0]}&sig={q['sig'][0]}"]
    for url in forged:
        for method in ("GET", "HEAD"):
            async with client.request(method, url) as r:
                assert r.status == 403, (method, url)
                assert (await r.read()) in (b"forbidden\n", b"")
    # node B's own script has URLs of its own, which A's signature does not open
    async with client.get("/boot.ipxe", params={"mac": MAC_B}) as r:
        b_line = kernel_line(await r.text())
    assert parse_qs(urlsplit(b_line[1]).query)["node"] == ["agent-1"] and b_line[2:] != args
    # no install loop: once A has its whole rootfs it is installing, and its next network boot boots the disk
    rel = urlsplit(rootfs_url)
    async with client.get(f"{rel.path}?{rel.query}") as r:
        assert r.status == 200 and await r.read() == files["agent.x86_64-rootfs.img"]
    await wait_stage(client, "agent-0", "installing")
    async with client.get("/boot.ipxe", params={"mac": MAC_A}) as r:
        local = await r.text()
    assert "exit 1" in local and "kernel" not in local
    rc, _, err = await run_cli("nodes", "reinstall", "agent-0", "--config", str(config))
    assert rc == 0, err
    async with client.get("/boot.ipxe", params={"mac": MAC_A}) as r:
        assert kernel_line(await r.text())[2:][2:] == KARGS


async def test_a_pxe_file_changed_after_import_is_refused_not_served(
        tmp_path: Path, reference: Path, aiohttp_client: Any) -> None:
    config = main_config(tmp_path, reference)
    inst = agent_dir(tmp_path)
    rc, _, stderr = await openshift_import(config, str(inst), "--output", str(tmp_path / "nodes.d" / "ostest.yaml"))
    assert rc == 0, stderr
    initrd = inst / "boot-artifacts" / "agent.x86_64-initrd.img"
    initrd.write_bytes(b"changed after the import\n")
    client = await start_app(aiohttp_client, load_config(config))
    async with client.get("/boot.ipxe", params={"mac": MAC_A}) as r:
        script = await r.text()
    url = next(w for line in script.splitlines() if line.startswith("initrd ") for w in shlex.split(line)
               if w.startswith("http"))
    rel = urlsplit(url)
    async with client.get(f"{rel.path}?{rel.query}") as r:
        body = await r.read()
    assert r.status == 502 and b"changed after" not in body
    assert not list((tmp_path / "cache").rglob("agent.x86_64-initrd.img"))
    # sync-images says it in one line naming the file
    rc, _, err = await run_cli("sync-images", "--stream", "ostest-agent", "--config", str(config))
    assert rc == 1
    line = next(x for x in err.splitlines() if "initrd" in x)
    assert initrd.as_uri() in line and "sha256 mismatch" in line and "import it again" in line


def test_an_agent_profile_needs_a_private_stream_and_no_config_of_ours(tmp_path: Path, reference: Path) -> None:
    from support.helpers import write_config

    from bootserver.errors import ConfigError

    stream = {"metadata": str(reference / "rhcos-stream-4.16.json")}
    cases = [({}, {}, "profiles.a.stream: stream 'agent' must be private: true in agent mode"),
             ({"private": True}, {"ignition": "x.ign"}, "profiles.a.ignition: not in agent mode"),
             ({"private": True}, {"kargs": ["coreos.live.rootfs_url=http://x/r"]},
              "coreos.live.rootfs_url is set by bootserver")]
    for extra_stream, extra_profile, message in cases:
        config = write_config(tmp_path / "bootserver.yaml", {
            "streams": {"agent": {**stream, **extra_stream}},
            "profiles": {"a": {"stream": "agent", "mode": "agent", "kargs": ["ignition.firstboot"], **extra_profile}}})
        with pytest.raises(ConfigError, match=message):
            load_config(config)
    config = write_config(tmp_path / "bootserver.yaml", {
        "streams": {"agent": {**stream, "private": True}},
        "profiles": {"a": {"stream": "agent", "mode": "agent", "kargs": KARGS}}})
    assert load_config(config).profiles["a"].kargs == tuple(KARGS)


async def test_the_agent_walkthrough_runs_as_written(tmp_path: Path) -> None:
    """docs/openshift.md, walkthrough 3: its agent-config, walkthrough 2's install-config (platform none),
    walkthrough 1's bootserver config and the import command as written (only /etc/bootserver and the
    machine's folders moved into the test's folder), ``agent create pxe-files``'s output stood in for
    (stand-in files, the script with the page's bootArtifactsBaseURL); the output is the one the page
    shows, and the host's script boots the installer's kernel line. Then --nodes-to-store: the node goes
    into the state store, the file keeps the stream and profile."""
    ac_text = next(b for b in doc_blocks("yaml") if "rendezvousIP" in b)
    ic = yaml.safe_load(next(b for b in doc_blocks("yaml") if b.startswith("apiVersion: v1\n")))
    ic["platform"] = {"none": {}}
    shell = next(b for b in doc_blocks("sh") if "bootserver openshift import ocp-agent" in b)
    etc = walkthrough_config(tmp_path).parent
    inst = tmp_path / "ocp-agent"
    (inst / "boot-artifacts").mkdir(parents=True)
    (inst / "install-config.yaml").write_text(yaml.safe_dump(ic))
    (inst / "agent-config.yaml").write_text(ac_text)
    for name, data in stand_ins().items():
        (inst / "boot-artifacts" / name).write_bytes(data)
    base = yaml.safe_load(ac_text)["bootArtifactsBaseURL"]
    (inst / "boot-artifacts" / "agent.x86_64.ipxe").write_text(ipxe_script().replace(BASE, base))
    lines = shell.replace("\\\n", " ").splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("bootserver openshift import"))
    command = shlex.split(lines[at].replace("/etc/bootserver", str(etc)))
    shown = [line.removeprefix("# ") for line in lines[at + 1:] if line.startswith("# ")]
    rc, stdout, stderr = await run_cli(*command[1:], cwd=tmp_path)
    assert (rc, stderr) == (0, ""), stderr
    assert stdout.splitlines() == shown
    sync = next(line for line in lines if line.startswith("bootserver sync-images"))
    rc, _, err = await run_cli(*shlex.split(sync.replace("/etc/bootserver", str(etc)), comments=True)[1:])
    assert rc == 0, err  # the agent's files copied into the cache and checked
    assert len(list((tmp_path / "var-cache-bootserver" / "private").rglob("agent.x86_64-*"))) == 3
    rc, script, err = await run_cli("render", "ipxe", "ocp-agent-0", "--config", str(etc / "bootserver.yaml"))
    assert rc == 0, err
    words = kernel_line(script)
    assert words[2:] == ["initrd=main", words[3], *KARGS] and words[3].startswith("coreos.live.rootfs_url=http://")
    assert "?node=ocp-agent-0&exp=" in words[1]
    out = etc / "clusters" / "ocp-agent.yaml"
    out.unlink()
    rc, stdout, stderr = await run_cli(*command[1:], "--nodes-to-store", cwd=tmp_path)
    assert rc == 0, stderr
    assert stdout.splitlines()[0] == "ocp-agent-0: created"
    assert "nodes" not in yaml.safe_load(out.read_text())
    rc, script, err = await run_cli("render", "ipxe", "ocp-agent-0", "--config", str(etc / "bootserver.yaml"))
    assert rc == 0, err
    assert kernel_line(script)[4:] == KARGS


async def test_a_pxe_file_replaced_by_a_link_or_a_fifo_after_import_is_never_read(
        tmp_path: Path, reference: Path) -> None:
    """Trust what you opened: a link or a fifo planted in ``boot-artifacts/`` between the import and the
    first fetch is refused in one line naming the file, never followed (a link to a copy with the very
    bytes imported is refused too) nor waited on (a fifo blocked the server's event loop), and nothing
    of it reaches the cache."""
    import os

    config = main_config(tmp_path, reference)
    inst = agent_dir(tmp_path)
    rc, _, stderr = await openshift_import(config, str(inst), "--output", str(tmp_path / "nodes.d" / "ostest.yaml"))
    assert rc == 0, stderr
    initrd = inst / "boot-artifacts" / "agent.x86_64-initrd.img"
    copy = tmp_path / "elsewhere.img"
    copy.write_bytes(initrd.read_bytes())
    initrd.unlink()
    initrd.symlink_to(copy)
    sync = ("sync-images", "--stream", "ostest-agent", "--config", str(config))
    rc, _, err = await run_cli(*sync)
    assert rc == 1
    (line,) = (x for x in err.splitlines() if "initrd" in x)
    assert initrd.as_uri() in line and "link" in line and str(copy) not in line
    initrd.unlink()
    os.mkfifo(initrd)
    rc, _, err = await run_cli(*sync, timeout=30)
    assert rc == 1
    (line,) = (x for x in err.splitlines() if "initrd" in x)
    assert initrd.as_uri() in line and "not a regular file" in line
    assert not list((tmp_path / "cache").rglob("agent.x86_64-initrd.img"))
    # the import reads no link or fifo either: one line naming the file, nothing written
    out = tmp_path / "nodes.d" / "again.yaml"
    rc, _, stderr = await openshift_import(config, str(inst), "--output", str(out), timeout=30)
    assert rc == 2 and stderr.startswith(f"bootserver: {initrd}: cannot read: not a regular file")
    assert not out.exists()


async def test_a_private_release_comes_from_this_server_even_for_a_node_in_a_facility(
        tmp_path: Path, reference: Path, aiohttp_client: Any) -> None:
    """A facility's cache (``facilities.<name>.base_url``) is another server, which holds neither the
    agent's files nor the import: a private artifact's signed URL names this server's base URL whatever
    the node's facility, so the secrets never go to (nor through) a cache."""
    config = main_config(tmp_path, reference, facilities={"ny5": {"base_url": "http://cache.ny5.example:8080"}})
    await imported_with(tmp_path, config, facility="ny5")
    loaded = load_config(config)
    client = await start_app(aiohttp_client, loaded)
    async with client.get("/boot.ipxe", params={"mac": MAC_A}) as r:
        assert r.status == 200
        script = await r.text()
    urls = [w for line in script.splitlines() if line.startswith(("kernel ", "initrd "))
            for w in shlex.split(line) if "/artifacts/" in w]
    assert len(urls) == 3 and "cache.ny5.example" not in script
    assert all(u.removeprefix("coreos.live.rootfs_url=").startswith(loaded.server.effective_base_url + "/artifacts/")
               for u in urls)


async def test_an_agent_node_is_handed_out_by_its_mac_alone(
        tmp_path: Path, reference: Path, aiohttp_client: Any) -> None:
    """The generic entry's other selectors (``?hostname=``, ``?uuid=``) name a node without its MAC: a
    machine of the machine network asking for an agent host's hostname (agent-config's, as easy to guess
    as ``master-0``) would be handed the signed URLs of the initrd that holds the cluster's secrets. A
    node of a private stream is handed out by its MAC alone; the other selectors get what an unknown
    machine gets."""
    config = main_config(tmp_path, reference)
    await imported_with(tmp_path, config, uuid="4c4c4544-0000-1000-8000-000000000001")
    client = await start_app(aiohttp_client, load_config(config))
    for selector in ({"hostname": "agent-0"}, {"uuid": "4c4c4544-0000-1000-8000-000000000001"},
                     {"hostname": "agent-0", "mac": STRANGER}):
        async with client.get("/boot.ipxe", params=selector) as r:
            body = await r.text()
        assert "/artifacts/" not in body and "ostest" not in body and "agent-0" not in body, (selector, body)
    async with client.get("/boot.ipxe", params={"mac": MAC_A, "hostname": "agent-1"}) as r:
        assert r.status == 200 and "node=agent-0" in await r.text()  # the MAC, first of the selectors
    async with client.get("/boot.ipxe", params={"hostname": "steady"}) as r:  # other nodes as before
        assert r.status == 200 and "steady" in await r.text()


def test_the_default_node_never_boots_a_private_stream(tmp_path: Path, reference: Path) -> None:
    """Any machine chaining ``/boot.ipxe`` gets the default node's boot: a private stream's never."""
    from support.helpers import write_config

    from bootserver.errors import ConfigError

    config = write_config(tmp_path / "bootserver.yaml", {
        "streams": {"agent": {"metadata": str(reference / "rhcos-stream-4.16.json"), "private": True}},
        "profiles": {"l": {"stream": "agent", "mode": "live"}},
        "nodes": {"anyone": {"profile": "l", "default": True}}})
    with pytest.raises(ConfigError, match=r"nodes\.anyone\.default: stream 'agent' is private"):
        load_config(config)


async def test_new_pxe_files_update_every_store_node_as_they_update_every_file_node(
        tmp_path: Path, reference: Path) -> None:
    """With ``--nodes-to-store`` the nodes' specs do not change when ``agent create pxe-files`` made new
    files, but what they boot does (a new release): each node is ``updated``, as in a file; the same
    files again change nothing."""
    config = main_config(tmp_path, reference)
    inst = agent_dir(tmp_path)
    args = ("--output", str(tmp_path / "nodes.d" / "ostest.yaml"), "--nodes-to-store")
    rc, stdout, stderr = await openshift_import(config, str(inst), *args)
    assert rc == 0, stderr
    assert stdout.splitlines()[:2] == ["agent-0: created", "agent-1: created"]
    (inst / "boot-artifacts" / "agent.x86_64-initrd.img").write_bytes(b"a new initrd\n")
    rc, stdout, stderr = await openshift_import(config, str(inst), *args)
    assert rc == 0, stderr
    assert stdout.splitlines()[:2] == ["agent-0: updated", "agent-1: updated"]
    rc, stdout, stderr = await openshift_import(config, str(inst), *args)
    assert rc == 0, stderr
    assert stdout.splitlines()[:2] == ["agent-0: unchanged", "agent-1: unchanged"]


async def test_a_link_planted_in_the_private_cache_is_never_followed(
        tmp_path: Path, reference: Path, aiohttp_client: Any) -> None:
    """A link in place of a cached private artifact (pointing at a file with the very bytes) is not
    served on the node's own signed URL, nor copied over: the cache opens what is there, never a link."""
    config = main_config(tmp_path, reference)
    inst = agent_dir(tmp_path)
    rc, _, stderr = await openshift_import(config, str(inst), "--output", str(tmp_path / "nodes.d" / "ostest.yaml"))
    assert rc == 0, stderr
    rc, _, err = await run_cli("sync-images", "--stream", "ostest-agent", "--config", str(config))
    assert rc == 0, err
    (cached,) = (tmp_path / "cache" / "private").rglob("agent.x86_64-initrd.img")
    planted = tmp_path / "planted.img"
    planted.write_bytes(cached.read_bytes())
    cached.unlink()
    cached.symlink_to(planted)
    client = await start_app(aiohttp_client, load_config(config))
    async with client.get("/boot.ipxe", params={"mac": MAC_A}) as r:
        script = await r.text()
    url = urlsplit(next(w for line in script.splitlines() if line.startswith("initrd ") for w in shlex.split(line)
                        if w.startswith("http")))
    async with client.get(f"{url.path}?{url.query}") as r:
        body = await r.read()
    assert r.status == 404 and stand_ins()["agent.x86_64-initrd.img"] not in body
    assert cached.is_symlink()
