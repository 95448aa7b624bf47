"""``bootserver nodes adopt``: a discovered machine (:mod:`bootserver.discovery`) becomes a node.

The node (its MAC and SMBIOS UUID as reported, ``hostname`` = its name, ``selectable: true`` so that
``/boot.ipxe`` hands it its script from any address, as it answered the machine while it waited) is
written as one YAML file that the config's ``include:`` names, atomically
(:func:`bootserver.files.write_atomic`); the config is then loaded again with it, and a config that does
not load is refused with the file removed, so nothing half-written stays. Then the running server
reloads (:mod:`bootserver.reload`), and the waiting machine gets its node's script at its next ask.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from .config import Config, load_config, normalize_mac
from .dhcp.engine import signal_engine
from .discovery import Discovered
from .errors import BootserverError, InputError
from .files import write_atomic
from .reload import check_config, signal_server, wait_status
from .state import StateStore
from .values import HOSTNAME_RULE, NAME_RE, UUID_RE, check_hostname


@dataclass(frozen=True)
class Adopted:
    """What :func:`adopt` did: the node's name, the file written and the machine it was."""

    name: str
    file: Path
    machine: Discovered


def _find(records: list[Discovered], key: str) -> Discovered:
    text = key.strip().lower()
    if UUID_RE.match(text):
        hit = next((d for d in records if d.uuid == text), None)
    else:
        try:
            mac = normalize_mac(text)
        except ValueError:
            raise InputError(f"{key!r} is neither a MAC (aa:bb:cc:dd:ee:ff) nor a UUID") from None
        hit = next((d for d in records if d.mac == mac), None)
    if hit is None:
        raise InputError(f"no discovered machine {text} (`bootserver nodes discovered` lists them)")
    return hit


def default_file(config: Config, name: str) -> Path:
    """Where a node adopted without ``--file`` goes: ``nodes.d/<name>.yaml`` beside the config file."""
    return config.base_dir / "nodes.d" / f"{name}.yaml"


def included(config: Config, path: Path) -> bool:
    """Whether the config's ``include:`` names ``path`` (a pattern of it matches, resolved against the
    config's folder)."""
    target = str(path.resolve())
    return any(fnmatch.fnmatch(target, str(config.base_dir / os.path.expanduser(p))) for p in config.includes)


def node_yaml(name: str, profile: str, machine: Discovered, at: float) -> str:
    """The node's file: two comment lines saying where it came from (the machine's facts as one JSON
    line: quotes, newlines and control characters escaped) and ``nodes: {name: ...}`` written by PyYAML
    (every value quoted as YAML needs)."""
    node: dict[str, object] = {"profile": profile, "hostname": name, "mac": [machine.mac], "selectable": True}
    if machine.uuid is not None:
        node["uuid"] = machine.uuid
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
    return (f"# adopted by `bootserver nodes adopt` at {stamp}: the machine discovered as {machine.mac}\n"
            f"# reported facts: {json.dumps(dict(machine.facts), sort_keys=True)}\n"
            + yaml.safe_dump({"nodes": {name: node}}, sort_keys=False))


async def adopt(config: Config, store: StateStore, key: str, *, name: str, profile: str,
                file: Path | None = None) -> Adopted:
    """Make the discovered machine ``key`` (its MAC or UUID) node ``name`` of ``profile`` (see the module
    docstring; then :func:`reload_server`); ``file`` defaults to :func:`default_file`. Returns what was
    done.

    Raises :class:`~bootserver.errors.InputError` (exit 2; nothing written): an unknown machine, a name,
    MAC or UUID already in use, no such profile, a file that exists or that ``include:`` does not name,
    a config that would not load with the node (its error)."""
    if not re.match(NAME_RE, name):
        raise InputError(f"--name {name!r}: a node name is letters, digits, '.', '_' and '-' (at most 63)")
    try:
        check_hostname(name)
    except ValueError:
        raise InputError(f"--name {name!r}: it becomes the node's hostname ({HOSTNAME_RULE})") from None
    if name in config.nodes:
        where = config.origins.get(f"nodes.{name}", config.source)
        raise InputError(f"--name {name}: node {name} exists already ({where})")
    if profile not in config.profiles:
        raise InputError(f"--profile {profile}: no such profile (profiles: {', '.join(config.profiles) or 'none'})")
    machine = _find(await store.discovered(), key)
    owner = config.node_by_mac(machine.mac) or (machine.uuid and config.node_by_uuid(machine.uuid))
    if owner:
        raise InputError(f"machine {machine.mac} is node {owner} already (its MAC or UUID is in the config)")
    path = (file if file is not None else default_file(config, name)).absolute()
    if config.source == "<default>":
        raise InputError("nodes adopt writes into the files a config's include: names: pass --config")
    if not included(config, path):
        raise InputError(f"{path} is not named by the include: of {config.source}: add e.g. "
                         "`include: [nodes.d/*.yaml]` to it, or pass a --file it names")
    if path.exists():
        raise InputError(f"{path} exists already: pass another --file")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, node_yaml(name, profile, machine, time.time()).encode())
    try:
        check_config(load_config(config.source))
    except BootserverError:
        path.unlink(missing_ok=True)
        raise
    await store.forget_discovered([machine.mac])
    return Adopted(name, path, machine)


def reload_server(config: Config, timeout: float) -> str:
    """Signal the running server to reload and wait for its outcome (:mod:`bootserver.reload`); the
    outcome in words (no server running is not an error: it reads the file when it starts). A running
    ``bootserver dhcp`` is signalled too, so the node's reservation follows (:mod:`bootserver.dhcp.engine`)."""
    engine = signal_engine(config) if config.dhcp is not None else None
    dhcp = f"; sent SIGHUP to bootserver dhcp (process {engine}) for its reservation" if engine else ""
    return _reload_serve(config, timeout) + dhcp


def _reload_serve(config: Config, timeout: float) -> str:
    try:
        sent = time.time()
        pid = signal_server(config)
    except InputError:
        return "no bootserver serve runs with this state_dir: it reads the node when it starts"
    status = wait_status(config, sent, timeout)
    if status is None:
        return f"sent SIGHUP to bootserver serve (process {pid}); no outcome within {timeout:g} s: see its log"
    if status.get("result") != "ok":
        return f"the server refused the reload: {status.get('message')}"
    return f"the server reloaded ({status.get('message')})"
