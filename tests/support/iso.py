"""Shared by the tests (moved out of tests/images/test_iso_serve.py, which other test modules imported)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.configs import STREAM, config_doc
from support.networks import STATIC


def doc(reference: Path, network: Any = STATIC) -> dict[str, Any]:
    """Node ``master-0`` (profile ``metal``, no real config) with ``network``."""
    return config_doc(profiles={"metal": {"stream": STREAM, "install_dev": "/dev/sda"}},
                      nodes={"master-0": {"profile": "metal", "mac": "52:54:00:00:00:01", "network": network}})
