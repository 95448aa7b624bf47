"""A node's kernel arguments (kargs): what the CoreOS live PXE boot is told, in the order it is told, and
whether they fit the kernel's command line. iPXE scripts (:mod:`bootserver.ipxe`), their GRUB form
(:mod:`bootserver.grub`) and the boot images (:mod:`bootserver.images`) all carry these same words.

Kernel-argument rules (docs/design.md, domain rules 3-7 and 10): ``initrd=main`` with ``initrd --name
main`` (needed on UEFI, harmless on BIOS); serial console by architecture; ``ignition.platform.id=packet``
only together with a config source that outranks the platform (``ignition.config.url`` in live mode, the
installer's embedded ``coreos.inst.ignition_url`` in install mode); every word one iPXE reads literally
(:func:`bootserver.ipxe.check_script_word`); the whole line within the kernel's buffer.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

from .errors import BootserverError
from .ipxe import UnsafeValueError, check_script_word

#: Platforms a node's kargs may name (``ignition.platform.id``, ``coreos.inst.platform_id``).
PLATFORMS = ("packet", "metal")

#: Serial console karg per architecture on Equinix Metal (platform ``packet``).
CONSOLES = {"x86_64": "console=ttyS1,115200n8", "aarch64": "console=ttyAMA0,115200"}

#: Kernel arguments bootserver sets itself; a profile's ``kargs`` may not set them again.
RESERVED_KARGS = (
    "initrd", "coreos.live.rootfs_url", "coreos.inst.install_dev", "coreos.inst.ignition_url",
    "coreos.inst.platform_id", "ignition.platform.id", "ignition.config.url", "ignition.firstboot",
)

#: Kernel arguments of node networking (docs/design.md, rule 10), set from the node's ``network``.
NETWORK_KARGS = ("ip", "nameserver", "rd.route", "bond", "vlan", "ifname", "rd.neednet", "bootdev", "BOOTIF",
                 "rd.bootif", "rd.peerdns", "team", "bridge")

#: The kernel's command line buffer in bytes, terminating NUL included (``COMMAND_LINE_SIZE`` of
#: arch/x86/include/asm/setup.h and arch/arm64/include/uapi/asm/setup.h).
COMMAND_LINE_SIZE = {"x86_64": 2048, "aarch64": 2048}


def check_extra_karg(value: str) -> str:
    """Check one of a profile's extra kargs: a safe word that does not set a karg we set ourselves.

    Raises :class:`UnsafeValueError`.
    """
    check_script_word(value)
    key = value.split("=", 1)[0]
    if key in RESERVED_KARGS:
        raise UnsafeValueError(f"{key} is set by bootserver from the profile; do not set it in kargs")
    return value


#: Kernel arguments an agent-mode profile's ``kargs`` (the installer's own line) may not set: ours.
AGENT_RESERVED_KARGS = ("initrd", "coreos.live.rootfs_url")


def check_agent_karg(value: str) -> str:
    """Check one of an agent-mode profile's kargs (the words openshift-install wrote after its kernel URL,
    ``ignition.firstboot`` and ``ignition.platform.id`` among them): a safe word that does not set the
    initramfs or rootfs bootserver sets. Raises :class:`UnsafeValueError`."""
    check_script_word(value)
    if value.split("=", 1)[0] in AGENT_RESERVED_KARGS:
        raise UnsafeValueError(f"{value.split('=', 1)[0]} is set by bootserver (its own URL); do not set it in kargs")
    return value


class CommandLineTooLong(BootserverError):
    """A node's kernel command line does not fit the kernel's buffer (exit 2: the config must change;
    500 from the server). Never truncated: the kernel would boot without the last arguments."""

    exit_code = 2


def command_line_bytes(kernel_url: str, kargs: Iterable[str]) -> int:
    """Bytes the kernel's command line buffer needs for ``kargs``, counted as Linux counts them: the
    UTF-8 bytes of the command line plus its terminating NUL. The command line is what iPXE hands the
    kernel under UEFI, the longer of its two forms: the image name (the last segment of the kernel
    URL's path) then a space then the arguments (iPXE ``efi_image.c``); under BIOS it is the arguments
    alone.
    """
    name = unquote(urlsplit(kernel_url).path.rsplit("/", 1)[-1])
    return len(f"{name} {' '.join(kargs)}".encode()) + 1


def check_command_line(node: str, arch: str, kernel_url: str, kargs: Iterable[str]) -> None:
    """Raise :class:`CommandLineTooLong` naming ``node`` when ``kargs`` (with the kernel's image name)
    do not fit the kernel's command line buffer of ``arch`` (:data:`COMMAND_LINE_SIZE`)."""
    kargs = tuple(kargs)
    size = command_line_bytes(kernel_url, kargs)
    limit = COMMAND_LINE_SIZE.get(arch, 2048)
    if size > limit:
        network = sum(len(k) + 1 for k in kargs if k.split("=", 1)[0] in NETWORK_KARGS)
        raise CommandLineTooLong(
            f"node {node}: the kernel command line needs {size} bytes, more than the {limit} of {arch} "
            f"({network} of them network arguments); shorten the profile's kargs, the network, or the URLs")


def build_kargs(*, arch: str, mode: str, rootfs_url: str, stub_url: str, install_dev: str | None,
                console: str | None, extra: Iterable[str], network: Iterable[str] = (),
                platform: str = "packet") -> tuple[str, ...]:
    """Return the kernel arguments of a CoreOS live PXE boot, in order.

    ``mode`` is ``install`` (coreos-installer writes the disk and embeds the stub at ``stub_url``) or
    ``live`` (Ignition runs from RAM and fetches ``stub_url``). ``platform`` is the Ignition/Afterburn
    platform (``packet``: Equinix Metal; ``metal``: any other bare metal). ``console`` is the console
    karg; ``None`` means Equinix's serial console of the architecture on ``packet``, none for x86_64 on
    ``metal``, and ``console=ttyAMA0,115200`` for aarch64 anywhere (the PL011 UART of arm64 servers and of
    QEMU's ``virt``; docs/design.md, rule 4). ``network`` (the node's dracut network arguments, see
    :func:`bootserver.nmstate.dracut_kargs`) follows it, ``extra`` is appended last. Raises
    :class:`UnsafeValueError` for a value iPXE would misread and ``ValueError`` for a non-http(s) URL or
    an unknown mode/arch/platform.

    ``agent`` mode (an OpenShift agent's PXE files) is the installer's kernel line with our URLs:
    ``initrd=main``, ``coreos.live.rootfs_url=`` and ``extra`` as they are, nothing else (no stub, no
    console, no network: the agent's Ignition inside the initramfs configures the host).
    """
    for url in (rootfs_url, stub_url):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"coreos.live.rootfs_url and Ignition URLs must be http or https: {url!r}")
    if arch not in CONSOLES:
        raise ValueError(f"no serial console known for architecture {arch!r}")
    if platform not in PLATFORMS:
        raise ValueError(f"unknown platform {platform!r}")
    args = ["initrd=main", f"coreos.live.rootfs_url={rootfs_url}"]
    if mode == "agent":
        args.extend(extra)
        for word in args:
            check_script_word(word)
        return tuple(args)
    if mode == "install":
        if not install_dev:
            raise ValueError("install mode needs install_dev")
        args += [f"coreos.inst.install_dev={install_dev}", f"coreos.inst.ignition_url={stub_url}",
                 f"coreos.inst.platform_id={platform}"]
    elif mode == "live":
        args += ["ignition.firstboot", f"ignition.platform.id={platform}", f"ignition.config.url={stub_url}"]
    else:
        raise ValueError(f"unknown mode {mode!r}")
    if console or platform == "packet" or arch == "aarch64":
        args.append(console or CONSOLES[arch])
    args.extend(network)
    args.extend(extra)
    for word in args:
        check_script_word(word)
    return tuple(args)
