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

:func:`boot_rules` returns the rules in the order an engine must test them (the first match wins); every
rule names the :class:`ClientClass` it is for, so an engine turns classes into its own tests (dnsmasq
tags, Kea client classes) and rules into boot file options. A new kind of client (UEFI HTTP boot: the
vendor class ``HTTPClient`` with architectures 16 and 19; DHCPv6's ``bootfile-url``) is a class and a
rule here, with ``url=True`` where the file is a URL.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Config
from ..images.firmware import ARM64_GRUB
from ..urls import GENERIC

#: RFC 4578 client architecture (DHCP option 93) of an x86 BIOS PXE client.
ARCH_BIOS = 0
#: x86_64 UEFI PXE (7 per RFC 4578's IANA registry; 9 is what some firmware, e.g. older OVMF, sends).
ARCH_EFI_X86_64 = (7, 9)
#: arm64 UEFI PXE.
ARCH_EFI_ARM64 = 11

#: The DHCP user class (option 77) iPXE sends: the loop guard's test.
IPXE_USER_CLASS = "iPXE"


@dataclass(frozen=True)
class ClientClass:
    """A kind of DHCP client, as the engines test for it.

    ``name``: the dnsmasq tag and the Kea client class (letters, digits, ``-``); ``user_class``: the
    DHCP user class (option 77) it sends, or ``None``; ``arches``: the client architectures (option 93)
    it is, ``()`` for any; ``pxe_csa``: dnsmasq's name of the PXE client system architecture (its
    ``--pxe-service`` types), for the PXE menu of ``proxy`` mode, or ``None``.
    """

    name: str
    user_class: str | None = None
    arches: tuple[int, ...] = ()
    pxe_csa: tuple[str, ...] = ()


#: iPXE itself (any architecture): it gets the chain URL.
IPXE = ClientClass("ipxe", user_class=IPXE_USER_CLASS, pxe_csa=("x86PC", "X86-64_EFI", "BC_EFI"))
#: BIOS PXE.
BIOS = ClientClass("bios", arches=(ARCH_BIOS,), pxe_csa=("x86PC",))
#: x86_64 UEFI PXE.
EFI64 = ClientClass("efi64", arches=ARCH_EFI_X86_64, pxe_csa=("X86-64_EFI", "BC_EFI"))
#: arm64 UEFI PXE.
ARM64 = ClientClass("arm64", arches=(ARCH_EFI_ARM64,), pxe_csa=("ARM64_EFI",))

#: Every class, in the order the engines define them.
CLASSES = (IPXE, BIOS, EFI64, ARM64)


@dataclass(frozen=True)
class BootRule:
    """What a client of class ``client`` gets: ``file``, a file name in the TFTP root or (``url``) a
    URL; ``not_ipxe``: the rule also requires the client not to be iPXE (the loop guard: every loader
    rule has it). ``menu``: the base name of ``file`` in ``proxy`` mode's PXE menu (dnsmasq's
    ``--pxe-service`` adds ``.0``; :func:`menu_files` lists what the TFTP root then holds)."""

    client: ClientClass
    file: str
    url: bool = False
    not_ipxe: bool = True
    menu: str = ""


#: The iPXE script of ``proxy`` mode's PXE menu for iPXE (a stock iPXE ignores a proxy offer's boot
#: file name but follows a PXE menu: shared/DESIGN.md), in the TFTP root as ``<name>.0``.
MENU_SCRIPT = "bootserver"


def chain_url(config: Config) -> str:
    """The short generic entry iPXE is handed: ``<server.base_url>/boot.ipxe?mac=${net0/mac}`` (iPXE
    expands ``${net0/mac}``; docs/design.md, "The boot flow" step 2)."""
    return f"{config.server.effective_base_url}{GENERIC.pattern}?mac=${{net0/mac}}"


def boot_rules(config: Config) -> tuple[BootRule, ...]:
    """The boot rules of ``config``, the first that matches a client wins: iPXE gets :func:`chain_url`;
    not iPXE, by architecture: BIOS ``undionly.kpxe``, x86_64 UEFI ``ipxe.efi``, arm64 UEFI the arm64
    GRUB (:data:`~bootserver.images.firmware.ARM64_GRUB`). A client that is none of these (an
    installed system renewing its address) gets no boot file."""
    return (
        BootRule(IPXE, chain_url(config), url=True, not_ipxe=False, menu=MENU_SCRIPT),
        BootRule(EFI64, "ipxe.efi", menu="ipxe"),
        BootRule(ARM64, ARM64_GRUB, menu="grubaa64"),
        BootRule(BIOS, "undionly.kpxe", menu="undionly"),
    )


def menu_files(config: Config) -> dict[str, str | None]:
    """The files ``proxy`` mode's PXE menu may ask the TFTP root for, each ``<menu>.0`` and ``<menu>``
    (dnsmasq adds the PXE layer ``.0`` for BIOS clients; whether a UEFI stack asks with it varies) ->
    the loader it is a copy of, or ``None`` for the iPXE script that chains :func:`chain_url`
    (:func:`menu_script`)."""
    return {name: None if rule.url else rule.file for rule in boot_rules(config)
            for name in (f"{rule.menu}.0", rule.menu)}


def menu_script(config: Config) -> str:
    """The iPXE script ``<MENU_SCRIPT>.0`` of the PXE menu: ``chain`` :func:`chain_url`."""
    return f"#!ipxe\nchain {chain_url(config)}\n"


def tag_of(node: str) -> str:
    """The dnsmasq tag (and Kea class) of node ``node``'s reservation: ``node-<name>``."""
    return f"node-{node}"


__all__ = ["ARCH_BIOS", "ARCH_EFI_ARM64", "ARCH_EFI_X86_64", "ARM64", "BIOS", "CLASSES", "EFI64", "IPXE",
           "IPXE_USER_CLASS", "MENU_SCRIPT", "BootRule", "ClientClass", "boot_rules", "chain_url", "menu_files",
           "menu_script", "tag_of"]
