"""The user-space rows of ``pfc bench`` (seed 000 §5.1): a process that receives every
frame of the device and applies the compiled policy itself.

The process is ``userspace.c`` beside this module, built once with the host's clang
and linked with libpcap (cached like eBPF objects, :func:`pfc.kernel.toolchain.cache_dir`):
an ``AF_PACKET`` socket with a ``PACKET_RX_RING`` (TPACKET_V3: 64 blocks of 1 MiB,
blocks retired after 1 ms), the policy's classic BPF (pfc's ``cbpf`` target, hook
``socket``: the frame from its Ethernet header, the outer VLAN tag removed, as a packet
socket's filter sees it) run in user space by libpcap's ``bpf_filter()``, and for
``userspace+ct`` a connection table (5-tuple, both directions) updated by every TCP/UDP
frame — tracking, not a verdict cache: each frame's verdict is still the program's.

The kernel's path is not changed: as for the ``socket`` row, frames also go up the
stack. A frame the ring had no room for (the process fell behind) is counted in the
ring's ``tp_drops`` (``lost``), never judged. The process's own CPU time (user +
system, /proc/PID/stat) is what the kernel rows do not have: :meth:`Runner.cpu_ns`; it
runs on the CPUs other than the one the injector is pinned to (whose system, irq and
softirq time bench counts), so no time is counted twice.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import shutil
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pfc.backends.base import Artifact
from pfc.frontend import ir
from pfc.kernel.observation import Observation
from pfc.kernel.toolchain import cache_dir

SOURCE = Path(__file__).with_name("userspace.c")
LIBPCAP = ("/usr/lib/x86_64-linux-gnu/libpcap.so.0.8", "/usr/lib/x86_64-linux-gnu/libpcap.so",
           "/usr/lib/aarch64-linux-gnu/libpcap.so.0.8", "/usr/lib/libpcap.so")
FLAGS = ("-O2", "-Wall", "-Wextra", "-Werror")
FRAMES, PASSED, DROPPED, RING_DROPS, FLOWS, TRACKED = range(6)
NCOUNTERS = 6
CLK_TCK = os.sysconf("SC_CLK_TCK")
Insn = tuple[int, int, int, int]


class UserspaceError(RuntimeError):
    """The runner cannot be built or started; the message says why."""


def libpcap() -> str:
    for path in LIBPCAP:
        if Path(path).exists():
            return path
    raise UserspaceError("libpcap not found (install libpcap0.8)")


def build() -> Path:
    """The runner's executable: built by clang on first use, then cached by a hash of
    the source, the flags and the library."""
    clang = shutil.which("clang")
    if clang is None:
        raise UserspaceError("the user-space rows need clang (the host's C compiler)")
    lib = libpcap()
    source = SOURCE.read_bytes()
    tag = hashlib.sha256(source + " ".join((*FLAGS, lib)).encode()).hexdigest()[:16]
    where = cache_dir() or Path(tempfile.mkdtemp(prefix="pfc-userspace-"))
    exe = where / f"pfc-userspace-{tag}"
    if exe.exists():
        return exe
    tmp = where / f".{exe.name}.{os.getpid()}"
    done = subprocess.run([clang, *FLAGS, "-o", str(tmp), str(SOURCE), lib],
                          capture_output=True, text=True)
    if done.returncode:
        raise UserspaceError(f"clang failed on {SOURCE.name}: {done.stderr.strip()[-2000:]}")
    tmp.replace(exe)
    return exe


def program_text(insns: list[Insn]) -> str:
    """The program as ``tcpdump -ddd`` prints it (what the runner reads)."""
    return "\n".join([str(len(insns)), *(" ".join(map(str, i)) for i in insns)]) + "\n"


@dataclass
class Counts:
    frames: int
    passed: int
    dropped: int
    ring_drops: int
    flows: int
    tracked: int


class Runner:
    """The runner as a process on ``ifname`` (of the calling thread's namespace);
    started and ready (its ring bound) when entered, stopped on exit."""

    def __init__(self, ifname: str, insns: list[Insn], ct: bool = False,
                 verdicts: bool = False) -> None:
        self.ifname, self.insns, self.ct, self.verdicts = ifname, insns, ct, verdicts
        self.output = ""  # stdout (with ``verdicts``: one line per frame), at exit

    def __enter__(self) -> Runner:
        exe = build()
        self._dir = tempfile.TemporaryDirectory(prefix="pfc-userspace-")
        prog, counts = Path(self._dir.name) / "prog", Path(self._dir.name) / "counters"
        prog.write_text(program_text(self.insns))
        counts.write_bytes(bytes(8 * NCOUNTERS))
        with open(counts, "r+b") as f:
            self._map = mmap.mmap(f.fileno(), 8 * NCOUNTERS)
        argv = [str(exe), self.ifname, str(prog), str(counts)]
        argv += ["--ct"] * self.ct + ["--verdicts"] * self.verdicts
        self._out = Path(self._dir.name) / "verdicts"
        with open(self._out, "w") as out:  # a file: a pipe nobody reads would block it
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, text=True)
        line = self.proc.stderr.readline()
        if line.strip() != "ready":
            self.proc.kill()
            self.proc.wait()
            raise UserspaceError(f"the user-space runner did not start: "
                                 f"{(line + self.proc.stderr.read()).strip()}")
        self._pid = self.proc.pid
        others = os.sched_getaffinity(0) - {min(os.sched_getaffinity(0))}
        if others:  # not the injector's CPU (traffic._pinned): no time counted twice
            os.sched_setaffinity(self._pid, others)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.communicate()
        self.output = self._out.read_text()
        self._map.close()
        self._dir.cleanup()

    def counts(self) -> Counts:
        return Counts(*struct.unpack_from(f"={NCOUNTERS}Q", self._map, 0))

    def passed(self) -> int:
        return self.counts().passed

    def lost(self) -> int:
        return self.counts().ring_drops

    def cpu_ns(self) -> int:
        """User + system time the process has used so far."""
        fields = Path(f"/proc/{self._pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // CLK_TCK

    def elsewhere(self) -> tuple[int, int]:
        """(CPU ns, frames lost in the ring) so far: what ``blast`` adds to its own."""
        return self.cpu_ns(), self.lost()

    def settle(self, arrived: int, seconds: float = 10.0) -> None:
        """Wait (at most ``seconds``) until the process has judged or lost ``arrived``
        frames: it may be behind the sender, with blocks of the ring still to read."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            c = self.counts()
            if c.frames + c.ring_drops >= arrived:
                return
            time.sleep(0.01)

    def has_seen(self, frame: bytes, seconds: float = 60.0) -> bool:
        """With ``verdicts``: wait (at most ``seconds``) until ``frame`` was judged."""
        want, deadline = frame.hex(), time.monotonic() + seconds
        while time.monotonic() < deadline:
            if want in self._out.read_text():
                return True
            time.sleep(0.01)
        return False

    def verdict_lines(self) -> Iterator[tuple[bool, bytes]]:
        """After exit, with ``verdicts``: (passed, frame) of each frame, in order."""
        for line in self.output.splitlines():
            mark, _, data = line.partition(" ")
            yield mark == "P", bytes.fromhex(data)



def run(artifact: Artifact, frames: list[bytes], ct: bool = False) -> Observation:
    """The runner's verdicts on ``frames`` (as a packet socket sees them: ``cbpf.view``)
    sent through a veth pair in a throw-away namespace, for the differential tests
    (:func:`pfc.verifier.equiv.compare`): a marker frame after the last one says when
    the runner has judged them all; frames the namespace sent itself are left out."""
    from pyroute2 import IPRoute

    from pfc.backends.cbpf import run as cbpf_run
    from pfc.kernel import netns

    marker = None
    with netns.lab() as lab, netns.one_cpu():
        with IPRoute() as ipr:
            for ifname in (lab.inj, lab.dut):
                ipr.link("set", index=ipr.link_lookup(ifname=ifname)[0],
                         mtu=cbpf_run.MAX_MTU)
        inj = netns.Injector(lab.inj)
        try:
            with Runner(lab.dut, artifact.meta["insns"], ct=ct, verdicts=True) as runner:
                for frame in frames:
                    inj.send(cbpf_run.presented(frame))
                marker = netns.marker_frame(lab.dut_mac, cbpf_run.MARK_MAC, 1)
                inj.send(marker)
                if not runner.has_seen(marker):
                    raise UserspaceError("the runner did not judge the marker frame")
        finally:
            inj.close()
    got = [line for line in runner.verdict_lines() if line[1] != marker]
    return Observation(*_paired(frames, got))


def _paired(sent: list[bytes], got: list[tuple[bool, bytes]]):
    """Verdicts and frames out of ``sent``, paired in order with what the runner judged
    (strays in between: the namespace's own IPv6 frames)."""
    verdicts, out, j = [], [], 0
    for frame in sent:
        while j < len(got) and got[j][1] != frame:
            j += 1
        if j == len(got):
            raise UserspaceError(f"the runner never saw frame {frame[:32].hex()}...")
        passed = got[j][0]
        verdicts.append(ir.Verdict.PASS if passed else ir.Verdict.DROP)
        out.append(frame if passed else None)
        j += 1
    return verdicts, out
