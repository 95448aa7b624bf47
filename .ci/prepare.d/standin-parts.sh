#!/usr/bin/env bash
# Unpack the parts of the stand-in CoreOS (tests/e2e/standin.py) that must not be installed on the CI
# machine: `setfiles` from Debian's policycoreutils (Ignition's files stage runs it on what it wrote;
# installing policycoreutils would bring SELinux tooling and its hooks to the host). `apt-get download` +
# `dpkg -x` into a fixed folder (override with BOOTSERVER_E2E_STANDIN_PARTS). Its libraries (libselinux1,
# libsepol2, libaudit1, libpcre2-8-0) are part of every Debian system. Idempotent.
set -euo pipefail
dest=${BOOTSERVER_E2E_STANDIN_PARTS:-/var/cache/bootserver-e2e/standin-parts}
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

if [ -x "$dest/sbin/setfiles" ] || [ -x "$dest/usr/sbin/setfiles" ]; then
    echo "standin-parts: $dest already holds setfiles"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
[ "$(id -u)" -ne 0 ] || chown _apt "$tmp" 2>/dev/null || true   # as root, apt downloads as _apt
(cd "$tmp" && apt-get download -qq policycoreutils)
$sudo rm -rf "$dest.new"
$sudo mkdir -p "$dest.new"
$sudo dpkg -x "$tmp"/policycoreutils_*.deb "$dest.new"
$sudo chmod -R a+rX "$dest.new"
$sudo rm -rf "$dest"
$sudo mv "$dest.new" "$dest"
echo "standin-parts: unpacked $(basename "$tmp"/policycoreutils_*.deb) into $dest"
