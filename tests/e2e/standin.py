"""A stand-in for CoreOS, built from Debian's binary packages, for the whole life of a node in the
end-to-end tests and the playground (real CoreOS images cannot be fetched here).

:func:`build_standin` makes, once per set of inputs (cached in :func:`standin_dir`), the three files a
CoreOS stream offers for a PXE install, from Debian's kernel (``.ci/prepare.d/e2e-kernel.sh``), busybox,
Ignition 2.14 (``ignition``), ``setfiles`` (``policycoreutils``, unpacked by
``.ci/prepare.d/standin-parts.sh``: Ignition's ``files`` stage runs it), curl and its libraries
(``curl``), SYSLINUX (``syslinux``, ``syslinux-common``), a standalone GRUB (``grub-efi-amd64-bin``,
``grub-common``), ``mtools`` and ``mke2fs`` (``e2fsprogs``):

* **kernel**: Debian's kernel, as is;
* **initramfs**: the live system (:data:`standin_scripts.LIVE`): busybox, the NIC, disk and FAT drivers;
* **rootfs**: what coreos-installer writes, as CoreOS's rootfs carries it (osmet): a gzip'd raw "metal
  image", MBR-partitioned: partition 1 FAT (label ``BOOT``: SYSLINUX for BIOS, with SYSLINUX's MBR
  code; a standalone GRUB as ``EFI/BOOT/BOOTX64.EFI`` for UEFI; the kernel and the installed system's
  initramfs with the real ``ignition`` and ``setfiles``), partition 2 ext4 (label ``root``: busybox, curl
  and its libraries, ``/sbin/init``: :data:`standin_scripts.INSTALLED_INIT`).

:class:`Machine` runs one QEMU machine as a server's firmware would (TCG): the NIC first in the boot order
(its iPXE option ROM, QEMU's DHCP handing out the chain URL as the boot file), the disk second, rebooting
when the guest reboots, so boot-once's answer decides what boots after an install.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
import time
from pathlib import Path

from . import rig, standin_scripts

#: Where the built stand-in is cached (override: ``BOOTSERVER_E2E_STANDIN_DIR``).
DEFAULT_STANDIN_DIR = "/var/cache/bootserver-e2e/standin"
#: Where ``.ci/prepare.d/standin-parts.sh`` unpacks ``policycoreutils`` (override: ``BOOTSERVER_E2E_STANDIN_PARTS``).
DEFAULT_PARTS_DIR = "/var/cache/bootserver-e2e/standin-parts"

SYSLINUX_MBR = "/usr/lib/syslinux/mbr/mbr.bin"
GRUB_EFI_MODULES = "/usr/lib/grub/x86_64-efi"

#: Kernel modules of the live system and of the installed system's initramfs (dependencies added).
LIVE_MODULES = ("virtio_pci", "virtio_net", "virtio_blk", "vfat", "nls_cp437", "nls_utf8", "nls_ascii")
INSTALLED_MODULES = (*LIVE_MODULES, "crc32c_generic", "ext4")

#: The metal image's layout, in 512-byte sectors: the FAT boot partition, then the ext4 root.
BOOT_START, BOOT_SECTORS = 2048, 64 * 2048
ROOT_START, ROOT_SECTORS = BOOT_START + BOOT_SECTORS, 40 * 2048
#: Bytes of the metal image (and the least a guest's disk must hold).
IMAGE_BYTES = (ROOT_START + ROOT_SECTORS) * 512
#: The installed system's kernel arguments (coreos-installer's platform replaces ``metal``).
INSTALLED_KARGS = "console=ttyS0,115200n8 ignition.platform.id=metal"

#: The stream name of the stand-in's synced cache (the e2e fixture ``life_source``): a config that names
#: its stream so, with the same metadata and ``cache_dir``, serves the stand-in without another sync.
STANDIN_STREAM = "standin"

#: The markers of the stand-in on the serial console.
MARK_INSTALLED = "STANDIN-INSTALLED:"
MARK_FIRSTBOOT = "STANDIN-FIRSTBOOT:"
MARK_UP = "STANDIN-UP"
MARK_FAIL = "STANDIN-FAIL:"

OS_RELEASE = ('NAME="bootserver stand-in CoreOS"\nID=bootserver-standin\n'
              'PRETTY_NAME="bootserver stand-in CoreOS (Debian parts)"\n')


@dataclasses.dataclass(frozen=True)
class StandinTools:
    """The host files the stand-in is built from; ``None`` where one is missing."""

    vmlinuz: str | None
    modules_dir: str | None
    busybox: str | None
    ignition: str | None
    setfiles: str | None
    curl: str | None
    syslinux: str | None
    syslinux_mbr: str | None
    grub_mkstandalone: str | None
    grub_modules: str | None
    mformat: str | None
    mcopy: str | None
    mmd: str | None
    mke2fs: str | None

    def missing(self) -> list[str]:
        """A description of each missing piece, naming its Debian package or preparation script."""
        hints = {"vmlinuz": "a Debian kernel (run .ci/prepare.d/e2e-kernel.sh)",
                 "modules_dir": "the kernel's modules (run .ci/prepare.d/e2e-kernel.sh)",
                 "busybox": "a static busybox (busybox-static)", "ignition": "ignition (ignition)",
                 "setfiles": f"setfiles from policycoreutils in $BOOTSERVER_E2E_STANDIN_PARTS or {DEFAULT_PARTS_DIR}"
                             " (run .ci/prepare.d/standin-parts.sh)",
                 "curl": "curl (curl)", "syslinux": "syslinux (syslinux)",
                 "syslinux_mbr": f"{SYSLINUX_MBR} (syslinux-common)",
                 "grub_mkstandalone": "grub-mkstandalone (grub-common)",
                 "grub_modules": f"{GRUB_EFI_MODULES} (grub-efi-amd64-bin)",
                 "mformat": "mformat (mtools)", "mcopy": "mcopy (mtools)", "mmd": "mmd (mtools)",
                 "mke2fs": "mke2fs (e2fsprogs)"}
        return [hint for name, hint in hints.items() if getattr(self, name) is None]


def parts_dir() -> Path:
    """The folder ``.ci/prepare.d/standin-parts.sh`` unpacked into."""
    return Path(os.environ.get("BOOTSERVER_E2E_STANDIN_PARTS", DEFAULT_PARTS_DIR))


def standin_dir() -> Path:
    """The folder the built stand-in is cached in."""
    return Path(os.environ.get("BOOTSERVER_E2E_STANDIN_DIR", DEFAULT_STANDIN_DIR))


def find_standin_tools(tools: rig.Tools) -> StandinTools:
    """Locate what :func:`build_standin` needs (``tools``: the rig's kernel, modules, busybox, Ignition).
    Never raises."""
    def which(name: str) -> str | None:
        return shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin:" + os.environ.get("PATH", ""))

    setfiles = next((str(p) for p in (parts_dir() / "sbin" / "setfiles", parts_dir() / "usr" / "sbin" / "setfiles")
                     if p.is_file()), None)
    return StandinTools(
        vmlinuz=tools.vmlinuz, modules_dir=tools.modules_dir, busybox=tools.busybox, ignition=tools.ignition,
        setfiles=setfiles, curl=which("curl"), syslinux=which("syslinux"),
        syslinux_mbr=SYSLINUX_MBR if os.path.isfile(SYSLINUX_MBR) else None,
        grub_mkstandalone=which("grub-mkstandalone"),
        grub_modules=GRUB_EFI_MODULES if os.path.isfile(f"{GRUB_EFI_MODULES}/kernel.img") else None,
        mformat=which("mformat"), mcopy=which("mcopy"), mmd=which("mmd"), mke2fs=which("mke2fs"))


@dataclasses.dataclass(frozen=True)
class Standin:
    """The built stand-in: the three PXE artifacts of a stream (kernel, initramfs, rootfs) as files."""

    kernel: Path
    initramfs: Path
    rootfs: Path

    def artifacts(self) -> dict[str, bytes]:
        """Kind (``kernel``, ``initramfs``, ``rootfs``) -> bytes, as a stream's upstream serves them."""
        return {"kernel": self.kernel.read_bytes(), "initramfs": self.initramfs.read_bytes(),
                "rootfs": self.rootfs.read_bytes()}


def shared_libraries(binary: str) -> list[str]:
    """The absolute paths of the shared libraries ``binary`` loads (``ldd``), its interpreter included.
    Raises :class:`rig.RigError` when ``ldd`` fails."""
    p = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        raise rig.RigError(f"ldd {binary}: {p.stderr.strip() or p.stdout.strip()}")
    found = []
    for line in p.stdout.splitlines():
        words = line.split()
        if "=>" in words and len(words) > words.index("=>") + 1 and words[words.index("=>") + 1].startswith("/"):
            found.append(words[words.index("=>") + 1])
        elif words and words[0].startswith("/"):
            found.append(words[0])
    return found


class _Tree:
    """Files for a cpio archive or a file system: path -> (bytes, mode) or a symlink target."""

    def __init__(self) -> None:
        self.files: dict[str, tuple[bytes, int]] = {}
        self.links: dict[str, str] = {}
        self.dirs: set[str] = set()

    def _parents(self, path: str) -> None:
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            self.dirs.add("/".join(parts[:i]))

    def file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self._parents(path)
        self.files[path] = (data, mode)

    def link(self, path: str, target: str) -> None:
        self._parents(path)
        self.links[path] = target

    def dir(self, *paths: str) -> None:
        for p in paths:
            self._parents(p + "/x")

    def binary(self, path: str, source: str) -> None:
        """``source`` (an ELF file) at ``path``, with every library it loads at the library's own path."""
        self.file(path, Path(source).read_bytes(), 0o755)
        for lib in shared_libraries(source):
            if lib.lstrip("/") not in self.files:
                self.file(lib.lstrip("/"), Path(lib).read_bytes(), 0o755)

    def cpio(self) -> bytes:
        c = rig._Cpio()
        for d in sorted(self.dirs):
            c.dir(d)
        c.chardev("dev/console", 5, 1)
        for path, (data, mode) in sorted(self.files.items()):
            c.file(path, data, mode)
        for path, target in sorted(self.links.items()):
            c.symlink(path, target)
        return c.finish()

    def write(self, root: Path) -> None:
        for d in sorted(self.dirs):
            (root / d).mkdir(parents=True, exist_ok=True)
        for path, (data, mode) in self.files.items():
            (root / path).write_bytes(data)
            (root / path).chmod(mode)
        for path, target in self.links.items():
            (root / path).symlink_to(target)


def _busybox(tree: _Tree, busybox: str, applets: bool = False) -> None:
    tree.file("bin/busybox", Path(busybox).read_bytes(), 0o755)
    tree.link("bin/sh", "busybox")
    if applets:  # the installed root: the applets as links (its init does not run busybox --install)
        names = subprocess.run([busybox, "--list"], capture_output=True, text=True, timeout=30, check=True).stdout
        for name in names.split():
            if name not in ("sh", "busybox") and f"bin/{name}" not in tree.files:
                tree.link(f"bin/{name}", "busybox")


def _modules(tree: _Tree, modules_dir: str, names: tuple[str, ...]) -> None:
    for i, (name, data) in enumerate(rig.resolve_modules(modules_dir, names)):
        tree.file(f"modules/{i:02d}-{name}.ko", data)


def _run(argv: list[str], what: str) -> None:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        raise rig.RigError(f"{what} exited {p.returncode}: {(p.stderr or p.stdout).strip()[-2000:]}")


def _mbr(boot_code: bytes) -> bytes:
    """An MBR: SYSLINUX's boot code, partition 1 (active, FAT32 LBA) and 2 (Linux), LBA only."""
    def entry(active: bool, ptype: int, start: int, sectors: int) -> bytes:
        return struct.pack("<B3sB3sII", 0x80 if active else 0, b"\xfe\xff\xff", ptype, b"\xfe\xff\xff",
                           start, sectors)
    table = entry(True, 0x0C, BOOT_START, BOOT_SECTORS) + entry(False, 0x83, ROOT_START, ROOT_SECTORS)
    return boot_code[:440] + b"STND" + b"\0\0" + table + b"\0" * 32 + b"\x55\xaa"


def _digest(tools: StandinTools) -> str:
    h = hashlib.sha256()
    for text in (standin_scripts.COMMON, standin_scripts.UDHCPC, standin_scripts.LIVE,
                 standin_scripts.INSTALLED_INITRAMFS, standin_scripts.INSTALLED_INIT, OS_RELEASE,
                 INSTALLED_KARGS, repr((LIVE_MODULES, INSTALLED_MODULES, BOOT_SECTORS, ROOT_SECTORS))):
        h.update(text.encode() + b"\0")
    for path in (tools.vmlinuz, tools.busybox, tools.ignition, tools.setfiles, tools.curl, tools.syslinux_mbr,
                 f"{tools.grub_modules}/kernel.img", tools.syslinux):
        st = os.stat(path or "")
        h.update(f"{path}:{st.st_size}:{st.st_mtime_ns}\0".encode())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()[:16]


def build_standin(tools: StandinTools, cache: Path | None = None) -> Standin:
    """Build the stand-in (see the module's docstring) unless ``cache`` (default :func:`standin_dir`)
    already holds this build (a folder named by the digest of every input; older builds are removed),
    and return its files.
    A build is made in a temporary folder and renamed into place whole. Raises :class:`rig.RigError`
    when a tool is missing or fails, ``OSError`` when a file cannot be read or written."""
    missing = tools.missing()
    if missing:
        raise rig.RigError("stand-in: missing " + "; ".join(missing))
    cache = cache or standin_dir()
    folder = cache / _digest(tools)
    names = Standin(folder / "vmlinuz", folder / "initramfs.img", folder / "rootfs.img")
    if names.rootfs.is_file():
        return names
    cache.mkdir(parents=True, exist_ok=True)
    for old in cache.iterdir():  # builds of other inputs (about 40 MB each) go
        if old.is_dir() and not old.name.startswith("."):
            shutil.rmtree(old, ignore_errors=True)
    work = Path(tempfile.mkdtemp(dir=cache, prefix=".build-"))
    try:
        _build(tools, work)
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(folder)
        work.rename(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return names


def _build(tools: StandinTools, work: Path) -> None:
    assert tools.vmlinuz and tools.modules_dir and tools.busybox and tools.ignition and tools.setfiles
    assert tools.curl and tools.syslinux and tools.syslinux_mbr and tools.grub_mkstandalone
    assert tools.grub_modules and tools.mformat and tools.mcopy and tools.mmd and tools.mke2fs
    shutil.copyfile(tools.vmlinuz, work / "vmlinuz")
    udhcpc = standin_scripts.UDHCPC.encode()

    live = _Tree()
    live.dir("dev", "proc", "sys", "tmp", "mnt", "etc")
    _busybox(live, tools.busybox)
    live.file("init", standin_scripts.LIVE.encode(), 0o755)
    live.file("etc/udhcpc.script", udhcpc, 0o755)
    _modules(live, tools.modules_dir, LIVE_MODULES)
    (work / "initramfs.img").write_bytes(gzip.compress(live.cpio(), compresslevel=6, mtime=0))

    first = _Tree()  # the installed system's initramfs
    first.dir("dev", "proc", "sys", "run", "tmp", "etc", "boot", "sysroot", "usr/lib/ignition")
    _busybox(first, tools.busybox)
    first.file("init", standin_scripts.INSTALLED_INITRAMFS.encode(), 0o755)
    first.file("etc/udhcpc.script", udhcpc, 0o755)
    first.binary("usr/bin/ignition", tools.ignition)
    first.binary("usr/sbin/setfiles", tools.setfiles)
    _modules(first, tools.modules_dir, INSTALLED_MODULES)
    (work / "initrd.img").write_bytes(gzip.compress(first.cpio(), compresslevel=1, mtime=0))

    root = _Tree()  # the installed system's root file system
    root.dir("dev", "proc", "sys", "run", "tmp", "home", "root", "var", "etc/systemd/system", "mnt")
    _busybox(root, tools.busybox, applets=True)
    root.file("sbin/init", standin_scripts.INSTALLED_INIT.encode(), 0o755)
    root.file("etc/udhcpc.script", udhcpc, 0o755)
    root.binary("usr/bin/curl", tools.curl)
    root.file("etc/os-release", OS_RELEASE.encode())
    root.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
    root.file("etc/group", b"root:x:0:\n")
    # Ignition's files stage relabels what it wrote (Debian builds it with SELinux relabelling): a
    # policy whose only rule is "leave the label as it is" (setfiles' <<none>>)
    root.file("etc/selinux/config", b"SELINUX=disabled\nSELINUXTYPE=standin\n")
    root.file("etc/selinux/standin/contexts/files/file_contexts", b"/.*\t<<none>>\n")
    rootdir = work / "root"
    root.write(rootdir)

    image = work / "metal.img"
    with open(image, "wb") as f:
        f.truncate(IMAGE_BYTES)
        f.write(_mbr(Path(tools.syslinux_mbr).read_bytes()))
    fat = f"{image}@@{BOOT_START * 512}"
    env = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}
    subprocess.run([tools.mformat, "-i", fat, "-F", "-T", str(BOOT_SECTORS), "-H", str(BOOT_START),
                    "-h", "64", "-s", "32", "-v", "BOOT", "::"], check=True, env=env, capture_output=True, timeout=60)
    (work / "syslinux.cfg").write_text("SERIAL 0 115200\nDEFAULT standin\nPROMPT 0\nTIMEOUT 0\nLABEL standin\n"
                                       f"  LINUX /vmlinuz\n  INITRD /initrd.img\n  APPEND {INSTALLED_KARGS}\n")
    (work / "grub.cfg").write_text(f"set timeout=0\nlinux /vmlinuz {INSTALLED_KARGS}\ninitrd /initrd.img\nboot\n")
    (work / "embedded.cfg").write_text("search --no-floppy --label BOOT --set=root\nconfigfile ($root)/grub.cfg\n")
    modules = "part_msdos fat search search_label configfile linux normal echo test boot"
    _run([tools.grub_mkstandalone, "-O", "x86_64-efi", "-d", tools.grub_modules, f"--install-modules={modules}",
          "--modules=part_msdos fat search search_label", "--locales=", "--fonts=", "--themes=",
          "-o", str(work / "BOOTX64.EFI"), f"boot/grub/grub.cfg={work / 'embedded.cfg'}"], "grub-mkstandalone")
    for argv in ([tools.mmd, "-i", fat, "::/EFI", "::/EFI/BOOT"],
                 [tools.mcopy, "-i", fat, str(work / "BOOTX64.EFI"), "::/EFI/BOOT/BOOTX64.EFI"],
                 [tools.mcopy, "-i", fat, str(work / "vmlinuz"), "::/vmlinuz"],
                 [tools.mcopy, "-i", fat, str(work / "initrd.img"), "::/initrd.img"],
                 [tools.mcopy, "-i", fat, str(work / "syslinux.cfg"), "::/syslinux.cfg"],
                 [tools.mcopy, "-i", fat, str(work / "grub.cfg"), "::/grub.cfg"]):
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise rig.RigError(f"{' '.join(argv)}: {p.stderr.strip()}")
    _run([tools.syslinux, "--offset", str(BOOT_START * 512), "--install", str(image)], "syslinux --install")
    _run([tools.mke2fs, "-q", "-F", "-t", "ext4", "-L", "root", "-d", str(rootdir), "-E",
          f"offset={ROOT_START * 512},root_owner=0:0", str(image), f"{ROOT_SECTORS // 2}k"], "mke2fs")
    with open(image, "rb") as src, open(work / "rootfs.img", "wb") as out, \
            gzip.GzipFile(fileobj=out, mode="wb", compresslevel=1, mtime=0) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    for name in ("metal.img", "initrd.img", "BOOTX64.EFI", "syslinux.cfg", "grub.cfg", "embedded.cfg"):
        (work / name).unlink()
    shutil.rmtree(rootdir)


# --- a machine's whole life in QEMU ---------------------------------------------------------------

def blank_disk(path: Path, size: int = IMAGE_BYTES + (16 << 20)) -> Path:
    """A new empty (sparse) raw disk of ``size`` bytes at ``path``."""
    with open(path, "wb") as f:
        f.truncate(size)
    return path


class Machine:
    """One QEMU machine (TCG) with a disk and a NIC, network-booting first as a server's firmware does.

    ``firmware``: ``bios`` (SeaBIOS) or ``uefi`` (OVMF, without IPv6: ``IPv6Support`` off, so no PXEv6
    or HTTPv6 boot options on the way to the disk). The NIC (virtio) is first in the boot order, the
    disk (virtio-blk, raw ``disk``) second. By default the NIC runs iPXE's option ROM from ``ipxe-qemu``
    (under BIOS through QEMU's default ROM property, which loads the same file: SeaBIOS offers no
    network boot when ``romfile=`` names it explicitly), and QEMU's user network (``restrict=on``,
    reaching only ``rig.GUEST_HOST:port``) hands out ``chain_url`` as the DHCP boot file. With ``tap``
    (``(argv prefix, tap name)``, e.g. ``(["ip", "netns", "exec", NS], "tap0")``) the NIC is that tap
    device of a DHCP engine's network instead, QEMU runs under the prefix, and under UEFI the
    firmware's own PXE (no option ROM) does the first DHCP and TFTP. ``extra`` is appended
    (``-smbios``); ``forwards``: more ports of ``127.0.0.1`` the guest reaches at ``rig.GUEST_HOST``
    (another server of the test). A guest reboot resets the machine (the firmware boots again); a power-off ends QEMU.
    The serial ports go to ``log`` (UEFI: the second one to :func:`rig.second_serial_log`). Use as a
    context manager: leaving kills QEMU."""

    def __init__(self, tools: rig.Tools, firmware: str, disk: Path, log: Path, port: int, mac: str,
                 chain_url: str, memory_mb: int = 768, extra: list[str] | None = None,
                 tap: tuple[list[str], str] | None = None, forwards: tuple[int, ...] = ()) -> None:
        if firmware not in rig.FIRMWARES:
            raise rig.RigError(f"unknown firmware {firmware!r}")
        missing = tools.missing("qemu", "busybox", "ipxe_efi_rom", *(("ovmf",) if firmware == "uefi" else ()))
        if missing:
            raise rig.RigError("missing: " + "; ".join(missing))
        self.firmware, self.log, self.proc = firmware, log, None
        rom = f",romfile={tools.ipxe_efi_rom}" if firmware == "uefi" else ""
        net = ["-netdev", f"user,id=n0,restrict=on,bootfile={chain_url}" + "".join(
            f",guestfwd=tcp:{rig.GUEST_HOST}:{p}-cmd:{tools.busybox} nc 127.0.0.1 {p}" for p in (port, *forwards))]
        wrap: list[str] = []
        if tap is not None:  # a DHCP engine's network: the firmware's own PXE under UEFI, not iPXE's ROM
            wrap, name = tap
            net = ["-netdev", f"tap,id=n0,ifname={name},script=no,downscript=no"]
            if firmware == "uefi":
                rom = ",romfile="
        argv = [*wrap, tools.qemu or "", "-machine", "pc,accel=tcg,graphics=off", "-m", str(memory_mb),
                "-smp", "1", "-nodefaults", "-display", "none"]
        if firmware == "uefi":  # no IPv6 (the network has none): no PXEv6 or HTTPv6 tries after iPXE's exit
            argv += ["-bios", tools.ovmf or "", "-fw_cfg", "name=opt/org.tianocore/IPv6Support,string=no",
                     "-chardev", f"file,id=s0,path={log}", "-serial", "chardev:s0",
                     "-chardev", f"file,id=s1,path={rig.second_serial_log(log)}", "-serial", "chardev:s1"]
        else:
            argv += ["-chardev", f"file,id=s0,path={log},mux=on", "-serial", "chardev:s0", "-serial", "chardev:s0"]
        self.argv = [*argv, *net,
                     "-device", f"virtio-net-pci,netdev=n0,mac={mac}{rom},bootindex=1",
                     "-drive", f"file={disk},format=raw,if=none,id=d0,cache=unsafe",
                     "-device", "virtio-blk-pci,drive=d0,bootindex=2", *(extra or [])]

    def __enter__(self) -> Machine:
        self.power_on()
        return self

    def __exit__(self, *exc: object) -> None:
        self.power_off()

    def power_on(self) -> None:
        """Start QEMU (the serial logs start empty)."""
        self.power_off()
        for p in self.logs():
            p.write_bytes(b"")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def power_off(self) -> None:
        """Kill QEMU, as pulling the power would (the disk file holds what the guest wrote to it)."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc = None

    def logs(self) -> list[Path]:
        return [self.log] + ([rig.second_serial_log(self.log)] if self.firmware == "uefi" else [])

    def serial(self) -> str:
        """The serial console so far (both ports), escape sequences removed."""
        return "\n".join(rig._ANSI.sub("", p.read_bytes().decode(errors="replace")) for p in self.logs() if p.exists())

    def wait_for(self, marker: str, timeout: float, after: int = 0) -> int:
        """Wait until ``marker`` shows on the serial console (at character ``after`` or later) and return
        where it ends. Raises ``AssertionError`` with the console's tail when the guest failed
        (:data:`MARK_FAIL`), QEMU exited, or ``timeout`` seconds passed."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.serial()
            at = text.find(marker, after)
            if at >= 0:
                return at + len(marker)
            if text.find(MARK_FAIL, after) >= 0:
                raise AssertionError(f"the stand-in failed before {marker!r}:\n" + self.tail())
            # OVMF's "failed to load Boot..." is not its last word here: it goes on to the disk's boot option
            if any(text.find(m, after) >= 0 for m in (rig.MARK_BIOS_GAVE_UP, rig.MARK_KERNEL_PANIC)):
                raise AssertionError(f"nothing booted before {marker!r}:\n" + self.tail())
            if self.proc is None or self.proc.poll() is not None:
                raise AssertionError(f"QEMU ended before {marker!r}:\n" + self.tail())
            if time.monotonic() > deadline:
                raise AssertionError(f"no {marker!r} within {timeout} s:\n" + self.tail())
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=0.25)

    def tail(self, lines: int = 60) -> str:
        """The last ``lines`` lines of the serial console."""
        return "\n".join(self.serial().splitlines()[-lines:])
