"""A local upstream for benchmarks: serves a folder with sendfile on 127.0.0.1 and logs one line per GET.

Usage: python upstream.py DIR PORT  (prints "GET <path>" to stdout for every request, flushed)
"""

from __future__ import annotations

import sys
from pathlib import Path

from aiohttp import web


def main() -> None:
    root, port = Path(sys.argv[1]).resolve(), int(sys.argv[2])

    async def handle(request: web.Request) -> web.StreamResponse:
        print(f"GET {request.path} {request.headers.get('Range', '-')}", flush=True)
        path = (root / request.path.lstrip("/")).resolve()
        if root not in path.parents or not path.is_file():
            return web.Response(status=404)
        return web.FileResponse(path)

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


if __name__ == "__main__":
    main()
