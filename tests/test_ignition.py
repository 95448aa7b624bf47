"""Ignition stubs: valid against the official JSON schema of their spec version, hash pinned."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import jsonschema
import pytest
from support.helpers import SCHEMAS
from support.services import service as new_service
from support.signing import FIXED_KEY, FIXED_NOW, fixed_signer

from bootserver.config import IGNITION_VERSIONS, parse_config
from bootserver.ignition import (
    NotAcceptableError,
    StubTemplate,
    build_stub,
    encode,
    fragment,
    negotiate_version,
    parse_accept,
)
from bootserver.resources import data_dir
from bootserver.signing import sign


def schema(reference: Path, version: str) -> dict:
    major_minor = ".".join(version.split(".")[:2])
    return json.loads((SCHEMAS / f"ignition-schema-v{major_minor}.json").read_text())


def service(reference: Path, tmp_path: Path, version: str, pointer: str = "openshift-pointer-master.ign.json"):
    ign = tmp_path / "master.ign"
    ign.write_bytes((reference / pointer).read_bytes())
    return new_service(parse_config({
        "server": {"base_url": "http://boot.example.net:8080"},
        "streams": {"r": {"metadata": str(reference / "rhcos-stream-4.16.json")}},
        "profiles": {"p": {"stream": "r", "install_dev": "/dev/sda", "ignition": "master.ign",
                           "ignition_version": version},
                     "bare": {"stream": "r", "mode": "live", "ignition_version": version}},
        "nodes": {"master-0": {"profile": "p", "hostname": "master-0.ocp.example.net"},
                  "live-0": {"profile": "bare"}},
    }, "t.yaml", tmp_path), fixed_signer()), ign


@pytest.mark.parametrize("version", IGNITION_VERSIONS)
async def test_stub_validates_against_official_schema(version: str, reference: Path, tmp_path: Path) -> None:
    svc, _ign = service(reference, tmp_path, version)
    for node in ("master-0", "live-0"):
        stub = json.loads(await svc.stub(node))
        jsonschema.validate(stub, schema(reference, version))
        assert stub["ignition"]["version"] == version


async def test_stub_pins_the_exact_bytes_of_the_real_config(reference: Path, tmp_path: Path) -> None:
    svc, ign = service(reference, tmp_path, "3.2.0", "openshift-pointer-master-v3.1.ign.json")
    stub = json.loads(await svc.stub("master-0"))
    merge = stub["ignition"]["config"]["merge"]
    exp = FIXED_NOW + 86400
    sig = sign(FIXED_KEY, "master-0", "/ignition/master-0/config", exp)
    assert merge == [{"source": f"http://boot.example.net:8080/ignition/master-0/config?exp={exp}&sig={sig}",
                      "verification": {"hash": "sha512-" + hashlib.sha512(ign.read_bytes()).hexdigest()}}]
    assert (await svc.real_config("master-0")) == ign.read_bytes()
    files = stub["storage"]["files"]
    assert files[0]["path"] == "/etc/hostname"
    assert files[0]["contents"]["source"] == "data:,master-0.ocp.example.net%0A"


async def test_stub_follows_a_regenerated_real_config(reference: Path, tmp_path: Path) -> None:
    svc, ign = service(reference, tmp_path, "3.2.0")
    before = json.loads(await svc.stub("master-0"))["ignition"]["config"]["merge"][0]["verification"]["hash"]
    ign.write_bytes((reference / "openshift-pointer-master-v3.1.ign.json").read_bytes())
    after = json.loads(await svc.stub("master-0"))["ignition"]["config"]["merge"][0]["verification"]["hash"]
    assert before != after == "sha512-" + hashlib.sha512(ign.read_bytes()).hexdigest()


async def test_profile_without_config_gets_no_merge(reference: Path, tmp_path: Path) -> None:
    svc, _ = service(reference, tmp_path, "3.4.0")
    stub = json.loads(await svc.stub("live-0"))
    assert "config" not in stub["ignition"]


@pytest.mark.parametrize("path", sorted(data_dir("ignition").glob("*.ign")), ids=lambda p: p.name)
def test_shipped_fragments_are_valid_spec_31_configs(path: Path, reference: Path) -> None:
    doc = json.loads(path.read_text())
    jsonschema.validate(doc, schema(reference, doc["ignition"]["version"]))


def test_encoding_is_stable() -> None:
    stub = build_stub(version="3.2.0", hostname="h")
    assert encode(stub) == encode(json.loads(encode(stub)))
    assert fragment("stub")["ignition"]["config"]["merge"] == []


# --- version negotiation (Accept) -----------------------------------------------------------------

IGNITION_214_ACCEPT = "application/vnd.coreos.ignition+json;version=3.3.0, */*;q=0.1"  # Debian's Ignition 2.14


@pytest.mark.parametrize("accept,maximum,expected", [
    (None, "3.4.0", "3.4.0"),
    ("", "3.4.0", "3.4.0"),
    ("*/*", "3.4.0", "3.4.0"),
    (IGNITION_214_ACCEPT, "3.4.0", "3.3.0"),  # the client's newest beats */*'s q=0.1
    (IGNITION_214_ACCEPT, "3.5.0", "3.3.0"),
    (IGNITION_214_ACCEPT, "3.2.0", "3.2.0"),  # Ignition reads every older 3.x spec
    ("application/vnd.coreos.ignition+json;version=3.2.0", "3.4.0", "3.2.0"),
    ("application/vnd.coreos.ignition+json; version=\"3.4.0\"", "3.5.0", "3.4.0"),
    ("application/vnd.coreos.ignition+json", "3.5.0", "3.5.0"),
    ("application/*;q=0.5, text/html", "3.3.0", "3.3.0"),
    ("application/vnd.coreos.ignition+json;version=3.3.0;q=0.2, "
     "application/vnd.coreos.ignition+json;version=3.1.0", "3.4.0", "3.1.0"),  # q first, then the newer
    ("application/vnd.coreos.ignition+json;version=3.3.0, */*;q=0", "3.4.0", "3.3.0"),
])
def test_negotiated_version(accept: str | None, maximum: str, expected: str) -> None:
    assert negotiate_version(accept, maximum, IGNITION_VERSIONS) == expected


@pytest.mark.parametrize("accept", [
    "text/html",
    "application/json",
    "application/vnd.coreos.ignition+json;version=3.0.0",  # the stub needs 3.1.0's verification.hash
    "application/vnd.coreos.ignition+json;version=2.2.0, text/plain",
    "application/vnd.coreos.ignition+json;q=0, */*;q=0",
])
def test_nothing_acceptable(accept: str) -> None:
    with pytest.raises(NotAcceptableError, match=r"no Ignition config version .*3\.1\.0 to 3\.4\.0"):
        negotiate_version(accept, "3.4.0", IGNITION_VERSIONS)


def test_parse_accept() -> None:
    assert parse_accept('Application/JSON; Q=0.5 ; charset="utf-8", text/*, nonsense, */*;q=x') == [
        ("application/json", {"charset": "utf-8"}, 0.5), ("text/*", {}, 1.0), ("*/*", {}, 1.0)]


async def test_stub_per_version_pins_and_signs_the_same_real_config(reference: Path, tmp_path: Path) -> None:
    svc, ign = service(reference, tmp_path, "3.4.0")
    newest, older = json.loads(await svc.stub("master-0")), json.loads(await svc.stub("master-0", version="3.2.0"))
    assert (newest["ignition"]["version"], older["ignition"]["version"]) == ("3.4.0", "3.2.0")
    jsonschema.validate(older, schema(reference, "3.2.0"))
    assert newest["ignition"]["config"] == older["ignition"]["config"]  # same signed URL, same sha512
    assert (await svc.stub("master-0")) == encode(newest)  # the cache keeps one stub per version
    assert (await svc.stub("master-0", version="3.2.0")) == encode(older)
    ign.write_bytes((reference / "openshift-pointer-master-v3.1.ign.json").read_bytes())
    pin = "sha512-" + hashlib.sha512(ign.read_bytes()).hexdigest()
    for version in ("3.2.0", "3.4.0"):  # a regenerated real config re-pins every version's stub
        stub = json.loads(await svc.stub("master-0", version=version))
        assert stub["ignition"]["config"]["merge"][0]["verification"] == {"hash": pin}


@pytest.mark.parametrize("version", ["3.0.0", "3.5.0", "banana"])
async def test_stub_refuses_a_version_outside_the_profile(reference: Path, tmp_path: Path, version: str) -> None:
    svc, _ = service(reference, tmp_path, "3.4.0")
    with pytest.raises(NotAcceptableError, match=rf"node master-0: Ignition spec {version} .* 3\.1\.0 to 3\.4\.0"):
        (await svc.stub("master-0", version=version))


async def test_server_negotiates_the_stub_version(aiohttp_client, reference: Path, tmp_path: Path) -> None:
    from support.signing import SigningClient

    from bootserver.http.app import SERVICE, create_app

    svc, _ = service(reference, tmp_path, "3.4.0")
    client = SigningClient(await aiohttp_client(create_app(svc.config, fixed_signer())))
    r = await client.get("/ignition/master-0", headers={"Accept": IGNITION_214_ACCEPT})
    assert r.status == 200 and r.headers["Vary"] == "Accept"
    body = await r.read()
    assert json.loads(body)["ignition"]["version"] == "3.3.0"
    assert body == (await client.app[SERVICE].stub("master-0", version="3.3.0"))
    r = await client.get("/ignition/master-0", headers={"Accept": "*/*"})
    assert json.loads(await r.read())["ignition"]["version"] == "3.4.0"
    r = await client.get("/ignition/master-0", headers={"Accept": "text/html"})
    assert r.status == 406 and r.content_type == "text/plain" and r.headers["Vary"] == "Accept"
    assert (await r.text()).startswith("no Ignition config version this node can be served (3.1.0 to 3.4.0) ")
    events = client.app[SERVICE].runtime.state.timeline.events("master-0")
    assert sum(e.count for e in events if e.event == "stub") == 2, events  # the 406 recorded nothing


async def test_render_ignition_version(reference: Path, tmp_path: Path) -> None:
    from support.helpers import run_cli, write_config

    (tmp_path / "master.ign").write_bytes((reference / "openshift-pointer-master.ign.json").read_bytes())
    cfg = write_config(tmp_path / "b.yaml", {
        "server": {"base_url": "http://boot.example.net:8080"}, "state_dir": str(tmp_path / "state"),
        "streams": {"r": {"metadata": str(reference / "rhcos-stream-4.16.json")}},
        "profiles": {"p": {"stream": "r", "install_dev": "/dev/sda", "ignition": "master.ign",
                           "ignition_version": "3.4.0"}},
        "nodes": {"master-0": {"profile": "p"}}})
    rc, out, err = await run_cli("render", "ignition", "master-0", "--version", "3.3.0", "--config", str(cfg))
    assert rc == 0, err
    assert json.loads(out)["ignition"]["version"] == "3.3.0"
    rc, out, err = await run_cli("render", "ignition", "master-0", "--version", "3.5.0", "--config", str(cfg))
    assert (rc, out) == (2, "")
    assert err.strip().endswith("node master-0: Ignition spec 3.5.0 is not one its stub can be written in: "
                                "profile p allows 3.1.0 to 3.4.0 (profiles.p.ignition_version)")
    rc, out, err = await run_cli("render", "ipxe", "master-0", "--version", "3.3.0", "--config", str(cfg))
    assert (rc, out) == (2, "") and "--version applies to render ignition only" in err


@pytest.mark.parametrize("version", ["3.1.0", "3.2.0", "3.4.0"])
@pytest.mark.parametrize("with_config", [True, False])
@pytest.mark.parametrize("checkin", [True, False])
@pytest.mark.parametrize("ca_pem", [None, b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"])
def test_a_stub_template_filled_is_the_nodes_stub_byte_for_byte(version: str, with_config: bool, checkin: bool,
                                                                ca_pem: bytes | None) -> None:
    """What the server sends (the profile's stub encoded once, each node's values written in) is what
    building and encoding the node's own stub gives, for values that every escaping touches: a
    hostname to percent-encode, URLs with ``%``, ``$``, ``"``, ``\\`` and non-ASCII (systemd doubles ``%``
    and ``$``, JSON escapes quotes and backslashes)."""
    config_hash = "sha512-" + "ab" * 64 if with_config else None
    template = StubTemplate(version=version, config_hash=config_hash, ca_pem=ca_pem, checkin=checkin)
    for i, (host, odd) in enumerate([("master-0", ""), ("wörker 1.example.net", '%41$HOME"\\é'), ("n", "%%")]):
        config_url = f"http://boot.example.net/ignition/n{i}/config?exp=1&sig=ab{odd}" if with_config else None
        checkin_url = f"http://boot.example.net/checkin/n{i}?exp=2&sig=cd{odd}" if checkin else None
        expected = encode(build_stub(version=version, hostname=host, config_url=config_url,
                                     config_hash=config_hash, ca_pem=ca_pem, checkin_url=checkin_url))
        assert template.fill(hostname=host, config_url=config_url, checkin_url=checkin_url) == expected
    with pytest.raises(ValueError):
        template.fill(hostname="h", config_url=None if with_config else "http://x/", checkin_url=None)
