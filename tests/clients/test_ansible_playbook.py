"""The bootserver.fleet collection, built (``ansible-galaxy collection build``) and installed as a user
installs it, run by ``ansible-playbook`` against a real ``serve``: create, a second run without change
(a BMC password set), check mode with ``--diff`` changing nothing, one key updated, absent; an action
waited for while the machine boots (the test plays the machine); a discovered machine adopted; an API
error failing the task in one line."""

from __future__ import annotations

import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
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


def test_action_waits_for_the_stage(fleet: Fleet, collections: Path) -> None:
    env = fleet.env()
    assert fleet.api("PUT", "/nodes/ans-1", {"profile": "worker", "mac": ["52:54:00:aa:20:02"],
                                              "addresses": ["127.0.0.1"]}).status_code == 201
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(ansible_playbook, PLAYBOOKS / "reinstall.yml", collections, "-e", "node=ans-1",
                              env=env)
        deadline = time.monotonic() + 60
        while (fleet.node("ans-1") or {}).get("stage") != "reinstall":  # the action reached the server
            assert time.monotonic() < deadline and not waiting.done(), "ans-1 was never marked for reinstall"
            time.sleep(0.2)  # poll interval, bounded by the deadline
        # the machine: its iPXE chains the generic entry with its MAC, from an address the node allows
        with urllib.request.urlopen(f"{fleet.boot_url}/boot.ipxe?mac=52:54:00:aa:20:02", timeout=30) as r:
            assert r.read().startswith(b"#!ipxe")
        proc, waited = waiting.result(timeout=120)
    assert proc.returncode == 0, tail(proc)
    assert waited["changed"] and waited["node"]["stage"] == "ipxe" and waited["action"]["action"] == "reinstall"
    # the module returned the stage the boot above made, so it waited for it; how long it says it waited
    # (rounded to 0.1 s) is 0.0 when its first poll after the action came after that boot (a loaded machine)
    assert 0 <= waited["waited"] < 60
    assert fleet.api("DELETE", "/nodes/ans-1").status_code == 204


def test_adopt_a_discovered_machine(fleet: Fleet, collections: Path, tmp_path: Path) -> None:
    # the machine: it matched no node, so its iPXE reports itself (what /boot.ipxe's discovery script does)
    report = f"{fleet.boot_url}/discover?mac=52:54:00:aa:20:09&uuid=4c4c4544-0042-3510-8054-b2c04f4e4d32"
    with urllib.request.urlopen(report, timeout=30) as r:
        assert r.status == 200
    play = tmp_path / "adopt.yml"
    play.write_text("""
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Adopt the machine
      bootserver.fleet.adopt:
        mac: 52-54-00-AA-20-09
        name: ans-9
        profile: worker
      register: adopted
    - ansible.builtin.copy: {content: "{{ adopted | to_json }}", dest: "{{ result_file }}", mode: "0600"}
""")
    proc, adopted = ansible_playbook(play, collections, env=fleet.env())
    assert proc.returncode == 0, tail(proc)
    assert adopted["changed"] and adopted["node"]["name"] == "ans-9"
    node = fleet.node("ans-9")
    assert node is not None and node["mac"] == ["52:54:00:aa:20:09"] and node["profile"] == "worker"
    assert node["uuid"] == "4c4c4544-0042-3510-8054-b2c04f4e4d32"
    proc, again = ansible_playbook(play, collections, env=fleet.env())
    assert proc.returncode == 0, tail(proc)
    assert again["changed"] is False and again["node"]["generation"] == node["generation"]
    assert fleet.api("DELETE", "/nodes/ans-9").status_code == 204
