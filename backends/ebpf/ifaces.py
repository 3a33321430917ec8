"""``iif`` / ``oif`` on XDP, tc and sockets: the map ``pfc_ifaces`` the loader fills.

A program tells devices apart by ifindex, which exists only on the host and only once
the device does; the rules name devices. So the object holds no name: each distinct
name list of its ``iif``/``oif`` matches is a bit (``firewall.iface_lists``), and the
maps file carries the lists in one record::

    {"name": "pfc_ifaces", "type": "ifaces", "lists": [["eth0"], ["wan*", "ppp0"]]}

When an object is loaded (``maps.open_filled``: ``pfc load``, ``pfc verify``, the test
runners; or ``python -m pfc.backends.ebpf.maps`` for ``bpftool``), :func:`entries`
reads the devices of the namespace it runs in (``socket.if_nameindex``) and writes, per
device some list names, its ifindex → the bits of the lists whose names match it
(``eth*`` matches every name starting with ``eth``, as nft's ``iifname "eth*"``).
A device created after the load is in no list until the next load: docs/ebpf.md.
"""

from __future__ import annotations

import socket
import struct

from pfc.oracle.context import iface_matches

MAP = "pfc_ifaces"
TYPE = "ifaces"
ENTRIES = 4096  # the map's max_entries (meta.c.j2): devices some list names


def record(lists: tuple[tuple[str, ...], ...]) -> dict:
    return {"name": MAP, "type": TYPE, "lists": [list(names) for names in lists]}


def bits(record_: dict, name: str) -> int:
    """The bits of the lists that name device ``name``."""
    return sum(1 << n for n, names in enumerate(record_["lists"])
               if any(iface_matches(p, name) for p in names))


def entries(record_: dict, devices: list[tuple[int, str]] | None = None
            ) -> tuple[bytes, bytes]:
    """(keys, values) of ``pfc_ifaces``: u32 ifindex → u64 bits, for each device of
    ``devices`` (default: the calling thread's namespace) some list names."""
    found = socket.if_nameindex() if devices is None else devices
    pairs = [(index, b) for index, name in found if (b := bits(record_, name))]
    if len(pairs) > ENTRIES:
        raise ValueError(f"{len(pairs)} devices match the policy's interface names; "
                         f"{MAP} holds {ENTRIES}")
    keys = b"".join(struct.pack("<I", i) for i, _ in pairs)
    values = b"".join(struct.pack("<Q", b) for _, b in pairs)
    return keys, values
