"""Signed URLs: the pure verify function (property test), the keys file, rotation, and URL shapes."""

from __future__ import annotations

import json
import stat
import threading
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.signing import FIXED_NOW, fixed_signer

from bootserver.config import parse_config
from bootserver.signing import KeyFileError, Keyring, Signer, expiry, parse_duration, redact, sign, verify
from bootserver.urls import Urls

KEYS = (b"k" * 32, b"K" * 32, bytes(16))
keys = st.sampled_from(KEYS)
names = st.text(alphabet="ab-0/.%\n", min_size=1, max_size=5)
times = st.integers(min_value=1, max_value=4_000_000_000)
tampered = st.one_of(st.none(), st.text(alphabet="0123456789AB_-x", max_size=44))


# 2,000 examples: each of the 64 masks (which parts are swapped) about 30 times over the 3 keys; 10,000 cost
# 13-73 s of `make test` (load 1-6) and found nothing the first 2,000 did not
@settings(max_examples=2000, deadline=None, database=None)
@given(key=keys, node=names, path=names, exp=times, now=times, key2=keys, other=names,
       exp2=times, junk=tampered, mask=st.integers(min_value=0, max_value=63))
def test_only_issued_urls_verify(key: bytes, node: str, path: str, exp: int, now: int, key2: bytes,
                                 other: str, exp2: int, junk: str | None, mask: int) -> None:
    """A URL verifies only with the node, path and expiry it was issued for, the key that issued it,
    and only before its expiry; every other combination (forged or truncated signature, other node,
    other path, moved expiry, other key, missing or malformed parts) is refused. ``mask`` picks which
    parts of the issued URL are swapped for others."""
    if "\n" in node or "\n" in path:
        with pytest.raises(ValueError):
            sign(key, node, path, exp)
        assert not verify([key], node, path, str(exp), "A" * 43, now)
        return
    sig = sign(key, node, path, exp)
    cand_exp: str | None = str(exp2) if mask & 4 else str(exp)
    cand_sig: str | None = sig
    if mask & 8:
        cand_sig = junk
    if mask & 32:
        cand_exp = junk
    cand = (other if mask & 1 else node, other if mask & 2 else path, cand_exp, cand_sig,
            key2 if mask & 16 else key)
    accepted = verify([cand[4]], cand[0], cand[1], cand[2], cand[3], now)
    issued = cand == (node, path, str(exp), sig, key)
    assert accepted == (issued and exp > now)


def test_verify_accepts_any_listed_key_and_rejects_at_expiry() -> None:
    old, new = b"o" * 32, b"n" * 32
    sig = sign(old, "n", "/ipxe/n", 7200)
    assert verify([new, old], "n", "/ipxe/n", "7200", sig, 7199)
    assert not verify([new], "n", "/ipxe/n", "7200", sig, 7199)
    assert not verify([new, old], "n", "/ipxe/n", "7200", sig, 7200)
    assert not verify([old], "n", "/ipxe/n", "07200", sig, 0)  # one spelling per expiry


def test_expiry_rounds_up_to_the_hour() -> None:
    assert expiry(0, 1) == 3600
    assert expiry(3600, 3600) == 7200
    assert expiry(3601, 3600) == 10800
    assert expiry(FIXED_NOW + 1, 86400) == expiry(FIXED_NOW + 3599, 86400)


@pytest.mark.parametrize("text,seconds", [("3600", 3600), ("30m", 1800), ("24h", 86400), ("7d", 604800),
                                          (90, 90)])
def test_parse_duration(text, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "0", "-1h", "1w", "h", "1.5h", True])
def test_parse_duration_rejects(bad) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_keys_file_is_created_0600_once_under_a_race(tmp_path: Path) -> None:
    state = tmp_path / "state"
    rings: list[Keyring] = []
    barrier = threading.Barrier(8)

    def load() -> None:
        barrier.wait()
        rings.append(Keyring.load_or_create(state))

    threads = [threading.Thread(target=load) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({r.current for r in rings}) == 1
    path = state / "keys.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in state.iterdir()] == ["keys.json"]  # no temp files left
    assert Keyring.load_or_create(state).current == rings[0].current


def test_rotation_keeps_the_old_key_for_the_grace_period(tmp_path: Path) -> None:
    t = [1_000_000.0]
    ring = Keyring.load_or_create(tmp_path, now=lambda: t[0])
    old_url = Signer(ring, now=lambda: t[0]).query("n", "/ipxe/n", 86400 * 7)
    q = {k: v[0] for k, v in parse_qs(old_url).items()}
    rotated = ring.rotate(grace=3600, now=lambda: t[0])
    assert rotated.current != ring.current
    assert stat.S_IMODE(rotated.path.stat().st_mode) == 0o600
    reloaded = Keyring.load_or_create(tmp_path)
    signer = Signer(reloaded, now=lambda: t[0])
    assert signer.check("n", "/ipxe/n", q["exp"], q["sig"])
    t[0] += 3601
    assert not signer.check("n", "/ipxe/n", q["exp"], q["sig"])
    # a second rotation after the grace period drops the retired key
    again = reloaded.rotate(grace=60, now=lambda: t[0])
    assert len(again.entries) == 2 and ring.current not in [e.key for e in again.entries]


def test_running_signer_follows_a_rotation_by_another_process(tmp_path: Path) -> None:
    """A server started before `bootserver keys rotate` accepts URLs signed with the new key, and
    signs new URLs with it; a broken keys file later keeps the keys in use."""
    server = Signer(Keyring.load_or_create(tmp_path))
    before = server.query("n", "/ipxe/n", 3600)
    Keyring.load_or_create(tmp_path).rotate(grace=3600)          # `bootserver keys rotate`
    cli = Signer(Keyring.load_or_create(tmp_path))               # `bootserver url n`
    q = {k: v[0] for k, v in parse_qs(cli.query("n", "/ipxe/n", 3600)).items()}
    assert server.check("n", "/ipxe/n", q["exp"], q["sig"])
    assert server.query("n", "/ipxe/n", 3600) != before
    assert server.keyring.current == cli.keyring.current
    (tmp_path / "keys.json").write_text("not json")
    assert server.check("n", "/ipxe/n", q["exp"], q["sig"])


def test_malformed_keys_file_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "keys.json").write_text(json.dumps({"keys": []}))
    with pytest.raises(KeyFileError, match=r"keys\.json"):
        Keyring.load_or_create(tmp_path)


def test_urls_sign_every_per_node_url_and_no_artifact(reference: Path, tmp_path: Path) -> None:
    config = parse_config({
        "server": {"base_url": "http://boot.example.net:8080", "tls": {"listen": "0.0.0.0:8443"}},
        "streams": {"r": {"metadata": str(reference / "rhcos-stream-4.16.json")}},
        "profiles": {"p": {"stream": "r", "install_dev": "/dev/sda"}},
        "nodes": {"n0": {"profile": "p"}},
    }, "t.yaml", tmp_path)
    signer = fixed_signer()
    urls = Urls(config, signer)
    for url, base, path, ttl in [
            (urls.chain("n0"), "http://boot.example.net:8080", "/ipxe/n0", 3650 * 86400),
            (urls.chain("n0", 3600), "http://boot.example.net:8080", "/ipxe/n0", 3600),
            (urls.stub("n0"), "http://boot.example.net:8080", "/ignition/n0", 86400),
            (urls.real_config("n0"), "https://boot.example.net:8443", "/ignition/n0/config", 86400)]:
        parts = urlsplit(url)
        assert f"{parts.scheme}://{parts.netloc}" == base and parts.path == path
        q = {k: v[0] for k, v in parse_qs(parts.query).items()}
        assert int(q["exp"]) == expiry(FIXED_NOW, ttl)
        assert signer.check("n0", path, q["exp"], q["sig"])
    assert urls.userdata("n0") == f"#!ipxe\nchain --autofree {urls.chain('n0')}\n"


def test_redact() -> None:
    assert redact("http://h/ignition/n?exp=1&sig=abc") == "http://h/ignition/n?exp=1&sig=REDACTED"
    assert redact("/p?token=x&a=b") == "/p?token=REDACTED&a=b"
    assert redact("/p") == "/p"


async def test_cli_keys_rotate_and_url_expiry(reference: Path, tmp_path: Path) -> None:
    from support.helpers import run_cli, write_config

    config = write_config(tmp_path / "b.yaml", {
        "server": {"base_url": "http://boot.example.net:8080", "signing": {"key_grace": "2h"}},
        "state_dir": "state",
        "streams": {"r": {"metadata": str(reference / "rhcos-stream-4.16.json")}},
        "profiles": {"p": {"stream": "r", "install_dev": "/dev/sda"}},
        "nodes": {"n0": {"profile": "p"}}})
    rc, out, err = await run_cli("url", "n0", "--config", str(config))
    assert rc == 0, err
    before = json.loads((tmp_path / "state/keys.json").read_text())["keys"]
    rc, out, err = await run_cli("keys", "rotate", "--config", str(config))
    assert rc == 0 and "7200" in out, err
    after = json.loads((tmp_path / "state/keys.json").read_text())["keys"]
    assert after[1]["key"] == before[0]["key"] and after[1]["retires"] - after[0]["created"] == 7200
    rc, out, err = await run_cli("url", "n0", "--expires", "never", "--config", str(config))
    assert rc == 2 and "--expires" in err


def test_a_remembered_signature_still_expires_and_is_revoked_with_its_key(tmp_path: Path, monkeypatch) -> None:
    """A signature verified once is remembered (the same URL again skips the HMAC), but never past its
    ``exp``, past its key's retirement, nor once the keys file no longer holds its key."""
    import time as _time

    from bootserver import signing

    monkeypatch.setattr(signing, "KEYS_REUSE", 0.0)  # every check looks at the keys file
    t = [float(int(_time.time()))]
    server = Signer(Keyring.load_or_create(tmp_path), now=lambda: t[0])
    q = {k: v[0] for k, v in parse_qs(server.query("n", "/ipxe/n", 3600)).items()}
    exp = int(q["exp"])
    for _ in range(3):
        assert server.check("n", "/ipxe/n", q["exp"], q["sig"])
    assert not server.check("n", "/ipxe/n", q["exp"], q["sig"][:-1] + ("A" if q["sig"][-1] != "A" else "B"))
    t[0] = exp
    assert not server.check("n", "/ipxe/n", q["exp"], q["sig"])  # expired, remembered or not

    t[0] = exp - 3600
    assert server.check("n", "/ipxe/n", q["exp"], q["sig"])
    Keyring.load_or_create(tmp_path).rotate(grace=60, now=lambda: t[0])  # the key retires in 60 s
    assert server.check("n", "/ipxe/n", q["exp"], q["sig"])
    t[0] += 61
    assert not server.check("n", "/ipxe/n", q["exp"], q["sig"])  # its key retired

    t[0] = exp - 3600
    server = Signer(Keyring.load_or_create(tmp_path), now=lambda: t[0])
    q = {k: v[0] for k, v in parse_qs(server.query("n", "/ipxe/n", 3600)).items()}
    assert server.check("n", "/ipxe/n", q["exp"], q["sig"])
    Keyring.load_or_create(tmp_path).rotate(grace=0, now=lambda: t[0])  # revoked at once
    assert not server.check("n", "/ipxe/n", q["exp"], q["sig"])
