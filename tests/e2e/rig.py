"""Rig for end-to-end tests with real boot clients: iPXE in QEMU, a real Debian kernel, a tiny initramfs.

The pieces, each usable on its own:

* :func:`find_tools` locates the host binaries (QEMU, iPXE's ``ipxe.lkrn``, busybox-static, Ignition)
  and the unpacked Debian kernel (see ``.ci/prepare.d/e2e-kernel.sh``).
* :func:`build_initramfs` writes a gzip'd ``newc`` cpio archive (pure Python: no root, no ``cpio``
  binary) holding busybox, the virtio-net driver with its dependencies, and an ``/init`` that prints
  ``/proc/cmdline``, sets the static address of the first ``ip=...:none`` argument (as dracut would;
  IPv4, or IPv6 in brackets) or else gets one with ``udhcpc``, fetches ``coreos.live.rootfs_url`` with ``wget``,
  prints its sha256 and powers off.
* :func:`boot_ipxe` boots iPXE in QEMU (TCG, user-mode network, both serial ports into one log file) and
  returns the parsed serial log. Two firmwares: ``bios`` (SeaBIOS runs Debian's ``ipxe.lkrn`` with the
  command line ``dhcp && chain URL``) and ``uefi`` (Debian's OVMF runs the NIC's iPXE EFI option ROM,
  ``efi-virtio.rom``, which takes the chain URL from the DHCP ``bootfile``).

The guest is isolated (QEMU user networking with ``restrict=on``): it reaches exactly one host port, as
``GUEST_HOST:<port>``, forwarded to ``127.0.0.1:<port>``; nothing else, not even the rest of the host.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import io
import os
import re
import shlex
import shutil
import stat
import struct
import subprocess
import time
import urllib.parse
from pathlib import Path

#: Where ``.ci/prepare.d/e2e-kernel.sh`` unpacks the Debian kernel package (``dpkg -x``).
DEFAULT_KERNEL_DIR = "/var/cache/bootserver-e2e/kernel"

#: Markers the initramfs's ``/init`` writes to the serial console, one per line.
MARK_START = "E2E-INIT-START"
MARK_CMDLINE = "E2E-CMDLINE:"
MARK_ROOTFS = "E2E-ROOTFS-SHA256:"
MARK_FAIL = "E2E-FAIL:"
MARK_REACH = "E2E-REACH:"
MARK_NET = "E2E-NET:"
MARK_DONE = "E2E-INIT-DONE"

#: Debian's UEFI firmware for QEMU (package ``ovmf``): code and variable store in one image.
OVMF = "/usr/share/ovmf/OVMF.fd"
#: iPXE's EFI build as a PCI option ROM for QEMU's ``virtio-net-pci`` (package ``ipxe-qemu``).
IPXE_EFI_ROM = "/usr/lib/ipxe/qemu/efi-virtio.rom"

#: The firmwares :func:`boot_ipxe` can boot iPXE under.
FIRMWARES = ("bios", "uefi")

#: Kernel modules the guest needs for its NIC (QEMU ``virtio-net-pci``); dependencies are added.
GUEST_MODULES = ("virtio_pci", "virtio_net")

_IGNITION_CANDIDATES = (
    "/usr/lib/dracut/modules.d/30ignition/ignition",
    "/usr/lib/dracut/modules.d/30ignition/ignition-amd64",
)


class RigError(RuntimeError):
    """The rig itself could not do its job (a tool is missing, a module cannot be resolved)."""


@dataclasses.dataclass(frozen=True)
class Tools:
    """Paths of the host binaries and kernel the e2e tests use; ``None`` where one is missing."""

    qemu: str | None
    ipxe_lkrn: str | None
    busybox: str | None
    vmlinuz: str | None
    modules_dir: str | None
    ignition: str | None
    ignition_validate: str | None
    ovmf: str | None = None
    ipxe_efi_rom: str | None = None

    def missing(self, *names: str) -> list[str]:
        """Return a human-readable description of each named field that is ``None``."""
        hints = {
            "qemu": "qemu-system-x86_64 (Debian package qemu-system-x86)",
            "ipxe_lkrn": "ipxe.lkrn (Debian package ipxe)",
            "busybox": "a static busybox (Debian package busybox-static)",
            "vmlinuz": f"an unpacked Debian kernel in $BOOTSERVER_E2E_KERNEL_DIR or {DEFAULT_KERNEL_DIR}"
            " (run .ci/prepare.d/e2e-kernel.sh)",
            "modules_dir": "the kernel's lib/modules folder (run .ci/prepare.d/e2e-kernel.sh)",
            "ignition": "the ignition binary (Debian package ignition)",
            "ignition_validate": "ignition-validate (Debian package ignition)",
            "ovmf": f"UEFI firmware {OVMF} (Debian package ovmf)",
            "ipxe_efi_rom": f"iPXE's EFI option ROM {IPXE_EFI_ROM} (Debian package ipxe-qemu)",
        }
        return [hints[n] for n in names if getattr(self, n) is None]


def _first_existing(*paths: str | None) -> str | None:
    for p in paths:
        if p and os.path.isfile(p) and os.access(p, os.R_OK):
            return p
    return None


def _is_static(path: str) -> bool:
    """True when the ELF file at ``path`` has no program interpreter (i.e. is statically linked)."""
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    return head[:4] == b"\x7fELF" and b"/lib64/ld-linux" not in head and b"/lib/ld-linux" not in head


def find_tools() -> Tools:
    """Locate QEMU, ``ipxe.lkrn``, static busybox, the unpacked kernel and Ignition on this host.

    Environment overrides: ``BOOTSERVER_E2E_KERNEL_DIR`` (the folder ``dpkg -x`` unpacked a
    ``linux-image-*`` package into), ``BOOTSERVER_E2E_IPXE`` (an ``ipxe.lkrn``), ``BOOTSERVER_E2E_OVMF``
    (a UEFI firmware image),
    ``BOOTSERVER_E2E_IPXE_EFI_ROM`` (an iPXE EFI option ROM for virtio-net). Never raises; a missing
    piece is ``None``.
    """
    qemu = shutil.which("qemu-system-x86_64")
    ipxe = _first_existing(os.environ.get("BOOTSERVER_E2E_IPXE"), "/usr/lib/ipxe/ipxe.lkrn",
                           "/usr/share/ipxe/ipxe.lkrn", "/boot/ipxe.lkrn")
    busybox = None
    for cand in (shutil.which("busybox"), "/bin/busybox", "/usr/bin/busybox", "/usr/lib/initramfs-tools/bin/busybox"):
        if cand and os.path.isfile(cand) and _is_static(cand):
            busybox = cand
            break
    kdir = Path(os.environ.get("BOOTSERVER_E2E_KERNEL_DIR", DEFAULT_KERNEL_DIR))
    vmlinuz = modules_dir = None
    kernels = sorted(kdir.glob("boot/vmlinuz-*"))
    if kernels:
        vmlinuz = str(kernels[-1])
        release = kernels[-1].name.removeprefix("vmlinuz-")
        for base in (kdir / "lib" / "modules" / release, kdir / "usr" / "lib" / "modules" / release):
            if base.is_dir():
                modules_dir = str(base)
                break
    ignition = _first_existing(*_IGNITION_CANDIDATES, shutil.which("ignition"))
    return Tools(qemu=qemu, ipxe_lkrn=ipxe, busybox=busybox, vmlinuz=vmlinuz, modules_dir=modules_dir,
                 ignition=ignition, ignition_validate=shutil.which("ignition-validate"),
                 ovmf=_first_existing(os.environ.get("BOOTSERVER_E2E_OVMF"), OVMF),
                 ipxe_efi_rom=_first_existing(os.environ.get("BOOTSERVER_E2E_IPXE_EFI_ROM"), IPXE_EFI_ROM))


# --- kernel modules -------------------------------------------------------------------------------

def _read_module(path: Path) -> bytes:
    """Return the uncompressed bytes of a kernel module (``.ko``, ``.ko.xz``, ``.ko.zst``, ``.ko.gz``)."""
    data = path.read_bytes()
    if path.name.endswith(".xz"):
        import lzma

        return lzma.decompress(data)
    if path.name.endswith(".gz"):
        return gzip.decompress(data)
    if path.name.endswith(".zst"):
        zstd = shutil.which("zstd")
        if not zstd:
            raise RigError(f"{path}: zstd-compressed module but no zstd binary")
        return subprocess.run([zstd, "-dc", str(path)], check=True, capture_output=True, timeout=60).stdout
    return data


def _modinfo_depends(module: bytes) -> list[str]:
    """Return the ``depends=`` list from a module's ``.modinfo`` strings."""
    m = re.search(rb"(?:^|\x00)depends=([^\x00]*)\x00", module)
    if not m or not m.group(1):
        return []
    return m.group(1).decode().split(",")


def resolve_modules(modules_dir: str | Path, names: tuple[str, ...] = GUEST_MODULES) -> list[tuple[str, bytes]]:
    """Resolve kernel modules and their dependencies, without ``modules.dep``.

    Returns ``[(name, uncompressed_bytes), ...]`` in load order (every module after its dependencies),
    read from each module's own ``depends=`` field. Raises :class:`RigError` if a module is missing.
    """
    index: dict[str, Path] = {}
    for p in Path(modules_dir).rglob("*.ko*"):
        base = p.name.split(".ko")[0].replace("-", "_")
        index.setdefault(base, p)
    order: list[tuple[str, bytes]] = []
    seen: set[str] = set()

    def visit(name: str, chain: tuple[str, ...]) -> None:
        key = name.replace("-", "_")
        if key in seen:
            return
        if key in chain:
            raise RigError(f"module dependency cycle: {' -> '.join((*chain, key))}")
        if key not in index:
            raise RigError(f"kernel module {key!r} not found under {modules_dir} (built in? then drop it)")
        data = _read_module(index[key])
        for dep in _modinfo_depends(data):
            visit(dep, (*chain, key))
        seen.add(key)
        order.append((key, data))

    for n in names:
        visit(n, ())
    return order


# --- initramfs ------------------------------------------------------------------------------------

_INIT = r"""#!/bin/sh
# bootserver e2e initramfs: report what the kernel was booted with, fetch the rootfs, power off.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
echo 1 > /proc/sys/kernel/printk
say() { echo "$*"; }
fail() { say "E2E-FAIL: $*"; say "E2E-INIT-DONE"; poweroff -f; sleep 5; }
say "E2E-INIT-START"
say "E2E-CMDLINE:$(cat /proc/cmdline)"
for m in /modules/*.ko; do insmod "$m" || fail "insmod $m"; done
ip link set lo up
ip link set eth0 up || fail "no eth0"
url=""
static=""
for w in $(cat /proc/cmdline); do
  case "$w" in
    coreos.live.rootfs_url=*) url="${w#coreos.live.rootfs_url=}";;
    ip=*:none) [ -n "$static" ] || static="${w#ip=}";;
  esac
done
if [ -n "$static" ]; then
  # a static ip=<address>::<gateway>:<prefix>:<hostname>:<interface>:none, as dracut reads it (no DHCP);
  # an IPv6 address or gateway in brackets ([2001:db8::51]): its colons hidden from the split as '-'
  IFS=: read -r addr _ gw prefix _ <<EOF_IP
$(echo "$static" | sed -e ':a' -e 's/\(\[[^]:]*\):/\1-/' -e 'ta')
EOF_IP
  case "$addr" in
    \[*) addr=$(echo "$addr" | tr -d '[]' | tr - :); gw=$(echo "$gw" | tr -d '[]' | tr - :)
          echo 0 > /proc/sys/net/ipv6/conf/eth0/accept_dad;;  # usable at once, as the test network is its own
  esac
  ip addr add "$addr/$prefix" dev eth0 || fail "ip addr add $addr/$prefix"
  [ -z "$gw" ] || ip route add default via "$gw" || fail "ip route add default via $gw"
  say "E2E-NET:static $addr/$prefix via $gw"
else
  udhcpc -i eth0 -n -q -f -t 10 -T 1 -s /udhcpc.script >/dev/null 2>&1 || fail "udhcpc: no lease"
  say "E2E-NET:dhcp"
fi
[ -n "$url" ] || fail "no coreos.live.rootfs_url on the kernel command line"
wget -q -O /rootfs.img "$url" || fail "wget $url"
say "E2E-ROOTFS-SHA256:$(sha256sum /rootfs.img | cut -d' ' -f1)"
# Isolation probe: the host's other address and the internet must be unreachable (TCP connect).
hostport="${url#http://}"; hostport="${hostport%%/*}"; port="${hostport##*:}"
for target in "10.0.2.2 $port" "1.1.1.1 80"; do
  if nc -w 3 $target </dev/null >/dev/null 2>&1; then r=yes; else r=no; fi
  say "E2E-REACH:${target% *}:${target#* }=$r"
done
say "E2E-INIT-DONE"
poweroff -f
"""

_UDHCPC_SCRIPT = r"""#!/bin/sh
case "$1" in
  bound|renew) ifconfig "$interface" "$ip" netmask "${subnet:-255.255.255.0}" up ;;
esac
exit 0
"""


class _Cpio:
    """Minimal writer of the ``newc`` cpio format the kernel unpacks as an initramfs."""

    def __init__(self) -> None:
        self.buf = io.BytesIO()
        self.ino = 1

    def _entry(self, name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0)) -> None:
        nameb = name.encode() + b"\x00"
        fields = [self.ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(nameb), 0]
        self.ino += 1
        self.buf.write(b"070701" + b"".join(b"%08X" % f for f in fields) + nameb)
        self.buf.write(b"\x00" * (-(110 + len(nameb)) % 4))
        self.buf.write(data)
        self.buf.write(b"\x00" * (-len(data) % 4))

    def dir(self, name: str) -> None:
        self._entry(name, stat.S_IFDIR | 0o755)

    def file(self, name: str, data: bytes, perm: int = 0o644) -> None:
        self._entry(name, stat.S_IFREG | perm, data)

    def symlink(self, name: str, target: str) -> None:
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def chardev(self, name: str, major: int, minor: int) -> None:
        self._entry(name, stat.S_IFCHR | 0o600, rdev=(major, minor))

    def finish(self) -> bytes:
        self._entry("TRAILER!!!", 0)
        return self.buf.getvalue()


def build_initramfs(dest: str | Path, busybox: str, modules_dir: str) -> int:
    """Write the test initramfs (gzip'd newc cpio) to ``dest``; return its size in bytes.

    ``busybox`` must be a statically linked busybox; ``modules_dir`` the kernel's
    ``lib/modules/<release>`` folder. Raises :class:`RigError` when a needed module is missing and
    ``OSError`` when a file cannot be read or written.
    """
    c = _Cpio()
    for d in ("bin", "sbin", "dev", "proc", "sys", "tmp", "etc", "modules"):
        c.dir(d)
    c.chardev("dev/console", 5, 1)
    c.file("bin/busybox", Path(busybox).read_bytes(), 0o755)
    c.symlink("bin/sh", "busybox")
    c.file("init", _INIT.encode(), 0o755)
    c.file("udhcpc.script", _UDHCPC_SCRIPT.encode(), 0o755)
    for i, (name, data) in enumerate(resolve_modules(modules_dir)):
        c.file(f"modules/{i:02d}-{name}.ko", data)
    blob = gzip.compress(c.finish(), compresslevel=6, mtime=0)
    Path(dest).write_bytes(blob)
    return len(blob)


# --- QEMU -----------------------------------------------------------------------------------------

@dataclasses.dataclass
class BootResult:
    """What one guest boot produced: the serial log and what ``/init`` reported in it."""

    log: str
    returncode: int | None  # QEMU's exit status (negative: killed by us)
    timed_out: bool
    seconds: float
    cmdline: str | None = None  # the guest's /proc/cmdline, as /init printed it
    rootfs_sha256: str | None = None
    failure: str | None = None  # the message of an E2E-FAIL line from /init
    reach: dict[str, bool] = dataclasses.field(default_factory=dict)  # "host:port" -> TCP connect worked
    net: str | None = None  # how /init configured eth0: "dhcp" or "static <address>/<prefix> via <gateway>"

    @property
    def reached_init(self) -> bool:
        """True when the kernel ran our ``/init`` (the start marker is in the log)."""
        return MARK_START in self.log

    @property
    def done(self) -> bool:
        """True when ``/init`` finished (successfully or with an E2E-FAIL line)."""
        return MARK_DONE in self.log

    def tail(self, lines: int = 40) -> str:
        """Return the last ``lines`` lines of the serial log, for assertion messages."""
        return "\n".join(self.log.splitlines()[-lines:])


def parse_serial_log(text: str) -> dict:
    """Extract ``cmdline``, ``rootfs_sha256``, ``failure``, ``net`` and ``reach`` from a serial log by ``/init``."""
    out: dict = {"cmdline": None, "rootfs_sha256": None, "failure": None, "net": None}
    reach: dict[str, bool] = {}
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        i = line.find(MARK_REACH)
        if i >= 0 and "=" in line[i:]:
            target, _, answer = line[i + len(MARK_REACH):].strip().partition("=")
            reach[target] = answer == "yes"
        for mark, key in ((MARK_CMDLINE, "cmdline"), (MARK_ROOTFS, "rootfs_sha256"), (MARK_FAIL, "failure"),
                          (MARK_NET, "net")):
            i = line.find(mark)
            if i >= 0 and out[key] is None:
                out[key] = line[i + len(mark):].strip()
    out["reach"] = reach
    return out


#: The address the guest uses for the host. QEMU's user network runs with ``restrict=on`` (the guest
#: reaches nothing: not the host, not the internet) plus one ``guestfwd`` rule that connects
#: ``GUEST_HOST:<port>`` to ``127.0.0.1:<port>`` on the host. slirp reserves 10.0.2.2 (its gateway) and
#: refuses it as a guestfwd address, hence .100. A server the guest must reach therefore uses
#: ``base_url = http://10.0.2.100:<port>`` and listens on ``127.0.0.1:<port>``.
GUEST_HOST = "10.0.2.100"

#: SeaBIOS's last words when iPXE returned without booting (e.g. a failed ``chain``): nothing more
#: will happen, so :func:`boot_ipxe` stops waiting.
MARK_BIOS_GAVE_UP = "No bootable device"
#: OVMF's last words when no boot option booted (iPXE exited, e.g. to the local disk)
MARK_UEFI_GAVE_UP = "BdsDxe: failed to load Boot"
#: Per firmware, the serial-log lines after which nothing more will boot (:func:`boot_ipxe` stops there).
FIRMWARE_GAVE_UP = {"bios": (MARK_BIOS_GAVE_UP,), "uefi": (MARK_UEFI_GAVE_UP,)}
#: The kernel's last words when it cannot go on (e.g. no initramfs: ``VFS: Unable to mount root fs``);
#: the guest then hangs (``-no-reboot``), so :func:`boot_ipxe` stops there too.
MARK_KERNEL_PANIC = "Kernel panic - not syncing"

_ANSI = re.compile(r"\x1b(?:\[[0-9;?]*[A-Za-z]|c)")


def guest_url(port: int, path: str = "/") -> str:
    """Return the URL a guest uses for ``http://127.0.0.1:<port><path>`` on the host."""
    return f"http://{GUEST_HOST}:{port}{path}"


def second_serial_log(log_path: str | Path) -> Path:
    """Where a UEFI guest's second serial port (ttyS1) is logged: ``<log_path>.ttyS1``."""
    return Path(f"{log_path}.ttyS1")


def qemu_command(tools: Tools, chain_url: str, log_path: str | Path, port: int, mac: str = "52:54:00:12:34:56",
                 memory_mb: int = 512, firmware: str = "bios", extra_ports: tuple[int, ...] = ()) -> list[str]:
    """Return the QEMU argv that boots iPXE, which runs ``dhcp`` and chains ``chain_url``.

    Common to both firmwares: TCG only (nested KVM breaks iPXE here); two serial ports (ttyS0, ttyS1:
    the CoreOS console karg is ``console=ttyS1``), multiplexed into the file ``log_path`` under BIOS,
    into ``log_path`` and :func:`second_serial_log` under UEFI (OVMF prints to both ports); user-mode
    network with ``restrict=on`` where the only reachable endpoint is ``GUEST_HOST:port``, forwarded to
    ``127.0.0.1:port`` on the host through a ``busybox nc`` per connection; ``-no-reboot`` so a guest
    reboot ends QEMU. ``memory_mb`` is in MiB. ``extra_ports``: more host ports the guest reaches the same
    way (``GUEST_HOST:p``), e.g. a test's own HTTP server in front of ours.

    ``firmware="bios"``: SeaBIOS (``graphics=off`` so it and iPXE print to the serial port) runs
    Debian's ``ipxe.lkrn`` as the kernel with the command line ``dhcp && chain <chain_url>``; the NIC has
    an empty ``romfile`` so a failed chain cannot fall through into a second iPXE.

    ``firmware="uefi"``: Debian's OVMF with iPXE's EFI build as the NIC's option ROM (``romfile=``),
    ``-boot n``; slirp's DHCP hands out ``chain_url`` as the ``bootfile``, which iPXE chains, as a
    real PXE network's DHCP server hands out a chain URL. The kernel's EFI stub loads the initrd that
    the script named ``main`` (``initrd=main``).

    Raises :class:`RigError` when a needed binary or firmware file is missing, or ``firmware`` is unknown.
    """
    if firmware not in FIRMWARES:
        raise RigError(f"unknown firmware {firmware!r}; expected one of {', '.join(FIRMWARES)}")
    missing = tools.missing("qemu", "busybox", *(("ipxe_lkrn",) if firmware == "bios" else ("ovmf", "ipxe_efi_rom")))
    if missing:
        raise RigError("missing: " + "; ".join(missing))
    netdev = "user,id=n0,restrict=on" + "".join(
        f",guestfwd=tcp:{GUEST_HOST}:{p}-cmd:{tools.busybox} nc 127.0.0.1 {p}" for p in (port, *extra_ports))
    argv = [
        tools.qemu or "",
        "-machine", "pc,accel=tcg,graphics=off",
        "-m", str(memory_mb),
        "-smp", "1",
        "-nodefaults", "-display", "none", "-no-reboot",
    ]
    if firmware == "uefi":  # OVMF writes its console to every port: one file each, or the log reads "bboooott"
        argv += ["-chardev", f"file,id=s0,path={log_path}", "-serial", "chardev:s0",
                 "-chardev", f"file,id=s1,path={second_serial_log(log_path)}", "-serial", "chardev:s1"]
    else:
        argv += ["-chardev", f"file,id=s0,path={log_path},mux=on", "-serial", "chardev:s0", "-serial", "chardev:s0"]
    if firmware == "bios":
        return [*argv, "-netdev", netdev, "-device", f"virtio-net-pci,netdev=n0,mac={mac},romfile=",
                "-kernel", tools.ipxe_lkrn or "", "-append", f"dhcp && chain {chain_url}"]
    return [*argv, "-bios", tools.ovmf or "", "-boot", "n", "-netdev", f"{netdev},bootfile={chain_url}",
            "-device", f"virtio-net-pci,netdev=n0,mac={mac},romfile={tools.ipxe_efi_rom}"]


def boot_ipxe(tools: Tools, chain_url: str, log_path: str | Path, port: int, timeout: float = 90.0,
              mac: str = "52:54:00:12:34:56", firmware: str = "bios", extra_ports: tuple[int, ...] = ()) -> BootResult:
    """Boot iPXE in QEMU under ``firmware`` (see :func:`qemu_command`), let it chain ``chain_url``, and
    return the parsed serial log.

    ``port`` is the host port on 127.0.0.1 the guest may reach, as ``GUEST_HOST:port`` (see
    :func:`guest_url`), and ``extra_ports`` more of them. Waits until ``/init`` prints its done marker,
    the firmware gives up (no more boot options), the kernel panics, QEMU exits, or ``timeout`` seconds
    pass; QEMU is always killed and reaped before returning. ``chain_url`` must contain no whitespace
    (nor a comma under UEFI: QEMU's option syntax). Raises :class:`RigError` if QEMU, iPXE, the
    firmware or busybox is missing.
    """
    if any(ch.isspace() for ch in chain_url) or (firmware == "uefi" and "," in chain_url):
        raise RigError(f"chain URL must not contain whitespace (or a comma under UEFI): {chain_url!r}")
    log_path = Path(log_path)
    argv = qemu_command(tools, chain_url, log_path, port=port, mac=mac, firmware=firmware, extra_ports=extra_ports)
    return run_guest(argv, log_path, firmware, timeout)


def run_guest(argv: list[str], log_path: Path, firmware: str, timeout: float,
              stop_at: tuple[str, ...] = ()) -> BootResult:
    """Run the QEMU ``argv`` (which logs the serial ports to ``log_path``, and under UEFI the second one
    to :func:`second_serial_log`) until ``/init`` prints its done marker, the firmware gives up, the
    kernel panics, a line of ``stop_at`` shows up (e.g. a loader's refusal, after which it waits for a
    key), QEMU exits, or ``timeout`` seconds pass; QEMU is always killed and reaped before returning.
    Returns the parsed serial log."""
    logs = [log_path] + ([second_serial_log(log_path)] if firmware == "uefi" else [])
    for p in logs:
        p.write_bytes(b"")
    gave_up = tuple(m.encode() for m in (*FIRMWARE_GAVE_UP[firmware], MARK_KERNEL_PANIC, *stop_at))
    start = time.monotonic()
    deadline = start + timeout
    timed_out = False
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        while True:
            try:
                proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pass
            seen = b"".join(p.read_bytes() for p in logs if p.exists())
            if MARK_DONE.encode() in seen:
                # /init is powering off; give QEMU a moment to exit by itself, bounded.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=min(5.0, max(0.1, deadline - time.monotonic())))
                break
            if any(m in seen for m in gave_up):
                break
            if time.monotonic() >= deadline:
                timed_out = True
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        qemu_out = proc.communicate(timeout=30)[0].decode(errors="replace")
    log = "\n".join(_ANSI.sub("", p.read_bytes().decode(errors="replace")) for p in logs)
    if qemu_out.strip():
        log += "\n--- qemu stdout/stderr ---\n" + qemu_out
    parsed = parse_serial_log(log)
    return BootResult(log=log, returncode=proc.returncode,
                      timed_out=timed_out, seconds=time.monotonic() - start, **parsed)


def image_command(tools: Tools, image: str | Path, log_path: str | Path, port: int, mac: str,
                  capture: str | Path, firmware: str = "bios", memory_mb: int = 512) -> list[str]:
    """Return the QEMU argv that boots the ISO ``image`` as a CD, as a server whose BMC inserted it.

    As :func:`qemu_command` (TCG, serial logs, the isolated user network reaching only
    ``GUEST_HOST:port``), but: the CD is the first boot device (``bootindex=0``); the NIC has no option
    ROM (``romfile=``: nothing in the firmware can DHCP) and comes after the CD in the boot order
    (``bootindex=1``, as a server lists its NICs; OVMF binds a NIC driver only to devices in the boot
    order); and every frame the guest's NIC sends or receives is written to the pcap file ``capture``
    (QEMU's ``filter-dump``). ``firmware``: ``bios`` (SeaBIOS) or ``uefi`` (OVMF). Raises
    :class:`RigError` when QEMU, busybox or the firmware is missing.
    """
    if firmware not in FIRMWARES:
        raise RigError(f"unknown firmware {firmware!r}; expected one of {', '.join(FIRMWARES)}")
    missing = tools.missing("qemu", "busybox", *(("ovmf",) if firmware == "uefi" else ()))
    if missing:
        raise RigError("missing: " + "; ".join(missing))
    netdev = f"user,id=n0,restrict=on,guestfwd=tcp:{GUEST_HOST}:{port}-cmd:{tools.busybox} nc 127.0.0.1 {port}"
    argv = [tools.qemu or "", "-machine", "pc,accel=tcg,graphics=off", "-m", str(memory_mb), "-smp", "1",
            "-nodefaults", "-display", "none", "-no-reboot"]
    if firmware == "uefi":
        argv += ["-bios", tools.ovmf or "",
                 "-chardev", f"file,id=s0,path={log_path}", "-serial", "chardev:s0",
                 "-chardev", f"file,id=s1,path={second_serial_log(log_path)}", "-serial", "chardev:s1"]
    else:
        argv += ["-chardev", f"file,id=s0,path={log_path},mux=on", "-serial", "chardev:s0", "-serial", "chardev:s0"]
    return [*argv, "-drive", f"file={image},media=cdrom,if=none,id=cd0,readonly=on",
            "-device", "ide-cd,drive=cd0,bootindex=0",
            "-netdev", netdev, "-object", f"filter-dump,id=dump0,netdev=n0,file={capture}",
            "-device", f"virtio-net-pci,netdev=n0,mac={mac},romfile=,bootindex=1"]


def boot_image(tools: Tools, image: str | Path, log_path: str | Path, port: int, mac: str, capture: str | Path,
               firmware: str = "bios", timeout: float = 90.0) -> BootResult:
    """Boot the ISO ``image`` in QEMU as a CD (see :func:`image_command`) and return the parsed serial
    log; the guest's network frames are in the pcap file ``capture`` (see :func:`dhcp_packets`).
    Waits and stops as :func:`run_guest`. Raises :class:`RigError` as :func:`image_command`."""
    log_path = Path(log_path)
    argv = image_command(tools, image, log_path, port, mac, capture, firmware)
    return run_guest(argv, log_path, firmware, timeout)


def frames(capture: str | Path) -> list[bytes]:
    """The Ethernet frames of a classic pcap file (what QEMU's ``filter-dump`` writes: link type 1,
    either byte order). Raises :class:`RigError` for a file that is not such a capture."""
    data = Path(capture).read_bytes()
    if len(data) < 24:
        raise RigError(f"{capture}: not a pcap file ({len(data)} bytes)")
    magic = data[:4]
    order = {b"\xd4\xc3\xb2\xa1": "<", b"\xa1\xb2\xc3\xd4": ">"}.get(magic)
    if order is None or struct.unpack(order + "I", data[20:24])[0] != 1:
        raise RigError(f"{capture}: not an Ethernet pcap file")
    out, offset = [], 24
    while offset + 16 <= len(data):
        incl = struct.unpack(order + "I", data[offset + 8:offset + 12])[0]
        out.append(data[offset + 16:offset + 16 + incl])
        offset += 16 + incl
    return out


def dhcp_packets(capture: str | Path) -> list[bytes]:
    """The frames of ``capture`` (see :func:`frames`) that are DHCP or BOOTP: IPv4 UDP to or from
    port 67 or 68, or DHCPv6 (UDP port 546 or 547) over IPv6, VLAN tags skipped."""
    found = []
    for f in frames(capture):
        ethertype, off = struct.unpack(">H", f[12:14])[0], 14
        while ethertype == 0x8100 and len(f) >= off + 4:
            ethertype, off = struct.unpack(">H", f[off + 2:off + 4])[0], off + 4
        if ethertype == 0x0800 and len(f) >= off + 20 and f[off + 9] == 17:
            udp = off + (f[off] & 0x0F) * 4
            ports = struct.unpack(">HH", f[udp:udp + 4]) if len(f) >= udp + 4 else ()
            if {67, 68} & set(ports):
                found.append(f)
        elif ethertype == 0x86DD and len(f) >= off + 44 and f[off + 6] == 17:
            ports = struct.unpack(">HH", f[off + 40:off + 44])
            if {546, 547} & set(ports):
                found.append(f)
    return found


def _kernel_line_words(script: str) -> tuple[str, list[str]]:
    """``(image name, words after the kernel URL)`` of an iPXE script's one ``kernel`` line."""
    lines = [ln.strip() for ln in script.splitlines() if re.match(r"\s*(kernel|linux|chain)\s", ln)]
    if len(lines) != 1:
        raise ValueError(f"expected exactly one kernel line in the iPXE script, found {len(lines)}")
    words = lines[0].split()[1:]
    for op in ("||", "&&"):
        if op in words:
            words = words[:words.index(op)]
    name = None
    while words and words[0].startswith("-"):  # options: kernel --name foo --autofree URL ...
        if words[0] in ("--name", "-n") and len(words) > 1:
            name = words[1]
        words = words[2:] if words[0] in ("--name", "-n", "--timeout", "-t") else words[1:]
    if not words:
        raise ValueError("the kernel line names no image")
    if name is None:  # iPXE names an image after the last segment of its URL's path
        name = urllib.parse.urlsplit(words[0]).path.rsplit("/", 1)[-1]
    return name, words[1:]


def kernel_args_from_script(script: str) -> str:
    """Return the words after the kernel URL on an iPXE script's ``kernel`` line, space-joined.

    That is exactly what the guest's ``/proc/cmdline`` shows under BIOS. A trailing ``|| ...`` or
    ``&& ...`` (iPXE control flow) is not part of it. Raises ``ValueError`` when the script has no
    ``kernel`` line or more than one.
    """
    return " ".join(_kernel_line_words(script)[1])


def expected_cmdline(script: str, firmware: str) -> str:
    """Return the ``/proc/cmdline`` a guest booted by ``script`` under ``firmware`` shows.

    BIOS: :func:`kernel_args_from_script`. UEFI: iPXE hands the kernel's EFI stub the image name first
    (``--name``, else the last segment of the kernel URL's path), then the arguments, e.g.
    ``vmlinuz initrd=main ...``. Raises ``ValueError`` as :func:`kernel_args_from_script`.
    """
    name, args = _kernel_line_words(script)
    return " ".join(([name] if firmware == "uefi" else []) + args)


# --- arm64 (qemu-system-aarch64 -M virt, AAVMF) -------------------------------------------------

#: Where ``.ci/prepare.d/arm64.sh`` unpacks Debian's arm64 kernel (``kernel/``) and busybox (``busybox/``).
DEFAULT_ARM64_DIR = "/var/cache/bootserver-e2e/arm64"
#: Debian's UEFI firmware for QEMU's arm64 ``virt`` machine (package ``qemu-efi-aarch64``): code and a
#: variable store template (copied per boot: the firmware writes its boot options into it).
AAVMF_CODE = "/usr/share/AAVMF/AAVMF_CODE.fd"
AAVMF_VARS = "/usr/share/AAVMF/AAVMF_VARS.fd"


@dataclasses.dataclass(frozen=True)
class Arm64Tools:
    """The pieces of an arm64 guest; ``None`` where one is missing."""

    qemu: str | None
    aavmf_code: str | None
    aavmf_vars: str | None
    vmlinuz: str | None
    modules_dir: str | None
    busybox: str | None
    host_busybox: str | None  # the host's busybox, for the guest's forwarder (guestfwd ... nc)

    def missing(self) -> list[str]:
        """A description of each missing piece."""
        hints = {"qemu": "qemu-system-aarch64 (Debian package qemu-system-arm)",
                 "aavmf_code": f"{AAVMF_CODE} (Debian package qemu-efi-aarch64)",
                 "aavmf_vars": f"{AAVMF_VARS} (Debian package qemu-efi-aarch64)",
                 "vmlinuz": f"Debian's arm64 kernel in $BOOTSERVER_E2E_ARM64_DIR/kernel or {DEFAULT_ARM64_DIR}/kernel"
                            " (run .ci/prepare.d/arm64.sh)",
                 "modules_dir": "the arm64 kernel's lib/modules folder (run .ci/prepare.d/arm64.sh)",
                 "busybox": "busybox-static:arm64, unpacked by .ci/prepare.d/arm64.sh",
                 "host_busybox": "a static busybox (Debian package busybox-static)"}
        return [hint for name, hint in hints.items() if getattr(self, name) is None]


def find_arm64_tools(host_busybox: str | None) -> Arm64Tools:
    """Locate QEMU's aarch64 system emulator, AAVMF and the unpacked arm64 kernel and busybox
    (``BOOTSERVER_E2E_ARM64_DIR`` overrides :data:`DEFAULT_ARM64_DIR`). Never raises."""
    root = Path(os.environ.get("BOOTSERVER_E2E_ARM64_DIR", DEFAULT_ARM64_DIR))
    vmlinuz = modules_dir = None
    kernels = sorted((root / "kernel").glob("boot/vmlinuz-*"))
    if kernels:
        vmlinuz = str(kernels[-1])
        release = kernels[-1].name.removeprefix("vmlinuz-")
        for base in (root / "kernel" / "lib" / "modules" / release,
                     root / "kernel" / "usr" / "lib" / "modules" / release):
            if base.is_dir():
                modules_dir = str(base)
                break
    return Arm64Tools(qemu=shutil.which("qemu-system-aarch64"), aavmf_code=_first_existing(AAVMF_CODE),
                      aavmf_vars=_first_existing(AAVMF_VARS), vmlinuz=vmlinuz, modules_dir=modules_dir,
                      busybox=_first_existing(str(root / "busybox" / "bin" / "busybox")), host_busybox=host_busybox)


def arm64_command(tools: Arm64Tools, tftp_root: str | Path | None, bootfile: str | None, vars_file: str | Path,
                  log_path: str | Path, port: int, mac: str, memory_mb: int = 1024,
                  cdrom: str | Path | None = None) -> list[str]:
    """Return the QEMU argv of an arm64 machine that network-boots as an arm64 server's firmware does:
    ``qemu-system-aarch64 -M virt`` (TCG, Cortex-A57) with AAVMF in its two flash banks (``vars_file``:
    a copy of the variable store), PL011 serial (``ttyAMA0``) into ``log_path``, a virtio NIC without
    option ROM whose firmware PXE-boots: QEMU's user network answers DHCP with ``bootfile`` and serves
    it from ``tftp_root`` over TFTP, and, as in :func:`qemu_command`, reaches nothing but
    ``GUEST_HOST:port`` (forwarded to ``127.0.0.1:port``). ``-no-reboot``. With ``cdrom`` (an ISO
    image, and no ``tftp_root``) the machine boots that CD first (virtio-scsi, ``bootindex=0``), the NIC
    after it in the boot order (``bootindex=1``), as :func:`image_command` does. Raises
    :class:`RigError` when a piece is missing."""
    missing = tools.missing()
    if missing:
        raise RigError("missing: " + "; ".join(missing))
    pxe = f"tftp={tftp_root},bootfile={bootfile}," if tftp_root is not None else ""
    netdev = (f"user,id=n0,restrict=on,{pxe}"
              f"guestfwd=tcp:{GUEST_HOST}:{port}-cmd:{tools.host_busybox} nc 127.0.0.1 {port}")
    cd = ["-drive", f"file={cdrom},media=cdrom,if=none,id=cd0,readonly=on", "-device", "virtio-scsi-pci,id=scsi0",
          "-device", "scsi-cd,drive=cd0,bootindex=0"] if cdrom is not None else []
    nic = f"virtio-net-pci,netdev=n0,mac={mac},romfile=" + (",bootindex=1" if cdrom is not None else "")
    return [tools.qemu or "", "-machine", "virt,accel=tcg", "-cpu", "cortex-a57", "-m", str(memory_mb), "-smp", "1",
            "-nodefaults", "-display", "none", "-no-reboot",
            "-drive", f"if=pflash,format=raw,readonly=on,file={tools.aavmf_code}",
            "-drive", f"if=pflash,format=raw,file={vars_file}",
            "-chardev", f"file,id=s0,path={log_path}", "-serial", "chardev:s0",
            *cd, "-netdev", netdev, "-device", nic]


def grub_kernel_line(config: str) -> list[str]:
    """The words of the ``linux`` line (``if linux ...; then``) of a GRUB config bootserver renders (each
    single-quoted), unquoted: the kernel's file name first, then its arguments. Raises ``ValueError`` without one."""
    lines = [line.strip().removeprefix("if ") for line in config.splitlines()
             if line.strip().startswith(("linux ", "if linux "))]
    if len(lines) != 1:
        raise ValueError(f"expected one linux line, found {len(lines)}")
    return shlex.split(lines[0].removesuffix("; then"))[1:]


# --- a static HTTP server on 127.0.0.1 (upstream for artifacts, and the rig's self-test) -------------

class StaticServer:
    """Serve fixed bodies over HTTP on ``127.0.0.1`` from a background thread; use as a context manager.

    ``routes`` maps a path (``"/vmlinuz"``) to ``bytes`` or a file ``Path``; anything else is a 404.
    ``port`` is chosen by the OS (bind to port 0). ``requests`` lists the paths asked for, in order.
    Entering raises ``RigError`` if the server does not start within 10 seconds; leaving stops it.
    """

    def __init__(self, routes: dict[str, bytes | Path]) -> None:
        self.routes = dict(routes)
        self.port = 0
        self.requests: list[str] = []
        self._loop = None
        self._thread = None
        self._runner = None

    def url(self, path: str = "/") -> str:
        """Return ``http://127.0.0.1:<port><path>``."""
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> StaticServer:
        import asyncio
        import threading

        from aiohttp import web

        async def handle(request: web.Request) -> web.StreamResponse:
            self.requests.append(request.path_qs)
            body = self.routes.get(request.path)
            if body is None:
                return web.Response(status=404, text=f"no such path: {request.path}\n")
            if isinstance(body, Path):
                return web.FileResponse(body)
            return web.Response(body=body, content_type="application/octet-stream")

        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                app = web.Application()
                app.router.add_route("*", "/{tail:.*}", handle)
                self._runner = web.AppRunner(app, access_log=None)
                loop.run_until_complete(self._runner.setup())
                site = web.TCPSite(self._runner, "127.0.0.1", 0)
                loop.run_until_complete(site.start())
                self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            except BaseException as e:  # reported to the caller of __enter__
                errors.append(e)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="e2e-static-server", daemon=True)
        self._thread.start()
        if not ready.wait(10) or errors:
            raise RigError(f"static server did not start: {errors[0] if errors else 'timeout'}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)


# --- Ignition -------------------------------------------------------------------------------------

@dataclasses.dataclass
class IgnitionRun:
    """The outcome of running Ignition's ``fetch-offline`` and ``fetch`` stages."""

    stages: list[tuple[str, int, str]]  # (stage, exit status, combined output)
    config: dict | None  # the merged config Ignition cached (``config-cache``), if it wrote one

    @property
    def ok(self) -> bool:
        """True when every stage that ran exited 0."""
        return all(rc == 0 for _, rc, _ in self.stages)

    def output(self) -> str:
        """Return every stage's output, labelled, for assertion messages."""
        return "\n".join(f"--- ignition -stage {s} (exit {rc}) ---\n{out}" for s, rc, out in self.stages)


def run_ignition(ignition: str, stub_path: str | Path, workdir: str | Path, timeout: float = 60.0) -> IgnitionRun:
    """Run the real Ignition binary's ``fetch-offline`` then ``fetch`` stages on ``stub_path``.

    Platform ``file`` (``IGNITION_CONFIG_FILE``); every path Ignition writes is redirected under
    ``workdir`` so it runs unprivileged. ``fetch`` is skipped when ``fetch-offline`` fails. Each stage
    is killed after ``timeout`` seconds (it then counts as exit status -9). Returns the stages' exit
    statuses and output, and the merged config JSON if Ignition wrote ``run/ignition.json``.
    """
    import json

    d = Path(workdir)
    (d / "root").mkdir(parents=True, exist_ok=True)
    (d / "run" / "ignition").mkdir(parents=True, exist_ok=True)
    cache = d / "run" / "ignition.json"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "IGNITION_CONFIG_FILE": str(stub_path),
           "HOME": str(d)}
    stages: list[tuple[str, int, str]] = []
    for stage in ("fetch-offline", "fetch"):
        argv = [ignition, "-platform", "file", "-stage", stage, "-log-to-stdout",
                "-root", str(d / "root"), "-config-cache", str(cache),
                "-state-file", str(d / "run" / "ignition" / "state"),
                "-neednet", str(d / "run" / "ignition" / "neednet")]
        try:
            p = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
            stages.append((stage, p.returncode, (p.stdout + p.stderr).decode(errors="replace")))
        except subprocess.TimeoutExpired as e:  # subprocess.run kills and reaps the child
            out = (e.stdout or b"") + (e.stderr or b"")
            stages.append((stage, -9, out.decode(errors="replace") + f"\n[killed after {timeout} s]"))
        if stages[-1][1] != 0:
            break
    config = json.loads(cache.read_text()) if cache.is_file() else None
    return IgnitionRun(stages=stages, config=config)


def ignition_validate(binary: str, path: str | Path, timeout: float = 30.0) -> tuple[int, str]:
    """Run ``ignition-validate`` on the file at ``path``; return (exit status, combined output).

    Raises ``subprocess.TimeoutExpired`` after ``timeout`` seconds (the child is killed first).
    """
    p = subprocess.run([binary, str(path)], stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
    return p.returncode, (p.stdout + p.stderr).decode(errors="replace")
