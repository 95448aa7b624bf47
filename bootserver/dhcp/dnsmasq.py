"""dnsmasq's configuration from the config: the boot rules (:mod:`bootserver.dhcp.rules`), the mode,
and one reservation per node (:mod:`bootserver.dhcp.reservations`).

dnsmasq 2.90's own manual (dnsmasq(8)) is the reference for every option written here. The engine's
files live in ``state_dir/dhcp/`` (:class:`Layout`), never in a system-wide place:

``dnsmasq.conf``  the options (``--conf-file``): interface, mode, classes, the ``secure_boot`` nodes'
                  MACs (:func:`secure_boot_lines`), boot rules, TFTP
``hosts/nodes``   the reservations, one ``dhcp-host`` line each (``--dhcp-hostsfile``)
``opts/nodes``    each reserved node's own gateway and name servers (``--dhcp-optsfile``)
``hosts.d/``      reservations added since, a file per node (``--dhcp-hostsdir``), and ``opts.d/``
                  their options (``--dhcp-optsdir``)
``tftp/``         the TFTP root: ``bootserver loaders``' files and ``proxy`` mode's PXE menu files
``leases``        dnsmasq's lease file

A reload that only adds reservations writes a file per added node into ``hosts.d/`` and ``opts.d/``,
which dnsmasq reads as they appear (inotify). One that removes or changes some rewrites ``hosts/nodes``
and ``opts/nodes`` whole, empties the two folders (:func:`write_reservations`) and sends dnsmasq
``SIGHUP``, on which it drops every record it read from them and reads them again, keeping its leases
(dnsmasq(8)); records read from a folder are only ever added, so a removal through the folder alone
would stay live (and a rewritten file log ``duplicate dhcp-host IP address``). dnsmasq 2.90 crashes on
that ``SIGHUP`` once it answered a machine whose reservation carries a tag: then the engine restarts it
(:mod:`bootserver.dhcp.engine`). Every value written is checked before (MACs, addresses, host names, node names), so no
line can carry a second option.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from ..config import Config
from ..files import read_file, write_atomic
from .reservations import Reservation
from .rules import (
    CLASSES,
    HTTP6_ENTERPRISE,
    HTTP_VENDOR_CLASS,
    MENU_SCRIPT,
    SECURE_BOOT,
    BootRule,
    ClientClass,
    boot6_rules,
    boot_rules,
    macs_tag_of,
    secure_boot_macs,
    secure_boot_nodes,
    tag_of,
)

#: dnsmasq's program name, found on ``PATH`` (Debian: ``/usr/sbin/dnsmasq`` from ``dnsmasq-base``).
DNSMASQ = "dnsmasq"

#: The text of the PXE menu entry in ``proxy`` mode (what a BIOS PXE stack prints).
MENU_TEXT = "bootserver"


@dataclass(frozen=True)
class Layout:
    """Where the engine's files are: ``root`` (``state_dir/dhcp``) and the paths below it."""

    root: Path

    @property
    def conf(self) -> Path:
        """``dnsmasq.conf``."""
        return self.root / "dnsmasq.conf"

    @property
    def hosts_file(self) -> Path:
        """``hosts/nodes``: the reservations (``--dhcp-hostsfile``)."""
        return self.root / "hosts" / "nodes"

    @property
    def opts_file(self) -> Path:
        """``opts/nodes``: the reserved nodes' own options (``--dhcp-optsfile``)."""
        return self.root / "opts" / "nodes"

    @property
    def hosts_added(self) -> Path:
        """``hosts.d/``: reservations added since :attr:`hosts_file` was written, a file per node
        (``--dhcp-hostsdir``)."""
        return self.root / "hosts.d"

    @property
    def opts_added(self) -> Path:
        """``opts.d/``: their options, a file per node (``--dhcp-optsdir``)."""
        return self.root / "opts.d"

    @property
    def tftp_root(self) -> Path:
        """``tftp/``: the TFTP root."""
        return self.root / "tftp"

    @property
    def leases(self) -> Path:
        """``leases``: dnsmasq's lease file."""
        return self.root / "leases"


def layout(config: Config) -> Layout:
    """The engine's files for ``config``: ``state_dir/dhcp``."""
    return Layout(config.state_dir / "dhcp")


def _tags(rule: BootRule, known_only: bool, secure: bool) -> str:
    tags = [f"tag:{rule.client.name}"]
    if rule.not_ipxe:
        tags.insert(0, "tag:!ipxe")
    if rule.not_secure_boot and secure:
        tags.append(f"tag:!{SECURE_BOOT}")
    if rule.node is not None:
        tags.append(f"tag:{macs_tag_of(rule.node)}")
    elif known_only:
        tags.append("tag:known")
    return ",".join(tags) + ","


def secure_boot_lines(config: Config) -> list[str]:
    """``dhcp-mac`` lines that give every MAC of every ``secure_boot`` node
    (:func:`~bootserver.dhcp.rules.secure_boot_macs`) the :data:`~bootserver.dhcp.rules.SECURE_BOOT` tag
    and its node's own (:func:`~bootserver.dhcp.rules.macs_tag_of`, which its shim rules test), whichever
    NIC its firmware boots from. Not the reservation (``dhcp-host`` names one MAC; several MACs in one
    ``dhcp-host`` are one client holding the address once): ``dhcp-mac`` sets a tag only, gives no
    address and no ``known`` tag, and dnsmasq 2.90 applies it to DHCPv4 (full and proxy) and DHCPv6
    (where it learns the client's MAC: src/rfc2131.c and src/rfc3315.c, ``daemon->dhcp_macs``)."""
    return [f"dhcp-mac=set:{tag},{mac}" for node, mac in secure_boot_macs(config)
            for tag in (SECURE_BOOT, macs_tag_of(node))]


def class_lines(classes: tuple[ClientClass, ...] = CLASSES) -> list[str]:
    """The lines that set one tag per class of ``classes`` (:data:`~bootserver.dhcp.rules.CLASSES`):
    ``dhcp-userclass``, ``dhcp-vendorclass`` (a prefix of option 60), ``dhcp-match`` per client
    architecture. A class with two kinds of test gets the tag of each (``<name>-user``, ``<name>-vendor``,
    ``<name>-arch``) and ``tag-if`` sets its own only when all hold."""
    lines = []
    for cls in classes:
        tests = [(kind, value) for kind, value in (("user", cls.user_class), ("vendor", cls.vendor_class),
                                                  ("arch", cls.arches or None)) if value is not None]
        own = {kind: cls.name if len(tests) == 1 else f"{cls.name}-{kind}" for kind, _ in tests}
        for kind, _value in tests:
            if kind == "user":
                lines.append(f"dhcp-userclass=set:{own[kind]},{cls.user_class}")
            elif kind == "vendor":
                lines.append(f"dhcp-vendorclass=set:{own[kind]},{cls.vendor_class}")
            else:
                lines.extend(f"dhcp-match=set:{own[kind]},option:client-arch,{arch}" for arch in cls.arches)
        if len(tests) > 1:
            lines.append(f"tag-if=set:{cls.name}," + ",".join(f"tag:{own[kind]}" for kind, _ in tests))
    return lines


def quoted(value: str) -> str:
    """``value`` as one field of a dnsmasq option: in double quotes when it holds a comma, which would
    otherwise end the field (dnsmasq 2.90 hides a comma, ``#`` and spaces between quotes: src/option.c,
    ``read_file``); a boot file URL holds no quote or backslash (:func:`~bootserver.values.check_http_url`)."""
    return f'"{value}"' if "," in value else value


def boot_lines(config: Config) -> list[str]:
    """The boot file of each rule: ``dhcp-boot`` in ``full`` mode, written last rule first (of the
    ``dhcp-boot`` lines whose tags all match, dnsmasq 2.90 takes the one written last: its list is built
    by prepending), with option 60 back to the UEFI HTTP Boot classes (``dhcp-option-force``: the client
    does not ask for it); in ``proxy`` mode a PXE menu (``pxe-prompt`` with no wait, a ``pxe-service``
    per rule and PXE client system architecture), which a stock iPXE follows where it ignores a proxy
    offer's file name (shared/DESIGN.md): UEFI HTTP Boot is not in it, a ``secure_boot`` node's shim is
    (its own entry, and none of the iPXE ones). With ``server.discovery`` off, machines with no reservation
    get no boot file (``tag:known``)."""
    assert config.dhcp is not None
    known_only = not config.server.discovery.enabled
    secure = bool(secure_boot_nodes(config))
    rules = boot_rules(config)
    if config.dhcp.full:
        vendor = {(rule.client.name, rule.vendor_class) for rule in rules if rule.vendor_class}
        return ([f"dhcp-option-force=tag:{name},option:vendor-class,{value}" for name, value in sorted(vendor)]
                + [f"dhcp-boot={_tags(rule, known_only, secure)}{quoted(rule.file)}" for rule in reversed(rules)])
    lines = [f'pxe-prompt="{MENU_TEXT}",0']
    for rule in rules:
        if not rule.menu:
            continue
        tags = "tag:!ipxe," if rule.not_ipxe else f"tag:{rule.client.name},"
        if rule.not_secure_boot and secure:
            tags += f"tag:!{SECURE_BOOT},"
        tags += f"tag:{macs_tag_of(rule.node)}," if rule.node is not None else "tag:known," if known_only else ""
        lines.extend(f'pxe-service={tags}{csa},"{MENU_TEXT}",{rule.menu}' for csa in rule.client.pxe_csa)
    return lines


def range_lines(config: Config, subnet: ipaddress.IPv4Network | None) -> list[str]:
    """``dhcp-range`` (and the pool's options) for the mode: ``proxy`` on the subnet; ``full`` with the
    pool ``dhcp.range``, or ``static`` (only reserved machines get an address); ``router`` and ``dns``
    given or explicitly empty (dnsmasq would otherwise name itself), ``domain``; with ``ipv6`` router
    advertisements and stateful DHCPv6 on the interface's prefix (``constructor:``): reserved addresses,
    and the pool ``dhcp.range6`` when given."""
    dhcp = config.dhcp
    assert dhcp is not None
    network = subnet.network_address if subnet is not None else "0.0.0.0"
    if not dhcp.full:
        return [f"dhcp-range={network},proxy"]
    mask = f",{subnet.netmask}" if subnet is not None else ""
    if dhcp.range is not None:
        lines = [f"dhcp-range={dhcp.range[0]},{dhcp.range[1]}{mask},{dhcp.lease_time}"]
    else:
        lines = [f"dhcp-range={network},static{mask},{dhcp.lease_time}"]
    lines.append("dhcp-option=option:router" + (f",{dhcp.router}" if dhcp.router else ""))
    lines.append("dhcp-option=option:dns-server" + "".join(f",{d}" for d in dhcp.dns))
    if dhcp.domain:
        lines.append(f"dhcp-option=option:domain-name,{dhcp.domain}")
    if dhcp.ipv6:
        lines += ["enable-ra", f"dhcp-range=::,constructor:{dhcp.interface},static,64,{dhcp.lease_time}"]
        if dhcp.range6 is not None:
            lines.append(f"dhcp-range={dhcp.range6[0]},{dhcp.range6[1]},64,{dhcp.lease_time}")
        lines += http6_lines(config)
    return lines


#: The vendor class option 16 dnsmasq sends to UEFI HTTP Boot over DHCPv6. dnsmasq writes option 16 as
#: counted strings (its ``OT_CSTRING``; a hex value is not taken as bytes), so two of them make the option
#: the firmware takes: ``00 02 'H' 'T'`` where the enterprise number goes, then ``00 0a "HTTPClient"``, the
#: class data. edk2 (NetworkPkg/HttpBootDxe, HttpBootDhcp6.c) reads the length at byte 4 and
#: ``HTTPClient`` at byte 6 and does not check the enterprise number; given as one hex string, the bytes
#: arrive as 47 characters of text and the firmware ignores the offer ("Remote boot cancelled").
HTTP6_VENDOR_CLASS = f"HT,{HTTP_VENDOR_CLASS}"


def http6_lines(config: Config) -> list[str]:
    """Boot answers over DHCPv6 (option 59 ``bootfile-url``), one per rule of
    :func:`~bootserver.dhcp.rules.boot6_rules`: a client whose vendor class (option 16, enterprise 343) is
    ``HTTPClient`` and whose architecture (option 61) is x86_64's 16 (UEFI HTTP Boot: the tags
    ``http6-vendor`` and ``http6-arch``, then ``http6`` by ``tag-if``) gets ``/loaders/ipxe.efi``
    (:func:`~bootserver.dhcp.rules.http6_url`) and the vendor class back (:data:`HTTP6_VENDOR_CLASS`); an
    arm64 firmware nothing (its IPv4 entry boots it); iPXE itself (user class option 15 ``iPXE``, the
    ``ipxe`` tag of :func:`class_lines`, which dnsmasq tests over DHCPv6 too) gets the generic entry on the
    IPv6 base URL (:func:`~bootserver.dhcp.rules.ipxe6_url`). A ``secure_boot`` node's firmware gets nothing
    (never iPXE; its GRUB fetches over IPv4). With ``server.discovery`` off, known machines only."""
    known = ["tag:known"] if not config.server.discovery.enabled else []
    secure = bool(secure_boot_nodes(config))
    rules = boot6_rules(config)
    lines = []
    for cls in dict.fromkeys(rule.client for rule in rules if rule.client.vendor_class is not None):
        # iPXE's tag comes from class_lines (dnsmasq tests the user class over DHCPv6 too)
        vendor, arch = (f"{cls.name}-vendor", f"{cls.name}-arch") if cls.arches else (cls.name, "")
        lines.append(f"dhcp-vendorclass=set:{vendor},enterprise:{HTTP6_ENTERPRISE},{cls.vendor_class}")
        if cls.arches:
            # option 61 by number (dnsmasq 2.90 has no v6 name for it), its 2 bytes as a hex prefix: the
            # client's first architecture (RFC 5970 section 3.3; edk2 sends one)
            lines += [f"dhcp-match=set:{arch},option6:61,{a >> 8:02x}:{a & 0xFF:02x}" for a in cls.arches]
            lines.append(f"tag-if=set:{cls.name},tag:{vendor},tag:{arch}")
    for rule in rules:
        tags = [f"tag:{rule.client.name}", *(["tag:!ipxe"] if rule.not_ipxe else []),
                *([f"tag:!{SECURE_BOOT}"] if rule.not_secure_boot and secure else []), *known]
        lines.append(f'dhcp-option={",".join(tags)},option6:bootfile-url,"{rule.file}"')
        if rule.vendor_class is not None:
            lines.append(f"dhcp-option-force=tag:{rule.client.name},option6:16,{HTTP6_VENDOR_CLASS}")
    return lines


def host_line(config: Config, r: Reservation) -> str:
    """Reservation ``r`` as a ``dhcp-host`` value: ``MAC[,set:node-<name>][,IPv4][,[IPv6]],HOSTNAME``;
    the MAC alone in ``proxy`` mode. The node's tag only where its own options need it
    (:func:`option_lines`): dnsmasq 2.90 crashes (SIGABRT) re-reading on ``SIGHUP`` a ``dhcp-host``
    with a tag after it answered that machine (fixed in 2.91, upstream commit f006be7), so the engine
    restarts it instead when such reservations change (:func:`tagged`)."""
    assert config.dhcp is not None
    fields = [r.mac] + ([f"set:{tag_of(r.node)}"] if option_lines(config, r) else [])
    if config.dhcp.full:
        if r.ipv4 is not None:
            fields.append(str(r.ipv4.ip))
        if config.dhcp.ipv6 and r.ipv6 is not None:
            fields.append(f"[{r.ipv6.ip}]")
        fields.append(r.hostname)
    return ",".join(fields)


def option_lines(config: Config, r: Reservation) -> list[str]:
    """The ``dhcp-option`` values of reservation ``r`` (``full`` mode, a node with a static address):
    its own gateway and IPv4 name servers, each explicitly empty where its network has none."""
    assert config.dhcp is not None
    if not config.dhcp.full or r.ipv4 is None:
        return []
    tag = f"tag:{tag_of(r.node)}"
    return [f"{tag},option:router" + (f",{r.gateway}" if r.gateway else ""),
            f"{tag},option:dns-server" + "".join(f",{d}" for d in r.dns)]


def tagged(config: Config, taken: tuple[Reservation, ...]) -> bool:
    """Whether any reservation of ``taken`` carries its node's tag (:func:`host_line`)."""
    return any(option_lines(config, r) for r in taken)


def hosts_text(config: Config, taken: tuple[Reservation, ...]) -> str:
    """The ``hosts/nodes`` file: one :func:`host_line` per reservation."""
    return "".join(f"{host_line(config, r)}\n" for r in taken)


def opts_text(config: Config, taken: tuple[Reservation, ...]) -> str:
    """The ``opts/nodes`` file: :func:`option_lines` of every reservation."""
    return "".join(f"{line}\n" for r in taken for line in option_lines(config, r))


def conf_text(config: Config, subnet: ipaddress.IPv4Network | None, files: Layout | None,
              taken: tuple[Reservation, ...] = ()) -> str:
    """dnsmasq's options for ``config``. With ``files`` (the engine's own run): bound to
    ``dhcp.interface`` alone, no DNS, the log on stderr, the hosts and options folders, the lease file
    and the TFTP root of ``files``. Without (``bootserver dhcp --print``, for a site's own dnsmasq): the
    reservations ``taken`` inline and the TFTP root ``/srv/tftp`` (where ``bootserver loaders`` writes)."""
    dhcp = config.dhcp
    assert dhcp is not None
    lines = [f"# dnsmasq options for {dhcp.interface} ({dhcp.mode} mode), written by bootserver from {config.source}",
             "port=0", f"interface={dhcp.interface}", "bind-interfaces", "log-dhcp"]
    if files is not None:
        lines += ["log-facility=-", f"dhcp-leasefile={files.leases}", f"dhcp-hostsfile={files.hosts_file}",
                  f"dhcp-optsfile={files.opts_file}", f"dhcp-hostsdir={files.hosts_added}",
                  f"dhcp-optsdir={files.opts_added}"]
    if dhcp.full:
        lines.append("dhcp-authoritative")
    lines += range_lines(config, subnet)
    lines += class_lines()
    lines += secure_boot_lines(config)
    lines += boot_lines(config)
    lines += ["enable-tftp", f"tftp-root={files.tftp_root if files is not None else '/srv/tftp'}"]
    if files is None:
        lines += [f"dhcp-host={host_line(config, r)}" for r in taken]
        lines += [f"dhcp-option={line}" for r in taken for line in option_lines(config, r)]
    return "\n".join(lines) + "\n"


def write_reservations(config: Config, files: Layout, taken: tuple[Reservation, ...]) -> bool:
    """Write ``hosts/nodes`` and ``opts/nodes`` of ``files`` with every reservation of ``taken`` (each
    whole: temp file and rename, so dnsmasq never reads half a file; it reads them on start and on
    ``SIGHUP``) and empty ``hosts.d/`` and ``opts.d/`` (:func:`add_reservations`); returns whether
    anything changed."""
    changed = False
    for path, text in ((files.opts_file, opts_text(config, taken)), (files.hosts_file, hosts_text(config, taken))):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if path.read_text() == text:
                continue
        except OSError:
            pass
        write_atomic(path, text.encode())
        changed = True
    for folder in (files.hosts_added, files.opts_added):
        folder.mkdir(parents=True, exist_ok=True)
        for added in folder.iterdir():
            added.unlink()
            changed = True
    return changed


@dataclass(frozen=True)
class Lease:
    """One DHCPv4 lease in dnsmasq's lease file: the address, the client's MAC, the host name it sent
    (``None`` for none) and when the lease expires (unix seconds; ``None``: never)."""

    address: str
    mac: str
    hostname: str | None
    expires: float | None


def leases_of(files: Layout, mac: str) -> list[Lease]:
    """The DHCPv4 leases dnsmasq holds for ``mac`` (lower-case ``aa:bb:...``), from its lease file
    (:attr:`Layout.leases`, read only, never through a link). The format is dnsmasq 2.90's
    (src/lease.c, ``lease_update_file``): one lease a line, ``EXPIRY MAC ADDRESS HOSTNAME CLIENT-ID``
    (``*`` for none, expiry 0 for never), then a ``duid`` line and the DHCPv6 leases, which name no
    MAC and are left out. No file (no engine ran in ``full`` mode) is no lease. Raises ``OSError``
    (:class:`~bootserver.files.LinkRefused` for a link)."""
    try:
        text = read_file(files.root, files.leases.name).decode("utf-8", "replace")
    except FileNotFoundError:
        return []
    found = []
    for line in text.splitlines():
        words = line.split()
        if words and words[0] == "duid":
            break
        if len(words) < 4 or words[1].lower() != mac or not words[0].isdigit():
            continue
        try:
            address = str(ipaddress.ip_address(words[2]))
        except ValueError:
            continue
        expires = int(words[0])
        found.append(Lease(address, mac, None if words[3] == "*" else words[3], float(expires) if expires else None))
    return found


def add_reservations(config: Config, files: Layout, added: tuple[Reservation, ...]) -> list[Path]:
    """Write each reservation of ``added`` into a file of its own, ``opts.d/<node>`` (when it has options)
    before ``hosts.d/<node>``, which dnsmasq reads as each appears (inotify; records read that way are only
    ever added: a removal or change goes through :func:`write_reservations`). Returns the hosts files."""
    written = []
    for r in added:
        lines = option_lines(config, r)
        if lines:
            write_atomic(files.opts_added / r.node, "".join(f"{line}\n" for line in lines).encode())
        write_atomic(files.hosts_added / r.node, f"{host_line(config, r)}\n".encode())
        written.append(files.hosts_added / r.node)
    return written


__all__ = [
    "DNSMASQ",
    "HTTP6_VENDOR_CLASS",
    "MENU_SCRIPT",
    "MENU_TEXT",
    "Layout",
    "Lease",
    "add_reservations",
    "boot_lines",
    "class_lines",
    "conf_text",
    "host_line",
    "hosts_text",
    "http6_lines",
    "layout",
    "leases_of",
    "option_lines",
    "opts_text",
    "quoted",
    "range_lines",
    "secure_boot_lines",
    "tagged",
    "write_reservations",
]
