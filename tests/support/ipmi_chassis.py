"""The machine behind the IPMI simulator's BMC (tests/support/ipmi_sim.py): ``ipmi_sim``'s ``chassis_control`` program.

``ipmi_sim`` (Debian's ``openipmi``) runs it for every chassis request it cannot answer itself, as
``ipmi_chassis.py STATE_DIR 0x20 get power boot`` (it prints ``power:0|1`` and ``boot:none|pxe|...``,
one per line) or ``... set power 1``, ``set power 0``, ``set boot pxe``, ``set reset 1``, ``set shutdown 1``.
It must answer at once, so it never waits on the guest.

``STATE_DIR`` holds the machine: ``calls.log`` (one line per call, for the tests), ``boot`` (the boot
device the BMC was last told), and either ``power`` (``0``/``1``: a machine with nothing in it) or, when
``guest.json`` names a QEMU command line (``{"argv": [...], "log": PATH}``), a QEMU guest: power on starts
it detached (its own session, no inherited descriptors, output in ``qemu.out``), its process id in
``qemu.pid``; the power is on while that process lives; power off kills it. With boot device ``pxe`` the
guest's argv is used as given (``-boot n``: its NIC first); with any other device the network is not
first (``-boot c``). A soft shutdown (``set shutdown 1``) is only logged: the test guest has no ACPI
handler, so a real machine would stay on too, and the BMC's caller powers it down after its grace.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


class Machine:
    """The state of the machine in ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        guest = folder / "guest.json"
        self.guest = json.loads(guest.read_text()) if guest.exists() else None

    def _pid(self) -> int | None:
        try:
            return int((self.folder / "qemu.pid").read_text())
        except (OSError, ValueError):
            return None

    def power(self) -> int:
        if self.guest is None:
            return int((self.folder / "power").read_text()) if (self.folder / "power").exists() else 0
        pid = self._pid()
        return int(pid is not None and _alive(pid))

    def boot(self) -> str:
        path = self.folder / "boot"
        return path.read_text().strip() if path.exists() else "none"

    def on(self) -> None:
        if self.power():
            return
        if self.guest is None:
            (self.folder / "power").write_text("1")
            return
        argv = list(self.guest["argv"])
        if self.boot() != "pxe" and "-boot" in argv:
            argv[argv.index("-boot") + 1] = "c"
        with open(self.folder / "qemu.out", "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True)
        (self.folder / "qemu.pid").write_text(str(proc.pid))

    def off(self) -> None:
        if self.guest is None:
            (self.folder / "power").write_text("0")
            return
        pid = self._pid()
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGKILL)
            end = time.monotonic() + 5  # the kill is immediate; bounded wait for the process to go
            while _alive(pid) and time.monotonic() < end:
                time.sleep(0.02)


def main(argv: list[str]) -> int:
    folder, _mc, verb, *rest = argv
    machine = Machine(Path(folder))
    with open(machine.folder / "calls.log", "a") as calls:
        calls.write(" ".join([verb, *rest]) + "\n")
    if verb == "get":
        for key in rest:
            if key == "power":
                print(f"power:{machine.power()}")
            elif key == "boot":
                print(f"boot:{machine.boot()}")
        return 0
    for key, value in zip(rest[::2], rest[1::2], strict=False):
        if key == "boot":
            (machine.folder / "boot").write_text(value)
        elif key == "power":
            machine.on() if value == "1" else machine.off()
        elif key == "reset" and value == "1":
            machine.off()
            machine.on()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
