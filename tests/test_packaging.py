"""The wheel ships templates/ and ignition/, and bootserver finds them there (not only in a checkout)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest
from support.server import serving

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q",
                    "-w", str(out), str(REPO)], check=True, timeout=300, capture_output=True)
    return next(out.glob("bootserver-*.whl"))


def test_wheel_contains_templates_and_fragments(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for path in REPO.joinpath("templates").rglob("*"):  # the live page's templates/page/ and static/ too
        if path.is_file():
            assert f"bootserver/_data/templates/{path.relative_to(REPO / 'templates')}" in names
    for path in REPO.joinpath("ignition").rglob("*"):
        if path.is_file():
            assert f"bootserver/_data/ignition/{path.relative_to(REPO / 'ignition')}" in names
    assert any(n.endswith("entry_points.txt") for n in names)


def test_installed_wheel_renders_from_its_own_data(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = ("from bootserver.resources import data_dir; from bootserver.ignition import fragment; "
            "print(data_dir('templates')); print(fragment('stub')['ignition']['version'])")
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    templates, version = proc.stdout.split()
    assert Path(templates) == site / "bootserver" / "_data" / "templates"
    assert version == "3.1.0"


def test_serve_without_any_config_runs_the_embedded_default(tmp_path: Path) -> None:
    """`bootserver serve` with no config listens on 127.0.0.1:8080 and caches under the user's dirs."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", 8080))
        except OSError:
            pytest.skip("127.0.0.1:8080 is in use on this machine")
    env = {k: v for k, v in os.environ.items() if k != "BOOTSERVER_CONFIG"}
    env.update(HOME=str(tmp_path), XDG_CACHE_HOME=str(tmp_path / "cache"), XDG_STATE_HOME=str(tmp_path / "state"))
    log = tmp_path / "serve.log"
    with (serving([], "http://127.0.0.1:8080/healthz", log, env=env, cwd=tmp_path, deadline_s=20.0),
          urllib.request.urlopen("http://127.0.0.1:8080/healthz", timeout=2) as r):
        assert r.read() == b"ok\n"
    assert str(tmp_path / "cache") in log.read_text()  # the start-up line names the per-user cache directory
