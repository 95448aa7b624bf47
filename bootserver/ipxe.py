"""Render per-node iPXE scripts (Jinja2 templates in ``templates/``, this module's own environment); their
GRUB form is :mod:`bootserver.grub`'s, and the kernel arguments both carry are :mod:`bootserver.kargs`'.

Everything put into a script is either built from checked parts or checked by :func:`check_script_word`,
because iPXE expands ``${...}`` and treats ``&&``, ``||`` and a leading ``#`` specially.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jinja2

from . import __version__
from .resources import data_dir

#: Words iPXE reads as the end of a command (src/core/exec.c, command_terminator).
_SEPARATORS = frozenset({";", "&&", "||"})

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
    undefined names raise. jinja2 is imported here, on first use: a command that renders no script
    starts without it."""
    import jinja2

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
