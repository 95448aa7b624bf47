"""The shell programs of the stand-in CoreOS (:mod:`standin`): what runs in the live system, in the
installed system's initramfs and as the installed system's init. Busybox ``sh``; each prints markers
(``STANDIN-...``, and the rig's ``E2E-...``) on the serial console for the tests to follow.

What runs where mirrors CoreOS, so the server sees the same requests in the same order
(docs/testing.md, "The whole life of a node"):

* **live** (the stream's initramfs): the dracut network from the kargs, ``coreos.live.rootfs_url``
  (the ``rootfs`` events); then coreos-installer's part: the stub from ``coreos.inst.ignition_url``
  (``installing``), the metal image (inside the rootfs, as CoreOS's osmet is) written to
  ``coreos.inst.install_dev``, the stub embedded as ``ignition/config.ign`` on the boot partition, the
  network kargs forwarded to the first boot (``ignition.firstboot``, with ``rd.neednet=1`` in front)
  and ``coreos.inst.platform_id`` made the installed system's ``ignition.platform.id``; then reboot.
* **installed, initramfs** (from the disk): on the first boot (``ignition.firstboot`` on the boot
  partition) the real Ignition, as CoreOS's dracut modules run it: the embedded config becomes
  ``/usr/lib/ignition/user.ign``, ``fetch-offline``, the network when Ignition asks for it (its neednet
  flag), ``fetch`` (the merged real config: ``installed``), ``disks``, ``mount``, ``files`` onto the
  root partition; then ``switch_root``.
* **installed, init** (a stand-in for systemd on the root partition): the hostname Ignition wrote, the
  network, then every unit a first boot's presets enable, by the ``ExecStart=`` line in the unit file
  Ignition wrote (the check-in: ``up``).
"""

from __future__ import annotations

#: Shell functions all three programs share: markers, failing, and the dracut network kargs.
COMMON = r"""
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
say() { echo "$*"; }
fail() { say "STANDIN-FAIL: $*"; say "E2E-INIT-DONE"; sync; poweroff -f; sleep 5; }
# netup KARGS...: the first static ip=<address>::<gateway>:<prefix>:<hostname>:<interface>:none
# (dracut's form, as nm-initrd-generator reads it), else DHCP (udhcpc) on eth0.
netup() {
  static=""
  for w in "$@"; do
    case "$w" in ip=*:none) [ -n "$static" ] || static="${w#ip=}";; esac
  done
  ip link set lo up
  ip link set eth0 up || fail "no eth0"
  if [ -n "$static" ]; then
    IFS=: read -r addr _ gw prefix _ <<EOF_IP
$static
EOF_IP
    ip addr add "$addr/$prefix" dev eth0 || fail "ip addr add $addr/$prefix"
    [ -z "$gw" ] || ip route add default via "$gw" || fail "ip route add default via $gw"
    say "E2E-NET:static $addr/$prefix via $gw"
  else
    udhcpc -i eth0 -n -q -f -t 10 -T 1 -s /etc/udhcpc.script >/dev/null 2>&1 || fail "udhcpc: no lease"
    say "E2E-NET:dhcp"
  fi
}
# the kernel arguments coreos-installer forwards to the installed system's first boot
# (scripts/coreos-installer-service)
forwarded() {
  for w in $(cat /proc/cmdline); do
    case "$w" in
      ip=*|ifname=*|rd.route=*|bootdev=*|BOOTIF=*|nameserver=*|rd.peerdns=*|biosdevname=*|vlan=*|bond=*|\
team=*|bridge=*|rd.net.timeout.carrier=*|coreos.no_persist_ip|coreos.force_persist_ip|ipv6.disable=*|\
net.ifnames=*|net.naming-scheme=*) printf '%s ' "$w";;
    esac
  done
}
"""

UDHCPC = r"""#!/bin/sh
case "$1" in
  bound|renew)
    ifconfig "$interface" "$ip" netmask "${subnet:-255.255.255.0}" up
    [ -z "$router" ] || ip route replace default via "${router%% *}" dev "$interface"
    ;;
esac
exit 0
"""

#: The live system's ``/init`` (the stream's initramfs artifact).
LIVE = r"""#!/bin/sh
# bootserver stand-in CoreOS live system (Debian's kernel and busybox): network, rootfs, and in install
# mode what coreos-installer does: fetch the stub, write the metal image, embed the stub, reboot.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
echo 1 > /proc/sys/kernel/printk
""" + COMMON + r"""
say "E2E-INIT-START"
say "STANDIN-BOOT: live system"
say "E2E-CMDLINE:$(cat /proc/cmdline)"
for m in /modules/*.ko; do insmod "$m" || fail "insmod $m"; done
url=""; dev=""; ign=""; platform=""
for w in $(cat /proc/cmdline); do
  case "$w" in
    coreos.live.rootfs_url=*) url="${w#*=}";;
    coreos.inst.install_dev=*) dev="${w#*=}";;
    coreos.inst.ignition_url=*) ign="${w#*=}";;
    coreos.inst.platform_id=*) platform="${w#*=}";;
  esac
done
netup $(cat /proc/cmdline)
[ -n "$url" ] || fail "no coreos.live.rootfs_url on the kernel command line"
wget -q -O /rootfs.img "$url" || fail "wget $url"
say "E2E-ROOTFS-SHA256:$(sha256sum /rootfs.img | cut -d' ' -f1)"
if [ -z "$dev" ]; then
  say "STANDIN-LIVE: no coreos.inst.install_dev: nothing to install"
  say "E2E-INIT-DONE"
  poweroff -f
fi
# coreos-installer: the Ignition config first (it always retries: --fetch-retries infinite; bounded here)
[ -n "$ign" ] || fail "coreos.inst.install_dev without coreos.inst.ignition_url"
tries=0
until wget -q -O /config.ign "$ign"; do
  tries=$((tries + 1))
  [ "$tries" -lt 30 ] || fail "wget $ign"
  sleep 2
done
say "STANDIN-INSTALL: writing the metal image to $dev"
[ -b "$dev" ] || fail "no block device $dev"
zcat /rootfs.img > "$dev" || fail "writing $dev"
sync
blockdev --rereadpt "$dev" || fail "re-reading the partition table of $dev"
part="${dev}1"
case "$dev" in *[0-9]) part="${dev}p1";; esac
for i in 1 2 3 4 5 6 7 8 9 10; do [ -b "$part" ] && break; sleep 0.5; done
mkdir -p /mnt
mount -t vfat "$part" /mnt || fail "mount $part"
mkdir -p /mnt/ignition
cp /config.ign /mnt/ignition/config.ign || fail "embedding the Ignition config"
args="$(forwarded)"
[ -z "$args" ] || args="rd.neednet=1 $args"
echo "$args" > /mnt/ignition.firstboot
if [ -n "$platform" ]; then
  for f in /mnt/syslinux.cfg /mnt/grub.cfg; do
    sed -i "s/ignition\.platform\.id=[^ ]*/ignition.platform.id=$platform/" "$f" || fail "kargs in $f"
  done
fi
umount /mnt
sync
say "STANDIN-INSTALLED: $dev (first boot kargs: ${args:-none})"
reboot -f
"""

#: The installed system's initramfs ``/init`` (on the boot partition).
INSTALLED_INITRAMFS = r"""#!/bin/sh
# bootserver stand-in CoreOS, installed system, initramfs: on the first boot the real Ignition
# (Debian's ignition 2.14) applies the config coreos-installer embedded; then switch_root.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /run
mkdir -p /run/ignition
echo 1 > /proc/sys/kernel/printk
""" + COMMON + r"""
say "STANDIN-BOOT: installed system (initramfs)"
say "E2E-CMDLINE:$(cat /proc/cmdline)"
for m in /modules/*.ko; do insmod "$m" || fail "insmod $m"; done
boot=""; root=""
for i in $(seq 1 40); do
  boot=$(findfs LABEL=BOOT 2>/dev/null); root=$(findfs LABEL=root 2>/dev/null)
  [ -n "$boot" ] && [ -n "$root" ] && break
  sleep 0.25
done
[ -n "$boot" ] && [ -n "$root" ] || fail "no boot or root partition"
mkdir -p /boot /sysroot
mount -t vfat "$boot" /boot || fail "mount $boot"
mount -t ext4 "$root" /sysroot || fail "mount $root"
if [ -f /boot/ignition.firstboot ]; then
  args=$(cat /boot/ignition.firstboot)
  platform=metal
  for w in $(cat /proc/cmdline); do case "$w" in ignition.platform.id=*) platform="${w#*=}";; esac; done
  say "STANDIN-FIRSTBOOT: ignition -platform $platform (first boot kargs: ${args:-none})"
  mkdir -p /usr/lib/ignition
  [ ! -f /boot/ignition/config.ign ] || cp /boot/ignition/config.ign /usr/lib/ignition/user.ign
  ignition_stage() {
    ignition -platform "$platform" -stage "$1" -root /sysroot -log-to-stdout > "/run/ignition-$1.log" 2>&1
    rc=$?
    say "STANDIN-IGNITION: $1 exit $rc"
    if [ "$rc" -ne 0 ]; then grep -E "CRITICAL|ERROR" "/run/ignition-$1.log" | tail -n 5; fail "ignition -stage $1"; fi
  }
  ignition_stage fetch-offline
  if [ -e /run/ignition/neednet ]; then netup $args; fi
  for stage in fetch disks mount files; do ignition_stage "$stage"; done
  # what the initramfs network was, for the installed system (NetworkManager keeps it in CoreOS)
  echo "$args" > /sysroot/etc/standin-network
  rm -f /boot/ignition.firstboot
fi
sync
umount /boot
umount /run
umount /sys
umount /proc
mount --move /dev /sysroot/dev
exec switch_root /sysroot /sbin/init
"""

#: The installed system's ``/sbin/init`` on the root partition: a stand-in for systemd.
INSTALLED_INIT = r"""#!/bin/sh
# bootserver stand-in CoreOS, installed system: a stand-in for systemd that starts what a first boot's
# presets enable, by the ExecStart= line of each unit file (as Ignition wrote it).
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
""" + COMMON + r"""
. /etc/os-release
say "STANDIN-BOOT: installed system ($PRETTY_NAME)"
[ ! -f /etc/hostname ] || hostname "$(cat /etc/hostname)"
say "STANDIN-HOSTNAME:$(hostname)"
ip -4 addr show dev eth0 2>/dev/null | grep -q inet || netup $(cat /etc/standin-network 2>/dev/null)
# systemd.service(5): in ExecStart=, "$$" is a literal "$" and "%%" a literal "%"; a leading "-" ignores
# the exit status. The words are then read as systemd reads them (double quotes, backslash escapes).
run_unit() {
  file="/etc/systemd/system/$1"
  [ -f "$file" ] || { say "STANDIN-UNIT: $1: no unit file"; return; }
  sed -n 's/^ExecStart=//p' "$file" | while IFS= read -r line; do
    line=$(printf '%s' "$line" | sed -e 's/^[-@+!]*//' -e 's/\$\$/\\$/g' -e 's/%%/%/g')
    eval "set -- $line"
    say "STANDIN-UNIT: $(basename "$file"): $1"
    "$@" </dev/null
    say "STANDIN-UNIT-DONE: $(basename "$file") exit $?"
  done
}
for preset in /etc/systemd/system-preset/*.preset; do
  [ -f "$preset" ] || continue
  while read -r verb unit _; do
    [ "$verb" = enable ] && run_unit "$unit"
  done < "$preset"
done
sync
say "STANDIN-UP"
while :; do sleep 3600; done
"""
