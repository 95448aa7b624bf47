"""bootserver.scripts: a node's boot script context (kernel, initramfs and kargs from the resolved node, its
URLs from the URL builder) and check-config's look at every node's command line. Pure: no store."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.configs import config_doc, load, master_profile
from support.signing import fixed_signer

from bootserver.artifacts.cache import ArtifactCache
from bootserver.artifacts.catalog import StreamCatalog
from bootserver.artifacts.upstream import Upstream
from bootserver.inventory import inventory
from bootserver.kargs import CommandLineTooLong
from bootserver.scripts import check_command_lines, script_context
from bootserver.urls import Urls


def release_of(config):
    catalog = StreamCatalog(config, ArtifactCache(config.cache_dir), Upstream.for_config(config))
    return catalog.cached("rhcos-4.16").releases["x86_64"]


def test_the_context_is_the_resolved_node_on_its_release(tmp_path: Path) -> None:
    config = load(config_doc(profiles={"master": master_profile(provider="equinix", kargs=["nosmt"])},
                             nodes={"master-0": {"profile": "master", "network": {"interfaces": [
                                 {"name": "eno1", "type": "ethernet", "mac-address": "52:54:00:12:34:56",
                                  "ipv4": {"enabled": True, "address": [{"ip": "10.0.0.5",
                                                                         "prefix-length": 24}]}}]}}}), tmp_path)
    node, release = inventory(config)["master-0"], release_of(config)
    ctx = script_context(Urls(config, fixed_signer()), node, release)
    assert (ctx.node, ctx.profile, ctx.stream, ctx.release, ctx.mode) == (
        "master-0", "master", "rhcos-4.16", release.version, "install")
    assert ctx.kernel_url.startswith("http://boot.example.net:8080/artifacts/rhcos-4.16/x86_64/")
    assert "coreos.inst.platform_id=packet" in ctx.kargs and "console=ttyS1,115200n8" in ctx.kargs
    assert any(k.startswith("ip=10.0.0.5::") for k in ctx.kargs) and ctx.kargs[-1] == "nosmt"


def test_check_config_leaves_a_node_without_metadata_and_refuses_a_command_line_too_long(tmp_path: Path) -> None:
    config = load(config_doc(streams={"rhcos-4.16": {"metadata": "https://example.invalid/rhcos.json"}}), tmp_path)
    assert check_command_lines(config) == ["master-0"]  # not synced: left to render and the server
    config = load(config_doc(profiles={"master": master_profile(kargs=["x=" + "y" * 1900])}), tmp_path)
    with pytest.raises(CommandLineTooLong, match=r"t\.yaml: .*master-0"):
        check_command_lines(config)
