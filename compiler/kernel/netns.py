"""Throw-away network namespaces with a veth pair, for kernel tests, verify and bench.

``with lab() as l:`` creates a uniquely named namespace holding a veth pair: frames are
injected on ``l.inj`` and arrive on ``l.dut`` (the device under test, where filters are
attached). Nothing is created in the caller's namespace; deleting the namespace (always,
on failure, Ctrl-C and SIGTERM too) removes the veths and everything attached to them.

Needs CAP_SYS_ADMIN (namespaces) and CAP_NET_RAW (packet sockets): root.
Packet sockets bound with ``ETH_P_ALL`` see a frame *before* tc and netfilter ingress
(``__netif_receive_skb_core`` delivers ``ptype_all`` first), so a capture on ``dut``
observes what a packet-socket filter (cBPF, eBPF socket) lets through, not what tc/nft do.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import select
import signal
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2 import netns as _netns

ETH_P_ALL = 0x0003
SOL_SOCKET = 1
SO_ATTACH_FILTER = 26
SO_ATTACH_BPF = 50
# Frames of this EtherType (IEEE "local experimental" 1) mark the end of a batch.
MARKER_ETHERTYPE = 0x88B5
PREFIX = "pfc"


class NamespaceError(RuntimeError):
    """The kernel refused a namespace or link operation (usually: not root)."""


@dataclass(frozen=True)
class Lab:
    name: str  # the namespace
    inj: str  # injector end of the veth pair
    dut: str  # the device under test
    inj_mac: bytes
    dut_mac: bytes
    dut_index: int


def missing_privileges() -> str | None:
    """Why kernel runs cannot happen here, or None when they can."""
    if os.geteuid() != 0:
        return "needs root (CAP_SYS_ADMIN for namespaces, CAP_NET_RAW, CAP_BPF)"
    return None


@contextlib.contextmanager
def inside(name: str) -> Iterator[None]:
    """Run the block in namespace ``name`` (this thread only), then come back."""
    _netns.pushns(name)
    try:
        yield
    finally:
        _netns.popns()


@contextlib.contextmanager
def lab(prefix: str = PREFIX) -> Iterator[Lab]:
    """A fresh namespace with a veth pair (``inj`` → ``dut``), removed afterwards."""
    cleanup_stale(prefix)
    name = f"{prefix}-{os.getpid()}-{secrets.token_hex(3)}"
    try:
        _netns.create(name)
    except OSError as exc:
        raise NamespaceError(f"cannot create network namespace: {exc}") from exc
    with _removed_on_exit(name):
        with inside(name):
            yield _make_pair(name)


def _make_pair(name: str) -> Lab:
    with IPRoute() as ipr:
        ipr.link("add", ifname="inj", kind="veth", peer="dut")
        for ifname in ("lo", "inj", "dut"):
            _quiet(ifname)
            ipr.link("set", index=ipr.link_lookup(ifname=ifname)[0], state="up")
        links = {ln.get_attr("IFLA_IFNAME"): ln for ln in ipr.get_links()}
    mac = {n: bytes.fromhex(links[n].get_attr("IFLA_ADDRESS").replace(":", ""))
           for n in ("inj", "dut")}
    return Lab(name, "inj", "dut", mac["inj"], mac["dut"], links["dut"]["index"])


def _quiet(ifname: str) -> None:
    """No IPv6 on the injector (it sends only what we inject); no DAD, RS or RA on the
    device under test, so no stray frame crosses the pair."""
    conf = f"/proc/sys/net/ipv6/conf/{ifname}"
    settings = {"disable_ipv6": "1"} if ifname == "inj" else {
        "accept_dad": "0", "router_solicitations": "0", "accept_ra": "0"}
    for key, value in settings.items():
        with contextlib.suppress(OSError), open(f"{conf}/{key}", "w") as f:
            f.write(value)


@contextlib.contextmanager
def _removed_on_exit(name: str) -> Iterator[None]:
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _raise_exit)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            _netns.remove(name)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)


def cleanup_stale(prefix: str = PREFIX) -> list[str]:
    """Remove namespaces ``PREFIX-PID-*`` left by processes that no longer exist."""
    removed = []
    for name in _netns.listnetns():
        parts = name.split("-")
        if len(parts) == 3 and parts[0] == prefix and parts[1].isdigit() \
                and not os.path.exists(f"/proc/{parts[1]}"):
            with contextlib.suppress(OSError):
                _netns.remove(name)
                removed.append(name)
    return removed


# ---------------------------------------------------------------------------- sockets

@contextlib.contextmanager
def one_cpu() -> Iterator[None]:
    """Run the block (this thread) on one CPU: veth queues each frame on the sending
    CPU's backlog, so frames sent from one CPU are processed in the order sent."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def packet_socket(ifname: str, protocol: int = ETH_P_ALL) -> socket.socket:
    """An AF_PACKET raw socket bound to ``ifname``, in the current namespace."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(protocol))
    sock.bind((ifname, protocol))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    return sock


class Injector:
    """Sends exact frame bytes on an interface (AF_PACKET, protocol 0: receives nothing)."""

    def __init__(self, ifname: str):
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        self.sock.bind((ifname, 0))

    def send(self, frame: bytes) -> None:
        self.sock.send(frame)

    def close(self) -> None:
        self.sock.close()


def marker_frame(dst: bytes, src: bytes, seq: int) -> bytes:
    """An end-of-batch marker: EtherType 0x88B5, a sequence number, padded to 60."""
    return (dst + src + struct.pack("!HQ", MARKER_ETHERTYPE, seq)).ljust(60, b"\0")


def is_marker(frame: bytes, seq: int) -> bool:
    return len(frame) >= 22 and frame[12:14] == struct.pack("!H", MARKER_ETHERTYPE) and \
        struct.unpack("!Q", frame[14:22])[0] == seq


def drain(sock: socket.socket) -> list[bytes]:
    """Everything queued on a socket now, without waiting."""
    out = []
    while True:
        try:
            out.append(sock.recv(65536, socket.MSG_DONTWAIT))
        except BlockingIOError:
            return out


def recv_until_marker(sock: socket.socket, seq: int, timeout: float = 30.0) -> list[bytes]:
    """Frames received before marker ``seq`` (which is not returned). ``timeout``
    bounds the wait for a marker that was lost (a silence that long between frames),
    not how long a busy machine may take: 2 s was seen to pass at load 15-20."""
    out = []
    while True:
        ready, _, _ = select.select([sock], [], [], timeout)
        if not ready:
            raise TimeoutError(f"marker {seq} did not arrive within {timeout}s")
        frame = sock.recv(65536)
        if is_marker(frame, seq):
            return out
        out.append(frame)


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def attach_cbpf(sock: socket.socket, program: list[tuple[int, int, int, int]]) -> None:
    """``SO_ATTACH_FILTER``: attach a classic BPF program ((code, jt, jf, k) tuples)."""
    insns = (_SockFilter * len(program))(*[_SockFilter(*i) for i in program])
    fprog = _SockFprog(len(program), insns)
    buf = bytes(ctypes.string_at(ctypes.addressof(fprog), ctypes.sizeof(fprog)))
    sock.setsockopt(SOL_SOCKET, SO_ATTACH_FILTER, buf)


# ------------------------------------------------------------------- additions (nft)

def rename_dut(lab: Lab, name: str) -> Lab:
    """Rename the device under test (inside the lab's namespace), e.g. to ``eth0`` so
    an artifact compiled with ``--dev eth0`` loads as it is; the link comes back up."""
    from dataclasses import replace
    with IPRoute() as ipr:
        index = lab.dut_index
        ipr.link("set", index=index, state="down")
        ipr.link("set", index=index, ifname=name)
        ipr.link("set", index=index, state="up")
    _quiet(name)
    return replace(lab, dut=name)
