"""The deployment files: systemd units (systemd/) and the container image (container/, .dockerignore).

No init system or container engine runs here, so the checks are the real tools that can run without
one (``systemd-analyze verify`` and ``security --offline``, ``hadolint``), the HEALTHCHECK command
run against a local HTTP server, and a parse of the Containerfile for the instructions users rely on.
"""

from __future__ import annotations

import fnmatch
import http.server
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SYSTEMD = REPO / "systemd"
CONTAINERFILE = REPO / "container" / "Containerfile"
UNITS = ["bootserver.service", "bootserver-sync.service", "bootserver-sync.timer", "bootserver-dhcp.service"]
SERVICES = UNITS[:2]
CONFIG = "/etc/bootserver/bootserver.yaml"
TIMEOUT = 60  # seconds for every tool run; each takes well under a second here


def _run(*argv: str) -> subprocess.CompletedProcess:
    """Run a command to completion (bounded by TIMEOUT); the caller judges its exit status."""
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=TIMEOUT)


def _tool(name: str) -> str:
    """The executable ``name``: the one installed in this venv (pip test extras) first, then PATH."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.exists() else shutil.which(name)
    assert found, f"{name} is not installed (see .ci/apt-packages.txt and the test extras)"
    return found


# --- systemd units ---------------------------------------------------------------------------------


def _setting(unit: str, key: str) -> list[str]:
    """Every value of ``key`` in a unit file of systemd/, in order (keys may repeat)."""
    values = []
    for line in (SYSTEMD / unit).read_text().splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and name.strip() == key and not name.startswith(("#", ";")):
            values.append(value.strip())
    return values


def _install_units(dest: Path, edit=lambda name, text: text) -> list[Path]:
    """Copy the units into ``dest`` for systemd-analyze, which fails a unit whose ExecStart binary does
    not exist. /usr/bin/bootserver only exists on a real install, so ExecStart is pointed at this venv's
    ``bootserver`` console script, or /bin/true when the project is not installed in it."""
    script = Path(sys.executable).with_name("bootserver")
    exe = str(script) if script.exists() else "/bin/true"
    paths = []
    for name in UNITS:
        text = (SYSTEMD / name).read_text().replace("/usr/bin/bootserver ", exe + " ")
        path = dest / name
        path.write_text(edit(name, text))
        paths.append(path)
    return paths


def _verify_problems(paths: list[Path]) -> list[str]:
    """What ``systemd-analyze verify`` finds wrong with ``paths``. It exits 0 on unknown keys and bad
    values (it only logs "Unknown key ..., ignoring" or "Failed to parse ..."), so every line of its
    output that names one of our files counts as a problem, as does a non-zero exit."""
    result = _run(_tool("systemd-analyze"), "verify", "--man=no", *map(str, paths))
    output = (result.stdout + result.stderr).splitlines()
    problems = [line for line in output if any(p.name in line for p in paths)]
    if result.returncode != 0:
        problems.append(f"exit status {result.returncode}: " + " | ".join(output))
    return problems


def test_units_pass_systemd_analyze_verify(tmp_path):
    assert _verify_problems(_install_units(tmp_path)) == []


@pytest.mark.parametrize(
    "bad_line, reported",
    [
        ("ProtectKernelTunable=yes", "Unknown key"),  # a typo: systemd would silently ignore it
        ("ProtectSystem=sometimes", "sometimes"),  # an invalid value, also only logged
        ("ExecStartPre=/nonexistent/bootserver check-config", "/nonexistent/bootserver"),
    ],
)
def test_verify_reports_broken_unit(tmp_path, bad_line, reported):
    def add_bad_line(name, text):
        return (
            text.replace("[Service]\n", f"[Service]\n{bad_line}\n") if name == "bootserver.service" else text
        )

    problems = _verify_problems(_install_units(tmp_path, add_bad_line))
    assert any(reported in line and "bootserver.service" in line for line in problems), problems


def _exposure_exceeds(unit: Path, threshold: int) -> subprocess.CompletedProcess:
    # --threshold is on systemd's 0-100 scale (the table prints it divided by 10); exit 1 above it.
    return _run(_tool("systemd-analyze"), "security", "--offline=yes", f"--threshold={threshold}", str(unit))


@pytest.mark.parametrize("service", SERVICES)
def test_services_score_as_hardened(tmp_path, service):
    unit = next(p for p in _install_units(tmp_path) if p.name == service)
    result = _exposure_exceeds(unit, 20)  # "2.0 OK"; an unhardened service scores 9.6 "UNSAFE"
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr


def test_the_dhcp_engine_unit_is_bound_to_the_server_and_hardened_but_for_a_dhcp_servers_needs(tmp_path):
    unit = "bootserver-dhcp.service"
    assert _setting(unit, "ExecStart") == [f"/usr/bin/bootserver dhcp --config {CONFIG}"]
    assert _setting(unit, "BindsTo") == ["bootserver.service"]
    assert _setting(unit, "ReloadPropagatedFrom") == ["bootserver.service"]  # systemctl reload bootserver
    assert _setting(unit, "ExecReload") == ["/bin/kill -HUP $MAINPID"]
    for key in ("DynamicUser", "User", "StateDirectory", "CacheDirectory"):  # state_dir/dhcp is the server's
        assert _setting(unit, key) == _setting("bootserver.service", key), key
    caps = {"CAP_NET_BIND_SERVICE", "CAP_NET_RAW", "CAP_NET_ADMIN"}  # ports 67/69, raw and ARP for DHCP
    assert set(_setting(unit, "CapabilityBoundingSet")[0].split()) == caps
    assert set(_setting(unit, "AmbientCapabilities")[0].split()) == caps
    path = next(p for p in _install_units(tmp_path) if p.name == unit)
    result = _exposure_exceeds(path, 30)  # the capabilities and packet sockets cost a little (2.1 here)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr


def test_security_threshold_fails_an_unhardened_service(tmp_path):
    plain = tmp_path / "plain.service"
    plain.write_text("[Service]\nExecStart=/bin/true\n")
    assert _exposure_exceeds(plain, 20).returncode != 0


def test_server_and_sync_share_user_directories_and_config():
    for key in ("DynamicUser", "User", "StateDirectory", "CacheDirectory"):
        values = [_setting(unit, key) for unit in SERVICES]
        # The same UID and directories: what the sync downloads is what the server serves.
        assert values[0] and values[0] == values[1], (key, values)
    assert _setting("bootserver.service", "ExecStart") == [f"/usr/bin/bootserver serve --config {CONFIG}"]
    assert _setting("bootserver-sync.service", "ExecStart") == [
        f"/usr/bin/bootserver sync-images --config {CONFIG} --prune"
    ]
    assert _setting("bootserver-sync.service", "Type") == ["oneshot"]
    assert _setting("bootserver-sync.timer", "OnCalendar") == ["daily"]
    assert _setting("bootserver-sync.timer", "Persistent") == ["true"]
    assert _setting("bootserver-sync.timer", "RandomizedDelaySec")


# --- example configs -------------------------------------------------------------------------------

NAMED = {"streams", "facilities", "profiles", "nodes"}  # maps whose keys are names the user picks


def _key_paths(tree: dict, prefix: str = "") -> set[str]:
    paths = set()
    for key, value in tree.items():
        path = f"{prefix}.*" if prefix in NAMED else f"{prefix}.{key}".lstrip(".")
        paths.add(path)
        if isinstance(value, dict):
            paths |= _key_paths(value, path)
    return paths


def _readme_key_paths() -> set[str]:
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Configuration reference", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    return _key_paths(yaml.safe_load(block))


def test_key_paths_detects_a_key_missing_from_the_readme():
    assert "server.tls_cert" not in _readme_key_paths()
    assert "profiles.*.install_dev" in _readme_key_paths()


@pytest.mark.parametrize("example", ["systemd/bootserver.yaml.example", "container/bootserver.yaml"])
def test_example_config_uses_readme_keys_and_the_writable_directories(example):
    config = yaml.safe_load((REPO / example).read_text())
    assert _key_paths(config) - _readme_key_paths() == set()
    # Under the units only these directories are writable (ProtectSystem=strict); in the image they
    # are the volumes.
    assert config["cache_dir"] == "/var/cache/" + _setting("bootserver.service", "CacheDirectory")[0]
    assert config["state_dir"] == "/var/lib/" + _setting("bootserver.service", "StateDirectory")[0]
    assert (
        int(config["server"]["listen"].rsplit(":", 1)[1]) >= 1024
    )  # the units grant no CAP_NET_BIND_SERVICE


# --- container image -------------------------------------------------------------------------------


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Containerfile, continuation lines joined, comments dropped."""
    joined, current = [], ""
    for line in text.splitlines():
        if line.strip().startswith("#") and not current:
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        if current.strip():
            joined.append(current.strip())
        current = ""
    return [(i.split(None, 1)[0].upper(), i.split(None, 1)[1]) for i in joined]


def _final_stage() -> list[tuple[str, str]]:
    instructions = _instructions(CONTAINERFILE.read_text())
    last_from = max(i for i, (op, _) in enumerate(instructions) if op == "FROM")
    return instructions[last_from:]


def test_containerfile_lints_clean_with_hadolint():
    result = _run(_tool("hadolint"), "--no-color", str(CONTAINERFILE))
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_hadolint_fails_a_bad_containerfile(tmp_path):
    bad = tmp_path / "Containerfile"
    bad.write_text("FROM python:latest\nRUN cd /src && pip install bootserver\n")
    result = _run(_tool("hadolint"), "--no-color", str(bad))
    assert result.returncode != 0 and "DL3007" in result.stdout


def test_containerfile_builds_in_a_builder_stage_from_python_slim():
    froms = [args.split() for op, args in _instructions(CONTAINERFILE.read_text()) if op == "FROM"]
    assert len(froms) >= 2
    assert froms[0][0] == "python:3.11-slim" and [w.upper() for w in froms[0][1:]] == ["AS", "BUILDER"]
    assert froms[-1][0] == "python:3.11-slim"
    assert not any(op == "ADD" and "://" in args for op, args in _instructions(CONTAINERFILE.read_text()))


def test_containerfile_runtime_contract():
    final = _final_stage()
    users = [args.split(":")[0] for op, args in final if op == "USER"]
    assert users and users[-1] not in ("root", "0")  # the server never runs as root
    assert ("EXPOSE", "8080") in final
    volumes = [json.loads(args) for op, args in final if op == "VOLUME"]
    assert ["/var/cache/bootserver", "/var/lib/bootserver"] in volumes
    assert ("ENTRYPOINT", '["bootserver"]') in final
    assert [json.loads(args) for op, args in final if op == "CMD"] == [["serve", "--config", CONFIG]]
    copied = [args.split() for op, args in final if op == "COPY" and "--from" not in args]
    assert ["container/bootserver.yaml", CONFIG] in copied
    installs = " ".join(args for op, args in final if op == "RUN" and "apt-get install" in args)
    assert "dnsmasq-base" in installs.split()  # the DHCP engine of `bootserver dhcp` (issue 38)


def _healthcheck_argv(port: int) -> list[str]:
    """The HEALTHCHECK's exec-form command, aimed at ``port`` instead of the image's 8080."""
    (args,) = [args for op, args in _final_stage() if op == "HEALTHCHECK"]
    exec_form = args[args.index("CMD") + 3 :].strip()
    return [word.replace(":8080/", f":{port}/") for word in json.loads(exec_form)]


@pytest.fixture
def health_server():
    """A local HTTP server whose /healthz answers with the status in ``server.status``."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(self.server.status if self.path == "/healthz" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)  # listening once constructed
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("status, healthy", [(200, True), (500, False)])
def test_healthcheck_reports_the_healthz_answer(health_server, status, healthy):
    health_server.status = status
    argv = _healthcheck_argv(health_server.server_address[1])
    assert any("/healthz" in word for word in argv)
    assert argv[0] == "python"  # the slim image has python but no curl or wget
    result = _run(sys.executable, *argv[1:])
    assert (result.returncode == 0) == healthy, result.stderr


def test_healthcheck_fails_when_nothing_listens(health_server):
    port = health_server.server_address[1]
    health_server.shutdown()
    health_server.server_close()  # the port is closed: connection refused
    argv = _healthcheck_argv(port)
    assert _run(sys.executable, *argv[1:]).returncode != 0


def _ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore ``patterns`` keep ``path`` (or a folder above it) out of the context."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        for prefix in prefixes:
            if fnmatch.fnmatch(prefix, pattern) or (
                pattern.startswith("**/") and fnmatch.fnmatch(prefix.rsplit("/", 1)[-1], pattern[3:])
            ):
                return True
    return False


def test_dockerignore_keeps_local_clutter_out_but_not_the_build_inputs():
    lines = (REPO / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert not any(p.startswith("!") for p in patterns)  # _ignored does not model re-inclusion
    for path in (".venv/bin/python", ".git/HEAD", "bootserver/__pycache__/cli.cpython-311.pyc"):
        assert _ignored(path, patterns), path
    # What the builder stage needs: pyproject (with README as its readme), the package, data folders.
    for path in (
        "pyproject.toml",
        "README.md",
        "bootserver/cli.py",
        "templates/x.ipxe.j2",
        "ignition/x.json",
        "container/bootserver.yaml",
    ):
        assert not _ignored(path, patterns), path
