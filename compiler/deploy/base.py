"""What every target's loader shares: errors, privileges, network namespaces, the plan.

:mod:`pfc.deploy.load` (the dispatcher: ``load``, ``unload``, ``status``) and each
target's loader (:mod:`pfc.deploy.bpf`, :mod:`pfc.deploy.tc`, :mod:`pfc.deploy.nft`,
:mod:`pfc.deploy.iptables`) import this module; it imports none of them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from pfc.backends.base import Artifact
from pfc.deploy import state

CAP_NET_ADMIN, CAP_SYS_ADMIN, CAP_BPF = 12, 21, 39
CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"
DEFAULT_NETNS = "default"  # the name records use for the init namespace


class LoadError(Exception):
    """A load/unload the environment refuses: a one-line cause and a hint."""

    def __init__(self, cause: str, hint: str | None = None):
        super().__init__(cause)
        self.cause = cause
        self.hint = hint


# ------------------------------------------------------------------------ privileges

def effective_caps() -> set[int]:
    """The calling thread's effective capabilities (``CapEff`` of /proc status)."""
    with open("/proc/thread-self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                mask = int(line.split()[1], 16)
                return {bit for bit in range(64) if mask >> bit & 1}
    return set()


def check_privileges(target: str | None, netns: str | None, command: str = "load") -> None:
    """LoadError naming the capability that is missing, before anything is done
    (``target`` None: every target, as ``pfc status`` reads them all)."""
    caps = effective_caps()
    if CAP_NET_ADMIN not in caps:
        what = f"`pfc {command} --target {target}`" if target else f"`pfc {command}`"
        raise LoadError(f"missing privileges: {what} needs CAP_NET_ADMIN",
                        hint="run as root (sudo pfc ...)")
    if target in ("xdp", "tc", None) and not caps & {CAP_BPF, CAP_SYS_ADMIN}:
        raise LoadError("missing privileges: loading eBPF programs needs CAP_BPF "
                        "(or CAP_SYS_ADMIN)", hint="run as root (sudo pfc ...)")
    if netns and CAP_SYS_ADMIN not in caps:
        raise LoadError("missing privileges: entering a network namespace (--netns) "
                        "needs CAP_SYS_ADMIN", hint="run as root (sudo pfc ...)")


# ---------------------------------------------------------------------- namespaces

def _ns_inode(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def current_netns() -> str:
    """The name of the calling thread's network namespace: its ``/run/netns`` name,
    ``default`` for the init namespace, else ``netns-INODE``."""
    here = _ns_inode("/proc/thread-self/ns/net")
    if here == _ns_inode("/proc/1/ns/net"):
        return DEFAULT_NETNS
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(NETNS_DIR)):
            if _ns_inode(f"{NETNS_DIR}/{name}") == here:
                return name
    return f"netns-{here[1] if here else 0}"


def _setns(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise LoadError(f"cannot enter network namespace {path}: {os.strerror(err)}",
                            hint="entering a namespace needs CAP_SYS_ADMIN (root)")
    finally:
        os.close(fd)


def netns_path(name: str) -> str | None:
    """Where namespace ``name`` can be entered, or None if it does not exist."""
    if name == DEFAULT_NETNS:
        return "/proc/1/ns/net"
    p = f"{NETNS_DIR}/{name}"
    return p if "/" not in name and _ns_inode(p) is not None else None


@contextlib.contextmanager
def in_netns(name: str | None) -> Iterator[str]:
    """Run the block in namespace ``name`` (this thread; None: stay) and yield the
    name records use for it. Never creates a namespace."""
    if name is None or name == current_netns():
        yield current_netns() if name is None else name
        return
    target = netns_path(name)
    if target is None:
        raise LoadError(f"network namespace `{name}` does not exist",
                        hint="list namespaces with `ip netns list`")
    saved = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield name
        finally:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.setns(saved, CLONE_NEWNET)
    finally:
        os.close(saved)


def ifindex(dev: str, netns: str) -> int:
    """The device's index in the current namespace, or LoadError naming both."""
    try:
        return socket.if_nametoindex(dev)
    except OSError:
        where = "the current namespace" if netns == DEFAULT_NETNS else f"namespace `{netns}`"
        raise LoadError(f"device `{dev}` does not exist in {where}",
                        hint="list devices with `ip link`" +
                        (f" (`ip -n {netns} link`)" if netns != DEFAULT_NETNS else "")) \
            from None


# ------------------------------------------------------------------------ the plan

@dataclass
class Plan:
    """Everything a target's loader needs: decided, checked, nothing applied yet."""

    artifact: Artifact
    dev: str
    ifindex: int
    netns: str
    force: bool = False
    mode: str | None = None  # xdp: native | generic | None (kernel's choice)
    options: dict = field(default_factory=dict)  # the table, hook ... as compiled


@dataclass
class Inspection:
    """What ``status`` found in the kernel for one record."""

    health: str  # "ok" | "vanished" | "changed"
    detail: str  # one line for humans
    counters: dict[int, tuple[int, int]] | None  # rule index → (packets, bytes)


@dataclass(frozen=True)
class Loader:
    """One target's part: ``attach(plan, previous) -> (attach info, messages)`` (atomic;
    LoadError leaves everything as it was), ``detach(record) -> messages`` (only what
    pfc added), ``inspect(record) -> Inspection``. All run inside the record's
    namespace."""

    attach: Callable[[Plan, state.Record | None], tuple[dict, list[str]]]
    detach: Callable[[state.Record], list[str]]
    inspect: Callable[[state.Record], Inspection]


def device_index(dev: str) -> int | None:
    """The device's index in the current namespace, None if there is no such device."""
    try:
        return socket.if_nametoindex(dev)
    except OSError:
        return None
