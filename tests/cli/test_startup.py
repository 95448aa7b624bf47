"""Command start-up stays light (issue 41): the heavy libraries a command may not need (aiohttp, sushy,
requests, jsonschema, jinja2) are imported on first use, not when a command builds its parser or loads
its config. The timings are in docs/benchmarks.md ("Command start-up"); this checks what is loaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.helpers import REPO as ROOT

HEAVY = ("aiohttp", "sushy", "requests", "jsonschema", "jinja2")

PROBE = """
import sys
from bootserver.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as e:  # --help
    rc = e.code
print("LOADED", " ".join(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)
sys.exit(rc)
"""


@pytest.mark.parametrize("args", [["--help"], ["check-config"], ["nodes"], ["nodes", "discovered"]])
def test_a_command_loads_no_heavy_library_it_does_not_use(tmp_path: Path, args: list[str]) -> None:
    config = tmp_path / "bootserver.yaml"
    config.write_text((ROOT / "container" / "bootserver.yaml").read_text()
                      .replace("/var/lib/bootserver", str(tmp_path / "state"))
                      .replace("/var/cache/bootserver", str(tmp_path / "cache")))
    argv = args if args == ["--help"] else [*args, "--config", str(config)]
    p = subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY), *argv], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    loaded = next(line for line in p.stderr.splitlines() if line.startswith("LOADED")).split()[1:]
    assert loaded == [], (args, loaded)
