"""The fleet API tested as a client would (issue 49): schemathesis (``st run``) against a real ``bootserver
serve`` on loopback with a token of scopes ``write`` and ``actions``, from the OpenAPI document the server
serves: every default check (no 5xx, status codes, content types, headers and bodies conforming to the
document, negative data refused, positive data accepted but for what tests/api/schemathesis.toml names,
auth not ignored, unsupported methods 405), the coverage and fuzzing phases bounded in examples (a fixed
seed: the same requests on every run), and the stateful phase over the document's links (create -> read
-> patch -> delete, adopt -> read...). The watch (an endless event stream) is left out here;
tests/api/test_actions.py reads it."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from support.configs import config_doc, load
from support.discovery import report_path
from support.helpers import cli, free_port, write_config
from support.server import serving

ST = Path(sys.executable).with_name("st")
SETTINGS = Path(__file__).with_name("schemathesis.toml")


def test_schemathesis_finds_nothing_against_a_real_serve(tmp_path: Path, capsys: Any) -> None:
    port = free_port()
    doc = config_doc(server={"listen": f"127.0.0.1:{port}", "admin": {"listen": f"127.0.0.1:{port + 1}"},
                             "discovery": True},
                     nodes={"master-0": {"profile": "master", "mac": ["52:54:00:00:00:01"]}})
    load(doc, tmp_path)  # the profile's master.ign beside the config
    config = write_config(tmp_path / "bootserver.yaml", doc)
    rc, token, err = cli(capsys, "tokens", "create", "schemathesis", "--scope", "write", "--scope", "actions",
                         "--config", str(config))
    assert rc == 0, err
    base, admin = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"
    log = tmp_path / "serve.log"
    with serving(["--config", str(config)], f"{base}/healthz", log):
        with urllib.request.urlopen(base + report_path(), timeout=10) as r:  # a machine to adopt
            assert r.status == 200
        # one worker: two crash now and then in Python 3.11's ast.parse ("AST constructor recursion depth
        # mismatch", a CPython bug of parsing in two threads at once)
        done = subprocess.run(
            [str(ST), "--config-file", str(SETTINGS), "run", f"{admin}/api/v1/openapi.json",
             "-H", f"Authorization: Bearer {token.strip()}", "--exclude-operation-id", "watch",
             "--max-examples", "8", "--seed", "49", "--request-timeout", "10", "--workers", "1"],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300, check=False,
            cwd=tmp_path)  # its cache (.schemathesis/) goes there
    out = done.stdout
    assert done.returncode == 0, out[out.find("FAILURES"):][:6000] + "\n...\n" + out[-1500:] + done.stderr[-3000:]
    assert "Stateful" in done.stdout and " passed" in done.stdout, done.stdout
    assert "Traceback" not in log.read_text(), log.read_text()[-5000:]
