"""``bootserver nodes adopt``: a discovered machine (:mod:`bootserver.discovery`) becomes a node.

The node (its MAC and SMBIOS UUID as reported, ``hostname`` = its name, ``addresses`` = the address
its reports came from, or ``--addresses``, which a machine reported from more than one address needs:
two machines claim its MAC, and in ``dhcp: {mode: full}`` the engine's lease for the MAC is shown as
evidence of which one to trust; ``selectable: true`` and no ``addresses`` only when asked
for, with a warning: then anyone who knows its MAC gets its script and configs) is written as one YAML file that the
config's ``include:`` reads, created exclusively (:func:`bootserver.files.write_atomic`). The name and
the machine are claimed first (:func:`claimed`: of two adoptions at once exactly one goes on, the other
is refused naming it). The config is then loaded again with the file, and the node must be in it, from
that file (the loader's own globbing decides, :func:`~bootserver.config.loader.include_files`); else
the file is removed. Then the running server reloads (:mod:`bootserver.reload`) and must serve the node;
only then is the machine dropped from the discovered list. A reload that fails, or a node the reloaded
config lacks, removes the file again: the machine stays discovered (:class:`AdoptionFailed`, exit 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from .config import Config, load_config, normalize_mac
from .config.loader import include_files
from .dhcp.dnsmasq import layout, leases_of
from .dhcp.engine import reload_engine
from .discovery import Discovered
from .errors import BootserverError, InputError
from .files import write_atomic
from .inventory import inventory
from .node_writes import Precondition, apply_nodes, with_store
from .reload import check_config
from .reload import reload_server as reload_running
from .state import StateStore
from .values import HOSTNAME_RULE, NAME_RE, UUID_RE, check_hostname

#: ``state_dir/adopting/``: one file per name and per machine being adopted right now (:func:`claimed`).
CLAIMS = "adopting"


class AdoptionFailed(BootserverError):
    """The node was written but the running server does not serve it (its reload failed, or the reloaded
    config lacks it): the file was removed again and the machine stays discovered (exit 1)."""


@dataclass(frozen=True)
class Adoption:
    """One adoption asked for, built once by :func:`adopt` and handed whole to each step (the node is not
    in the config yet, so there is no :class:`~bootserver.config.ResolvedNode` of it): node ``name``
    (also its hostname) of ``profile``, the discovered ``machine`` (as last read from the state store),
    pinned to ``addresses`` (CIDRs or addresses; ``()``: none), ``selectable`` with ``anywhere``."""

    name: str
    profile: str
    machine: Discovered
    addresses: tuple[str, ...] = ()
    anywhere: bool = False

    def spec(self) -> dict[str, object]:
        """The adopted node's mapping (the config's node schema): its profile, hostname (its name), the
        machine's MAC and UUID, ``addresses`` when pinned, ``selectable: true`` with ``anywhere``."""
        node: dict[str, object] = {"profile": self.profile, "hostname": self.name, "mac": [self.machine.mac]}
        if self.machine.uuid is not None:
            node["uuid"] = self.machine.uuid
        if self.addresses:
            node["addresses"] = list(self.addresses)
        if self.anywhere:
            node["selectable"] = True
        return node

    def yaml(self, at: float) -> str:
        """The node's file, written at ``at`` (unix seconds): two comment lines saying where it came from (the
        machine's facts as one JSON line: quotes, newlines and control characters escaped) and ``nodes:
        {name: ...}`` (:meth:`spec`) written by PyYAML (every value quoted as YAML needs)."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
        return (f"# adopted by `bootserver nodes adopt` at {stamp}: the machine discovered as {self.machine.mac}\n"
                f"# reported facts: {json.dumps(dict(self.machine.facts), sort_keys=True)}\n"
                + yaml.safe_dump({"nodes": {self.name: self.spec()}}, sort_keys=False))


@dataclass(frozen=True)
class Adopted:
    """What :func:`adopt` did: the node's name, the file written, the machine it was, and the outcome of
    the server's reload in words."""

    name: str
    file: Path | None
    machine: Discovered
    outcome: str = ""


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


def default_file(config: Config, adoption: Adoption) -> Path:
    """Where a node adopted without ``--file`` goes: ``nodes.d/<name>.yaml`` beside the config file."""
    return config.base_dir / "nodes.d" / f"{adoption.name}.yaml"


def included(config: Config, path: Path) -> bool:
    """Whether the config's ``include:`` reads the existing file ``path``, as the loader finds its files
    (:func:`~bootserver.config.loader.include_files`: its globbing, where ``*`` stays within a folder)."""
    return path.resolve() in include_files(config.base_dir, config.includes)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


@contextlib.contextmanager
def claimed(config: Config, adoption: Adoption) -> Iterator[None]:
    """Hold the claims on the adoption's node name and machine (its MAC; files in ``state_dir/adopting/``,
    created exclusively) while the adoption runs; released at the end. A claim whose process is gone is
    taken over. Raises :class:`~bootserver.errors.InputError` naming the adoption that holds one."""
    name, mac = adoption.name, adoption.machine.mac
    folder = config.state_dir / CLAIMS
    folder.mkdir(parents=True, exist_ok=True)
    mine = json.dumps({"pid": os.getpid(), "name": name, "mac": mac}).encode()
    taken: list[Path] = []
    try:
        for what in (f"name-{name}", f"mac-{mac.replace(':', '-')}"):
            path = folder / what
            for _ in range(5):
                try:
                    write_atomic(path, mine, 0o600, exclusive=True)
                    taken.append(path)
                    break
                except FileExistsError:
                    try:
                        holder = json.loads(path.read_bytes())
                        pid, other, other_mac = int(holder["pid"]), str(holder["name"]), str(holder["mac"])
                    except FileNotFoundError:  # released meanwhile: claim it now
                        continue
                    except (OSError, ValueError, KeyError, TypeError):
                        pid, other, other_mac = 0, "?", "?"
                    if pid and not _alive(pid):  # left by an adoption that died: take it over
                        path.unlink(missing_ok=True)
                        continue
                    raise InputError(f"machine {other_mac} is being adopted as node {other} right now "
                                     f"(process {pid}): {'--name ' + name if what.startswith('name') else mac} "
                                     "is taken") from None
            else:
                raise InputError(f"{path}: cannot claim it (another adoption holds it): try again")
        yield
    finally:
        for path in taken:
            path.unlink(missing_ok=True)


def _check_names(config: Config, adoption: Adoption) -> None:
    name, machine = adoption.name, adoption.machine
    if name in config.nodes:
        raise InputError(f"--name {name}: node {name} exists already ({config.node_sources[name]})")
    nodes = inventory(config)
    owner = nodes.by_mac(machine.mac) or (nodes.by_uuid(machine.uuid) if machine.uuid else None)
    if owner:
        raise InputError(f"machine {machine.mac} is node {owner.name} already (its MAC or UUID is in the config)")


def _addresses(config: Config, machine: Discovered, given: Sequence[str] | None, anywhere: bool) -> list[str]:
    if given:
        for text in given:
            try:
                ipaddress.ip_network(text, strict=False)
            except ValueError:
                raise InputError(f"--addresses {text}: not an IP address or network (10.0.0.5, 10.0.0.0/24)") from None
        return list(given)
    if machine.conflict:
        raise InputError(f"machine {machine.mac} was reported from {len(machine.addresses)} addresses "
                         f"({', '.join(json.dumps(a) for a in machine.addresses)}): two machines claim its MAC; "
                         f"pass --addresses naming the one to trust{lease_evidence(config, machine.mac)}")
    if anywhere:
        return []
    if machine.address:
        return [machine.address]
    raise InputError(f"machine {machine.mac}: no address recorded for its reports: pass --addresses (or "
                     "--selectable-anywhere)")


def lease_evidence(config: Config, mac: str) -> str:
    """In ``dhcp: {mode: full}``, what the DHCP engine's lease file says of ``mac`` (the address it
    leased, the evidence of which machine holds the MAC on the wire), as a clause to append to a
    message (``"; the DHCP engine leased 10.0.0.5 to it ..."``); ``""`` in any other mode."""
    if config.dhcp is None or not config.dhcp.full:
        return ""
    files = layout(config)
    try:
        leases = leases_of(files, mac)
    except OSError as e:
        return f"; the DHCP engine's lease file {files.leases} cannot be read ({e.strerror or e})"
    if not leases:
        return f"; the DHCP engine's lease file ({files.leases}) holds no lease for it"
    said = ", ".join(lease.address + ("" if lease.expires is None else " until " + time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(lease.expires))) for lease in leases)
    return f"; the DHCP engine leased {said} to it ({files.leases})"


def _write(path: Path, text: str) -> list[Path]:
    """Create ``path`` with ``text`` (exclusively); returns the folders created for it, deepest first."""
    made = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        write_atomic(path, text.encode(), exclusive=True)
    except FileExistsError:
        _remove(None, made)
        raise InputError(f"{path} exists already: pass another --file") from None
    return made


def _remove(path: Path | None, made: Sequence[Path]) -> None:
    if path is not None:
        path.unlink(missing_ok=True)
    for folder in made:
        with contextlib.suppress(OSError):
            folder.rmdir()


async def adopt(config: Config, store: StateStore, key: str, *, name: str, profile: str,
                file: Path | None = None, addresses: Sequence[str] | None = None, anywhere: bool = False,
                reload_timeout: float = 15.0, into_store: bool = False) -> Adopted:
    """Make the discovered machine ``key`` (its MAC or UUID) node ``name`` of ``profile``, pinned to
    ``addresses`` (default: the address it reported from; none with ``anywhere``), ``selectable`` with
    ``anywhere``, and have the running server serve it (see the module docstring); ``file`` defaults to
    :func:`default_file`; ``reload_timeout``: seconds to wait for the server's reload. Returns what was
    done.

    Raises :class:`~bootserver.errors.InputError` (exit 2; nothing written): an unknown machine, a name,
    MAC or UUID in use or being adopted right now, no such profile, an architecture the profile does not
    boot, a file that exists or that ``include:`` does not read, a config that would not load with the
    node (its error). :class:`AdoptionFailed` (exit 1; the file removed again): the server's reload
    failed or its config lacks the node.

    With ``into_store`` (``nodes adopt`` without ``--file``) the node is written into the state store
    instead, created only if no store node has the name (:func:`bootserver.node_writes.apply_nodes`:
    checked as ``check-config`` checks a file node; the store's claims refuse a MAC or UUID another
    adoption took meanwhile); ``file`` and the reload are not used: every server of the store serves it
    within 2 s by itself. ``Adopted.file`` is then ``None``."""
    if not re.match(NAME_RE, name):
        raise InputError(f"--name {name!r}: a node name is letters, digits, '.', '_' and '-' (at most 63)")
    try:
        check_hostname(name)
    except ValueError:
        raise InputError(f"--name {name!r}: it becomes the node's hostname ({HOSTNAME_RULE})") from None
    if config.source == "<default>" and not into_store:
        raise InputError("nodes adopt writes into the files a config's include: names: pass --config")
    if profile not in config.profiles:
        raise InputError(f"--profile {profile}: no such profile (profiles: {', '.join(config.profiles) or 'none'})")
    machine = _find(await store.discovered(), key)
    arch, wanted = machine.architecture, config.profiles[profile].arch
    if arch is not None and arch != wanted:
        raise InputError(f"machine {machine.mac} is {machine.arch_text()}; profile {profile} boots {wanted}: "
                         "pass a profile of its architecture")
    asked = Adoption(name, profile, machine, tuple(_addresses(config, machine, addresses, anywhere)), anywhere)
    if into_store:
        return await _adopt_into_store(config, store, asked)
    path = (file if file is not None else default_file(config, asked)).absolute()
    with claimed(config, asked):
        fresh = await asyncio.to_thread(load_config, config.source)  # as it is now, another adoption done
        _check_names(fresh, asked)
        # as recorded now, claimed: a report from another address meanwhile makes it a conflict
        machine = _find(await store.discovered(), machine.mac)
        asked = replace(asked, machine=machine, addresses=tuple(_addresses(config, machine, addresses, anywhere)))
        made = _write(path, asked.yaml(time.time()))
        try:
            if not included(fresh, path):
                raise InputError(f"{path} is not read by the include: of {config.source} (its patterns: "
                                 f"{', '.join(fresh.includes) or 'none'}; '*' stays within one folder): add e.g. "
                                 "`include: [nodes.d/*.yaml]` to it, or pass a --file it reads")
            loaded = await asyncio.to_thread(load_config, config.source)
            check_config(loaded)
            if loaded.origins.get(f"nodes.{name}") not in (str(path), str(path.resolve())):
                raise InputError(f"{path}: the config loaded with it has no node {name} from it")
            outcome = await asyncio.to_thread(reload_server, config, asked, reload_timeout)
        except BaseException:
            _remove(path, made)
            raise
    await store.forget_discovered([machine.mac])
    return Adopted(name, path, machine, outcome)


async def _adopt_into_store(config: Config, store: StateStore, adoption: Adoption) -> Adopted:
    merged = await with_store(config, store)
    _check_names(merged, adoption)
    name, machine = adoption.name, adoption.machine
    done = await apply_nodes(config, store, {name: adoption.spec()}, source="nodes adopt",
                             preconditions={name: Precondition(create_only=True)})
    await store.forget_discovered([machine.mac])
    return Adopted(name, None, machine, f"written into the state store {store.name} (generation "
                   f"{done[0].generation}): every bootserver serve and bootserver dhcp of this store serves it "
                   "within 2 s")


def reload_server(config: Config, adoption: Adoption, timeout: float) -> str:
    """Signal the running server to reload and wait for its outcome (:mod:`bootserver.reload`); the
    outcome in words (no server running is not an error: it reads the file when it starts). Raises
    :class:`AdoptionFailed` when the reload failed, brought no outcome within ``timeout`` seconds, or the
    reloaded config has no node of the adoption's name. Then a running ``bootserver dhcp`` is signalled
    too, so the node's reservation follows (:mod:`bootserver.dhcp.engine`)."""
    served = _reload_serve(config, adoption, timeout)
    engine = reload_engine(config, timeout)
    return served if engine is None else f"{served}; {engine}"


def _reload_serve(config: Config, adoption: Adoption, timeout: float) -> str:
    name = adoption.name
    try:
        pid, status = reload_running(config, timeout)
    except InputError:
        return "no bootserver serve runs with this state_dir: it reads the node when it starts"
    if status is None:
        raise AdoptionFailed(f"{name}: not adopted: bootserver serve (process {pid}) gave no reload outcome within "
                             f"{timeout:g} s (see its log); the file is removed, the machine stays discovered")
    if status.get("result") != "ok":
        raise AdoptionFailed(f"{name}: not adopted: the server refused the reload ({status.get('message')}); "
                             "the file is removed, the machine stays discovered")
    nodes = status.get("nodes")
    if isinstance(nodes, list) and name not in nodes:
        raise AdoptionFailed(f"{name}: not adopted: the server reloaded without the node ({status.get('message')}); "
                             "the file is removed, the machine stays discovered")
    return f"the server reloaded ({status.get('message')})"
