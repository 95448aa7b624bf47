"""docs/config.md documents every config key (walked from the pydantic models in bootserver.config)
and nothing else; the docs the README points to exist."""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path

from pydantic import BaseModel

from bootserver.config import Document

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _unwrap(annotation: object) -> object:
    """``X | None`` -> ``X``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def key_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every key path of ``model``: ``server.listen``, ``profiles.<name>.mode``, ... (parents included)."""
    paths = set()
    for name, field in model.model_fields.items():
        path = prefix + name
        paths.add(path)
        ann = _unwrap(field.annotation)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            paths |= key_paths(ann, path + ".")
        elif typing.get_origin(ann) is dict:
            value = typing.get_args(ann)[1]
            if isinstance(value, type) and issubclass(value, BaseModel):
                paths.add(path + ".<name>")
                paths |= key_paths(value, path + ".<name>.")
    return paths


def documented_paths() -> set[str]:
    """The key paths in the first column of docs/config.md's tables."""
    text = (DOCS / "config.md").read_text()
    return set(re.findall(r"^\| `([a-z0-9_<>.]+)` \|", text, flags=re.MULTILINE))


def test_config_reference_documents_every_key_and_only_real_keys() -> None:
    model = key_paths(Document)
    assert "profiles.<name>.boot_once" in model and "server.tls.cert" in model
    assert {"metal.tag", "profiles.<name>.metal.plan", "nodes.<name>.metal.always_pxe"} <= model
    documented = documented_paths()
    assert sorted(model - documented) == [], "keys missing from docs/config.md"
    assert sorted(documented - model) == [], "docs/config.md documents keys that do not exist"


def test_docs_exist() -> None:
    for name in ("config.md", "openshift.md", "on-premises.md", "troubleshooting.md"):
        assert (DOCS / name).is_file(), name
