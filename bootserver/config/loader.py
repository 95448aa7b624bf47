"""Reading the config file: YAML into a checked :class:`~bootserver.config.schema.Config`.

Every problem becomes one :class:`~bootserver.errors.ConfigError` reading ``<file>: <key.path>: <what is
wrong>`` (exit 2).
"""

from __future__ import annotations

import dataclasses
import glob
import ipaddress
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml
from pydantic import ValidationError

from ..butane import ButaneError, is_butane
from ..butane import translate as translate_butane
from ..errors import ConfigError, FileNodeError, MetadataError, NodeCheckError, NodeConflictError
from ..ignition_schema import IgnitionSchemaError, validate_bytes
from ..kargs import NETWORK_KARGS
from ..nmstate import NetworkConfigError, NetworkState, check_network, dracut_kargs
from ..streams import parse_stream
from ..values import HOSTNAME_RULE, SettingsModel, check_hostname, split_listen
from .messages import describe_error, keypath
from .resolved import provider_of, resolve_node, resolve_nodes
from .schema import FILE_SOURCE, STORE_SOURCE, Config, Document, Node, Profile, StreamConfig, default_document


class DuplicateKeyError(yaml.YAMLError):
    """A YAML mapping has the same key twice: ``loc`` is the key path of the duplicate, ``lines`` the
    1-based lines of its first and second occurrence."""

    def __init__(self, loc: tuple[Any, ...], lines: tuple[int, int]) -> None:
        self.loc = loc
        self.lines = lines
        super().__init__(f"{keypath(loc)}: duplicate key on lines {lines[0]} and {lines[1]}")


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's ``SafeLoader`` that refuses a mapping with the same key twice (YAML 1.2 says keys are
    unique; PyYAML keeps the last silently). Raises :class:`DuplicateKeyError`. Keys brought in by a
    merge key (``<<: *anchor``) may be overridden, as YAML's merge key type intends."""

    def construct_document(self, node: yaml.Node) -> Any:
        _check_unique_keys(node, (), set())
        return super().construct_document(node)


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _check_unique_keys(node: yaml.Node, loc: tuple[Any, ...], seen: set[int]) -> None:
    if id(node) in seen:  # an alias: checked where its anchor is
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first: dict[tuple[str, str], int] = {}
        for key, value in node.value:
            if key.tag == _MERGE_TAG:
                _check_unique_keys(value, loc, seen)
                continue
            if isinstance(key, yaml.ScalarNode):
                line = key.start_mark.line + 1
                if (key.tag, key.value) in first:
                    raise DuplicateKeyError((*loc, key.value), (first[key.tag, key.value], line))
                first[key.tag, key.value] = line
            _check_unique_keys(value, (*loc, key.value if isinstance(key, yaml.ScalarNode) else "?"), seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_unique_keys(item, (*loc, i), seen)


def _check_references(doc: Document, cfg: Config) -> None:
    """Cross-key checks pydantic cannot do: names that must exist, arch and mode requirements."""
    src = cfg.source
    if not doc.server.admin_is_local and doc.server.admin.token_file is None:
        raise ConfigError(src, "server.admin.token_file", f"required when server.admin.listen "
                          f"({doc.server.admin_listen}) is not a loopback address or a Unix socket: the admin "
                          "page shows every node, its scripts and signed URLs")
    if doc.server.facility is not None and doc.server.facility not in doc.facilities:
        raise ConfigError(src, "server.facility", f"no facility {doc.server.facility!r}")
    for name, prof in doc.profiles.items():
        if prof.stream not in doc.streams:
            raise ConfigError(src, f"profiles.{name}.stream", f"no stream {prof.stream!r}")
        if prof.arch not in doc.streams[prof.stream].architectures:
            raise ConfigError(src, f"profiles.{name}.arch",
                              f"stream {prof.stream!r} does not list architecture {prof.arch!r}")
        if prof.mode == "live" and prof.boot_once:
            raise ConfigError(src, f"profiles.{name}.boot_once", "a live-mode node has no disk to boot; "
                              "boot_once can only be true in install mode")
        if prof.mode == "install" and not prof.install_dev:
            raise ConfigError(src, f"profiles.{name}.install_dev", "required when mode is install")
        if prof.mode == "agent":
            _check_agent_profile(name, prof, doc.streams[prof.stream], src)
        if prof.ignition is not None:
            check_real_config(cfg.resolve_path(prof.ignition), src, f"profiles.{name}.ignition")
    _check_nodes(doc.nodes, doc.profiles, doc.facilities, src)
    _check_default(doc.nodes, doc.profiles, doc.streams, src)
    _check_admin_address(cfg)
    check_network_settings(cfg, src)
    check_boot_sources(cfg, src)
    for name, sc in doc.streams.items():
        if not sc.is_url:
            path = cfg.resolve_path(sc.metadata)
            if not path.is_file():
                raise ConfigError(src, f"streams.{name}.metadata", f"no such file: {path}")


def _check_agent_profile(name: str, prof: Profile, stream: StreamConfig, src: str) -> None:
    """An agent-mode profile boots the installer's initramfs, which holds the cluster's secrets and its own
    Ignition: its stream must be ``private``, and it has no ``ignition`` or ``install_dev`` of ours (the
    agent picks the disk). Raises :class:`ConfigError` naming ``src`` and the key."""
    if not stream.private:
        raise ConfigError(src, f"profiles.{name}.stream", f"stream {prof.stream!r} must be private: true in agent "
                          "mode (its initramfs holds the cluster's secrets: only this stream's nodes get it)")
    for key in ("ignition", "install_dev"):
        if getattr(prof, key) is not None:
            raise ConfigError(src, f"profiles.{name}.{key}", "not in agent mode: the agent's own Ignition, inside "
                              "its initramfs, installs the host")


def _check_nodes(nodes: Mapping[str, Node], profiles: Mapping[str, Any], facilities: Mapping[str, Any],
                 src: str) -> None:
    """The cross-key checks of each node of ``nodes`` (a hostname, a profile and facility that exist) and
    that no two of them share a MAC, hostname or SMBIOS UUID. Raises :class:`ConfigError` naming ``src``."""
    seen_macs: dict[str, str] = {}
    seen_hostnames: dict[str, str] = {}
    seen_uuids: dict[str, str] = {}
    for name, node in nodes.items():
        if node.hostname is None:
            try:
                check_hostname(name)
            except ValueError:
                raise ConfigError(src, f"nodes.{name}", f"{name!r} is not a valid hostname, and a node without "
                                  f"hostname: uses its name as hostname: set hostname: or rename the node "
                                  f"({HOSTNAME_RULE})") from None
        if node.profile not in profiles:
            raise ConfigError(src, f"nodes.{name}.profile", f"no profile {node.profile!r}")
        if node.facility is not None and node.facility not in facilities:
            raise ConfigError(src, f"nodes.{name}.facility", f"no facility {node.facility!r}")
        for mac in node.mac:
            if mac in seen_macs:
                raise ConfigError(src, f"nodes.{name}.mac", f"{mac} is already the MAC of node {seen_macs[mac]!r}")
            seen_macs[mac] = name
        # the generic entry's ?hostname= and ?uuid= must name one node, as ?mac= does (any case)
        hostname = (node.hostname or name).lower()
        if hostname in seen_hostnames:
            raise ConfigError(src, f"nodes.{name}.hostname" if node.hostname else f"nodes.{name}",
                              f"hostname {hostname} is already the hostname of node {seen_hostnames[hostname]!r}; "
                              "two nodes cannot share one")
        seen_hostnames[hostname] = name
        if node.uuid is not None:
            if node.uuid in seen_uuids:
                raise ConfigError(src, f"nodes.{name}.uuid", f"{node.uuid} is already the SMBIOS UUID of node "
                                  f"{seen_uuids[node.uuid]!r}")
            seen_uuids[node.uuid] = name


def _check_default(nodes: Mapping[str, Node], profiles: Mapping[str, Any], streams: Mapping[str, StreamConfig],
                   src: str) -> None:
    """At most one node of ``nodes`` is the ``default``, and it boots a live-mode profile of a stream that
    is not ``private`` (any machine gets the default node's URLs). Raises :class:`ConfigError` naming
    ``src``."""
    defaults = [name for name, node in nodes.items() if node.default]
    if len(defaults) > 1:
        raise ConfigError(src, f"nodes.{defaults[1]}.default", f"node {defaults[0]!r} is the "
                          "default already; at most one node may be")
    for name in defaults:
        if profiles[nodes[name].profile].mode != "live":
            raise ConfigError(src, f"nodes.{name}.default", "the default node must use a live-mode "
                              "profile: any machine that chains /boot.ipxe boots it, and an install would wipe "
                              "its disk")
        stream = profiles[nodes[name].profile].stream
        if streams[stream].private:
            raise ConfigError(src, f"nodes.{name}.default", f"stream {stream!r} is private: its artifacts go to its "
                              "nodes alone, by MAC, never to any machine as the default node's")


def _covers(a: str, b: str) -> bool:
    """Whether listening on host ``a`` and on host ``b`` (same port) would take the same address: the
    same host, or a wildcard covering the other (``0.0.0.0`` every IPv4 address, ``::`` or no host
    every address); ``localhost`` counts as ``127.0.0.1``."""
    a, b = ("127.0.0.1" if h == "localhost" else h or "::" for h in (a, b))
    if a == b or "::" in (a, b):
        return True
    try:
        return "0.0.0.0" in (a, b) and all(ipaddress.ip_address(h).version == 4 for h in (a, b))
    except ValueError:  # a DNS name: only the same name is known to be the same address
        return False


def _check_admin_address(cfg: Config) -> None:
    """Refuse an admin listener on a device listener's address (``server.listen``, ``server.tls.listen``):
    the same host and port, or a wildcard device listener covering it, so the admin page would be on
    the device network (or ``serve`` would fail to bind). Raises :class:`ConfigError`."""
    where = cfg.server.admin_listen
    if where.startswith("/"):
        return
    ahost, aport = split_listen(where)
    device = [("server.listen", listen) for listen in cfg.server.listen]
    if cfg.server.tls is not None:
        device.append(("server.tls.listen", cfg.server.tls.listen))
    for key, listen in device:
        host, port = split_listen(listen)
        if port == aport and _covers(host, ahost):
            raise ConfigError(cfg.source, "server.admin.listen", f"{where} is also the device listener's "
                              f"address ({key}: {listen}); give the admin listener a port of its own")


def no_machine_boots(cfg: Config) -> str | None:
    """The one warning line for a config under which no machine would boot (no node at all: an empty
    config, ``{}`` or ``null``, or one with streams and profiles only), or ``None``."""
    if cfg.nodes:
        return None
    return (f"{cfg.source}: no nodes and no default node: no machine would boot from this server "
            "(add nodes:, or a node with default: true for any machine that chains /boot.ipxe)")


def check_real_config(path: Path, source: str, keypath: str) -> bytes:
    """Check a real Ignition config file (e.g. openshift-install's ``master.ign``) and return its bytes.

    It must be a JSON object whose ``ignition.version`` is a 3.x spec, since a spec 3 stub can merge
    only spec 3 configs (openshift-install before 4.6 wrote spec 2.2 pointer configs). A Butane config
    (:mod:`bootserver.butane`) is translated by ``butane`` first (and its translation checked against
    its spec's official schema); the translation is checked and returned.
    Raises :class:`ConfigError` naming ``source`` and ``keypath``.
    """
    data = _read(path, source, keypath)
    if is_butane(path, data):  # checked as the Ignition config butane translates it into
        try:
            data = translate_butane(path, data)
        except ButaneError as e:
            raise ConfigError(source, keypath, str(e)) from None
    try:
        doc = json.loads(data)
        version = doc["ignition"]["version"]
    except (ValueError, KeyError, TypeError):
        raise ConfigError(source, keypath, f"{path} is not an Ignition config (no ignition.version)") from None
    if not isinstance(version, str) or not version.startswith("3."):
        raise ConfigError(source, keypath, f"{path} is Ignition spec {version}; only spec 3.x configs can be merged")
    return data


def check_local_inputs(cfg: Config) -> None:
    """Check the local files a config names, deeper than loading does (``check-config``, and ``serve``
    before it listens): what would otherwise fail on every request.

    * ``streams.<name>.metadata`` files: CoreOS stream metadata (:func:`bootserver.streams.parse_stream`)
      with a ``metal`` PXE release for each architecture of the stream (not HTML, not truncated);
    * ``profiles.<name>.ignition`` files: valid for the official schema of their spec version
      (:func:`bootserver.ignition_schema.validate_bytes`; a Butane file's translation is checked so
      when it is loaded, see :func:`check_real_config`);
    * the ``server.tls`` certificate, key and CA files: present and readable;
    * ``server.admin.token_file``: readable, with a token (:meth:`Config.admin_token`).

    Remote stream metadata is left to run time. Raises :class:`ConfigError` naming the key and the file.
    """
    src = cfg.source
    for name, sc in cfg.streams.items():
        path = cfg.metadata_path(name)
        if path is None:
            continue
        key = f"streams.{name}.metadata"
        data = _read(path, src, key)
        try:
            parse_stream(data, name=name, source=str(path), architectures=sc.architectures, local=True,
                         private=sc.private)
        except MetadataError as e:
            raise ConfigError(src, key, f"{path}: not usable stream metadata: "
                              f"{e.jsonpath + ': ' if e.jsonpath else ''}{e.message}") from None
    for name in cfg.profiles:
        path = cfg.ignition_path(name)
        if path is None:
            continue
        key = f"profiles.{name}.ignition"
        data = _read(path, src, key)
        if is_butane(path, data):  # its translation was checked against its schema at load
            continue
        try:
            validate_bytes(data)
        except IgnitionSchemaError as e:
            raise ConfigError(src, key, f"{path}: not a valid Ignition config: {e}") from None
    cfg.admin_token()
    for key, path in _named_files(cfg):
        _readable(path, src, key)
    where = cfg.server.admin_listen
    if where.startswith("/") and not Path(where).parent.is_dir():
        raise ConfigError(src, "server.admin.listen", f"{where}: no folder {Path(where).parent} for the "
                          "Unix socket")
    if cfg.server.tls is not None:
        for key, path in zip(("cert", "key", "ca"), cfg.tls_files(), strict=True):
            try:
                with path.open("rb"):
                    pass
            except OSError as e:
                raise ConfigError(src, f"server.tls.{key}", f"cannot read {path}: {e.strerror} "
                                  "(run `bootserver tls init`?)") from None


def _named_files(cfg: Config) -> list[tuple[str, Path]]:
    """``(key path, file)`` of every local file a settings mapping names (its
    :attr:`~bootserver.values.SettingsModel.local_files`): ``state_store.password_file``, and each
    profile's and node's provider settings (``redfish.password_file``, ``redfish.verify_tls`` as a CA
    file), as written, even where a node overrides its profile's."""
    holders: list[tuple[str, Any]] = [("state_store", cfg.state_store)]
    for kind, items in (("profiles", cfg.profiles), ("nodes", cfg.nodes)):
        for name, item in items.items():
            holders += [(f"{kind}.{name}.{field}", value) for field, value in item
                        if isinstance(value, SettingsModel)]
    out = []
    for prefix, settings in holders:
        if settings is None:
            continue
        for field in settings.local_files:
            value = getattr(settings, field)
            if isinstance(value, str):
                out.append((f"{prefix}.{field}", cfg.resolve_path(value)))
    return out


def _readable(path: Path, source: str, keypath: str) -> None:
    """Raise :class:`ConfigError` naming ``keypath`` unless ``path`` is a file this process can read."""
    try:
        with path.open("rb"):
            pass
    except OSError as e:
        raise ConfigError(source, keypath, f"cannot read {path}: {e.strerror}") from None
    if not path.is_file():
        raise ConfigError(source, keypath, f"{path} is not a file")


def _read(path: Path, source: str, keypath: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise ConfigError(source, keypath, f"cannot read {path}: {e.strerror}") from None


def parse_config(raw: Any, source: str, base_dir: Path) -> Config:
    """Check a parsed YAML document and build a :class:`Config`. Raises :class:`ConfigError`."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(source, "", f"expected a mapping at the top level, got {type(raw).__name__}")
    try:
        doc = Document.model_validate(raw)
    except ValidationError as e:
        keypath, message = describe_error(e.errors()[0], Document)
        raise ConfigError(source, keypath, message) from None
    cfg = Config.from_document(doc, source, base_dir)
    _check_references(doc, cfg)
    return cfg


def load_config(path: str | os.PathLike[str] | None = None, *, replacing: Mapping[Path, str] | None = None) -> Config:
    """Load the config from ``path``, else ``$BOOTSERVER_CONFIG``, else the embedded default, with the
    files its ``include:`` names (:func:`read_includes`). ``replacing``: included files (resolved paths)
    read as the text given instead of from disk, so a tool checks a file's new content before it
    writes it (``bootserver openshift import``).

    Raises :class:`ConfigError` (exit 2) for a missing or unreadable file, YAML syntax errors, unknown
    keys, wrong types and dangling references, naming the file and the key path (the included file
    for a key that came from one).
    """
    if path is None:
        path = os.environ.get("BOOTSERVER_CONFIG") or None
    if path is None:
        return parse_config(default_document(), "<default>", Path.cwd())
    p = Path(path)
    raw = _load_yaml(p)
    base_dir = p.resolve().parent
    origins: dict[str, str] = {}
    if isinstance(raw, dict) and "include" in raw:
        raw["include"] = _include_patterns(raw["include"], str(p))
        origins = read_includes(raw, str(p), base_dir, tuple(raw["include"]), replacing)
    try:
        cfg = parse_config(raw, str(p), base_dir)
    except ConfigError as e:
        origin = _origin(origins, e.keypath)
        if origin is None:
            raise
        raise ConfigError(origin, e.keypath, e.message) from None
    sources = {name: FILE_SOURCE + origins.get(f"nodes.{name}", str(p)) for name in cfg.nodes}
    return dataclasses.replace(cfg, origins=MappingProxyType(origins), node_sources=MappingProxyType(sources))


#: The top-level keys an included file may hold: what it adds to the main file's mappings.
INCLUDABLE = ("streams", "profiles", "nodes")


def _load_yaml(p: Path, text: str | None = None) -> Any:
    """The YAML document of file ``p`` (:class:`UniqueKeyLoader`), or of ``text`` read as that file.
    Raises :class:`ConfigError` naming ``p``."""
    try:
        data = p.read_bytes() if text is None else text.encode()
    except OSError as e:
        raise ConfigError(str(p), "", f"cannot read config: {e.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(str(p), "", f"not UTF-8 text: byte {e.start} (0x{data[e.start]:02x}) is not "
                          "valid UTF-8; save the file as UTF-8") from None
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader: no arbitrary objects
    except DuplicateKeyError as e:
        raise ConfigError(str(p), keypath(e.loc), f"duplicate key on lines {e.lines[0]} and {e.lines[1]}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(str(p), "", f"{where}invalid YAML: {problem}") from None


def _include_patterns(value: Any, source: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(source, "include", "expected a list of files or globs (e.g. nodes.d/*.yaml)")
    return value


def include_files(base_dir: Path, patterns: tuple[str, ...]) -> list[Path]:
    """The files ``include:`` ``patterns`` name (relative to ``base_dir``, ``~`` expanded; globs with
    ``*``, ``?``, ``[...]`` and ``**``), each once, in the order of the patterns and by name within a
    glob. A pattern without glob characters names one file, which must exist (a glob may match none)."""
    seen: dict[Path, None] = {}
    for pattern in patterns:
        full = os.path.join(base_dir, os.path.expanduser(pattern))
        if glob.has_magic(full):
            matches = sorted(Path(m) for m in glob.glob(full, recursive=True) if os.path.isfile(m))
        else:
            matches = [Path(full)]
        for m in matches:
            seen.setdefault(m.resolve() if m.exists() else m, None)
    return list(seen)


def read_includes(raw: dict[str, Any], source: str, base_dir: Path, patterns: tuple[str, ...],
                  replacing: Mapping[Path, str] | None = None) -> dict[str, str]:
    """Merge the ``streams``, ``profiles`` and ``nodes`` of every file ``patterns`` name
    (:func:`include_files`) into the main document ``raw`` (in place); returns where each included entry
    came from (``"nodes.<name>"`` -> file). A relative ``ignition`` path of an included profile, and a
    relative ``metadata`` path of an included stream, is relative to its own file. ``replacing``: files
    (resolved paths) read as the text given instead of from disk.

    Raises :class:`ConfigError` naming the included file: unreadable or not YAML, a key other than
    ``streams``/``profiles``/``nodes``, or a name defined twice (the message names both files).
    """
    origins: dict[str, str] = {}
    for section in INCLUDABLE:
        if isinstance(raw.get(section), dict):
            origins.update({f"{section}.{name}": source for name in raw[section]})
    for path in include_files(base_dir, patterns):
        doc = _load_yaml(path, (replacing or {}).get(path))
        if doc is None:
            continue
        name = str(path)
        if not isinstance(doc, dict):
            raise ConfigError(name, "", f"expected a mapping with {', '.join(INCLUDABLE)} (included by {source})")
        for key in doc:
            if key not in INCLUDABLE:
                raise ConfigError(name, str(key), f"an included file holds only {', '.join(INCLUDABLE)} "
                                  f"(included by {source})")
        for section in INCLUDABLE:
            entries = doc.get(section)
            if entries is None:
                continue
            if not isinstance(entries, dict):
                raise ConfigError(name, section, "expected a mapping of names")
            target = raw.setdefault(section, {})
            if target is None:
                target = raw[section] = {}
            if not isinstance(target, dict):
                raise ConfigError(source, section, "expected a mapping of names")
            for entry, value in entries.items():
                where = f"{section}.{entry}"
                if where in origins:
                    raise ConfigError(name, where, f"{section[:-1]} {entry!r} is defined in {origins[where]} "
                                      f"and in {name}; a name may be defined once")
                if section == "profiles" and isinstance(value, dict) and isinstance(value.get("ignition"), str):
                    value = {**value, "ignition": str(path.parent / os.path.expanduser(value["ignition"]))}
                if (section == "streams" and isinstance(value, dict) and isinstance(value.get("metadata"), str)
                        and "://" not in value["metadata"]):
                    value = {**value, "metadata": str(path.parent / os.path.expanduser(value["metadata"]))}
                target[entry] = value
                origins[where] = name
    return origins


def _origin(origins: dict[str, str], key: str) -> str | None:
    """The included file the entry at key path ``key`` (``nodes.<name>...``) came from, if any."""
    parts = key.split(".", 2)
    if len(parts) < 2:
        return None
    return origins.get(f"{parts[0]}.{parts[1].split('[', 1)[0]}")


def check_boot_sources(config: Config, source: str, names: Iterable[str] | None = None) -> None:
    """Virtual media is Redfish's: a node whose provider is ``ipmi`` with ``boot_source: virtual-media``
    (in its ``ipmi:`` or its ``redfish:`` settings, its own or its profile's) is refused, naming the
    node and the key, rather than booted over PXE instead of its image.

    Only the nodes ``names`` when given (default every node). Raises :class:`~bootserver.errors.ConfigError`."""
    for name in config.nodes if names is None else names:
        node = config.nodes[name]
        profile = config.profiles.get(node.profile)
        if profile is None or provider_of(node, profile) != "ipmi":
            continue
        for key in ("ipmi", "redfish"):
            own, inherited = getattr(node, key).boot_source, getattr(profile, key).boot_source
            if (own or inherited) not in ("virtual-media", "http"):
                continue
            where = f"nodes.{name}.{key}.boot_source" if own else f"profiles.{node.profile}.{key}.boot_source"
            what = "virtual media" if (own or inherited) == "virtual-media" else "UEFI HTTP boot override"
            raise ConfigError(source, where, f"node {name} uses provider ipmi, and IPMI has no {what}: "
                              "boot it over the network (boot_source: pxe, with a DHCP server) or drive its BMC "
                              "over Redfish (provider: redfish)")


def check_network_settings(config: Config, source: str, names: Iterable[str] | None = None) -> None:
    """The cross-key checks of every ``network`` key of a loaded :class:`~bootserver.config.Config`
    (``profiles``, ``nodes``): :func:`~bootserver.nmstate.check_network` on each NMState document, the
    node's kargs built once (every word checked),
    ``network: provider`` only on nodes of the Equinix provider (the one device record with addresses;
    :func:`bootserver.config.resolved.provider_of`, a node without any provider counts as Equinix's), and no
    network argument (``ip=``, ``bond=``...) also in the profile's ``kargs`` of a node whose network is not ``dhcp``.

    With ``names``, only those nodes (their profiles were checked with the config). Raises
    :class:`~bootserver.errors.ConfigError` naming ``source`` and the key:
    ``nodes.master-0.network.interfaces[2].link-aggregation.port[1]: no interface named ens9``.
    """
    nodes = {name: config.nodes[name] for name in (config.nodes if names is None else names)}
    # (key, network, hostname): a node's document is checked with its kargs, a profile's (no hostname) alone
    documents: list[tuple[str, str | NetworkState | None, str | None]] = [] if names is not None else [
        (f"profiles.{name}", p.network, None) for name, p in config.profiles.items()]
    documents += [(f"nodes.{name}", n.network, n.hostname or name) for name, n in nodes.items()]
    for key, network, hostname in documents:
        if not isinstance(network, NetworkState):
            continue
        try:
            if hostname is not None:
                dracut_kargs(network, hostname)
            else:
                check_network(network)
        except NetworkConfigError as e:
            raise ConfigError(source, f"{key}.network.{e.path}".rstrip("."), e.message) from None
        except ValueError as e:  # UnsafeValueError: a word iPXE would not read literally
            raise ConfigError(source, f"{key}.network", str(e)) from None
    resolved_nodes = resolve_nodes(config) if names is None else {
        name: resolve_node(name, spec, config.profiles[spec.profile], config.source)
        for name, spec in nodes.items() if spec.profile in config.profiles}
    for name, resolved in resolved_nodes.items():
        network, provider = resolved.network, resolved.provider
        if network == "dhcp":
            continue
        # A node without a provider (none named, no provider's settings) is Equinix's, as before providers.
        if network == "provider" and provider not in (None, "equinix"):
            raise ConfigError(source, resolved.network_key, "network: provider reads the addresses of an Equinix "
                              f"Metal device record, and node {name}'s provider is {provider}; give it an NMState "
                              "network or dhcp")
        for i, karg in enumerate(resolved.kargs):
            if karg.split("=", 1)[0] in NETWORK_KARGS:
                raise ConfigError(source, f"profiles.{resolved.profile}.kargs[{i}]",
                                  f"{karg} is a network argument, and node {name} has a network key; "
                                  "describe the network in one place")


# -- the state store's nodes (issue 48; docs/design.md, "Store nodes") ------------------------------------

#: What a store node's errors name as their source when the caller names none.
STORE_NAME = "state store"


def node_claims(name: str, node: Node) -> tuple[tuple[str, str], ...]:
    """What node ``name`` holds that no other node may (the claims of
    :class:`bootserver.state.nodestore.NodeWrite`), as ``(kind, value)`` pairs: each MAC (normalized),
    its SMBIOS UUID (lower case), its hostname (its ``hostname``, else its name; lower case) and each
    static address (``ip``) of its own NMState ``network``."""
    claims = [("mac", mac) for mac in node.mac]
    if node.uuid is not None:
        claims.append(("uuid", node.uuid))
    claims.append(("hostname", (node.hostname or name).lower()))
    if isinstance(node.network, NetworkState):
        for iface in node.network.interfaces:
            claims += [("address", a.ip) for ip in (iface.ipv4, iface.ipv6) for a in ip.address]
    return tuple(dict.fromkeys(claims))


def store_node(name: str, spec: Any, source: str = STORE_NAME) -> Node:
    """Store node ``name``'s mapping ``spec`` checked against the config's node schema (``nodes.<name>``
    of :class:`~bootserver.config.schema.Document`, the name's rule included). Raises
    :class:`~bootserver.errors.NodeCheckError` naming ``source``, ``nodes.<name>.<key>`` and every
    problem pydantic found (``errors``)."""
    if not isinstance(spec, Mapping):
        raise NodeCheckError(source, f"nodes.{name}", f"expected a mapping, got {type(spec).__name__}", node=name)
    try:
        return Document.model_validate({"nodes": {name: dict(spec)}}).nodes[name]
    except ValidationError as e:
        errors = tuple(describe_error(err, Document) for err in e.errors())
        raise NodeCheckError(source, errors[0][0], errors[0][1], node=name, errors=errors) from None


def file_claims(config: Config) -> dict[tuple[str, str], str]:
    """Every claim (:func:`node_claims`) of the file nodes of ``config``: ``(kind, value)`` -> node."""
    held: dict[tuple[str, str], str] = {}
    for name, node in config.nodes.items():
        if config.node_sources.get(name, FILE_SOURCE) != STORE_SOURCE:
            for claim in node_claims(name, node):
                held.setdefault(claim, name)
    return held


def _node_of(keypath: str, names: Iterable[str]) -> str:
    """The node of ``names`` that key path ``keypath`` (``nodes.<name>...``) is about (names may hold dots)."""
    return next((n for n in names if keypath == f"nodes.{n}" or keypath.startswith(f"nodes.{n}.")), "")


def with_store_nodes(config: Config, stored: Mapping[str, Mapping[str, Any] | Node], *,
                     source: str = STORE_NAME, written: Iterable[str] | None = None) -> Config:
    """The config ``config`` (its file nodes; any store nodes it held are dropped) with the store's nodes
    ``stored`` (name -> its mapping, or its :class:`~bootserver.config.schema.Node` already checked by
    :func:`store_node`) merged in, source ``store`` (:attr:`Config.node_sources`). The one merge of the
    two sources: ``serve`` at start and on each change of the store, a reload, ``nodes apply``, the
    fleet API.

    Each store node is checked as ``check-config`` checks a file node at load: the schema
    (:func:`store_node`), a profile and facility that exist, a valid hostname, one default node with a
    live-mode profile, its ``network`` and kargs (:func:`check_network_settings`), its provider's boot
    source (:func:`check_boot_sources`); only the nodes ``written`` when given (the rest were checked
    when written). Errors name ``source`` (``state store``, or the file ``nodes apply`` read).

    Raises :class:`~bootserver.errors.NodeCheckError` (a ``ConfigError``: the node and key; with
    ``errors``), :class:`~bootserver.errors.FileNodeError` for a store node whose name is a file
    node's (naming both origins: a reload whose files now name a store node is refused so),
    :class:`~bootserver.errors.NodeConflictError` for a MAC, UUID, hostname or static address a file
    node holds (naming it and its file).
    """
    files = {n: node for n, node in config.nodes.items() if config.node_sources.get(n) != STORE_SOURCE}
    nodes: dict[str, Node] = {}
    for name, spec in stored.items():
        if name in files:
            raise FileNodeError(name, config.node_sources.get(name, FILE_SOURCE + config.source), stored=True)
        nodes[name] = spec if isinstance(spec, Node) else store_node(name, spec, source)
    held = file_claims(config) if nodes else {}
    for name in nodes if written is None else written:
        for claim in node_claims(name, nodes[name]):
            holder = held.get(claim)
            if holder is not None:
                raise NodeConflictError(name, claim[0], claim[1], holder, config.node_sources[holder])
    checked = nodes if written is None else {n: nodes[n] for n in written}
    try:
        _check_nodes(checked, config.profiles, config.facilities, source)
    except ConfigError as e:
        raise NodeCheckError(source, e.keypath, e.message, node=_node_of(e.keypath, checked)) from None
    merged_nodes = {**files, **nodes}
    sources = {**{n: config.node_sources.get(n, FILE_SOURCE + config.source) for n in files},
               **dict.fromkeys(nodes, STORE_SOURCE)}
    merged = dataclasses.replace(config, nodes=MappingProxyType(merged_nodes), node_sources=MappingProxyType(sources))
    try:
        _check_default(merged_nodes, config.profiles, config.streams, source)
        check_network_settings(merged, source, checked)
        check_boot_sources(merged, source, checked)
    except NodeCheckError:
        raise
    except ConfigError as e:
        raise NodeCheckError(source, e.keypath, e.message, node=_node_of(e.keypath, checked)) from None
    return merged
