"""Per-node boot images for networks without DHCP: ``bootserver iso NODE``.

A node whose network has no DHCP server (and no PXE) boots a small ISO 9660 image, inserted by its BMC
as virtual media or burnt to a stick; the image brings up the node's boot interface with the node's own
static IPv4 address and chains to the node's signed chain URL, the same boot the server sends on a
chain (docs/design.md, "The boot flow"). Nothing in the image sends a DHCP request unless the node has
no static network, and then the image says so (:attr:`BootNetwork.dhcp`).

The boot loaders are Debian's binaries, assembled at build time (nothing is compiled, nothing is
committed; shared/DESIGN.md "No-DHCP boot"):

* **BIOS**: ISOLINUX (``isolinux``, ``syslinux-common``) boots Debian's ``ipxe.lkrn`` (``ipxe``) with
  the iPXE commands on the ``APPEND`` line, which iPXE runs as a script (:func:`ipxe_commands`).
* **One image**: ``xorriso -as mkisofs`` (``xorriso``) writes the El Torito image, hybrid (an MBR from
  ``isohdpfx.bin``) so it also boots written to a USB stick.

The node-independent part (the loaders, copied from the Debian packages) is kept in
``<cache_dir>/iso/loaders-<digest>`` (the digest covers the loaders' bytes, so a package upgrade makes a
new folder); a node's build adds its ``isolinux.cfg`` and runs xorriso (about 0.1 s,
docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .config import Config
from .errors import BootserverError, ConfigError, InputError
from .files import fsync_dir
from .ipxe import check_script_word
from .network import (
    Interface,
    NetworkConfigError,
    NetworkState,
    check_network,
    effective_network,
    node_network,
)

#: Debian's files the BIOS boot of the image is made of (path, Debian package).
ISOLINUX_BIN = ("/usr/lib/ISOLINUX/isolinux.bin", "isolinux")
ISOHYBRID_MBR = ("/usr/lib/ISOLINUX/isohdpfx.bin", "isolinux")
LDLINUX_C32 = ("/usr/lib/syslinux/modules/bios/ldlinux.c32", "syslinux-common")
IPXE_LKRN = ("/usr/lib/ipxe/ipxe.lkrn", "ipxe")
XORRISO = ("xorriso", "xorriso")

#: How many NICs the image's iPXE looks through for the boot interface's MAC (``net0`` .. ``net7``).
MAX_NICS = 8

#: Seconds one xorriso run may take before the build is abandoned.
BUILD_TIMEOUT = 60.0


class IsoError(InputError):
    """A node's boot image cannot say what its network needs (exit 2; the message names the node and
    the key): e.g. an interface that has only IPv6 addresses, which the image's iPXE cannot set."""


class IsoToolMissing(BootserverError):
    """A Debian binary the image is built from is not installed (exit 1; names the file and package)."""


@dataclass(frozen=True)
class BootNetwork:
    """How the image brings up the node's boot interface.

    ``interface``: its name in the node's ``network`` (for messages; ``""`` without a network); ``mac``:
    the MAC the image's iPXE finds the NIC by (lower case, ``:``-separated; ``None``: the first NIC,
    ``net0``); ``address``/``prefix``: the static IPv4 address and its prefix length in bits (``None``:
    DHCP); ``gateway``: the IPv4 default route's next hop, or ``None``; ``dns``: IPv4 name servers.
    """

    interface: str
    mac: str | None
    address: str | None = None
    prefix: int = 0
    gateway: str | None = None
    dns: tuple[str, ...] = ()

    @property
    def dhcp(self) -> bool:
        """Whether the image asks DHCP for an address (the node has no static IPv4 address)."""
        return self.address is None

    @property
    def netmask(self) -> str:
        """The prefix as a dotted netmask (``255.255.255.0``), as iPXE's ``netmask`` setting takes it."""
        return str(ipaddress.IPv4Network(f"0.0.0.0/{self.prefix}").netmask)

    def describe(self) -> str:
        """One phrase for a person: ``static 10.0.2.15/24 via 10.0.2.2 on nic0 (52:54:00:...)``."""
        nic = f"{self.interface} ({self.mac})" if self.interface and self.mac else self.mac or self.interface or "net0"
        if self.dhcp:
            return f"no static network: the image asks DHCP for an address on {nic}"
        via = f" via {self.gateway}" if self.gateway else ""
        return f"static {self.address}/{self.prefix}{via} on {nic}"


def _ethernets_with_mac(state: NetworkState) -> list[Interface]:
    return [i for i in state.interfaces if i.type == "ethernet" and i.mac_address]


def boot_interface(state: NetworkState, macs: Iterable[str]) -> tuple[Interface, Interface, str | None]:
    """The boot interface of a checked NMState document for a node with MACs ``macs``.

    Returns ``(nic, carrier, mac)``: the ethernet interface the image finds by its MAC, the interface
    whose addresses it sets (the NIC itself, or the bond it is a port of), and the MAC (the NIC's
    ``mac-address``, else the node's first MAC, else ``None``). The rule: the ethernet interface whose
    ``mac-address`` is one of the node's; else, when no interface names one of the node's MACs, the only
    interface that has addresses (a bond: its first port).

    Raises :class:`~bootserver.network.NetworkConfigError` (path relative to ``network``) when the
    boot interface cannot be told: interfaces pinned to MACs none of which is the node's, or several
    interfaces with addresses and none with the node's MAC.
    """
    macs = tuple(macs)
    pinned = _ethernets_with_mac(state)
    ports = {p: i for i in state.interfaces if i.link_aggregation for p in i.link_aggregation.port}
    by_name = {i.name: i for i in state.interfaces}
    nic = next((i for i in pinned if i.mac_address in macs), None)
    if nic is None and macs and pinned:
        named = ", ".join(f"{i.name} {i.mac_address}" for i in pinned)
        raise NetworkConfigError("interfaces", f"no interface has the node's MAC ({', '.join(macs)}); "
                                 f"mac-address names {named}: set mac-address on the boot interface")
    if nic is None:
        addressed = [i for i in state.interfaces if i.ipv4.on or i.ipv6.on]
        if len(addressed) != 1:
            raise NetworkConfigError("interfaces", f"{len(addressed)} interfaces have addresses and none has the "
                                     "node's MAC: set mac-address (one of the node's mac) on the boot interface")
        carrier = addressed[0]
        if carrier.type == "bond" and carrier.link_aggregation is not None:
            nic = by_name[carrier.link_aggregation.port[0]]
        elif carrier.type == "vlan" and carrier.vlan is not None:
            nic = by_name[carrier.vlan.base_iface]
            if nic.link_aggregation is not None:
                nic = by_name[nic.link_aggregation.port[0]]
        else:
            nic = carrier
    carrier = ports.get(nic.name, nic)
    return nic, carrier, nic.mac_address or (macs[0] if macs else None)


def boot_network(config: Config, node: str) -> BootNetwork:
    """How node ``node``'s image brings up its boot interface: from its ``network`` (the device record for
    ``network: provider``), see :func:`boot_interface`. A node with ``network: dhcp`` (the default), or
    whose boot interface has ``dhcp: true``, gets DHCP on its first MAC.

    Raises :class:`~bootserver.errors.ConfigError` naming the config file, node and key when the boot
    interface cannot be told (``nodes.<n>.network.interfaces: no interface has the node's MAC ...``), and
    :class:`IsoError` naming the node when the image cannot set what the interface needs: addresses only
    on a VLAN (the image does not tag), or only IPv6 (neither loader sets a static IPv6 address).
    Raises :class:`~bootserver.network.DeviceRecordError` as :func:`~bootserver.network.node_network`.
    """
    macs = config.nodes[node].mac
    state = node_network(config, node)
    if state is None or not state.interfaces:
        return BootNetwork("", macs[0] if macs else None)
    spec = config.nodes[node]
    where = f"nodes.{node}.network" if spec.network is not None else f"profiles.{spec.profile}.network"
    try:
        plan = check_network(state)
        _nic, carrier, mac = boot_interface(state, macs)
    except NetworkConfigError as e:
        raise ConfigError(config.source, f"{where}.{e.path}", e.message) from None
    if not (carrier.ipv4.on or carrier.ipv6.on):
        vlans = [i.name for i in state.interfaces if i.vlan is not None and i.vlan.base_iface == carrier.name]
        if vlans:
            raise IsoError(f"node {node}: {where}: its addresses are on VLAN {vlans[0]} over {carrier.name}; "
                           "the boot image does not tag VLANs (use an untagged boot interface)")
        raise IsoError(f"node {node}: {where}: the boot interface {carrier.name} has no address")
    if carrier.ipv4.dhcp or (not carrier.ipv4.address and carrier.ipv6.dhcp):
        return BootNetwork(carrier.name, mac)
    if not carrier.ipv4.address:
        raise IsoError(f"node {node}: {where}: the boot interface {carrier.name} has only IPv6 addresses; the "
                       "boot image sets a static IPv4 address only (add one, or boot it over PXE)")
    gw_index, gateway = plan.gateways.get((carrier.name, 4), (0, None))
    address = carrier.ipv4.address[gw_index if gw_index >= 0 else 0]
    dns = tuple(s for s in state.dns_resolver.config.server if ipaddress.ip_address(s).version == 4)
    return BootNetwork(carrier.name, mac, address.ip, address.prefix_length, gateway, dns)


def check_boot_networks(config: Config) -> None:
    """``check-config``'s look at every node's boot image: the boot interface of each node with an
    NMState ``network`` can be told (:func:`boot_network`). Raises
    :class:`~bootserver.errors.ConfigError` naming the config file, node and key. What only the image
    cannot do (IPv6 only, a VLAN) is left to ``bootserver iso`` and the server."""
    for node in config.nodes:
        if isinstance(effective_network(config, node), NetworkState):
            with contextlib.suppress(IsoError):
                boot_network(config, node)


def ipxe_commands(boot: BootNetwork, url: str) -> str:
    """The iPXE script of the image's BIOS boot, on one line (ISOLINUX's ``APPEND``; iPXE runs its
    command line as a script, ``src/arch/x86/core/cmdline.c``).

    It picks the NIC whose MAC is ``boot.mac`` (``net0`` .. ``net7``, default ``net0``), then either
    opens it and sets ``ip``, ``netmask``, ``gateway`` and ``dns`` (no DHCP), or runs ``dhcp`` on it
    (:attr:`BootNetwork.dhcp`), then ``chain``\\ s ``url``. Raises
    :class:`~bootserver.ipxe.UnsafeValueError` when ``url`` is not one literal iPXE word.
    """
    check_script_word(url)
    words = ["set", "nic", "net0"]
    if boot.mac:
        for n in range(1, MAX_NICS):
            words += [";", "iseq", f"${{net{n}/mac}}", boot.mac, "&&", "set", "nic", f"net{n}"]
    words.append(";")
    if boot.dhcp:
        words += ["dhcp", "${nic}"]
    else:
        assert boot.address is not None
        words += ["ifopen", "${nic}", "&&", "set", "${nic}/ip", boot.address,
                  "&&", "set", "${nic}/netmask", boot.netmask]
        if boot.gateway:
            words += ["&&", "set", "${nic}/gateway", boot.gateway]
        if boot.dns:
            words += ["&&", "set", "${nic}/dns", boot.dns[0]]
    words += ["&&", "chain", "--autofree", url]
    return " ".join(words)


def isolinux_cfg(boot: BootNetwork, url: str) -> str:
    """``isolinux/isolinux.cfg``: boot ``ipxe.lkrn`` at once (no prompt) with :func:`ipxe_commands`."""
    return ("DEFAULT bootserver\nPROMPT 0\nTIMEOUT 0\nLABEL bootserver\n"
            "  KERNEL /isolinux/ipxe.lkrn\n"
            f"  APPEND {ipxe_commands(boot, url)}\n")


def _need(path_and_package: tuple[str, str]) -> Path:
    path, package = path_and_package
    if os.path.isabs(path):
        if os.access(path, os.R_OK):
            return Path(path)
    else:
        found = shutil.which(path)
        if found:
            return Path(found)
    raise IsoToolMissing(f"the boot image needs {path} (Debian package {package}), which is not installed")


def loaders(cache_dir: Path) -> Path:
    """The node-independent part of every image: a folder ``<cache_dir>/iso/loaders-<digest>`` holding
    ``isolinux/isolinux.bin``, ``isolinux/ldlinux.c32`` and ``isolinux/ipxe.lkrn`` copied from Debian's
    packages (made once; ``<digest>``: sha256 of their bytes). Raises :class:`IsoToolMissing` and
    ``OSError``."""
    sources = {"isolinux.bin": _need(ISOLINUX_BIN), "ldlinux.c32": _need(LDLINUX_C32), "ipxe.lkrn": _need(IPXE_LKRN)}
    digest = hashlib.sha256()
    blobs = {}
    for name, src in sources.items():
        blobs[name] = src.read_bytes()
        digest.update(name.encode() + b"\0" + blobs[name])
    root = cache_dir / "iso"
    final = root / f"loaders-{digest.hexdigest()[:16]}"
    if final.is_dir():
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".loaders-"))
    try:
        (tmp / "isolinux").mkdir()
        for name, data in blobs.items():
            (tmp / "isolinux" / name).write_bytes(data)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():  # another process made it first: use theirs
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    fsync_dir(root)
    return final


def build_image(config: Config, boot: BootNetwork, url: str) -> bytes:
    """The bytes of a bootable hybrid ISO 9660 image (about 3 MB) that brings up ``boot`` and chains
    ``url`` (the node's signed chain URL). Built in a temporary folder under ``<cache_dir>/iso``,
    removed afterwards.

    Raises :class:`IsoToolMissing` (exit 1) when a Debian binary is missing, :class:`BootserverError`
    (exit 1) when xorriso fails (its last line in the message), and
    :class:`~bootserver.ipxe.UnsafeValueError` for a URL iPXE would not read literally.
    """
    cfg = isolinux_cfg(boot, url)
    base = loaders(config.cache_dir)
    xorriso, mbr = _need(XORRISO), _need(ISOHYBRID_MBR)
    work = Path(tempfile.mkdtemp(dir=base.parent, prefix=".build-"))
    try:
        tree = work / "tree"
        (tree / "isolinux").mkdir(parents=True)
        for f in (base / "isolinux").iterdir():
            os.link(f, tree / "isolinux" / f.name)
        (tree / "isolinux" / "isolinux.cfg").write_text(cfg)
        out = work / "image.iso"
        argv = [str(xorriso), "-as", "mkisofs", "-quiet", "-o", str(out), "-V", "BOOTSERVER",
                "-isohybrid-mbr", str(mbr), "-b", "isolinux/isolinux.bin", "-c", "isolinux/boot.cat",
                "-no-emul-boot", "-boot-load-size", "4", "-boot-info-table", str(tree)]
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise BootserverError(f"xorriso did not finish the boot image within {BUILD_TIMEOUT:.0f} s") from None
        if p.returncode != 0 or not out.is_file():
            last = (p.stderr.strip().splitlines() or ["no message"])[-1]
            raise BootserverError(f"xorriso could not build the boot image (exit {p.returncode}): {last}")
        return out.read_bytes()
    finally:
        shutil.rmtree(work, ignore_errors=True)
