"""Discovery without an agent: what an unknown machine reports and how it is kept (issue 32).

A machine that chains ``/boot.ipxe`` and matches no node gets a script (:func:`bootserver.ipxe.
render_discovery_script`) that reports the facts iPXE knows of it (ipxe.org/cfg: ``${uuid}``,
``${serial}``, ``${manufacturer}``, ``${product}``, ``${asset}``, ``${buildarch}``, ``${platform}``,
``${netX/mac}``, ``${netX/chip}``, ``${netX/busid}``, each ``:uristring``-encoded into a query) to
``GET /discover``, then sleeps and asks again, so that once it is adopted (``bootserver nodes adopt``)
it boots its node's profile without a power cycle.

What a machine reports is data: :func:`read_report` keeps only the known keys, as text of at most
:data:`MAX_VALUE` characters; the MAC and UUID are checked. The records live in the state store (both
backends, :class:`Discovered`), bounded by ``server.discovery.keep`` (the oldest by last report are
dropped). A later report never rewrites what an earlier one said (:func:`merged`): each fact keeps its
first non-empty value, and every address that reported the MAC is kept, so a second machine claiming
the MAC from elsewhere shows as a conflict (:attr:`Discovered.conflict`) instead of taking the record
over. Pure functions and value types; no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .values import UUID_RE, normalize_mac

#: NICs whose MAC, chip and bus id the script reports (``net0`` .. ``net7``).
NICS = 8
#: The machine's facts the script reports (query keys), besides ``mac`` and ``uuid`` and the NICs'
#: ``net<N>``, ``net<N>chip``, ``net<N>busid``.
FACTS = ("serial", "manufacturer", "product", "asset", "buildarch", "platform")
#: Every query key :func:`read_report` keeps.
REPORT_KEYS = ("mac", "uuid", *FACTS, *(f"net{i}{part}" for i in range(NICS) for part in ("", "chip", "busid")))
#: Longest value kept, in characters (longer ones are cut).
MAX_VALUE = 128
#: Addresses kept per MAC (:func:`merged`): past it, the one that reported least recently is dropped
#: (never the first: the record stays a conflict).
MAX_ADDRESSES = 16
#: The CoreOS architecture of a reported ``buildarch`` (iPXE's ``${buildarch}``, ipxe.org/cfg/buildarch;
#: GRUB's ``$grub_cpu``), by ``platform`` (iPXE's ``${platform}``: ``pcbios``, ``efi``; GRUB's
#: ``$grub_platform``: ``pc``, ``efi``) where it matters: a BIOS machine runs the 32-bit iPXE build
#: (``i386``, the only one ``undionly.kpxe`` has), but every BIOS machine CoreOS boots is x86_64; an
#: ``i386`` UEFI firmware is a 32-bit one, which no CoreOS boots.
ARCHITECTURE_OF = {("x86_64", None): "x86_64", ("i386", "pcbios"): "x86_64", ("i386", "pc"): "x86_64",
                   ("i386", ""): "x86_64", ("arm64", None): "aarch64", ("aarch64", None): "aarch64"}


class ReportError(ValueError):
    """A report that cannot be recorded: no valid ``mac`` (HTTP 400)."""


@dataclass(frozen=True)
class Discovered:
    """A machine that reported itself and is not a node: its MAC (the key, lower-case ``aa:bb:...``), its
    SMBIOS UUID (lower-case, or ``None``), its other facts (``{key: text}``, see :data:`FACTS`; the NICs
    as ``net0``, ``net0chip``, ...), the address its last report came from, the unix seconds of its first
    and last report, how many reports were recorded, and every address that reported it (``{address:
    unix seconds of its last report}``, in the order they first reported; at most :data:`MAX_ADDRESSES`;
    a record without them stands for ``{address: last_seen}``)."""

    mac: str
    uuid: str | None
    facts: Mapping[str, str] = field(default_factory=dict)
    address: str | None = None
    first_seen: float = 0.0
    last_seen: float = 0.0
    reports: int = 1
    addresses: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.addresses and self.address is not None:
            object.__setattr__(self, "addresses", {self.address: self.last_seen})

    @property
    def conflict(self) -> bool:
        """Whether the MAC was reported from more than one address: two machines claim it (or the
        machine moved); adopting it needs ``--addresses`` naming the one to trust."""
        return len(self.addresses) > 1

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able dict (``GET /discovered``, the page's live updates); ``addresses`` as a list in
        the order they first reported."""
        return {"mac": self.mac, "uuid": self.uuid, "facts": dict(self.facts), "address": self.address,
                "addresses": list(self.addresses), "conflict": self.conflict,
                "first_seen": self.first_seen, "last_seen": self.last_seen, "reports": self.reports,
                "arch": self.arch_text()}

    @property
    def architecture(self) -> str | None:
        """The machine's CoreOS architecture (``x86_64``, ``aarch64``: :data:`ARCHITECTURE_OF`) from what
        it reported; the reported ``buildarch`` as is when it maps to none (e.g. ``i386`` on UEFI);
        ``None`` when it reported none."""
        built = self.facts.get("buildarch")
        if not built:
            return None
        platform = self.facts.get("platform", "")
        return ARCHITECTURE_OF.get((built, None)) or ARCHITECTURE_OF.get((built, platform)) or built

    def arch_text(self) -> str | None:
        """The architecture and platform as the table and the page show them (``x86_64/pcbios``), the
        ``buildarch`` reported in brackets when it differs (``x86_64 (i386)/pcbios``); ``None`` for
        neither."""
        arch, built = self.architecture, self.facts.get("buildarch")
        if arch is not None and built != arch:
            arch = f"{arch} ({built})"
        return "/".join(x for x in (arch, self.facts.get("platform")) if x) or None

    def macs(self) -> list[str]:
        """Every MAC the machine reported (its NICs'), the key first."""
        out = [self.mac]
        for i in range(NICS):
            mac = self.facts.get(f"net{i}")
            if mac and mac not in out:
                out.append(mac)
        return out


def _text(value: str) -> str:
    return value[:MAX_VALUE]


def read_report(query: Mapping[str, str]) -> tuple[str, str | None, dict[str, str]]:
    """``(mac, uuid, facts)`` of a report's query (already percent-decoded): the MAC normalized, the UUID
    lower-case or ``None`` (an empty, malformed or all-zero/all-F one: iPXE reports what the firmware
    has), every other known key as text cut to :data:`MAX_VALUE` characters, empty ones left out, the
    NICs' MACs normalized (a malformed one left out). Unknown keys are dropped. Raises
    :class:`ReportError` without a valid ``mac``."""
    try:
        mac = normalize_mac(query.get("mac", ""))
    except ValueError:
        raise ReportError("a report needs the machine's mac (aa:bb:cc:dd:ee:ff)") from None
    given = query.get("uuid", "").strip().lower()
    uuid = None if not UUID_RE.match(given) or set(given) <= {"0", "-"} or set(given) <= {"f", "-"} else given
    facts: dict[str, str] = {}
    for key in REPORT_KEYS[2:]:
        value = query.get(key, "")
        if not value:
            continue
        if key.startswith("net") and key[3:].isdigit():
            try:
                value = normalize_mac(value)
            except ValueError:
                continue
        facts[key] = _text(value)
    return mac, uuid, facts


def merged(old: Discovered | None, new: Discovered) -> Discovered:
    """The record after report ``new`` (its ``last_seen`` the report's time) of a machine recorded as
    ``old`` (``None``: its first report): each fact, the UUID included, keeps its first non-empty value
    (a later, emptier or different report adds facts, never erases or replaces one); the report's
    address joins ``addresses`` (past :data:`MAX_ADDRESSES`, the one that reported least recently,
    other than the first, is dropped); ``address`` and ``last_seen`` are the report's, ``reports``
    counts it."""
    if old is None:
        return replace(new, reports=1, first_seen=new.last_seen,
                       addresses={new.address: new.last_seen} if new.address is not None else {})
    addresses = dict(old.addresses)
    if new.address is not None:
        if new.address not in addresses and len(addresses) >= MAX_ADDRESSES:
            first = next(iter(addresses))
            del addresses[min((a for a in addresses if a != first), key=addresses.__getitem__)]
        addresses[new.address] = new.last_seen
    return Discovered(old.mac, old.uuid or new.uuid, {**new.facts, **old.facts},
                      new.address if new.address is not None else old.address, old.first_seen, new.last_seen,
                      old.reports + 1, addresses)


def facts_json(facts: Mapping[str, str]) -> str:
    """The facts as the stores keep them (a JSON object, keys sorted)."""
    return json.dumps(dict(facts), sort_keys=True)


def facts_of(text: str | None) -> dict[str, str]:
    """The facts a store kept (:func:`facts_json`); ``{}`` for anything that is not a JSON object of texts."""
    try:
        doc = json.loads(text or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}


def row_params(record: Discovered) -> dict[str, Any]:
    """The record as a store's row, by column name (:data:`COLUMNS`): facts as :func:`facts_json`,
    addresses as a JSON object in the order they first reported."""
    return {"mac": record.mac, "uuid": record.uuid, "facts": facts_json(record.facts), "address": record.address,
            "first_seen": record.first_seen, "last_seen": record.last_seen, "reports": record.reports,
            "addresses": json.dumps(dict(record.addresses))}


def record_of(row: Sequence[Any]) -> Discovered:
    """The record of a store's row ``(mac, uuid, facts, address, first_seen, last_seen, reports,
    addresses)`` (:data:`COLUMNS`); addresses that are not a JSON object of numbers count as none (the
    record then stands for its last ``address``)."""
    mac, uuid, facts, address, first, last, reports, addresses = row
    try:
        doc = json.loads(addresses or "{}")
        kept = {str(k): float(v) for k, v in doc.items()} if isinstance(doc, dict) else {}
    except (ValueError, TypeError):
        kept = {}
    return Discovered(mac, uuid, facts_of(facts), address, first, last, reports, kept)


#: The columns of a record, in :func:`record_of`'s order.
COLUMNS = "mac, uuid, facts, address, first_seen, last_seen, reports, addresses"
