"""Issue 30: trust what is served, logged and shown, through a real ``bootserver serve`` process and a real
client: no forged log line (text format), ...
"""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
from pathlib import Path

import aiohttp
import pytest
import yaml
from support.helpers import REPO, free_port, run_cli
from support.ranges import ranges
from support.server import ServerProcess
from support.trust import trust_config

from bootserver.files import open_file, read_file, write_changed

#: How every line of the text log starts (logs.TextFormatter): a forged line would not have to.
LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+(\[\d+\])?: ")


async def raw_request(port: int, head: bytes, timeout: float = 10, host: bytes | None = None) -> bytes:
    """Send ``head`` (a request line and headers, without the blank line) to 127.0.0.1:``port`` exactly as
    given, with ``Host`` (default ``127.0.0.1:port``) and ``Connection: close``; return the whole answer."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    host = f"127.0.0.1:{port}".encode() if host is None else host
    try:
        writer.write(head + b"\r\nHost: " + host + b"\r\nConnection: close\r\n\r\n")
        await writer.drain()
        return await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


async def stopped_log(server: ServerProcess) -> list[str]:
    """Stop ``server`` and return its stderr lines (the text log)."""
    await server.stop()
    assert server.proc is not None and server.proc.stderr is not None
    return (await server.proc.stderr.read()).decode().splitlines()


FORGED = "2026-01-01 00:00:00,000 INFO bootserver.access: 10.0.0.9 GET /ipxe/master-0 200 node=master-0"


async def test_no_request_can_forge_a_text_log_line(boot_setup) -> None:
    """CR, LF, NUL, U+2028 and C1 controls in a path, a query value and a header reach the text log
    escaped: every line is one the server wrote, and the requester's text shows as ``\\n``, ``\\x00``..."""
    setup = boot_setup(1024, {"master-0": {"profile": "master", "mac": "52:54:00:12:34:56"}})
    doc = yaml.safe_load(setup.config.read_text())
    doc["server"]["discovery"] = False  # /boot.ipxe's 404 warning line carries the forged mac
    setup.config.write_text(yaml.safe_dump(doc, sort_keys=False))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        server = ServerProcess(setup.config, setup.port)
        await server.start(http)
        try:
            rc, out, err = await run_cli("render", "ipxe", "master-0", "--config", str(setup.config))
            assert rc == 0, err
            stub = next(w.split("=", 1)[1] for w in out.split() if w.startswith("coreos.inst.ignition_url="))
            stub_target = stub.split(str(setup.port), 1)[1].encode()
            forged = FORGED.replace(" ", "%20").encode()
            answers = [
                await raw_request(setup.port, b"GET /artifacts/rhcos-4.16/x86_64/1/k%0a" + forged + b" HTTP/1.1"),
                await raw_request(setup.port, b"GET /artifacts/a%0d%0a" + forged + b"/b/c/d HTTP/1.1"),
                await raw_request(setup.port, b"GET /boot.ipxe?mac=%0d%0a" + forged + b" HTTP/1.1"),
                await raw_request(setup.port, b"GET /nodes%00%c2%85x%e2%80%a8" + forged + b" HTTP/1.1"),
                await raw_request(setup.port, b"GET " + stub_target + b" HTTP/1.1\r\nAccept: "
                                  b"application/vnd.coreos.ignition+json;version=2.0.0,x\xe2\x80\xa8" + forged
                                  .replace(b"%20", b" ")),
            ]
            assert [status_of(a) for a in answers] == [404, 404, 404, 404, 406]
        finally:
            lines = await stopped_log(server)
    assert lines and all(LINE.match(line) for line in lines), "\n".join(lines)
    text = "\n".join(lines)
    assert "/k\\n2026-01-01 00:00:00,000 INFO bootserver.access:" in text
    assert "/a\\r\\n2026-01-01" in text
    assert "\\x00\\x85x\\u20282026-01-01" in text
    assert "x\\u20282026-01-01 00:00:00,000 INFO" in text  # the Accept header quoted in the 406 warning
    assert "404 no node with mac \\r\\n2026-01-01 00:00:00,000 INFO bootserver.access: 10.0.0.9" in text


# --- item 6: start-up says only what is true ---------------------------------------------------------


@pytest.mark.parametrize("key", ["server.listen", "server.tls.listen", "server.admin.listen"])
async def test_a_listener_that_cannot_bind_is_one_line_exit_2_and_nothing_says_listening(
        tmp_path: Path, reference: Path, key: str) -> None:
    port, tls_port, admin_port = free_port(), free_port(), free_port()
    addresses = {"server.listen": f"127.0.0.1:{port}", "server.tls.listen": f"127.0.0.1:{tls_port}",
                 "server.admin.listen": f"127.0.0.1:{admin_port}"}
    path = trust_config(tmp_path, reference, {"listen": addresses["server.listen"],
                                         "tls": {"listen": addresses["server.tls.listen"]},
                                         "admin": {"listen": addresses["server.admin.listen"]}})
    rc, _, err = await run_cli("tls", "init", "--config", str(path))
    assert rc == 0, err
    taken = int(addresses[key].rsplit(":", 1)[1])
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen(1)
        rc, _, err = await run_cli("serve", "--config", str(path), timeout=60)
    assert rc == 2
    assert "listening" not in err and "HTTPS on" not in err and "admin endpoints" not in err, err
    assert err.splitlines()[-1] == (f"bootserver: {path}: {key}: cannot listen on {addresses[key]}: "
                                    "Address already in use")
    for address in addresses.values():  # nothing left bound: each address can be bound again at once
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", int(address.rsplit(":", 1)[1])))


async def test_serve_warns_of_unreachable_urls_and_says_why_it_stopped(tmp_path: Path, reference: Path) -> None:
    port = free_port()
    path = trust_config(tmp_path, reference,
                        {"listen": f"0.0.0.0:{port}", "admin": {"listen": f"127.0.0.1:{port + 1}"}})
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        server = ServerProcess(path, port)
        await server.start(http)
        lines = await stopped_log(server)
    assert any(line.endswith(f"WARNING bootserver.listeners: server.listen is 0.0.0.0:{port} but the URLs handed "
                             f"out start with http://localhost:{port}: other machines cannot reach them; set "
                             f"server.base_url in {path} to an address they reach") for line in lines), lines
    assert lines[-1].endswith("INFO bootserver.listeners: bootserver stopped (SIGTERM): the requests in progress "
                              "were answered, every listener closed"), lines


# --- item 1: nothing outside the cache is served or written ------------------------------------------


def _swap_for_link(place: Path, target: Path) -> Path:
    """Move ``place`` aside and put a symbolic link to ``target`` there; return where it was moved."""
    aside = place.with_name(place.name + ".aside")
    place.rename(aside)
    place.symlink_to(target, target_is_directory=target.is_dir())
    return aside


def _restore(place: Path, aside: Path) -> None:
    place.unlink()
    aside.rename(place)


@pytest.mark.parametrize("read_through", [True, False])
async def test_no_link_in_the_cache_is_followed(boot_setup, tmp_path: Path, read_through: bool) -> None:
    """A link in the file's place, in the release folder's, in a folder in the middle of the path or at
    ``artifacts/`` itself is a 404 (also for a range, and after the file was served once), with one
    warning naming the path in the cache and never the target; a read-through writes nothing into the
    folder a link points at."""
    setup = boot_setup(4096, {"master-0": {"profile": "master"}})
    text = setup.config.read_text() + f"read_through: {str(read_through).lower()}\n"
    setup.config.write_text(text)
    rc, _, err = await run_cli("sync-images", "--config", str(setup.config))
    assert rc == 0, err
    cache = tmp_path / "cache"
    [release] = list((cache / "artifacts" / "rhcos-4.16" / "x86_64").iterdir())
    kernel = next(p for p in release.iterdir() if not p.name.startswith(".") and "kernel" in p.name)
    url_path = "/" + str(kernel.relative_to(cache))
    secret = tmp_path / "secret"
    secret.write_text("SECRET: the contents of a file outside the cache\n")
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(release, elsewhere)
    (elsewhere / kernel.name).unlink()  # a read-through would fetch it again into the folder linked to
    before = sorted(p.name for p in elsewhere.iterdir())
    empty = tmp_path / "empty"
    empty.mkdir()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        server = ServerProcess(setup.config, setup.port)
        await server.start(http)
        try:
            async with http.get(server.url + url_path) as r:
                assert (r.status, await r.read()) == (200, kernel.read_bytes())
            cases = [(kernel, secret), (release, elsewhere), (release, empty),
                     (release.parent.parent, tmp_path / "elsewhere-stream"), (cache / "artifacts", empty)]
            shutil.copytree(release.parent.parent, tmp_path / "elsewhere-stream")
            for place, target in cases:
                aside = _swap_for_link(place, target)
                try:
                    for headers in ({}, {"Range": "bytes=0-9"}):
                        async with http.get(server.url + url_path, headers=headers) as r:
                            body = await r.read()
                            assert r.status == 404, (place, headers, r.status)
                            assert b"SECRET" not in body and str(target).encode() not in body
                finally:
                    _restore(place, aside)
            async with http.get(server.url + url_path) as r:  # the real file again
                assert r.status == 200
        finally:
            lines = await stopped_log(server)
    assert sorted(p.name for p in elsewhere.iterdir()) == before  # nothing written through the link
    assert list(empty.iterdir()) == []
    log = "\n".join(lines)
    for place, target in cases:
        assert f"cache_dir: {place.relative_to(cache)} is a link; refused" in log, (place, log)
        assert str(target) not in log
    assert str(secret) not in log


async def test_a_link_swapped_in_after_the_look_is_not_followed(tmp_path: Path) -> None:
    """What is checked is what is opened: the descriptor :func:`bootserver.files.open_file` returns is
    the file below the root, and a link put in its place afterwards is refused on the next open."""
    from bootserver.files import LinkRefused, open_file

    root = tmp_path / "cache"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_text("mine")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "f").write_text("not mine")
    fd = open_file(root, "a/b/f")
    (root / "a" / "b").rename(root / "a" / "old")
    (root / "a" / "b").symlink_to(tmp_path / "other")
    with open(fd, "rb") as f:
        assert f.read() == b"mine"
    with pytest.raises(LinkRefused) as info:
        open_file(root, "a/b/f")
    assert info.value.filename == str(root / "a" / "b")


def test_an_unchanged_file_is_not_written_again_and_a_link_is_replaced_never_written_through(tmp_path: Path) -> None:
    """files.write_changed (the TFTP root's loaders at each engine start and reload): the same bytes and mode
    leave the file as it is; a link planted at the path is replaced by a file, its target untouched."""
    path = tmp_path / "bootx64.efi"
    assert write_changed(path, b"shim") is True
    inode = path.stat().st_ino
    assert write_changed(path, b"shim") is False and path.stat().st_ino == inode
    assert write_changed(path, b"shim", 0o600) is True and path.stat().st_mode & 0o777 == 0o600
    target = tmp_path / "target"
    target.write_bytes(b"shim")
    path.unlink()
    path.symlink_to(target)
    assert write_changed(path, b"shim") is True
    assert not path.is_symlink() and path.read_bytes() == b"shim" and target.read_bytes() == b"shim"


async def test_state_dir_links_are_refused(tmp_path: Path, reference: Path) -> None:
    """keys.json as a link (keys someone else chose would sign URLs) and tls/ as a link (private keys
    written elsewhere): one line, nothing read or written through them."""
    path = trust_config(tmp_path, reference, {"listen": f"127.0.0.1:{free_port()}", "tls": {"listen": "127.0.0.1:1"}})
    state = tmp_path / "state"
    state.mkdir()
    planted = tmp_path / "planted.json"
    planted.write_text('{"keys": [{"key": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "created": 0, '
                       '"retires": null}]}')
    (state / "keys.json").symlink_to(planted)
    rc, out, err = await run_cli("url", "live-0", "--config", str(path))
    assert rc != 0 and out == "" and "Traceback" not in err
    assert f"{state / 'keys.json'}: cannot read or create the signing keys: a link" in err, err
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (state / "tls").symlink_to(elsewhere)
    rc, _, err = await run_cli("tls", "init", "--config", str(path))
    assert rc == 2 and "Traceback" not in err
    assert err == f"bootserver: {state / 'tls'}: is a link; refused: bootserver writes its TLS files in a real " \
                  "folder of state_dir only\n"
    assert list(elsewhere.iterdir()) == []


# --- item 3: the admin listener answers only to its own names ----------------------------------------

ADMIN_PATHS = ["/", "/ui/nodes/live-0", "/ui/cache", "/ui/events", "/nodes", "/nodes/live-0", "/metrics"]


def _head_and_body(answer: bytes) -> tuple[dict[str, str], bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")[1:]
    return {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}, body


async def test_the_admin_listener_answers_only_to_its_own_names(tmp_path: Path, reference: Path) -> None:
    port = free_port()
    admin = port + 1
    path = trust_config(tmp_path, reference, {"listen": f"127.0.0.1:{port}",
                                         "admin": {"hosts": ["admin.example.net", "proxy.example.net:8443"]}})
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        server = ServerProcess(path, port)
        await server.start(http)
        try:
            for target in ADMIN_PATHS:
                for host in (b"evil.example", f"evil.example:{admin}".encode(), b"127.0.0.1:9", b"localhost",
                             b"proxy.example.net:443", b"127.0.0.1.evil.example"):
                    answer = await raw_request(admin, f"GET {target} HTTP/1.1".encode(), host=host)
                    headers, body = _head_and_body(answer)
                    assert status_of(answer) == 421, (target, host, answer[:200])
                    assert body == b"misdirected request\n" and headers["x-content-type-options"] == "nosniff"
            for host in (f"127.0.0.1:{admin}", f"localhost:{admin}", f"[::1]:{admin}", "admin.example.net",
                         "ADMIN.example.net:8081", "proxy.example.net:8443"):
                answer = await raw_request(admin, b"GET /nodes HTTP/1.1", host=host.encode())
                headers, body = _head_and_body(answer)
                assert status_of(answer) == 200 and b"live-0" in body, (host, answer[:300])
                assert headers["cache-control"] == "no-store" and headers["referrer-policy"] == "no-referrer"
            for probe in ("/healthz", "/readyz"):  # probes use addresses: any Host
                answer = await raw_request(admin, f"GET {probe} HTTP/1.1".encode(), host=b"10.9.8.7:1")
                assert status_of(answer) in (200, 503), answer[:200]
            # every answer of both listeners: nosniff, and a Server header without versions
            for where, target in ((port, "GET /healthz"), (port, "GET /ipxe/live-0"), (port, "GET /nope"),
                                  (port, "GET /boot.ipxe"), (port, "HEAD /nope"), (port, "POST /ipxe/live-0"),
                                  (port, "DELETE /"), (admin, "GET /nodes"), (admin, "GET /nope"), (admin, "GET /"),
                                  (admin, "POST /nodes")):
                answer = await raw_request(where, f"{target} HTTP/1.1".encode(), host=f"127.0.0.1:{where}".encode())
                headers, _ = _head_and_body(answer)
                assert headers["x-content-type-options"] == "nosniff", (where, target)
                assert headers["server"] == "bootserver", (where, target)
                if target.endswith("/nope") or target == "DELETE /":  # as aiohttp's router answers
                    assert status_of(answer) == 404, (where, target, answer[:300])
                elif target.startswith("POST"):
                    assert status_of(answer) == 405 and headers["allow"] == "GET,HEAD", (where, target, answer[:300])
        finally:
            lines = await stopped_log(server)
    assert any("421 Host 'evil.example' is not a name of the admin listener" in line for line in lines)


async def test_a_unix_socket_admin_listener_answers_any_host(tmp_path: Path, reference: Path) -> None:
    port = free_port()
    sock = tmp_path / "admin.sock"
    path = trust_config(tmp_path, reference, {"listen": f"127.0.0.1:{port}", "admin": {"listen": str(sock)}})
    server = ServerProcess.__new__(ServerProcess)  # its admin_url assumes host:port
    server.config, server.extra_args, server.port, server.url = path, (), port, f"http://127.0.0.1:{port}"
    server.proc = None
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        await server.start(http)
        try:
            async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(sock)),
                                             timeout=aiohttp.ClientTimeout(total=30)) as local, \
                    local.get("http://evil.example/nodes") as r:
                assert r.status == 200 and "live-0" in await r.text()
        finally:
            await server.stop()


# --- item 5: HTTP as RFC 9110 says ---------------------------------------------------------------------

#: The table every file route answers (tests/http/test_file_ranges.py), for a 10000-byte artifact.
RANGES = ranges(10000)


async def test_range_and_if_range_as_rfc_9110_says(boot_setup, tmp_path: Path) -> None:
    setup = boot_setup(10000 - len("x86_64"), {"master-0": {"profile": "master"}})
    rc, _, err = await run_cli("sync-images", "--config", str(setup.config))
    assert rc == 0, err
    cache = tmp_path / "cache"
    kernel = next(p for p in (cache / "artifacts").rglob("*kernel*") if not p.name.startswith("."))
    data = kernel.read_bytes()
    assert len(data) == 10000
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        server = ServerProcess(setup.config, setup.port)
        await server.start(http)
        url = server.url + "/" + str(kernel.relative_to(cache))
        try:
            async with http.get(url) as r:
                etag, modified = r.headers["ETag"], r.headers["Last-Modified"]
            seen = []
            for rng, if_range, _, _ in RANGES:
                headers = {"Range": rng}
                if if_range is not None:
                    headers["If-Range"] = {"ETAG": etag, "W/ETAG": "W/" + etag,
                                           "LAST_MODIFIED": modified}.get(if_range, if_range)
                async with http.get(url, headers=headers) as r:
                    body = await r.read()
                    seen.append((r.status, body, r.headers.get("Content-Range")))
        finally:
            await server.stop()
    for (rng, if_range, status, part), (got, body, content_range) in zip(RANGES, seen, strict=True):
        assert got == status, (rng, if_range, got)
        if status == 206:
            assert part is not None
            assert body == data[part[0]:part[1]], (rng, if_range)
            assert content_range == f"bytes {part[0]}-{part[1] - 1}/10000"
        elif status == 200:
            assert body == data, (rng, if_range)
        else:
            assert content_range == "bytes */10000", rng


async def test_a_body_over_the_limit_is_413_before_it_is_read(tmp_path: Path, reference: Path) -> None:
    port = free_port()
    path = trust_config(tmp_path, reference, {"listen": f"127.0.0.1:{port}", "discovery": False})  # README's 404s
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        server = ServerProcess(path, port)
        await server.start(http)
        try:
            # 10 MB announced, none sent: the answer comes from the Content-Length alone
            answer = await raw_request(port, b"POST /checkin/live-0 HTTP/1.1\r\nContent-Length: 10485760")
            assert status_of(answer) == 413 and b"at most 65536 bytes" in answer
            # chunked: cut once past the limit (the rest is never read)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(f"POST /checkin/live-0 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                             "Transfer-Encoding: chunked\r\n\r\n".encode())
                chunk = b"x" * 16384
                for _ in range(5):
                    writer.write(b"4000\r\n" + chunk + b"\r\n")
                await writer.drain()
                answer = await asyncio.wait_for(reader.read(), 10)
            finally:
                writer.close()
            assert status_of(answer) == 413
            # within the limit: the route's own answer (here: no signature, the one 403)
            answer = await raw_request(port, b"POST /checkin/live-0 HTTP/1.1\r\nContent-Length: 0")
            assert status_of(answer) == 403
            # (item 8) the README's /boot.ipxe answers are the real ones
            readme = (REPO / "README.md").read_text()
            for target in ("/boot.ipxe", "/boot.ipxe?mac=52:54:00:12:34:56"):
                async with http.get(server.url + target) as r:
                    body = (await r.text()).strip()
                    assert r.status == 404 and f"`{body}`" in readme, body
        finally:
            await server.stop()


async def test_prune_never_walks_into_a_link(boot_setup, tmp_path: Path) -> None:
    """``sync-images --prune`` removes releases no profile uses; a stream, architecture or release folder
    that is a link is left alone (it would otherwise rename and delete what it points at)."""
    setup = boot_setup(1024, {"master-0": {"profile": "master"}})
    rc, _, err = await run_cli("sync-images", "--config", str(setup.config))
    assert rc == 0, err
    victim = tmp_path / "victim"
    (victim / "x86_64" / "1.0").mkdir(parents=True)
    (victim / "x86_64" / "1.0" / "precious").write_text("keep me")
    arch = next((tmp_path / "cache" / "artifacts" / "rhcos-4.16").iterdir())
    (tmp_path / "cache" / "artifacts" / "old-stream").symlink_to(victim)
    (arch / "0.9").symlink_to(victim / "x86_64" / "1.0")
    rc, _, err = await run_cli("sync-images", "--prune", "--config", str(setup.config))
    assert rc == 0, err
    assert (victim / "x86_64" / "1.0" / "precious").read_text() == "keep me"
    assert "cache_dir: artifacts/old-stream is a link; refused" in err
    assert "cache_dir: artifacts/rhcos-4.16/x86_64/0.9 is a link; refused" in err


def test_a_file_below_a_root_is_named_by_a_plain_relative_path(tmp_path: Path) -> None:
    """What every opening below ``cache_dir`` and ``state_dir`` accepts (split as text since issue 40):
    empty and ``.`` parts are skipped; an absolute path or a ``..`` anywhere is refused before any open."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_bytes(b"x")
    assert read_file(tmp_path, "a//./b/f") == b"x"
    for bad in ("/etc/passwd", "a/../../x", "..", "a/b/.."):
        with pytest.raises(ValueError, match="not a plain relative path"):
            open_file(tmp_path, bad)
