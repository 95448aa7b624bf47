"""The e2e fixtures: the boot tools, the guest initramfs, the upstream side and a running ``bootserver serve``
(:mod:`.stack` holds what the tests import: the stack, its nodes and config, running the command line)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.helpers import free_port
from support.netns import in_ci
from support.server import serving

from . import rig, standin
from .stack import (
    REAL_IGNITION,
    Stack,
    bootserver_command,
    need,
    run_bootserver,
    stream_metadata,
    write_stack_config,
)


@pytest.fixture(scope="session")
def tools() -> rig.Tools:
    """The host's real boot clients, as found by :func:`rig.find_tools`."""
    return rig.find_tools()


@pytest.fixture(scope="session")
def guest_initramfs(tools: rig.Tools, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test initramfs (busybox + virtio-net + a reporting ``/init``), built once per session."""
    need(tools, "busybox", "modules_dir")
    path = tmp_path_factory.mktemp("guest") / "initramfs.img"
    assert tools.modules_dir and tools.busybox
    rig.build_initramfs(path, tools.busybox, tools.modules_dir)
    return path


@pytest.fixture(scope="session")
def e2e_source(tools: rig.Tools, guest_initramfs: Path,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, bytes], dict]]:
    """The upstream side: a local HTTP server with the real kernel, the test initramfs, a random 4 MiB
    rootfs and stream metadata pointing at them; and a synced cache. Yields (workdir, artifacts, metadata)."""
    need(tools, "vmlinuz")
    assert tools.vmlinuz
    work = tmp_path_factory.mktemp("bootserver")
    artifacts = {"kernel": Path(tools.vmlinuz).read_bytes(), "initramfs": guest_initramfs.read_bytes(),
                 "rootfs": os.urandom(4 << 20)}
    with rig.StaticServer({}) as upstream:
        doc = stream_metadata(upstream.url(""), artifacts)
        pxe = doc["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["pxe"]
        for kind, art in pxe.items():
            upstream.routes[art["location"].removeprefix(upstream.url(""))] = artifacts[kind]
        (work / "stream.json").write_text(json.dumps(doc, indent=2))
        (work / "real.ign").write_text(json.dumps(REAL_IGNITION, indent=2) + "\n")
        cfg = write_stack_config(work, "sync.yaml", port=1, base_url="http://127.0.0.1:1")
        p = run_bootserver("sync-images", "--config", str(cfg), timeout=120)
        assert p.returncode == 0, f"bootserver sync-images failed ({p.returncode}): {p.stderr}"
        assert len(upstream.requests) == 3, upstream.requests
    # every stack's config (serve_stack) is this one but for its port, base URL and state_dir: checked once,
    # with the guest's base URL (the longer) and the longest port
    checked = write_stack_config(work, "check.yaml", port=65535, base_url=f"http://{rig.GUEST_HOST}:65535")
    p = run_bootserver("check-config", "--config", str(checked), timeout=60)
    assert p.returncode == 0, f"bootserver check-config failed: {p.stderr}"
    yield work, artifacts, doc


def serve_stack(work: Path, artifacts: dict[str, bytes], metadata: dict, name: str, base_host: str) -> Iterator[Stack]:
    port = free_port()
    state = Path(tempfile.mkdtemp(dir=work, prefix=f"state-{name}-"))  # fresh timeline per server
    cfg = write_stack_config(work, f"{state.name}.yaml", port=port, base_url=f"http://{base_host}:{port}",
                             state_dir=state)
    log = work / f"{state.name}.log"
    with serving(["--config", str(cfg)], f"http://127.0.0.1:{port}/healthz", log, command=bootserver_command()):
        yield Stack(config=cfg, port=port, base_url=f"http://{base_host}:{port}", artifacts=artifacts,
                    metadata=metadata, real_ignition=work / "real.ign", log=log)


@pytest.fixture
def guest_stack(e2e_source: tuple[Path, dict[str, bytes], dict]) -> Iterator[Stack]:
    """``bootserver serve`` on 127.0.0.1 whose ``base_url`` is the guest's view of the host
    (``http://10.0.2.100:<port>``, see :data:`rig.GUEST_HOST`). Fresh node timeline per test."""
    yield from serve_stack(*e2e_source, name="guest", base_host=rig.GUEST_HOST)


@pytest.fixture
def host_stack(e2e_source: tuple[Path, dict[str, bytes], dict]) -> Iterator[Stack]:
    """``bootserver serve`` on 127.0.0.1 whose ``base_url`` is ``http://127.0.0.1:<port>`` (for
    clients that run on the host, like Ignition). Fresh node timeline per test; tests may change
    ``real.ign`` (restored afterwards)."""
    work, artifacts, metadata = e2e_source
    real = work / "real.ign"
    original = real.read_bytes()
    try:
        yield from serve_stack(work, artifacts, metadata, name="host", base_host="127.0.0.1")
    finally:
        real.write_bytes(original)


@pytest.fixture(scope="session")
def life_source(tools: rig.Tools, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The stand-in's stream, synced: a local upstream serves the stand-in's kernel, initramfs and rootfs
    (the metal image) named in stream metadata (``stream.json``), and ``sync-images`` fills ``cache/``
    for stream :data:`standin.STANDIN_STREAM`. Yields the folder; shared by the whole-life test and the OpenShift
    import's boot."""
    need(tools, "qemu", "busybox", "vmlinuz", "modules_dir", "ignition", "ipxe_efi_rom")
    parts = standin.find_standin_tools(tools)
    if parts.missing():
        msg = "stand-in part missing: " + "; ".join(parts.missing()) + " (see docs/testing.md)"
        if in_ci():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    artifacts = standin.build_standin(parts).artifacts()
    work = tmp_path_factory.mktemp("life")
    with rig.StaticServer({}) as upstream:
        doc = stream_metadata(upstream.url(""), artifacts)
        for kind, art in doc["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["pxe"].items():
            upstream.routes[art["location"].removeprefix(upstream.url(""))] = artifacts[kind]
        (work / "stream.json").write_text(json.dumps(doc))
        cfg = work / "sync.yaml"
        cfg.write_text(yaml.safe_dump({
            "cache_dir": str(work / "cache"), "state_dir": str(work / "sync-state"),
            "streams": {standin.STANDIN_STREAM: {"metadata": str(work / "stream.json")}},
            "profiles": {"sync": {"stream": standin.STANDIN_STREAM, "mode": "live"}}}))
        p = run_bootserver("sync-images", "--config", str(cfg), timeout=120)
        assert p.returncode == 0, p.stderr
    yield work
