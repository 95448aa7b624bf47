"""The Terraform provider (clients/terraform) driven by the real Terraform 1.0.3 against a real ``serve``:
a node created, a second plan without changes, a changed attribute updated in place, changes made
through the API shown as drift (a key and a password), an error as diagnostics on its attribute, import by
name, destroy. The provider is found as a user finds it after ``pip install -e '.[terraform]'``:
``terraform-provider-bootserver`` in the environment's bin/, through ``dev_overrides``."""

from __future__ import annotations

from pathlib import Path

from support.automation import Fleet, terraform

CONFIG = """
terraform {{
  required_providers {{
    bootserver = {{ source = "bootserver/bootserver" }}
  }}
}}

provider "bootserver" {{}}

data "bootserver_profile" "worker" {{
  name = "worker"
}}

resource "bootserver_node" "w" {{
  name      = "tf-0"
  profile   = data.bootserver_profile.worker.name
  mac       = ["52:54:00:AA:10:01"]
  hostname  = "{hostname}"
  addresses = ["127.0.0.1"]
  redfish {{
    address  = "{bmc}"
    username = "admin"
    password = "tf-secret-1"
  }}
}}

output "stream" {{
  value = data.bootserver_profile.worker.stream
}}
"""


def write(workdir: Path, hostname: str = "tf-0.example", bmc: str = "https://bmc-0.example") -> None:
    (workdir / "main.tf").write_text(CONFIG.format(hostname=hostname, bmc=bmc))


def test_node_lifecycle(fleet: Fleet, tmp_path: Path) -> None:
    env = fleet.env()
    write(tmp_path)

    applied = terraform(tmp_path, "apply", "-auto-approve", env=env)
    assert applied.returncode == 0, applied.stderr + applied.stdout
    assert "tf-secret-1" not in applied.stdout + applied.stderr
    assert 'stream = "rhcos-4.16"' in applied.stdout
    node = fleet.node("tf-0")
    assert node is not None and node["generation"] == 1
    assert node["mac"] == ["52:54:00:aa:10:01"] and node["hostname"] == "tf-0.example"
    assert node["redfish"] == {"address": "https://bmc-0.example", "username": "admin", "password_set": True}

    # the API's spelling of the MAC and address (lower case, /32) is the configuration's: no change
    again = terraform(tmp_path, "plan", "-detailed-exitcode", env=env)
    assert again.returncode == 0, again.stderr + again.stdout
    assert "No changes." in again.stdout

    write(tmp_path, hostname="tf-0.lab.example")
    updated = terraform(tmp_path, "apply", "-auto-approve", env=env)
    assert updated.returncode == 0, updated.stderr + updated.stdout
    assert "will be updated in-place" in updated.stdout and "must be replaced" not in updated.stdout
    assert "0 added, 1 changed, 0 destroyed" in updated.stdout
    node = fleet.node("tf-0")
    assert node is not None and node["hostname"] == "tf-0.lab.example"
    assert node["generation"] == 2 and node["redfish"]["password_set"] is True  # the same node, patched

    # changes made through the API: a key, and the password removed (never read back, only password_set)
    assert fleet.api("PATCH", "/nodes/tf-0", {"selectable": True, "redfish": {"password": None}}).status_code == 200
    drift = terraform(tmp_path, "plan", "-detailed-exitcode", env=env)
    assert drift.returncode == 2, drift.stderr + drift.stdout
    assert "selectable = true -> null" in drift.stdout
    assert "+ password = (sensitive value)" in drift.stdout and "tf-secret-1" not in drift.stdout

    # the API's refusal, on the attribute at fault; nothing changed
    write(tmp_path, hostname="tf-0.lab.example", bmc="bmc-0")
    refused = terraform(tmp_path, "apply", "-auto-approve", env=env)
    assert refused.returncode == 1
    assert "422 invalid-node" in refused.stderr and "/redfish/address: must be an http(s) URL" in refused.stderr
    assert 'address  = "bmc-0"' in refused.stderr  # Terraform quotes the configuration's line
    write(tmp_path, hostname="tf-0.lab.example")
    assert fleet.node("tf-0")["redfish"]["address"] == "https://bmc-0.example"  # type: ignore[index]

    # import by name into a fresh state; the apply after it puts back what the API changed (the drift
    # above) and sends the password once (never read back, so an imported node's is not known)
    assert terraform(tmp_path, "state", "rm", "bootserver_node.w", env=env).returncode == 0
    imported = terraform(tmp_path, "import", "bootserver_node.w", "tf-0", env=env)
    assert imported.returncode == 0, imported.stderr + imported.stdout
    assert "Import successful!" in imported.stdout
    fixed = terraform(tmp_path, "apply", "-auto-approve", env=env)
    assert fixed.returncode == 0, fixed.stderr + fixed.stdout
    assert "0 added, 1 changed, 0 destroyed" in fixed.stdout
    node = fleet.node("tf-0")
    assert node is not None and "selectable" not in node and node["redfish"]["password_set"] is True
    assert terraform(tmp_path, "plan", "-detailed-exitcode", env=env).returncode == 0

    destroyed = terraform(tmp_path, "destroy", "-auto-approve", env=env)
    assert destroyed.returncode == 0, destroyed.stderr + destroyed.stdout
    assert fleet.node("tf-0") is None
