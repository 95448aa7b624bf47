#!/usr/bin/env bash
# Unpack NetworkManager's initrd generator (nm-initrd-generator) for the network tests, without installing
# NetworkManager: installing it would start a daemon that takes over the CI machine's network. We
# `apt-get download` Debian's network-manager package and `dpkg -x` it into a fixed folder, which
# tests/test_network_generator.py reads (override with BOOTSERVER_NM_DIR). The generator needs only
# libraries (.ci/apt-packages.txt: libglib2.0-0). Idempotent: a folder that already holds the
# generator is left alone.
set -euo pipefail
dest=${BOOTSERVER_NM_DIR:-/var/cache/bootserver-tests/network-manager}
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

if [ -x "$dest/usr/lib/NetworkManager/nm-initrd-generator" ] || [ -x "$dest/usr/libexec/nm-initrd-generator" ]; then
    echo "nm-initrd-generator: $dest already holds it"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
[ "$(id -u)" -ne 0 ] || chown _apt "$tmp" 2>/dev/null || true   # as root, apt downloads as _apt
(cd "$tmp" && apt-get download -qq network-manager)
$sudo mkdir -p "$dest.new"
$sudo dpkg -x "$tmp"/network-manager_*.deb "$dest.new"
$sudo chmod -R a+rX "$dest.new"
$sudo rm -rf "$dest"
$sudo mv "$dest.new" "$dest"
echo "nm-initrd-generator: unpacked $(basename "$tmp"/network-manager_*.deb) into $dest"
