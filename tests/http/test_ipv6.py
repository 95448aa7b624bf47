"""A server on IPv4 and IPv6 at once (``server.listen`` and ``server.base_url`` as lists, one per address
family, and a facility's ``base_url`` too): a machine is handed URLs in the family it asked from, a DHCP
node asking over IPv6 boots with ``ip=dhcp6`` (``bootserver render --family 6`` prints the same), and a
signed URL is valid on either base URL. The real ``bootserver serve`` on 127.0.0.1
and ::1 (the loopback of both families)."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest
import yaml
from support.configs import config_doc, load
from support.helpers import run_cli
from support.server import ServerProcess

from bootserver.config import parse_config
from bootserver.errors import ConfigError
from bootserver.inventory import inventory
from bootserver.urls import Urls


def _server(server: dict) -> object:
    return parse_config({"server": server}, "bootserver.yaml", Path(".")).server


def test_listen_and_base_url_take_one_value_or_a_list() -> None:
    one = _server({"listen": "0.0.0.0:8080", "base_url": "http://192.0.2.1:8080"})
    assert one.listen == ("0.0.0.0:8080",) and one.base_url == ("http://192.0.2.1:8080",)
    both = _server({"listen": ["0.0.0.0:8080", "[::]:8080"],
                    "base_url": ["http://192.0.2.1:8080", "http://[2001:db8::1]:8080"]})
    assert both.base_url_for(4) == "http://192.0.2.1:8080"
    assert both.base_url_for(6) == "http://[2001:db8::1]:8080"
    assert both.base_url_for(None) == both.effective_base_url == "http://192.0.2.1:8080"
    assert both.admin_listen == "127.0.0.1:8081"
    named = _server({"base_url": ["http://boot.example:8080", "http://[2001:db8::1]:8080"]})
    assert named.base_url_for(4) == "http://boot.example:8080"
    assert named.base_url_for(6) == "http://[2001:db8::1]:8080"
    # without base_url: one per listener, in order
    derived = _server({"listen": ["192.0.2.1:8080", "[2001:db8::1]:8080"]})
    assert derived.effective_base_urls == ("http://192.0.2.1:8080", "http://[2001:db8::1]:8080")
    assert derived.base_url_for(6) == "http://[2001:db8::1]:8080"


@pytest.mark.parametrize("server,message", [
    ({"base_url": ["http://192.0.2.1:8080", "http://192.0.2.2:8080"]},
     "server.base_url: one base URL per address family: http://192.0.2.1:8080 and http://192.0.2.2:8080 are "
     "both IPv4"),
    ({"base_url": ["http://a.example:8080", "http://b.example:8080"]},
     "server.base_url: one base URL per address family: http://a.example:8080 and http://b.example:8080 are "
     "both host names (a name is either family)"),
    ({"listen": ["0.0.0.0:8080", "0.0.0.0:8080"]}, "server.listen: 0.0.0.0:8080 is listed twice"),
    ({"listen": []}, "server.listen: should have at least 1 items"),
])
def test_bad_lists_are_refused_naming_the_key(server: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"server": server}, "bootserver.yaml", Path("."))
    assert str(info.value).startswith(f"bootserver.yaml: {message}"), str(info.value)


def test_a_facility_cache_has_a_base_url_per_family(tmp_path: Path) -> None:
    doc = config_doc(server={"base_url": ["http://192.0.2.1:8080", "http://[2001:db8::1]:8080"]},
                     nodes={"master-0": {"profile": "master", "facility": "da11"}},
                     facilities={"da11": {"base_url": ["http://198.51.100.7:8080", "http://[2001:db8:da11::7]:8080"]}})
    config = load(doc, tmp_path)
    signer = lambda: None  # noqa: E731 - artifact URLs are not signed
    for family, base in ((4, "http://198.51.100.7:8080"), (6, "http://[2001:db8:da11::7]:8080"),
                         (None, "http://198.51.100.7:8080")):
        urls = Urls(config, signer, family=family)  # type: ignore[arg-type]
        assert urls.artifact_base(inventory(config)["master-0"]) == base
    # one URL as before; a host name serves either family
    doc["facilities"]["da11"]["base_url"] = "http://cache.da11.example:8080"
    config6 = load(doc, tmp_path)
    urls6 = Urls(config6, signer, family=6)  # type: ignore[arg-type]
    assert urls6.artifact_base(inventory(config6)["master-0"]) == "http://cache.da11.example:8080"
    doc["facilities"]["da11"]["base_url"] = ["http://198.51.100.7:8080", "http://198.51.100.8:8080"]
    with pytest.raises(ConfigError) as info:
        load(doc, tmp_path)
    assert str(info.value).startswith("t.yaml: facilities.da11.base_url: one base URL per address family: "
                                      "http://198.51.100.7:8080 and http://198.51.100.8:8080 are both IPv4"), info.value


async def test_a_machine_gets_urls_in_the_family_it_asked_from(boot_setup) -> None:
    setup = boot_setup(50_000, {"master-0": {"profile": "master", "mac": "52:54:00:12:34:56",
                                             "addresses": ["127.0.0.1", "::1"]}})
    port = setup.port
    doc = yaml.safe_load(setup.config.read_text())
    v4, v6 = f"http://127.0.0.1:{port}", f"http://[::1]:{port}"
    doc["server"] = {"listen": [f"127.0.0.1:{port}", f"[::1]:{port}"], "base_url": [v4, v6]}
    setup.config.write_text(yaml.safe_dump(doc, sort_keys=False))
    rc, _, err = await run_cli("sync-images", "--config", str(setup.config))
    assert rc == 0, err

    server = ServerProcess(setup.config, port)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        try:
            await server.start(http)
            scripts = {}
            for base in (v4, v6):
                async with http.get(f"{base}/boot.ipxe?mac=52:54:00:12:34:56") as r:
                    assert r.status == 200
                    scripts[base] = await r.text()
            kernel4, kernel6 = (next(line for line in scripts[b].splitlines() if line.startswith("kernel "))
                                .split(" || ")[0] for b in (v4, v6))
            urls4 = [w.split("=", 1)[-1] for w in kernel4.split() if "http" in w]
            urls6 = [w.split("=", 1)[-1] for w in kernel6.split() if "http" in w]
            assert urls4 and all(u.startswith(v4 + "/") for u in urls4), kernel4
            assert urls6 and all(u.startswith(v6 + "/") for u in urls6), kernel6
            assert "ip=dhcp6" not in kernel4.split()
            # the same boot, its network brought up by DHCPv6 for the IPv6 URLs
            words6 = kernel6.split()
            assert words6[-2:] == ["rd.neednet=1", "ip=dhcp6"]
            assert [w.replace(v6, v4) for w in words6[:-2]] == kernel4.split()

            # `render --family` prints what a machine asking over that family gets (signatures: maybe another hour)
            for family, served in (("4", kernel4), ("6", kernel6)):
                rc, out, err = await run_cli("render", "ipxe", "master-0", "--family", family,
                                             "--config", str(setup.config))
                assert rc == 0, err
                kernel = next(line for line in out.splitlines() if line.startswith("kernel ")).split(" || ")[0]
                assert [w.split("?")[0] for w in kernel.split()] == [w.split("?")[0] for w in served.split()]

            stub_url = next(w.split("=", 1)[1] for w in words6 if w.startswith("coreos.inst.ignition_url="))
            async with http.get(stub_url) as r:
                assert r.status == 200
                stub = json.loads(await r.read())
            merge = stub["ignition"]["config"]["merge"][0]["source"]
            assert merge.startswith(f"{v6}/ignition/master-0/config?")
            # a signature covers node, path and expiry, not the base: the IPv6 URL is good on IPv4 too
            async with http.get(merge.replace(v6, v4)) as r:
                assert r.status == 200
            async with http.get(stub_url.replace(v6, v4)) as r:
                assert r.status == 200
                stub4 = json.loads(await r.read())
            assert stub4["ignition"]["config"]["merge"][0]["source"].startswith(f"{v4}/ignition/master-0/config?")
            kernel_url = words6[1]
            async with http.get(kernel_url) as r:
                assert r.status == 200
            # the timeline says how each boot came: iPXE, the family, Secure Boot off (iPXE is unsigned)
            async with http.get(f"{server.admin_url}/nodes/master-0") as r:
                events = (await r.json())["events"]
            scripts = [(e["ip"], e["detail"]) for e in events if e["event"] == "script"]
            assert scripts == [("127.0.0.1", {"mode": "install", "release": scripts[0][1]["release"], "via": "ipxe",
                                              "ip": "IPv4", "secure_boot": "off"}),
                               ("::1", {"mode": "install", "release": scripts[0][1]["release"], "via": "ipxe",
                                        "ip": "IPv6", "secure_boot": "off"})], scripts
        finally:
            await server.stop()
