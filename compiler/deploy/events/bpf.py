"""``pfc log --dev DEV`` for XDP and tc: the events of pfc's programs on a device.

The kernel is the source of truth, as for ``pfc status`` (docs/load.md): the program
is the one attached to the device (XDP: ``bpf_xdp_query``; tc: the filter at pfc's
handle and priority on clsact ingress) and its ring buffer is found through the
program's own map ids (``pfc_events``), so this works without pfc's records, from any
mount namespace, for a program loaded by ``pfc load`` or by hand (``ip link set ...
obj``). Records are decoded by :func:`pfc.backends.ebpf.events.decode` into
:class:`pfc.oracle.events.LogEvent` (``link=True``: the bytes start at the Ethernet
header), the one event shape every target and ``pfc.oracle.events.describe`` share.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from pfc.backends.ebpf import events as ebpf_events
from pfc.deploy.base import LoadError, device_index, in_netns
from pfc.deploy.tc import TC_HANDLE, TC_PRIORITY
from pfc.kernel import bpf_attach
from pfc.oracle.events import LogEvent

HOOKS = ("xdp", "tc")


@dataclass
class Source:
    """One program's ring buffer: the hook, the program id, an open map fd (ours)."""

    hook: str
    prog_id: int
    fd: int


def _attached(index: int, hook: str) -> int | None:
    if hook == "xdp":
        return bpf_attach.xdp_query(index).prog_id or None
    return bpf_attach.tc_query(index, TC_HANDLE, TC_PRIORITY)


def sources(dev: str, hooks: tuple[str, ...] = HOOKS, netns: str | None = None) -> list[Source]:
    """The ring buffers of the programs on ``dev`` (in ``netns``) at ``hooks`` that send
    events; LoadError when there is no device or none of them does."""
    found = []
    with in_netns(netns):
        index = device_index(dev)
        if index is None:
            raise LoadError(f"no device {dev}" + (f" in namespace {netns}" if netns else ""))
        for hook in hooks:
            prog_id = _attached(index, hook)
            fd = bpf_attach.prog_map_fd(prog_id, ebpf_events.EVENTS_MAP) if prog_id else None
            if fd is not None:
                found.append(Source(hook, prog_id, fd))
    if not found:
        raise LoadError(f"no program with log events on {dev} ({', '.join(hooks)})",
                        hint="load a policy with `log` rules or `--audit`: pfc load "
                             f"--target xdp|tc --dev {dev}")
    return found


def decoded(records: list[bytes]) -> list[LogEvent]:
    """The records that are pfc events, decoded (anything else is skipped)."""
    out = []
    for record in records:
        with contextlib.suppress(ebpf_events.BadEvent):  # not pfc's: skipped
            out.append(ebpf_events.decode(record))
    return out
