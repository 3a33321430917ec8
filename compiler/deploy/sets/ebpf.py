"""``pfc set`` on an xdp/tc policy: the set's maps swapped in place, atomically.

Each large address list of an eBPF program is a map in the one slot of an
``ARRAY_OF_MAPS`` (:mod:`pfc.backends.ebpf.maps`). A change fills a new map of the same
kind (an LPM trie of the new size; the bitmap's array, whose size is fixed) with the new
contents, then puts it into the slot with one update: a packet's lookup finds the old
map or the new one, never a mix; the program, its counters and its other maps stay.
This works when the set is used once in the policy, as the whole value of ``src $NAME``
or ``dst $NAME`` (then each family's list is exactly the set: ``"set"`` in the maps
file), each changed family has a map (not 32 prefixes or fewer, which are compiled into
the code) and a bitmap has room for the new partial /24s; otherwise the caller reloads
the policy (atomic too, counters restart).
"""

from __future__ import annotations

import os

from pfc.deploy import journal, state
from pfc.deploy.base import LoadError
from pfc.deploy.sets.contents import Contents, prefixes, uses
from pfc.kernel import bpf_attach, bpf_maps


def plan(record: state.Record, policy: str, name: str, old: Contents, new: Contents,
         interrupted: bool = False) -> list[tuple[dict, list[tuple[int, int]]]] | None:
    """(set map record, its new prefixes) per changed family (``interrupted``: per
    family with a map); None: reload instead."""
    maps = [m for m in record.attach.get("set_maps") or [] if m.get("set") == name]
    out = []
    for v in (4, 6):
        mine = [m for m in maps if m["family"] == v]
        if old[v] == new[v] and not (interrupted and mine):
            continue
        if len(mine) != 1 or uses(policy, name) != 1:
            return None
        fresh = prefixes(v, new[v])
        if mine[0]["type"] == "ipv4_bitmap" and \
                len({a >> 8 for a, n in fresh if n > 24}) > mine[0]["leaf_capacity"]:
            return None
        out.append((mine[0], fresh))
    return out


def change(record: state.Record, changes: list[tuple[dict, list[tuple[int, int]]]]) \
        -> str:
    """Fill the new maps, then swap them in (one slot update each; two families are two
    updates: a kill between them leaves a mix, which the next pfc command finishes,
    :mod:`.pending`)."""
    pairs = fill(record, changes)
    try:
        journal.point("set-filled")
    except BaseException:
        close_pairs(pairs)
        raise
    swap(pairs)
    return "map swap (atomic; counters kept)"


def _inner_shape(m: dict) -> bpf_maps.Shape:
    """The inner map the object declares for set map ``m`` (maps file record)."""
    from pfc.backends.ebpf import maps as ebpf_maps

    if m["type"] == "lpm_trie":  # LPM_TRIE, BPF_F_NO_PREALLOC; any size fits the slot
        return bpf_maps.Shape(11, 0, m["key_size"], 1, 0, 1, m["inner"])
    return bpf_maps.Shape(2, 0, 4, ebpf_maps.LEAF_SIZE,  # ARRAY of the object's size
                          ebpf_maps.TOP_ENTRIES + m["leaf_capacity"], 0, m["inner"])


def fill(record: state.Record, changes: list[tuple[dict, list[tuple[int, int]]]]) \
        -> list[tuple[int, int]]:
    """A new inner map per (set map record, new prefixes), created and filled, with the
    fd of the slot it goes in: (slot map fd, new map fd) each, for :func:`swap`
    (which closes them). LoadError if pfc's program or a slot is gone."""
    from pfc.backends.ebpf import maps as ebpf_maps

    prog_id, out = record.attach.get("prog_id"), []
    try:
        for m, prefixes in changes:
            outer = bpf_attach.prog_map_fd(prog_id, m["name"]) if prog_id else None
            if outer is None:
                raise LoadError(f"pfc's program id {prog_id} or its map {m['name']} is gone",
                                hint="`pfc status` shows what changed; `pfc apply` or "
                                     "`pfc load` loads the policy again")
            model = _inner_shape(m)
            size = len(prefixes) if m["type"] == "lpm_trie" else model.max_entries
            try:
                out.append((outer, bpf_maps.create_like(model, size)))
            except BaseException:
                os.close(outer)
                raise
            keys, values = ebpf_maps.entries(m, prefixes)
            bpf_maps.fill(out[-1][1], keys, values, model.key_size, model.value_size)
    except BaseException:
        close_pairs(out)
        raise
    return out


def swap(pairs: list[tuple[int, int]]) -> None:
    """Each new map into its slot (one update each: a packet's lookup sees the old map
    or the new one), then every fd closed: the old maps are freed by the kernel."""
    try:
        for i, (outer, inner) in enumerate(pairs):
            if i:
                journal.point("set-family")
            bpf_maps.put_slot(outer, 0, inner)
    finally:
        close_pairs(pairs)


def close_pairs(pairs: list[tuple[int, int]]) -> None:
    for pair in pairs:
        for fd in pair:
            os.close(fd)


def held(record: state.Record) -> dict[str, list[tuple[int, int]] | None]:
    """Set map name → the prefixes its slot holds now (None: the program, the map or
    the slot is gone), read back from the kernel."""
    from pfc.backends.ebpf import maps as ebpf_maps

    prog_id, out = record.attach.get("prog_id"), {}
    for m in record.attach.get("set_maps") or []:
        outer = bpf_attach.prog_map_fd(prog_id, m["name"]) if prog_id else None
        inner = bpf_maps.slot_fd(outer) if outer is not None else None
        try:
            if inner is None:
                out[m["name"]] = None
            elif m["type"] == "lpm_trie":
                out[m["name"]] = ebpf_maps.held(m, bpf_maps.keys(inner, m["key_size"]))
            else:
                shape = bpf_maps.shape(inner)
                data = bpf_maps.array_values(inner, shape.value_size, shape.max_entries)
                out[m["name"]] = ebpf_maps.held(m, data)
        finally:
            bpf_maps.close(inner)
            bpf_maps.close(outer)
    return out
