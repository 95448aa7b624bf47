"""Shared by the tests (moved out of tests/state/test_state.py, which other test modules imported)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.configs import config_doc, load
from support.pgcluster import BINDIR, PgCluster

db_names = itertools.count()


needs_pg = pytest.mark.skipif(BINDIR is None, reason="PostgreSQL is not installed (Debian package postgresql)")


@pytest.fixture(scope="session")
def pg() -> Iterator[PgCluster]:
    cluster = PgCluster()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.destroy()


def make_config(tmp_path: Path, state_store: str | dict[str, str] | None, **top: Any):
    """Nodes ``master-0`` and ``master-1`` in the store ``state_store`` (``None``: sqlite in state_dir)."""
    doc = config_doc(server={"base_url": "http://127.0.0.1:8080"},
                     nodes={"master-0": {"profile": "master"}, "master-1": {"profile": "master"}}) | top
    if state_store is not None:
        doc["state_store"] = state_store
    return load(doc, tmp_path)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=needs_pg)])
def backend(request: pytest.FixtureRequest, tmp_path: Path, reference: Path):
    """A function making configs of one backend that share one store (one state_dir, or one database)."""
    url = None
    if request.param == "postgresql":
        url = request.getfixturevalue("pg").create_database(f"t{next(db_names)}")

    def config(**top: Any):
        return make_config(tmp_path, url, **top)

    config.name = request.param  # type: ignore[attr-defined]
    return config
