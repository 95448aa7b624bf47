"""A bare aiohttp app answering the six requests of a cold node boot as ``benchmarks/boot_storm.py``'s
client makes them: the floor that bootserver's server CPU per boot is compared with (``--floor``).

What it is: one aiohttp process, access log off, whose routes have bootserver's URL shapes and whose
answers have bootserver's shapes and sizes, built once at start-up, so the storm client, unchanged,
boots through it and checks what it checks:

- ``GET /ipxe/{node}``: an iPXE script of the template's lines (``kernel <url> ... coreos.inst.ignition_url=
  <stub url>``, ``initrd --name main <url>``, the retry loop), URLs with a stand-in ``?exp=&sig=`` query;
- ``GET /artifacts/{stream}/{arch}/{release}/{file}``: a file of ARTIFACTS (the storm's upstream folder,
  so its sha256 is the stream's) by aiohttp's ``FileResponse`` (sendfile); only the names found there
  at start-up, anything else is a 404;
- ``GET /ignition/{node}``: a merge-style stub from bootserver's own builder (``bootserver.ignition``,
  spec 3.2.0: the merge source, its ``sha512-`` hash of CONFIG, ``/etc/hostname``, the check-in unit
  with its ``curl ... -X POST "URL"``);
- ``GET /ignition/{node}/config``: the bytes of CONFIG;
- ``POST /checkin/{node}``: ``200 {node}: up``, the body not read.

What it is not: a boot server. Every node gets the same script and stub (node-00000's; the node's
name is read from the path only for the check-in answer); nothing is looked up, no signature is
checked, nothing is rendered per request, nothing is written (no timeline, no attribution), no
admission queue, no ``Retry-After``, no ETag/sidecar of the cache. What bootserver spends beyond it is
its own work; what both spend is aiohttp's and the event loop's.

Usage: ``python bare_boot.py PORT ARTIFACTS CONFIG [--loop asyncio|uvloop] [--keepalive-timeout 75]``:
listens on 127.0.0.1:PORT. ``--loop``: the event loop to run on, the same as the server it is compared
with (``uvloop`` needs the ``uvloop`` package; without it: exit 2 with one line).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from aiohttp import web

from bootserver.ignition import build_stub, encode, sha512_hash

#: A stand-in for a signed URL's query (bootserver's: an expiry and a 43-character signature).
QUERY = "?exp=1795906800&sig=" + "S" * 43
IGNITION_TYPE = "application/vnd.coreos.ignition+json"


def boot_script(base: str, node: str, release_path: str) -> str:
    """An iPXE script with the lines of bootserver's ``templates/boot.ipxe.j2`` for an install
    profile: kernel and initramfs under ``base`` + ``/artifacts/`` + ``release_path``, the stub URL in
    ``coreos.inst.ignition_url``."""
    art = f"{base}/artifacts/{release_path}"
    kargs = (f"initrd=main coreos.live.rootfs_url={art}/live-rootfs.x86_64 coreos.inst.install_dev=/dev/sda "
             f"coreos.inst.ignition_url={base}/ignition/{node}{QUERY} coreos.inst.platform_id=metal")
    return "\n".join([
        "#!ipxe", f"# bootserver bare: node {node}, profile master (install)", "# bench 1.0 x86_64",
        "set attempt:int32 0", ":fetch", "inc attempt",
        f"kernel {art}/live-kernel.x86_64 {kargs} || goto retry",
        f"initrd --name main {art}/live-initramfs.x86_64 || goto retry",
        "boot || goto failed", ":retry", "imgfree", "iseq ${attempt} 3 && goto failed ||",
        "echo bootserver: download failed, attempt ${attempt} of 3, retrying in 5 seconds", "sleep 5",
        "goto fetch", ":failed",
        f"echo bootserver: node {node} could not boot, falling through to the next boot device",
        "sleep 10", "exit 1", ""])


def make_app(base: str, artifacts: Path, config: bytes) -> web.Application:
    """The app for base URL ``base`` (``http://127.0.0.1:PORT``): artifacts are the files directly in
    folder ``artifacts``, ``config`` the real config's bytes (module docstring)."""
    node = "node-00000"
    script = boot_script(base, node, "bench/x86_64/1.0")
    stub = encode(build_stub(version="3.2.0", hostname=node, config_url=f"{base}/ignition/{node}/config{QUERY}",
                             config_hash=sha512_hash(config), checkin_url=f"{base}/checkin/{node}{QUERY}"))
    files = {p.name: p for p in artifacts.iterdir() if p.is_file()}

    async def chain(request: web.Request) -> web.Response:
        return web.Response(text=script, content_type="text/plain")

    async def artifact(request: web.Request) -> web.StreamResponse:
        path = files.get(request.match_info["file"])
        if path is None:
            raise web.HTTPNotFound()
        return web.FileResponse(path)

    async def ignition_stub(request: web.Request) -> web.Response:
        return web.Response(body=stub, content_type=IGNITION_TYPE)

    async def real_config(request: web.Request) -> web.Response:
        return web.Response(body=config, content_type=IGNITION_TYPE)

    async def checkin(request: web.Request) -> web.Response:
        return web.Response(text=f"{request.match_info['node']}: up")

    app = web.Application()
    app.router.add_get("/ipxe/{node}", chain)
    app.router.add_get("/artifacts/{stream}/{arch}/{release}/{file}", artifact)
    app.router.add_get("/ignition/{node}", ignition_stub)
    app.router.add_get("/ignition/{node}/config", real_config)
    app.router.add_post("/checkin/{node}", checkin)
    return app


def new_loop(name: str) -> asyncio.AbstractEventLoop:
    """A new event loop: asyncio's default (``asyncio``) or ``uvloop``'s. Raises ``SystemExit`` (one
    line, exit 2) when ``uvloop`` is asked for and not installed."""
    if name == "asyncio":
        return asyncio.new_event_loop()
    try:
        import uvloop  # optional: only for a server under test that runs on it
    except ImportError:
        print("bare_boot.py: --loop uvloop: the uvloop package is not installed", file=sys.stderr)
        raise SystemExit(2) from None
    return uvloop.new_event_loop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("port", type=int)
    ap.add_argument("artifacts", type=Path, help="folder of the artifact files (the storm's upstream release)")
    ap.add_argument("config", type=Path, help="the real config served at /ignition/{node}/config")
    ap.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio", help="event loop (default asyncio)")
    ap.add_argument("--keepalive-timeout", type=float, default=75.0, help="seconds (aiohttp's default 75)")
    args = ap.parse_args()
    try:
        config = args.config.read_bytes()
        app = make_app(f"http://127.0.0.1:{args.port}", args.artifacts, config)
    except OSError as e:
        ap.error(f"{e.filename}: {e.strerror}")
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None,
                keepalive_timeout=args.keepalive_timeout, loop=new_loop(args.loop))


if __name__ == "__main__":
    main()
