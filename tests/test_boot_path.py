"""End to end through the real command line: a fake upstream on 127.0.0.1 serves the artifacts named
in a copy of the real rhcos-stream-4.16.json (locations moved to it, sha256 set to the bytes served)
-> ``bootserver sync-images`` -> ``bootserver serve`` -> a device's view: fetch the node's script, every
URL in it, the stub, and the config the stub merges, checking every hash on the way."""

from __future__ import annotations

import hashlib
import json
import re

import aiohttp
from support.helpers import run_cli
from support.server import ServerProcess


async def test_sync_serve_and_boot_like_a_device(boot_setup, upstream) -> None:
    setup = boot_setup(200_000, {"master-0": {"profile": "master", "mac": "52:54:00:12:34:56",
                                              "addresses": ["127.0.0.1"]}})
    config, port, master_ign, doc, files = setup.config, setup.port, setup.master_ign, setup.doc, setup.files

    rc, out, err = await run_cli("sync-images", "--config", str(config))
    assert rc == 0, err
    assert out.count("sha256 ok") == 3
    rc, out, err = await run_cli("sync-images", "--config", str(config))
    assert rc == 0 and out.count("already cached") == 3, out
    assert all(upstream.gets[p] == 1 for p in files)

    rc, rendered, err = await run_cli("render", "ipxe", "master-0", "--config", str(config))
    assert rc == 0, err
    rc, rendered_stub, err = await run_cli("render", "ignition", "master-0", "--config", str(config))
    assert rc == 0, err

    server = ServerProcess(config, port)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        try:
            await server.start(http)
            async with http.get(f"{server.url}/boot.ipxe?mac=52%3A54%3A00%3A12%3A34%3A56") as r:
                assert r.status == 200
                script = await r.text()
            assert script == rendered
            kernel_line = next(line for line in script.splitlines() if line.startswith("kernel "))
            initrd_line = next(line for line in script.splitlines() if line.startswith("initrd "))
            kernel_url = kernel_line.split()[1]
            initramfs_url = initrd_line.split()[3]
            kargs = dict(w.split("=", 1) for w in kernel_line.split()[2:] if "=" in w)
            expected = {a["sha256"] for a in
                        doc["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["pxe"].values()}
            got = set()
            for url in (kernel_url, initramfs_url, kargs["coreos.live.rootfs_url"]):
                async with http.get(url) as r:
                    assert r.status == 200, url
                    body = await r.read()
                    digest = hashlib.sha256(body).hexdigest()
                    assert r.headers["ETag"] == f'"{digest}"'
                    got.add(digest)
            assert got == expected

            assert kargs["coreos.inst.platform_id"] == "metal"  # a node with no provider (issue 37)
            async with http.get(kargs["coreos.inst.ignition_url"]) as r:
                assert r.status == 200
                assert r.content_type == "application/vnd.coreos.ignition+json"
                stub_bytes = await r.read()
            assert stub_bytes.decode() == rendered_stub
            merge = json.loads(stub_bytes)["ignition"]["config"]["merge"][0]
            async with http.get(merge["source"]) as r:
                assert r.status == 200
                real = await r.read()
            assert real == master_ign.read_bytes()
            assert merge["verification"]["hash"] == "sha512-" + hashlib.sha512(real).hexdigest()
            assert re.match(r"^https://api-int\.", json.loads(real)["ignition"]["config"]["merge"][0]["source"])
        finally:
            await server.stop()
