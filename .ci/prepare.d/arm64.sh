#!/usr/bin/env bash
# arm64 pieces for the arm64 boot (bootserver's arm64 GRUB, tests/e2e/test_arm64_boot.py), on this amd64 machine:
# * Debian's grub-efi-arm64-bin, installed as a foreign-architecture package (Multi-Arch: foreign; it holds
#   /usr/lib/grub/arm64-efi, from which bootserver builds its standalone arm64 GRUB with grub-mkstandalone);
#   it needs `dpkg --add-architecture arm64` and an apt-get update first, so it cannot be in apt-packages.txt;
# * a real Debian arm64 kernel (linux-image-*-arm64: vmlinuz and modules) and busybox-static:arm64, unpacked
#   with `dpkg -x` (never installed: their hooks are not for this machine) into fixed folders that
#   tests/e2e/rig.py reads (override with BOOTSERVER_E2E_ARM64_DIR). Idempotent.
set -euo pipefail
dest=${BOOTSERVER_E2E_ARM64_DIR:-/var/cache/bootserver-e2e/arm64}
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive

if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $sudo dpkg --add-architecture arm64
    $sudo apt-get update -qq
fi
if [ ! -d /usr/lib/grub/arm64-efi ]; then
    $sudo apt-get install -y -qq --no-install-recommends grub-efi-arm64-bin:arm64 >/dev/null
fi

unpack() {  # unpack PACKAGE into FOLDER (replacing it), unless FOLDER/MARKER exists
    local pkg=$1 folder=$2 marker=$3 tmp
    if compgen -G "$folder/$marker" >/dev/null; then
        echo "arm64: $folder already holds $marker"
        return
    fi
    tmp=$(mktemp -d)
    chmod 755 "$tmp"
    [ "$(id -u)" -ne 0 ] || chown _apt "$tmp" 2>/dev/null || true   # as root, apt downloads as _apt
    (cd "$tmp" && apt-get download -qq "$pkg")
    $sudo rm -rf "$folder.new"
    $sudo mkdir -p "$folder.new"
    $sudo dpkg -x "$tmp"/*.deb "$folder.new"
    $sudo chmod -R a+rX "$folder.new"   # vmlinuz is 0600 in the package; the tests run as any user
    $sudo rm -rf "$folder"
    $sudo mv "$folder.new" "$folder"
    rm -rf "$tmp"
    echo "arm64: unpacked $pkg into $folder"
}

# The real package behind the metapackage, e.g. linux-image-6.1.0-56-arm64.
kernel=$(apt-cache depends linux-image-arm64:arm64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
[ -n "$kernel" ] || { echo "arm64: cannot resolve linux-image-arm64:arm64 (run apt-get update?)" >&2; exit 1; }
case "$kernel" in *:arm64) ;; *) kernel="$kernel:arm64" ;; esac
unpack "$kernel" "$dest/kernel" "boot/vmlinuz-*"
unpack busybox-static:arm64 "$dest/busybox" "bin/busybox"
