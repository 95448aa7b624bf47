"""The bootserver.fleet collection (clients/ansible) as Ansible's own tools check it: ``ansible-test
sanity`` and ``units`` in virtual environments of their own (``--venv``: no container engine), and
``ansible-galaxy collection build``.

Sanity runs every test ansible-core 2.19 has for a collection (about 45 s warm, its virtual environments
cached under ``~/.ansible/test/venv``; the first run on a machine installs them from the package index,
about 2 minutes): the selection was measured and kept whole (docs/testing.md, "Automation clients")."""

from __future__ import annotations

import tarfile
from pathlib import Path

from support.automation import BIN, COLLECTION_SRC, ansible_test, collection_tree, run, tail


def test_sanity() -> None:
    proc = ansible_test(collection_tree(), "sanity")
    assert proc.returncode == 0, tail(proc)
    assert 'Running sanity test "validate-modules"' in proc.stdout


def test_units() -> None:
    proc = ansible_test(collection_tree(), "units")
    assert proc.returncode == 0, tail(proc)
    assert " passed" in proc.stdout and " failed" not in proc.stdout


def test_build(tmp_path: Path) -> None:
    proc = run([BIN / "ansible-galaxy", "collection", "build", COLLECTION_SRC, "--output-path", tmp_path])
    assert proc.returncode == 0, tail(proc)
    with tarfile.open(tmp_path / "bootserver-fleet-0.1.0.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"MANIFEST.json", "plugins/modules/node.py", "plugins/module_utils/api.py",
            "meta/runtime.yml"} <= names
    assert not any(name.startswith("tests/output") for name in names)
