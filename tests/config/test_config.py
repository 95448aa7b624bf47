"""Config loading: exact one-line errors naming file and key path, exit 2, defaults, immutability."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError
from support.forked_cli import run_forked_sync
from support.helpers import REPO

from bootserver.config import FCOS_STABLE_URL, load_config
from bootserver.errors import ConfigError
from bootserver.inventory import inventory

BASE = """
streams:
  rhcos-4.16: {metadata: REF/rhcos-stream-4.16.json}
profiles:
  master: {stream: rhcos-4.16, install_dev: /dev/sda}
nodes:
  master-0: {profile: master, mac: "52:54:00:12:34:56"}
"""


def write(tmp_path: Path, reference: Path, extra: str = "", replace: tuple[str, str] | None = None) -> Path:
    text = BASE.replace("REF", str(reference))
    if replace:
        text = text.replace(*replace)
    path = tmp_path / "bootserver.yaml"
    path.write_text(text + extra)
    return path


CASES = [
    (("profile: master,", "profile: mastr,"), "", "nodes.master-0.profile: no profile 'mastr'"),
    (("stream: rhcos-4.16,", "stream: rhcos-4.9,"), "", "profiles.master.stream: no stream 'rhcos-4.9'"),
    (None, "colour: blue\n", "colour: unknown key (known: server, cache_dir, state_dir, read_through, upstream, "
     "streams, facilities, profiles, nodes, metal, timeline, state_store, include, dhcp)"),
    (("install_dev: /dev/sda", "install_dev: /dev/sda, colour: red"), "", "profiles.master.colour: unknown key "
     "(known: stream, arch, mode, install_dev, ignition, ignition_version, kargs, console, platform_id, "
     "provider, metal, redfish, ipmi, boot_once, checkin, network, secure_boot, artifact_rate)"),
    (None, "server: {tls: {listen: ':8443', lisen: ':1'}}\n", "server.tls.lisen: unknown key "
     "(known: listen, base_url, cert, key, ca, allow_plain_configs)"),
    (None, "metal: {plan: c3.small.x86}\n", "metal.plan: unknown key (known: api_url, project, tag)"),
    (("install_dev: /dev/sda", "install_dev: /dev/sda, metal: {metro: da, facility: [da11]}"), "",
     "profiles.master.metal.facility: set metro or facility (deprecated), not both"),
    (("rhcos-4.16: {metadata: ", "rhcos-4.16: {architectures: [x86_64, s390x], metadata: "), "",
     "streams.rhcos-4.16.architectures[1]: input should be 'x86_64' or 'aarch64', got 's390x'"),
    (("install_dev: /dev/sda", "mode: install"), "", "profiles.master.install_dev: required when mode is install"),
    (("install_dev: /dev/sda", "install_dev: /dev/sda, mode: rescue"), "",
     "profiles.master.mode: input should be 'install', 'live' or 'agent', got 'rescue'"),
    (("install_dev: /dev/sda", "install_dev: /dev/sda, kargs: nosmt"), "",
     "profiles.master.kargs: expected a list, got str 'nosmt'"),
    (("install_dev: /dev/sda", "install_dev: '/dev/sda${x}'"), "",
     "profiles.master.install_dev: '/dev/sda${x}' contains '${', which iPXE would not read literally"),
    (("install_dev: /dev/sda", "install_dev: /dev/sda, kargs: ['a&&b']"), "",
     "profiles.master.kargs: item 0: 'a&&b' contains '&&', which iPXE would not read literally"),
    (("install_dev: /dev/sda", "install_dev: /dev/sda, kargs: [nosmt, ';']"), "",
     "profiles.master.kargs: item 1: ';' is a command separator to iPXE"),
    (("install_dev: /dev/sda", "install_dev: ';'"), "",
     "profiles.master.install_dev: ';' is a command separator to iPXE"),
    (("install_dev: /dev/sda", "install_dev: /dev/sda, console: ';'"), "",
     "profiles.master.console: ';' is a command separator to iPXE"),
    (("install_dev: /dev/sda", "install_dev: /dev/sda, kargs: ['ignition.platform.id=metal']"), "",
     "profiles.master.kargs: item 0: ignition.platform.id is set by bootserver from the profile; "
     "do not set it in kargs"),
    (("install_dev: /dev/sda", "install_dev: /dev/sda, arch: ppc64le"), "",
     "profiles.master.arch: input should be 'x86_64' or 'aarch64', got 'ppc64le'"),
    (("install_dev: /dev/sda", "install_dev: /dev/sda, arch: aarch64"), "",
     "profiles.master.arch: stream 'rhcos-4.16' does not list architecture 'aarch64'"),
    (("mac: \"52:54:00:12:34:56\"", "mac: 52-54-00-zz"), "", "nodes.master-0.mac: not a MAC address: '52-54-00-zz'"),
    (("mac: \"52:54:00:12:34:56\"", "mac: 52:54:00:12:34:56"), "",
     "nodes.master-0.mac: put MAC addresses in quotes: YAML reads an unquoted 52:54:00:12:34:56 as a number"),
    (("mac: \"52:54:00:12:34:56\"", "facility: da11"), "", "nodes.master-0.facility: no facility 'da11'"),
    (None, "server: {listen: 8080}\n", "server.listen: expected a string or a list of strings, got int 8080"),
    (None, "server: {listen: 'localhost'}\n",
     "server.listen[0]: must be host:port, e.g. 127.0.0.1:8080, got 'localhost'"),
    (None, "server: {base_url: 'ftp://boot'}\n", "server.base_url[0]: must be an http:// or https:// URL, got 'ftp://boot'"),
    (None, "server: {base_url: 'http://boot/${x}'}\n",
     "server.base_url[0]: 'http://boot/${x}' contains '${', which iPXE would not read literally"),
    (("rhcos-4.16: {metadata: ", "rhcos-4.16: {architectures: x86_64, metadata: "), "",
     "streams.rhcos-4.16.architectures: expected a list, got str 'x86_64'"),
    (None, "facilities: {'da 11': {}}\n", "facilities.da 11: names start with a letter or digit and use "
     "only letters, digits, '.', '_' and '-', at most 63 characters"),
    (("install_dev: /dev/sda", "install_dev: /dev/sda, ignition: missing.ign"), "",
     "profiles.master.ignition: cannot read {tmp}/missing.ign: No such file or directory"),
]


@pytest.mark.parametrize("replace,extra,message", CASES)
def test_config_errors_name_file_and_key(replace, extra, message, tmp_path: Path, reference: Path) -> None:
    path = write(tmp_path, reference, extra, replace)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: " + message.replace("{tmp}", str(tmp_path))


def test_spec2_pointer_config_is_refused(tmp_path: Path, reference: Path) -> None:
    ign = reference / "openshift-pointer-master-v2.2.ign.json"
    path = write(tmp_path, reference, replace=("install_dev: /dev/sda", f"install_dev: /dev/sda, ignition: {ign}"))
    with pytest.raises(ConfigError, match=r"profiles\.master\.ignition: .* is Ignition spec 2\.2\.0; only spec 3\.x"):
        load_config(path)


def test_yaml_syntax_error_names_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("server:\n  listen: [\n")
    with pytest.raises(ConfigError, match=r"broken\.yaml: line \d+: invalid YAML"):
        load_config(path)


def test_check_config_exits_2_with_one_line(tmp_path: Path, reference: Path) -> None:
    path = write(tmp_path, reference, replace=("profile: master,", "profile: mastr,"))
    proc = subprocess.run([sys.executable, "-m", "bootserver", "check-config", "--config", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == f"bootserver: {path}: nodes.master-0.profile: no profile 'mastr'\n"
    assert proc.stdout == ""


def test_check_config_ok_and_env_fallback(tmp_path: Path, reference: Path) -> None:
    path = write(tmp_path, reference)
    env = {"BOOTSERVER_CONFIG": str(path), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "bootserver", "check-config"], capture_output=True, text=True,
                          timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "1 stream, 1 profile, 1 node" in proc.stdout


def test_missing_config_file_is_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "bootserver", "check-config", "--config",
                           str(tmp_path / "nope.yaml")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("nope.yaml: cannot read config: No such file or directory")


def test_embedded_default_offers_fcos_stable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BOOTSERVER_CONFIG", raising=False)
    cfg = load_config(None)
    assert cfg.server.listen == ("127.0.0.1:8080",)
    assert cfg.streams["fcos-stable"].metadata == FCOS_STABLE_URL
    assert cfg.source == "<default>"
    assert "bootserver" in str(cfg.cache_dir)
    assert dict(cfg.node_sources) == {"fcos-live": "file:<default>"}


def test_config_is_immutable_and_paths_are_relative_to_the_file(tmp_path: Path, reference: Path) -> None:
    path = write(tmp_path, reference, "cache_dir: cache\n")
    cfg = load_config(path)
    assert cfg.cache_dir == tmp_path / "cache"
    assert dict(cfg.node_sources) == {"master-0": f"file:{path}"}
    with pytest.raises(TypeError):
        cfg.node_sources["x"] = "store"  # type: ignore[index]
    with pytest.raises(AttributeError):
        cfg.cache_dir = Path("/")  # type: ignore[misc]
    with pytest.raises(TypeError):
        cfg.nodes["x"] = cfg.nodes["master-0"]  # type: ignore[index]
    with pytest.raises(ValidationError, match="frozen"):
        cfg.profiles["master"].install_dev = "/dev/sdb"  # type: ignore[misc]


def test_mac_selectors_are_normalised(tmp_path: Path, reference: Path) -> None:
    path = write(
        tmp_path,
        reference,
        replace=('mac: "52:54:00:12:34:56"', "mac: [52-54-00-AB-CD-EF, '52:54:00:00:00:01']"),
    )
    nodes = inventory(load_config(path))
    assert nodes["master-0"].mac == ("52:54:00:ab:cd:ef", "52:54:00:00:00:01")
    assert nodes.find(mac="52:54:00:ab:cd:ef").name == "master-0"
    assert nodes.find(mac="52-54-00-00-00-01").name == "master-0"
    assert nodes.by_mac("52:54:00:00:00:02") is None


def test_documented_example_config_loads(tmp_path: Path) -> None:
    """The config block in README.md uses only real keys (it names files that need not exist)."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Configuration reference", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    doc = yaml.safe_load(block)
    doc["streams"]["rhcos-4.16"]["metadata"] = "https://example.invalid/rhcos.json"
    (tmp_path / "master.ign").write_text('{"ignition": {"version": "3.2.0"}}')
    from bootserver.config import parse_config

    cfg = parse_config(doc, "README.md", tmp_path)
    assert cfg.nodes["master-0"].hostname == "master-0"


# --- issue 16: duplicate keys ---------------------------------------------------------------------


def test_duplicate_node_is_refused_naming_the_key(tmp_path: Path, reference: Path) -> None:
    path = write(tmp_path, reference, '  master-0: {profile: master, mac: "52:54:00:12:34:57"}\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: nodes.master-0: duplicate key on lines 7 and 8"


def test_duplicate_nested_key_names_its_path(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("server:\n  listen: ':1'\n  trusted_proxies: [10.0.0.1]\n  listen: ':2'\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: server\.listen: duplicate key on lines 2 and 4$"):
        load_config(path)


def test_merge_keys_may_override(tmp_path: Path, reference: Path) -> None:
    """``<<: *anchor`` then a key of the anchor is YAML's way to override, not a duplicate."""
    path = write(tmp_path, reference, "  master-1: &m {profile: master}\n  master-2: {<<: *m, profile: master}\n")
    assert set(load_config(path).nodes) == {"master-0", "master-1", "master-2"}


# --- issue 16: one rule for node names and hostnames ----------------------------------------------


def test_a_node_name_that_is_not_a_hostname_needs_hostname(tmp_path: Path, reference: Path) -> None:
    path = write(tmp_path, reference, replace=("master-0: {", "master_0: {"))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: nodes.master_0: 'master_0' is not a valid hostname, and a node "
                                      "without hostname: uses its name as hostname: set hostname: or rename the node")
    path = write(tmp_path, reference, replace=("master-0: {", "master_0: {hostname: master-0, "))
    nodes = inventory(load_config(path))
    assert nodes["master_0"].hostname == "master-0"
    assert nodes.find(hostname="MASTER-0").name == "master_0"


def test_hostname_key_follows_the_same_rule(tmp_path: Path, reference: Path) -> None:
    path = write(tmp_path, reference, replace=("master-0: {", "master-0: {hostname: master_0, "))
    with pytest.raises(ConfigError, match=r"nodes\.master-0\.hostname: not a valid hostname: 'master_0' "
                       r"\(a hostname has labels"):
        load_config(path)


# --- issue 16: error lines ------------------------------------------------------------------------


def _bootserver(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``bootserver ARGV`` in a process of its own (forked, :mod:`support.forked_cli`; the tests above run
    the real ``python -m bootserver``)."""
    return run_forked_sync(argv, timeout=60, env=env)


@pytest.mark.parametrize("name,shown", [("master\\n0", "'master\\n0'"), ("m\\0", "'m\\x00'"),
                                        ("...", "..."), ("-m", "-m"), ("m" * 64, "m" * 64)])
def test_a_bad_node_name_gives_one_safe_line_with_the_real_rule(tmp_path: Path, reference: Path, name: str,
                                                                shown: str) -> None:
    path = write(tmp_path, reference, replace=("master-0: {", f'"{name}": {{'))
    proc = _bootserver("check-config", "--config", str(path))
    assert proc.returncode == 2
    assert proc.stderr == (f"bootserver: {path}: nodes.{shown}: names start with a letter or digit and use only "
                           "letters, digits, '.', '_' and '-', at most 63 characters\n")


def test_metadata_with_another_scheme_is_an_unsupported_scheme(tmp_path: Path, reference: Path) -> None:
    path = write(tmp_path, reference, replace=(f"metadata: {reference}/rhcos-stream-4.16.json",
                                               "metadata: ftp://mirror.example/rhcos.json"))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (f"{path}: streams.rhcos-4.16.metadata: unsupported URL scheme 'ftp': use an http(s) "
                               "URL or a file path, got 'ftp://mirror.example/rhcos.json'")


def test_config_option_before_the_subcommand(tmp_path: Path, reference: Path) -> None:
    path = write(tmp_path, reference)
    proc = _bootserver("--config", str(path), "check-config")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == f"{path}: ok: 1 stream, 1 profile, 1 node\n"
    # given twice, the one after the subcommand wins
    proc = _bootserver("--config", str(tmp_path / "nope.yaml"), "check-config", "--config", str(path))
    assert proc.returncode == 0, proc.stderr


def test_url_expiry_beyond_what_the_server_accepts_is_exit_2(tmp_path: Path, reference: Path) -> None:
    path = write(tmp_path, reference, f"state_dir: {tmp_path / 'state'}\n")
    proc = _bootserver("url", "master-0", "--config", str(path), "--expires", "99999999d")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines()[-1] == ("bootserver url: error: argument --expires: duration must be at most "
                                            "36500d: '99999999d'")
    assert _bootserver("url", "master-0", "--config", str(path), "--expires", "36500d").returncode == 0


# --- issue 16: local inputs that cannot work are refused at check-config and serve ----------------


def _stream(reference: Path) -> dict:
    import json

    return json.loads((reference / "rhcos-stream-4.16.json").read_text())


def _metadata_cases(reference: Path) -> list[tuple[str, bytes, str]]:
    import json

    text = (reference / "rhcos-stream-4.16.json").read_text()
    no_arch = _stream(reference)
    del no_arch["architectures"]["x86_64"]
    no_pxe = _stream(reference)
    del no_pxe["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["pxe"]
    return [
        ("html", b"<!DOCTYPE html><html><body>Sign in</body></html>", "not JSON: "),
        ("truncated", text[: len(text) // 2].encode(), "not JSON: "),
        ("no-arch", json.dumps(no_arch).encode(), "architectures.x86_64: architecture missing"),
        ("no-pxe", json.dumps(no_pxe).encode(), "architectures.x86_64.artifacts.metal.formats.pxe: missing"),
    ]


@pytest.mark.parametrize("case", ["html", "truncated", "no-arch", "no-pxe"])
def test_check_config_refuses_unusable_local_stream_metadata(tmp_path: Path, reference: Path, case: str) -> None:
    data, problem = next((d, p) for c, d, p in _metadata_cases(reference) if c == case)
    bad = tmp_path / "rhcos.json"
    bad.write_bytes(data)
    path = write(tmp_path, reference, replace=(f"{reference}/rhcos-stream-4.16.json", str(bad)))
    load_config(path)  # loading alone does not read it: other commands still work
    for command in ("check-config", "serve"):
        proc = _bootserver(command, "--config", str(path))
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(f"bootserver: {path}: streams.rhcos-4.16.metadata: {bad}: not usable stream "
                                      f"metadata: {problem}")
        assert proc.stderr.count("\n") == 1 and proc.stdout == ""


@pytest.mark.parametrize("ignition,problem", [
    ({"ignition": {"version": "3.9.0"}},
     "ignition.version: unknown Ignition spec version '3.9.0' (known: 3.1.0, 3.2.0, 3.3.0, 3.4.0, 3.5.0)"),
    ({"ignition": {"version": "3.2.0"}, "storage": {"files": "nope"}}, "storage.files: 'nope' is not of type 'array'"),
    ({"ignition": {"version": "3.2.0"}, "storage": {"files": [{"path": "etc/motd"}]}},
     "storage.files[0].path: path not absolute: 'etc/motd'"),
])
def test_check_config_refuses_an_ignition_file_its_spec_refuses(tmp_path: Path, reference: Path, ignition: dict,
                                                                problem: str) -> None:
    import json

    ign = tmp_path / "master.ign"
    ign.write_text(json.dumps(ignition))
    path = write(tmp_path, reference, replace=("install_dev: /dev/sda", "install_dev: /dev/sda, ignition: master.ign"))
    proc = _bootserver("check-config", "--config", str(path))
    assert proc.returncode == 2
    assert proc.stderr == (f"bootserver: {path}: profiles.master.ignition: {ign}: not a valid Ignition config: "
                           f"{problem}\n")


def test_check_config_accepts_the_openshift_pointer_config(tmp_path: Path, reference: Path) -> None:
    ign = reference / "openshift-pointer-master.ign.json"
    path = write(tmp_path, reference, replace=("install_dev: /dev/sda", f"install_dev: /dev/sda, ignition: {ign}"))
    proc = _bootserver("check-config", "--config", str(path))
    assert (proc.returncode, proc.stderr) == (0, "")


def test_check_config_and_serve_refuse_missing_tls_files(tmp_path: Path, reference: Path) -> None:
    state = tmp_path / "state"
    path = write(tmp_path, reference, f"state_dir: {state}\nserver: {{tls: {{listen: '127.0.0.1:1'}}}}\n")
    for command in ("check-config", "serve"):
        proc = _bootserver(command, "--config", str(path))
        assert proc.returncode == 2
        assert proc.stderr == (f"bootserver: {path}: server.tls.cert: cannot read {state}/tls/server.crt: "
                               "No such file or directory (run `bootserver tls init`?)\n")
    assert _bootserver("tls", "init", "--config", str(path)).returncode == 0
    proc = _bootserver("check-config", "--config", str(path))
    assert (proc.returncode, proc.stderr) == (0, "")


# --- issue 16: every shipped config passes the real check-config ----------------------------------

SHIPPED = ["systemd/bootserver.yaml.example", "container/bootserver.yaml"]


@pytest.mark.parametrize("shipped", SHIPPED)
def test_shipped_configs_pass_check_config(tmp_path: Path, reference: Path, shipped: str) -> None:
    """Each shipped config, as installed (its Ignition files beside it: a real openshift-install pointer
    config), passes `bootserver check-config`, the command its unit or image would run."""
    import shutil

    source = REPO / shipped
    path = tmp_path / "bootserver.yaml"
    shutil.copy(source, path)
    shutil.copy(reference / "openshift-pointer-master.ign.json", tmp_path / "master.ign")
    proc = _bootserver("check-config", "--config", str(path))
    # the container's config names no node yet (its comments say how): the one warning says so
    warning = "" if load_config(path).nodes else (f"bootserver: warning: {path}: no nodes and no default node: no "
                                                  "machine would boot from this server (add nodes:, or a node with "
                                                  "default: true for any machine that chains /boot.ipxe)\n")
    assert (proc.returncode, proc.stderr) == (0, warning)
    assert proc.stdout.startswith(f"{path}: ok: ")


def test_every_shipped_config_is_tested() -> None:
    repo = REPO
    found = {
        str(p.relative_to(repo))
        for pattern in ("systemd/*.yaml*", "container/*.yaml*")
        for p in repo.glob(pattern)
    }
    assert found == set(SHIPPED)


# --- issue 30: config files and CLI manners ---------------------------------------------------------


def test_a_config_that_is_not_utf8_is_one_line_with_the_byte_offset(tmp_path: Path, reference: Path) -> None:
    path = write(tmp_path, reference)
    text = path.read_bytes()
    path.write_bytes(text + b"# caf\xe9\n")  # Latin-1
    proc = _bootserver("check-config", "--config", str(path))
    assert proc.returncode == 2
    assert proc.stderr == (f"bootserver: {path}: not UTF-8 text: byte {len(text) + 5} (0xe9) is not valid UTF-8; "
                           "save the file as UTF-8\n")


@pytest.mark.parametrize(("nodes", "message"), [
    ("  master-1: {profile: master, hostname: MASTER-0}\n",
     "nodes.master-0: hostname master-0 is already the hostname of node 'master-1'; two nodes cannot share one"),
    ("  m1: {profile: master, hostname: shared}\n  shared: {profile: master}\n",
     "nodes.shared: hostname shared is already the hostname of node 'm1'; two nodes cannot share one"),
    ("  m1: {profile: master, uuid: 4c4c4544-0042-3510-8052-b3c04f4e3132}\n"
     "  m2: {profile: master, uuid: 4C4C4544-0042-3510-8052-B3C04F4E3132}\n",
     "nodes.m2.uuid: 4c4c4544-0042-3510-8052-b3c04f4e3132 is already the SMBIOS UUID of node 'm1'"),
])
def test_two_nodes_with_one_hostname_or_uuid_are_refused_naming_both(tmp_path: Path, reference: Path, nodes: str,
                                                                      message: str) -> None:
    path = write(tmp_path, reference, replace=("nodes:\n", "nodes:\n" + nodes))
    proc = _bootserver("check-config", "--config", str(path))
    assert (proc.returncode, proc.stderr) == (2, f"bootserver: {path}: {message}\n")


@pytest.mark.parametrize(("extra", "key", "missing"), [
    ("  master-0: {profile: master, provider: redfish, redfish: {address: 'https://bmc.example', "
     "username: root, password_file: bmc.pass}}\n", "nodes.master-0.redfish.password_file", "bmc.pass"),
    ("  master-0: {profile: master, provider: redfish, redfish: {address: 'https://bmc.example', "
     "username: root, password_env: X, verify_tls: bmc-ca.pem}}\n", "nodes.master-0.redfish.verify_tls", "bmc-ca.pem"),
    ("  master-0: {profile: master, provider: ipmi, ipmi: {address: 10.0.0.9, username: root, "
     "password_file: ipmi.pass}}\n", "nodes.master-0.ipmi.password_file", "ipmi.pass"),
    ("state_store: {url: 'postgresql://boot@db.example/boot', password_file: db.pass}\n",
     "state_store.password_file", "db.pass"),
    ("server: {admin: {token_file: admin.token}}\n", "server.admin.token_file", "admin.token"),
])
def test_check_config_names_a_local_file_the_config_names_that_cannot_be_read(tmp_path: Path, reference: Path,
                                                                              extra: str, key: str,
                                                                              missing: str) -> None:
    if extra.startswith("  "):
        node = "  master-0: {profile: master, mac: \"52:54:00:12:34:56\"}\n"
        path = write(tmp_path, reference, replace=(node, extra))
    else:
        path = write(tmp_path, reference, extra)
    for command in ("check-config", "serve"):
        proc = _bootserver(command, "--config", str(path))
        assert (proc.returncode, proc.stderr) == (
            2, f"bootserver: {path}: {key}: cannot read {tmp_path / missing}: No such file or directory\n"), command
    (tmp_path / missing).write_text("a-secret-of-32-characters-at-least\n")
    proc = _bootserver("check-config", "--config", str(path))
    assert (proc.returncode, proc.stderr) == (0, "")


@pytest.mark.parametrize(("server", "message"), [
    ("{listen: '127.0.0.1:8080', admin: {listen: '127.0.0.1:8080'}}",
     "127.0.0.1:8080 is also the device listener's address (server.listen: 127.0.0.1:8080)"),
    ("{listen: '0.0.0.0:8080', admin: {listen: 'localhost:8080'}}",
     "localhost:8080 is also the device listener's address (server.listen: 0.0.0.0:8080)"),
    ("{listen: '[::]:9000', admin: {listen: '[::1]:9000'}}",
     "[::1]:9000 is also the device listener's address (server.listen: [::]:9000)"),
    ("{listen: '127.0.0.1:8080', tls: {listen: '127.0.0.1:8443'}, admin: {listen: '127.0.0.1:8443'}}",
     "127.0.0.1:8443 is also the device listener's address (server.tls.listen: 127.0.0.1:8443)"),
])
def test_check_config_refuses_an_admin_address_a_device_listener_takes(tmp_path: Path, reference: Path, server: str,
                                                                       message: str) -> None:
    path = write(tmp_path, reference, f"server: {server}\n")
    proc = _bootserver("check-config", "--config", str(path))
    assert (proc.returncode, proc.stderr) == (2, f"bootserver: {path}: server.admin.listen: {message}; give the "
                                                 "admin listener a port of its own\n")


def test_an_admin_address_beside_the_device_one_passes(tmp_path: Path, reference: Path) -> None:
    path = write(tmp_path, reference, "server: {listen: '10.0.0.5:8080', admin: {listen: '127.0.0.1:8080'}}\n")
    proc = _bootserver("check-config", "--config", str(path))
    assert (proc.returncode, proc.stderr) == (0, "")


def test_check_config_refuses_a_unix_socket_in_a_folder_that_does_not_exist(tmp_path: Path, reference: Path) -> None:
    sock = tmp_path / "run" / "admin.sock"
    path = write(tmp_path, reference, f"server: {{admin: {{listen: '{sock}'}}}}\n")
    proc = _bootserver("check-config", "--config", str(path))
    assert (proc.returncode, proc.stderr) == (
        2, f"bootserver: {path}: server.admin.listen: {sock}: no folder {sock.parent} for the Unix socket\n")


@pytest.mark.parametrize("text", ["", "{}\n", "null\n", "streams: {}\nprofiles: {}\n"])
def test_a_config_with_no_node_says_no_machine_would_boot(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bootserver.yaml"
    path.write_text(text)
    proc = _bootserver("check-config", "--config", str(path))
    assert proc.returncode == 0
    assert proc.stderr == (f"bootserver: warning: {path}: no nodes and no default node: no machine would boot from "
                           "this server (add nodes:, or a node with default: true for any machine that chains "
                           "/boot.ipxe)\n")


def test_global_options_work_before_or_after_the_command(tmp_path: Path, reference: Path) -> None:
    path = write(tmp_path, reference, f"state_dir: {tmp_path / 'state'}\n")
    help_text = _bootserver("--help").stdout
    for option in ("--config PATH", "--log-level", "--log-format"):
        assert option in help_text.split("COMMAND ...")[1]
    for argv in (["--log-level", "debug", "--log-format", "json", "nodes", "--config", str(path)],
                 ["nodes", "--log-level", "debug", "--config", str(path), "--log-format", "json"],
                 ["--config", str(path), "--log-level", "warning", "nodes"]):
        proc = _bootserver(*argv)
        assert proc.returncode == 0, (argv, proc.stderr)
        assert proc.stdout.startswith("NODE"), proc.stdout
    proc = _bootserver("--log-level", "loud", "nodes")
    assert proc.returncode == 2 and "invalid choice: 'loud'" in proc.stderr


def test_nodes_show_says_a_node_has_no_events(tmp_path: Path, reference: Path) -> None:
    path = write(tmp_path, reference, f"state_dir: {tmp_path / 'state'}\n")
    proc = _bootserver("nodes", "show", "master-0", "--config", str(path))
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == "master-0: no events yet (stage new): no request of this node has reached the server\n"
