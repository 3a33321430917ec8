"""Maps by file descriptor: create one like another, fill it in one batch, swap it into
a map-in-map slot, read every entry back (libbpf's low-level ``bpf_map_*`` calls).

:mod:`pfc.kernel.bpf` works on the maps of an object it loaded; these functions work on
any map fd (found by id through a loaded program, :func:`pfc.kernel.bpf_attach.prog_map_fd`),
for ``pfc set`` on an attached eBPF program: a new inner map is created and filled,
then put into its ``ARRAY_OF_MAPS`` slot with one update (the kernel swaps the pointer:
a packet's lookup sees the old map or the new one; the syscall returns after an RCU
grace period, ``maybe_wait_bpf_programs``, so no program still reads the old map).
"""

from __future__ import annotations

import ctypes
import errno
import os
from dataclasses import dataclass

from pfc.kernel import bpf
from pfc.kernel.bpf import BatchOpts, BpfError, _Capture


class CreateOpts(ctypes.Structure):
    """``struct bpf_map_create_opts`` of libbpf 1.1 (bpf.h)."""

    _fields_ = [("sz", ctypes.c_size_t), ("btf_fd", ctypes.c_uint32),
                ("btf_key_type_id", ctypes.c_uint32), ("btf_value_type_id", ctypes.c_uint32),
                ("btf_vmlinux_value_type_id", ctypes.c_uint32),
                ("inner_map_fd", ctypes.c_uint32), ("map_flags", ctypes.c_uint32),
                ("map_extra", ctypes.c_uint64), ("numa_node", ctypes.c_uint32),
                ("map_ifindex", ctypes.c_uint32)]


_P = ctypes.POINTER
_SIGNATURES = {
    "bpf_map_create": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32,
                                      ctypes.c_uint32, ctypes.c_uint32, _P(CreateOpts)]),
    "bpf_map_update_elem": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                           ctypes.c_uint64]),
    "bpf_map_lookup_elem": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]),
    "bpf_map_get_next_key": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]),
    "bpf_map_update_batch": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                            _P(ctypes.c_uint32), _P(BatchOpts)]),
    "bpf_map_lookup_batch": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                            ctypes.c_void_p, ctypes.c_void_p,
                                            _P(ctypes.c_uint32), _P(BatchOpts)]),
    "bpf_obj_get_info_by_fd": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p,
                                              _P(ctypes.c_uint32)]),
    "bpf_map_get_fd_by_id": (ctypes.c_int, [ctypes.c_uint32]),
}
lib = bpf.typed(_SIGNATURES)


def _call(what: str, ret_of, *args) -> int:
    with _Capture() as cap:
        ret = ret_of(*args)
    if ret < 0:
        raise BpfError(-ret if ret != -1 else (ctypes.get_errno() or errno.EPERM), what,
                       cap.text)
    return ret


@dataclass(frozen=True)
class Shape:
    """What a map is: ``struct bpf_map_info`` type @0, id @4, key_size @8,
    value_size @12, max_entries @16, map_flags @20, name[16] @24."""

    type: int
    id: int
    key_size: int
    value_size: int
    max_entries: int
    flags: int
    name: str


def shape(fd: int) -> Shape:
    buf = ctypes.create_string_buffer(256)
    size = ctypes.c_uint32(len(buf))
    _call(f"info of map fd {fd}", lib().bpf_obj_get_info_by_fd, fd, buf, ctypes.byref(size))
    w = [int.from_bytes(buf.raw[i:i + 4], "little") for i in range(0, 24, 4)]
    return Shape(*w, buf.raw[24:40].split(b"\0")[0].decode(errors="replace"))


def create_like(model: Shape, max_entries: int) -> int:
    """A new, empty map of ``model``'s type, key and value size and flags with room for
    ``max_entries`` (close the fd: the map lives on only in a slot it was put in)."""
    opts = CreateOpts(sz=ctypes.sizeof(CreateOpts), map_flags=model.flags)
    return _call(f"creating a map like {model.name}", lib().bpf_map_create, model.type,
                 model.name.encode()[:15], model.key_size, model.value_size,
                 max(1, max_entries), ctypes.byref(opts))


def fill(fd: int, keys: bytes, values: bytes, key_size: int, value_size: int) -> None:
    """Every (key, value) of the concatenated ``keys``/``values`` in one
    ``BPF_MAP_UPDATE_BATCH`` (LPM_TRIE and ARRAY have it on Linux 6.18)."""
    count = len(keys) // key_size
    if count == 0:
        return
    if len(values) != count * value_size:
        raise ValueError(f"{count} keys and {len(values)} value bytes")
    kbuf = ctypes.create_string_buffer(keys, len(keys))
    vbuf = ctypes.create_string_buffer(values, len(values))
    n = ctypes.c_uint32(count)
    opts = BatchOpts(sz=ctypes.sizeof(BatchOpts))
    _call(f"batch update of {count} entries", lib().bpf_map_update_batch, fd, kbuf, vbuf,
          ctypes.byref(n), ctypes.byref(opts))


def put_slot(outer_fd: int, slot: int, inner_fd: int) -> None:
    """Put map ``inner_fd`` into slot ``slot`` of a map-in-map: one atomic swap."""
    k, v = ctypes.c_uint32(slot), ctypes.c_uint32(inner_fd)
    _call(f"swapping slot {slot} of a map of maps", lib().bpf_map_update_elem, outer_fd,
          ctypes.byref(k), ctypes.byref(v), 0)


def slot_fd(outer_fd: int, slot: int = 0) -> int | None:
    """A new fd (close it) for the map in a map-in-map's slot; None if it is empty."""
    k, v = ctypes.c_uint32(slot), ctypes.c_uint32(0)
    so = lib()
    if so.bpf_map_lookup_elem(outer_fd, ctypes.byref(k), ctypes.byref(v)) < 0:
        return None
    try:
        return _call(f"map id {v.value}", so.bpf_map_get_fd_by_id, v.value)
    except OSError:
        return None


def keys(fd: int, key_size: int) -> bytes:
    """Every key of a hash-like map (LPM_TRIE: ``bpf_map_get_next_key`` in turn),
    concatenated."""
    so, out = lib(), bytearray()
    cur = ctypes.create_string_buffer(key_size)
    nxt = ctypes.create_string_buffer(key_size)
    prev = None
    while so.bpf_map_get_next_key(fd, prev, nxt) == 0:
        out += nxt.raw
        ctypes.memmove(cur, nxt, key_size)
        prev = cur
    return bytes(out)


def array_values(fd: int, value_size: int, count: int) -> bytes:
    """Values 0 .. count-1 of an array map, concatenated (``BPF_MAP_LOOKUP_BATCH``)."""
    out = ctypes.create_string_buffer(value_size * count)
    keys_ = (ctypes.c_uint32 * count)()
    token, n = ctypes.c_uint32(0), ctypes.c_uint32(count)
    opts = BatchOpts(sz=ctypes.sizeof(BatchOpts))
    ret = lib().bpf_map_lookup_batch(fd, None, ctypes.byref(token), keys_, out,
                                     ctypes.byref(n), ctypes.byref(opts))
    if ret < 0 and -ret != errno.ENOENT and ctypes.get_errno() != errno.ENOENT:
        raise BpfError(-ret if ret != -1 else ctypes.get_errno(), "batch lookup")
    return out.raw[:value_size * n.value]


def close(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)
