"""qemu-system-x86_64 for the lab: the command line and a process that cannot outlive
its parent.

One vCPU, 1 GiB, no display, no network card, no firmware menu: the kernel and the
initramfs are passed directly. The host's ``/`` read-only over 9p (tag ``host``), the
exchange folder read-write over 9p (tag ``xchg``), the console (``ttyS0``, the kernel's
messages) to a file, and the agent's channel on the second serial port (``ttyS1``) at
one end of a socket pair. A plain UART, not a virtio serial port: a virtio port's
writes block until qemu has told the guest its host side is open, and with three
guests booting at once one guest never heard it (measured: its agent hung on its first
line).

Acceleration: KVM when ``/dev/kvm`` opens and a KVM guest has booted on this host
before (a probe, remembered per host kernel in the cache), TCG otherwise
(:func:`choose_accel`); ``$PFC_LAB_ACCEL`` (``kvm``, ``tcg``) forces one.

The process gets ``PR_SET_PDEATHSIG`` = SIGKILL: when the Python process that
started it dies, even by SIGKILL, the kernel kills qemu too (it is forked from a thread
that lives as long as qemu, :func:`start`). It runs in its own
session, so a Ctrl-C meant for pfc reaches pfc, which then stops it.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import threading
from pathlib import Path

from pfc.kernel.lab.errors import LabError

QEMU = "qemu-system-x86_64"
MEMORY_MIB = 1024
PR_SET_PDEATHSIG = 1


def command(vmlinuz: Path, initrd: Path, xchg: Path, console: Path, ctl_fd: int,
            accel: str, memory: int = MEMORY_MIB) -> list[str]:
    append = f"console=ttyS0 panic=-1 quiet printk.time=1 pfc.xchg={xchg}"
    return [
        QEMU, "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
        "-machine", f"pc,accel={accel}", "-cpu", "max" if accel == "tcg" else "host",
        "-smp", "1", "-m", str(memory),
        "-kernel", str(vmlinuz), "-initrd", str(initrd), "-append", append,
        "-serial", f"file:{console}", "-chardev", f"socket,id=ctl,fd={ctl_fd}",
        "-serial", "chardev:ctl", "-monitor", "none",
        "-virtfs", "local,path=/,mount_tag=host,security_model=none,readonly=on,"
        "multidevs=remap",
        "-virtfs", f"local,path={xchg},mount_tag=xchg,security_model=none",
    ]


def available() -> str | None:
    """Why the lab cannot boot anything here, or None when it can."""
    if shutil.which(QEMU) is None:
        return f"{QEMU} is not installed (scripts/setup installs qemu-system-x86)"
    if not os.path.exists("/bin/busybox"):
        return "busybox is not installed (scripts/setup installs busybox-static)"
    if shutil.which("depmod") is None or shutil.which("dpkg-deb") is None:
        return "depmod or dpkg-deb is missing (scripts/setup installs kmod)"
    return None


def _kvm_opens() -> bool:
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    os.close(fd)
    return True


def _probe_file(cache: Path) -> Path:
    return cache / f"kvm-{os.uname().release}.json"


def choose_accel(cache: Path) -> str:
    forced = os.environ.get("PFC_LAB_ACCEL")
    if forced in ("kvm", "tcg"):
        return forced
    if forced:
        raise LabError(f"PFC_LAB_ACCEL=`{forced}`: give kvm or tcg")
    if not _kvm_opens():
        return "tcg"
    probe = _probe_file(cache)
    if probe.exists():
        return "kvm" if json.loads(probe.read_text()).get("works") else "tcg"
    return "kvm?"  # untried: the caller probes it


def remember_kvm(cache: Path, works: bool, why: str = "") -> None:
    cache.mkdir(parents=True, exist_ok=True)
    _probe_file(cache).write_text(json.dumps({"works": works, "why": why}) + "\n")


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:  # the parent died before prctl
        os._exit(1)


def start(argv: list[str], ctl_fd: int, stderr: Path) -> subprocess.Popen:
    """qemu started as described in the module doc, from a thread of its own that lives
    as long as qemu: PR_SET_PDEATHSIG fires when the *thread* that forked the child
    ends, so a guest booted from a short-lived thread (a thread pool's) would be killed
    with it (measured: the matrix's guests died when its pool closed)."""
    started: dict = {}
    ready = threading.Event()

    def spawn() -> None:
        try:
            with stderr.open("wb") as err:
                started["process"] = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                    pass_fds=(ctl_fd,), start_new_session=True,
                    preexec_fn=_die_with_parent)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            started["error"] = exc
        finally:
            ready.set()
        if "process" in started:  # wait without reaping: Popen.wait() reaps it
            try:
                os.waitid(os.P_PID, started["process"].pid, os.WEXITED | os.WNOWAIT)
            except ChildProcessError:  # Popen.wait() reaped it first (a quick guest)
                pass

    threading.Thread(target=spawn, name="pfc-lab-qemu", daemon=True).start()
    ready.wait()
    if "error" in started:
        raise started["error"]
    return started["process"]


def stop(process: subprocess.Popen, grace: float) -> None:
    """Wait ``grace`` seconds for qemu to end by itself, then kill it."""
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
