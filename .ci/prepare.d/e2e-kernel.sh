#!/usr/bin/env bash
# Unpack a real Debian kernel (vmlinuz + modules) for the e2e tests, without installing it: installing
# linux-image-* would run initramfs and bootloader hooks on the CI machine. We `apt-get download` the
# package that linux-image-amd64 currently points at and `dpkg -x` it into a fixed folder, which
# tests/e2e/rig.py reads (override with BOOTSERVER_E2E_KERNEL_DIR). Idempotent: a folder that already
# holds a vmlinuz is left alone.
set -euo pipefail
dest=${BOOTSERVER_E2E_KERNEL_DIR:-/var/cache/bootserver-e2e/kernel}
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

if compgen -G "$dest/boot/vmlinuz-*" >/dev/null; then
    echo "e2e-kernel: $dest already holds $(basename "$dest"/boot/vmlinuz-*)"
    exit 0
fi
# The real package behind the metapackage, e.g. linux-image-6.1.0-56-amd64.
pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
[ -n "$pkg" ] || { echo "e2e-kernel: cannot resolve linux-image-amd64 (run apt-get update?)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
[ "$(id -u)" -ne 0 ] || chown _apt "$tmp" 2>/dev/null || true   # as root, apt downloads as _apt
(cd "$tmp" && apt-get download -qq "$pkg")
$sudo mkdir -p "$dest.new"
$sudo dpkg -x "$tmp"/"$pkg"_*.deb "$dest.new"
$sudo chmod -R a+rX "$dest.new"   # vmlinuz is 0600 in the package; the tests run as any user
$sudo rm -rf "$dest"
$sudo mv "$dest.new" "$dest"
echo "e2e-kernel: unpacked $pkg into $dest"
