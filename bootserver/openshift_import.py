"""``bootserver openshift import DIR``: an OpenShift install directory becomes one included config file.

What it reads (docs/openshift.md): ``DIR/install-config.yaml`` (the copy kept before ``openshift-install
create`` consumed it) and/or ``DIR/agent-config.yaml``, the role Ignition configs of ``openshift-install
create ignition-configs`` (``bootstrap.ign``, ``master.ign``, ``worker.ign``, ``arbiter.ign``), and the
release's stream metadata (``DIR/rhcos.json`` from ``openshift-install coreos print-stream-json``, or
``--stream-json FILE``). The hosts are mapped once, by :func:`bootserver.openshift.read_cluster`.

What it writes: ``--output FILE``, which the config's ``include:`` must read: the cluster's stream
(``streams.<cluster>``: the metadata file by its absolute path), one profile per role and install
device (``<cluster>-<role>``: the role's ``.ign`` by its absolute path as the real config, install
mode, ``platform_id: metal``) and the nodes. BMC passwords go into files of mode 0600 in a folder of mode
0700 beside it (``FILE`` without its suffix, plus ``.passwords/<host>``), named by the nodes'
``password_file``; the pull secret and the SSH key are never read into anything written. ``bootstrap.ign``
(full of the cluster's secrets) stays where the installer wrote it, named by its path.

All or nothing: the new file's text is checked first, as ``check-config`` checks it (the config loaded
with the new text in the file's place, :func:`bootserver.config.loader.load_config` ``replacing``, then
:func:`bootserver.reload.check_config`), and only then written (atomically); a password file changed for
the check is put back when the check fails. Then a running ``serve`` and ``bootserver dhcp`` reload as
``bootserver reload`` has them do; a server that refuses puts the old file back (exit 1). Writing the
same files again changes nothing (the text holds no time).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from .config import Config, load_config
from .config.loader import include_files
from .dhcp.engine import reload_engine
from .errors import BootserverError, InputError
from .files import open_file, write_atomic
from .ipxe import UnsafeValueError
from .kargs import check_agent_karg
from .logs import escape_controls
from .node_writes import apply_nodes, checked
from .openshift import Cluster, ClusterRefused, Host, node_entry, read_cluster
from .reload import check_config
from .reload import reload_server as reload_running
from .sealing import SealError, seal, unseal
from .state.nodestore import NodeStore

#: ``state_dir``'s lock file of :func:`serialized`.
LOCK_FILE = "openshift-import.lock"

#: install-config's ``architecture`` (Go's names) -> bootserver's.
ARCHITECTURES = {"amd64": "x86_64", "x86_64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64"}


class ImportFailed(BootserverError):
    """The file was written and checked but the running server refused it: the old file was put back
    (exit 1)."""


@dataclass(frozen=True)
class Imported:
    """What :func:`import_cluster` did: ``changes`` (node -> ``created``, ``updated``, ``unchanged``,
    in file order), ``warnings`` (lines), ``output`` (the file), ``outcome`` (the reloads in words)."""

    changes: Mapping[str, str]
    warnings: tuple[str, ...]
    output: Path
    outcome: str


#: The agent's PXE files of ``openshift-install agent create pxe-files`` in ``boot-artifacts/``, by
#: artifact kind (``{arch}``: x86_64, aarch64).
AGENT_FILES = {"kernel": "agent.{arch}-vmlinuz", "initramfs": "agent.{arch}-initrd.img",
               "rootfs": "agent.{arch}-rootfs.img"}

#: The agent's kernel arguments when ``boot-artifacts/`` holds no ``agent.<arch>.ipxe`` (the installer
#: writes it only with ``bootArtifactsBaseURL``): the RHCOS live ISO's ``coreos/kargs.json`` default
#: without ``coreos.liveiso=``, as the installer writes it into the script (DESIGN.md); ``console=ttyS0``
#: follows on the external platform, ``fips=1`` with ``fips: true``.
DEFAULT_AGENT_KARGS = ("ignition.firstboot", "ignition.platform.id=metal")


@dataclass(frozen=True)
class AgentFiles:
    """The agent's PXE files as read (agent mode): ``files`` (artifact kind -> the file in
    ``boot-artifacts/``), ``sha256`` (kind -> its sha256, hex, read at import), ``kargs`` (the words of
    the installer's kernel line without its kernel URL, ``initrd=`` and ``coreos.live.rootfs_url=``),
    ``kargs_from`` (the ``.ipxe`` file they were read from, ``None``: :data:`DEFAULT_AGENT_KARGS`)."""

    files: Mapping[str, Path]
    sha256: Mapping[str, str]
    kargs: tuple[str, ...]
    kargs_from: Path | None


@dataclass(frozen=True)
class InstallDir:
    """An install directory as read: the parsed ``install_config``/``agent_config`` (``None`` when
    absent), ``ignition`` (role -> the ``.ign`` file that exists), ``stream`` (the stream metadata file;
    ``None`` in agent mode), ``arch``, ``agent`` (agent mode: its PXE files; ``None``: UPI)."""

    path: Path
    install_config: Mapping[str, Any] | None
    agent_config: Mapping[str, Any] | None
    ignition: Mapping[str, Path]
    stream: Path | None
    arch: str
    agent: AgentFiles | None = None


class _InstallerLoader(yaml.SafeLoader):
    """PyYAML's safe loader reading numbers as YAML 1.2 does, as the installer's Go YAML reads them: an
    unquoted all-digit MAC (``52:54:00:00:10:00``) stays a string, not YAML 1.1's base-60 integer."""


_InstallerLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_InstallerLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789"))
_InstallerLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+.0123456789"))


def _yaml(path: Path) -> Mapping[str, Any] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    try:
        doc = yaml.load(text, Loader=_InstallerLoader)  # a SafeLoader: no arbitrary objects
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise InputError(f"{path}: {'line ' + str(mark.line + 1) + ': ' if mark else ''}invalid YAML: "
                         f"{getattr(e, 'problem', None) or 'cannot parse'}") from None
    if not isinstance(doc, Mapping):
        raise InputError(f"{path}: expected a mapping at the top level")
    return doc


def read_install_dir(path: Path, stream_json: Path | None = None, mode: str | None = None) -> InstallDir:
    """Read the install directory ``path`` (module docstring). ``mode``: ``upi`` (the role ``.ign``
    files and the stream metadata), ``agent`` (the agent's PXE files in ``boot-artifacts/``:
    :func:`read_agent_files`), ``None``: ``agent`` when ``path`` holds ``boot-artifacts/``, else ``upi``.
    Raises :class:`~bootserver.errors.InputError` naming the file: no such folder, neither YAML file, a
    file that is not YAML, no stream metadata (UPI) or agent file (agent), an architecture bootserver
    does not boot."""
    if not path.is_dir():
        raise InputError(f"{path}: not a folder (the install directory of openshift-install)")
    ic = _yaml(path / "install-config.yaml")
    ac = _yaml(path / "agent-config.yaml")
    if ic is None and ac is None:
        raise InputError(f"{path}: neither install-config.yaml nor agent-config.yaml (keep a copy of "
                         "install-config.yaml: openshift-install create consumes it)")
    arch = "amd64"
    if ic is not None:
        cp = ic.get("controlPlane")
        arch = str(cp.get("architecture") or arch) if isinstance(cp, Mapping) else arch
    if arch not in ARCHITECTURES:
        raise InputError(f"{path / 'install-config.yaml'}: controlPlane.architecture: {arch!r}: bootserver boots "
                         "amd64 and arm64")
    if mode == "agent" or (mode is None and (path / "boot-artifacts").is_dir()):
        agent = read_agent_files(path / "boot-artifacts", ARCHITECTURES[arch], ic)
        return InstallDir(path.absolute(), ic, ac, {}, None, ARCHITECTURES[arch], agent)
    stream = (stream_json or path / "rhcos.json").absolute()
    if not stream.is_file():
        raise InputError(f"{stream}: no stream metadata: run `openshift-install coreos print-stream-json > "
                         f"{path / 'rhcos.json'}` or pass --stream-json FILE")
    ignition = {role: (path / f"{role}.ign").absolute() for role in ("bootstrap", "master", "worker", "arbiter")
                if (path / f"{role}.ign").is_file()}
    return InstallDir(path.absolute(), ic, ac, ignition, stream, ARCHITECTURES[arch])


def read_agent_files(folder: Path, arch: str, install_config: Mapping[str, Any] | None) -> AgentFiles:
    """The agent's PXE files in ``folder`` (``boot-artifacts/`` of ``openshift-install agent create
    pxe-files``) for ``arch``: each file's sha256, read now, and the kernel arguments of the installer's
    ``agent.<arch>.ipxe`` (:func:`agent_kargs`) or, without that script, :data:`DEFAULT_AGENT_KARGS` (with
    ``console=ttyS0`` on ``platform.external``, ``fips=1`` with ``fips: true``, as the installer adds
    them). Raises :class:`~bootserver.errors.InputError` naming the file missing or unreadable (a link or
    a fifo in a file's place included), or the script's word that cannot be a karg."""
    files = {kind: (folder / name.format(arch=arch)).absolute() for kind, name in AGENT_FILES.items()}
    sha256 = {}
    for kind, path in files.items():
        try:  # the file itself: no link in its place, no fifo or device (the server reads it so too)
            with open(open_file(path.parent, path.name), "rb") as f:
                sha256[kind] = hashlib.file_digest(f, "sha256").hexdigest()
        except OSError as e:
            raise InputError(f"{path}: cannot read: {e.strerror} (run `openshift-install agent create pxe-files`; "
                             "the agent's vmlinuz, initrd.img and rootfs.img are needed)") from None
    script = folder / f"agent.{arch}.ipxe"
    try:
        text = script.read_text(encoding="utf-8")
    except FileNotFoundError:
        kargs = list(DEFAULT_AGENT_KARGS)
        platform = install_config.get("platform") if isinstance(install_config, Mapping) else None
        if isinstance(platform, Mapping) and "external" in platform:
            kargs.append("console=ttyS0")
        if isinstance(install_config, Mapping) and install_config.get("fips") is True:
            kargs.append("fips=1")
        return AgentFiles(files, sha256, tuple(kargs), None)
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{script}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    return AgentFiles(files, sha256, agent_kargs(text, script), script.absolute())


def agent_kargs(text: str, source: Path | str) -> tuple[str, ...]:
    """The kernel arguments of the installer's iPXE script ``text`` (``agent.<arch>.ipxe``: ``kernel
    BASE/agent.<arch>-vmlinuz initrd=initrd coreos.live.rootfs_url=BASE/agent.<arch>-rootfs.img KARGS``):
    the words after the kernel URL without ``initrd=`` and ``coreos.live.rootfs_url=``, whose values are
    bootserver's own. Raises :class:`~bootserver.errors.InputError` naming ``source``: no ``kernel``
    line, or a word iPXE would not read literally."""
    for line in text.splitlines():
        words = line.split()
        if not words or words[0] != "kernel":
            continue
        words = [w for w in words[1:] if not w.startswith("--")][1:]
        kargs = tuple(w for w in words if w.split("=", 1)[0] not in ("initrd", "coreos.live.rootfs_url"))
        for word in kargs:
            try:
                check_agent_karg(word)
            except UnsafeValueError as e:
                raise InputError(f"{source}: kernel line: {escape_controls(str(e))}") from None
        return kargs
    raise InputError(f"{source}: no kernel line (openshift-install agent create pxe-files writes `kernel URL "
                     "initrd=initrd coreos.live.rootfs_url=URL ...`)")


def release_path(output: Path) -> Path:
    """The agent release's stream metadata beside ``output``: ``<output without suffix>.release.json``."""
    return output.with_suffix(".release.json")


def release_text(cluster: Cluster, install: InstallDir) -> str:
    """The agent's PXE files as CoreOS stream metadata (the format of :func:`bootserver.streams.parse_stream`),
    one release of ``install.arch`` whose artifacts are the files by ``file://`` URL with the sha256
    read at import, named ``agent-<16 hex digits of their sha256s>`` (new files, a new release). The
    same files give the same text."""
    agent = install.agent
    assert agent is not None
    digest = hashlib.sha256(" ".join(agent.sha256[k] for k in AGENT_FILES).encode()).hexdigest()[:16]
    pxe = {kind: {"location": agent.files[kind].as_uri(), "sha256": agent.sha256[kind]} for kind in AGENT_FILES}
    doc = {"stream": f"{cluster.name}-agent",
           "metadata": {"generator": "bootserver openshift import (agent mode)"},
           "architectures": {install.arch: {"artifacts": {"metal": {"release": f"agent-{digest}",
                                                                    "formats": {"pxe": pxe}}}}}}
    return json.dumps(doc, indent=2) + "\n"


def agent_refusals(cluster: Cluster, *, install_dev: str | None, bootstrap_mac: str | None,
                   console: str | None) -> list[str]:
    """Why ``cluster`` cannot boot the agent's PXE files (one line each; none: it can): options of the
    UPI import, a host whose BMC boots virtual media (the PXE files boot over the network) or that asks
    for UEFI Secure Boot (iPXE is not signed)."""
    lines = [f"{option}: not in agent mode ({why})" for option, value, why in (
        ("--install-dev", install_dev, "the agent installs to the disk of the host's rootDeviceHints"),
        ("--bootstrap-mac", bootstrap_mac, "the rendezvous host bootstraps the cluster"),
        ("--console", console, "the hosts boot the installer's kernel line as it is")) if value is not None]
    for host in cluster.hosts:
        if host.bmc is not None and host.bmc.settings.get("boot_source") == "virtual-media":
            lines.append(escape_controls(
                f"{host.source}: host {host.name}: bmc.address: a virtual media BMC boots an image; the agent's "
                "PXE files boot from the network: write the same BMC as redfish:// (idrac-redfish://, "
                "ilo5-redfish://)"))
        if host.secure_boot:
            lines.append(escape_controls(
                f"{host.source}: host {host.name}: bootMode: UEFISecureBoot: the agent's PXE files boot through "
                "iPXE, which Secure Boot refuses (boot the agent ISO instead)"))
    return lines


def _slug(device: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", device.removeprefix("/dev/")).strip("-.")[:40] or "disk"


def profiles_of(cluster: Cluster, install: InstallDir,
                console: str | None = None) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The profiles of ``cluster`` (name -> mapping) and each host's profile (host -> name): one per role
    and install device, ``<cluster>-<role>`` for the device most of the role's hosts use (the first on a
    tie), ``<cluster>-<role>-<device>`` for the others (agent mode: one, ``<cluster>-agent``, mode
    ``agent`` with the installer's kargs); ``console``: their console karg
    (``console=ttyS1,115200n8``; none by default, as platform ``metal`` names none). Raises
    :class:`~bootserver.errors.InputError` for a role whose ``.ign`` is missing."""
    profiles: dict[str, dict[str, Any]] = {}
    of: dict[str, str] = {}
    if install.agent is not None:  # one initramfs for every host: its Ignition tells them apart by MAC
        name = f"{cluster.name}-agent"
        profiles[name] = {"stream": name, "arch": install.arch, "mode": "agent", "kargs": list(install.agent.kargs)}
        return profiles, {h.name: name for h in cluster.hosts}
    for role in dict.fromkeys(h.role for h in cluster.hosts):
        hosts = [h for h in cluster.hosts if h.role == role]
        ign = install.ignition.get(role)
        if ign is None:
            raise InputError(f"{install.path / (role + '.ign')}: missing, and {hosts[0].name} is a {role}: run "
                             f"`openshift-install create ignition-configs --dir {install.path}` first")
        common = Counter(h.install_dev for h in hosts).most_common(1)[0][0]
        for host in hosts:
            name = f"{cluster.name}-{role}"
            if host.install_dev != common and host.install_dev is not None:
                name += f"-{_slug(host.install_dev)}"
            of[host.name] = name
            profiles.setdefault(name, {
                "stream": cluster.name, "arch": install.arch, "mode": "install",
                "install_dev": host.install_dev, "ignition": str(ign), "platform_id": "metal",
                **({"console": console} if console else {})})
    return profiles, of


def password_folder(output: Path) -> Path:
    """The folder of the BMC password files beside ``output``: ``<output without suffix>.passwords``."""
    return output.with_suffix(".passwords")


def render(cluster: Cluster, install: InstallDir, output: Path, console: str | None = None, *,
           with_nodes: bool = True) -> tuple[str, dict[Path, str]]:
    """The included file's text and the password files (path -> password) of ``cluster``; ``console`` as
    :func:`profiles_of`'s; without ``with_nodes`` the file holds the stream and profiles alone (the
    nodes go into the state store: :func:`store_specs`). Raises :class:`~bootserver.errors.InputError`
    as :func:`profiles_of`."""
    profiles, of = profiles_of(cluster, install, console)
    passwords: dict[Path, str] = {}
    nodes = {}
    for host in cluster.hosts if with_nodes else ():
        password_file = None
        if host.bmc is not None and host.bmc.password is not None:
            path = password_folder(output) / host.name
            passwords[path] = host.bmc.password
            password_file = str(path)
        nodes[host.name] = node_entry(host, of[host.name], password_file)
    if install.agent is not None:
        streams = {f"{cluster.name}-agent": {"metadata": str(release_path(output)), "architectures": [install.arch],
                                             "private": True}}
    else:
        streams = {cluster.name: {"metadata": str(install.stream), "architectures": [install.arch]}}
    doc: dict[str, Any] = {"streams": streams, "profiles": profiles}
    if with_nodes:
        doc["nodes"] = nodes
    # the folder's name as one comment line, whatever it holds (a newline would start a YAML line of its own)
    head = (f"# written by `bootserver openshift import {escape_controls(str(install.path))}`: a new import "
            "replaces this file.\n"
            + ("# BMC passwords are in the password_file of each node (mode 0600), never here.\n" if with_nodes
               else "# Its nodes are in the state store (`bootserver nodes list`), their BMC passwords sealed.\n"))
    return head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False), passwords


def store_specs(cluster: Cluster, install: InstallDir, state_dir: Path, stored: Mapping[str, Any],
                console: str | None = None) -> dict[str, dict[str, Any]]:
    """The cluster's nodes as store nodes (name -> mapping of the config's node schema): each BMC
    password sealed for the node (:func:`bootserver.sealing.seal`, ``password_sealed``: the store's
    write-only secret), the sealed text of ``stored`` (name -> the store node's mapping) kept when it
    opens to the same password, so an import of the same files changes nothing. Raises
    :class:`~bootserver.sealing.SealError` for an unreadable key."""
    _, of = profiles_of(cluster, install, console)
    specs = {}
    for host in cluster.hosts:
        spec = node_entry(host, of[host.name])
        if host.bmc is not None and host.bmc.password is not None:
            where = host.bmc.provider
            old = _get_text(stored.get(host.name), where, "password_sealed")
            keep = None
            if old is not None:
                with contextlib.suppress(SealError):
                    keep = old if unseal(state_dir, host.name, where, old) == host.bmc.password else None
            spec[where]["password_sealed"] = keep or seal(state_dir, host.name, where, host.bmc.password)
        specs[host.name] = spec
    return specs


def _get_text(spec: Any, where: str, key: str) -> str | None:
    value = spec.get(where, {}).get(key) if isinstance(spec, Mapping) and isinstance(spec.get(where), Mapping) else None
    return value if isinstance(value, str) else None


def _changes(old_text: str | None, new_text: str, changed_passwords: set[str], hosts: Sequence[Host]) -> dict[str, str]:
    old: dict[str, Any] = {}
    old_profiles: dict[str, Any] = {}
    if old_text is not None:
        with contextlib.suppress(yaml.YAMLError, TypeError, ValueError):
            doc = yaml.safe_load(old_text)
            old = dict(doc.get("nodes") or {}) if isinstance(doc, dict) else {}
            old_profiles = dict(doc.get("profiles") or {}) if isinstance(doc, dict) else {}
    new_doc = yaml.safe_load(new_text)
    new = new_doc["nodes"]
    out = {}
    for host in hosts:
        if host.name not in old:
            out[host.name] = "created"
        elif old[host.name] != new[host.name] or host.name in changed_passwords:
            out[host.name] = "updated"
        else:
            out[host.name] = "unchanged"
    for host in hosts:  # a changed profile or stream changes what its nodes boot
        profile = new[host.name]["profile"]
        if out[host.name] == "unchanged" and old_profiles.get(profile) != new_doc["profiles"][profile]:
            out[host.name] = "updated"
    for name in old:
        if name not in new:
            out[name] = "removed"
    return out


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None


def _write_passwords(passwords: Mapping[Path, str], before: dict[Path, str | None]) -> set[str]:
    """Write each changed password file (0600, its folder 0700), keeping in ``before`` the previous
    content of each file written (``None``: it was new); returns the hosts whose password changed."""
    for path, password in passwords.items():
        old = _read(path)
        if old == password + "\n":
            continue
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(path.parent, 0o700)
        before[path] = old
        write_atomic(path, (password + "\n").encode(), 0o600)
    return {p.name for p in before}


def _restore(before: Mapping[Path, str | None], mode: int = 0o600) -> None:
    for path, text in before.items():
        if text is None:
            path.unlink(missing_ok=True)
        else:
            write_atomic(path, text.encode(), mode)


def _remove(path: Path, made: Sequence[Path]) -> None:
    path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        password_folder(path).rmdir()  # when empty
    for folder in made:
        with contextlib.suppress(OSError):
            folder.rmdir()


def _placeholder(output: Path, old_text: str | None) -> list[Path]:
    """A new ``output`` is first an empty file (the loader reads it as nothing), so that ``include:``'s
    globs see it; returns the folders made for it (deepest first), for :func:`_remove`."""
    if old_text is not None:
        return []
    made = [p for p in (output.parent, *output.parent.parents) if not p.exists()]
    output.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(output, b"", exclusive=True)
    return made


def _check_included(config: Config, output: Path) -> None:
    if output.resolve() not in include_files(config.base_dir, config.includes):
        raise InputError(f"{output} is not read by the include: of {config.source} (its patterns: "
                         f"{', '.join(config.includes) or 'none'}; '*' stays within one folder): add it, "
                         "or pass an --output it reads")


@contextlib.contextmanager
def serialized(config: Config) -> Iterator[None]:
    """Hold ``state_dir/openshift-import.lock`` (an exclusive ``flock``) for the block: imports with one
    ``state_dir`` run one after the other, so two at once never mix one's file with the other's password
    files or store nodes. The lock goes with the process (a killed import leaves nothing held)."""
    config.state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(config.state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read_cluster(install: InstallDir, install_dev: str | None, bootstrap_mac: str | None,
                  bootstrap_bmc: str | None, console: str | None) -> Cluster:
    """The install directory's cluster (:func:`bootserver.openshift.read_cluster`; in agent mode without
    install devices, and :func:`agent_refusals`). Raises :class:`~bootserver.openshift.ClusterRefused`."""
    agent = install.agent is not None
    cluster = read_cluster(install.install_config, install.agent_config, install_dev=None if agent else install_dev,
                           need_device=not agent, bootstrap_mac=None if agent else bootstrap_mac,
                           bootstrap_bmc=bootstrap_bmc)
    if install.agent is not None:
        refused = agent_refusals(cluster, install_dev=install_dev, bootstrap_mac=bootstrap_mac, console=console)
        if refused:
            raise ClusterRefused(refused)
        if install.agent.kargs_from is None:
            script = install.agent.files["kernel"].parent / f"agent.{install.arch}.ipxe"
            cluster = replace(cluster, warnings=(*cluster.warnings, escape_controls(
                f"{script}: none (agent-config.yaml sets no bootArtifactsBaseURL): the hosts boot the installer's "
                f"default kernel arguments: {' '.join(install.agent.kargs)}")))
    return cluster


def _write_release(cluster: Cluster, install: InstallDir, output: Path, before: dict[Path, str | None]) -> bool:
    """Agent mode: write the release's stream metadata (:func:`release_text`) beside ``output`` when it
    changed, keeping its previous text in ``before``; whether it changed."""
    if install.agent is None:
        return False
    path = release_path(output)
    text = release_text(cluster, install)
    old = _read(path)
    if old == text:
        return False
    before[path] = old
    write_atomic(path, text.encode(), 0o644)
    return True


def import_cluster(config: Config, install: InstallDir, output: Path, *, install_dev: str | None = None,
                   bootstrap_mac: str | None = None, bootstrap_bmc: str | None = None,
                   console: str | None = None, reload_timeout: float = 15.0) -> Imported:
    """Import the install directory ``install`` into ``output`` (module docstring) and reload the running
    server and DHCP engine; ``console``: the profiles' console karg. Returns what changed.

    Raises :class:`~bootserver.openshift.ClusterRefused` (exit 2, every refusal) or
    :class:`~bootserver.errors.InputError` / :class:`~bootserver.errors.ConfigError` (exit 2: no
    ``--config``, an ``output`` the config's ``include:`` does not read, a config that would not load or
    check with the new file): nothing written. :class:`ImportFailed` (exit 1): the running server
    refused the reload; the old file is back."""
    if config.source == "<default>":
        raise InputError("openshift import writes a file the config's include: names: pass --config")
    output = output.absolute()
    cluster = _read_cluster(install, install_dev, bootstrap_mac, bootstrap_bmc, console)
    with serialized(config):
        return _import_file(config, cluster, install, output, console, reload_timeout)


def _import_file(config: Config, cluster: Cluster, install: InstallDir, output: Path, console: str | None,
                 reload_timeout: float) -> Imported:
    text, passwords = render(cluster, install, output, console)
    old_text = _read(output)
    made = _placeholder(output, old_text)
    before: dict[Path, str | None] = {}
    released: dict[Path, str | None] = {}
    try:
        _check_included(config, output)
        changed = _write_passwords(passwords, before)
        if _write_release(cluster, install, output, released):  # new agent files: every node boots them
            changed |= {h.name for h in cluster.hosts}
        loaded = load_config(config.source, replacing={output.resolve(): text})
        check_config(loaded)
        changes = _changes(old_text, text, changed, cluster.hosts)
        if text != old_text:
            write_atomic(output, text.encode())
    except BaseException:
        _restore(before)
        _restore(released, 0o644)
        if old_text is None:
            _remove(output, made)
        raise
    if all(v == "unchanged" for v in changes.values()) and text == old_text:
        return Imported(changes, cluster.warnings, output, "nothing changed: no reload")
    try:
        outcome = reload_servers(loaded, list(changes), reload_timeout)
    except ImportFailed:
        if old_text is None:
            _remove(output, made)
        else:
            write_atomic(output, old_text.encode())
        _restore(before)
        _restore(released, 0o644)
        raise
    return Imported(changes, cluster.warnings, output, outcome)


async def import_to_store(config: Config, store: NodeStore, install: InstallDir, output: Path, *,
                          install_dev: str | None = None, bootstrap_mac: str | None = None,
                          bootstrap_bmc: str | None = None, console: str | None = None,
                          reload_timeout: float = 15.0) -> Imported:
    """``--nodes-to-store``: as :func:`import_cluster`, but ``output`` holds the stream and profiles alone
    and the nodes go into the state store (:func:`bootserver.node_writes.apply_nodes`, the path of
    ``nodes apply``: checked as ``check-config`` checks a file node, written all or nothing), their BMC
    passwords sealed (:func:`store_specs`). Order: the file's new text and the nodes are checked
    together first; then the file is written and the servers reload (the new profiles), then the nodes
    are applied (every server picks store nodes up by itself); a failed apply puts the old file back.
    One line per node from the store (``created``, ``updated``, ``unchanged``). Raises as
    :func:`import_cluster`, and what ``apply_nodes`` raises (nothing written to the store)."""
    if config.source == "<default>":
        raise InputError("openshift import writes a file the config's include: names: pass --config")
    output = output.absolute()
    cluster = _read_cluster(install, install_dev, bootstrap_mac, bootstrap_bmc, console)
    with serialized(config):
        return await _import_store(config, store, cluster, install, output, console, reload_timeout)


async def _import_store(config: Config, store: NodeStore, cluster: Cluster, install: InstallDir, output: Path,
                        console: str | None, reload_timeout: float) -> Imported:
    text, _ = render(cluster, install, output, console, with_nodes=False)
    inventory = await store.inventory()
    specs = store_specs(cluster, install, config.state_dir, {n: s.spec for n, s in inventory.nodes.items()}, console)
    old_text = _read(output)
    made = _placeholder(output, old_text)
    released: dict[Path, str | None] = {}
    try:
        _check_included(config, output)
        new_release = _write_release(cluster, install, output, released)
        loaded = load_config(config.source, replacing={output.resolve(): text})
        check_config(loaded)
        checked(loaded, inventory, specs)  # the nodes over the new profiles, before anything is written
        if text != old_text:
            write_atomic(output, text.encode())
    except BaseException:
        _restore(released, 0o644)
        if old_text is None:
            _remove(output, made)
        raise
    outcome = "the profiles are unchanged: no reload"
    try:
        if text != old_text or new_release:
            outcome = reload_servers(loaded, [], reload_timeout)
        applied = await apply_nodes(loaded, store, specs)
    except BaseException:
        _restore(released, 0o644)
        if old_text is None:
            _remove(output, made)
        else:
            write_atomic(output, old_text.encode())
        raise
    changes = {a.name: a.outcome for a in applied}
    if new_release:  # new agent files: every node boots them, as in a file (its spec the same)
        changes = {name: "updated" if outcome == "unchanged" else outcome for name, outcome in changes.items()}
    if any(v != "unchanged" for v in changes.values()):
        outcome += "; the nodes are in the state store: every server reads them by itself"
    return Imported(changes, cluster.warnings, output, outcome)


def reload_servers(config: Config, nodes: Sequence[str], timeout: float) -> str:
    """Reload the running ``serve`` of ``config``'s ``state_dir`` and signal a running ``bootserver
    dhcp``, as ``bootserver reload`` does; the outcome in words (no server running is not an error: it
    reads the file when it starts). Raises :class:`ImportFailed` when the server refused the reload,
    gave no outcome within ``timeout`` seconds, or reloaded without one of ``nodes``."""
    try:
        pid, status = reload_running(config, timeout)
    except InputError:
        served = "no bootserver serve runs with this state_dir: it reads the file when it starts"
    else:
        if status is None:
            raise ImportFailed(f"bootserver serve (process {pid}) gave no reload outcome within {timeout:g} s "
                               "(see its log): the old file is back")
        if status.get("result") != "ok":
            raise ImportFailed(f"the server refused the reload ({status.get('message')}): the old file is back")
        served_nodes = status.get("nodes")
        missing = [n for n in nodes if n in config.nodes and isinstance(served_nodes, list) and n not in served_nodes]
        if missing:
            raise ImportFailed(f"the server reloaded without node {missing[0]}: the old file is back")
        served = f"the server reloaded ({status.get('message')})"
    engine = reload_engine(config, timeout)
    return served if engine is None else f"{served}; {engine}"


def describe(imported: Imported) -> list[str]:
    """The lines a user sees: one per node (``<node>: created``), then the reload outcome."""
    return [f"{name}: {what}" for name, what in imported.changes.items()] + [imported.outcome]


__all__ = ["AGENT_FILES", "DEFAULT_AGENT_KARGS", "AgentFiles", "ImportFailed", "Imported", "InstallDir",
           "agent_kargs", "agent_refusals", "describe", "import_cluster", "import_to_store", "password_folder",
           "profiles_of", "read_agent_files", "read_install_dir", "release_path", "release_text", "reload_servers",
           "render", "store_specs"]
