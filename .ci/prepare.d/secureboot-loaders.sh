#!/usr/bin/env bash
# Unpack Debian's signed boot loaders for the Secure Boot e2e test (tests/e2e/test_secureboot.py), without
# installing them: installing shim-signed or grub-efi-amd64-signed runs grub-install on the CI machine.
# The test builds a stand-in CoreOS live ISO from them (shim as EFI/BOOT/BOOTX64.EFI, the CD GRUB as
# grubx64.efi, MokManager as mmx64.efi). `apt-get download` + `dpkg -x` into a fixed folder, which the
# test reads (override with BOOTSERVER_E2E_SECUREBOOT_DIR). Idempotent: a folder that already holds the
# three loaders is left alone.
set -euo pipefail
dest=${BOOTSERVER_E2E_SECUREBOOT_DIR:-/var/cache/bootserver-e2e/secureboot}
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
pkgs="shim-signed shim-helpers-amd64-signed grub-efi-amd64-signed"

if [ -e "$dest/usr/lib/shim/shimx64.efi.signed" ] && [ -e "$dest/usr/lib/grub/x86_64-efi-signed/gcdx64.efi.signed" ] \
        && compgen -G "$dest/usr/lib/shim/mmx64.efi.signed*" >/dev/null; then
    echo "secureboot-loaders: $dest already holds the signed loaders"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
[ "$(id -u)" -ne 0 ] || chown _apt "$tmp" 2>/dev/null || true   # as root, apt downloads as _apt
# shellcheck disable=SC2086
(cd "$tmp" && apt-get download -qq $pkgs)
$sudo rm -rf "$dest.new"
$sudo mkdir -p "$dest.new"
for deb in "$tmp"/*.deb; do
    $sudo dpkg -x "$deb" "$dest.new"
done
$sudo chmod -R a+rX "$dest.new"
$sudo rm -rf "$dest"
$sudo mv "$dest.new" "$dest"
echo "secureboot-loaders: unpacked $pkgs into $dest"
