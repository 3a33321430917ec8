"""nf_tables set elements over raw netlink: one transaction, no ruleset cache.

libnftables reads every element of a set into its cache before it changes one (1.0.6:
about a second for a 100k-entry set, whatever the change) and parses its text input
element by element. ``pfc set`` already knows what the set holds (pfc's copy), so it
speaks nfnetlink itself: a batch (``NFNL_MSG_BATCH_BEGIN`` .. ``END``, one transaction:
every packet sees the old set or the new one) of ``NFT_MSG_DELSETELEM`` (without
elements: flush the set) and ``NFT_MSG_NEWSETELEM`` messages, each element list kept
under the 64 KiB a nested attribute can hold. Interval sets hold ranges as a start
element and an end element (the first address after the range, flag
``NFT_SET_ELEM_INTERVAL_END``; none for a range that ends at the last address), and a
leading end element at address 0 when no range starts there, as libnftables encodes
them (``nft --debug=netlink``). :meth:`Socket.elements` reads a set back (one
``NFT_MSG_GETSETELEM`` dump) and :func:`ranges` turns its elements into address ranges,
for ``pfc status``.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from dataclasses import dataclass

from pfc.frontend.matches import merge_ranges

NETLINK_NETFILTER = 12
NFNL_SUBSYS_NFTABLES = 10
NFNL_MSG_BATCH_BEGIN, NFNL_MSG_BATCH_END = 0x10, 0x11
NFT_MSG_GETSET, NFT_MSG_NEWSETELEM, NFT_MSG_GETSETELEM, NFT_MSG_DELSETELEM = 10, 12, 13, 14
NLM_F_REQUEST, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP = 0x1, 0x4, 0x400, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLA_F_NESTED = 0x8000
NFTA_SET_TABLE, NFTA_SET_NAME, NFTA_SET_FLAGS, NFTA_SET_KEY_LEN = 1, 2, 3, 5
NFTA_SET_ELEM_LIST_TABLE, NFTA_SET_ELEM_LIST_SET, NFTA_SET_ELEM_LIST_ELEMENTS = 1, 2, 3
NFTA_LIST_ELEM, NFTA_SET_ELEM_KEY, NFTA_SET_ELEM_FLAGS, NFTA_DATA_VALUE = 1, 1, 3, 1
NFT_SET_INTERVAL = 0x4
NFT_SET_ELEM_INTERVAL_END = 0x1
FAMILIES = {"inet": 1, "ip": 2, "arp": 3, "netdev": 5, "bridge": 7, "ip6": 10}
SOL_NETLINK, NETLINK_CAP_ACK, NETLINK_EXT_ACK = 270, 10, 11
SO_SNDBUFFORCE, SO_RCVBUFFORCE = 32, 33
CHUNK = 2000  # elements per message: 2000 IPv6 elements with flags < 64 KiB

Element = tuple[bytes, int]  # (key in network byte order, flags)


def _attr(kind: int, payload: bytes) -> bytes:
    head = struct.pack("=HH", 4 + len(payload), kind)
    return head + payload + b"\0" * (-len(payload) % 4)


def _name(kind: int, value: str) -> bytes:
    return _attr(kind, value.encode() + b"\0")


def _element(key: bytes, flags: int) -> bytes:
    body = _attr(NFTA_SET_ELEM_KEY | NLA_F_NESTED, _attr(NFTA_DATA_VALUE, key))
    if flags:
        body += _attr(NFTA_SET_ELEM_FLAGS, struct.pack(">I", flags))
    return _attr(NFTA_LIST_ELEM | NLA_F_NESTED, body)


def _elements(chunk: list[Element]) -> bytes:
    """``_element`` of each, concatenated: the attribute headers of a key of 4 or 16
    bytes (no padding) precomputed, one concatenation an element."""
    width = len(chunk[0][0]) if chunk else 4  # every key of a set has its width
    if width % 4:
        return b"".join(_element(k, f) for k, f in chunk)
    plain = _element(bytes(width), 0)[:-width]
    end_flag = _attr(NFTA_SET_ELEM_FLAGS, struct.pack(">I", NFT_SET_ELEM_INTERVAL_END))
    ended = struct.pack("=H", len(plain) + width + len(end_flag)) + plain[2:]
    return b"".join(plain + k if not f else
                    (ended + k + end_flag if f == NFT_SET_ELEM_INTERVAL_END else _element(k, f))
                    for k, f in chunk)


def interval_elements(ranges: list[tuple[int, int]], width: int, lead: bool = True) \
        -> list[Element]:
    """The elements of an interval set holding ``ranges`` (sorted, disjoint, not
    adjacent), ``width`` bytes an address (``lead``: with the leading end element)."""
    top = (1 << (8 * width)) - 1
    out: list[Element] = []
    if lead and ranges and ranges[0][0] != 0:
        out.append((bytes(width), NFT_SET_ELEM_INTERVAL_END))
    for lo, hi in ranges:
        out.append((lo.to_bytes(width, "big"), 0))
        if hi != top:
            out.append(((hi + 1).to_bytes(width, "big"), NFT_SET_ELEM_INTERVAL_END))
    return out


@dataclass(frozen=True)
class SetInfo:
    interval: bool
    key_len: int


class Socket:
    """A NETLINK_NETFILTER socket of the current network namespace."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
        self.sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 1 << 20)
        self.sock.bind((0, 0))
        self.seq = int.from_bytes(os.urandom(3), "big")

    def __enter__(self) -> Socket:
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()

    def _message(self, kind: int, flags: int, family: int, payload: bytes,
                 res_id: int = 0) -> tuple[int, bytes]:
        self.seq += 1
        body = struct.pack("=BBH", family, 0, socket.htons(res_id)) + payload
        return self.seq, struct.pack("=IHHII", 16 + len(body), kind, flags, self.seq, 0) + body

    def get_set(self, family: str, table: str, name: str) -> SetInfo | None:
        """The set's flags and key length; None if there is no such set (or table)."""
        seq, msg = self._message((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETSET,
                                 NLM_F_REQUEST | NLM_F_ACK, FAMILIES[family],
                                 _name(NFTA_SET_TABLE, table) + _name(NFTA_SET_NAME, name))
        self.sock.send(msg)
        found = None
        for kind, payload in self._replies(seq):
            if kind == NLMSG_ERROR:
                code = -struct.unpack_from("=i", payload)[0]
                if code in (errno.ENOENT,):
                    return None
                if code:
                    raise OSError(code, f"reading set {name}: {os.strerror(code)}")
                break
            attrs = _attrs(payload[4:])
            found = SetInfo(bool(struct.unpack(">I", attrs.get(NFTA_SET_FLAGS, bytes(4)))[0]
                                 & NFT_SET_INTERVAL),
                            struct.unpack(">I", attrs.get(NFTA_SET_KEY_LEN, bytes(4)))[0])
        return found

    def elements(self, family: str, table: str, name: str) -> list[Element] | None:
        """Every element of the set (``NFT_MSG_GETSETELEM`` dump); None if there is no
        such set."""
        seq, msg = self._message((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETSETELEM,
                                 NLM_F_REQUEST | NLM_F_DUMP, FAMILIES[family],
                                 _name(NFTA_SET_ELEM_LIST_TABLE, table)
                                 + _name(NFTA_SET_ELEM_LIST_SET, name))
        self.sock.send(msg)
        out: list[Element] = []
        for kind, payload in self._replies(seq):
            if kind == NLMSG_ERROR:
                code = -struct.unpack_from("=i", payload)[0]
                if code == errno.ENOENT:
                    return None
                if code:
                    raise OSError(code, f"listing set {name}: {os.strerror(code)}")
                continue
            if kind == NLMSG_DONE:
                break
            out += _parse_elements(_attrs(payload[4:]).get(NFTA_SET_ELEM_LIST_ELEMENTS, b""))
        return out

    def commit(self, family: str, table: str, steps: list[tuple[str, str, list[Element]]]) \
            -> None:
        """One transaction of ``("flush" | "delete" | "add", set name, elements)``
        steps, in order; OSError (nothing changed) if the kernel refuses any."""
        fam = FAMILIES[family]
        head = _name(NFTA_SET_ELEM_LIST_TABLE, table)
        seqs, parts = [], []
        seq, msg = self._message(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, 0, b"",
                                 NFNL_SUBSYS_NFTABLES)
        parts.append(msg)
        for op, sname, elements in steps:
            kind = NFT_MSG_NEWSETELEM if op == "add" else NFT_MSG_DELSETELEM
            flags = NLM_F_REQUEST | NLM_F_ACK | (NLM_F_CREATE if op == "add" else 0)
            where = head + _name(NFTA_SET_ELEM_LIST_SET, sname)
            chunks = [elements[i:i + CHUNK] for i in range(0, len(elements), CHUNK)] \
                if op != "flush" else [None]
            for chunk in chunks:
                payload = where if chunk is None else where + _attr(
                    NFTA_SET_ELEM_LIST_ELEMENTS | NLA_F_NESTED,
                    _elements(chunk))
                seq, msg = self._message((NFNL_SUBSYS_NFTABLES << 8) | kind, flags, fam,
                                         payload)
                seqs.append(seq)
                parts.append(msg)
        parts.append(self._message(NFNL_MSG_BATCH_END, NLM_F_REQUEST, 0, b"",
                                   NFNL_SUBSYS_NFTABLES)[1])
        data = b"".join(parts)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, max(len(data) * 2, 1 << 16))
        self.sock.send(data)
        self._acks(seqs)

    def _acks(self, seqs: list[int]) -> None:
        want = set(seqs)
        while want:
            data = self.sock.recv(1 << 20)
            for kind, seq, payload in _messages(data):
                if kind == NLMSG_ERROR and seq in want:  # (not a refused batch's rest)
                    code = -struct.unpack_from("=i", payload)[0]
                    if code:
                        raise OSError(code, f"nf_tables refused the set change: "
                                            f"{os.strerror(code)}")
                    want.discard(seq)

    def _replies(self, seq: int):
        while True:
            data = self.sock.recv(1 << 16)
            for kind, got, payload in _messages(data):
                if got != seq:
                    continue
                yield kind, payload
                if kind in (NLMSG_ERROR, NLMSG_DONE):
                    return


def _messages(data: bytes):
    at = 0
    while at + 16 <= len(data):
        length, kind, _flags, seq, _pid = struct.unpack_from("=IHHII", data, at)
        yield kind, seq, data[at + 16:at + length]
        at += (length + 3) & ~3


def _parse_elements(blob: bytes) -> list[Element]:
    """(key, flags) of each ``NFTA_LIST_ELEM`` of an element list (offsets read in
    place: 100k elements a dump)."""
    out, at, unpack = [], 0, struct.unpack_from
    while at + 4 <= len(blob):
        length = unpack("=H", blob, at)[0]
        key, flags, p, end = b"", 0, at + 4, at + length
        while p + 4 <= end:
            size, kind = unpack("=HH", blob, p)
            kind &= 0x3FFF
            if kind == NFTA_SET_ELEM_KEY and size >= 8:
                key = blob[p + 8:p + 4 + unpack("=H", blob, p + 4)[0]]
            elif kind == NFTA_SET_ELEM_FLAGS:
                flags = unpack(">I", blob, p + 4)[0]
            p += (size + 3) & ~3
        out.append((key, flags))
        at += (length + 3) & ~3
    return out


def _attr_list(data: bytes) -> list[tuple[int, bytes]]:
    out, at = [], 0
    while at + 4 <= len(data):
        length, kind = struct.unpack_from("=HH", data, at)
        out.append((kind & 0x3FFF, data[at + 4:at + length]))
        at += (length + 3) & ~3
    return out


def _attrs(data: bytes) -> dict[int, bytes]:
    return dict(_attr_list(data))


def ranges(elements: list[Element], interval: bool) -> list[tuple[int, int]]:
    """The address ranges a set's elements hold: an interval set's start elements each
    up to the next end element (exclusive; to the last address without one), a set of
    addresses each element. Merged."""
    if not interval:
        return _merged([(k, k) for k in sorted(int.from_bytes(k, "big") for k, _ in elements)])
    width = len(elements[0][0]) if elements else 4
    out, start = [], None
    for key, start_flag in sorted((int.from_bytes(k, "big"), not f & NFT_SET_ELEM_INTERVAL_END)
                                  for k, f in elements):  # an end before a start
        end = not start_flag
        if end and start is not None:
            out.append((start, key - 1))
            start = None
        elif not end and start is None:
            start = key
    if start is not None:
        out.append((start, (1 << (8 * width)) - 1))
    return _merged(out)


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted spans, overlapping and adjacent ones merged."""
    return list(merge_ranges(spans))
