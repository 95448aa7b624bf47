"""bootserver.ignition_schema: real configs pass the official schema of their spec; bad ones are refused
with the JSON path at fault."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from bootserver.ignition_schema import SPEC_VERSIONS, IgnitionSchemaError, validate, validate_bytes


def _pointer(reference: Path) -> dict:
    return json.loads((reference / "openshift-pointer-master.ign.json").read_text())


@pytest.mark.parametrize("name,version", [("openshift-pointer-master.ign.json", "3.2.0"),
                                          ("openshift-pointer-master-v3.1.ign.json", "3.1.0")])
def test_openshift_pointer_configs_are_valid(reference: Path, name: str, version: str) -> None:
    assert validate_bytes((reference / name).read_bytes()) == version


@pytest.mark.parametrize("version", SPEC_VERSIONS)
def test_every_shipped_spec_version_validates(reference: Path, version: str) -> None:
    config = _pointer(reference)
    config["ignition"]["version"] = version
    assert validate(config) == version


@pytest.mark.parametrize("edit,path,message", [
    (lambda c: c["ignition"].update(version="3.9.0"), "ignition.version",
     "unknown Ignition spec version '3.9.0' (known: 3.1.0, 3.2.0, 3.3.0, 3.4.0, 3.5.0)"),
    (lambda c: c.update(storage={"files": "nope"}), "storage.files", "'nope' is not of type 'array'"),
    (lambda c: c.update(storage={"files": [{"path": "etc/motd"}]}), "storage.files[0].path",
     "path not absolute: 'etc/motd'"),
    (lambda c: c.update(storage={"files": [{"mode": 420}]}), "storage.files[0]", "'path' is a required property"),
    (lambda c: c.pop("ignition"), "ignition.version", "missing: not an Ignition config"),
])
def test_invalid_configs_name_the_json_path(reference: Path, edit, path: str, message: str) -> None:
    config = copy.deepcopy(_pointer(reference))
    edit(config)
    with pytest.raises(IgnitionSchemaError) as info:
        validate(config)
    assert (info.value.path, info.value.message) == (path, message)


def test_spec2_pointer_config_is_an_unknown_version(reference: Path) -> None:
    with pytest.raises(IgnitionSchemaError, match=r"^ignition\.version: unknown Ignition spec version '2\.2\.0'"):
        validate_bytes((reference / "openshift-pointer-master-v2.2.ign.json").read_bytes())


def test_bytes_that_are_not_json_are_refused() -> None:
    with pytest.raises(IgnitionSchemaError, match=r"^not JSON: "):
        validate_bytes(b"<html>login</html>")
