"""Logging set-up of the command line: ``--log-level`` and ``--log-format text|json``.

Request lines come from logger ``bootserver.access`` (see :mod:`bootserver.http.accesslog`) with the fields
``remote``, ``method``, ``path`` (never the query string: URLs will carry signatures), ``route``,
``node``, ``status``, ``bytes`` and ``duration`` (seconds) as record attributes; the text format shows
them in the message, the JSON format as keys of one object per line.

**No forged lines.** A request path, query value, header or selector is data: a ``%0a`` in a path must not
start a log line of the requester's choosing. The text format escapes every control character of every
message in one place (:class:`TextFormatter`, :func:`escape_controls`), whatever logger wrote it and
whatever it quotes, so no call site has to remember; JSON escapes them by its own rules.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import TextIO

#: Record attributes copied into JSON lines when present.
FIELDS = ("remote", "method", "path", "route", "node", "status", "bytes", "duration")


#: What :func:`escape_controls` replaces: C0 controls (``\n``, ``\r``, ``\t``, others ``\xNN``), DEL and
#: the C1 controls (``\xNN``), the Unicode line and paragraph separators (``\u2028``, ``\u2029``), and
#: the backslash itself (``\\``), so an escaped line reads one way only.
_ESCAPES = {
    **{c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))},
    0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r", 0x5C: "\\\\", 0x2028: "\\u2028", 0x2029: "\\u2029",
}


def escape_controls(text: str) -> str:
    """``text`` with every control character escaped (:data:`_ESCAPES`): one line, whatever it held."""
    return text.translate(_ESCAPES)


class TextFormatter(logging.Formatter):
    """The text format: ``time level logger: message``, the message with :func:`escape_controls` applied
    (what a request sent cannot start a line of its own); a traceback follows on its own lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.message)
        return super().formatMessage(record)


class JSONFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, the
    request :data:`FIELDS` when present, and ``exception`` text when there is one; with ``pid`` also
    the process id (``serve --workers``)."""

    def __init__(self, pid: bool = False) -> None:
        super().__init__()
        self.pid = pid

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if self.pid:
            out["pid"] = record.process
        for key in FIELDS:
            if hasattr(record, key):
                out[key] = getattr(record, key)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, separators=(",", ":"))


def setup_logging(level: str = "info", fmt: str = "text", stream: TextIO | None = None, *,
                  pid: bool = False) -> None:
    """Configure the root logger: ``level`` (debug, info, warning, error) and ``fmt`` (text or json),
    writing to ``stream`` (default stderr); ``pid`` adds the process id to every line (``name[pid]:``
    in text, a ``pid`` key in JSON), for ``serve --workers``. Raises ``ValueError`` for an unknown format."""
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt == "json":
        handler.setFormatter(JSONFormatter(pid))
    elif fmt == "text":
        name = "%(name)s[%(process)d]" if pid else "%(name)s"
        handler.setFormatter(TextFormatter(f"%(asctime)s %(levelname)s {name}: %(message)s"))
    else:
        raise ValueError(f"unknown log format {fmt!r}: use text or json")
    handler.set_name("bootserver")
    root = logging.getLogger()
    for old in list(root.handlers):  # replace our own handler of an earlier call, keep anyone else's
        if old.get_name() == "bootserver":
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # aiohttp's own access log would repeat every request (with its query string): ours replaces it
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
