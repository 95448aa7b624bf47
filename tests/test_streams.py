"""Stream metadata parsing against the real RHCOS and FCOS files, and malformed variants."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bootserver.errors import MetadataError
from bootserver.streams import parse_stream


def parse(path: Path, arches=("x86_64",), name="s"):
    return parse_stream(path.read_bytes(), name=name, source=str(path), architectures=arches)


def test_rhcos_416_has_no_signatures(reference: Path) -> None:
    meta = parse(reference / "rhcos-stream-4.16.json", ("x86_64", "aarch64"), "rhcos-4.16")
    rel = meta.releases["x86_64"]
    assert meta.upstream_name == "rhcos-4.16"
    assert rel.version == "416.94.202405291527-0"
    assert rel.kernel.filename == "rhcos-416.94.202405291527-0-live-kernel-x86_64"
    assert rel.rootfs.sha256 == "836fb133c6ea93c7f36f87a72c77422c3a0f343421c3fbae8e84db9bfbfee3fd"
    assert all(a.signature is None for a in rel.artifacts)
    assert meta.releases["aarch64"].initramfs.filename.endswith("aarch64.img")


def test_rhcos_410_parses(reference: Path) -> None:
    assert parse(reference / "rhcos-stream-4.10.json").releases["x86_64"].version == "410.84.202201251210-0"


def test_fcos_carries_signatures(reference: Path) -> None:
    rel = parse(reference / "fcos-stream-stable.json", ("aarch64",)).releases["aarch64"]
    assert rel.version == "39.20231101.3.0"
    assert rel.kernel.signature and rel.kernel.signature.endswith(".sig")
    assert [a.kind for a in rel.artifacts] == ["kernel", "initramfs", "rootfs"]


def test_urls_come_from_metadata_not_a_name_pattern(reference: Path, tmp_path: Path) -> None:
    doc = json.loads((reference / "fcos-stream-stable.json").read_text())
    pxe = doc["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["pxe"]
    pxe["kernel"]["location"] = pxe["kernel"]["location"].replace("live-kernel-x86_64", "live-kernel.x86_64")
    path = tmp_path / "renamed.json"
    path.write_text(json.dumps(doc))
    assert parse(path).releases["x86_64"].kernel.filename.endswith("live-kernel.x86_64")


def test_legacy_format_is_refused_by_name(reference: Path) -> None:
    with pytest.raises(MetadataError, match="legacy pre-stream RHCOS metadata"):
        parse(reference / "rhcos-legacy-4.3.json")


def mutate(reference: Path, tmp_path: Path, fn) -> Path:
    doc = json.loads((reference / "rhcos-stream-4.16.json").read_text())
    fn(doc)
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    return path


PXE = "architectures.x86_64.artifacts.metal.formats.pxe"


@pytest.mark.parametrize("fn,jsonpath,message", [
    (lambda d: d["architectures"]["x86_64"]["artifacts"]["metal"]["formats"].pop("pxe"), PXE, "missing"),
    (lambda d: d["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["pxe"].pop("rootfs"),
     PXE + ".rootfs", "missing or not an object"),
    (lambda d: d["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["pxe"]["kernel"].update(sha256="abc"),
     PXE + ".kernel.sha256", "not a sha256 (64 hex digits): 'abc'"),
    (lambda d: d["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["pxe"]["initramfs"].update(
        location="ftp://x/y"), PXE + ".initramfs.location", "not an http(s) URL: 'ftp://x/y'"),
    (lambda d: d["architectures"].pop("x86_64"), "architectures.x86_64", "architecture missing"),
    (lambda d: d["architectures"]["x86_64"]["artifacts"]["metal"].update(release="../x"),
     "architectures.x86_64.artifacts.metal.release", "missing or malformed: '../x'"),
])
def test_malformed_metadata_names_the_json_path(fn, jsonpath, message, reference: Path, tmp_path: Path) -> None:
    path = mutate(reference, tmp_path, fn)
    with pytest.raises(MetadataError) as info:
        parse(path)
    assert str(info.value) == f"{path}: {jsonpath}: {message}"


def test_not_json(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("<html>")
    with pytest.raises(MetadataError, match=r"x\.json: not JSON"):
        parse(path)


def test_the_live_iso_of_a_release_is_read_where_the_stream_has_one(reference: Path, tmp_path: Path) -> None:
    fcos = parse(reference / "fcos-stream-stable.json").releases["x86_64"]
    assert fcos.live_iso is not None and fcos.live_iso.kind == "iso"
    assert fcos.live_iso.filename == "fedora-coreos-39.20231101.3.0-live.x86_64.iso"
    assert fcos.live_iso.sha256 == "0b09997ca0170a2d8634b5942c9437a18b6d354b020c7e24aa9fe41f1458f33e"
    assert fcos.live_iso.signature is not None and fcos.live_iso.signature.endswith(".iso.sig")
    rhcos = parse(reference / "rhcos-stream-4.16.json").releases["x86_64"]
    assert rhcos.live_iso is not None and rhcos.live_iso.signature is None
    doc = json.loads((reference / "fcos-stream-stable.json").read_text())
    del doc["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["iso"]
    (tmp_path / "s.json").write_text(json.dumps(doc))
    assert parse(tmp_path / "s.json").releases["x86_64"].live_iso is None
    doc["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["iso"] = {"disk": {"location": "ftp://x/y.iso"}}
    (tmp_path / "s.json").write_text(json.dumps(doc))
    with pytest.raises(MetadataError, match=r"architectures\.x86_64\.artifacts\.metal\.formats\.iso\.disk\.location"):
        parse(tmp_path / "s.json")
