"""The real Ignition binary (Debian's ``ignition`` package) consumes the stubs ``bootserver serve`` hands
out: ``fetch-offline`` then ``fetch`` with the ``file`` platform, unprivileged, every path redirected
into a temp dir. Plus ``ignition-validate`` on every stub and every shipped fragment."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from bootserver.resources import data_dir

from . import rig
from .stack import NEWER_SPEC, NEWER_SPEC_NODE, NODES, REAL_IGNITION, Stack, need

pytestmark = pytest.mark.e2e


def fetch_stub(stack: Stack, node: str) -> bytes:
    """GET the node's stub from the running server, as a device would."""
    with urllib.request.urlopen(stack.local_url(stack.stub_path(node)), timeout=10) as r:
        assert r.status == 200
        assert r.headers.get_content_type() == "application/vnd.coreos.ignition+json"
        return r.read()


def files_by_path(config: dict) -> dict[str, dict]:
    return {f["path"]: f for f in config.get("storage", {}).get("files", [])}


def assert_merged_real_config(run: rig.IgnitionRun, node: str) -> None:
    """The config Ignition ended with holds the real config's file and user and the node's hostname."""
    merged = run.config
    assert merged is not None, "Ignition wrote no merged config:\n" + run.output()
    files = files_by_path(merged)
    want = REAL_IGNITION["storage"]["files"][0]
    assert files[want["path"]]["contents"]["source"] == want["contents"]["source"], files
    assert files["/etc/hostname"]["contents"]["source"] == f"data:,{node}%0A"
    users = {u["name"]: u for u in merged["passwd"]["users"]}
    assert users["core"]["sshAuthorizedKeys"] == REAL_IGNITION["passwd"]["users"][0]["sshAuthorizedKeys"]
    # the check-in unit of the stub survives the merge, enabled, calling this node's check-in URL
    units = {u["name"]: u for u in merged.get("systemd", {}).get("units", [])}
    unit = units["bootserver-checkin.service"]
    assert unit["enabled"] is True and f"/checkin/{node}?exp=" in unit["contents"]


@pytest.mark.parametrize("node", sorted(NODES))
def test_ignition_fetches_and_merges_the_real_config(tools: rig.Tools, host_stack: Stack, node: str,
                                                     tmp_path: Path) -> None:
    need(tools, "ignition")
    stub = fetch_stub(host_stack, node)
    assert stub.decode() == host_stack.render("ignition", node)
    (tmp_path / "stub.ign").write_bytes(stub)
    run = rig.run_ignition(tools.ignition or "", tmp_path / "stub.ign", tmp_path / "d", timeout=60)
    assert run.ok, run.output()
    assert [s for s, _, _ in run.stages] == ["fetch-offline", "fetch"]
    # fetch-offline saw the http merge source and asked for the network.
    assert (tmp_path / "d" / "run" / "ignition" / "neednet").exists(), run.output()
    assert f"GET {host_stack.base_url}/ignition/{node}/config" in run.output()
    assert_merged_real_config(run, node)


def test_ignition_asks_for_a_spec_it_reads_and_merges_a_newer_profiles_stub(tools: rig.Tools, host_stack: Stack,
                                                                           tmp_path: Path) -> None:
    need(tools, "ignition")
    node = NEWER_SPEC_NODE.name
    # Without Accept the server writes the profile's spec, newer than this Ignition reads.
    stub = json.loads(fetch_stub(host_stack, node))
    assert stub["ignition"]["version"] == NEWER_SPEC
    (tmp_path / "newest.ign").write_text(json.dumps(stub))
    refused = rig.run_ignition(tools.ignition or "", tmp_path / "newest.ign", tmp_path / "refused", timeout=60)
    assert not refused.ok and "unsupported config version" in refused.output(), refused.output()
    # Ignition fetching the stub itself sends its Accept header (version=3.3.0 for 2.14): a local config
    # whose ignition.config.replace is the stub URL, as coreos.inst.ignition_url/ignition.config.url are.
    pointer = {"ignition": {"version": "3.1.0", "config": {"replace": {"source": host_stack.stub_url(node)}}}}
    (tmp_path / "pointer.ign").write_text(json.dumps(pointer))
    run = rig.run_ignition(tools.ignition or "", tmp_path / "pointer.ign", tmp_path / "d", timeout=60)
    assert run.ok, run.output()
    assert f"GET {host_stack.base_url}/ignition/{node}?exp=" in run.output()
    assert f"GET {host_stack.base_url}/ignition/{node}/config" in run.output()
    assert_merged_real_config(run, node)


def test_ignition_refuses_a_real_config_changed_after_the_stub(tools: rig.Tools, host_stack: Stack,
                                                              tmp_path: Path) -> None:
    need(tools, "ignition")
    node = "live-0"
    (tmp_path / "stub.ign").write_bytes(fetch_stub(host_stack, node))
    # The operator edits the real config after the device got its stub: the pinned sha512 no longer
    # matches the bytes served at the merge URL.
    tampered = json.loads(host_stack.real_ignition.read_text())
    tampered["storage"]["files"][0]["contents"]["source"] = "data:,tampered%0A"
    host_stack.real_ignition.write_text(json.dumps(tampered, indent=2) + "\n")
    started = time.monotonic()
    run = rig.run_ignition(tools.ignition or "", tmp_path / "stub.ign", tmp_path / "d", timeout=60)
    assert [(s, rc) for s, rc, _ in run.stages] == [("fetch-offline", 0), ("fetch", 1)], run.output()
    assert "hash verification failed" in run.output()
    assert run.config is None
    assert time.monotonic() - started < 30, "a wrong hash must fail at once, not after retries"


def test_ignition_validate_accepts_every_stub_and_fragment(tools: rig.Tools, host_stack: Stack,
                                                           tmp_path: Path) -> None:
    need(tools, "ignition_validate")
    docs: dict[str, bytes] = {f"stub of {n}": fetch_stub(host_stack, n) for n in sorted(NODES)}
    fragments = sorted(data_dir("ignition").glob("*.ign"))
    assert fragments, "no Ignition fragments found in the repository's ignition/ folder"
    docs.update({f"fragment {p.name}": p.read_bytes() for p in fragments})
    failures = []
    for i, (label, body) in enumerate(docs.items()):
        path = tmp_path / f"{i}.ign"
        path.write_bytes(body)
        rc, out = rig.ignition_validate(tools.ignition_validate or "", path)
        if rc != 0:
            failures.append(f"{label}: exit {rc}: {out.strip()}")
    assert not failures, "\n".join(failures)
