"""A bare aiohttp app for the script benchmark: ``GET /ipxe/{node}`` answers a constant iPXE script.

No lookup, no signature check, no rendering, no timeline: the floor that bootserver's script endpoint is
compared with (benchmarks/scripts.py). Usage: ``python bare_ipxe.py PORT SIZE [--reuse-port]``: listens on
127.0.0.1:PORT, the script is SIZE bytes (``text/plain``), access log off.
"""

from __future__ import annotations

import sys

from aiohttp import web


def constant_script(size: int) -> str:
    """An iPXE script of exactly ``size`` bytes (ASCII): ``#!ipxe``, then comment padding."""
    head = "#!ipxe\n"
    body = ("# " + "x" * 98 + "\n") * (size // 101 + 1)
    return (head + body)[:size - 1] + "\n"


def main() -> None:
    port, size = int(sys.argv[1]), int(sys.argv[2])
    reuse_port = "--reuse-port" in sys.argv[3:]
    script = constant_script(size)

    async def handle(request: web.Request) -> web.Response:
        return web.Response(text=script, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/ipxe/{node}", handle)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None, reuse_port=reuse_port or None)


if __name__ == "__main__":
    main()
