"""``pfc log``: the events of every hook pfc may have attached to a device, in one
stream: the eBPF programs' ring buffers (:mod:`pfc.deploy.events.bpf`: XDP, tc) and
NFLOG group 20 (nft and iptables rules, ``pfc L<line> <verdict> <prefix>``), each
decoded into :class:`pfc.oracle.events.LogEvent` (docs/language.md "Log events").

One thread polls both in turn, 100 ms at a time, so an event is shown within about
0.2 s of its packet whichever hook sent it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator

from pfc.deploy.base import LoadError, device_index, in_netns
from pfc.deploy.events import bpf
from pfc.kernel.nflog import Listener
from pfc.kernel.ringbuf import RingBuffer
from pfc.oracle.events import LogEvent, parse_prefix

TARGETS = ("xdp", "tc", "nft", "iptables")
NETFILTER = ("nft", "iptables")
NFLOG_GROUP = 20
TICK = 0.1


def _listener(dev: str, netns: str | None, group: int) -> tuple[Listener, int]:
    with in_netns(netns):
        index = device_index(dev)
        if index is None:
            raise LoadError(f"no device {dev}" + (f" in namespace {netns}" if netns else ""))
        return Listener(group), index


def _nflog(listener: Listener, index: int, timeout: float) -> list[LogEvent]:
    try:
        messages = listener.receive(timeout)
    except TimeoutError:
        return []
    out = []
    for m in messages:
        head = parse_prefix(m.prefix)
        if head is not None and m.indev == index:
            line, verdict, audit, prefix = head
            out.append(LogEvent(line, verdict, audit, prefix, m.payload, False, m.indev))
    return out


def _sources(dev: str, hooks: tuple[str, ...], netns: str | None,
             required: bool) -> list[bpf.Source]:
    if not hooks:
        return []
    try:
        return bpf.sources(dev, hooks, netns)
    except LoadError as exc:
        if required or str(exc).startswith("no device"):
            raise
        return []


def events(dev: str, *, netns: str | None = None, targets: tuple[str, ...] = TARGETS,
           group: int = NFLOG_GROUP, timeout: float | None = None,
           ready: Callable[[], None] | None = None) -> Iterator[LogEvent]:
    """The log events of ``targets`` on ``dev`` (in ``netns``) as they happen, for
    ``timeout`` seconds (None: until the caller stops). LoadError: no device, or only
    eBPF hooks asked for and none of them has a program with events; OSError: NFLOG
    cannot be bound (EBUSY another listener has the group, EPERM not root). ``ready``
    is called once everything is listening (events before that are lost)."""
    netfilter = any(t in NETFILTER for t in targets)
    found = _sources(dev, tuple(t for t in targets if t in bpf.HOOKS), netns, not netfilter)
    listener = index = None
    with contextlib.ExitStack() as stack:
        stack.callback(lambda: [os.close(s.fd) for s in found])
        if netfilter:
            listener, index = _listener(dev, netns, group)
            stack.callback(listener.close)
        ring = stack.enter_context(RingBuffer(found[0].fd)) if found else None
        for more in found[1:]:
            ring.add(more.fd)
        if ready is not None:
            ready()
        deadline = None if timeout is None else time.monotonic() + timeout
        while deadline is None or time.monotonic() < deadline:
            left = TICK if deadline is None else max(0.0, min(TICK, deadline - time.monotonic()))
            if listener is not None:
                yield from _nflog(listener, index, left if ring is None else left / 2)
            if ring is not None:
                yield from bpf.decoded(ring.poll(int(left * 500 if listener else left * 1000)))
