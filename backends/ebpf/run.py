"""Run the eBPF targets in the kernel: ``BPF_PROG_TEST_RUN`` per frame, and the real
tc hook for the frames the test-run interface refuses.

What the test-run interface does (net/bpf/test_run.c, measured on Linux 6.18):

- XDP: data as given (14 to 3520 bytes linear; larger frames go to fragments, which a
  program without ``xdp.frags`` cannot read: refused here);
- tc (``BPF_PROG_TYPE_SCHED_CLS``): ``eth_type_trans`` sets ``skb->protocol``, then
  ``skb->data`` is pushed back to the Ethernet header, as at clsact ingress. It refuses
  (EINVAL) a frame whose EtherType is IPv4 and which has fewer than 14 + 20 bytes, or
  IPv6 and fewer than 14 + 40 bytes — frames the real tc hook does see. Those are run
  through the real hook: the program attached at clsact ingress of a veth in a
  throw-away namespace (:func:`run_attached_tc`);
- socket filter: ``eth_type_trans`` pulls the Ethernet header, so the program would see
  ``skb->data`` at L3 — but on an AF_PACKET SOCK_RAW socket ``packet_rcv`` pushes it
  back to the Ethernet header before ``run_filter``. The runner reproduces that by
  prefixing a 14-byte pseudo link header (EtherType 0x88b5, local experimental, which
  the IPv4/IPv6 length check does not concern): the test run pulls it, and the program
  sees the frame from its first byte with ``skb->len`` = the frame's length, exactly
  as on the socket.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import struct
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pfc.backends.base import Artifact
from pfc.backends.ebpf import counters as ebpf_counters
from pfc.backends.ebpf import maps as ebpf_maps
from pfc.frontend import ir
from pfc.kernel import bpf
from pfc.kernel.observation import KernelUnavailable, Observation
from pfc.oracle.events import LogEvent

XDP_DROP, XDP_PASS, XDP_TX = 1, 2, 3
TC_ACT_OK, TC_ACT_SHOT, TC_ACT_REDIRECT = 0, 2, 7
ETH_P_IP, ETH_P_IPV6 = 0x0800, 0x86DD
PSEUDO_LINK = bytes(12) + b"\x88\xb5"
# tc test runs refuse IPv4/IPv6 frames shorter than the fixed IP header (measured).
TC_TEST_RUN_MIN = {b"\x08\x00": 14 + 20, b"\x86\xdd": 14 + 40}


class TestRunRefused(ValueError):
    """A frame the hook can see but the test-run interface cannot show it."""

    __test__ = False


# ----------------------------------------------------------------------- loaded objects

_loaded: dict[int, bpf.Object] = {}


def loaded(artifact: Artifact) -> bpf.Object:
    """The artifact's object, loaded once (maps filled) and closed when the artifact is
    collected."""
    key = id(artifact)
    obj = _loaded.get(key)
    if obj is None or obj.closed:
        why = _privileges()
        if why:
            raise KernelUnavailable(why)
        obj = ebpf_maps.open_filled(artifact)
        _loaded[key] = obj
        weakref.finalize(artifact, _forget, key, obj)
    return obj


def _forget(key: int, obj: bpf.Object) -> None:
    obj.close()
    if _loaded.get(key) is obj:
        del _loaded[key]


def _privileges() -> str | None:
    if os.geteuid() != 0:
        return "eBPF test runs need root (CAP_BPF, CAP_NET_ADMIN)"
    return None


# -------------------------------------------------------------------------------- runs

def verdict_of(hook: str, retval: int, frame: bytes) -> ir.Verdict:
    """The verdict a hook's return value means; anything else is a pfc bug."""
    if hook == "xdp" and retval in (XDP_DROP, XDP_PASS):
        return ir.Verdict.DROP if retval == XDP_DROP else ir.Verdict.PASS
    if hook in ("tc", "tc-egress") and retval in (TC_ACT_OK, TC_ACT_SHOT):
        return ir.Verdict.DROP if retval == TC_ACT_SHOT else ir.Verdict.PASS
    if hook.startswith("cgroup-") and retval in (0, 1):
        return ir.Verdict.PASS if retval else ir.Verdict.DROP
    if hook == "socket" and retval in (0, len(frame)):
        return ir.Verdict.DROP if retval == 0 else ir.Verdict.PASS
    raise AssertionError(f"{hook} program returned {retval} on a {len(frame)}-byte frame")


def sent_back(hook: str, retval: int) -> bool:
    """Whether the program sent the (rewritten) frame back out of the device: a
    ``reject``'s reply (XDP_TX; tc: bpf_redirect to the device's egress)."""
    return (hook == "xdp" and retval == XDP_TX) or (hook == "tc" and retval == TC_ACT_REDIRECT)


def tc_refuses(frame: bytes) -> bool:
    return len(frame) < TC_TEST_RUN_MIN.get(frame[12:14], 14)


# Hooks whose test runs give the frame back as it left (a socket filter's and a cgroup
# program's have the 14 bytes the run pulled zeroed).
BYTES_OUT = frozenset(("xdp", "tc", "tc-egress"))
NF_HOOKNUM = {"prerouting": 0, "input": 1, "forward": 2, "output": 3, "postrouting": 4}
NFPROTO = {b"\x08\x00": (2, 20), b"\x86\xdd": (10, 40)}  # family, its fixed header


def nf_test_run(hook: str, prog: bpf.Program, frame: bytes) -> ir.Verdict:
    """A netfilter program's test run (``bpf_prog_test_run_nf``, the context a
    ``struct nf_hook_state``: hook number and family): the namespace's loopback is the
    hook's input and/or output device; every hook but output takes the Ethernet frame
    (``eth_type_trans``), output the IP packet. The EtherType gives the family."""
    hooknum = NF_HOOKNUM[hook.removeprefix("nf-").removeprefix("raw-")]
    pf, header = NFPROTO.get(frame[12:14], (0, 0))
    if not pf or not 14 + header <= len(frame) <= bpf.MAX_SKB_DATA:
        raise TestRunRefused(f"{hook}: the test-run interface takes IPv4 and IPv6 packets "
                             f"only, of at most {bpf.MAX_SKB_DATA} bytes")
    data = frame[14:] if hooknum == NF_HOOKNUM["output"] else frame
    retval = prog.test_run(data, ctx=bytes([hooknum, pf]) + bytes(46)).retval
    if retval not in (0, 1):  # NF_DROP, NF_ACCEPT: the verifier allows no other
        raise AssertionError(f"{hook} program returned {retval}")
    return ir.Verdict.PASS if retval else ir.Verdict.DROP


def test_run(hook: str, prog: bpf.Program, frame: bytes) -> tuple[ir.Verdict, bytes | None]:
    """One frame through ``BPF_PROG_TEST_RUN``: the verdict and, for XDP and tc, the
    bytes after the run (for a pass)."""
    if hook.startswith("nf-"):
        return nf_test_run(hook, prog, frame), None
    limit = bpf.MAX_XDP_DATA if hook == "xdp" else bpf.MAX_SKB_DATA
    data = PSEUDO_LINK + frame if hook == "socket" else frame
    if not bpf.MIN_DATA <= len(data) <= limit or (hook == "tc" and tc_refuses(frame)):
        raise TestRunRefused(f"{hook}: the test-run interface refuses a {len(frame)}-byte "
                             "frame (docs/ebpf.md)")
    result = prog.test_run(data)
    verdict = verdict_of(hook, result.retval, frame)
    out = result.data_out if hook in BYTES_OUT and verdict is ir.Verdict.PASS else None
    return verdict, out


@dataclass(frozen=True)
class Meta:
    """What a test run tells the program besides the frame (whole firewalls): the
    device (``ifindex``; 0: the test run's default, the namespace's loopback) and the
    packet's mark. The ifindex must be a device of the calling thread's namespace."""

    ifindex: int = 0
    mark: int = 0


@dataclass(frozen=True)
class Ran:
    """One frame's test run: the verdict, the frame that left (a pass), the reply sent
    back (a reject) and the packet's mark after the run."""

    verdict: ir.Verdict
    out: bytes | None
    reply: bytes | None
    mark: int


SKB_CTX = 192  # sizeof(struct __sk_buff): mark at 8, ingress_ifindex 36, ifindex 40


def context(hook: str, size: int, meta: Meta) -> bytes | None:
    """The test run's context for ``meta``: ``struct xdp_md`` (ingress_ifindex) or
    ``struct __sk_buff`` (mark, ifindex and ingress_ifindex); None: the default."""
    if meta == Meta():
        return None
    if hook == "xdp":
        return struct.pack("<6I", 0, size, 0, meta.ifindex, 0, 0)
    ctx = bytearray(SKB_CTX)
    struct.pack_into("<I", ctx, 8, meta.mark)
    struct.pack_into("<I", ctx, 36, meta.ifindex)
    struct.pack_into("<I", ctx, 40, meta.ifindex)
    return bytes(ctx)


def test_run_in(hook: str, prog: bpf.Program, frame: bytes, meta: Meta) -> Ran:
    """:func:`test_run` on a device, with a mark: what the program did, what it sent
    back (``reject``) and the mark it left (``mark ... to N``; XDP has none)."""
    limit = bpf.MAX_XDP_DATA if hook == "xdp" else bpf.MAX_SKB_DATA
    data = PSEUDO_LINK + frame if hook == "socket" else frame
    if not bpf.MIN_DATA <= len(data) <= limit or (hook.startswith("tc") and tc_refuses(frame)):
        raise TestRunRefused(f"{hook}: the test-run interface refuses a {len(frame)}-byte "
                             "frame (docs/ebpf.md)")
    result = prog.test_run(data, ctx=context(hook, len(data), meta))
    mark = meta.mark
    if hook != "xdp" and result.ctx_out:
        mark = struct.unpack_from("<I", result.ctx_out, 8)[0]
    if sent_back(hook, result.retval):
        return Ran(ir.Verdict.DROP, None, result.data_out, mark)
    verdict = verdict_of(hook, result.retval, frame)
    out = result.data_out if hook in BYTES_OUT and verdict is ir.Verdict.PASS else None
    return Ran(verdict, out, None, mark)


def all_counters(artifact: Artifact, obj: bpf.Object) -> dict[int | str, tuple[int, int]]:
    """(packets, bytes) of every rule (by index), the default (``"default"``) and, for
    an object with a ready map, ``"not_ready"`` (:func:`pfc.backends.ebpf.counters.read`)."""
    return ebpf_counters.read(artifact.meta, obj.maps[artifact.meta["counters"]])


def counters(artifact: Artifact, obj: bpf.Object) -> dict[int, tuple[int, int]]:
    """(packets, bytes) of the ``count`` rules only (``pfc.attach_socket``'s
    ``counters()``)."""
    found = all_counters(artifact, obj)
    return {i: found[i] for i in artifact.meta["count_rules"]}


def observed_counters(artifact: Artifact, obj: bpf.Object) -> dict[int | str, tuple[int, int]]:
    """What the differential tests compare with the interpreter: every rule and the
    default (``not_ready`` is 0 on an object ``open_filled`` loaded, and ``lost``, the
    events the ring buffer had no room for, has no counterpart in the interpreter)."""
    found = all_counters(artifact, obj)
    found.pop(ebpf_counters.NOT_READY, None)
    found.pop(ebpf_counters.LOST, None)
    return found


def run(artifact: Artifact, frames: list[bytes],
        metas: list[Meta] | None = None) -> Observation:
    """Every frame through the artifact's program; counters reset before, read after.

    A program with token buckets (``log ... rate``, ``limit``) judges the frames as one
    ordered sequence at one instant, from empty state: a freshly loaded object, its
    clock map (``pfc_clock``) holding one time for the whole run — what the
    interpreter gives for a sequence whose times are all 0 (``equiv.compare`` judges a
    stateful policy so); :func:`run_timed` runs sequences at given times. The frames
    tc test runs refuse then go through the real hook in order with the others.

    ``metas`` (one per frame: whole firewalls): the device and mark of each run; the
    observation then has the replies and marks, and every frame must be one the test
    runs take (:class:`TestRunRefused` otherwise)."""
    stateful = bool(artifact.meta.get("clock"))
    if stateful and _privileges():
        raise KernelUnavailable(_privileges())
    obj = ebpf_maps.open_filled(artifact) if stateful else loaded(artifact)
    try:
        if metas is not None:
            return _run_in(artifact, obj, frames, metas, stateful)
        return _run(artifact, obj, frames, stateful)
    finally:
        if stateful:
            obj.close()


def _run_in(artifact: Artifact, obj: bpf.Object, frames: list[bytes], metas: list[Meta],
            stateful: bool) -> Observation:
    from pfc.backends.ebpf.events import CLOCK_MAP

    prog = obj.programs[artifact.meta["program"]]
    obj.maps[artifact.meta["counters"]].reset()
    if stateful:
        obj.maps[CLOCK_MAP].update(0, CLOCK_BASE.to_bytes(8, "little"))
    runs = [test_run_in(artifact.hook, prog, f, m)
            for f, m in zip(frames, metas, strict=True)]
    return Observation([r.verdict for r in runs], [r.out for r in runs],
                       observed_counters(artifact, obj), [r.reply for r in runs],
                       [r.mark for r in runs])


def _run(artifact: Artifact, obj: bpf.Object, frames: list[bytes],
         stateful: bool) -> Observation:
    from pfc.backends.ebpf.events import CLOCK_MAP

    hook = artifact.hook
    prog = obj.programs[artifact.meta["program"]]
    obj.maps[artifact.meta["counters"]].reset()
    if stateful:
        obj.maps[CLOCK_MAP].update(0, CLOCK_BASE.to_bytes(8, "little"))
    verdicts: list[ir.Verdict | None] = [None] * len(frames)
    outs: list[bytes | None] = [None] * len(frames)
    refused = {i for i, f in enumerate(frames)
               if hook == "tc" and len(f) >= 14 and tc_refuses(f)}
    if refused and stateful:  # the order matters: one lab, each frame in turn
        with attached_tc(prog) as step:
            for i, frame in enumerate(frames):
                verdicts[i], outs[i] = step(frame) if i in refused else \
                    test_run(hook, prog, frame)
    else:
        for i, frame in enumerate(frames):
            if i not in refused:
                verdicts[i], outs[i] = test_run(hook, prog, frame)
        later = sorted(refused)
        for i, (verdict, out) in zip(later, run_attached_tc(prog, [frames[i] for i in later]),
                                     strict=True) if later else ():
            verdicts[i], outs[i] = verdict, out
    return Observation(verdicts, outs, observed_counters(artifact, obj))


# ------------------------------------------------------------------- timed sequences

CLOCK_BASE = 1 << 40  # pfc_clock holds BASE + the frame's time (0 would mean "real time")


@dataclass
class TimedRun:
    """A sequence through a fresh object: the :class:`Observation` and, per frame, the
    log events it sent (``pfc.oracle.events.LogEvent``, ``ifindex`` as the test run
    gives it: the namespace's loopback) and the lost-event count."""

    observation: Observation
    events: list[list[LogEvent]]
    lost: int


def run_timed(artifact: Artifact, frames: list[bytes], times: list[int]) -> TimedRun:
    """Every frame at its time (ns; the program's clock map, ``pfc_clock``, holds
    ``CLOCK_BASE + time`` during the frame's test run) through a freshly loaded object
    (empty buckets, counters at zero), reading the ring buffer after each frame. Frames
    the test-run interface refuses raise :class:`TestRunRefused`."""
    from pfc.backends.ebpf import events as ebpf_events
    from pfc.kernel.ringbuf import RingBuffer

    why = _privileges()
    if why:
        raise KernelUnavailable(why)
    hook = artifact.hook
    with ebpf_maps.open_filled(artifact) as obj:
        prog = obj.programs[artifact.meta["program"]]
        clock = obj.maps.get(ebpf_events.CLOCK_MAP)
        ring = obj.maps.get(ebpf_events.EVENTS_MAP)
        reader = RingBuffer(ring.fd) if ring is not None else None
        verdicts, outs, events = [], [], []
        try:
            for frame, t in zip(frames, times, strict=True):
                if clock is not None:
                    clock.update(0, (CLOCK_BASE + t).to_bytes(8, "little"))
                verdict, out = test_run(hook, prog, frame)
                verdicts.append(verdict)
                outs.append(out)
                got = reader.drain() if reader is not None else []
                events.append([ebpf_events.decode(r) for r in got])
        finally:
            if reader is not None:
                reader.close()
        found = all_counters(artifact, obj)
    lost = found.pop(ebpf_counters.LOST, (0, 0))[0]
    found.pop(ebpf_counters.NOT_READY, None)
    return TimedRun(Observation(verdicts, outs, found), events, lost)


# ------------------------------------------------------------------- the real tc hook

def run_attached_tc(prog: bpf.Program, frames: list[bytes]) -> list[tuple[ir.Verdict, bytes]]:
    """Frames through the program attached at clsact ingress of a veth (IPv4 and IPv6
    EtherTypes only: the marker frames that end each step never meet it).

    A frame the program passes reaches the packet sockets bound to its EtherType, which
    the kernel serves after tc ingress; a marker seen by an ETH_P_ALL socket (served
    before tc) after it proves the frame was processed."""
    with attached_tc(prog) as step:
        return [step(frame) for frame in frames]


@contextlib.contextmanager
def attached_tc(prog: bpf.Program) -> Iterator[Callable[[bytes], tuple[ir.Verdict, bytes]]]:
    """:func:`run_attached_tc`'s lab, up while the block runs: ``step(frame)`` sends one
    frame through the real hook (test runs may go on in between, in order)."""
    from pyroute2 import IPRoute

    from pfc.kernel import netns

    if netns.missing_privileges():
        raise KernelUnavailable(netns.missing_privileges())
    with netns.lab() as lab, IPRoute() as ipr, netns.one_cpu():
        ipr.tc("add", "clsact", lab.dut_index)
        for prio, proto in enumerate((ETH_P_IP, ETH_P_IPV6), start=1):
            ipr.tc("add-filter", "bpf", lab.dut_index, ":1", fd=prog.fd, name="pfc",
                   parent="ffff:fff2", classid=1, direct_action=True, prio=prio,
                   protocol=proto)
        taps = {p: netns.packet_socket(lab.dut, p) for p in (ETH_P_IP, ETH_P_IPV6)}
        every = netns.packet_socket(lab.dut)
        inject = netns.Injector(lab.inj)
        seq = itertools.count()
        try:
            yield lambda frame: _step(frame, next(seq), lab, inject, every, taps)
        finally:
            inject.close()
            every.close()
            for s in taps.values():
                s.close()


def _step(frame, seq, lab, inject, every, taps) -> tuple[ir.Verdict, bytes | None]:
    from pfc.kernel import netns

    for s in taps.values():
        netns.drain(s)
    inject.send(frame)
    inject.send(netns.marker_frame(lab.dut_mac, lab.inj_mac, seq))
    netns.recv_until_marker(every, seq)
    proto = int.from_bytes(frame[12:14], "big")
    got = netns.drain(taps[proto])  # bound to one protocol: incoming frames only
    if not got:
        return ir.Verdict.DROP, None
    return ir.Verdict.PASS, got[-1]
