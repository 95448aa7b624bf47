"""The one config builder of the tests: a config document with the defaults most tests share (one stream
from the reference metadata, an install-mode profile with openshift-install's pointer config, one node),
parsed (:func:`load`) or written (:func:`write`) with the files it names beside it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from bootserver.config import Config, parse_config
from support.helpers import REFERENCE, write_config

#: The stream of :func:`config_doc` and the reference metadata it reads (tests/data/SOURCES.md).
STREAM = "rhcos-4.16"
METADATA = REFERENCE / "rhcos-stream-4.16.json"
#: The real Ignition config of the default profile (openshift-install's ``master.ign`` pointer config).
POINTER_CONFIG = REFERENCE / "openshift-pointer-master.ign.json"
BASE_URL = "http://boot.example.net:8080"


def config_doc(*, profiles: dict[str, Any] | None = None, nodes: dict[str, Any] | None = None,
               server: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    """A config document: ``server`` (``base_url`` :data:`BASE_URL` unless given) with ``cache_dir``
    ``cache`` and ``state_dir`` ``state`` (relative to the config's folder), the stream :data:`STREAM`
    (:data:`METADATA`), ``profiles`` (default: ``master``, install to ``/dev/sda`` with ``master.ign``),
    ``nodes`` (default: ``master-0`` of profile ``master``) and any other top-level key in ``top``
    (which may also replace ``streams``, ``cache_dir`` or ``state_dir``)."""
    return {
        "server": {"base_url": BASE_URL, **(server or {})},
        "cache_dir": "cache", "state_dir": "state",
        "streams": {STREAM: {"metadata": str(METADATA)}},
        "profiles": profiles if profiles is not None else {"master": master_profile()},
        "nodes": nodes if nodes is not None else {"master-0": {"profile": "master"}},
    } | top


def master_profile(**settings: Any) -> dict[str, Any]:
    """An install-mode profile of :data:`STREAM` to ``/dev/sda`` with ``master.ign``, plus ``settings``."""
    return {"stream": STREAM, "install_dev": "/dev/sda", "ignition": "master.ign", **settings}


def _pointer_config(base_dir: Path) -> None:
    """Put :data:`POINTER_CONFIG` at ``base_dir/master.ign`` (where the default profile names it)."""
    target = base_dir / "master.ign"
    if not target.exists():
        shutil.copy(POINTER_CONFIG, target)


def load(doc: dict[str, Any], base_dir: Path, source: str = "t.yaml") -> Config:
    """``doc`` parsed as config file ``source`` of folder ``base_dir``, with ``base_dir/master.ign``."""
    _pointer_config(base_dir)
    return parse_config(doc, source, base_dir)


def write(doc: dict[str, Any], base_dir: Path) -> Path:
    """``doc`` written to ``base_dir/bootserver.yaml`` with ``base_dir/master.ign``; returns its path."""
    _pointer_config(base_dir)
    return write_config(base_dir / "bootserver.yaml", doc)
