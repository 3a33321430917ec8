"""Large address sets of the eBPF targets: maps filled at load time.

An address list with more than ``ebpf_plan.INLINE_PREFIXES_MAX`` prefixes of one family
is not compiled into code: the program looks the address up in maps it declares
(``ebpf_plan.SetMap``, ``templates/ebpf/tables.c.j2``), and the artifact carries their
contents in a data file beside the object, ``STEM.HOOK.maps.json``: one set per line,
its collapsed (disjoint) prefixes and how they are stored::

    {"format":"pfc-ebpf-maps/2","maps":[
    {"name":"pfc_r0_src6","inner":"pfc_r0_src6i","set":"bl","type":"lpm_trie",
     "family":6,"key_size":20,"value_size":1,"max_entries":2,"value":1,
     "prefixes":["2001:db8::/32","2001:db9::1/128"]},
    {"name":"pfc_r0_src4","inner":"pfc_r0_src4i","set":"bl","type":"ipv4_bitmap",
     "family":4,"top_entries":262144,"leaf_entries":1512,"leaf_capacity":3072,
     "prefixes":["1.2.3.4/32", ...]}
    ]}

``name`` is an ``ARRAY_OF_MAPS`` of one slot that the object initialises with the
map ``inner``, which the loader fills; ``set`` the policy's ``set``/``define`` whose
contents the map holds exactly (absent: a list of the rule's own). ``pfc set`` fills a
new inner map of the same kind and swaps it into the slot (:func:`new_inner`).

- ``lpm_trie``: the inner map is an LPM_TRIE; key ``u32 prefixlen`` (host byte order,
  ``struct bpf_lpm_trie_key``) then the address bytes in network order; value one
  byte, 1.
- ``ipv4_bitmap``: the inner map is one array of 32-byte entries: ``top_entries``
  ``struct pfc_top`` (padded) then room for ``leaf_capacity`` ``struct pfc_leaf``,
  built from the prefixes by :func:`bitmap_tables`.
- ``ifaces`` (``iif``/``oif``, :mod:`pfc.backends.ebpf.ifaces`): ``pfc_ifaces``, a
  hash from ifindex to the bits of the interface lists that name the device, filled
  from the devices of the namespace the object is loaded in.

Whoever loads the object fills every map before the program sees a packet:
:func:`open_filled` is the one place that does it (test runs, ``pfc load``,
``pfc.attach_socket``, benchmarks); :func:`bpftool_batch` (and ``python -m
pfc.backends.ebpf.maps MAPS.json PIN_DIR``) prints the same fill as ``bpftool batch``
input for objects loaded by hand (docs/ebpf.md). Both write the ready map
(``pfc_ready``, :mod:`pfc.backends.ebpf.counters`) last: until then the program drops
every packet, so an object attached with its maps empty fails closed.
"""

from __future__ import annotations

import array
import json
import socket
import struct
from collections.abc import Iterable

from pfc.backends.base import Artifact
from pfc.backends.ebpf import ifaces
from pfc.backends.ebpf.counters import READY_MAP
from pfc.backends.ebpf.plan import SetMap
from pfc.kernel import bpf

FORMAT = "pfc-ebpf-maps/2"
VALUE = 1
READY_VALUE = (1).to_bytes(4, "little")  # pfc_ready[0]: u32 1
FAMILY = {4: socket.AF_INET, 6: socket.AF_INET6}
ADDR_BYTES = {4: 4, 6: 16}
TOP_ENTRIES = 1 << 18  # bitmap sets: one top entry per 64 /24s
TOP = struct.Struct("<QQI12x")  # struct pfc_top: full, part, base, pad (an entry)
LEAF_SIZE = 32  # struct pfc_leaf: 256 bits; every entry of a bitmap set's array


# ------------------------------------------------------------------ artifact side

def prefix_text(version: int, address: int, length: int) -> str:
    raw = address.to_bytes(ADDR_BYTES[version], "big")
    return f"{socket.inet_ntop(FAMILY[version], raw)}/{length}"


def map_record(s: SetMap) -> dict:
    prefixes = [prefix_text(s.version, a, n) for a, n in s.prefixes]
    head = {"name": s.name, "inner": s.inner} | ({"set": s.source} if s.source else {})
    if s.kind == "bitmap":
        return head | {"type": "ipv4_bitmap", "family": 4, "top_entries": TOP_ENTRIES,
                       "leaf_entries": s.partial, "leaf_capacity": s.capacity,
                       "prefixes": prefixes}
    return head | {"type": "lpm_trie", "family": s.version, "key_size": s.key_size,
                   "value_size": 1, "max_entries": len(s.prefixes), "value": VALUE,
                   "prefixes": prefixes}


def maps_file(sets: Iterable[SetMap]) -> bytes:
    """The maps file: one JSON object, one set per line of ``maps``."""
    return records_file(map_record(s) for s in sets)


def records_file(records: Iterable[dict]) -> bytes:
    lines = [json.dumps(r, separators=(",", ":")) for r in records]
    return (f'{{"format":"{FORMAT}","maps":[\n' + ",\n".join(lines) + "\n]}\n").encode()


def data_records(maps, blob_name: str) -> tuple[list[dict], bytes]:
    """Records of type ``data`` for maps given as bytes (the classifier's
    ``tables.MapData``: name, kind, key_size, value_size, max_entries, values, keys)
    and the binary file that holds them: ``values`` (and ``keys``, for an LPM trie;
    for an array the keys are 0, 1, ...) are ``[offset, length]`` into ``file``."""
    records, blob = [], bytearray()
    for m in maps:
        record = {"name": m.name, "type": "data", "map_type": m.kind,
                  "key_size": m.key_size, "value_size": m.value_size,
                  "max_entries": m.max_entries, "count": m.count, "file": blob_name}
        for part in ("keys", "values"):
            data = getattr(m, part)
            record[part] = None if data is None else [len(blob), len(data)]
            blob += data or b""
        records.append(record)
    return records, bytes(blob)


def data_meta(maps) -> dict:
    """``artifact.meta["maps"]`` of maps given as bytes (:func:`data_records`)."""
    return {m.name: {"type": m.kind, "key_size": m.key_size, "value_size": m.value_size,
                     "entries": m.max_entries} for m in maps}


def data_bytes(maps) -> int:
    """The bytes of map values of maps given as bytes (their memory, roughly)."""
    return sum(m.max_entries * m.value_size for m in maps)


def maps_meta(sets: Iterable[SetMap]) -> dict:
    """``artifact.meta["maps"]``: map name → type, family, key size, value size,
    entries (``max_entries``), for every map the sets declare (the array of maps and
    the inner map it starts with)."""
    out = {}
    for s in sets:
        out[s.name] = {"type": "array_of_maps", "family": s.version, "key_size": 4,
                       "value_size": 4, "entries": 1}
        if s.kind == "bitmap":
            out[s.inner] = {"type": "array", "family": 4, "key_size": 4,
                            "value_size": LEAF_SIZE, "entries": TOP_ENTRIES + s.capacity}
        else:
            out[s.inner] = {"type": "lpm_trie", "family": s.version,
                            "key_size": s.key_size, "value_size": 1,
                            "entries": len(s.prefixes)}
    return out


def maps_of(artifact: Artifact) -> list[dict]:
    """The set records of the artifact's maps file; [] when it has none."""
    name = artifact.meta.get("maps_file")
    if not name:
        return []
    return parse(artifact.files[name], name)


def parse(data: bytes, name: str = "maps file") -> list[dict]:
    """The set records of a maps file's bytes."""
    doc = json.loads(data)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{name}: not a {FORMAT} file")
    return doc["maps"]


# --------------------------------------------------------------------- loader side

def int_prefixes(record: dict) -> list[tuple[int, int]]:
    """(address as an integer, prefix length) of every entry."""
    version = record["family"]
    family, full = FAMILY[version], 8 * ADDR_BYTES[version]
    out = []
    for text in record["prefixes"]:
        addr, _, length = text.partition("/")
        out.append((int.from_bytes(socket.inet_pton(family, addr), "big"),
                    int(length or full)))
    return out


def lpm_keys(record: dict) -> bytes:
    """Every entry's LPM_TRIE key, concatenated (``key_size`` bytes each)."""
    return lpm_entries(record["family"], int_prefixes(record))[0]


def lpm_entries(version: int, prefixes: list[tuple[int, int]]) -> tuple[bytes, bytes]:
    """(keys, values) of an LPM_TRIE set: ``u32 prefixlen`` (host order) then the
    address in network order; value 1."""
    size = ADDR_BYTES[version]
    key = struct.Struct(f"<I{size}s")
    out = b"".join(key.pack(n, a.to_bytes(size, "big")) for a, n in prefixes)
    return out, bytes([VALUE]) * len(prefixes)


def bitmap_tables(prefixes: list[tuple[int, int]]) -> tuple[dict[int, bytes], bytes]:
    """An IPv4 bitmap set's non-zero top entries (index → struct pfc_top) and its
    leaves (struct pfc_leaf each, in the order of the /24s they describe; they follow
    the ``TOP_ENTRIES`` in the set's array). One pass over the sorted prefixes."""
    full: dict[int, int] = {}
    part: dict[int, int] = {}
    base: dict[int, int] = {}
    leaves: list[bytes] = []
    cur, bits = -1, 0

    def leaf() -> None:
        w = cur >> 6
        base.setdefault(w, len(leaves))
        part[w] = part.get(w, 0) | 1 << (cur & 63)
        leaves.append(bits.to_bytes(LEAF_SIZE, "little"))

    for addr, length in sorted(prefixes):
        if length <= 24:
            _set_full(full, addr >> 8, 1 << (24 - length))
            continue
        if addr >> 8 != cur:
            if cur >= 0:
                leaf()
            cur, bits = addr >> 8, 0
        bits |= ((1 << (1 << (32 - length))) - 1) << (addr & 255)
    if cur >= 0:
        leaf()
    pack = TOP.pack
    top = {w: pack(full.get(w, 0), part.get(w, 0), base.get(w, 0))
           for w in sorted(full.keys() | part.keys())}
    return top, b"".join(leaves)


def _set_full(full: dict[int, int], first: int, count: int) -> None:
    """Mark the /24s first .. first+count-1 as wholly in the set (count is a power of
    two and first a multiple of it: a prefix)."""
    if count < 64:
        w = first >> 6
        full[w] = full.get(w, 0) | (((1 << count) - 1) << (first & 63))
        return
    for w in range(first >> 6, (first + count) >> 6):
        full[w] = (1 << 64) - 1


def bitmap_entries(prefixes: list[tuple[int, int]], capacity: int) -> tuple[bytes, bytes]:
    """(keys, values) of a bitmap set's array: its non-zero top entries, then its
    leaves from ``TOP_ENTRIES`` on. ValueError when they need more than ``capacity``."""
    top, leaf = bitmap_tables(prefixes)
    if len(leaf) > LEAF_SIZE * capacity:
        raise ValueError(f"{len(leaf) // LEAF_SIZE} partial /24s, room for {capacity}")
    keys = array.array("I", top)
    keys.extend(range(TOP_ENTRIES, TOP_ENTRIES + len(leaf) // LEAF_SIZE))
    return keys.tobytes(), b"".join(top.values()) + leaf


def _data_update(record: dict, blob: bytes | None) -> list[tuple[str, bytes, bytes]]:
    if blob is None:
        raise ValueError(f"map {record['name']}: its data file {record['file']} is missing")
    off, size = record["values"]
    values = blob[off:off + size]
    if record["keys"] is None:
        keys = array.array("I", range(record["count"])).tobytes()
    else:
        off, size = record["keys"]
        keys = blob[off:off + size]
    return [(record["name"], keys, values)]


def updates(record: dict, blob: bytes | None = None) -> list[tuple[str, bytes, bytes]]:
    """(map name, keys, values) that fill one set's inner map, or a ``data`` record's
    map (concatenated entries); ``blob``: the data file of a ``data`` record."""
    if record["type"] == "data":
        return _data_update(record, blob)
    if record["type"] == ifaces.TYPE:  # the devices of the namespace, now
        return [(record["name"], *ifaces.entries(record))]
    return [(record.get("inner", record["name"]), *entries(record, int_prefixes(record)))]


def entries(record: dict, prefixes: list[tuple[int, int]]) -> tuple[bytes, bytes]:
    """(keys, values) of the inner map of a set of ``record``'s kind holding
    ``prefixes`` (collapsed, disjoint; the record's own ones or new ones)."""
    if record["type"] == "lpm_trie":
        return lpm_entries(record["family"], prefixes)
    if record["type"] != "ipv4_bitmap":
        raise ValueError(f"unknown set map type {record['type']!r}")
    return bitmap_entries(prefixes, record["leaf_capacity"])


def held(record: dict, data: bytes) -> list[tuple[int, int]]:
    """The prefixes an inner map holds, from its keys (``lpm_trie``) or its values
    (``ipv4_bitmap``: the whole array): the inverse of :func:`entries`, not collapsed
    (a bitmap gives whole /24s and addresses)."""
    if record["type"] == "lpm_trie":
        size = 4 + ADDR_BYTES[record["family"]]
        return [(int.from_bytes(data[i + 4:i + size], "big"),
                 int.from_bytes(data[i:i + 4], "little")) for i in range(0, len(data), size)]
    words = memoryview(data).cast("Q")
    out = []
    for w in range(min(TOP_ENTRIES, len(words) // 4)):
        full, part = words[4 * w], words[4 * w + 1]
        if not (full or part):
            continue
        out += [(((w << 6) | b) << 8, 24) for b in _bits(full)]
        rank = words[4 * w + 2] & 0xFFFFFFFF
        for b in _bits(part):
            at = 4 * (TOP_ENTRIES + rank)
            leaf = words[at:at + 4]
            bits = leaf[0] | leaf[1] << 64 | leaf[2] << 128 | leaf[3] << 192 if len(
                leaf) == 4 else 0
            out += [(((w << 6) | b) << 8 | x, 32) for x in _bits(bits)]
            rank += 1
    return out


def _bits(n: int) -> list[int]:
    """The positions of the set bits of ``n``, lowest first."""
    out = []
    while n:
        low = n & -n
        out.append(low.bit_length() - 1)
        n ^= low
    return out


def fill(obj: bpf.Object, artifact: Artifact) -> None:
    """Put every entry of the artifact's maps file into the object's maps."""
    for record in maps_of(artifact):
        for name, keys, values in updates(record, artifact.files.get(record.get("file", ""))):
            obj.maps[name].update_batch(keys, values)


def object_bytes(artifact: Artifact) -> bytes:
    """The artifact's ELF object (format ``c``: compiled from its text)."""
    name = next(iter(artifact.files))
    if artifact.format == "o":
        return artifact.files[name]
    from pfc.kernel import toolchain

    return toolchain.compile_c(artifact.text or "", name.rsplit(".", 1)[0]).obj


def open_filled(artifact: Artifact, elf: bytes | None = None) -> bpf.Object:
    """Load the artifact's object (``elf`` if given), fill its maps, then set its ready
    map (``meta["ready_map"]``) to 1: until then the program drops every packet.
    Closes the object on failure."""
    obj = bpf.Object(elf if elf is not None else object_bytes(artifact),
                     artifact.meta["program"])
    try:
        fill(obj, artifact)
        if artifact.meta.get("ready_map"):
            obj.maps[artifact.meta["ready_map"]].update(0, READY_VALUE)
    except BaseException:
        obj.close()
        raise
    return obj


def bpftool_batch(records: list[dict], pin_dir: str,
                  blobs: dict[str, bytes] | None = None) -> str:
    """``bpftool batch file`` input that fills the maps of the sets ``records``
    (``maps_of``/``parse``) of an object loaded by hand with ``bpftool prog loadall OBJ
    PROGDIR pinmaps PIN_DIR`` (maps pinned by name; arrays start zeroed, so only
    non-zero entries are written), then sets the ready map: last, so the program starts
    judging only with every set in place (an object with sets always has it)."""
    lines = []
    for record in records:
        blob = (blobs or {}).get(record.get("file", ""))
        for name, keys, values in updates(record, blob):
            count = _entries(record, keys, values)
            if count == 0:
                continue
            ksize, vsize = len(keys) // count, len(values) // count
            zeroed = record.get("map_type") == "array"  # arrays start zeroed
            for i in range(count):
                raw = values[i * vsize:(i + 1) * vsize]
                if zeroed and not any(raw):
                    continue
                key = " ".join(f"{b:02x}" for b in keys[i * ksize:(i + 1) * ksize])
                value = " ".join(f"{b:02x}" for b in raw)
                lines.append(f"map update pinned {pin_dir}/{name} key hex {key} "
                             f"value hex {value}")
    if records:
        lines.append(f"map update pinned {pin_dir}/{READY_MAP} key hex 00 00 00 00 "
                     f"value hex {READY_VALUE.hex(' ')}")
    return "\n".join(lines) + ("\n" if lines else "")


def _entries(record: dict, keys: bytes, values: bytes) -> int:
    if record["type"] == "data":
        return record["count"]
    if record["type"] == ifaces.TYPE:
        return len(keys) // 4
    return len(values) // (LEAF_SIZE if record["type"] != "lpm_trie" else 1)


def main(argv: list[str] | None = None) -> int:
    """``python -m pfc.backends.ebpf.maps STEM.HOOK.maps.json PIN_DIR``: the
    ``bpftool batch`` text on stdout."""
    import os
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m pfc.backends.ebpf.maps MAPS.json PIN_DIR > fill.batch",
              file=sys.stderr)
        return 2
    with open(args[0], "rb") as f:
        records = parse(f.read(), args[0])
    blobs = {}
    for name in {r["file"] for r in records if r["type"] == "data"}:
        with open(os.path.join(os.path.dirname(args[0]), name), "rb") as f:
            blobs[name] = f.read()
    sys.stdout.write(bpftool_batch(records, args[1].rstrip("/"), blobs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
