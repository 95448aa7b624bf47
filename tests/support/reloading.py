"""Shared by the tests (moved out of tests/test_reload.py, which other test modules imported)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.helpers import free_port, write_config

MAC = "52:54:00:00:00:01"


def main_config(tmp_path: Path, reference: Path, **extra: Any) -> Path:
    """A live profile on the RHCOS 4.16 stream file, node ``steady`` selectable by MAC, and
    ``include: nodes.d/*.yaml``."""
    doc: dict[str, Any] = {
        "server": {"listen": f"127.0.0.1:{free_port()}"},
        "cache_dir": "cache", "state_dir": "state",
        "streams": {"rhcos": {"metadata": str(reference / "rhcos-stream-4.16.json")}},
        "profiles": {"live": {"stream": "rhcos", "mode": "live"}},
        "nodes": {"steady": {"profile": "live", "mac": [MAC], "selectable": True}},
        "include": ["nodes.d/*.yaml"],
    }
    doc.update(extra)
    (tmp_path / "nodes.d").mkdir(exist_ok=True)
    return write_config(tmp_path / "bootserver.yaml", doc)


def add_node(tmp_path: Path, name: str, mac: str, file: str | None = None, **extra: Any) -> Path:
    path = tmp_path / "nodes.d" / (file or f"{name}.yaml")
    return write_config(path, {"nodes": {name: {"profile": "live", "mac": [mac], "selectable": True, **extra}}})
