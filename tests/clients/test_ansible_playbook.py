"""The bootserver.fleet collection, built (``ansible-galaxy collection build``) and installed as a user
installs it, run by ``ansible-playbook`` against a real ``serve``: create, a second run without change
(a BMC password set), check mode with ``--diff`` changing nothing, one key updated, an action waited
for while the machine boots, absent."""

from __future__ import annotations

from pathlib import Path

from support.automation import Fleet, ansible_playbook, tail
from support.helpers import REPO

PLAYBOOKS = REPO / "tests" / "data" / "automation"


def test_playbook(fleet: Fleet, collections: Path) -> None:
    env = fleet.env()
    node_yml = PLAYBOOKS / "node.yml"

    proc, out = ansible_playbook(node_yml, collections, env=env)
    assert proc.returncode == 0, tail(proc)
    assert out["changed"] is True
    node = fleet.node("ans-0")
    assert node is not None and node["generation"] == 1 and node["mac"] == ["52:54:00:aa:20:01"]
    assert node["redfish"] == {"address": "https://bmc-ans.example", "username": "admin", "password_set": True}
    assert "ans-secret-1" not in proc.stdout

    proc, out = ansible_playbook(node_yml, collections, env=env)
    assert proc.returncode == 0, tail(proc)
    assert out["changed"] is False
    assert fleet.node("ans-0")["generation"] == 1  # type: ignore[index]

    proc, out = ansible_playbook(node_yml, collections, "--check", "--diff", "-e", "node_hostname=ans-0.lab",
                                 env=env)
    assert proc.returncode == 0, tail(proc)
    checked = out
    assert checked["changed"] is True and checked["patch"] == {"hostname": "ans-0.lab"}
    assert checked["diff"]["before"]["hostname"] == "ans-0.example"
    assert checked["diff"]["after"]["hostname"] == "ans-0.lab"
    assert checked["diff"]["after"]["redfish"]["password_set"] is True and "ans-secret-1" not in proc.stdout
    node = fleet.node("ans-0")
    assert node is not None and node["generation"] == 1 and node["hostname"] == "ans-0.example"

    proc, out = ansible_playbook(node_yml, collections, "-e", "node_hostname=ans-0.lab", env=env)
    assert proc.returncode == 0, tail(proc)
    assert out["changed"] is True
    node = fleet.node("ans-0")
    assert node is not None and node["generation"] == 2 and node["hostname"] == "ans-0.lab"
    assert node["redfish"]["password_set"] is True

    proc, out = ansible_playbook(node_yml, collections, "-e", "node_state=absent", env=env)
    assert proc.returncode == 0, tail(proc)
    assert out["changed"] is True
    assert fleet.node("ans-0") is None


def test_problem_details_fail_the_task(fleet: Fleet, collections: Path, tmp_path: Path) -> None:
    play = tmp_path / "bad.yml"
    play.write_text("""
- hosts: localhost
  gather_facts: false
  tasks:
    - name: A node the server refuses
      bootserver.fleet.node:
        name: ans-bad
        profile: worker
        redfish: {address: bmc-without-scheme}
""")
    proc, _ = ansible_playbook(play, collections, env=fleet.env())
    assert proc.returncode == 2
    line = next(x for x in proc.stdout.splitlines() if "PUT /nodes/ans-bad" in x)
    assert "Module failed: PUT /nodes/ans-bad: 422 invalid-node: node ans-bad: 1 error: " in line
    assert "(/redfish/address: must be an http(s) URL of the BMC" in line
    assert fleet.node("ans-bad") is None
