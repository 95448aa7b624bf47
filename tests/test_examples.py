"""Every example config the repository ships passes ``bootserver check-config`` as it is (issue 41): each
whole config in README.md and docs/*.md (a ```yaml block with a top-level ``streams:``; the fragments
beside them are not configs), with the example files it names from docs/examples/ beside it, and
systemd/bootserver.yaml.example and container/bootserver.yaml with their folders. Only the machine's own
folders move: an absolute ``/var/lib/bootserver`` or ``/var/cache/bootserver`` becomes a folder of the
test, a config with ``server.tls`` gets ``bootserver tls init`` first, as the docs say to run, and one
with ``dhcp:`` is checked inside a network namespace of the test's own whose ``br-prov`` has 192.0.2.2/24
(check-config looks the interface up on the machine it runs on)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from support import netns
from support.helpers import BOOTSERVER, run_cli

ROOT = Path(__file__).resolve().parent.parent


def doc_examples() -> list[tuple[str, str, Path]]:
    """``(id, config text, folder of the example files it names)`` of every shipped example config."""
    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for i, m in enumerate(re.finditer(r"^```yaml\n(.*?)^```", doc.read_text(), re.S | re.M)):
            if re.search(r"^streams:", m.group(1), re.M):
                found.append((f"{doc.relative_to(ROOT)}#{i}", m.group(1), ROOT / "docs" / "examples"))
    for path in (ROOT / "systemd" / "bootserver.yaml.example", ROOT / "container" / "bootserver.yaml"):
        found.append((str(path.relative_to(ROOT)), path.read_text(), path.parent))
    return found


EXAMPLES = doc_examples()


def test_the_docs_have_whole_example_configs() -> None:
    assert {e[0].split("#")[0] for e in EXAMPLES} >= {"README.md", "docs/config.md", "docs/on-premises.md",
                                                     "docs/openshift.md",
                                                     "systemd/bootserver.yaml.example", "container/bootserver.yaml"}


@pytest.mark.parametrize("name,text,files", EXAMPLES, ids=[e[0] for e in EXAMPLES])
async def test_every_shipped_example_config_passes_check_config(tmp_path: Path, name: str, text: str,
                                                                files: Path) -> None:
    where = tmp_path / "etc"
    shutil.copytree(files, where)
    for machine in ("/var/lib/bootserver", "/var/cache/bootserver"):
        text = text.replace(machine, str(tmp_path / machine.strip("/").replace("/", "-")))
    config = where / "bootserver.yaml"
    config.write_text(text)
    if re.search(r"^  tls:", text, re.M):
        rc, _, err = await run_cli("tls", "init", "--config", str(config))
        assert rc == 0, err
    if re.search(r"^dhcp:", text, re.M):
        why = netns.unavailable()
        if why is not None:
            pytest.skip(why)
        with netns.TestNetwork("trial-ex") as network:
            network.interface("br-prov", "192.0.2.2/24")
            p = network.run([*BOOTSERVER, "check-config", "--config", str(config)])
        rc, out, err = p.returncode, p.stdout, p.stderr
    else:
        rc, out, err = await run_cli("check-config", "--config", str(config))
    assert rc == 0, f"{name}: {err}"
    assert out.startswith(f"{config}: ok: "), out
