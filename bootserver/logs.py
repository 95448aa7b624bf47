"""Logging set-up of the command line: ``--log-level`` and ``--log-format text|json``.

Request lines come from logger ``bootserver.access`` (see :mod:`bootserver.http.accesslog`) with the fields
``remote``, ``method``, ``path`` (never the query string: URLs will carry signatures), ``route``,
``node``, ``status``, ``bytes`` and ``duration`` (seconds) as record attributes; the text format shows
them in the message, the JSON format as keys of one object per line.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import TextIO

#: Record attributes copied into JSON lines when present.
FIELDS = ("remote", "method", "path", "route", "node", "status", "bytes", "duration")


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
        handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s {name}: %(message)s"))
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
