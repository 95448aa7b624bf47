"""Render a node's boot in GRUB's form, for the UEFI boot of its boot image (``GET /grub/<node>``, sourced
by the image's ``grub.cfg``: :mod:`bootserver.iso`), with its own Jinja2 environment over ``templates/``
(``boot.grub.j2``, ``localboot.grub.j2``), beside :mod:`bootserver.ipxe` (as matchbox keeps ``grub.go``
beside ``ipxe.go``).

The boot is the one of the node's iPXE script (:class:`~bootserver.ipxe.ScriptContext`: same kernel,
initramfs and kargs). Every word put into a GRUB script is single-quoted (:func:`grub_quote`) after the
check of :func:`~bootserver.ipxe.check_script_word`; URLs become GRUB file names (:func:`grub_path`).
GRUB's ``http`` module fetches plain ``http://`` URLs of a host name or IPv4 address only (GRUB 2.06
``grub-core/net/http.c``).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from collections.abc import Sequence

    import jinja2

from . import __version__
from .errors import BootserverError
from .ipxe import ScriptContext, check_script_word
from .kargs import COMMAND_LINE_SIZE, CommandLineTooLong
from .resources import data_dir


class GrubUnsupported(BootserverError):
    """A node's boot cannot be written for GRUB (exit 2; 500 from the server): GRUB's ``http`` module
    fetches plain ``http://`` URLs of a host name or IPv4 address only."""

    exit_code = 2


def grub_path(url: str) -> str:
    """An ``http://HOST[:PORT]/PATH[?QUERY]`` URL in GRUB's file name form,
    ``(http,HOST:PORT)/PATH?QUERY`` (port 80 when the URL names none; GRUB 2.06 ``grub-core/net/http.c``
    sends the path and query as given). Raises :class:`GrubUnsupported` for another scheme or an IPv6
    address."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or ":" in parts.hostname:
        raise GrubUnsupported(f"GRUB fetches plain http URLs of a host name or IPv4 address only, not {url}",
                              public="this node's boot cannot be fetched by GRUB (it needs plain http URLs)")
    path = parts.path or "/"
    return f"(http,{parts.hostname}:{parts.port or 80}){path}" + (f"?{parts.query}" if parts.query else "")


def grub_quote(word: str) -> str:
    """``word`` as one literal GRUB word: single-quoted (GRUB reads everything up to the next ``'``
    literally). Raises :class:`~bootserver.ipxe.UnsafeValueError` for what
    :func:`~bootserver.ipxe.check_script_word` refuses, which includes quotes."""
    return f"'{check_script_word(word)}'"


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    """GRUB's templates: plain text (each value is checked and quoted by :func:`grub_quote`, the
    ``grub_quote`` filter), undefined names raise. jinja2 is imported here, on first use: a command
    that renders no script starts without it."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("templates"))),
        autoescape=False,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["grub_quote"] = grub_quote
    return env


@functools.cache
def _template(name: str) -> jinja2.Template:
    return _environment().get_template(name)


def render_grub_config(ctx: ScriptContext) -> str:
    """Render ``templates/boot.grub.j2``: the node's boot script in GRUB's form, for the boot image's
    UEFI boot: ``linux`` with the same kernel and the same kargs (each one quoted word; ``initrd=main``
    left out, :func:`grub_kargs`), ``initrd``,
    ``boot``, three attempts, then ``exit`` to the next boot device.

    GRUB puts ``BOOT_IMAGE=<kernel file>`` first on the kernel's command line (GRUB 2.06
    ``grub-core/loader/i386/linux.c``), which counts against the kernel's buffer. Raises
    :class:`GrubUnsupported` for an https or IPv6 URL, :class:`~bootserver.kargs.CommandLineTooLong`
    when the command line does not fit, and :class:`~bootserver.ipxe.UnsafeValueError` for a value
    GRUB or iPXE would not read literally.
    """
    kargs = grub_kargs(ctx.kargs)
    for word in (ctx.node, ctx.profile, ctx.stream, ctx.release, ctx.arch, ctx.mode, *kargs):
        check_script_word(word)
    kernel, initramfs = grub_path(ctx.kernel_url), grub_path(ctx.initramfs_url)
    size = len(f"BOOT_IMAGE={kernel} {' '.join(kargs)}".encode()) + 1
    limit = COMMAND_LINE_SIZE.get(ctx.arch, 2048)
    if size > limit:
        raise CommandLineTooLong(f"node {ctx.node}: the kernel command line under GRUB needs {size} bytes "
                                 f"(BOOT_IMAGE= included), more than the {limit} of {ctx.arch}; shorten the "
                                 "profile's kargs, the network, or the URLs")
    return _template("boot.grub.j2").render(ctx=ctx, kargs=kargs, kernel=kernel, initramfs=initramfs,
                                            version=__version__)


def grub_kargs(kargs: Sequence[str]) -> tuple[str, ...]:
    """The node's kargs as GRUB's ``linux`` gets them: the same words without ``initrd=main``. That word
    names iPXE's ``initrd --name main`` for the kernel's EFI stub (domain rule 3); GRUB hands the stub
    its initrd itself, and an arm64 stub that finds ``initrd=`` with no such file prints ``EFI stub:
    ERROR: Failed to handle fs_proto`` on the console (Debian's GRUB 2.06 and kernel 6.1, AAVMF)."""
    return tuple(k for k in kargs if k != "initrd=main")


def render_grub_localboot(node: str, stage: str) -> str:
    """Render ``templates/localboot.grub.j2``: the boot-once answer in GRUB's form; ``exit`` returns
    to the firmware, which boots its next boot option (the local disk). Raises
    :class:`~bootserver.ipxe.UnsafeValueError` for a value GRUB would not read literally."""
    check_script_word(node)
    check_script_word(stage)
    return _template("localboot.grub.j2").render(node=node, stage=stage, version=__version__)


def render_grub_discovery(*, mac: str | None, every: int, base_url: str) -> str:
    """Render ``templates/discover.grub.j2``: what ``/boot.grub`` answers an arm64 machine that matches no
    node (:mod:`bootserver.discovery`), as :func:`~bootserver.ipxe.render_discovery_script` does for
    iPXE: report what GRUB knows (``$net_default_mac``, ``$grub_cpu``, ``$grub_platform``, SMBIOS
    through GRUB's ``smbios`` command: type 1 UUID, manufacturer, product and serial, type 3 asset tag;
    each value cleaned by ``regexp`` loops, GRUB having no URL encoding) to ``<base_url>/discover?...``
    (fetched with ``cat``), wait ``every`` seconds, and ``source`` ``<base_url>/boot.grub?mac=`` again;
    a loop in one script (sourced again, it does nothing while the first one waits), so waiting nests
    nothing. ``mac``: normalized, from the request (``None``: GRUB's ``$net_default_mac``). Raises
    :class:`GrubUnsupported` for a ``base_url`` GRUB cannot fetch (:func:`grub_path`)."""
    word = '"$net_default_mac"' if mac is None else grub_quote(mac)
    return _template("discover.grub.j2").render(
        mac=word, every=every, version=__version__, discover=grub_path(f"{base_url}/discover") + "?",
        entry=grub_path(f"{base_url}/boot.grub") + "?mac=")
