"""libbpf attach points through ctypes: XDP, tc (clsact + cls_bpf), pins, object info.

An extension of :mod:`pfc.kernel.bpf` (same library handle, same :class:`~pfc.kernel.bpf.BpfError`)
with what ``pfc load`` needs to put a loaded program on a device and find it again
after the process has exited. Everything acts on the *calling thread's* network
namespace (libbpf opens a netlink socket per call) and on the host's bpffs.

- XDP: ``bpf_xdp_attach`` / ``bpf_xdp_detach`` (netlink), with ``XDP_FLAGS_REPLACE``
  and ``old_prog_fd`` so a replace is one atomic swap (``dev_xdp_install`` under RTNL,
  one RCU pointer store) that fails with EEXIST if another program was attached in the
  meantime; ``bpf_xdp_query`` for what is attached, in which mode.
- tc: ``bpf_tc_hook_create`` (the ``clsact`` qdisc; EEXIST when present),
  ``bpf_tc_attach`` (cls_bpf, direct action, protocol ETH_P_ALL, named ``PROG:[ID]``)
  with ``BPF_TC_F_REPLACE`` to swap the program of the filter at a fixed handle and
  priority in place (``cls_bpf_change``: ``list_replace_rcu``), ``bpf_tc_query``,
  ``bpf_tc_detach``. ``bpf_tc_hook_destroy`` on ingress alone flushes *every* ingress
  filter; on ingress|egress it deletes the qdisc (:func:`tc_hook_destroy`).
- pins: ``bpf_obj_pin`` / ``bpf_obj_get`` on a bpffs (which supports ``rename``);
  ``bpf_obj_get_info_by_fd`` for program and map ids (libbpf 1.1 has no
  ``bpf_prog_get_info_by_fd``, added in 1.2): the info structs are read at their
  ``linux/bpf.h`` offsets.
- per-CPU array reads by fd (``bpf_map_lookup_elem``), for counters of pinned maps.
- netfilter links (Linux 6.4): ``BPF_LINK_CREATE`` by the bpf syscall (:func:`nf_link`).
- cgroup skb programs: ``bpf_prog_attach`` / ``bpf_prog_detach2`` (:func:`cgroup_attach`).

Measured on Linux 6.18 (tests/deploy/test_load.py pins them): an XDP attach without REPLACE
over an attached program fails EBUSY ("XDP program already attached"); REPLACE with
the wrong old fd, or asking for the other mode, fails EEXIST ("Active program does not
match expected"); native mode on a device without ``ndo_bpf`` (bridge) fails
EOPNOTSUPP ("Underlying driver does not support XDP in native mode"); a tc attach
without REPLACE at an occupied handle/priority fails EEXIST ("Filter already exists").

Every function raises ``BpfError`` (an ``OSError`` with ``errno``) on failure; the
file descriptors it returns are the caller's to close (``os.close``).
Needs CAP_BPF + CAP_NET_ADMIN (or CAP_SYS_ADMIN), Linux ≥ 5.7 for XDP_FLAGS_REPLACE.
"""

from __future__ import annotations

import ctypes
import errno
import os
from dataclasses import dataclass

from pfc.kernel import bpf
from pfc.kernel.bpf import BpfError, _Capture

XDP_FLAGS_UPDATE_IF_NOEXIST = 1 << 0
XDP_FLAGS_SKB_MODE = 1 << 1
XDP_FLAGS_DRV_MODE = 1 << 2
XDP_FLAGS_REPLACE = 1 << 4
XDP_MODES = {"generic": XDP_FLAGS_SKB_MODE, "native": XDP_FLAGS_DRV_MODE}
# enum of bpf_xdp_query's attach_mode (uapi if_link.h XDP_ATTACHED_*)
ATTACHED = {0: None, 1: "native", 2: "generic", 3: "offload", 4: "multi"}

BPF_TC_INGRESS, BPF_TC_EGRESS = 1 << 0, 1 << 1
BPF_TC_F_REPLACE = 1 << 0
BPF_FS_MAGIC = 0xCAFE4A11


class XdpAttachOpts(ctypes.Structure):
    _fields_ = [("sz", ctypes.c_size_t), ("old_prog_fd", ctypes.c_int)]


class XdpQueryOpts(ctypes.Structure):
    _fields_ = [("sz", ctypes.c_size_t), ("prog_id", ctypes.c_uint32),
                ("drv_prog_id", ctypes.c_uint32), ("hw_prog_id", ctypes.c_uint32),
                ("skb_prog_id", ctypes.c_uint32), ("attach_mode", ctypes.c_uint8)]


class TcHook(ctypes.Structure):
    _fields_ = [("sz", ctypes.c_size_t), ("ifindex", ctypes.c_int),
                ("attach_point", ctypes.c_int), ("parent", ctypes.c_uint32)]


class TcOpts(ctypes.Structure):
    _fields_ = [("sz", ctypes.c_size_t), ("prog_fd", ctypes.c_int),
                ("flags", ctypes.c_uint32), ("prog_id", ctypes.c_uint32),
                ("handle", ctypes.c_uint32), ("priority", ctypes.c_uint32)]


_P = ctypes.POINTER
_SIGNATURES = {
    "bpf_xdp_attach": (ctypes.c_int, [ctypes.c_int, ctypes.c_int, ctypes.c_uint32,
                                      _P(XdpAttachOpts)]),
    "bpf_xdp_detach": (ctypes.c_int, [ctypes.c_int, ctypes.c_uint32, _P(XdpAttachOpts)]),
    "bpf_xdp_query": (ctypes.c_int, [ctypes.c_int, ctypes.c_int, _P(XdpQueryOpts)]),
    "bpf_tc_hook_create": (ctypes.c_int, [_P(TcHook)]),
    "bpf_tc_hook_destroy": (ctypes.c_int, [_P(TcHook)]),
    "bpf_tc_attach": (ctypes.c_int, [_P(TcHook), _P(TcOpts)]),
    "bpf_tc_detach": (ctypes.c_int, [_P(TcHook), _P(TcOpts)]),
    "bpf_tc_query": (ctypes.c_int, [_P(TcHook), _P(TcOpts)]),
    "bpf_obj_pin": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p]),
    "bpf_obj_get": (ctypes.c_int, [ctypes.c_char_p]),
    "bpf_obj_get_info_by_fd": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p,
                                              _P(ctypes.c_uint32)]),
    "bpf_prog_get_fd_by_id": (ctypes.c_int, [ctypes.c_uint32]),
    "bpf_map_get_fd_by_id": (ctypes.c_int, [ctypes.c_uint32]),
    "bpf_map_lookup_elem": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]),
    "bpf_prog_attach": (ctypes.c_int, [ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                       ctypes.c_uint]),
    "bpf_prog_detach2": (ctypes.c_int, [ctypes.c_int, ctypes.c_int, ctypes.c_int]),
}
lib = bpf.typed(_SIGNATURES)


def _call(what: str, fn, *args) -> int:
    """Call a libbpf function; -errno (or -1 with errno set) becomes a BpfError that
    carries libbpf's messages (netlink's extended ack text among them)."""
    with _Capture() as cap:
        ret = fn(*args)
    if ret < 0:
        err = -ret if ret != -1 else (ctypes.get_errno() or errno.EPERM)
        raise BpfError(err, what, cap.text)
    return ret


# --------------------------------------------------------------------------------- XDP

@dataclass(frozen=True)
class XdpState:
    """What ``bpf_xdp_query`` says is attached to a device (ids 0 = none)."""

    prog_id: int
    drv_prog_id: int
    skb_prog_id: int
    hw_prog_id: int
    mode: str | None  # native | generic | offload | multi | None


def xdp_query(ifindex: int) -> XdpState:
    opts = XdpQueryOpts(sz=ctypes.sizeof(XdpQueryOpts))
    _call(f"XDP query on ifindex {ifindex}", lib().bpf_xdp_query, ifindex, 0,
          ctypes.byref(opts))
    prog = opts.prog_id or opts.drv_prog_id or opts.skb_prog_id or opts.hw_prog_id
    return XdpState(prog, opts.drv_prog_id, opts.skb_prog_id, opts.hw_prog_id,
                    ATTACHED.get(opts.attach_mode, "multi"))


def xdp_attach(ifindex: int, prog_fd: int, mode: str | None,
               old_prog_fd: int | None = None) -> None:
    """Attach ``prog_fd``. ``old_prog_fd`` given: an atomic replace of exactly that
    program (``XDP_FLAGS_REPLACE``; EEXIST if another one is attached now). Without
    it: only if nothing is attached (``XDP_FLAGS_UPDATE_IF_NOEXIST``; EBUSY otherwise).
    ``mode`` None lets the kernel choose: native when the driver has ``ndo_bpf``."""
    flags = XDP_MODES.get(mode or "", 0)
    opts = XdpAttachOpts(sz=ctypes.sizeof(XdpAttachOpts))
    if old_prog_fd is None:
        flags |= XDP_FLAGS_UPDATE_IF_NOEXIST
    else:
        flags |= XDP_FLAGS_REPLACE
        opts.old_prog_fd = old_prog_fd
    _call(f"XDP attach on ifindex {ifindex}", lib().bpf_xdp_attach, ifindex, prog_fd,
          flags, ctypes.byref(opts))


def xdp_detach(ifindex: int, mode: str | None, expected_fd: int | None = None) -> None:
    """Detach the XDP program; with ``expected_fd`` only if it is still that one
    (EEXIST otherwise: the kernel compares under RTNL, no race)."""
    flags = XDP_MODES.get(mode or "", 0)
    opts = XdpAttachOpts(sz=ctypes.sizeof(XdpAttachOpts))
    if expected_fd is not None:
        flags |= XDP_FLAGS_REPLACE
        opts.old_prog_fd = expected_fd
    _call(f"XDP detach on ifindex {ifindex}", lib().bpf_xdp_detach, ifindex, flags,
          ctypes.byref(opts))


# ---------------------------------------------------------------------------------- tc

def _hook(ifindex: int, point: int = BPF_TC_INGRESS) -> TcHook:
    return TcHook(sz=ctypes.sizeof(TcHook), ifindex=ifindex, attach_point=point)


def _opts(handle: int, priority: int, prog_fd: int = 0, flags: int = 0) -> TcOpts:
    return TcOpts(sz=ctypes.sizeof(TcOpts), prog_fd=prog_fd, flags=flags,
                  handle=handle, priority=priority)


def tc_hook_create(ifindex: int) -> bool:
    """Create the ``clsact`` qdisc; True if this call created it, False if it was
    there already."""
    try:
        _call(f"clsact on ifindex {ifindex}", lib().bpf_tc_hook_create,
              ctypes.byref(_hook(ifindex)))
    except BpfError as exc:
        if exc.errno == errno.EEXIST:
            return False
        raise
    return True


def tc_hook_destroy(ifindex: int) -> None:
    """Delete the ``clsact`` qdisc (and every filter under it): ingress|egress."""
    _call(f"deleting clsact on ifindex {ifindex}", lib().bpf_tc_hook_destroy,
          ctypes.byref(_hook(ifindex, BPF_TC_INGRESS | BPF_TC_EGRESS)))


def _point(egress: bool) -> int:
    return BPF_TC_EGRESS if egress else BPF_TC_INGRESS


def tc_attach(ifindex: int, prog_fd: int, handle: int, priority: int,
              replace: bool, egress: bool = False) -> int:
    """Attach at ingress (``egress``: at egress, a tc-egress program's
    ``meta["tc_attach"]``), ``handle``/``priority`` fixed; ``replace`` swaps the program
    of an existing filter in place (``NLM_F_REPLACE``), without it EEXIST if one is
    there. Returns the program id the kernel reports."""
    opts = _opts(handle, priority, prog_fd, BPF_TC_F_REPLACE if replace else 0)
    _call(f"tc attach on ifindex {ifindex}", lib().bpf_tc_attach,
          ctypes.byref(_hook(ifindex, _point(egress))), ctypes.byref(opts))
    return opts.prog_id


def tc_query(ifindex: int, handle: int, priority: int, egress: bool = False) -> int | None:
    """The program id of the bpf filter at ``handle``/``priority`` on ingress (or
    egress), or None (no clsact qdisc, no such filter)."""
    opts = _opts(handle, priority)
    try:
        _call(f"tc query on ifindex {ifindex}", lib().bpf_tc_query,
              ctypes.byref(_hook(ifindex, _point(egress))), ctypes.byref(opts))
    except BpfError as exc:
        if exc.errno in (errno.ENOENT, errno.EINVAL, errno.ENODEV):
            return None
        raise
    return opts.prog_id


def tc_detach(ifindex: int, handle: int, priority: int, egress: bool = False) -> None:
    _call(f"tc detach on ifindex {ifindex}", lib().bpf_tc_detach,
          ctypes.byref(_hook(ifindex, _point(egress))), ctypes.byref(_opts(handle, priority)))


# -------------------------------------------------------------------------- pins, info

def obj_pin(fd: int, path: str) -> None:
    _call(f"pinning at {path}", lib().bpf_obj_pin, fd, os.fsencode(path))


def obj_get(path: str) -> int:
    """A new fd for the object pinned at ``path`` (close it)."""
    return _call(f"opening pin {path}", lib().bpf_obj_get, os.fsencode(path))


def prog_fd_by_id(prog_id: int) -> int:
    """A new fd for loaded program ``prog_id`` (close it); ENOENT if it is gone."""
    return _call(f"program id {prog_id}", lib().bpf_prog_get_fd_by_id, prog_id)


def map_fd_by_id(map_id: int) -> int:
    """A new fd for map ``map_id`` (close it); ENOENT if it is gone."""
    return _call(f"map id {map_id}", lib().bpf_map_get_fd_by_id, map_id)


@dataclass(frozen=True)
class ProgInfo:
    id: int
    type: int
    tag: str
    name: str
    map_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class MapInfo:
    id: int
    type: int
    key_size: int
    value_size: int
    max_entries: int
    name: str


def _info(fd: int, head: bytes = b"") -> bytes:
    """``bpf_obj_get_info_by_fd`` into a zeroed buffer (the kernel wants a zero tail)
    that starts with ``head`` (the request's pointers and lengths)."""
    buf = ctypes.create_string_buffer(head, 256)
    size = ctypes.c_uint32(len(buf))
    _call(f"info of fd {fd}", lib().bpf_obj_get_info_by_fd, fd, buf, ctypes.byref(size))
    return buf.raw


def _u32(raw: bytes, at: int) -> int:
    return int.from_bytes(raw[at:at + 4], "little")


def prog_info(fd: int) -> ProgInfo:
    """``struct bpf_prog_info``: type @0, id @4, tag[8] @8, nr_map_ids @52, map_ids
    (a pointer) @56, name[16] @64. A second call asks for the ids of the maps the
    program uses (``used_maps``: what its instructions reference), so its counters are
    readable from the program alone, without pins."""
    raw = _info(fd)
    count = _u32(raw, 52)
    ids = (ctypes.c_uint32 * max(count, 1))()
    if count:
        head = bytearray(64)
        head[52:56] = count.to_bytes(4, "little")
        head[56:64] = ctypes.addressof(ids).to_bytes(8, "little")
        count = min(count, _u32(_info(fd, bytes(head)), 52))
    return ProgInfo(_u32(raw, 4), _u32(raw, 0), raw[8:16].hex(),
                    raw[64:80].split(b"\0")[0].decode(errors="replace"),
                    tuple(ids[:count]))


def prog_info_by_id(prog_id: int) -> ProgInfo | None:
    """The info of loaded program ``prog_id``, or None if there is no such program."""
    try:
        fd = prog_fd_by_id(prog_id)
    except OSError:
        return None
    try:
        return prog_info(fd)
    finally:
        os.close(fd)


def prog_map_fd(prog_id: int, name: str) -> int | None:
    """A new fd (close it) for the map named ``name`` that program ``prog_id`` uses,
    found through the program's map ids; None if the program or the map is gone. Map
    names are cut to 15 bytes by the kernel (``BPF_OBJ_NAME_LEN``)."""
    info = prog_info_by_id(prog_id)
    for map_id in info.map_ids if info else ():
        try:
            fd = map_fd_by_id(map_id)
        except OSError:
            continue
        if map_info(fd).name == name[:15]:
            return fd
        os.close(fd)
    return None


def map_info(fd: int) -> MapInfo:
    """``struct bpf_map_info``: type, id, key_size, value_size, max_entries, flags,
    name[16] @24."""
    raw = _info(fd)
    words = [int.from_bytes(raw[i:i + 4], "little") for i in range(0, 20, 4)]
    return MapInfo(words[1], words[0], words[2], words[3], words[4],
                   raw[24:40].split(b"\0")[0].decode(errors="replace"))


def read_u64_pairs(fd: int, keys: list[int]) -> dict[int, tuple[int, int]]:
    """(packets, bytes) per key of a map of u32 keys and two-u64 values (per-CPU values
    summed, each rounded up to 8 bytes). ``pfc_counters`` of the eBPF targets is one."""
    info = map_info(fd)
    percpu = info.type in bpf.PERCPU_TYPES
    stride = (info.value_size + 7) // 8 * 8
    cpus = bpf.num_possible_cpus() if percpu else 1
    out = {}
    for key in keys:
        k = ctypes.c_uint32(key)
        buf = ctypes.create_string_buffer(stride * cpus)
        _call(f"reading counter {key} of map {info.name}", lib().bpf_map_lookup_elem,
              fd, ctypes.byref(k), buf)
        values = [buf.raw[i * stride:i * stride + 16] for i in range(cpus)]
        out[key] = (sum(int.from_bytes(v[0:8], "little") for v in values),
                    sum(int.from_bytes(v[8:16], "little") for v in values))
    return out


def is_bpffs(path: str) -> bool:
    """Whether ``path`` lies on a bpf filesystem (``statfs`` magic 0xcafe4a11)."""
    buf = ctypes.create_string_buffer(128)  # struct statfs; f_type is the first word
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.statfs(os.fsencode(path), buf) != 0:
        return False
    return int.from_bytes(buf.raw[0:8], "little") == BPF_FS_MAGIC


def mount_bpffs(path: str) -> None:
    """``mount -t bpf bpf PATH`` (CAP_SYS_ADMIN); OSError on failure."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"bpf", os.fsencode(path), b"bpf", 0, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"cannot mount a bpf filesystem on {path}: {os.strerror(err)}")


# -------------------------------------------------------------------- netfilter links

BPF_LINK_CREATE, BPF_NETFILTER = 28, 45
NFPROTO = {4: 2, 6: 10}  # NFPROTO_IPV4, NFPROTO_IPV6
SYS_BPF = {"x86_64": 321, "aarch64": 280}


def nf_link(prog_fd: int, version: int, hooknum: int, priority: int) -> int:
    """A bpf link of a netfilter program at hook ``hooknum`` (NF_INET_*) and
    ``priority`` for IP ``version`` in the calling thread's namespace (Linux 6.4):
    ``BPF_LINK_CREATE`` with the ``netfilter`` attributes, by the bpf syscall (libbpf
    1.1 has no ``bpf_program__attach_netfilter``). The link's fd: closing it (the last
    reference) detaches the program."""
    attr = ctypes.create_string_buffer(64)  # union bpf_attr, link_create; the rest 0
    fields = (prog_fd, 0, BPF_NETFILTER, 0, NFPROTO[version], hooknum)
    for at, value in enumerate(fields):
        attr[at * 4:at * 4 + 4] = value.to_bytes(4, "little")
    attr[24:28] = priority.to_bytes(4, "little", signed=True)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    fd = libc.syscall(ctypes.c_long(SYS_BPF[os.uname().machine]),
                      ctypes.c_long(BPF_LINK_CREATE), attr, ctypes.c_ulong(len(attr)))
    if fd < 0:
        err = ctypes.get_errno()
        raise BpfError(err, f"cannot link the netfilter program (hook {hooknum}, priority "
                            f"{priority}, IPv{version})")
    return fd


# ---------------------------------------------------------------------- cgroup programs

CGROUP_INET = {"ingress": 0, "egress": 1}  # BPF_CGROUP_INET_INGRESS, _EGRESS
BPF_F_ALLOW_MULTI = 1 << 1


def cgroup_attach(prog_fd: int, cgroup_fd: int, direction: str) -> None:
    """Attach a cgroup_skb program to the cgroup (v2) open as ``cgroup_fd`` for its
    ``ingress`` or ``egress``, beside the programs already there (``BPF_F_ALLOW_MULTI``:
    a packet passes only if every one passes it). It judges the sockets created in that
    cgroup (and its descendants)."""
    _call(f"attaching to the cgroup ({direction})", lib().bpf_prog_attach, prog_fd,
          cgroup_fd, CGROUP_INET[direction], BPF_F_ALLOW_MULTI)


def cgroup_detach(prog_fd: int, cgroup_fd: int, direction: str) -> None:
    _call(f"detaching from the cgroup ({direction})", lib().bpf_prog_detach2, prog_fd,
          cgroup_fd, CGROUP_INET[direction])
