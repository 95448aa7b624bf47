"""Benchmark: OpenPGP verification while an artifact streams (issue 31, item 4): what checking a signed
artifact's signature with gpgv, in the same pass as its sha256, costs against the sha256 alone, and that
memory stays flat however large the artifact.

One artifact of ``--size-mb`` MiB of incompressible bytes, signed (detached, RSA) with a key generated for
the run; served by ``benchmarks/upstream.py`` on 127.0.0.1 with stream metadata naming its signature.
``bootserver sync-images`` runs twice, alternating: with ``verify_signatures`` on (the keyring is the
run's key) and off; wall seconds and peak RSS of the sync's process tree (bootserver and gpgv, sampled
from /proc). Prints Markdown. Usage: ``.venv/bin/python benchmarks/openpgp.py [--size-mb 1024] [--runs 2]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    BOOTSERVER,
    PeakRss,
    Upstream,
    make_file,
    markdown_table,
    rmtree,
    run_main,
    start,
    write_config,
)


def gpg(home: Path, *args: str) -> bytes:
    return subprocess.run(["gpg", "--homedir", str(home), "--batch", "--yes", "--pinentry-mode", "loopback",
                           "--passphrase", "", *args], check=True, capture_output=True, timeout=600).stdout


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024, help="artifact size in MiB (default 1024)")
    ap.add_argument("--runs", type=int, default=2, help="runs of each mode, alternating (default 2)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-openpgp-"))
    try:
        home = work / "gnupg"
        home.mkdir(mode=0o700)
        gpg(home, "--quick-gen-key", "bootserver bench <bench@example.invalid>", "rsa4096", "sign", "never")
        (work / "keys.asc").write_bytes(gpg(home, "--armor", "--export"))
        root = work / "upstream"
        root.mkdir()
        names = {k: f"live-{k}.x86_64" for k in ("kernel", "initramfs", "rootfs")}
        shas = {}
        for kind, name in names.items():
            size = args.size_mb << 20 if kind == "rootfs" else 64 << 10
            shas[kind] = make_file(root / name, size)
            gpg(home, "--detach-sign", "-o", str(root / f"{name}.sig"), str(root / name))
        async with Upstream(root, work / "upstream.log") as up:
            pxe = {k: {"location": f"{up.url}/{n}", "sha256": shas[k], "signature": f"{up.url}/{n}.sig"}
                   for k, n in names.items()}
            doc = {"stream": "bench", "metadata": {"last-modified": "2026-01-01T00:00:00Z"},
                   "architectures": {"x86_64": {"artifacts": {"metal": {"release": "1.0",
                                                                         "formats": {"pxe": pxe}}}}}}
            (work / "stream.json").write_text(json.dumps(doc))
            rows = []
            for run in range(args.runs):
                for verify in (True, False):
                    cache = work / "cache"
                    shutil.rmtree(cache, ignore_errors=True)
                    config = write_config(work / "bootserver.yaml", {
                        "cache_dir": str(cache), "state_dir": str(work / "state"),
                        "upstream": {"signature_keys": str(work / "keys.asc")},
                        "streams": {"bench": {"metadata": str(work / "stream.json"), "verify_signatures": verify}},
                        "profiles": {"p": {"stream": "bench", "mode": "live"}}, "nodes": {"n": {"profile": "p"}}})
                    t0 = time.monotonic()
                    proc = start([*BOOTSERVER, "sync-images", "--config", str(config)], work / "sync.log")
                    with PeakRss(proc.pid, interval=0.05) as rss:
                        rc = proc.wait(timeout=1800)
                    wall = time.monotonic() - t0
                    if rc != 0:
                        raise SystemExit(f"sync-images exited {rc}: {(work / 'sync.log').read_text()[-2000:]}")
                    rows.append((run + 1, "sha256 + OpenPGP (gpgv)" if verify else "sha256 only", f"{wall:.1f}",
                                 f"{rss.max_kb / 1024:.0f}", f"{rss.total_kb / 1024:.0f}", rss.processes))
        print(f"Artifact: {args.size_mb} MiB rootfs (plus two 64 KiB ones), RSA-4096 detached signatures; "
              f"load {os.getloadavg()[0]:.1f}\n")
        print(markdown_table(["run", "check", "sync-images wall s", "largest process peak RSS MiB",
                              "tree peak RSS MiB (sum)", "processes"], rows))
    finally:
        subprocess.run(["gpgconf", "--homedir", str(work / "gnupg"), "--kill", "gpg-agent"], timeout=30,
                       capture_output=True)
        rmtree(work)


if __name__ == "__main__":
    run_main(main)
