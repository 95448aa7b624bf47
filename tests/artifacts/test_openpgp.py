"""OpenPGP signatures on artifacts (issue 31, item 4), with keys the suite generates (Debian's gpg, in a
throwaway home): every download is verified by gpgv while it streams, in the same pass as its sha256, and
nothing is published unless both hold. Good; a tampered artifact (its sha256 in the metadata changed too,
so only the signature can catch it); a tampered signature; another key's signature; a missing one. Each
bad case is one line naming the artifact and key ID, ``sync-images`` exits 1, a read-through client gets
no good artifact, and the cache holds nothing."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.helpers import run_cli, write_config
from support.upstreams import Upstream, payload

from bootserver.artifacts.openpgp import binary_keyring, default_keyring
from bootserver.config import load_config
from bootserver.http.app import create_app

RELEASE = "41.20250101.3.0"


def gpg(home: Path, *args: str, data: bytes | None = None) -> bytes:
    p = subprocess.run(["gpg", "--homedir", str(home), "--batch", "--yes", "--pinentry-mode", "loopback",
                        "--passphrase", "", *args], input=data, capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Two signing keys (``good``, in the configured keyring, and ``other``, not in it): their homes,
    key IDs, and the good key's public keyring file (armored). gpg's agents stop afterwards."""
    out: dict[str, Any] = {}
    for name in ("good", "other"):
        home = tmp_path_factory.mktemp(f"gnupg-{name}")
        os.chmod(home, 0o700)
        gpg(home, "--quick-gen-key", f"bootserver test {name} <{name}@example.invalid>", "rsa2048", "sign", "never")
        listing = gpg(home, "--with-colons", "--list-keys").decode()
        keyid = next(line.split(":")[4] for line in listing.splitlines() if line.startswith("pub:"))
        out[name] = {"home": home, "keyid": keyid}
    keyring = tmp_path_factory.mktemp("keyring") / "keys.asc"
    keyring.write_bytes(gpg(out["good"]["home"], "--armor", "--export"))
    out["keyring"] = keyring
    try:
        yield out
    finally:
        for name in ("good", "other"):
            subprocess.run(["gpgconf", "--homedir", str(out[name]["home"]), "--kill", "gpg-agent"], timeout=30,
                           capture_output=True)


def sign(keys: dict[str, Any], who: str, data: bytes) -> bytes:
    return gpg(keys[who]["home"], "--detach-sign", data=data)


CASES = {
    "good": "",
    "tampered artifact": "BAD OpenPGP signature by key ID {good}: the artifact or its signature was tampered with",
    "tampered signature": "",  # gpgv's verdict on a damaged packet: checked to be a refusal below
    "another key": "signed by key ID {other}, which is not in the keyring (upstream.signature_keys, or Fedora's keys)",
    "missing signature": "its OpenPGP signature cannot be fetched",
}


def setup_case(case: str, keys: dict[str, Any], upstream: Upstream, tmp_path: Path) -> tuple[Path, str]:
    """A config whose stream's kernel is served as ``case`` says (initramfs and rootfs signed well);
    returns (config path, the kernel's file name)."""
    pxe = {}
    for kind in ("kernel", "initramfs", "rootfs"):
        data = payload(kind, 256 * 1024)
        signature = sign(keys, "good", data)
        served = data
        if kind == "kernel":
            if case == "tampered artifact":
                served = data[:-1] + bytes([data[-1] ^ 1])  # and the metadata's sha256 follows it
            elif case == "tampered signature":
                signature = signature[:-8] + bytes(b ^ 0x55 for b in signature[-8:])
            elif case == "another key":
                signature = sign(keys, "other", data)
        name = f"fedora-coreos-{RELEASE}-live-{kind}.x86_64"
        path = f"/prod/{RELEASE}/{name}"
        upstream.files[path] = served
        if not (kind == "kernel" and case == "missing signature"):
            upstream.files[path + ".sig"] = signature
        pxe[kind] = {"location": upstream.url + path, "sha256": hashlib.sha256(served).hexdigest(),
                     "signature": upstream.url + path + ".sig"}
    doc = {"stream": "stable", "metadata": {"last-modified": "2025-01-01T00:00:00Z"},
           "architectures": {"x86_64": {"artifacts": {"metal": {"release": RELEASE, "formats": {"pxe": pxe}}}}}}
    (tmp_path / "stream.json").write_text(json.dumps(doc))
    config = write_config(tmp_path / "bootserver.yaml", {
        "cache_dir": str(tmp_path / "cache"), "state_dir": str(tmp_path / "state"),
        "upstream": {"signature_keys": str(keys["keyring"])},
        "streams": {"fcos": {"metadata": str(tmp_path / "stream.json")}},
        "profiles": {"live": {"stream": "fcos", "mode": "live"}},
        "nodes": {"n": {"profile": "live"}}})
    return config, f"fedora-coreos-{RELEASE}-live-kernel.x86_64"


def published(tmp_path: Path) -> list[str]:
    root = tmp_path / "cache" / "artifacts"
    return sorted(p.name for p in root.rglob("*") if p.is_file() and not p.name.endswith(".sha256")) \
        if root.is_dir() else []


@pytest.mark.parametrize("case", list(CASES))
async def test_sync_images_publishes_only_artifacts_whose_signature_holds(case: str, keys: dict[str, Any],
                                                                          upstream: Upstream, tmp_path: Path) -> None:
    config, kernel = setup_case(case, keys, upstream, tmp_path)
    rc, out, err = await run_cli("sync-images", "--config", str(config), timeout=120)
    if case == "good":
        assert rc == 0, err
        assert len(published(tmp_path)) == 3 and kernel in published(tmp_path)
        return
    assert rc == 1, (out, err)
    failure, summary = err.splitlines()  # one line for the artifact, then sync-images' summary
    assert failure.startswith(f"bootserver: fcos x86_64 {RELEASE} kernel: "), err  # sync-images' label
    assert f"fcos {RELEASE} {kernel}: " in failure, err  # the download's own words name the file
    assert summary == "bootserver: sync-images: 1 of 3 artifacts failed (each named above); the others are synced"
    expected = CASES[case].format(good=keys["good"]["keyid"][-16:], other=keys["other"]["keyid"][-16:])
    if case == "tampered signature":
        assert "OpenPGP" in err and "signature" in err, err
    else:
        assert expected in err, err
    assert kernel not in published(tmp_path)  # nothing published for the bad one
    assert len(published(tmp_path)) == 2  # the initramfs and rootfs were still synced
    assert not [p for p in (tmp_path / "cache").rglob("*kernel*") if p.is_file()], "a kernel file was left"


async def test_a_read_through_client_never_gets_a_bad_artifact(aiohttp_client, keys: dict[str, Any],
                                                               upstream: Upstream, tmp_path: Path) -> None:
    config, kernel = setup_case("missing signature", keys, upstream, tmp_path)
    client = await aiohttp_client(create_app(load_config(config)))
    r = await client.get(f"/artifacts/fcos/x86_64/{RELEASE}/{kernel}")
    assert r.status == 502 and "upstream problem" in await r.text()
    assert kernel not in published(tmp_path)
    # the good ones are served (and verified) as they stream
    initramfs = kernel.replace("kernel", "initramfs")
    r = await client.get(f"/artifacts/fcos/x86_64/{RELEASE}/{initramfs}")
    assert r.status == 200 and await r.read() == payload("initramfs", 256 * 1024)


async def test_verify_signatures_false_checks_the_sha256_only(keys: dict[str, Any], upstream: Upstream,
                                                              tmp_path: Path) -> None:
    config, kernel = setup_case("another key", keys, upstream, tmp_path)
    doc = load_config(config)
    text = config.read_text().replace("metadata: ", "verify_signatures: false\n    metadata: ", 1)
    config.write_text(text)
    assert load_config(config).streams["fcos"].verify_signatures is False and doc is not None
    rc, _, err = await run_cli("sync-images", "--config", str(config), timeout=120)
    assert rc == 0, err
    assert kernel in published(tmp_path)
    assert not [p for p in upstream.gets if p.endswith(".sig")]  # not even fetched


def test_the_shipped_keys_are_fedoras(tmp_path: Path) -> None:
    keyring = binary_keyring(default_keyring())
    os.chmod(tmp_path, 0o700)
    listing = subprocess.run(["gpg", "--homedir", str(tmp_path), "--with-colons", "--show-keys",
                              str(default_keyring())], capture_output=True, text=True, timeout=60)
    fingerprints = [line.split(":")[9] for line in listing.stdout.splitlines() if line.startswith("fpr:")]
    assert "C6E7F081CF80E13146676E88829B606631645531" in fingerprints  # Fedora 43
    assert "567E347AD0044ADE55BA8A5F199E2F91FD431D51" in fingerprints  # Red Hat release key 2
    assert keyring[0] & 0x80  # binary OpenPGP packets
