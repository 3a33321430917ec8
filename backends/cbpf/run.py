"""Run a classic BPF program in the kernel: ``SO_ATTACH_FILTER`` on a packet socket.

In a throw-away namespace (``pfc.kernel.netns.lab``) the program is attached to an AF_PACKET
SOCK_RAW socket bound to ``dut``; frames are injected on ``inj``. A second, unfiltered
socket on ``dut`` receives a marker frame after each batch: ``__netif_receive_skb_core``
hands a frame to every ``ptype_all`` socket before it takes the next frame, and the
sender is pinned to one CPU (veth queues each frame on the sending CPU's backlog), so
when the marker arrives every frame before it has been judged. The filtered socket
then holds, in order, exactly the frames the program passed (and markers, if the
program passes them); the filter's return value is the snap length, and ``pass``
(0x40000) keeps the whole frame, so each passed frame arrives byte for byte (``frames_out``).

What the kernel shows the filter (Linux 6.18, measured by ``tests/backends/test_cbpf.py``):

- the frame from its Ethernet header, the outer VLAN tag removed (``skb_vlan_untag``);
  the runner is given frames as the hook sees them (``cbpf.view``), so a frame that
  still has a tag at byte 12 (an inner one) is sent with one more, outer, tag for the
  kernel to remove;
- ``send()`` of fewer than 14 bytes fails with EINVAL, root or not (``packet_snd`` →
  ``dev_validate_header``: Ethernet's ``min_header_len`` is 14): no packet socket ever
  sees a runt, and such a frame cannot be presented;
- the veths get veth's largest MTU (65535) so that no generated frame is refused;
- ``SO_ATTACH_FILTER`` charges the program, converted to eBPF, to the socket's option
  memory and fails with ENOMEM beyond ``net.core.optmem_max`` (131072 by default: about
  1,100 loads, see ``cbpf_asm.kernel_size``); the sysctl is per network namespace, so
  the runner raises it in its own namespace when a program needs more.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pfc.backends.cbpf import asm as cbpf_asm
from pfc.frontend import ir
from pfc.kernel.observation import KernelUnavailable, Observation

if TYPE_CHECKING:  # pyroute2 and pfc.kernel.netns load on first use: `pfc compile` needs neither
    from pfc.kernel import netns

CHUNK = 200  # frames per marker
ETH_HLEN = 14
MARK_MAC = bytes.fromhex("027066630002")  # source MAC of batch markers
PACKET_OUTGOING = 4
MAX_MTU = 65535
OUTER_TAG = b"\x81\x00\x00\x01"  # 802.1Q, VLAN 1: removed by the kernel before the filter
TPIDS = (b"\x81\x00", b"\x88\xa8")


class KernelRejected(RuntimeError):
    """``SO_ATTACH_FILTER`` refused the program (a pfc bug if pfc produced it)."""


class Session:
    """One namespace, an injector and a marker socket, for many programs."""

    def __init__(self, lab: netns.Lab) -> None:
        from pfc.kernel import netns

        self.lab = lab
        self.inj = netns.Injector(lab.inj)
        self.mark = netns.packet_socket(lab.dut)
        self.seq = 0

    def close(self) -> None:
        self.inj.close()
        self.mark.close()

    def judge(self, program: list[tuple[int, int, int, int]],
              frames: list[bytes]) -> list[bytes | None]:
        """What the filtered socket received for each frame (None: dropped)."""
        from pfc.kernel import netns

        make_room(program)
        sock = netns.packet_socket(self.lab.dut)
        try:
            try:
                netns.attach_cbpf(sock, program)
            except OSError as exc:
                raise KernelRejected(_refusal(program, exc)) from exc
            netns.drain(sock)
            out: list[bytes | None] = []
            for start in range(0, len(frames), CHUNK):
                out += self._batch(sock, frames[start:start + CHUNK])
            return out
        finally:
            sock.close()

    def _batch(self, sock: socket.socket, frames: list[bytes]) -> list[bytes | None]:
        from pfc.kernel import netns

        self.seq += 1
        for frame in frames:
            self.inj.send(presented(frame))
        self.inj.send(netns.marker_frame(self.lab.dut_mac, MARK_MAC, self.seq))
        netns.recv_until_marker(self.mark, self.seq)
        return match(frames, received(sock))


OPTMEM = "/proc/sys/net/core/optmem_max"


def make_room(program: list[tuple[int, int, int, int]]) -> None:
    """Raise ``net.core.optmem_max`` of the lab's namespace (a per-namespace sysctl on
    Linux 6.18, measured) when the converted program would not fit in it. The margin
    (an eighth, and a page) because ``kernel_size`` can fall short on long programs:
    a 3,231-instruction tree (docs/cbpf.md) modelled at 127,528 bytes did not attach
    under 131,624.

    Older kernels (5.10 and 6.1, measured in the lab: docs/kernels.md) have the sysctl
    only in the initial namespace, one host-wide value: then nothing is changed (pfc does
    not touch a host-wide setting) and a program too large for it is refused with ENOMEM,
    which :func:`_refusal` explains."""
    need = 9 * cbpf_asm.kernel_size(program) + 8192
    try:
        with open(OPTMEM) as f:
            current = int(f.read())
    except FileNotFoundError:
        return
    if need > current:
        with open(OPTMEM, "w") as f:
            f.write(str(need))


def _refusal(program: list[tuple[int, int, int, int]], exc: OSError) -> str:
    size = cbpf_asm.kernel_size(program)
    if exc.errno == errno.ENOMEM:
        return (f"SO_ATTACH_FILTER: {exc} — the {len(program)}-instruction program becomes "
                f"about {size} eBPF instructions ({8 * size} bytes), charged against "
                "net.core.optmem_max" + ("" if os.path.exists(OPTMEM) else
                " (host-wide on this kernel: `sysctl -w net.core.optmem_max=N` in the "
                "initial namespace raises it)"))
    return f"SO_ATTACH_FILTER refused the program: {exc}"


def presented(frame: bytes) -> bytes:
    """The bytes to send so that the filter sees ``frame`` (module doc)."""
    if len(frame) < ETH_HLEN:
        raise ValueError(f"a {len(frame)}-byte frame cannot be sent: packet sockets never "
                         "see frames shorter than 14 bytes")
    if frame[12:14] in TPIDS:
        return frame[:12] + OUTER_TAG + frame[12:]
    return frame


def received(sock: socket.socket) -> list[bytes]:
    """Frames queued on the filtered socket: incoming ones, markers left out."""
    out = []
    while True:
        try:
            data, addr = sock.recvfrom(1 << 17, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return out
        if addr[2] == PACKET_OUTGOING or data[6:12] == MARK_MAC:
            continue
        out.append(data)


def match(sent: list[bytes], got: list[bytes]) -> list[bytes | None]:
    """Pair received frames with sent ones, in order. A program is a function of the
    frame, so equal frames get equal verdicts and greedy pairing is exact."""
    out: list[bytes | None] = []
    j = 0
    for frame in sent:
        if j < len(got) and got[j] == frame:
            out.append(got[j])
            j += 1
        else:
            out.append(None)
    if j != len(got):
        raise RuntimeError(f"the filtered socket received {len(got) - j} frame(s) that "
                           f"were not sent: {got[j][:32].hex()}...")
    return out


_current: Session | None = None


@contextlib.contextmanager
def session() -> Iterator[Session]:
    """A namespace kept for every ``run`` inside the block (kernel tests use one)."""
    global _current
    from pyroute2 import IPRoute

    from pfc.kernel import netns

    why = netns.missing_privileges()
    if why:
        raise KernelUnavailable(why)
    previous = _current
    with netns.lab() as lab, netns.one_cpu():
        with IPRoute() as ipr:
            for ifname in (lab.inj, lab.dut):
                ipr.link("set", index=ipr.link_lookup(ifname=ifname)[0], mtu=MAX_MTU)
        current = Session(lab)
        _current = current
        try:
            yield current
        finally:
            current.close()
            _current = previous


def run(program: list[tuple[int, int, int, int]], frames: list[bytes]) -> Observation:
    """Verdicts of ``program`` on ``frames`` (as the hook sees them), in the kernel."""
    if _current is None:
        with session():
            return run(program, frames)
    seen = _current.judge(program, frames)
    verdicts = [ir.Verdict.DROP if s is None else ir.Verdict.PASS for s in seen]
    return Observation(verdicts, seen, None)
