"""Ignition stubs: valid against the official JSON schema of their spec version, hash pinned."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import jsonschema
import pytest

from bootserver.config import IGNITION_VERSIONS, parse_config
from bootserver.ignition import build_stub, encode, fragment
from bootserver.resources import data_dir
from bootserver.service import BootService
from bootserver.signing import sign

from conftest import FIXED_KEY, FIXED_NOW, SCHEMAS, fixed_signer


def schema(reference: Path, version: str) -> dict:
    major_minor = ".".join(version.split(".")[:2])
    return json.loads((SCHEMAS / f"ignition-schema-v{major_minor}.json").read_text())


def service(reference: Path, tmp_path: Path, version: str, pointer: str = "openshift-pointer-master.ign.json"):
    ign = tmp_path / "master.ign"
    ign.write_bytes((reference / pointer).read_bytes())
    return BootService(parse_config({
        "server": {"base_url": "http://boot.example.net:8080"},
        "streams": {"r": {"metadata": str(reference / "rhcos-stream-4.16.json")}},
        "profiles": {"p": {"stream": "r", "install_dev": "/dev/sda", "ignition": "master.ign",
                           "ignition_version": version},
                     "bare": {"stream": "r", "mode": "live", "ignition_version": version}},
        "nodes": {"master-0": {"profile": "p", "hostname": "master-0.ocp.example.net"},
                  "live-0": {"profile": "bare"}},
    }, "t.yaml", tmp_path), fixed_signer()), ign


@pytest.mark.parametrize("version", IGNITION_VERSIONS)
def test_stub_validates_against_official_schema(version: str, reference: Path, tmp_path: Path) -> None:
    svc, ign = service(reference, tmp_path, version)
    for node in ("master-0", "live-0"):
        stub = json.loads(svc.stub(node))
        jsonschema.validate(stub, schema(reference, version))
        assert stub["ignition"]["version"] == version


def test_stub_pins_the_exact_bytes_of_the_real_config(reference: Path, tmp_path: Path) -> None:
    svc, ign = service(reference, tmp_path, "3.2.0", "openshift-pointer-master-v3.1.ign.json")
    stub = json.loads(svc.stub("master-0"))
    merge = stub["ignition"]["config"]["merge"]
    exp = FIXED_NOW + 86400
    sig = sign(FIXED_KEY, "master-0", "/ignition/master-0/config", exp)
    assert merge == [{"source": f"http://boot.example.net:8080/ignition/master-0/config?exp={exp}&sig={sig}",
                      "verification": {"hash": "sha512-" + hashlib.sha512(ign.read_bytes()).hexdigest()}}]
    assert svc.real_config("master-0") == ign.read_bytes()
    files = stub["storage"]["files"]
    assert files[0]["path"] == "/etc/hostname"
    assert files[0]["contents"]["source"] == "data:,master-0.ocp.example.net%0A"


def test_stub_follows_a_regenerated_real_config(reference: Path, tmp_path: Path) -> None:
    svc, ign = service(reference, tmp_path, "3.2.0")
    before = json.loads(svc.stub("master-0"))["ignition"]["config"]["merge"][0]["verification"]["hash"]
    ign.write_bytes((reference / "openshift-pointer-master-v3.1.ign.json").read_bytes())
    after = json.loads(svc.stub("master-0"))["ignition"]["config"]["merge"][0]["verification"]["hash"]
    assert before != after == "sha512-" + hashlib.sha512(ign.read_bytes()).hexdigest()


def test_profile_without_config_gets_no_merge(reference: Path, tmp_path: Path) -> None:
    svc, _ = service(reference, tmp_path, "3.4.0")
    stub = json.loads(svc.stub("live-0"))
    assert "config" not in stub["ignition"]


@pytest.mark.parametrize("path", sorted(data_dir("ignition").glob("*.ign")), ids=lambda p: p.name)
def test_shipped_fragments_are_valid_spec_31_configs(path: Path, reference: Path) -> None:
    doc = json.loads(path.read_text())
    jsonschema.validate(doc, schema(reference, doc["ignition"]["version"]))


def test_encoding_is_stable() -> None:
    stub = build_stub(version="3.2.0", hostname="h")
    assert encode(stub) == encode(json.loads(encode(stub)))
    assert fragment("stub")["ignition"]["config"]["merge"] == []
