"""Build kernel arguments and render per-node iPXE scripts (Jinja2 templates in ``templates/``, this
module's own environment); their GRUB form is :mod:`bootserver.grub`'s.

Everything put into a script is either built here from checked parts or checked by
:func:`check_script_word`, because iPXE expands ``${...}`` and treats ``&&``, ``||`` and a leading ``#``
specially. Kernel-argument rules (docs/design.md, domain rules 3-7): ``initrd=main`` with
``initrd --name main`` (needed on
UEFI, harmless on BIOS); serial console by architecture; ``ignition.platform.id=packet`` only together
with a config source that outranks the platform (``ignition.config.url`` in live mode, the installer's
embedded ``coreos.inst.ignition_url`` in install mode).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import jinja2

from . import __version__
from .errors import BootserverError
from .resources import data_dir

#: Platforms a node's kargs may name (``ignition.platform.id``, ``coreos.inst.platform_id``).
PLATFORMS = ("packet", "metal")

#: Serial console karg per architecture on Equinix Metal (platform ``packet``).
CONSOLES = {"x86_64": "console=ttyS1,115200n8", "aarch64": "console=ttyAMA0,115200"}

#: Kernel arguments bootserver sets itself; a profile's ``kargs`` may not set them again.
RESERVED_KARGS = (
    "initrd", "coreos.live.rootfs_url", "coreos.inst.install_dev", "coreos.inst.ignition_url",
    "coreos.inst.platform_id", "ignition.platform.id", "ignition.config.url", "ignition.firstboot",
)

#: Words iPXE reads as the end of a command (src/core/exec.c, command_terminator).
_SEPARATORS = frozenset({";", "&&", "||"})

#: Kernel arguments of node networking (docs/design.md, rule 10), set from the node's ``network``.
NETWORK_KARGS = ("ip", "nameserver", "rd.route", "bond", "vlan", "ifname", "rd.neednet", "bootdev", "BOOTIF",
                 "rd.bootif", "rd.peerdns", "team", "bridge")

#: The kernel's command line buffer in bytes, terminating NUL included (``COMMAND_LINE_SIZE`` of
#: arch/x86/include/asm/setup.h and arch/arm64/include/uapi/asm/setup.h).
COMMAND_LINE_SIZE = {"x86_64": 2048, "aarch64": 2048}

_UNSAFE = re.compile(r"[\s\"'\\\x00-\x1f\x7f]|\$\{|&&|\|\|")


class UnsafeValueError(ValueError):
    """A value cannot be placed in an iPXE script as one word."""


def check_script_word(value: str) -> str:
    """Return ``value`` if iPXE would read it as one literal word, else raise :class:`UnsafeValueError`.

    Refused: the empty string, whitespace, quotes, backslashes and control characters, ``${`` (setting
    expansion), ``&&`` and ``||`` (command chaining) anywhere, a lone ``;`` (a command separator) and a
    leading ``#`` (comment). iPXE splits a script line into words at whitespace and ends a command at a
    word that is exactly ``||``, ``&&`` or ``;`` and at any word starting with ``#`` (ipxe/ipxe
    ``src/core/exec.c``, ``command_terminator``).
    """
    if not value:
        raise UnsafeValueError("empty value")
    if value in _SEPARATORS:
        raise UnsafeValueError(f"{value!r} is a command separator to iPXE")
    m = _UNSAFE.search(value)
    if m:
        raise UnsafeValueError(f"{value!r} contains {m.group()!r}, which iPXE would not read literally")
    if value.startswith("#"):
        raise UnsafeValueError(f"{value!r} starts with '#', which iPXE reads as a comment")
    return value


def check_extra_karg(value: str) -> str:
    """Check one of a profile's extra kargs: a safe word that does not set a karg we set ourselves.

    Raises :class:`UnsafeValueError`.
    """
    check_script_word(value)
    key = value.split("=", 1)[0]
    if key in RESERVED_KARGS:
        raise UnsafeValueError(f"{key} is set by bootserver from the profile; do not set it in kargs")
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
    """
    for url in (rootfs_url, stub_url):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"coreos.live.rootfs_url and Ignition URLs must be http or https: {url!r}")
    if arch not in CONSOLES:
        raise ValueError(f"no serial console known for architecture {arch!r}")
    if platform not in PLATFORMS:
        raise ValueError(f"unknown platform {platform!r}")
    args = ["initrd=main", f"coreos.live.rootfs_url={rootfs_url}"]
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


@dataclass(frozen=True, slots=True)
class ScriptContext:
    """What a node's boot script says: the node and where its artifacts are.

    URLs are absolute http(s) URLs; ``kargs`` the words after the kernel URL (see :func:`build_kargs`).
    """

    node: str
    profile: str
    stream: str
    release: str
    arch: str
    mode: str
    kernel_url: str
    initramfs_url: str
    kargs: tuple[str, ...]


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    """iPXE's templates: plain text (every value is a checked word: :func:`check_script_word`),
    undefined names raise."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("templates"))),
        autoescape=False,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env


@functools.cache
def _template(name: str) -> jinja2.Template:
    return _environment().get_template(name)


def render_boot_script(ctx: ScriptContext) -> str:
    """Render ``templates/boot.ipxe.j2`` for a node: fetch kernel and initramfs with bounded retries,
    boot, and on failure ``exit`` so the firmware falls through to the next boot device.

    Raises :class:`UnsafeValueError` if any value would not be read literally by iPXE.
    """
    for word in (ctx.node, ctx.profile, ctx.stream, ctx.release, ctx.arch, ctx.mode,
                 ctx.kernel_url, ctx.initramfs_url, *ctx.kargs):
        check_script_word(word)
    return _template("boot.ipxe.j2").render(ctx=ctx, version=__version__)


def render_discovery_script(*, mac: str | None, every: int, nics: int) -> str:
    """Render ``templates/discover.ipxe.j2``: the answer to a machine that matches no node
    (:mod:`bootserver.discovery`). It reports the machine's facts to ``discover?...`` (text settings
    ``:uristring``-encoded by iPXE itself; the UUID as iPXE prints it; MACs and bus ids ``:hexhyp``,
    ``52-54-00-...``: a ``:uristring`` override would print their raw bytes, and a raw ``:`` in a
    relative URL makes Debian's iPXE read what precedes it as a URI scheme; ``net0`` ..
    ``net<nics-1>``), then waits ``every`` seconds
    (``sleep``, or ``prompt --timeout`` where that iPXE has no ``sleep``) and chains ``boot.ipxe`` again
    with ``--replace`` (no nesting however long it waits). Both URLs are relative: iPXE resolves them
    against the script's own URL, so they reach the server the way the machine did. ``mac`` (normalized,
    from the request; ``None``: iPXE's ``${net0/mac}``) is the one literal from the request. Raises
    :class:`UnsafeValueError` for a ``mac`` iPXE would not read literally."""
    word = "${net0/mac}" if mac is None else check_script_word(mac)
    return _template("discover.ipxe.j2").render(mac=word, every=every, nics=nics, version=__version__)


def render_localboot_script(node: str, stage: str) -> str:
    """Render ``templates/localboot.ipxe.j2``: the boot-once answer for an installed node.

    It ends in ``exit``, which hands control back to the firmware so it boots the next device, the
    local disk (what Equinix documents for custom iPXE, and what tinkerbell/smee does when it has
    nothing to boot); ``sanboot --drive 0x80`` would work on BIOS only. Seen end to end
    (tests/e2e/test_life.py): SeaBIOS boots its next device, the disk, at once; OVMF tries its own
    remaining network boot options, then boots the disk's removable path. Raises
    :class:`UnsafeValueError` for a value iPXE would not read literally.
    """
    check_script_word(node)
    check_script_word(stage)
    return _template("localboot.ipxe.j2").render(node=node, stage=stage, version=__version__)
