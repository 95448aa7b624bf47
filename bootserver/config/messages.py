"""Config error messages: one pydantic error (an item of ``ValidationError.errors()``) into a key path and
a message in bootserver's wording.

Built on pydantic's structured error fields only (``type``, ``loc``, ``ctx``, ``input``; the error types
of pydantic-core, https://docs.pydantic.dev/latest/errors/validation_errors/), never on its English
``msg`` text, so a pydantic upgrade cannot change our messages.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

from ..values import NAME_RULE
from .schema import Document

#: What a ``<kind>_type`` error expected, in words.
_EXPECTED = {"string_type": "a string", "dict_type": "a mapping", "model_type": "a mapping",
             "model_attributes_type": "a mapping", "tuple_type": "a list", "list_type": "a list",
             "bool_type": "true or false", "int_type": "an integer", "float_type": "a number"}

#: Messages of constraint errors, formatted with the error's ``ctx``.
_CONSTRAINTS = {
    "greater_than": "input should be greater than {gt}",
    "greater_than_equal": "input should be greater than or equal to {ge}",
    "less_than": "input should be less than {lt}",
    "less_than_equal": "input should be less than or equal to {le}",
    "finite_number": "input should be a finite number",
    "string_too_short": "should have at least {min_length} characters",
    "string_too_long": "should have at most {max_length} characters",
    "too_short": "should have at least {min_length} items",
    "too_long": "should have at most {max_length} items",
    "int_from_float": "input should be a whole number",
}


def safe_text(value: str) -> str:
    """``value`` if it is printable on one line, else its Python literal (``'a\\nb'``), so an error line
    stays one line and shows no raw control character."""
    return value if value.isprintable() else repr(value)


def keypath(loc: tuple[Any, ...]) -> str:
    """``("nodes", "m0", "metal", "tags", 1)`` -> ``nodes.m0.metal.tags[1]`` (keys with control
    characters written as :func:`safe_text` literals)."""
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else f".{safe_text(p)}" if out else safe_text(str(p))
    return out


def known_keys(root: type[BaseModel], loc: tuple[Any, ...]) -> tuple[str, ...]:
    """The keys of the mapping at ``loc`` (a key path into the model ``root``), ``()`` if not a model."""
    node: Any = root
    for part in loc:
        if isinstance(node, type) and issubclass(node, BaseModel) and part in node.model_fields:
            node = node.model_fields[part].annotation
            if get_origin(node) in (Union, types.UnionType):  # X | None
                node = next((a for a in get_args(node) if a is not type(None)), None)
        elif get_origin(node) is dict:
            node = get_args(node)[1]
        else:
            return ()
    return tuple(node.model_fields) if isinstance(node, type) and issubclass(node, BaseModel) else ()


def _is_marker(part: Any) -> bool:
    """Parts of a pydantic ``loc`` that name a validator or union member, not a key. Union members are
    tagged ``<...>`` (:data:`~bootserver.config.equinix_settings.FACILITY_TAGS`,
    ``bootserver.nmstate.NetworkSetting``), which no key can be (names are letters, digits, ``.``, ``_``, ``-``)."""
    return isinstance(part, str) and part.startswith(("function-", "literal[", "<"))


def describe_error(err: Mapping[str, Any], root: type[BaseModel] | None = None) -> tuple[str, str]:
    """Turn one pydantic error into ``(key path, message)`` in our wording:
    ``("nodes.m0.metal.tags[1]", "expected a string, got int 1")``.

    ``root`` is the model validated (default: the config document), for the "known keys" of an unknown
    key. Only the error's ``type``, ``loc``, ``ctx`` and ``input`` are read.
    """
    if root is None:
        root = Document
    loc = tuple(p for p in err["loc"] if not _is_marker(p))
    kind = err["type"]
    ctx = err.get("ctx") or {}
    value = err.get("input")
    # dict keys that fail their pattern carry a "[key]" marker in loc
    path = keypath(tuple(p for p in loc if p != "[key]"))
    if kind == "extra_forbidden":
        known = known_keys(root, loc[:-1])
        return keypath(loc), f"unknown key (known: {', '.join(known)})" if known else "unknown key"
    if kind == "missing":
        return keypath(loc), "required key is missing"
    if kind == "value_error":
        return path, str(ctx.get("error", ""))
    if kind in _EXPECTED or kind.endswith("_type"):
        expected = _EXPECTED.get(kind, kind.removesuffix("_type"))
        return path, f"expected {expected}, got {type(value).__name__} {value!r}"
    if kind == "literal_error":
        return path, f"input should be {ctx.get('expected')}, got {value!r}"
    if kind == "string_pattern_mismatch":
        return path, NAME_RULE
    if kind in _CONSTRAINTS:
        return path, _CONSTRAINTS[kind].format(**ctx)
    return path, f"invalid value ({kind}): {value!r}"
