"""Real traffic for ``pfc bench``: an AF_PACKET injector, CPU accounting and latency.

Everything here runs inside a :func:`pfc.kernel.netns.lab` namespace (the calling thread's),
with the lab configured by :func:`pfc.kernel.iplab.configure` (every unicast address local),
so a frame the hook under test passes is delivered to the local stack.

- Injector: one ``AF_PACKET`` socket on ``inj`` with ``PACKET_QDISC_BYPASS``; frames are
  sent in batches of :data:`BATCH` with one ``sendmmsg`` call each (ctypes, the GIL is
  released), from one pinned CPU. veth queues each frame on the sending CPU (with GRO
  on ``dut``, its NAPI ring), whose softirq runs the receive path (XDP, tc, netfilter,
  IP input) when the send returns. (``BPF_F_TEST_XDP_LIVE_FRAMES`` with ``XDP_TX`` on
  ``inj`` was measured too, docs/bench.md: faster, but frames lost in veth's ring are
  counted nowhere, so the drop counts could not be checked.)
- What passed the hook: the namespace's ``Ip InDelivers`` + ``Ip6InDelivers`` delta
  (every frame bench sends is one the local stack delivers when nothing filters it,
  checked before the run), or, for a socket filter, the packet socket's
  ``PACKET_STATISTICS``. Dropped by the policy = sent − lost in veth − passed.
- CPU time: the delta of ``system + irq + softirq`` of the CPU the injector is pinned
  to (where the whole receive path runs) in /proc/stat, divided by the frames sent. It
  includes the injector's own system time (the ``none`` baseline shows that floor).
- Latency: probe frames (UDP to :data:`PROBE_PORT`, which the policy passes), sent by
  a thread every :data:`PROBE_EVERY` s, carry their send time (CLOCK_MONOTONIC ns); a
  UDP socket in the namespace receives them and the receiver thread takes the
  difference when ``recv`` returns.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import statistics
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pfc.oracle import framebuild as fb

SOL_PACKET, PACKET_QDISC_BYPASS, PACKET_STATISTICS = 263, 20, 6
BATCH = 256
PROBE_PORT = 9999
PROBE_SRC, PROBE_DST = bytes([198, 51, 100, 1]), bytes([198, 51, 100, 2])
PROBE_MAGIC = b"pfcbench"
PROBE_EVERY = 0.002  # seconds between latency probes
MIN_PROBES = 3  # a run sends at least this many, however short (up to PROBE_WAIT s more)
PROBE_WAIT = 2.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _Msghdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32),
                ("iov", ctypes.POINTER(_Iovec)), ("iovlen", ctypes.c_size_t),
                ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]


class _Mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", _Msghdr), ("len", ctypes.c_uint)]


@dataclass
class Traffic:
    """One run's numbers; ``per_frame`` counts how often each frame was sent."""

    sent: int
    seconds: float
    passed: int
    lost: int  # dropped by veth (backlog full), not by the hook
    cpu_ns: int
    per_frame: list[int]
    latencies_ns: list[int] = field(default_factory=list)
    probes: int = 0
    process_cpu_ns: int | None = None  # of cpu_ns: a user-space filter's process


    @property
    def dropped(self) -> int:
        return max(0, self.sent - self.lost - self.passed)

    def to_json(self) -> dict:
        lat = sorted(self.latencies_ns)
        return {
            "sent": self.sent, "seconds": round(self.seconds, 4),
            "pps": round(self.sent / self.seconds) if self.seconds else 0,
            "passed": self.passed, "dropped": self.dropped, "lost_in_veth": self.lost,
            "dropped_pps": round(self.dropped / self.seconds) if self.seconds else 0,
            "cpu_ns_per_packet": round(self.cpu_ns / self.sent, 1) if self.sent else None,
            "process_cpu_ns_per_packet": round(self.process_cpu_ns / self.sent, 1)
            if self.sent and self.process_cpu_ns is not None else None,
            "latency_us": {"median": round(statistics.median(lat) / 1000, 2),
                           "p99": round(lat[min(len(lat) - 1, len(lat) * 99 // 100)] / 1000,
                                        2), "probes": len(lat), "sent": self.probes}
            if lat else None,
        }


# --------------------------------------------------------------------------- counters

def delivered() -> int:
    """Packets the current namespace's IPv4 and IPv6 input delivered to L4, less the
    TCP resets it sent itself: every address is local (AnyIP), so they come back
    through lo. (ICMP errors are switched off in the bench lab; MLD reports the device
    sends are not delivered back.)"""
    v4 = _snmp("/proc/thread-self/net/snmp")
    v6 = {}
    with contextlib.suppress(OSError), open("/proc/thread-self/net/snmp6") as f:
        v6 = {k: int(v) for k, v in (ln.split() for ln in f if ln.strip())}
    return v4["Ip:InDelivers"] - v4["Tcp:OutRsts"] + v6.get("Ip6InDelivers", 0)


def _snmp(path: str) -> dict[str, int]:
    with open(path) as f:
        lines = [ln.split() for ln in f]
    out = {}
    for head, values in zip(lines[::2], lines[1::2], strict=False):
        for name, value in zip(head[1:], values[1:], strict=True):
            out[head[0] + name] = int(value)
    return out


def cpu_ticks(cpu: int) -> int:
    """system + irq + softirq ticks of one CPU (/proc/stat)."""
    with open("/proc/stat") as f:
        for ln in f:
            parts = ln.split()
            if parts[0] == f"cpu{cpu}":
                return int(parts[3]) + int(parts[6]) + int(parts[7])
    raise OSError(f"/proc/stat has no cpu{cpu}")


def veth_drops(names: tuple[str, ...]) -> int:
    """tx_dropped + rx_dropped of the lab's veth ends (current namespace)."""
    from pyroute2 import IPRoute

    total = 0
    with IPRoute() as ipr:
        for link in ipr.get_links():
            if link.get_attr("IFLA_IFNAME") in names:
                stats = link.get_attr("IFLA_STATS64") or {}
                total += stats.get("tx_dropped", 0) + stats.get("rx_dropped", 0)
    return total


def packet_stats(sock: socket.socket) -> int:
    """Frames that passed the socket's filter since the last call (tp_packets)."""
    raw = sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
    return struct.unpack("II", raw)[0]


# --------------------------------------------------------------------------- injector

class Injector:
    """``sendmmsg`` of a cycle of frames on ``ifname``: :meth:`send` sends one batch."""

    def __init__(self, ifname: str, frames: list[bytes]):
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        self.sock.bind((ifname, 0))
        with contextlib.suppress(OSError):
            self.sock.setsockopt(SOL_PACKET, PACKET_QDISC_BYPASS, 1)
        self.frames = frames
        self.counts = [0] * len(frames)
        self.start = 0
        self._bufs = [ctypes.create_string_buffer(f, len(f)) for f in frames]
        n = BATCH + len(frames)
        self._iov = (_Iovec * n)()
        self._msgs = (_Mmsghdr * n)()
        for i in range(n):
            buf = self._bufs[i % len(frames)]
            self._iov[i] = _Iovec(ctypes.cast(buf, ctypes.c_void_p), len(frames[i % len(frames)]))
            self._msgs[i].hdr.iov = ctypes.pointer(self._iov[i])
            self._msgs[i].hdr.iovlen = 1
        self._libc = ctypes.CDLL(None, use_errno=True)

    def send(self, limit: int = BATCH) -> int:
        """One batch (at most ``limit`` frames); returns how many the kernel took."""
        base = ctypes.addressof(self._msgs) + self.start * ctypes.sizeof(_Mmsghdr)
        sent = self._libc.sendmmsg(self.sock.fileno(), ctypes.c_void_p(base),
                                   min(limit, BATCH), 0)
        if sent < 0:
            err = ctypes.get_errno()
            if err in (105, 11):  # ENOBUFS, EAGAIN: the device is busy
                return 0
            raise OSError(err, f"sendmmsg: {os.strerror(err)}")
        k = len(self.frames)
        for j in range(sent):
            self.counts[(self.start + j) % k] += 1
        self.start = (self.start + sent) % k
        return sent

    def close(self) -> None:
        self.sock.close()


SIOCETHTOOL, ETHTOOL_SGRO = 0x8946, 0x2C


def set_gro(ifname: str, on: bool = True) -> None:
    """``ethtool -K IFNAME gro on``: on veth this makes the device receive through
    NAPI (a ring and a poll), the path an attached XDP program switches on anyway."""
    import array
    import fcntl

    value = array.array("I", [ETHTOOL_SGRO, int(on)])
    ptr, _ = value.buffer_info()
    ifreq = struct.pack("16sP", ifname.encode(), ptr)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s.fileno(), SIOCETHTOOL, ifreq)


# ---------------------------------------------------------------------------- latency

def _await(condition: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(PROBE_EVERY)


def probe_frame(dst_mac: bytes, src_mac: bytes, sent_ns: int) -> bytes:
    payload = PROBE_MAGIC + struct.pack("!Q", sent_ns)
    udp = fb.udp(PROBE_SRC, PROBE_DST, 40000, PROBE_PORT, payload)
    return fb.ethernet(dst_mac, src_mac, fb.ETH_IP4, fb.ipv4(PROBE_SRC, PROBE_DST, 17, udp))


class ProbeReceiver:
    """A UDP socket on :data:`PROBE_PORT` (created in the calling thread's namespace)
    and a thread that records each probe's one-way latency."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("0.0.0.0", PROBE_PORT))
        self.sock.settimeout(0.05)
        self.latencies: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(2048)
            except (TimeoutError, OSError):
                continue
            now = time.monotonic_ns()
            if data[:8] == PROBE_MAGIC:
                self.latencies.append(now - struct.unpack("!Q", data[8:16])[0])

    def close(self, expect: bool = False) -> list[int]:
        """Stop; with ``expect``, first wait (up to :data:`PROBE_WAIT` s) for a probe."""
        time.sleep(0.05)
        if expect:
            _await(lambda: bool(self.latencies), PROBE_WAIT)
        self._stop.set()
        self._thread.join()
        self.sock.close()
        return self.latencies


# -------------------------------------------------------------------------------- run

class ProbeSender:
    """A thread sending a probe on ``inj`` every :data:`PROBE_EVERY` s (AF_PACKET)."""

    def __init__(self, inj: str, dst_mac: bytes, src_mac: bytes):
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        self.sock.bind((inj, 0))
        self.sent = 0
        self._macs = (dst_mac, src_mac)
        self._go, self._stop = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()  # before the caller pins itself: this thread is not pinned

    def start(self) -> None:
        self._go.set()

    def _loop(self) -> None:
        self._go.wait()
        while not self._stop.wait(PROBE_EVERY):
            try:
                self.sock.send(probe_frame(*self._macs, time.monotonic_ns()))
            except OSError:  # ENOBUFS: the veth is saturated; this probe is skipped
                continue
            self.sent += 1

    def close(self) -> int:
        self._stop.set()
        self._go.set()
        self._thread.join()
        self.sock.close()
        return self.sent


def blast(inj: str, dst_mac: bytes, frames: list[bytes], duration: float,
          packets: int | None, passed: Callable[[], int], probes: bool,
          progress: Callable[[float], None] | None = None,
          elsewhere: Callable[[], tuple[int, int]] | None = None,
          settle: Callable[[int], None] = lambda arrived: None) -> Traffic:
    """Send ``frames`` in a cycle for ``duration`` seconds (or ``packets`` frames, if
    fewer), probes every :data:`PROBE_EVERY` s from another thread; count what passed
    with ``passed()``. ``elsewhere()``: (CPU ns, frames lost) so far outside the pinned
    CPU and veth (a user-space filter's process and its ring), added to the run's;
    ``settle(arrived)`` waits until such a process has taken the frames that arrived."""
    sender = Injector(inj, frames)
    receiver = ProbeReceiver() if probes else None
    veths = (inj, "dut")
    prober = ProbeSender(inj, dst_mac, frames[0][6:12]) if probes else None
    try:
        with _pinned() as cpu:
            p0, lost0, cpu0, sent = passed(), veth_drops(veths), cpu_ticks(cpu), 0
            away0 = elsewhere() if elsewhere else (0, 0)
            if prober:
                prober.start()
            t0 = time.monotonic()
            end = t0 + duration
            while True:
                now = time.monotonic()
                if now >= end or (packets is not None and sent >= packets):
                    break
                sent += sender.send(BATCH if packets is None else packets - sent)
                if progress:
                    progress(min(1.0, (now - t0) / duration))
            seconds = time.monotonic() - t0
            if prober:  # a short run on a busy machine can end before the first probe
                _await(lambda: prober.sent >= MIN_PROBES, PROBE_WAIT)
            nprobes = prober.close() if prober else 0
            prober = None
            time.sleep(0.05)  # let the backlog drain
            settle(sent - (veth_drops(veths) - lost0))
            away = elsewhere() if elsewhere else (0, 0)
            cpu_ns = (cpu_ticks(cpu) - cpu0) * 1_000_000_000 // CLK_TCK + away[0] - away0[0]
            lost = veth_drops(veths) - lost0 + away[1] - away0[1]
            through = passed() - p0
        latencies = receiver.close(nprobes > 0) if receiver else []
        receiver = None
    finally:
        for thing in (prober, receiver):
            if thing:
                thing.close()
        sender.close()
    return Traffic(sent, seconds, max(0, through - nprobes), lost, cpu_ns,
                   sender.counts, latencies, nprobes,
                   away[0] - away0[0] if elsewhere else None)


@contextlib.contextmanager
def _pinned():
    """Send from one CPU (the receive path runs in that CPU's softirq: veth queues to
    the sending CPU's backlog or NAPI) and yield it; the probe receiver thread may use
    the others."""
    before = os.sched_getaffinity(0)
    cpu = min(before)
    os.sched_setaffinity(0, {cpu})
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, before)
