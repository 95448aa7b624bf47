"""Answers with the bytes of a file the server opened itself: artifacts, boot images, loaders.

Every answer with a file's bytes decides its status and range in one place, :func:`plan` (its
conditionals and ranges below), whatever sends the bytes: :class:`FileAnswer` (artifacts, the arm64
GRUB) and ``/iso`` (:func:`send_pieces`). Only an artifact still being downloaded answers the whole body
(200) to any ``Range``, as §14.2 allows.

:class:`FileAnswer` sends an open descriptor, never a path (aiohttp's ``FileResponse`` opens a path
again, after our checks, and would follow a link swapped in meanwhile: :mod:`bootserver.files`), with
sendfile on plain TCP, and applies the conditional and range rules of RFC 9110 itself, where aiohttp's
differ from them:

* ``If-None-Match`` (the ETag, or ``*``) answers ``304``; ``If-Modified-Since`` too when there is no
  ``If-None-Match`` (§13.1.2, §13.1.3).
* ``Range`` (§14.2), GET and HEAD only: :func:`byte_range`. A unit other than ``bytes`` is ignored
  (``200``, the whole body); an invalid ``bytes`` range set is ignored as well (our choice, which §14.2
  allows: a client that sends one gets the whole body rather than an error); one satisfiable range is
  ``206`` with ``Content-Range``; a set with several ranges of which any is satisfiable gets the whole
  body (§14.2 allows it; no ``multipart/byteranges``); a set none of whose ranges is satisfiable
  (``bytes=-0``, a first byte beyond the end) is ``416`` with ``Content-Range: bytes */<size>``.
* ``If-Range`` (§13.1.5): the range applies only when its validator is our strong ETag, or a date equal
  to our ``Last-Modified``; otherwise the whole body (``200``).

Every sender takes an optional byte rate (``server.artifact_rate``, a profile's ``artifact_rate``): the
body then goes out in steps of :data:`PACE_STEP` seconds' worth of bytes, each sent (with sendfile) no
earlier than its share of the rate allows (:func:`paced`), so one answer holds the rate while every
other connection goes at its own speed.

Below :class:`FileAnswer`, the two senders of bodies that are not one whole file: :func:`send_pieces`
(a boot image: a base image's ranges with a node's region written in) and :func:`sendfile_ranges` (an
artifact still being downloaded, in the ranges its download has ready).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime

from aiohttp import hdrs, web
from aiohttp.abc import AbstractStreamWriter

from ..artifacts.readthrough import Transfer
from ..errors import BootserverError, FetchError
from . import accesslog

#: ``first-last``, ``first-`` or ``-suffix`` (RFC 9110 §14.1.1, ``int-range`` / ``suffix-range``).
_RANGE_SPEC = re.compile(r"^(\d*)-(\d*)$")

#: What :func:`byte_range` answers for a range set none of whose ranges can be satisfied (416).
UNSATISFIABLE = "unsatisfiable"


#: Bytes read at a time where a body passes through Python (TLS, a loop without ``sendfile``).
READ_STEP = 1 << 20


async def read_at(fd: int, size: int, offset: int) -> bytes:
    """``os.pread(fd, size, offset)`` in the loop's default executor: a read the page cache does not
    hold waits for the disk (milliseconds per MiB on a cold cache), and on the loop's thread it would
    hold up every other request meanwhile. Raises ``OSError``."""
    return await asyncio.get_running_loop().run_in_executor(None, os.pread, fd, size, offset)


#: A paced answer sends this many seconds' worth of its rate at a time (at least 16 KiB, at most 1 MiB).
PACE_STEP = 0.05


class Pace:
    """The clock of one answer held to ``rate`` bytes per second: :meth:`due` waits until the next
    ``nbytes`` may go, measured from the first call (so time the client spent on earlier bytes counts)."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        #: bytes per step (seconds' worth: :data:`PACE_STEP`)
        self.step = min(1 << 20, max(16 << 10, int(rate * PACE_STEP)))
        self._start: float | None = None
        self._sent = 0

    async def due(self, nbytes: int) -> None:
        """Wait until ``nbytes`` more may be sent without going over the rate; counts them as sent."""
        now = asyncio.get_running_loop().time()
        if self._start is None:
            self._start = now
        wait = self._start + self._sent / self.rate - now
        self._sent += nbytes
        if wait > 0:
            await asyncio.sleep(wait)


async def paced(offset: int, count: int, pace: Pace | None) -> AsyncIterator[tuple[int, int]]:
    """``(offset, count)`` pieces covering the byte range ``offset, count``: the whole range at once
    without ``pace``, else pieces of ``pace.step`` bytes, each yielded when :meth:`Pace.due` allows."""
    if pace is None:
        yield offset, count
        return
    end = offset + count
    while offset < end:
        n = min(pace.step, end - offset)
        await pace.due(n)
        yield offset, n
        offset += n


def byte_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """What a ``Range`` header value asks of a representation of ``size`` bytes (RFC 9110 §14.1.1,
    §14.2): ``(start, end)`` (byte offsets, ``end`` exclusive) for one satisfiable range;
    :data:`UNSATISFIABLE` when no range of a valid ``bytes`` set can be satisfied; ``None`` for the whole
    body (no header, another unit, an invalid set, or several ranges of which one is satisfiable)."""
    if header is None:
        return None
    unit, eq, ranges = header.partition("=")
    if not eq or unit.strip().lower() != "bytes":
        return None
    specs: list[tuple[int, int]] = []  # the satisfiable ranges
    valid = False
    for item in ranges.split(","):
        item = item.strip()
        if not item:
            continue  # RFC 9110 §5.6.1: empty list elements are allowed and ignored
        m = _RANGE_SPEC.match(item)
        if m is None or m[1] == m[2] == "":
            return None
        valid = True
        if m[1] == "":  # suffix-range: the last N bytes
            length = int(m[2])
            if length > 0 and size > 0:
                specs.append((max(0, size - length), size))
            continue
        first = int(m[1])
        last = int(m[2]) if m[2] else None
        if last is not None and last < first:
            return None  # invalid range-spec: the whole set is invalid
        if first < size:
            specs.append((first, size if last is None else min(last + 1, size)))
    if not specs:
        return UNSATISFIABLE if valid else None
    if len(specs) != 1:
        return None
    return specs[0]


def _http_date(t: float) -> str:
    return format_datetime(datetime.fromtimestamp(int(t), UTC), usegmt=True)


def _if_range_holds(value: str, etag: str, last_modified: float | None) -> bool:
    """RFC 9110 §13.1.5: a strong ETag equal to ours, or an HTTP date equal to our Last-Modified."""
    value = value.strip()
    if value.startswith(('"', "W/")):
        return value == f'"{etag}"'
    if last_modified is None:
        return False
    try:
        return int(parsedate_to_datetime(value).timestamp()) == int(last_modified)
    except (TypeError, ValueError, IndexError):
        return False


@dataclass(frozen=True)
class Plan:
    """What a ``GET``/``HEAD`` of a representation gets (:func:`plan`): ``status`` (200, 206, 304 or
    416), the byte range ``start``..``end`` (``end`` exclusive) to send, and the headers to add
    (``ETag``, ``Accept-Ranges``, ``Last-Modified`` when known, ``Content-Range`` for 206 and 416)."""

    status: int
    start: int
    end: int
    headers: dict[str, str]


def plan(request: web.BaseRequest, size: int, etag: str, last_modified: float | None = None) -> Plan:
    """The answer to ``request`` for a representation of ``size`` bytes with the strong ``etag`` (without
    quotes) and ``last_modified`` (unix seconds, ``None``: none): conditionals and ranges as the module
    docstring says (RFC 9110 §13.1, §14.2)."""
    headers: dict[str, str] = {hdrs.ETAG: f'"{etag}"', hdrs.ACCEPT_RANGES: "bytes"}
    if last_modified is not None:
        headers[hdrs.LAST_MODIFIED] = _http_date(last_modified)
    inm = request.if_none_match
    ims = request.if_modified_since if last_modified is not None else None
    if (inm and any(tag.value in (etag, "*") for tag in inm)) or \
            (inm is None and ims is not None and last_modified is not None and int(last_modified) <= ims.timestamp()):
        return Plan(304, 0, 0, headers)
    wanted = byte_range(request.headers.get(hdrs.RANGE), size)
    if_range = request.headers.get(hdrs.IF_RANGE)
    if wanted is not None and if_range is not None and not _if_range_holds(if_range, etag, last_modified):
        wanted = None
    if wanted == UNSATISFIABLE:
        headers[hdrs.CONTENT_RANGE] = f"bytes */{size}"
        return Plan(416, 0, 0, headers)
    if isinstance(wanted, tuple):
        start, end = wanted
        headers[hdrs.CONTENT_RANGE] = f"bytes {start}-{end - 1}/{size}"
        return Plan(206, start, end, headers)
    return Plan(200, 0, size, headers)


class FileAnswer(web.StreamResponse):
    """The answer of a ``GET``/``HEAD`` with the bytes of the regular file open at ``fd`` (closed when
    the answer is done, or by :meth:`close` if it is never sent); ``etag`` (default: ``<mtime>-<size>``
    in hex, as aiohttp's) and the other headers as given. Conditionals and ranges as in the module
    docstring; the bytes go out with ``sendfile`` on plain TCP and in writes of at most 1 MiB over TLS,
    each read off the loop's thread (:func:`read_at`). When the client goes away mid-body, the bytes
    sent are recorded for the access log (:data:`bootserver.http.accesslog.BODY_SENT`). ``rate``: bytes
    per second the body is held to (:class:`Pace`), or ``None`` for as fast as the connection takes it."""

    def __init__(self, fd: int, *, etag: str | None = None, headers: dict[str, str] | None = None,
                 rate: int | None = None) -> None:
        super().__init__(headers=headers)
        self._fd: int | None = fd
        self._etag_value = etag
        self._rate = rate

    def close(self) -> None:
        """Close the descriptor (done by :meth:`prepare`; for an answer that is never sent)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        try:
            return await self._answer(request)
        finally:
            self.close()

    async def _answer(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        assert self._fd is not None
        st = os.fstat(self._fd)
        size = st.st_size
        answer = plan(request, size, self._etag_value or f"{st.st_mtime_ns:x}-{size:x}", st.st_mtime)
        self.set_status(answer.status)
        self.headers.update(answer.headers)
        start, end = answer.start, answer.end
        if answer.status != 304:
            self.content_length = end - start
        writer = await super().prepare(request)
        if request.method == "HEAD" or end == start:
            await self.write_eof()
            return writer
        await self._send(request, start, end - start)
        await self.write_eof()
        return writer

    async def _send(self, request: web.BaseRequest, offset: int, count: int) -> None:
        assert self._fd is not None
        transport = request.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("Connection lost")
        sent = 0
        pace = None if self._rate is None else Pace(self._rate)
        fobj = open(self._fd, "rb", buffering=0, closefd=False)  # noqa: SIM115 - closed in finally
        try:
            if transport.get_extra_info("sslcontext") is None:
                fobj.seek(offset)
                loop = asyncio.get_running_loop()
                try:
                    async for start, n in paced(offset, count, pace):
                        # gone during a paced wait: asyncio's sendfile would raise RuntimeError
                        # ("Transport is closing"), not the ConnectionError every sender raises then
                        if transport.is_closing():
                            raise ConnectionResetError("Connection lost")
                        await loop.sendfile(transport, fobj, start, n)
                    return
                except NotImplementedError:
                    pass
                except ConnectionError:
                    sent = max(0, fobj.tell() - offset)
                    raise
            end = offset + count
            async for start, n in paced(offset + sent, end - offset - sent, pace):
                for off in range(start, start + n, READ_STEP):
                    data = await read_at(self._fd, min(READ_STEP, start + n - off), off)
                    if not data:
                        raise ConnectionResetError("file shorter than it was")
                    await self.write(data)
                    sent += len(data)
        except ConnectionError:
            if isinstance(request, web.Request):
                request[accesslog.BODY_SENT] = (sent, False)
            raise
        finally:
            fobj.close()


async def send_pieces(request: web.Request, resp: web.StreamResponse, fd: int,
                       pieces: Iterable[bytes | tuple[int, int]]) -> None:
    """Send ``pieces`` (:meth:`~bootserver.images.overlay.NodeImage.pieces`): ``bytes`` written as they
    are, ``(offset, count)`` of the base image ``fd`` with ``loop.sendfile`` (the kernel's sendfile), or with
    reads of at most 1 MiB over TLS, where the transport cannot sendfile (see :func:`sendfile_ranges`).
    ``fd``: the base image, opened by the caller (who closes it). Raises ``ConnectionError`` when the
    client goes away and ``OSError``."""
    loop = asyncio.get_running_loop()
    with open(fd, "rb", buffering=0, closefd=False) as fobj:
        use_sendfile = request.transport is not None and request.transport.get_extra_info("sslcontext") is None
        for piece in pieces:
            transport = request.transport
            if transport is None or transport.is_closing():
                raise ConnectionResetError("Connection lost")
            if isinstance(piece, bytes):
                await resp.write(piece)
                continue
            offset, count = piece
            if use_sendfile:
                fobj.seek(offset)
                try:
                    await loop.sendfile(transport, fobj, offset, count)
                    continue
                except NotImplementedError:
                    use_sendfile = False
            end = offset + count
            while offset < end:
                data = await read_at(fd, min(READ_STEP, end - offset), offset)
                if not data:
                    raise OSError("the base image is shorter than it was")
                await resp.write(data)
                offset += len(data)


async def sendfile_ranges(request: web.Request, resp: web.StreamResponse, transfer: Transfer,
                          rate: int | None = None) -> None:
    """Send every range :meth:`Transfer.ranges` yields with ``loop.sendfile`` (the kernel's sendfile,
    as aiohttp's FileResponse does), or with writes of at most 1 MiB over TLS or where the transport
    cannot sendfile; held to ``rate`` bytes per second when given (:class:`Pace`).

    When the client goes away (``ConnectionError``) or the transfer fails (a
    :class:`~bootserver.errors.BootserverError` such as ``FetchError``: a sha256 mismatch, the upstream
    gone), the body bytes sent so far are recorded for the
    access log (:data:`bootserver.http.accesslog.BODY_SENT`) before the error is raised again.

    TLS gets our own writes: the bytes must pass through Python to be encrypted anyway, and asyncio's
    sendfile fallback, called once per range on an SSL transport, lost bytes in our tests (clients got
    short bodies while the server saw them all sent)."""
    loop = asyncio.get_running_loop()
    fobj = None
    pace = None if rate is None else Pace(rate)
    sent = 0  # body bytes sent; with sendfile, asyncio leaves the file position after the last one
    try:
        async for whole_offset, whole_count in transfer.ranges():
            async for offset, count in paced(whole_offset, whole_count, pace):
                transport = request.transport
                if transport is None or transport.is_closing():
                    raise ConnectionResetError("Connection lost")
                if fobj is None:
                    fobj = open(transfer.fileno(), "rb", buffering=0, closefd=False)  # noqa: SIM115 - closed in finally
                    use_sendfile = transport.get_extra_info("sslcontext") is None
                if use_sendfile:
                    fobj.seek(offset)
                    try:
                        await loop.sendfile(transport, fobj, offset, count)
                        sent += count
                        continue
                    except NotImplementedError:
                        use_sendfile = False
                    except ConnectionError:
                        sent += max(0, fobj.tell() - offset)
                        raise
                end = offset + count
                while offset < end:
                    data = await read_at(fobj.fileno(), min(READ_STEP, end - offset), offset)
                    if not data:
                        raise FetchError(f"{request.path}: data file shorter than expected")
                    await resp.write(data)
                    offset += len(data)
                    sent += len(data)
    except (ConnectionError, BootserverError):  # the client went away, or the transfer is aborted (wrong bytes)
        request[accesslog.BODY_SENT] = (sent, False)
        raise
    finally:
        if fobj is not None:
            fobj.close()
