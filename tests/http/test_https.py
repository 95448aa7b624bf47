"""HTTPS end to end: `bootserver tls init`, then a real `bootserver serve` subprocess on 127.0.0.1 with
a plain and an HTTPS listener; a client that trusts only the generated CA follows chain URL -> script
-> stub -> real config; the server's own log (stderr) never shows a signature or the config."""

from __future__ import annotations

import base64
import json
import ssl
from pathlib import Path

import aiohttp
import pytest
from support.helpers import free_port, run_cli, write_config
from support.server import ServerProcess

SECRET = "PULL-SECRET-e2e-77c1d0"


async def test_https_end_to_end_with_the_generated_ca(reference: Path, tmp_path: Path) -> None:
    pull = {"path": "/etc/pull", "contents": {"source": "data:," + SECRET}}
    (tmp_path / "bootstrap.ign").write_text(json.dumps({"ignition": {"version": "3.2.0"},
                                                        "storage": {"files": [pull]}}))
    port, tport = free_port(), free_port()
    config = write_config(tmp_path / "bootserver.yaml", {
        "server": {"listen": f"127.0.0.1:{port}", "base_url": f"http://127.0.0.1:{port}",
                   "tls": {"listen": f"127.0.0.1:{tport}"}},
        "cache_dir": "cache", "state_dir": "state",
        "streams": {"rhcos-4.16": {"metadata": str(reference / "rhcos-stream-4.16.json")}},
        "profiles": {"p": {"stream": "rhcos-4.16", "install_dev": "/dev/sda", "ignition": "bootstrap.ign"}},
        "nodes": {"n0": {"profile": "p"}},
    })
    rc, out, err = await run_cli("tls", "init", "--config", str(config), "--name", "boot.example.net")
    assert rc == 0, err
    tls = tmp_path / "state" / "tls"
    assert all(oct((tls / f).stat().st_mode & 0o777) == "0o600" for f in ("ca.key", "server.key"))
    rc, _, err = await run_cli("tls", "init", "--config", str(config))
    assert rc == 2 and "--force" in err
    rc, out, err = await run_cli("url", "n0", "--expires", "2h", "--config", str(config))
    assert rc == 0, err
    chain = out.splitlines()[0]
    assert chain.startswith(f"http://127.0.0.1:{port}/ipxe/n0?exp=")
    assert f"#!ipxe\nchain --autofree {chain}\n" in out

    only_our_ca = ssl.create_default_context(cafile=str(tls / "ca.crt"))
    server = ServerProcess(config, port)
    stderr = b""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        try:
            await server.start(http)
            async with http.get(chain) as r:
                assert r.status == 200
                script = await r.text()
            stub_url = next(w.split("=", 1)[1] for w in script.split()
                            if w.startswith("coreos.inst.ignition_url="))
            async with http.get(stub_url) as r:
                assert r.status == 200
                stub = json.loads(await r.read())
            ca = stub["ignition"]["security"]["tls"]["certificateAuthorities"][0]["source"]
            assert base64.b64decode(ca.split(",", 1)[1]) == (tls / "ca.crt").read_bytes()
            source = stub["ignition"]["config"]["merge"][0]["source"]
            assert source.startswith(f"https://127.0.0.1:{tport}/ignition/n0/config?exp=")
            async with http.get(source, ssl=only_our_ca) as r:
                assert r.status == 200
                body = await r.read()
            assert body == (tmp_path / "bootstrap.ign").read_bytes()
            # the same signed URL on the plain listener is refused
            plain = source.replace(f"https://127.0.0.1:{tport}", f"http://127.0.0.1:{port}")
            async with http.get(plain) as r:
                assert r.status == 403
            # a client with only the system CAs does not trust the server
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                async with http.get(source, ssl=ssl.create_default_context()) as r:
                    pass
            # HTTPS also serves scripts, and refuses unsigned configs
            async with http.get(f"https://127.0.0.1:{tport}/ignition/n0/config", ssl=only_our_ca) as r:
                assert r.status == 403
        finally:
            await server.stop()
            if server.proc is not None and server.proc.stderr is not None:
                stderr = await server.proc.stderr.read()
    log = stderr.decode()
    assert "GET /ignition/n0/config 200" in log and "sig=" not in log
    for url in (chain, stub_url, source):
        assert url.split("sig=")[1] not in log
    assert SECRET not in log
