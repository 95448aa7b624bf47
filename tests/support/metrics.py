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
