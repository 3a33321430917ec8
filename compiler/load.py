"""``pfc load`` / ``unload`` / ``status``: put a compiled policy on a device, all or
nothing, replace it with no gap, take it off again, and read its counters.

This module is the part every target shares: privileges, the network namespace
(``--netns``), the device, the state record (:mod:`pfc.state`) and the lock; each
target's attach/replace/detach/inspect lives in its own module (``load_bpf``,
``load_tc``, ``load_nft``, ``load_ipt``), behind the :class:`Loader` interface.

All or nothing: the policy is compiled (by the caller, through
``pfc.commands.build_artifact``) and every check below is made before anything in the
kernel changes; the change itself is one atomic step per target (XDP
``XDP_FLAGS_REPLACE``, tc ``NLM_F_REPLACE`` on the same handle and priority, one nft
transaction, one ``iptables-restore``). A failure leaves the previous policy, its
counters and its state record exactly as they were. The state record is written only
after the kernel took the new policy.

Errors the user can act on are :class:`LoadError` (a one-line cause and a hint; the
CLI exits 2).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from pfc import ir, state
from pfc.backends.base import Artifact

TARGETS = ("xdp", "tc", "nft", "iptables")
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


def loader(target: str) -> Loader:
    if target == "xdp":
        from pfc import load_bpf
        return load_bpf.LOADERS[target]
    if target == "tc":
        from pfc import load_tc
        return load_tc.LOADER
    if target == "nft":
        from pfc import load_nft
        return load_nft.LOADER
    if target == "iptables":
        from pfc import load_ipt
        return load_ipt.LOADER
    raise LoadError(f"`pfc load` cannot attach target `{target}`",
                    hint="loadable targets: " + ", ".join(TARGETS) +
                    "; socket filters are attached by the application "
                    "(pfc.attach_socket, docs/load.md)")


# ------------------------------------------------------------------------ commands

@dataclass
class Result:
    record: state.Record | None
    messages: list[str]


def rule_rows(policy: ir.Policy, lowered: ir.Policy,
              text_of: Callable[[ir.Rule], str]) -> list[state.RuleRow]:
    """The source rules, each with the lowered rule that counts it if a pass merged it
    into an earlier one (merged runs keep their first rule's index)."""
    kept = sorted(r.index for r in lowered.rules)
    rows = []
    for r in policy.rules:
        earlier = [i for i in kept if i <= r.index]
        merged = None if r.index in kept or not earlier else earlier[-1]
        rows.append(state.RuleRow(r.index, r.line, text_of(r), r.action.name, merged))
    return rows


def load(artifact: Artifact, policy_path: str, source_text: str,
         rows: list[state.RuleRow], dev: str, netns: str | None = None,
         force: bool = False, mode: str | None = None, options: dict | None = None) -> Result:
    """Attach a compiled artifact to ``dev`` (in ``netns``), replacing what pfc loaded
    there before for the same target. LoadError when anything is in the way."""
    target = artifact.target
    check_privileges(target, netns)
    impl = loader(target)
    with in_netns(netns) as ns_name, state.locked():
        plan = Plan(artifact, dev, ifindex(dev, ns_name), ns_name, force, mode,
                    dict(options or {}))
        previous = state.read(ns_name, dev, target)
        info, messages = impl.attach(plan, previous)
        record = state.Record(
            target=target, hook=artifact.hook, dev=dev, netns=ns_name,
            policy=str(Path(policy_path).resolve()),
            sha256=hashlib.sha256(source_text.encode()).hexdigest(),
            loaded_at=datetime.now(UTC).isoformat(timespec="seconds"),
            rules=rows, default=artifact.policy.default.value, attach=info)
        state.write(record)
    return Result(record, messages)


def unload(target: str, dev: str, netns: str | None = None) -> Result:
    """Remove exactly what pfc loaded for (netns, dev, target); idempotent."""
    check_privileges(target, netns, "unload")
    impl = loader(target)
    ns_name = netns or current_netns()
    with state.locked():
        record = state.read(ns_name, dev, target)
        if record is None:
            return Result(None, [f"nothing loaded: no {target} policy of pfc on {dev} "
                                 f"in namespace {ns_name}"])
        if netns_path(ns_name) is None and ns_name != current_netns():
            _forget_pins(record)
            state.remove(record)
            return Result(record, [f"namespace {ns_name} is gone (with everything in it); "
                                   "pins and state record removed"])
        with in_netns(ns_name):
            messages = impl.detach(record)
        state.remove(record)
    return Result(record, messages)


@dataclass
class Status:
    record: state.Record
    inspection: Inspection
    file_changed: bool | None  # the policy file's text differs from what was loaded


def _forget_pins(record: state.Record) -> None:
    """Unpin what pfc pinned for a record whose namespace is gone (the pins would keep
    the program and map alive)."""
    if record.attach.get("pin_dir"):
        from pfc.load_bpf import remove_pins
        remove_pins(Path(record.attach["pin_dir"]))


def status(dev: str | None = None, netns: str | None = None) -> list[Status]:
    """Every record (of ``dev``/``netns``) with what the kernel says about it now."""
    check_privileges(None, netns, "status")
    out = []
    for record in state.records(netns, dev):
        out.append(Status(record, inspect(record), _file_changed(record)))
    return out


def inspect(record: state.Record) -> Inspection:
    if record.netns != current_netns() and netns_path(record.netns) is None:
        counters = None
        if record.attach.get("pin_dir"):
            from pfc.load_bpf import read_counters
            counters = read_counters(record)
        return Inspection("vanished", f"namespace {record.netns} no longer exists",
                          counters)
    with in_netns(record.netns):
        return loader(record.target).inspect(record)


def device_index(dev: str) -> int | None:
    """The device's index in the current namespace, None if there is no such device."""
    try:
        return socket.if_nametoindex(dev)
    except OSError:
        return None


def _file_changed(record: state.Record) -> bool | None:
    try:
        text = Path(record.policy).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return hashlib.sha256(text.encode()).hexdigest() != record.sha256
