"""The server's security checks through aiohttp's test server on 127.0.0.1: signed URLs (one 403 for
every refusal), source-address binding, the generic entry, plain-HTTP configs, the concurrency cap,
request limits, a path-traversal corpus sent as raw bytes, and logs free of signatures and secrets."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest
from aiohttp import web
from support.clients import start_app
from support.security import SECRET, holding_the_only_slot, make_config
from support.signing import FIXED_KEY, FIXED_NOW, fixed_signer, relative, signed

from bootserver.config import parse_config
from bootserver.http.app import add_route, create_app, runner_kwargs
from bootserver.http.gate import FORBIDDEN_BODY
from bootserver.signing import sign
from bootserver.tls import init_tls
from bootserver.urls import Route


@pytest.fixture
def config(tmp_path: Path):
    return make_config(tmp_path)


@pytest.mark.parametrize("path", ["/ipxe/n0", "/ignition/n0", "/ignition/n0/config"])
async def test_refusals_are_one_and_the_same_403(client, path: str) -> None:
    good = signed(path, "n0")
    assert (await client.get(good)).status == 200
    exp = FIXED_NOW + 3600
    sig = sign(FIXED_KEY, "n0", path, exp)
    other_path = "/ignition/n0" if path == "/ipxe/n0" else "/ipxe/n0"
    bad = [
        path,                                                     # missing
        f"{path}?exp={exp}",                                      # missing sig
        f"{path}?sig={sig}",                                      # missing exp
        signed(path, "n0", exp=FIXED_NOW),                        # expired (exp == now)
        signed(path, "n0", exp=FIXED_NOW - 86400),                # long expired
        f"{path}?exp={exp + 3600}&sig={sig}",                     # moved expiry
        f"{path}?exp={exp}&sig={sig[:-2]}AA",                     # forged
        signed(path, "n0", key=b"x" * 32),                        # other key
        signed(path.replace("n0", "n1"), "n1").replace("n1", "n0", 1),  # other node's signature
        f"{path}?{signed(other_path, 'n0').split('?')[1]}",      # other path's signature
        f"{path}?exp=abc&sig={sig}",                              # malformed
    ]
    for url in bad:
        r = await client.get(url)
        assert r.status == 403, url
        assert await r.text() == FORBIDDEN_BODY
        assert r.content_type == "text/plain"


async def test_artifacts_and_healthz_need_no_signature(client) -> None:
    assert (await client.get("/healthz")).status == 200
    r = await client.get("/artifacts/rhcos-4.16/x86_64/x/missing")
    assert r.status == 404  # not 403: artifact endpoints are public


async def test_served_script_and_stub_carry_signed_urls_that_work(client) -> None:
    script = await (await client.get(signed("/ipxe/n0", "n0"))).text()
    kernel = next(line for line in script.splitlines() if line.startswith("kernel "))
    stub_url = next(w.split("=", 1)[1] for w in kernel.split() if w.startswith("coreos.inst.ignition_url="))
    assert "?exp=" in stub_url and "&sig=" in stub_url
    stub = json.loads(await (await client.get(relative(stub_url))).read())
    source = stub["ignition"]["config"]["merge"][0]["source"]
    r = await client.get(relative(source))
    assert r.status == 200 and SECRET in await r.text()
    exp = int(source.split("exp=")[1].split("&")[0])
    assert exp >= FIXED_NOW + 86400 and exp % 3600 == 0


async def test_source_address_binding(aiohttp_client, reference: Path, tmp_path: Path) -> None:
    config = make_config(tmp_path, server={"trusted_proxies": ["127.0.0.1"]}, nodes={
        "n0": {"profile": "p", "addresses": ["10.0.0.0/8", "2001:db8::/32"], "mac": "52:54:00:12:34:56"},
        "n1": {"profile": "p", "addresses": ["127.0.0.1"], "mac": "52:54:00:12:34:57"}})
    client = await start_app(aiohttp_client, config)
    for path in ("/ipxe/n0", "/ignition/n0", "/ignition/n0/config"):
        assert (await client.get(signed(path, "n0"))).status == 403  # from 127.0.0.1
        for xff in ("10.1.2.3", "192.0.2.9, 10.1.2.3", "2001:db8::5"):
            r = await client.get(signed(path, "n0"), headers={"X-Forwarded-For": xff})
            assert r.status == 200, (path, xff)
        r = await client.get(signed(path, "n0"), headers={"X-Forwarded-For": "10.1.2.3, 192.0.2.9"})
        assert r.status == 403
    assert (await client.get(signed("/ipxe/n1", "n1"))).status == 200
    # /boot.ipxe follows the binding: elsewhere n0 gets the answer of an unknown machine (discovery)
    assert "/ignition/n1?exp=" in await (await client.get("/boot.ipxe?mac=52:54:00:12:34:57")).text()
    assert "bs-report" in await (await client.get("/boot.ipxe?mac=52:54:00:12:34:56")).text()
    r = await client.get("/boot.ipxe?mac=52:54:00:12:34:56", headers={"X-Forwarded-For": "10.9.9.9"})
    assert r.status == 200 and "node n0 is installed" in await r.text()  # n0's own answer (installed above)


async def test_forwarded_for_is_ignored_from_untrusted_peers(aiohttp_client, reference, tmp_path) -> None:
    config = make_config(tmp_path, nodes={"n0": {"profile": "p", "addresses": ["10.0.0.0/8"]}})
    client = await start_app(aiohttp_client, config)
    r = await client.get(signed("/ipxe/n0", "n0"), headers={"X-Forwarded-For": "10.1.2.3"})
    assert r.status == 403


@pytest.mark.parametrize("discovery", [True, False])
async def test_generic_entry_needs_binding_or_selectable(aiohttp_client, reference, tmp_path, discovery) -> None:
    """A registered node that may not be handed out gets exactly the answer of an unknown MAC, so the
    generic entry does not tell which MACs are registered: the discovery script (``server.discovery``)
    or, with discovery off, the same 404."""
    config = make_config(tmp_path, server={"discovery": discovery}, nodes={
        "n0": {"profile": "p", "mac": "52:54:00:12:34:56"},
        "n1": {"profile": "p", "mac": "52:54:00:12:34:57", "selectable": True},
        "n2": {"profile": "p", "mac": "52:54:00:12:34:58", "addresses": ["10.0.0.0/8"]}})
    client = await start_app(aiohttp_client, config)
    answers = []
    for mac in ("52:54:00:12:34:56", "52:54:00:12:34:58", "52:54:00:99:99:99"):
        r = await client.get(f"/boot.ipxe?mac={mac}")
        answers.append((r.status, (await r.text()).replace(mac, "MAC"), r.headers["Content-Type"]))
    if discovery:
        assert len(set(answers)) == 1 and answers[0][0] == 200 and "bs-report" in answers[0][1]
    else:
        assert answers == [(404, "no node to boot for mac MAC from this address\n", "text/plain; charset=utf-8")] * 3
    r = await client.get("/boot.ipxe?mac=52:54:00:12:34:57")
    assert r.status == 200
    assert "/ignition/n1?exp=" in await r.text()


def test_addresses_and_proxies_are_validated(tmp_path: Path) -> None:
    from bootserver.errors import ConfigError

    base = {"streams": {}, "profiles": {}}
    with pytest.raises(ConfigError, match=r"^t.yaml: server.trusted_proxies: item 1: not an IP"):
        parse_config({**base, "server": {"trusted_proxies": ["10.0.0.1", "10.0.0.0/33"]}}, "t.yaml", tmp_path)
    with pytest.raises(ConfigError, match=r"^t.yaml: server.max_concurrent"):
        parse_config({**base, "server": {"max_concurrent": 0}}, "t.yaml", tmp_path)
    with pytest.raises(ConfigError, match=r"^t.yaml: server.tls.listen: must be host:port"):
        parse_config({**base, "server": {"tls": {"listen": "8443"}}}, "t.yaml", tmp_path)
    with pytest.raises(ConfigError, match=r"^t.yaml: server.signing.install_ttl: not a duration"):
        parse_config({**base, "server": {"signing": {"install_ttl": "soon"}}}, "t.yaml", tmp_path)


@pytest.mark.parametrize("allow", [False, True])
async def test_real_config_over_plain_http_only_when_allowed(aiohttp_client, reference, tmp_path,
                                                             allow: bool) -> None:
    init_tls(tmp_path / "state" / "tls", ["boot.example.net"])
    config = make_config(tmp_path, server={
        "tls": {"listen": "127.0.0.1:8443", "allow_plain_configs": allow}})
    client = await start_app(aiohttp_client, config)
    r = await client.get(signed("/ignition/n0", "n0"))
    assert r.status == 200  # the stub is served over plain HTTP: it carries the CA
    stub = json.loads(await r.read())
    ca = (tmp_path / "state/tls/ca.crt").read_bytes()
    import base64

    cas = stub["ignition"]["security"]["tls"]["certificateAuthorities"]
    assert cas == [{"source": "data:;base64," + base64.b64encode(ca).decode()}]
    source = stub["ignition"]["config"]["merge"][0]["source"]
    assert source.startswith("https://boot.example.net:8443/ignition/n0/config?exp=")
    r = await client.get(relative(source))
    assert r.status == (200 if allow else 403)


async def test_concurrency_cap_answers_503_with_retry_after(aiohttp_client, reference, tmp_path) -> None:
    config = make_config(tmp_path, server={"max_concurrent": 1, "max_queued": 0})
    client, first, release = await holding_the_only_slot(aiohttp_client, config)
    r = await client.get(signed("/ipxe/n0", "n0"))
    # one slot busy, no one ahead: at most a second's service at the slowest rate the schedule assumes
    # (1 request/s; a busy second of a slow machine measures that), plus the spread (a random fraction
    # of a second); the schedule itself is tested on a fixed clock in test_admission.py
    assert r.status == 503 and r.headers["Retry-After"] in {"1", "2"}, r.headers
    assert (await client.get("/healthz")).status == 200  # liveness is never capped
    release.set()
    assert (await first).status == 200
    assert (await client.get(signed("/ipxe/n0", "n0"))).status == 200


async def test_requests_over_the_cap_wait_in_line_until_the_queue_is_full(aiohttp_client, reference,
                                                                          tmp_path) -> None:
    config = make_config(tmp_path, server={"max_concurrent": 1, "max_queued": 1})
    client, first, release = await holding_the_only_slot(aiohttp_client, config)
    # two more: one takes the only queue place and waits, the other is refused at once
    two = {asyncio.create_task(client.get(signed("/ipxe/n0", "n0"))) for _ in range(2)}
    done, pending = await asyncio.wait(two, return_when=asyncio.FIRST_COMPLETED)
    (refused,), (queued,) = done, pending
    r = refused.result()
    # as above, with one more request ahead of it (the one waiting in the queue)
    assert r.status == 503 and r.headers["Retry-After"] in {"1", "2", "3"}, r.headers
    assert not queued.done()
    release.set()
    assert (await first).status == 200
    assert (await queued).status == 200


async def test_request_timeout_answers_503(aiohttp_client, reference, tmp_path) -> None:
    config = make_config(tmp_path, server={"request_timeout": 1})
    app = create_app(config, fixed_signer())
    never = asyncio.Event()

    async def stuck(request: web.Request) -> web.Response:
        await never.wait()
        return web.Response()

    add_route(app, Route("", "/stuck"), stuck)
    client = await aiohttp_client(app)
    loop = asyncio.get_running_loop()
    started = loop.time()
    r = await client.get("/stuck")
    assert r.status == 503 and "Retry-After" in r.headers
    assert 1.0 <= loop.time() - started < 1.0 + 0.1 + 0.5  # request_timeout, then at most one tick (0.1 s)
    # the same connection (aiohttp serves a connection's requests in one task) serves on, uncancelled
    for _ in range(3):
        assert (await client.get(signed("/ipxe/n0", "n0"))).status == 200
    r, quick = await asyncio.gather(client.get("/stuck"), client.get(signed("/ipxe/n0", "n0")))
    assert (r.status, quick.status) == (503, 200)


async def raw_get(host: str, port: int, target: bytes, headers: bytes = b"") -> tuple[int, bytes]:
    """Send ``GET <target>`` byte for byte (no client-side normalisation); return (status, body)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + headers + b"\r\n")
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


async def test_request_line_and_header_limits(aiohttp_server, reference, tmp_path) -> None:
    config = make_config(tmp_path)
    app = create_app(config, fixed_signer())
    server = await aiohttp_server(app, host="127.0.0.1", **runner_kwargs(app))
    status, _ = await raw_get("127.0.0.1", server.port, b"/healthz?" + b"a" * 9000)
    assert status in (400, 414)
    status, _ = await raw_get("127.0.0.1", server.port, b"/healthz", b"X-Big: " + b"b" * 9000 + b"\r\n")
    assert status in (400, 431)
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(100))
    status, _ = await raw_get("127.0.0.1", server.port, b"/healthz", many)
    assert status in (400, 431)
    status, _ = await raw_get("127.0.0.1", server.port, b"/healthz")
    assert status == 200


def traversal_corpus(release: str) -> list[bytes]:
    """At least 50 raw request targets that try to leave the cache."""
    dots = ["..", "%2e%2e", "%2E%2E", ".%2e", "%2e.", "%252e%252e", "..%00", "%c0%ae%c0%ae", "...", ".",
            "..;", "%2e%2e%2f..", "..%2f..", "..%5c..", "..\\..", "%2e%2e%5c"]
    targets = []
    for d in dots:
        targets += [f"/artifacts/{d}/{d}/{d}/{d}/secret", f"/artifacts/rhcos-4.16/x86_64/{d}/secret",
                    f"/artifacts/rhcos-4.16/x86_64/{release}/{d}%2f{d}%2f{d}%2f{d}%2f{d}%2fsecret"]
    targets += [
        "/artifacts/%2fetc%2fpasswd/x/y/z", "/artifacts//etc/passwd", "/artifacts/rhcos-4.16/x86_64/x//etc/passwd",
        "//etc/passwd", "/../../../../etc/passwd", "/artifacts/../../../../etc/passwd",
        f"/artifacts/rhcos-4.16/x86_64/{release}/evil", f"/artifacts/rhcos-4.16/x86_64/{release}/evil-dir",
        "/artifacts/rhcos-4.16/x86_64/evil-rel/secret", "/artifacts/link/x86_64/a/secret",
        f"/artifacts/rhcos-4.16/x86_64/{release}/%2e%2e%2f%2e%2e%2f%2e%2e%2f%2e%2e%2f%2e%2e%2fsecret",
        "/artifacts/rhcos-4.16/x86_64/..%2f..%2f..%2f..%2f..%2fsecret/secret",
        "/%2e%2e/%2e%2e/%2e%2e/etc/passwd", "/artifacts/%2e%2e/%2e%2e/%2e%2e/%2e%2e",
        "/ignition/..%2f..%2fsecret", "/ipxe/..%2f..%2fsecret", "/artifacts/./././secret",
        f"/artifacts/rhcos-4.16/x86_64/{release}/.secret", "/artifacts/tmp/x/y/z",
        f"/artifacts/rhcos-4.16/x86_64/{release}/%2Fsecret",
    ]
    return [t.encode() for t in targets]


async def test_traversal_corpus_never_leaves_the_cache(aiohttp_server, reference, tmp_path, publish_kernel) -> None:
    config = make_config(tmp_path)
    _path, data, rel = publish_kernel(config, 1000)
    secret_text = "SECRET-OUTSIDE-THE-CACHE-91b7"
    (tmp_path / "secret").write_text(secret_text)
    (tmp_path / "secret-dir").mkdir()
    (tmp_path / "secret-dir" / "secret").write_text(secret_text)
    reldir = config.cache_dir / "artifacts/rhcos-4.16/x86_64" / rel.version
    (reldir / "evil").symlink_to(tmp_path / "secret")
    (reldir / "evil-dir").symlink_to(tmp_path / "secret-dir")
    (reldir.parent / "evil-rel").symlink_to(tmp_path / "secret-dir")
    (config.cache_dir / "artifacts" / "link").symlink_to(tmp_path)
    server = await aiohttp_server(create_app(config, fixed_signer()), host="127.0.0.1")
    corpus = traversal_corpus(rel.version)
    assert len(corpus) >= 50
    for target in corpus:
        status, body = await raw_get("127.0.0.1", server.port, target)
        assert secret_text.encode() not in body and b"root:" not in body, target
        assert status in (400, 403, 404), (target, status)
    # the real artifact is still served, so the corpus did not pass by accident
    status, body = await raw_get("127.0.0.1", server.port,
                                 f"/artifacts/rhcos-4.16/x86_64/{rel.version}/{rel.kernel.filename}".encode())
    assert status == 200 and body == data


async def test_logs_never_show_signatures_or_config_contents(aiohttp_server, aiohttp_client, reference,
                                                             tmp_path, caplog) -> None:
    config = make_config(tmp_path)
    caplog.set_level(logging.DEBUG)
    app = create_app(config, fixed_signer())
    server = await aiohttp_server(app, host="127.0.0.1", **runner_kwargs(app))
    client = await aiohttp_client(server)
    sigs = []
    for path, node in [("/ipxe/n0", "n0"), ("/ignition/n0", "n0"), ("/ignition/n0/config", "n0"),
                       ("/ignition/n1/config", "n0"), ("/ipxe/nobody", "nobody")]:
        url = signed(path, node)
        sigs.append(url.split("sig=")[1])
        await (await client.get(url)).read()
    await (await client.get(signed("/ignition/n0", "n0", exp=FIXED_NOW - 1))).read()
    sigs.append(signed("/ignition/n0", "n0", exp=FIXED_NOW - 1).split("sig=")[1])
    stub = json.loads(await (await client.get(signed("/ignition/n0", "n0"))).read())
    sigs.append(stub["ignition"]["config"]["merge"][0]["source"].split("sig=")[1])
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "GET /ignition/n0/config 200" in text and "sig=" not in text  # the access log ran, query-less
    for s in sigs:
        assert s not in text
    assert SECRET not in text and "sshAuthorizedKeys" not in text


async def test_an_unknown_key_while_the_keys_file_cannot_be_read_is_503_not_403(
        aiohttp_client, reference: Path, tmp_path: Path) -> None:
    """A URL signed with a key this server does not know is refused (403) while ``keys.json`` reads;
    while it cannot be read, that key may have been rotated in by another process, so the answer is
    503 with ``Retry-After`` (iPXE and Ignition retry), and the truth once the file reads again. URLs
    signed with the keys in hand keep working; an expired or malformed one stays 403."""
    import time

    from bootserver.signing import Keyring, Signer

    config = make_config(tmp_path)
    server_keys = Keyring.load_or_create(config.state_dir)
    client = await start_app(aiohttp_client, config, Signer(server_keys))
    now = int(time.time())
    known = signed("/ipxe/n0", "n0", exp=now + 3600, key=server_keys.current)
    forged = signed("/ipxe/n0", "n0", exp=now + 3600, key=b"y" * 32)
    assert (await client.get(forged)).status == 403  # the file reads: the truth

    keys_file = config.state_dir / "keys.json"
    rotated = Keyring.load_or_create(config.state_dir).rotate(grace=3600)  # another process rotates,
    newer = signed("/ipxe/n0", "n0", exp=now + 3600, key=rotated.current)
    rotated_text = keys_file.read_text()
    keys_file.write_text("{half an edit")  # then the file no longer parses before this server read it
    for url in (newer, forged):
        r = await client.get(url)
        assert r.status == 503 and r.headers["Retry-After"] == "5"
        body = await r.text()
        assert body == "signing keys cannot be read now; retry later\n" and "keys.json" not in body
    assert (await client.get(known)).status == 200
    for url in (signed("/ipxe/n0", "n0", exp=now - 60, key=rotated.current), "/ipxe/n0",
                f"/ipxe/n0?exp={now + 3600}&sig=short"):
        assert (await client.get(url)).status == 403, url

    keys_file.unlink()
    assert (await client.get(newer)).status == 503
    keys_file.write_text(rotated_text)
    assert (await client.get(newer)).status == 200
    assert (await client.get(forged)).status == 403
