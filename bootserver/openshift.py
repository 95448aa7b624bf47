"""OpenShift's installer files as bootserver nodes: the one mapping (docs/openshift.md, "The mapping").

Pure functions of the parsed documents (no file, no config, no network): :func:`read_cluster` takes
``install-config.yaml`` (its ``platform.baremetal.hosts[]``, openshift/installer
``pkg/types/baremetal/platform.go``) and/or ``agent-config.yaml`` (its ``hosts[]``,
``pkg/types/agent/agent_config_type.go``, ``apiVersion`` ``v1alpha1`` or ``v1beta1``) and returns a
:class:`Cluster`: its name, one :class:`Host` per machine (name, role, MACs, NMState network, install
device, Secure Boot, BMC) and the warnings to print. :func:`node_entry` turns a host into a node of the
config's schema (``nodes.<name>``, README "Configuration reference").

Every refusal is one line naming the file, the host and the key (:class:`ClusterRefused` holds them
all); the checks are those the installer makes too (unique names and MACs, no host holding an API or
ingress VIP, Secure Boot only with a BMC that has it) and those of bootserver's own schema (an install
device it can name, an NMState document its dracut arguments can express). A static address outside
every ``networking.machineNetwork`` is a warning, as the installer accepts it.

BMC addresses follow metal3's ``bmc`` package (the schemes the installer passes to the BareMetalHost):
``ipmi://host[:port]`` and a bare ``host[:port]`` are IPMI; ``redfish``, ``idrac-redfish``,
``ilo5-redfish`` and their ``-virtualmedia`` forms (each with ``+http``/``+https``, https by default)
are Redfish, with the system path as ``redfish.system``; an ``http(s)://`` URL whose path is under
``/redfish/v1/`` (as the installer's own agent tests write) is Redfish too. The vendor-native schemes
(``idrac``, ``ilo4``, ``ilo4-virtualmedia``, ``ilo5``, ``irmc``, ``ibmc``) drive a BMC through the
vendor's own protocol, which bootserver does not speak: refused, naming the Redfish scheme to use.
A BMC password is carried in :attr:`Bmc.password` (kept out of ``repr``), never in a message.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from .errors import InputError
from .ipxe import UnsafeValueError, check_script_word
from .logs import escape_controls
from .nmstate import NetworkConfigError, NetworkState, check_network
from .values import NAME_RE, check_hostname, normalize_mac, unicast_mac

#: The roles a host can have (``hosts[].role``); an empty role is filled (:func:`fill_roles`).
ROLES = ("master", "arbiter", "worker")

#: ``controlPlane.replicas`` when install-config does not say (the installer's default).
DEFAULT_MASTERS = 3

#: ``networking.machineNetwork`` when install-config does not say (the installer's default).
DEFAULT_MACHINE_NETWORK = "10.0.0.0/16"

#: Redfish schemes (metal3 ``bmc``): scheme -> virtual media?
REDFISH_SCHEMES = {
    "redfish": False, "idrac-redfish": False, "ilo5-redfish": False,
    "redfish-virtualmedia": True, "idrac-virtualmedia": True, "ilo5-virtualmedia": True,
}

#: Vendor-native schemes (metal3 ``bmc``) -> the Redfish scheme of the same BMC to write instead.
NATIVE_SCHEMES = {
    "idrac": "idrac-redfish://", "ilo4": "redfish://", "ilo4-virtualmedia": "redfish-virtualmedia://",
    "ilo5": "ilo5-redfish://", "irmc": "redfish://", "ibmc": "redfish://",
}


class ClusterRefused(InputError):
    """The installer's files cannot be imported (exit 2). ``problems``: every refusal, one line each
    (``install-config.yaml: host master-0: bmc.address: ...``); ``str()`` is the first."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__(self.problems[0] if len(self.problems) == 1 else
                         f"{self.problems[0]} (and {len(self.problems) - 1} more)")


@dataclass(frozen=True)
class Bmc:
    """A host's BMC as bootserver drives it: ``provider`` (``redfish`` or ``ipmi``), ``settings`` (the
    provider's mapping without the password: ``address``, ``system``, ``port``, ``boot_mode``,
    ``boot_source``, ``verify_tls``, ``username``), ``password`` (from the file; never printed)."""

    provider: str
    settings: Mapping[str, Any]
    password: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Host:
    """One machine: ``name`` (node name and hostname), ``role`` (``master``, ``arbiter``, ``worker``,
    ``bootstrap``), ``macs`` (lower-case, boot MAC first), ``network`` (the NMState document as written,
    ``None`` for DHCP), ``install_dev`` (``None`` in agent mode), ``secure_boot``, ``bmc``, ``source``
    (the file it came from), ``addresses`` (where it may boot from: every ``machineNetwork`` CIDR and
    each static address outside them)."""

    name: str
    role: str
    macs: tuple[str, ...]
    network: Mapping[str, Any] | None = None
    install_dev: str | None = None
    secure_boot: bool = False
    bmc: Bmc | None = None
    source: str = "install-config.yaml"
    addresses: tuple[str, ...] = ()


@dataclass(frozen=True)
class Cluster:
    """What the installer's files describe: ``name`` (``metadata.name``), ``hosts`` in file order,
    ``warnings`` (one line each, to print)."""

    name: str
    hosts: tuple[Host, ...]
    warnings: tuple[str, ...] = ()


# ----------------------------------------------------------------------------------------- helpers


def _get(doc: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(doc, Mapping):
            return None
        doc = doc.get(key)
    return doc


class _Problems:
    """The refusals and warnings of one read, each one line: a host name or value from the files may
    hold a newline or control character, escaped (:func:`~bootserver.logs.escape_controls`)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.warnings: list[str] = []

    def refuse(self, source: str, host: str, key: str, message: str) -> None:
        self.lines.append(escape_controls(f"{source}: host {host}: {key}: {message}"))

    def warn(self, source: str, host: str, key: str, message: str) -> None:
        self.warnings.append(escape_controls(f"{source}: host {host}: {key}: {message}"))


def _mac(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    try:
        return normalize_mac(value)
    except ValueError:
        return None


def _nic_mac(value: Any) -> str:
    """A NIC's own MAC as the config takes it (:func:`~bootserver.values.unicast_mac`, lower-case).
    Raises ``ValueError`` with the refusal's message: not a MAC, a group or the all-zero address."""
    mac = _mac(value)
    if mac is None:
        raise ValueError(f"not a MAC address: {value!r}")
    return unicast_mac(mac)


def parse_bmc(address: str) -> tuple[str, dict[str, Any]]:
    """The provider and settings of a BMC address (metal3's schemes, module docstring): ``("ipmi",
    {"address": host, "port": n})`` or ``("redfish", {"address": "https://host[:port]", "system":
    path, "boot_source": "virtual-media"?})``. Raises ``ValueError`` with the line's message (a
    vendor-native scheme names the Redfish scheme to use; the address is not repeated when it holds
    credentials)."""
    text = address.strip()
    if "://" not in text:
        text = "ipmi://" + text
    scheme = text.split("://", 1)[0].lower()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        raise ValueError("not a BMC address (ipmi://host:port, redfish://host/redfish/v1/Systems/ID)") from None
    if parts.username or parts.password:
        raise ValueError("holds credentials: put them in bmc.username and bmc.password")
    host = parts.hostname
    if scheme in NATIVE_SCHEMES:
        raise ValueError(f"{scheme}:// is the vendor's own protocol, which bootserver does not speak: "
                         f"write the same BMC as {NATIVE_SCHEMES[scheme]}{parts.netloc}{parts.path}")
    if not host:
        raise ValueError("no host in the BMC address")
    if scheme == "ipmi":
        if parts.path not in ("", "/") or parts.query:
            raise ValueError("an IPMI address is ipmi://host[:port], with no path")
        return "ipmi", {"address": host, **({"port": port} if port else {})}
    base, _, transport = scheme.partition("+")
    if base in ("http", "https") and not transport and parts.path.startswith("/redfish/v1/"):
        base, transport = "redfish", base
    if base not in REDFISH_SCHEMES or transport not in ("", "http", "https"):
        raise ValueError(f"{scheme}:// is not a BMC scheme bootserver drives (ipmi://, redfish://, "
                         "redfish+http://, redfish-virtualmedia://, idrac-redfish://, ilo5-redfish://...)")
    netloc = f"[{host}]" if ":" in host else host
    settings: dict[str, Any] = {"address": f"{transport or 'https'}://{netloc}" + (f":{port}" if port else "")}
    if parts.path not in ("", "/"):
        settings["system"] = parts.path.rstrip("/")
    if REDFISH_SCHEMES[base]:
        settings["boot_source"] = "virtual-media"
    return "redfish", settings


def install_device(hints: Any) -> tuple[str | None, tuple[str, ...]]:
    """The install device named by ``rootDeviceHints`` and the hints it does not honour: ``deviceName``
    (a ``/dev/`` path) as it is; else ``wwnWithExtension`` as ``/dev/disk/by-id/wwn-<value>`` (udev's
    60-persistent-storage rule names every disk with an ``ID_WWN_WITH_EXTENSION`` so); else ``None``
    (the other hints describe a disk, they name none). Raises ``ValueError`` for a ``deviceName`` that
    is not a ``/dev/`` path or would not be one word in an iPXE script."""
    if not isinstance(hints, Mapping) or not hints:
        return None, ()
    device: str | None = None
    if hints.get("deviceName") is not None:
        device = str(hints["deviceName"])
        if not device.startswith("/dev/"):
            raise ValueError(f"deviceName {device!r} is not a /dev/ path")
    elif isinstance(hints.get("wwnWithExtension"), str):
        device = f"/dev/disk/by-id/wwn-{hints['wwnWithExtension']}"
    if device is not None:
        try:
            check_script_word(device)
        except UnsafeValueError as e:
            raise ValueError(f"{device!r}: {e}") from None
    used = {"deviceName"} if "deviceName" in hints else {"wwnWithExtension"}
    return device, tuple(k for k in hints if k not in used) if device else tuple(hints)


def _network(doc: Any, source: str, name: str, problems: _Problems) -> NetworkState | None:
    if doc is None:
        return None
    try:
        state = NetworkState.model_validate(doc)
        check_network(state)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in err["loc"]).replace(".[", "[")
        problems.refuse(source, name, f"networkConfig.{where}".rstrip("."), _pydantic_message(err))
        return None
    except NetworkConfigError as e:
        problems.refuse(source, name, f"networkConfig.{e.path}".rstrip("."), e.message)
        return None
    return state


def _pydantic_message(err: Mapping[str, Any]) -> str:
    if err["type"] == "extra_forbidden":
        return "a key bootserver's NMState subset does not have (docs/config.md, network)"
    return str(err["msg"]).removeprefix("Value error, ")


def fill_roles(roles: Sequence[str], masters: int, arbiters: int) -> list[str]:
    """The installer's roles for hosts whose ``role`` may be empty (``""``), in file order: an empty role
    becomes ``master`` while fewer than ``masters`` hosts are masters, then ``arbiter`` while fewer than
    ``arbiters`` are arbiters, then ``worker`` (openshift/installer, baremetal hosts; DESIGN.md)."""
    count = {r: sum(1 for x in roles if x == r) for r in ROLES}
    out = []
    for role in roles:
        if not role:
            role = "master" if count["master"] < masters else "arbiter" if count["arbiter"] < arbiters else "worker"
            count[role] += 1
        out.append(role)
    return out


# ------------------------------------------------------------------------------------------- hosts


@dataclass
class _Raw:
    """A host as the file gives it, before the checks."""

    index: int
    name: str
    role: str
    macs: list[str]
    network: Any
    hints: Any
    boot_mode: Any
    bmc: Any
    source: str


def _install_config_hosts(doc: Mapping[str, Any], problems: _Problems) -> list[_Raw]:
    hosts = _get(doc, "platform", "baremetal", "hosts") or []
    source = "install-config.yaml"
    out = []
    for i, h in enumerate(hosts if isinstance(hosts, list) else []):
        h = h if isinstance(h, Mapping) else {}
        name = str(h.get("name") or f"hosts[{i}]")
        macs = []
        try:
            macs.append(_nic_mac(h.get("bootMACAddress")))
        except ValueError as e:
            problems.refuse(source, name, "bootMACAddress", str(e))
        for iface in _get(h, "networkConfig", "interfaces") or []:
            mac = _mac(_get(iface, "mac-address"))
            if mac and mac not in macs:
                macs.append(mac)
        out.append(_Raw(i, name, str(h.get("role") or ""), macs, h.get("networkConfig"), h.get("rootDeviceHints"),
                        h.get("bootMode"), h.get("bmc"), source))
    return out


def _agent_config_hosts(doc: Mapping[str, Any], bmcs: Mapping[str, Any], problems: _Problems) -> list[_Raw]:
    source = "agent-config.yaml"
    out = []
    for i, h in enumerate(doc.get("hosts") or []):
        h = h if isinstance(h, Mapping) else {}
        name = str(h.get("hostname") or f"hosts[{i}]")
        macs = []
        interfaces = h.get("interfaces") or []
        if not interfaces:
            problems.refuse(source, name, "interfaces", "at least one interface with its macAddress is required")
        for j, iface in enumerate(interfaces):
            try:
                mac = _nic_mac(_get(iface, "macAddress"))
            except ValueError as e:
                problems.refuse(source, name, f"interfaces[{j}].macAddress", str(e))
                continue
            if mac not in macs:
                macs.append(mac)
        ic = bmcs.get(name, {})
        out.append(_Raw(i, name, str(h.get("role") or ""), macs, h.get("networkConfig"), h.get("rootDeviceHints"),
                        ic.get("bootMode"), ic.get("bmc"), source))
    return out


def _bmc(raw: _Raw, problems: _Problems) -> Bmc | None:
    bmc = raw.bmc
    if not isinstance(bmc, Mapping) or not bmc.get("address"):
        return None  # no BMC: a DHCP server points the machine at us; Secure Boot is its image's
    try:
        provider, settings = parse_bmc(str(bmc["address"]))
    except ValueError as e:
        problems.refuse(raw.source, raw.name, "bmc.address", str(e))
        return None
    if bmc.get("username"):
        settings["username"] = str(bmc["username"])
    if provider == "redfish" and bmc.get("disableCertificateVerification") is True:
        settings["verify_tls"] = False
    mode = raw.boot_mode or "UEFI"
    if mode == "UEFISecureBoot" and provider == "ipmi":
        problems.refuse(raw.source, raw.name, "bootMode", "UEFISecureBoot needs a BMC that can turn Secure Boot "
                        "on (Redfish); IPMI cannot, as the installer refuses it too")
    settings["boot_mode"] = "legacy" if mode == "legacy" else "uefi"
    password = bmc.get("password")
    return Bmc(provider, settings, None if password is None else str(password))


def _vips(install_config: Mapping[str, Any] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    platform = _get(install_config, "platform")
    for name, settings in (platform.items() if isinstance(platform, Mapping) else ()):
        for key in ("apiVIPs", "apiVips", "apiVIP", "ingressVIPs", "ingressVips", "ingressVIP"):
            values = _get(settings, key)
            for v in values if isinstance(values, list) else [values] if values else []:
                try:
                    out[str(ipaddress.ip_address(str(v)))] = f"platform.{name}.{key}"
                except ValueError:
                    continue
    return out


def _machine_networks(install_config: Mapping[str, Any] | None) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    nets = []
    entries = _get(install_config, "networking", "machineNetwork")
    for entry in entries if isinstance(entries, list) else []:
        try:
            nets.append(ipaddress.ip_network(str(_get(entry, "cidr")), strict=False))
        except ValueError:
            continue
    return nets or [ipaddress.ip_network(DEFAULT_MACHINE_NETWORK)]


def _addresses(state: NetworkState) -> list[tuple[str, ipaddress.IPv4Address | ipaddress.IPv6Address]]:
    out = []
    for i, iface in enumerate(state.interfaces):
        for family, section in (("ipv4", iface.ipv4), ("ipv6", iface.ipv6)):
            for j, a in enumerate(section.address):
                out.append((f"networkConfig.interfaces[{i}].{family}.address[{j}].ip", ipaddress.ip_address(a.ip)))
    return out


def read_cluster(install_config: Mapping[str, Any] | None, agent_config: Mapping[str, Any] | None, *,
                 install_dev: str | None = None, need_device: bool = True, bootstrap_mac: str | None = None,
                 bootstrap_bmc: str | None = None) -> Cluster:
    """The cluster the installer's parsed files describe (either may be ``None``, not both).

    Hosts come from ``agent-config.yaml``'s ``hosts`` when it has any (BMC and ``bootMode`` then taken
    from the install-config host of the same name), else from ``install-config.yaml``'s
    ``platform.baremetal.hosts`` (as the agent installer takes them). ``install_dev``: the device for
    hosts whose ``rootDeviceHints`` name none (each then warned about: a guessed disk is wiped);
    ``need_device``: whether hosts install to disk (false in agent mode, where the agent picks the
    disk). ``bootstrap_mac`` (and ``bootstrap_bmc``, a BMC address) add the bootstrap machine as host
    ``bootstrap`` (role ``bootstrap``).

    Raises :class:`ClusterRefused` with every problem, one line each naming file, host and key.
    """
    problems = _Problems()
    ic = install_config if isinstance(install_config, Mapping) else None
    ac = agent_config if isinstance(agent_config, Mapping) else None
    if ic is None and ac is None:
        raise ClusterRefused(["no install-config.yaml and no agent-config.yaml: nothing to import"])
    name = str(_get(ic, "metadata", "name") or _get(ac, "metadata", "name") or "")
    if not re.match(NAME_RE, name):
        raise ClusterRefused([f"{'install-config.yaml' if ic else 'agent-config.yaml'}: metadata.name: "
                              f"{name!r} is not a cluster name"])
    ic_hosts = _install_config_hosts(ic, problems) if ic else []
    if ac is not None and ac.get("hosts"):
        by_name = {}
        for h in _get(ic, "platform", "baremetal", "hosts") or []:
            if isinstance(h, Mapping) and h.get("name"):
                by_name[str(h["name"])] = h
        raws = _agent_config_hosts(ac, by_name, problems)
    else:
        raws = ic_hosts
    masters = _get(ic, "controlPlane", "replicas")
    arbiters = _get(ic, "arbiter", "replicas")
    roles = fill_roles([r.role for r in raws], masters if isinstance(masters, int) else DEFAULT_MASTERS,
                       arbiters if isinstance(arbiters, int) else 0)
    vips = _vips(ic)
    machine_networks = _machine_networks(ic)
    names: dict[str, str] = {}
    macs: dict[str, str] = {}
    hosts = []
    for raw, role in zip(raws, roles, strict=True):
        where = raw.source
        if role not in ROLES:
            problems.refuse(where, raw.name, "role", f"{role!r} is not a role (master, arbiter, worker or empty)")
        try:
            check_hostname(raw.name)
            if not re.match(NAME_RE, raw.name):
                raise ValueError(raw.name)
        except ValueError:
            problems.refuse(where, raw.name, "hostname" if where == "agent-config.yaml" else "name",
                            "not a host name bootserver can use as node name and hostname")
        if raw.name in names:
            problems.refuse(where, raw.name, "hostname" if where == "agent-config.yaml" else "name",
                            f"{raw.name} is listed twice")
        names[raw.name] = raw.name
        for mac in raw.macs:
            if mac in macs and macs[mac] != raw.name:
                problems.refuse(where, raw.name, "macAddress" if where == "agent-config.yaml" else "bootMACAddress",
                                f"{mac} is also a MAC of host {macs[mac]}")
            macs.setdefault(mac, raw.name)
        state = _network(raw.network, where, raw.name, problems)
        pinned = [str(n) for n in machine_networks]
        if state is not None:
            for key, address in _addresses(state):
                if str(address) in vips:
                    problems.refuse(where, raw.name, key, f"{address} is the cluster's VIP "
                                    f"({vips[str(address)]}): a host must not hold it")
                elif not any(address in net for net in machine_networks if net.version == address.version):
                    pinned.append(str(address))
                    problems.warn(where, raw.name, key, f"{address} is outside every networking.machineNetwork "
                                  f"({', '.join(str(n) for n in machine_networks)}); imported as written "
                                  "(the installer accepts it)")
        device = None
        if need_device:
            try:
                device, unused = install_device(raw.hints)
            except ValueError as e:
                problems.refuse(where, raw.name, "rootDeviceHints.deviceName", str(e))
                device, unused = "", ()
            if device is None:
                hint = f"rootDeviceHints.{next(iter(unused))}" if unused else "rootDeviceHints"
                if install_dev is None:
                    problems.refuse(where, raw.name, hint, "names no device to install to (bootserver has no disk "
                                    "inspection): give rootDeviceHints.deviceName, or --install-dev DEVICE")
                else:
                    device = install_dev
                    problems.warn(where, raw.name, hint, f"names no device: installing to {install_dev} "
                                  "(--install-dev); everything on it is wiped")
            elif unused:
                problems.warn(where, raw.name, f"rootDeviceHints.{unused[0]}",
                              f"not checked: the install goes to {device}")
        if raw.boot_mode not in (None, "", "UEFI", "UEFISecureBoot", "legacy"):
            problems.refuse(where, raw.name, "bootMode", f"{raw.boot_mode!r}: UEFI, UEFISecureBoot or legacy")
        bmc = _bmc(raw, problems)
        hosts.append(Host(raw.name, role, tuple(raw.macs), None if state is None else raw.network, device or None,
                          raw.boot_mode == "UEFISecureBoot", bmc, where, tuple(pinned)))
    if bootstrap_mac is not None:
        boot = _bootstrap(bootstrap_mac, bootstrap_bmc, install_dev, need_device, names, macs, problems)
        hosts.append(replace(boot, addresses=tuple(str(n) for n in machine_networks)))
    if not hosts:
        files = " and ".join(f for f, d in (("install-config.yaml", ic), ("agent-config.yaml", ac)) if d is not None)
        problems.lines.append(f"{files}: no hosts (install-config.yaml platform.baremetal.hosts or agent-config.yaml "
                              "hosts, each with its MAC): bootserver boots only the machines it knows")
    if problems.lines:
        raise ClusterRefused(problems.lines)
    return Cluster(name, tuple(hosts), tuple(problems.warnings))


def _bootstrap(mac_text: str, bmc_address: str | None, install_dev: str | None, need_device: bool,
               names: Mapping[str, str], macs: Mapping[str, str], problems: _Problems) -> Host:
    where = "--bootstrap-mac"
    mac: str | None = None
    try:
        mac = _nic_mac(mac_text)
    except ValueError as e:
        problems.refuse(where, "bootstrap", "--bootstrap-mac", str(e))
    if mac is not None and mac in macs:
        problems.refuse(where, "bootstrap", "--bootstrap-mac", f"{mac} is a MAC of host {macs[mac]}")
    if "bootstrap" in names:
        problems.refuse(where, "bootstrap", "name", "a host of the files is named bootstrap already")
    if need_device and install_dev is None:
        problems.refuse(where, "bootstrap", "--install-dev", "the bootstrap machine needs --install-dev DEVICE")
    bmc = None
    if bmc_address is not None:
        raw = _Raw(0, "bootstrap", "bootstrap", [], None, None, None, {"address": bmc_address}, "--bootstrap-bmc")
        bmc = _bmc(raw, problems)
    return Host("bootstrap", "bootstrap", (mac,) if mac else (), None, install_dev if need_device else None,
                False, bmc, where)


def node_entry(host: Host, profile: str, password_file: str | None = None) -> dict[str, Any]:
    """The host as ``nodes.<name>`` of the config (a plain mapping, for YAML): ``profile``,
    ``hostname``, ``mac``, ``addresses`` (the machine networks and its static addresses outside them:
    where ``/boot.ipxe`` hands it its script), ``network`` (the NMState document; absent: DHCP),
    ``secure_boot``, and with
    a BMC ``provider`` and its ``redfish:``/``ipmi:`` settings with ``password_file`` (the file holding
    the password, written by the caller: never the password itself)."""
    node: dict[str, Any] = {"profile": profile, "hostname": host.name, "mac": list(host.macs)}
    if host.addresses:
        node["addresses"] = list(host.addresses)
    if host.network is not None:
        node["network"] = _plain(host.network)
    if host.secure_boot:
        node["secure_boot"] = True
    if host.bmc is not None:
        settings = dict(host.bmc.settings)
        if password_file is not None:
            settings["password_file"] = password_file
        node["provider"] = host.bmc.provider
        node[host.bmc.provider] = settings
    return node


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


__all__ = ["DEFAULT_MACHINE_NETWORK", "DEFAULT_MASTERS", "NATIVE_SCHEMES", "REDFISH_SCHEMES", "ROLES",
           "Bmc", "Cluster", "ClusterRefused", "Host", "fill_roles", "install_device", "node_entry",
           "parse_bmc", "read_cluster"]
