"""Shared by the tests (moved out of tests/http/test_trust.py, which other test modules imported)."""

from __future__ import annotations

from pathlib import Path

from support.helpers import write_config


def trust_config(tmp_path: Path, reference: Path, server: dict) -> Path:
    return write_config(tmp_path / "bootserver.yaml", {
        "server": server, "cache_dir": str(tmp_path / "cache"), "state_dir": str(tmp_path / "state"),
        "streams": {"r": {"metadata": str(reference / "rhcos-stream-4.16.json")}},
        "profiles": {"live": {"stream": "r", "mode": "live"}}, "nodes": {"live-0": {"profile": "live"}}})
