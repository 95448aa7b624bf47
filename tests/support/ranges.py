"""Shared by the tests (moved out of tests/http/test_file_ranges.py, which other test modules imported)."""

from __future__ import annotations


def ranges(n: int) -> list[tuple[str, str | None, int, tuple[int, int] | None]]:
    """(Range, If-Range, status, (start, end) of the body or None for the whole) for an ``n``-byte file
    (``n`` over 1000): RFC 9110 §14.1.2's examples first, then the cases of §14.2 and §13.1.5.
    ``ETAG``, ``W/ETAG`` and ``LAST_MODIFIED`` stand for the file's own validators."""
    return [
        ("bytes=0-499", None, 206, (0, 500)), ("bytes=500-999", None, 206, (500, 1000)),
        ("bytes=-500", None, 206, (n - 500, n)), (f"bytes={n - 500}-", None, 206, (n - 500, n)),
        ("bytes=0-0,-1", None, 200, None), ("bytes= 500-600,601-999", None, 200, None),
        ("bytes=500-700,601-999", None, 200, None),
        ("pages=0-9", None, 200, None), ("items=1-2", None, 200, None),
        ("bytes=-0", None, 416, None), (f"bytes={n}-", None, 416, None),
        (f"bytes={n}-{2 * n},-0", None, 416, None), (f"bytes={n - 10}-{2 * n}", None, 206, (n - 10, n)),
        ("bytes=5-2", None, 200, None), ("bytes=abc", None, 200, None), ("bytes=", None, 200, None),
        ("bytes=-", None, 200, None), ("BYTES=0-9", None, 206, (0, 10)),
        (f"bytes=0-9,{2 * n}-", None, 206, (0, 10)), ("bytes=0-9", "ETAG", 206, (0, 10)),
        ("bytes=0-9", '"0123"', 200, None), ("bytes=0-9", "W/ETAG", 200, None),
        ("bytes=0-9", "LAST_MODIFIED", 206, (0, 10)), ("bytes=0-9", "Thu, 01 Jan 1970 00:00:00 GMT", 200, None),
        ("bytes=0-9", "not a date", 200, None),
    ]
