"""Butane configs as a profile's real config: translated to Ignition by the real ``butane`` binary.

Butane (https://coreos.github.io/butane/) is the YAML CoreOS users write (``variant: fcos`` or
``openshift``, ``version: 1.x.0``); the ``butane`` binary translates it into an Ignition config. A
profile's ``ignition`` file is a Butane config when its name ends in ``.bu``, or when it is YAML (not
JSON) whose top level has a ``variant`` key. bootserver never translates Butane itself: it runs

    butane --strict --files-dir <the file's folder> [--raw] <file>

(``--raw`` for ``variant: openshift`` only, so the output is an Ignition config, not a MachineConfig),
takes the JSON on stdout, checks it against the official schema of its spec version
(:mod:`bootserver.ignition_schema`), and reports butane's own message (stderr, exit status 1) on
failure. The command line is butane's documented one (``butane --help``: input file or stdin, ``-o/--output``,
``-s/--strict``, ``-d/--files-dir``, ``-p/--pretty``, ``-r/--raw``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import yaml

from . import ignition_schema
from .errors import InputError

#: The translator's executable name, looked up on ``PATH``.
BUTANE = "butane"

#: Seconds one translation may take before it is killed (a small config takes milliseconds).
TIMEOUT = 60.0


class ButaneError(InputError):
    """A Butane config cannot be translated: ``butane`` is not on ``PATH``, or it refused the file
    (the message is butane's own, on one line). Exit status 2."""


def is_butane(path: Path, data: bytes) -> bool:
    """True when the file at ``path`` with bytes ``data`` is a Butane config: its name ends in ``.bu``,
    or it is not JSON but YAML whose top level is a mapping with a ``variant`` key. Never raises."""
    if path.suffix == ".bu":
        return True
    try:
        json.loads(data)
        return False
    except ValueError:
        pass
    try:
        doc = yaml.safe_load(data)
    except yaml.YAMLError:
        return False
    return isinstance(doc, dict) and "variant" in doc


def _variant(data: bytes) -> object:
    try:
        doc = yaml.safe_load(data)
    except yaml.YAMLError:
        return None  # butane reports the syntax error itself
    return doc.get("variant") if isinstance(doc, dict) else None


def translate(path: Path, data: bytes | None = None, *, timeout: float = TIMEOUT) -> bytes:
    """Translate the Butane config at ``path`` with the ``butane`` on ``PATH``; return the Ignition
    config bytes it printed (JSON, as butane wrote them).

    ``data`` (the file's bytes, read here when ``None``) decides ``--raw``; the translation reads the
    file itself, with ``--files-dir`` its folder (``local:`` file contents resolve there).
    Raises :class:`ButaneError` (one line naming the file) when ``butane`` is not on ``PATH``, exits
    non-zero (butane's stderr, lines joined with ``; ``), times out after ``timeout`` seconds, or prints
    something that is not an Ignition config valid against its spec's official schema
    (:func:`bootserver.ignition_schema.validate`); ``OSError`` when the file cannot be read.
    """
    if data is None:
        data = path.read_bytes()
    binary = shutil.which(BUTANE)
    if binary is None:
        raise ButaneError(f"{path} is a Butane config: translating it needs the `{BUTANE}` binary on PATH "
                          "(https://coreos.github.io/butane/getting-started/), which was not found")
    argv = [binary, "--strict", "--files-dir", str(path.parent)]
    if _variant(data) == "openshift":
        argv.append("--raw")
    argv.append(str(path))
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout,
                           env={**os.environ, "LC_ALL": "C"})
    except subprocess.TimeoutExpired:
        raise ButaneError(f"{path}: butane did not finish within {timeout:g} s") from None
    except OSError as e:
        raise ButaneError(f"{path}: cannot run {binary}: {e.strerror}") from None
    if p.returncode != 0:
        message = "; ".join(line.strip() for line in p.stderr.decode(errors="replace").splitlines()
                            if line.strip()) or f"exit status {p.returncode}"
        raise ButaneError(f"{path}: butane: {message}")
    try:
        ignition_schema.validate(json.loads(p.stdout))
    except ValueError as e:  # not JSON, or IgnitionSchemaError
        raise ButaneError(f"{path}: butane's translation is not a valid Ignition config: {e}") from None
    return p.stdout
