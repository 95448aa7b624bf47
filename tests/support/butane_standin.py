"""A STAND-IN for the ``butane`` binary, for tests only: the real translator (a Go binary from
https://github.com/coreos/butane) cannot be installed on these machines (no Debian or PyPI package).

It follows butane's documented command line (``butane --help``, https://coreos.github.io/butane/):

    butane [-s|--strict] [-p|--pretty] [-r|--raw] [-d|--files-dir DIR] [-o|--output FILE] [INPUT]

reading the Butane config from INPUT or stdin, writing the Ignition config as JSON to stdout (or
``--output``), and on failure butane's message on stderr with exit status 1. It translates only the
subset of Butane the tests use, as butane does: ``variant``/``version`` become ``ignition.version`` (the
variant's documented version table), ``storage.files[].contents.inline`` and ``.local`` (read from
``--files-dir``) become data URLs, everything else is copied. Unknown top-level keys are warnings
(``warning at $.KEY, line N col 1: Unused key KEY``), fatal with ``--strict``. ``variant: openshift``
without ``--raw`` is refused (real butane would write a MachineConfig).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.parse
from pathlib import Path

import yaml

#: Butane spec version -> Ignition spec version, per variant (Butane's "Config versions" table).
VERSIONS = {
    "fcos": {"1.0.0": "3.0.0", "1.1.0": "3.1.0", "1.2.0": "3.2.0", "1.3.0": "3.2.0", "1.4.0": "3.3.0",
             "1.5.0": "3.4.0", "1.6.0": "3.5.0"},
    "openshift": {"4.8.0": "3.2.0", "4.9.0": "3.2.0", "4.10.0": "3.2.0", "4.11.0": "3.2.0", "4.12.0": "3.2.0",
                  "4.13.0": "3.2.0", "4.14.0": "3.4.0", "4.15.0": "3.4.0", "4.16.0": "3.4.0"},
}
KNOWN_KEYS = {"variant", "version", "ignition", "passwd", "storage", "systemd", "kernel_arguments", "boot_device",
              "metadata", "openshift"}


class Failure(Exception):
    """butane's own message for a failed translation."""


def data_url(data: bytes) -> str:
    return "data:," + urllib.parse.quote(data.decode(), safe="")


def translate(doc: object, files_dir: Path | None, raw: bool, text: str) -> tuple[dict, list[str]]:
    if not isinstance(doc, dict):
        raise Failure("Error translating config: error at $: config must be a mapping")
    variant, version = doc.get("variant"), doc.get("version")
    if variant not in VERSIONS:
        raise Failure(f"Error translating config: No translator exists for variant {variant} with version {version}")
    if version not in VERSIONS[variant]:
        raise Failure(f"Error translating config: No translator exists for variant {variant} with version {version}")
    if variant == "openshift" and not raw:
        raise Failure("stand-in butane: MachineConfig output is not supported; use --raw")
    warnings = []
    lines = text.splitlines()
    for key in doc:
        if key not in KNOWN_KEYS:
            line = next((i + 1 for i, ln in enumerate(lines) if ln.startswith(f"{key}:")), 0)
            warnings.append(f"warning at $.{key}, line {line} col 1: Unused key {key}")
    out = {k: v for k, v in doc.items() if k in KNOWN_KEYS - {"variant", "version", "metadata", "openshift"}}
    out["ignition"] = {**(doc.get("ignition") or {}), "version": VERSIONS[variant][version]}
    for i, f in enumerate(out.get("storage", {}).get("files", [])):
        contents = f.get("contents") or {}
        if "inline" in contents:
            contents["source"] = data_url(str(contents.pop("inline")).encode())
        elif "local" in contents:
            where = f"$.storage.files.{i}.contents.local"
            if files_dir is None:
                raise Failure(f"Error translating config: error at {where}: local file paths are relative to a "
                              "files directory that must be specified with -d/--files-dir")
            path = files_dir / contents.pop("local")
            try:
                contents["source"] = data_url(path.read_bytes())
            except OSError as e:
                raise Failure(f"Error translating config: error at {where}: open {path}: "
                              f"{(e.strerror or str(e)).lower()}") from None
    return out, warnings


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="butane")
    p.add_argument("input", nargs="?")
    p.add_argument("-s", "--strict", action="store_true")
    p.add_argument("-p", "--pretty", action="store_true")
    p.add_argument("-r", "--raw", action="store_true")
    p.add_argument("-d", "--files-dir")
    p.add_argument("-o", "--output")
    args = p.parse_args(argv)
    try:
        text = Path(args.input).read_text() if args.input else sys.stdin.read()
    except OSError as e:
        print(f"Failed to open {args.input}: {e.strerror}", file=sys.stderr)
        return 1
    try:
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
            raise Failure(f"Error translating config: error at {where}{getattr(e, 'problem', e)}") from None
        out, warnings = translate(doc, Path(args.files_dir) if args.files_dir else None, args.raw, text)
    except Failure as e:
        print(e, file=sys.stderr)
        return 1
    for w in warnings:
        print(w, file=sys.stderr)
    if warnings and args.strict:
        print("Config produced warnings and --strict was specified", file=sys.stderr)
        return 1
    body = json.dumps(out, indent=2 if args.pretty else None, separators=None if args.pretty else (",", ":"))
    if args.output:
        Path(args.output).write_text(body + "\n")
    else:
        sys.stdout.write(body + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
