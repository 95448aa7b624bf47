"""The fleet the automation clients' tests drive: one real ``bootserver serve`` on 127.0.0.1 for the whole
session (its admin listener serves the API), with two profiles and a token of scopes ``write`` and
``actions`` made by ``bootserver tokens create``."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.automation import Fleet, install_collection
from support.configs import STREAM, config_doc, master_profile, write
from support.helpers import BOOTSERVER, free_port
from support.server import serving

from bootserver.config import load_config


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """A running server with profiles ``worker`` (install) and ``live`` and no nodes, and a token."""
    base = tmp_path_factory.mktemp("fleet")
    port = free_port()
    doc = config_doc(server={"listen": f"127.0.0.1:{port}", "base_url": f"http://127.0.0.1:{port}"},
                     profiles={"worker": master_profile(), "live": {"stream": STREAM, "mode": "live"}}, nodes={})
    config = write(doc, base)
    token = subprocess.run([*BOOTSERVER, "tokens", "create", "clients", "--scope", "write", "--scope", "actions",
                            "--config", str(config)], capture_output=True, text=True, check=True,
                           timeout=60).stdout.strip()
    admin = "http://" + load_config(config).server.admin_listen
    with serving(["--config", str(config)], f"http://127.0.0.1:{port}/healthz", base / "serve.log"):
        yield Fleet(url=admin, token=token, boot_url=f"http://127.0.0.1:{port}", config=config, log=base / "serve.log")


@pytest.fixture(scope="session")
def collections(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The collection built and installed from its tarball as a user installs it: the folder to give
    ``ANSIBLE_COLLECTIONS_PATH``."""
    return install_collection(tmp_path_factory.mktemp("collection"))
