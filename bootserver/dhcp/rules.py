"""Which boot file each DHCP client gets: the one place that says it, read by every engine's
configuration (:mod:`bootserver.dhcp.dnsmasq`, :mod:`bootserver.dhcp.kea`) and by ``--print``.

A machine's firmware asks DHCP twice on its way to bootserver (docs/on-premises.md):

1. its PXE stack (BIOS, or UEFI without HTTP boot), which tells its **client architecture** in DHCP
   option 93 (RFC 4578 section 2.1, IANA "Processor Architecture Types": 0 x86 BIOS, 7 and 9 x86_64
   UEFI, 11 arm64 UEFI), gets a loader over TFTP from the TFTP root ``bootserver loaders`` writes
   (:data:`bootserver.images.firmware.IPXE_LOADERS`, :data:`~bootserver.images.firmware.ARM64_GRUB`);
2. that iPXE asks again with the **user class** ``iPXE`` (option 77) and gets the short generic entry
   ``<base_url>/boot.ipxe?mac=${net0/mac}``, which iPXE expands. That test is the loop guard: without
   it, iPXE would be handed iPXE forever. The URL is never a signed per-node URL: DHCP servers and relays
   cut long boot file names, and the generic entry picks the node by its MAC anyway.

The arm64 GRUB needs no second DHCP: it takes the firmware's answer and sources ``/boot.grub``.

**UEFI HTTP Boot** (UEFI 2.5+, section 24.7): the firmware sends the vendor class (option 60)
``HTTPClient:Arch:000<nn>...`` with client architecture 16 (x86_64) or 19 (arm64) and takes an offer that
carries option 60 ``HTTPClient`` back and an ``http://`` boot file URL: the same loaders over HTTP from this
server (``/loaders/ipxe.efi``, ``/loaders/grubaa64.efi``), on its IPv4 base URL. Over IPv6 (DHCPv6, with
``dhcp.ipv6``) the firmware asks for option 59 ``bootfile-url`` with the vendor class option 16
``HTTPClient``, and iPXE over IPv6 for option 59 with its user class option 15 ``iPXE``
(:func:`boot6_rules`).

**Secure Boot**: a ``secure_boot`` node is never handed iPXE (no firmware that enforces Secure Boot trusts
it): its own rules (:attr:`BootRule.node`) hand it its stream's signed shim instead, over TFTP
(``secureboot/<stream>/bootx64.efi`` in the TFTP root, also as ``proxy`` mode's PXE menu entry) or HTTP
(``/loaders/secureboot/<stream>/bootx64.efi``) (:mod:`bootserver.images.netsecure`), and every rule that
hands a UEFI x86_64 firmware iPXE excludes the ``secure_boot`` nodes (:attr:`BootRule.not_secure_boot`,
the engines' :data:`SECURE_BOOT` class), so no order of the rules can hand them iPXE. The engines know
such a node by **every** MAC of it (:func:`node_macs`: its ``mac`` and the ``mac-address`` of each NIC
of its ``network``, a bond's other ports too), not by its reservation's one: its firmware may PXE-boot
from any of its NICs. Over DHCPv6 they get no boot file (the GRUB after shim fetches over IPv4:
:mod:`bootserver.images.netsecure`); their firmware goes on to its IPv4 entry.

:func:`boot_rules` returns the rules in the order an engine must test them (the first match wins); every
rule names the :class:`ClientClass` it is for, so an engine turns classes into its own tests (dnsmasq
tags, Kea client classes) and rules into boot file options. A new kind of client (UEFI HTTP boot: the
vendor class ``HTTPClient`` with architectures 16 and 19; DHCPv6's ``bootfile-url``) is a class and a
rule here, with ``url=True`` where the file is a URL.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Config, ResolvedNode
from ..images.firmware import ARM64_GRUB
from ..images.netsecure import SET_DIR, secure_boot_streams
from ..inventory import inventory
from ..nmstate import NetworkState
from ..urls import GENERIC, LOADER_ARM64, LOADER_IPXE, LOADER_SECUREBOOT

#: RFC 4578 client architecture (DHCP option 93) of an x86 BIOS PXE client.
ARCH_BIOS = 0
#: x86_64 UEFI PXE (7 per RFC 4578's IANA registry; 9 is what some firmware, e.g. older OVMF, sends).
ARCH_EFI_X86_64 = (7, 9)
#: arm64 UEFI PXE.
ARCH_EFI_ARM64 = 11

#: UEFI HTTP Boot's client architectures (IANA "Processor Architecture Types"): x86_64 and arm64 over HTTP.
ARCH_HTTP_X86_64 = 16
ARCH_HTTP_ARM64 = 19

#: The DHCP user class (option 77) iPXE sends: the loop guard's test.
IPXE_USER_CLASS = "iPXE"
#: The vendor class (option 60) a UEFI HTTP Boot client sends and must get back in the offer.
HTTP_VENDOR_CLASS = "HTTPClient"


@dataclass(frozen=True)
class ClientClass:
    """A kind of DHCP client, as the engines test for it.

    ``name``: the dnsmasq tag and the Kea client class (letters, digits, ``-``); ``user_class``: the
    DHCP user class (option 77) it sends, or ``None``; ``arches``: the client architectures (option 93)
    it is, ``()`` for any; ``pxe_csa``: dnsmasq's names of the PXE client system architectures (its
    ``--pxe-service`` types), for the PXE menu of ``proxy`` mode; ``vendor_class``: the prefix of the
    vendor class (option 60) it sends, or ``None``. A client is of the class when every test given holds.
    """

    name: str
    user_class: str | None = None
    arches: tuple[int, ...] = ()
    pxe_csa: tuple[str, ...] = ()
    #: The start of the vendor class (option 60) it sends, e.g. ``HTTPClient`` (UEFI HTTP boot), or ``None``.
    vendor_class: str | None = None


#: iPXE itself (any architecture): it gets the chain URL.
IPXE = ClientClass("ipxe", user_class=IPXE_USER_CLASS, pxe_csa=("x86PC", "X86-64_EFI", "BC_EFI"))
#: BIOS PXE.
BIOS = ClientClass("bios", arches=(ARCH_BIOS,), pxe_csa=("x86PC",))
#: x86_64 UEFI PXE.
EFI64 = ClientClass("efi64", arches=ARCH_EFI_X86_64, pxe_csa=("X86-64_EFI", "BC_EFI"))
#: arm64 UEFI PXE.
ARM64 = ClientClass("arm64", arches=(ARCH_EFI_ARM64,), pxe_csa=("ARM64_EFI",))

#: x86_64 UEFI HTTP Boot.
HTTP64 = ClientClass("http64", arches=(ARCH_HTTP_X86_64,))
#: arm64 UEFI HTTP Boot.
HTTPARM64 = ClientClass("httparm64", arches=(ARCH_HTTP_ARM64,))

#: Every class, in the order the engines define them.
CLASSES = (IPXE, BIOS, EFI64, ARM64, HTTP64, HTTPARM64)

#: x86_64 UEFI HTTP Boot over IPv6 (DHCPv6, ``dhcp.ipv6``): the vendor class option 16 of enterprise
#: :data:`HTTP6_ENTERPRISE` whose class data starts ``HTTPClient``, and client architecture 16 (over DHCPv6
#: the same fields of a :class:`ClientClass` name option 15 for ``user_class``, option 16 for
#: ``vendor_class`` and option 61 for ``arches``: RFC 8415 sections 21.15 and 21.16, RFC 5970 section 3.3;
#: edk2's HttpBootDxe sends all three). An arm64 firmware (architecture 19) gets no boot file over DHCPv6:
#: the arm64 GRUB's own URL is on the IPv4 base URL, so it goes on to its IPv4 entry, rather than being
#: handed the x86_64 iPXE. :data:`IPXE` is the other DHCPv6 class (iPXE sends its user class ``iPXE`` as
#: option 15).
HTTP6 = ClientClass("http6", arches=(ARCH_HTTP_X86_64,), vendor_class=HTTP_VENDOR_CLASS)

#: The enterprise number of UEFI HTTP Boot's DHCPv6 vendor class (option 16): 343, as edk2 sends it
#: (NetworkPkg/HttpBootDxe, ``HTTP_BOOT_DHCP6_ENTERPRISE_NUM``).
HTTP6_ENTERPRISE = 343

#: The dnsmasq tag and Kea client class of every MAC of every ``secure_boot`` node (x86_64, with a MAC:
#: :func:`secure_boot_macs`), tested by :attr:`BootRule.not_secure_boot`.
SECURE_BOOT = "secureboot"


@dataclass(frozen=True)
class BootRule:
    """What a client of class ``client`` gets: ``file``, a file name in the TFTP root or (``url``) a
    URL; ``not_ipxe``: the rule also requires the client not to be iPXE (the loop guard: every loader
    rule has it). ``menu``: the base name of ``file`` in ``proxy`` mode's PXE menu (dnsmasq's
    ``--pxe-service`` adds ``.0``; :func:`menu_files` lists what the TFTP root then holds; ``""``: not in
    the menu, as UEFI HTTP Boot follows no PXE menu). ``vendor_class``: the option 60 the answer must
    carry (``HTTPClient`` for UEFI HTTP Boot). ``node``: the rule is that node's alone (every MAC of it,
    :func:`node_macs`: dnsmasq's tag :func:`macs_tag_of`), before every rule for all.
    ``not_secure_boot``: the rule also requires the client not to be a ``secure_boot`` node
    (:data:`SECURE_BOOT`): every rule that hands a UEFI x86_64 firmware iPXE has it."""

    client: ClientClass
    file: str
    url: bool = False
    not_ipxe: bool = True
    menu: str = ""
    vendor_class: str | None = None
    node: str | None = None
    not_secure_boot: bool = False


#: The iPXE script of ``proxy`` mode's PXE menu for iPXE (a stock iPXE ignores a proxy offer's boot
#: file name but follows a PXE menu: shared/DESIGN.md), in the TFTP root as ``<name>.0``.
MENU_SCRIPT = "bootserver"


def chain_url(config: Config, family: int = 4) -> str:
    """The short generic entry iPXE is handed: ``<server.base_url>/boot.ipxe?mac=${net0/mac}`` (iPXE
    expands ``${net0/mac}``; docs/design.md, "The boot flow" step 2), on the base URL of address family
    ``family`` (``4``: DHCPv4 and the PXE menu; ``6``: DHCPv6, :func:`ipxe6_url`)."""
    return f"{config.server.base_url_for(family)}{GENERIC.pattern}?mac=${{net0/mac}}"


def http_base(config: Config) -> str:
    """The base URL of what DHCPv4 hands out over HTTP: the server's IPv4 one (a machine that asked over
    IPv4; :meth:`~bootserver.config.ServerConfig.base_url_for`)."""
    return config.server.base_url_for(4)


def node_macs(node: ResolvedNode) -> tuple[str, ...]:
    """Every MAC of ``node`` (lower case, ``:``), each once: its ``mac`` (the selectors), then the
    ``mac-address`` of each ethernet interface of its NMState ``network`` (its own or its profile's),
    such as a bond's other ports, which its firmware may PXE-boot from as well. ``()`` when it has none."""
    network = node.network
    pinned = (i.mac_address for i in network.interfaces if i.type == "ethernet" and i.mac_address) \
        if isinstance(network, NetworkState) else ()
    return tuple(dict.fromkeys((*node.mac, *pinned)))


def secure_boot_nodes(config: Config) -> tuple[ResolvedNode, ...]:
    """The ``secure_boot`` nodes the engines know by a MAC (x86_64, with a MAC: :func:`node_macs`), in
    config order: those of :data:`SECURE_BOOT`."""
    streams = set(secure_boot_streams(config))
    return tuple(node for node in inventory(config).values()
                 if node.secure_boot and node.stream in streams and node_macs(node))


def secure_boot_macs(config: Config) -> tuple[tuple[str, str], ...]:
    """``(node, MAC)`` for every MAC (:func:`node_macs`) of every :func:`secure_boot_nodes` node: the
    clients of :data:`SECURE_BOOT`, whichever NIC the firmware boots from (its reservation has one)."""
    return tuple((node.name, mac) for node in secure_boot_nodes(config) for mac in node_macs(node))


def secure_boot_unlisted(config: Config) -> tuple[str, ...]:
    """One warning line per MAC of a :func:`secure_boot_nodes` node that only its ``network`` names (not
    its ``mac`` selectors): the engines hand that NIC the shim, but the shim's GRUB finds the node by its
    ``mac`` selectors alone (``/boot.grub?mac=``, ``secureboot/nodes/<mac>.cfg``), so a boot from that
    NIC falls through to the next boot device. Each line names the node's key and the MAC to add."""
    lines = []
    for node in secure_boot_nodes(config):
        listed, name = set(node.mac), node.name
        origin = node.source.removeprefix("file:")
        lines += [f"{origin}: nodes.{name}: secure_boot, and its network names NIC {mac}, which is not among "
                  f"its mac selectors: the DHCP engine hands that NIC the shim, but the shim's GRUB finds the "
                  f"node by its mac selectors only, so a boot from it falls through; add {mac} to "
                  f"nodes.{name}.mac" for mac in node_macs(node) if mac not in listed]
    return tuple(lines)


def secure_boot_rules(config: Config) -> tuple[BootRule, ...]:
    """Each x86_64 ``secure_boot`` node's own rules: its stream's signed shim over TFTP (UEFI PXE; the
    shim's path is also its PXE menu entry in ``proxy`` mode: dnsmasq adds no ``.0`` to a name with a
    dot) and over HTTP (UEFI HTTP Boot) instead of iPXE, for every MAC of it. Nodes without a MAC: none
    (no engine can tell them)."""
    out = []
    for node in secure_boot_nodes(config):
        shim = f"{SET_DIR}/{node.stream}/bootx64.efi"
        out += [BootRule(EFI64, shim, menu=shim, node=node.name),
                BootRule(HTTP64, http_base(config) + LOADER_SECUREBOOT.path(stream=node.stream, file="bootx64.efi"),
                         url=True, vendor_class=HTTP_VENDOR_CLASS, node=node.name)]
    return tuple(out)


def boot_rules(config: Config) -> tuple[BootRule, ...]:
    """The boot rules of ``config``, the first that matches a client wins: a ``secure_boot`` node's own
    (:func:`secure_boot_rules`); iPXE gets :func:`chain_url`; not iPXE, by architecture: BIOS
    ``undionly.kpxe``, x86_64 UEFI ``ipxe.efi``, arm64 UEFI the arm64 GRUB
    (:data:`~bootserver.images.firmware.ARM64_GRUB`), and UEFI HTTP Boot the same two over HTTP
    (``/loaders/ipxe.efi``, ``/loaders/grubaa64.efi``, with option 60 ``HTTPClient``). A client that is
    none of these (an installed system renewing its address) gets no boot file."""
    base = http_base(config)
    return (*secure_boot_rules(config),
            BootRule(IPXE, chain_url(config), url=True, not_ipxe=False, menu=MENU_SCRIPT),
            BootRule(EFI64, "ipxe.efi", menu="ipxe", not_secure_boot=True),
            BootRule(ARM64, ARM64_GRUB, menu="grubaa64"),
            BootRule(BIOS, "undionly.kpxe", menu="undionly"),
            BootRule(HTTP64, base + LOADER_IPXE.pattern, url=True, vendor_class=HTTP_VENDOR_CLASS,
                     not_secure_boot=True),
            BootRule(HTTPARM64, base + LOADER_ARM64.pattern, url=True, vendor_class=HTTP_VENDOR_CLASS))


def http6_url(config: Config) -> str:
    """The DHCPv6 answer to x86_64 UEFI HTTP Boot over IPv6 (``dhcp.ipv6``): option 59 ``bootfile-url``,
    ``/loaders/ipxe.efi`` on the server's IPv6 base URL; the answer also carries the vendor class option
    16 ``HTTPClient`` (RFC 8415 section 21.16), without which the firmware does not take the URL (edk2
    NetworkPkg/HttpBootDxe, HttpBootDhcp6.c)."""
    return config.server.base_url_for(6) + LOADER_IPXE.pattern


def ipxe6_url(config: Config) -> str:
    """The DHCPv6 answer to iPXE itself over IPv6 (``dhcp.ipv6``; its user class option 15 ``iPXE``, RFC
    8415 section 21.15): option 59 ``bootfile-url`` :func:`chain_url` on the server's IPv6 base URL. iPXE
    (src/net/udp/dhcpv6.c) asks for option 59 and takes it as its ``filename``, as option 67 over IPv4;
    it runs DHCPv6 when a router advertisement has the managed or other-configuration flag
    (src/net/ndp.c), as the engine's has (stateful DHCPv6)."""
    return chain_url(config, 6)


def boot6_rules(config: Config) -> tuple[BootRule, ...]:
    """The DHCPv6 boot rules of ``config`` (``dhcp.ipv6``; each ``file`` a URL for option 59
    ``bootfile-url``): UEFI HTTP Boot (:data:`HTTP6`, not iPXE) gets :func:`http6_url` with the vendor class
    ``HTTPClient`` back, never a ``secure_boot`` node (``not_secure_boot``: it gets no boot file over DHCPv6,
    as the GRUB after shim fetches over IPv4, so its firmware goes on to its IPv4 entry); iPXE (:data:`IPXE`)
    gets :func:`ipxe6_url`. The two never match one client (the first requires not iPXE), so their order
    does not matter; a client that is neither (an installed system) gets no boot file. No TFTP loader over
    DHCPv6: a firmware's PXE over IPv6 is not served."""
    return (BootRule(HTTP6, http6_url(config), url=True, vendor_class=HTTP_VENDOR_CLASS, not_secure_boot=True),
            BootRule(IPXE, ipxe6_url(config), url=True, not_ipxe=False))


def menu_files(config: Config) -> dict[str, str | None]:
    """The files ``proxy`` mode's PXE menu may ask the TFTP root for, each ``<menu>.0`` and ``<menu>``
    (dnsmasq adds the PXE layer ``.0`` for BIOS clients; whether a UEFI stack asks with it varies) ->
    the loader it is a copy of, or ``None`` for the iPXE script that chains :func:`chain_url`
    (:func:`menu_script`)."""
    return {name: None if rule.url else rule.file for rule in boot_rules(config) if rule.menu and rule.node is None
            for name in (f"{rule.menu}.0", rule.menu)}


def menu_script(config: Config) -> str:
    """The iPXE script ``<MENU_SCRIPT>.0`` of the PXE menu: ``chain`` :func:`chain_url`."""
    return f"#!ipxe\nchain {chain_url(config)}\n"


def tag_of(node: str) -> str:
    """The dnsmasq tag (and Kea class) of node ``node``'s reservation: ``node-<name>``."""
    return f"node-{node}"


def macs_tag_of(node: str) -> str:
    """The dnsmasq tag every MAC of ``secure_boot`` node ``node`` carries (:func:`node_macs`), which its own
    rules test: ``secureboot-<name>``. Not its reservation's :func:`tag_of`: a NIC without the reservation
    must not get the reservation's gateway and name servers. No node's tag can be it (those start
    ``node-``), nor :data:`SECURE_BOOT`."""
    return f"{SECURE_BOOT}-{node}"


__all__ = ["ARCH_BIOS", "ARCH_EFI_ARM64", "ARCH_EFI_X86_64", "ARCH_HTTP_ARM64", "ARCH_HTTP_X86_64", "ARM64", "BIOS",
           "CLASSES", "EFI64", "HTTP6", "HTTP6_ENTERPRISE", "HTTP64", "HTTPARM64", "HTTP_VENDOR_CLASS", "IPXE",
           "IPXE_USER_CLASS", "MENU_SCRIPT", "SECURE_BOOT",
           "BootRule", "ClientClass", "boot6_rules", "boot_rules", "chain_url", "http6_url", "ipxe6_url", "macs_tag_of",
           "menu_files", "menu_script", "node_macs", "secure_boot_macs", "secure_boot_nodes", "secure_boot_rules",
           "secure_boot_unlisted", "tag_of"]
