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
from pfc.deploy import journal, state

CAP_NET_ADMIN, CAP_SYS_MODULE, CAP_SYS_ADMIN, CAP_BPF = 12, 16, 21, 39
CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"
DEFAULT_NETNS = "default"  # the name records use for the init namespace


class LoadError(Exception):
    """A load/unload the environment refuses: a one-line cause and a hint."""

    def __init__(self, cause: str, hint: str | None = None):
        super().__init__(cause)
        self.cause = cause
        self.hint = hint


def unwritable(exc: state.Unwritable, outcome: str) -> LoadError:
    """The LoadError of a state directory that refused a write: the path, what pfc
    needs there and ``outcome`` (what the kernel holds now, for the user)."""
    return LoadError(f"{exc} ({exc.need()})" + (f"; {outcome}" if outcome else ""),
                     hint=exc.hint())


def check_kernel(artifact) -> None:
    """Refuse, before anything is touched, an eBPF artifact that needs a feature the
    running kernel lacks (``meta["kernel_needs"]``; probed, docs/kernels.md), and
    nfmod or u32 on a kernel that cannot load (unsigned) modules or lacks tc's kinds."""
    if artifact.target in ("nfmod", "u32"):
        from pfc.backends.nfmod import kmod

        why = (kmod.modules_unavailable if artifact.target == "nfmod"
               else kmod.u32_unavailable)()
        if why:
            raise LoadError(f"target `{artifact.target}`: {why}; nothing was changed",
                            hint="nft and iptables filter at the same hooks (pfc load "
                            "--target nft); docs/kernels.md says which kernels load it")
    needs = artifact.meta.get("kernel_needs")
    if not needs:
        return
    from pfc.backends.ebpf import kernels

    lacking = kernels.lacking_here(list(needs), artifact.hook)
    if lacking:
        running = kernels.running()
        raise LoadError("; ".join(kernels.refusal(f, running, artifact.hook)
                                  for f in lacking) + f" (running {os.uname().release})",
                        hint="`pfc compile --kernel host` shows what this kernel can take; "
                        "nft and iptables express the same policy (docs/kernels.md)")


def check_dev_name(dev: str) -> None:
    if not state.valid_part(dev) or len(dev) > 15:
        raise LoadError(f"invalid device name `{dev}`",
                        hint="a Linux interface name: at most 15 characters, no `/`, "
                             "spaces, `.` or `..`")


# ------------------------------------------------------------------------ privileges

def effective_caps() -> set[int]:
    """The calling thread's effective capabilities (``CapEff`` of /proc status)."""
    with open("/proc/thread-self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                mask = int(line.split()[1], 16)
                return {bit for bit in range(64) if mask >> bit & 1}
    return set()


def check_privileges(target: str | None, netns: str | None, command: str = "load", *,
                     bpf: bool | None = None) -> None:
    """LoadError naming the capability that is missing, before anything is done
    (``target`` None: every target). ``bpf``: whether eBPF objects are touched (default:
    for xdp, tc and None; ``pfc status`` says, from what it has loaded). CAP_SYS_ADMIN
    only to enter another namespace: the one pfc runs in needs no setns (a container
    with the host's network runs `pfc apply` with CAP_NET_ADMIN alone for nft)."""
    caps = effective_caps()
    if CAP_NET_ADMIN not in caps:
        what = f"`pfc {command} --target {target}`" if target else f"`pfc {command}`"
        raise LoadError(f"missing privileges: {what} needs CAP_NET_ADMIN",
                        hint="run as root (sudo pfc ...)")
    if bpf is None:
        bpf = target in ("xdp", "tc", None)
    if bpf and not caps & {CAP_BPF, CAP_SYS_ADMIN}:
        raise LoadError("missing privileges: loading eBPF programs needs CAP_BPF "
                        "(or CAP_SYS_ADMIN)", hint="run as root (sudo pfc ...)")
    if netns and CAP_SYS_ADMIN not in caps and netns != current_netns():
        raise LoadError("missing privileges: entering a network namespace (--netns) "
                        "needs CAP_SYS_ADMIN", hint="run as root (sudo pfc ...)")


# ---------------------------------------------------------------------- namespaces

def _ns_inode(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def init_netns_path() -> str:
    """Where the init network namespace can be entered: pid 1's, or where pid 1 is
    out of reach (a sandbox's init, EACCES even for root) kthreadd's: kernel threads
    live in the init namespaces."""
    if _ns_inode("/proc/1/ns/net") is not None:
        return "/proc/1/ns/net"
    with contextlib.suppress(OSError), open("/proc/2/comm") as f:
        if f.read().strip() == "kthreadd" and _ns_inode("/proc/2/ns/net") is not None:
            return "/proc/2/ns/net"
    return "/proc/1/ns/net"


def current_netns() -> str:
    """The name of the calling thread's network namespace: its ``/run/netns`` name
    (also inside ``ip netns exec NS``, which keeps /run), ``default`` for the init
    namespace, else ``netns-INODE`` (a container's, say)."""
    here = _ns_inode("/proc/thread-self/ns/net")
    if here is not None and here == _ns_inode(init_netns_path()):
        return DEFAULT_NETNS
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(NETNS_DIR)):
            if _ns_inode(f"{NETNS_DIR}/{name}") == here:
                return name
    return f"netns-{here[1] if here else 0}"


def current_netns_id() -> int | None:
    """The calling thread's network namespace inode (records keep it: a namespace
    deleted and created again under the same name is another one)."""
    here = _ns_inode("/proc/thread-self/ns/net")
    return here[1] if here else None


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
    """Where namespace ``name`` can be entered, or None if it does not exist: its
    ``/run/netns`` file, or for ``netns-INODE`` a process's ``/proc/PID/ns/net``."""
    if name == DEFAULT_NETNS:
        return init_netns_path()
    if name == current_netns():
        return "/proc/thread-self/ns/net"
    if "/" in name or name in (".", ".."):
        return None
    p = f"{NETNS_DIR}/{name}"
    if _ns_inode(p) is not None:
        return p
    if name.startswith("netns-") and name[6:].isdigit():
        return _proc_netns(int(name[6:]))
    return None


def _proc_netns(inode: int) -> str | None:
    """A ``/proc/PID/ns/net`` of namespace ``inode``, if some process is in it."""
    with contextlib.suppress(OSError):
        for pid in os.listdir("/proc"):
            p = f"/proc/{pid}/ns/net"
            if pid.isdigit() and (_ns_inode(p) or (0, 0))[1] == inode:
                return p
    return None


def netns_alive(name: str, ns_id: int | None) -> bool:
    """Whether the namespace a record names still exists: the name, and (when the
    record has it) the same inode."""
    p = netns_path(name)
    if p is None:
        return False
    return ns_id is None or (_ns_inode(p) or (0, 0))[1] == ns_id


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


@contextlib.contextmanager
def scratch_netns() -> Iterator[None]:
    """Run the block (this thread, and the processes it starts) in a new, empty network
    namespace that disappears afterwards: where ``--dry-run`` lets a tool build what it
    would build, without touching the host's."""
    saved = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        if libc.unshare(CLONE_NEWNET) != 0:
            raise LoadError("cannot create a scratch network namespace: "
                            f"{os.strerror(ctypes.get_errno())}", hint="run as root")
        try:
            yield
        finally:
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
                        hint="list devices with `ip link`" + _ip_n(netns)) from None


def _ip_n(netns: str) -> str:
    """How ``ip`` lists that namespace's devices: ``-n NAME`` knows only the names of
    /run/netns; another one (``netns-INODE``) is entered through a process in it."""
    if netns == DEFAULT_NETNS:
        return ""
    if os.path.exists(f"{NETNS_DIR}/{netns}"):
        return f" (`ip -n {netns} link`)"
    where = netns_path(netns)
    if where and where.startswith("/proc/") and where != "/proc/thread-self/ns/net":
        return f" (`nsenter --net={where} ip link`)"
    return " in that namespace (it has no name in /run/netns, so `ip -n` cannot name it)"


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


Counters = dict[int | str, tuple[int, int]]  # rule index, "default", "not_ready" → (p, b)


@dataclass
class Inspection:
    """What ``status`` found in the kernel for one record."""

    health: str  # "ok" | "vanished" | "changed"
    detail: str  # one line for humans
    counters: Counters | None  # None: unreadable


@dataclass
class Recovery:
    """What a loader found in the kernel for an unfinished load (an intent):
    ``verdict`` "new" (the new policy is in place: ``attach`` is its record's attach
    info), "old" (the previous policy, or nothing if there was none, is in place; what
    the load had created is removed: ``removed``), or "other" (neither: ``detail``
    says what is there). ``detail`` is what was checked, for the user."""

    verdict: str
    detail: str
    attach: dict | None = None
    removed: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Loader:
    """One target's part, each run inside the record's namespace under the state lock:

    - ``attach(plan, previous, txn) -> (attach info, messages)``: calls ``txn.begin``
      before its first change to the kernel; a LoadError after that is followed by
      ``recover`` (the dispatcher reports what the kernel holds then);
    - ``detach(record, force) -> messages``: only what pfc added (what the kernel
      shows of it: program name and tag, table handle, chains), or what sits at
      pfc's place with ``force``;
    - ``inspect(record) -> Inspection``;
    - ``recover(intent) -> Recovery``: finish or roll back an unfinished load;
    - ``retire(old, new attach) -> messages``: after a committed replace, remove what
      the previous policy had and the new one has not (``old`` as given to ``begin``);
    - ``discover(dev) -> attach info or None``: pfc's objects at their default place
      (program name, table with pfc's rule comments, chain ``PFC``), for an unload
      whose record is unreadable."""

    attach: Callable[[Plan, state.Record | None, journal.Txn], tuple[dict, list[str]]]
    detach: Callable[[state.Record, bool], list[str]]
    inspect: Callable[[state.Record], Inspection]
    recover: Callable[[journal.Intent], Recovery]
    retire: Callable[[dict | None, dict], list[str]]
    discover: Callable[[str], dict | None]


def no_retire(old: dict | None, new: dict) -> list[str]:
    """``retire`` of a target whose swap leaves nothing of the old policy behind."""
    return []


def device_index(dev: str) -> int | None:
    """The device's index in the current namespace, None if there is no such device."""
    try:
        return socket.if_nametoindex(dev)
    except OSError:
        return None
