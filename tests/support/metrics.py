"""Shared by the tests (moved out of tests/test_workers.py, which other test modules imported)."""

from __future__ import annotations

import re


def metric(text: str, name: str) -> float | None:
    """The value of the sample ``name`` (with its labels exactly as exposed, sorted) in ``text``."""
    for line in text.splitlines():
        if not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            if canonical(key) == canonical(name):
                return float(value)
    return None


def canonical(sample: str) -> str:
    m = re.fullmatch(r"([^{]+)(?:\{(.*)\})?", sample)
    assert m, sample
    labels = sorted(re.findall(r'(\w+)="([^"]*)"', m[2] or ""))
    return m[1] + "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"


def iso_requests(metrics_text: str) -> float:
    """The count of answered (200) ``GET /iso/{node}.iso`` requests in a server's ``/metrics`` text."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics_text.splitlines()
               if line.startswith("bootserver_http_requests_total{") and "/iso/{node}.iso" in line
               and 'status="200"' in line and 'method="GET"' in line)
