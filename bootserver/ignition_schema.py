"""Check an Ignition config against the official JSON Schema of its own spec version.

The schemas are the coreos/ignition ``config/v3_X/schema/ignition.json`` files (JSON Schema draft-04),
shipped unmodified in ``ignition/schema/ignition-schema-v3.X.json`` (origins in
``ignition/schema/SOURCES.md``) and read with the ``jsonschema`` library. On top of the schema, one rule
of Ignition's own validation that the schema cannot express is checked: the ``path`` of every
``storage.files``, ``storage.directories`` and ``storage.links`` entry is absolute (Ignition refuses
the config otherwise: "path not absolute").

Use :func:`validate` for a parsed config, :func:`validate_bytes` for a file's bytes.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jsonschema

from .resources import data_dir

#: The Ignition spec versions whose schema ships with bootserver (Ignition config spec 3.1.0-3.5.0).
SPEC_VERSIONS = ("3.1.0", "3.2.0", "3.3.0", "3.4.0", "3.5.0")


class IgnitionSchemaError(ValueError):
    """An Ignition config is not valid for its spec. ``path`` is the JSON path at fault (dotted, with
    ``[i]`` for list items; ``""`` for the whole document), ``message`` what is wrong there."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)


@functools.cache
def _validator(version: str) -> jsonschema.Draft4Validator:
    import jsonschema  # on first use: a command that checks no Ignition config starts without it

    major, minor, _ = version.split(".")
    schema = json.loads((data_dir("ignition") / "schema" / f"ignition-schema-v{major}.{minor}.json").read_text())
    return jsonschema.Draft4Validator(schema)


def _jsonpath(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}" if out else str(p)
    return out


def spec_version(config: Any) -> str:
    """The ``ignition.version`` of a parsed config, if it is one of :data:`SPEC_VERSIONS`.

    Raises :class:`IgnitionSchemaError` for a config that is not a JSON object with an
    ``ignition.version`` string, or whose version has no shipped schema (e.g. ``3.9.0``, spec 2.x).
    """
    ignition = config.get("ignition") if isinstance(config, dict) else None
    version = ignition.get("version") if isinstance(ignition, dict) else None
    if not isinstance(version, str):
        raise IgnitionSchemaError("ignition.version", "missing: not an Ignition config")
    if version not in SPEC_VERSIONS:
        raise IgnitionSchemaError("ignition.version",
                                  f"unknown Ignition spec version {version!r} (known: {', '.join(SPEC_VERSIONS)})")
    return version


def validate(config: Any) -> str:
    """Check a parsed Ignition config (a ``dict`` from ``json.loads``) against its spec's official
    schema and the absolute-path rule; return its spec version (e.g. ``"3.2.0"``).

    Raises :class:`IgnitionSchemaError` naming the JSON path of the first problem (the one
    ``jsonschema.exceptions.best_match`` picks as most relevant).
    """
    import jsonschema.exceptions  # loaded by _validator already

    version = spec_version(config)
    error = jsonschema.exceptions.best_match(_validator(version).iter_errors(config))
    if error is not None:
        raise IgnitionSchemaError(_jsonpath(error.absolute_path), error.message)
    storage = config.get("storage") or {}
    for section in ("files", "directories", "links"):
        for i, entry in enumerate(storage.get(section) or ()):
            path = entry.get("path")
            if isinstance(path, str) and not path.startswith("/"):
                raise IgnitionSchemaError(f"storage.{section}[{i}].path", f"path not absolute: {path!r}")
    return version


def validate_bytes(data: bytes) -> str:
    """Parse ``data`` as JSON (UTF-8) and :func:`validate` it; return the spec version.

    Raises :class:`IgnitionSchemaError` (path ``""``) for bytes that are not a JSON document.
    """
    try:
        config = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise IgnitionSchemaError("", f"not JSON: {e}") from None
    return validate(config)
