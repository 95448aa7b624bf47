"""Butane configs as a profile's real config: bootserver runs ``butane`` and serves its translation.

The real ``butane`` binary cannot be installed on these machines (no Debian or PyPI package), so these
tests put a STAND-IN on ``PATH``: ``tests/support/butane_standin.py``, which follows butane's documented command
line (input file or stdin, ``-o/--output``, ``-s/--strict``, ``-d/--files-dir``, ``-p/--pretty``,
``-r/--raw``; JSON on stdout; errors on stderr with exit status 1). See its docstring.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from support.forked_cli import run_forked_sync
from support.helpers import SCHEMAS, write_config
from support.services import service
from support.signing import fixed_signer

from bootserver.butane import ButaneError, is_butane, translate
from bootserver.config import parse_config
from bootserver.errors import ConfigError, UnavailableError

STANDIN = Path(__file__).parent / "support" / "butane_standin.py"

BUTANE = """\
variant: fcos
version: 1.5.0
passwd:
  users:
    - name: core
      ssh_authorized_keys: [ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE2Ee2E test]
storage:
  files:
    - path: /etc/motd
      contents:
        inline: hello from butane
    - path: /etc/e2e-local
      contents:
        local: local.txt
"""


@pytest.fixture
def butane_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``bin`` folder whose ``butane`` runs the stand-in, first on ``PATH``; returns the folder."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "butane"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return bin_dir


def butane_config(tmp_path: Path, name: str = "node.bu", text: str = BUTANE) -> Path:
    path = tmp_path / "cfg" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    (path.parent / "local.txt").write_text("embedded from --files-dir\n")
    return path


def config_doc(reference: Path, ignition: Path) -> dict:
    return {
        "server": {"base_url": "http://boot.example.net:8080"},
        "cache_dir": "cache", "state_dir": "state",
        "streams": {"r": {"metadata": str(reference / "rhcos-stream-4.16.json")}},
        "profiles": {"p": {"stream": "r", "mode": "live", "ignition": str(ignition), "ignition_version": "3.4.0"}},
        "nodes": {"n0": {"profile": "p"}},
    }


def standin(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(STANDIN), *args], input=stdin, capture_output=True, text=True,
                          timeout=60)


def test_the_standin_follows_butanes_command_line(tmp_path: Path) -> None:
    path = butane_config(tmp_path)
    from_file = standin("--strict", "--files-dir", str(path.parent), str(path))
    from_stdin = standin("-s", "-d", str(path.parent), stdin=BUTANE)
    assert from_file.returncode == from_stdin.returncode == 0, from_file.stderr + from_stdin.stderr
    assert json.loads(from_file.stdout) == json.loads(from_stdin.stdout)
    assert standin("-p", "-d", str(path.parent), "-o", str(tmp_path / "out.ign"), str(path)).stdout == ""
    assert json.loads((tmp_path / "out.ign").read_text()) == json.loads(from_file.stdout)
    no_dir = standin("--strict", stdin=BUTANE)
    assert no_dir.returncode == 1 and no_dir.stdout == ""
    assert "must be specified with -d/--files-dir" in no_dir.stderr
    bad = standin("--strict", "-d", str(path.parent), stdin=BUTANE + "bogus: 1\n")
    assert bad.returncode == 1 and bad.stdout == ""
    assert "warning at $.bogus, line 15 col 1: Unused key bogus" in bad.stderr
    assert standin("-d", str(path.parent), stdin=BUTANE + "bogus: 1\n").returncode == 0  # a warning only


def test_butane_files_are_recognised(tmp_path: Path) -> None:
    assert is_butane(tmp_path / "a.bu", b"{}")
    assert is_butane(tmp_path / "a.yaml", b"variant: fcos\nversion: 1.5.0\n")
    assert not is_butane(tmp_path / "a.ign", b'{"ignition": {"version": "3.2.0"}}')
    assert not is_butane(tmp_path / "a.yaml", b"ignition: {version: 3.2.0}\n")  # YAML, but no variant


def test_translation_is_butanes_and_valid_against_its_spec_schema(butane_path: Path, tmp_path: Path) -> None:
    path = butane_config(tmp_path)
    data = translate(path)
    assert data == standin("--strict", "--files-dir", str(path.parent), str(path)).stdout.encode()
    doc = json.loads(data)
    assert doc["ignition"]["version"] == "3.4.0"  # fcos 1.5.0
    jsonschema.validate(doc, json.loads((SCHEMAS / "ignition-schema-v3.4.json").read_text()))
    files = {f["path"]: f["contents"]["source"] for f in doc["storage"]["files"]}
    assert files["/etc/e2e-local"] == "data:,embedded%20from%20--files-dir%0A"  # --files-dir is the file's folder


async def test_butane_profile_serves_the_translation_and_follows_edits(butane_path: Path, reference: Path,
                                                                 tmp_path: Path) -> None:
    path = butane_config(tmp_path)
    svc = service(parse_config(config_doc(reference, path), "t.yaml", tmp_path), fixed_signer())
    served = (await svc.real_config("n0"))
    assert served == translate(path)
    merge = json.loads(await svc.stub("n0"))["ignition"]["config"]["merge"][0]
    assert merge["verification"]["hash"] == "sha512-" + hashlib.sha512(served).hexdigest()
    # The operator edits the Butane file: the next request serves and pins the new translation.
    path.write_text(BUTANE.replace("hello from butane", "hello again"))
    edited = (await svc.real_config("n0"))
    assert edited != served and b"hello%20again" in edited
    assert json.loads(await svc.stub("n0"))["ignition"]["config"]["merge"][0]["verification"]["hash"] == \
        "sha512-" + hashlib.sha512(edited).hexdigest()
    # ... into one butane refuses: 503 with butane's message (Ignition retries), not a stale config.
    path.write_text(BUTANE + "bogus: 1\n")
    with pytest.raises(UnavailableError, match=r"node n0: .*node\.bu: butane: warning at \$\.bogus"):
        (await svc.real_config("n0"))


def test_check_config_reports_butanes_own_message(butane_path: Path, reference: Path, tmp_path: Path) -> None:
    path = butane_config(tmp_path, text=BUTANE.replace("version: 1.5.0", "version: 9.9.9"))
    with pytest.raises(ConfigError) as e:
        parse_config(config_doc(reference, path), "t.yaml", tmp_path)
    assert str(e.value) == (f"t.yaml: profiles.p.ignition: {path}: butane: Error translating config: "
                            "No translator exists for variant fcos with version 9.9.9")


def test_openshift_variant_is_translated_raw(butane_path: Path, tmp_path: Path) -> None:
    text = ("variant: openshift\nversion: 4.16.0\nmetadata:\n  name: m\n  labels:\n"
            "    machineconfiguration.openshift.io/role: master\n")
    doc = json.loads(translate(butane_config(tmp_path, "m.yaml", text)))
    assert doc == {"ignition": {"version": "3.4.0"}}


def test_check_config_accepts_a_butane_profile(butane_path: Path, reference: Path, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "bootserver.yaml", config_doc(reference, butane_config(tmp_path)))
    p = run_forked_sync(["check-config", "--config", str(cfg)])
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"{cfg}: ok")


@pytest.mark.parametrize("command", [["check-config"], ["serve"]])
def test_without_butane_on_path_check_config_and_serve_exit_2(command: list[str], reference: Path,
                                                             tmp_path: Path) -> None:
    path = butane_config(tmp_path)
    cfg = write_config(tmp_path / "bootserver.yaml", {**config_doc(reference, path),
                                                      "server": {"base_url": "http://127.0.0.1:1",
                                                                 "listen": "127.0.0.1:1"}})
    env = {**os.environ, "PATH": str(tmp_path / "empty")}  # no butane anywhere
    p = run_forked_sync([*command, "--config", str(cfg)], env=env)
    assert p.returncode == 2, p.stderr
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].endswith(f"profiles.p.ignition: {path} is a Butane config: translating it needs the "
                             "`butane` binary on PATH (https://coreos.github.io/butane/getting-started/), "
                             "which was not found")


def test_butane_error_is_an_input_error() -> None:
    assert ButaneError("x").exit_code == 2


def test_a_translation_that_is_not_valid_ignition_is_refused(butane_path: Path, tmp_path: Path) -> None:
    # The stand-in copies what it does not translate; Ignition itself refuses a relative file path.
    path = butane_config(tmp_path, text="variant: fcos\nversion: 1.4.0\nstorage:\n  files:\n    - path: etc/motd\n")
    with pytest.raises(ButaneError, match=r"node\.bu: butane's translation is not a valid Ignition config: "
                                          r"storage\.files\[0\]\.path: .*absolute"):
        translate(path)
