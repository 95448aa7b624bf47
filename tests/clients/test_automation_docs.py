"""docs/automation.md's examples run as written: its CLI-configuration snippet (``# terraformrc``), its
playbook (``# site.yml``) and its Terraform configuration (``# main.tf``) applied and destroyed, against a
real ``serve`` (a second run without change is test_ansible_playbook's and test_terraform_provider's).
Each example is the fenced block whose first line names it."""

from __future__ import annotations

import re
from pathlib import Path

from support.automation import BIN, Fleet, ansible_playbook, run, tail, terraform
from support.helpers import REPO

DOC = REPO / "docs" / "automation.md"


def example(name: str) -> str:
    """The fenced block of docs/automation.md whose first line is ``# NAME``."""
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", DOC.read_text(), flags=re.M | re.S)
    found = [b for b in blocks if b.startswith(f"# {name}\n")]
    assert len(found) == 1, f"docs/automation.md has {len(found)} examples named {name}"
    return found[0]


def test_playbook_as_written(fleet: Fleet, collections: Path, tmp_path: Path) -> None:
    (tmp_path / "site.yml").write_text(example("site.yml"))
    env = {**fleet.env(), "BMC_PASSWORD": "docs-secret"}
    first, _ = ansible_playbook(tmp_path / "site.yml", collections, env=env)
    assert first.returncode == 0, tail(first)
    assert re.search(r"localhost\s+: ok=3\s+changed=1 ", first.stdout), first.stdout
    assert "worker-1 is at stage new" in first.stdout and "docs-secret" not in first.stdout
    node = fleet.node("worker-1")
    assert node is not None and node["redfish"]["password_set"] is True
    assert fleet.api("DELETE", "/nodes/worker-1").status_code == 204


def test_terraform_as_written(fleet: Fleet, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    rc = run(["bash", "-euc", example("terraformrc") + 'cat "$TF_CLI_CONFIG_FILE"'], env={"HOME": str(home)})
    assert rc.returncode == 0, tail(rc)
    assert f'"bootserver/bootserver" = "{BIN}"' in rc.stdout
    work = tmp_path / "tf"
    work.mkdir()
    (work / "terraformrc").write_text((home / ".bootserver.tfrc").read_text())
    (work / "main.tf").write_text(example("main.tf"))
    env = {**fleet.env(), "TF_VAR_bmc_password": "docs-secret"}
    applied = terraform(work, "apply", "-auto-approve", env=env)
    assert applied.returncode == 0, applied.stderr + applied.stdout
    assert 'stream = "rhcos-4.16"' in applied.stdout and "docs-secret" not in applied.stdout
    node = fleet.node("worker-2")
    assert node is not None and node["provider"] == "redfish" and node["redfish"]["password_set"] is True
    destroyed = terraform(work, "destroy", "-auto-approve", env=env)
    assert destroyed.returncode == 0, destroyed.stderr + destroyed.stdout
    assert fleet.node("worker-2") is None
