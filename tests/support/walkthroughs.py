"""docs/openshift.md's walkthroughs as the tests run them as written (tests/test_openshift_import.py,
tests/test_openshift_agent.py): its fenced blocks, and its bootserver config placed in a test's folder."""

from __future__ import annotations

import re
from pathlib import Path

from support.helpers import REPO


def doc_blocks(kind: str) -> list[str]:
    """The fenced blocks of language ``kind`` (```` ```yaml ````, ```` ```sh ````) of docs/openshift.md,
    in order, each its text without the fences."""
    text = (REPO / "docs" / "openshift.md").read_text()
    return [m.group(1) for m in re.finditer(rf"^```{kind}\n(.*?)^```", text, re.S | re.M)]


def walkthrough_config(tmp_path: Path) -> Path:
    """The walkthroughs' main bootserver config (the ```yaml block with ``include: [clusters/*.yaml]``)
    written as ``tmp_path/etc/bootserver.yaml``, its machine folders (``/var/lib/bootserver``,
    ``/var/cache/bootserver``) moved into ``tmp_path``; returns its path."""
    main = next(b for b in doc_blocks("yaml") if "include: [clusters/*.yaml]" in b)
    for machine in ("/var/lib/bootserver", "/var/cache/bootserver"):
        main = main.replace(machine, str(tmp_path / machine.strip("/").replace("/", "-")))
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "bootserver.yaml").write_text(main)
    return etc / "bootserver.yaml"
