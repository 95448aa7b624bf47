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
* **UEFI**: a FAT image (``mtools``) holding a standalone GRUB (``grub-mkstandalone``, ``grub-common`` and
  ``grub-efi-amd64-bin``) whose built-in config (:data:`GRUB_EMBEDDED_CFG`, the same for every node)
  reads ``/bootserver/grub.cfg`` from the image (:func:`grub_cfg`): the static address, then the node's
  signed GRUB config (``GET /grub/<node>``, :func:`bootserver.ipxe.render_grub_config`).
* **One image**: ``xorriso -as mkisofs`` (``xorriso``) writes both El Torito entries, hybrid (an MBR from
  ``isohdpfx.bin``, a GPT for the EFI image) so it also boots written to a USB stick.

Cached (docs/design.md, "Boot without DHCP"): the node-independent loaders in
``<cache_dir>/iso/loaders-<digest>`` (:func:`loaders`), each node's image in ``<cache_dir>/iso/nodes``
(:func:`node_image`), built once per node and inputs; a build is the two text files and one xorriso run
(about 0.1 s, docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import Config
from .errors import BootserverError, ConfigError, InputError
from .files import fsync_dir, open_dir, open_file, write_atomic
from .ipxe import GrubUnsupported, check_script_word, grub_path, grub_quote
from .network import effective_network, node_network
from .nmstate import Interface, NetworkConfigError, NetworkState, check_network
from .providers.interface import boots_virtual_media
from .urls import Urls

#: Debian's files the BIOS boot of the image is made of (path, Debian package).
ISOLINUX_BIN = ("/usr/lib/ISOLINUX/isolinux.bin", "isolinux")
ISOHYBRID_MBR = ("/usr/lib/ISOLINUX/isohdpfx.bin", "isolinux")
LDLINUX_C32 = ("/usr/lib/syslinux/modules/bios/ldlinux.c32", "syslinux-common")
IPXE_LKRN = ("/usr/lib/ipxe/ipxe.lkrn", "ipxe")
XORRISO = ("xorriso", "xorriso")
GRUB_MKSTANDALONE = ("grub-mkstandalone", "grub-common")
GRUB_EFI_MODULES = ("/usr/lib/grub/x86_64-efi", "grub-efi-amd64-bin")
MFORMAT, MMD, MCOPY = ("mformat", "mtools"), ("mmd", "mtools"), ("mcopy", "mtools")

#: The GRUB modules the image's standalone GRUB carries (``--install-modules``; about 0.7 MB).
GRUB_MODULES = ("efinet", "http", "net", "normal", "echo", "linux", "iso9660", "configfile", "test", "regexp",
                "sleep")

#: The config built into the standalone GRUB, the same for every node: load the network and ISO 9660
#: modules, then read ``/bootserver/grub.cfg`` from the device GRUB was loaded from (``$cmdpath`` is
#: ``(cd0)/EFI/BOOT`` when the firmware booted the image's El Torito EFI entry).
GRUB_EMBEDDED_CFG = """insmod efinet
insmod http
insmod iso9660
regexp --set=1:bootdev '^\\((.*)\\)' "$cmdpath"
source "($bootdev)/bootserver/grub.cfg"
echo "bootserver: no /bootserver/grub.cfg on the boot device ($bootdev)"
sleep 10
exit
"""

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

    Raises :class:`~bootserver.nmstate.NetworkConfigError` (path relative to ``network``) when the
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


def boot_network(config: Config, node: str, device: Mapping[str, Any] | None = None) -> BootNetwork:
    """How node ``node``'s image brings up its boot interface: from its ``network`` (``device``, its device
    record in the state store, for ``network: provider``), see :func:`boot_interface`. A node with
    ``network: dhcp`` (the default), or whose boot interface has ``dhcp: true``, gets DHCP on its first MAC.

    Raises :class:`~bootserver.errors.ConfigError` naming the config file, node and key when the boot
    interface cannot be told (``nodes.<n>.network.interfaces: no interface has the node's MAC ...``), and
    :class:`IsoError` naming the node when the image cannot set what the interface needs: addresses only
    on a VLAN (the image does not tag), or only IPv6 (neither loader sets a static IPv6 address).
    Raises :class:`~bootserver.providers.base.DeviceRecordError` as :func:`~bootserver.network.node_network`.
    """
    macs = config.nodes[node].mac
    state = node_network(config, node, device)
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
    cannot do (IPv6 only, a VLAN; :class:`IsoError`; a base URL GRUB cannot fetch, https or IPv6) fails
    only for the nodes that ``provision`` boots from their image (:func:`boots_virtual_media`), and for
    every node in ``bootserver iso``."""
    for node in config.nodes:
        if boots_virtual_media(config, node) and effective_network(config, node) != "provider":
            boot_network(config, node)
            facility = config.nodes[node].facility
            bases = [("server.base_url", config.server.effective_base_url)]
            if facility is not None and (facility_base := config.facilities[facility].base_url):
                bases.append((f"facilities.{facility}.base_url", facility_base))
            for key, base in bases:
                try:
                    grub_path(f"{base}/")
                except GrubUnsupported:
                    raise ConfigError(config.source, key, f"node {node} boots its image (redfish.boot_source: "
                                      f"virtual-media), whose GRUB fetches plain http only, not {base}") from None
        elif isinstance(effective_network(config, node), NetworkState):
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


def grub_cfg(boot: BootNetwork, url: str) -> str:
    """``/bootserver/grub.cfg`` of the image, read by its UEFI boot (GRUB 2.06 with ``efinet`` and
    ``http``): find the card whose MAC is ``boot.mac`` (``efinet0`` .. ``efinet7``: a probe address
    on each card sets ``$net_probe_mac``; default ``efinet0``), then either give it the static address,
    the route to its subnet, the default route and DNS (``net_add_addr``, ``net_add_route``,
    ``net_add_dns``: no DHCP) or run ``net_bootp`` on it (:attr:`BootNetwork.dhcp`), then ``source``
    ``url`` (the node's signed GRUB config, :func:`~bootserver.ipxe.grub_path`); when that fails, ``exit``
    to the next boot device. Raises :class:`~bootserver.ipxe.GrubUnsupported` for a URL that is not
    plain http and :class:`~bootserver.ipxe.UnsafeValueError` for one GRUB would not read literally.
    """
    source = grub_quote(grub_path(url))
    lines = ["# bootserver: the node's boot interface, then its GRUB config", "set bootnic=efinet0"]
    if boot.mac:
        cards = " ".join(f"efinet{n}" for n in range(MAX_NICS))
        lines += [f"for card in {cards}; do",
                  "  if net_add_addr probe $card 0.0.0.0; then",
                  f"    if [ \"$net_probe_mac\" = \"{boot.mac}\" ]; then set bootnic=$card; fi",
                  "    net_del_addr probe",
                  "  else",
                  "    break",
                  "  fi",
                  "done"]
    if boot.dhcp:
        lines.append("net_bootp $bootnic")
    else:
        assert boot.address is not None
        subnet = ipaddress.IPv4Interface(f"{boot.address}/{boot.prefix}").network
        lines += [f"net_add_addr bootserver $bootnic {boot.address}",
                  f"net_add_route bootserver-lan {subnet} bootserver"]
        if boot.gateway:
            lines.append(f"net_add_route bootserver-default 0.0.0.0/0 gw {boot.gateway}")
        lines += [f"net_add_dns {server}" for server in boot.dns[:1]]
    lines += [f"source {source}",
              "echo 'bootserver: the boot config could not be fetched; falling through to the next boot device'",
              "sleep 10", "exit"]
    return "\n".join(lines) + "\n"


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


def _run(argv: list[str], what: str) -> None:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise BootserverError(f"{what} did not finish within {BUILD_TIMEOUT:.0f} s") from None
    if p.returncode != 0:
        last = ((p.stderr or p.stdout).strip().splitlines() or ["no message"])[-1]
        raise BootserverError(f"{what} failed (exit {p.returncode}): {last}")


def _efi_boot_image(folder: Path) -> None:
    """Write ``folder/efiboot.img``: a FAT image holding ``EFI/BOOT/BOOTX64.EFI``, a standalone GRUB
    (``grub-mkstandalone -O x86_64-efi``, only :data:`GRUB_MODULES`) whose embedded config is
    :data:`GRUB_EMBEDDED_CFG`."""
    mkstandalone = _need(GRUB_MKSTANDALONE)
    _need(GRUB_EFI_MODULES)
    mformat, mmd, mcopy = _need(MFORMAT), _need(MMD), _need(MCOPY)
    (folder / "embedded.cfg").write_text(GRUB_EMBEDDED_CFG)
    efi = folder / "BOOTX64.EFI"
    _run([str(mkstandalone), "-O", "x86_64-efi", f"--install-modules={' '.join(GRUB_MODULES)}", "--modules=",
          "--locales=", "--fonts=", "--themes=", "-o", str(efi), f"boot/grub/grub.cfg={folder / 'embedded.cfg'}"],
         "grub-mkstandalone")
    img = folder / "efiboot.img"
    # 1440 KiB: BOOTX64.EFI is about 0.7 MB; -C creates the image file
    _run([str(mformat), "-C", "-f", "1440", "-i", str(img), "::"], "mformat")
    _run([str(mmd), "-i", str(img), "::/EFI", "::/EFI/BOOT"], "mmd")
    _run([str(mcopy), "-i", str(img), str(efi), "::/EFI/BOOT/BOOTX64.EFI"], "mcopy")
    efi.unlink()
    (folder / "embedded.cfg").unlink()


def loaders(cache_dir: Path) -> Path:
    """The node-independent part of every image, made once: a folder ``<cache_dir>/iso/loaders-<digest>``
    holding ``isolinux/isolinux.bin``, ``isolinux/ldlinux.c32`` and ``isolinux/ipxe.lkrn`` copied from
    Debian's packages, and ``efiboot.img`` (:func:`_efi_boot_image`). ``<digest>``: sha256 over those
    loaders' bytes, GRUB's ``kernel.img`` and the embedded GRUB config, so a package upgrade or a change
    here makes a new folder. Raises :class:`IsoToolMissing`, :class:`BootserverError` when a tool fails,
    and ``OSError``."""
    sources = {"isolinux.bin": _need(ISOLINUX_BIN), "ldlinux.c32": _need(LDLINUX_C32), "ipxe.lkrn": _need(IPXE_LKRN)}
    digest = hashlib.sha256()
    blobs = {}
    for name, src in sources.items():
        blobs[name] = src.read_bytes()
        digest.update(name.encode() + b"\0" + blobs[name])
    digest.update((_need(GRUB_EFI_MODULES) / "kernel.img").read_bytes())
    digest.update(GRUB_EMBEDDED_CFG.encode() + " ".join(GRUB_MODULES).encode())
    root = cache_dir / "iso"
    final = root / f"loaders-{digest.hexdigest()[:16]}"
    # a real folder of ours, never a link to loaders someone else put there (files.LinkRefused)
    os.close(open_dir(cache_dir, "iso", create=True))
    try:
        for rel in (final.name, f"{final.name}/isolinux"):
            os.close(open_dir(root, rel))
        return final
    except FileNotFoundError:
        pass
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".loaders-"))
    try:
        (tmp / "isolinux").mkdir()
        for name, data in blobs.items():
            (tmp / "isolinux" / name).write_bytes(data)
        _efi_boot_image(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():  # another process made it first: use theirs
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    fsync_dir(root)
    return final


def _copy_cached(cache_dir: Path, src: Path, dest: Path) -> None:
    """Copy the cached loader ``src`` (below ``cache_dir``, opened without following a link: raises
    :class:`~bootserver.files.LinkRefused`) to ``dest``."""
    fd = open_file(cache_dir, src.relative_to(cache_dir))
    with open(fd, "rb") as f, dest.open("wb") as out:
        shutil.copyfileobj(f, out)


def build_image(config: Config, boot: BootNetwork, chain_url: str, grub_url: str) -> bytes:
    """The bytes of a bootable hybrid ISO 9660 image (about 2.5 MB) that brings up ``boot`` and chains
    the node's signed chain URL ``chain_url`` (BIOS: ISOLINUX, ``ipxe.lkrn``) or sources its signed GRUB
    config URL ``grub_url`` (UEFI: the cached ``efiboot.img``, whose GRUB reads
    ``/bootserver/grub.cfg`` of the image, :func:`grub_cfg`). Built in a temporary folder under
    ``<cache_dir>/iso``, removed afterwards.

    Raises :class:`IsoToolMissing` (exit 1) when a Debian binary is missing, :class:`BootserverError`
    (exit 1) when a tool fails (its last line in the message), :class:`~bootserver.ipxe.GrubUnsupported`
    for a GRUB URL that is not plain http, and :class:`~bootserver.ipxe.UnsafeValueError` for a URL
    iPXE would not read literally.
    """
    isolinux, grub = isolinux_cfg(boot, chain_url), grub_cfg(boot, grub_url)
    base = loaders(config.cache_dir)
    xorriso, mbr = _need(XORRISO), _need(ISOHYBRID_MBR)
    work = Path(tempfile.mkdtemp(dir=base.parent, prefix=".build-"))
    try:
        tree = work / "tree"
        (tree / "isolinux").mkdir(parents=True)
        (tree / "bootserver").mkdir()
        for name in ("isolinux.bin", "ldlinux.c32", "ipxe.lkrn"):  # never through a link (files.open_file)
            _copy_cached(config.cache_dir, base / "isolinux" / name, tree / "isolinux" / name)
        _copy_cached(config.cache_dir, base / "efiboot.img", tree / "efiboot.img")
        (tree / "isolinux" / "isolinux.cfg").write_text(isolinux)
        (tree / "bootserver" / "grub.cfg").write_text(grub)
        out = work / "image.iso"
        _run([str(xorriso), "-as", "mkisofs", "-quiet", "-o", str(out), "-V", "BOOTSERVER",
              "-isohybrid-mbr", str(mbr), "-b", "isolinux/isolinux.bin", "-c", "isolinux/boot.cat",
              "-no-emul-boot", "-boot-load-size", "4", "-boot-info-table",
              "-eltorito-alt-boot", "-e", "efiboot.img", "-no-emul-boot", "-isohybrid-gpt-basdat", str(tree)],
             "xorriso")
        return out.read_bytes()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def node_image(config: Config, urls: Urls, node: str, device: Mapping[str, Any] | None = None) -> Path:
    """The node's boot image in the cache, built when missing: ``<cache_dir>/iso/nodes/<node>-<digest>.iso``,
    where ``<digest>`` covers every input but the URLs' expiry (the boot network, the chain and GRUB
    URLs' base and path, the current signing key, the loaders). An image is used while its URLs stay
    valid for at least half of ``server.signing.chain_ttl``, like a device's chain URL
    (:meth:`~bootserver.urls.Urls.chain_is_current`); a new image replaces the node's older ones.
    Written whole (temp file, rename): a reader never sees half an image.

    ``device``: the node's device record (for ``network: provider``, see :func:`boot_network`).
    Raises as :func:`boot_network` and :func:`build_image`.
    """
    boot = boot_network(config, node, device)
    chain, grub = urls.chain(node), urls.grub(node)
    exp, key = urls.signer.state(config.server.signing.chain_ttl)
    base = loaders(config.cache_dir)
    digest = hashlib.sha256(repr((boot, chain.split("?")[0], grub.split("?")[0], hashlib.sha256(key).hexdigest(),
                                  base.name)).encode()).hexdigest()[:16]
    folder = config.cache_dir / "iso" / "nodes"
    later = urls.signer.now() + config.server.signing.chain_ttl / 2
    for have in sorted(folder.glob(f"{node}-{digest}-*.iso"), reverse=True):
        if have.stem.rsplit("-", 1)[1].isdigit() and int(have.stem.rsplit("-", 1)[1]) > later:
            return have
    path = folder / f"{node}-{digest}-{exp}.iso"
    write_atomic(path, build_image(config, boot, chain, grub), root=config.cache_dir)
    for old in folder.glob(f"{node}-*.iso"):
        if old != path and old.name.startswith(f"{node}-") and old.stem.count("-") == node.count("-") + 2:
            old.unlink(missing_ok=True)
    return path
