"""The verdict cache of ``queue ... first K``: a decided flow's verdict written into its
connection's mark over ctnetlink (``IPCTNL_MSG_CT_NEW`` without ``NLM_F_CREATE``: an
update of the existing entry, found by the packet's tuple from either direction), with
``CTA_MARK_MASK`` so the mark's other bits stay (``ctnetlink_change_mark``:
``new = (old & ~mask) ^ mark``). The rules before the queue rule read it
(``MARK_PASS`` / ``MARK_DROP``, docs/queue.md).

A connection the kernel has not confirmed yet (its first packet is still in the queue)
cannot be found: ``write`` then returns False and the decider answers the flow's next
packets from its own table, writing the mark again on the next one.
"""

from __future__ import annotations

import errno
import os
import socket
import struct

from pfc.frontend.options.queue import MARK_DROP, MARK_MASK, MARK_PASS

NETLINK_NETFILTER = 12
NFNL_SUBSYS_CTNETLINK = 1
IPCTNL_MSG_CT_NEW = 0
CTA_TUPLE_ORIG, CTA_MARK, CTA_MARK_MASK = 1, 8, 21
CTA_TUPLE_IP, CTA_TUPLE_PROTO = 1, 2
CTA_PROTO_NUM, CTA_PROTO_SRC_PORT, CTA_PROTO_DST_PORT = 1, 2, 3
NLA_F_NESTED = 0x8000
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4
NLMSG_ERROR = 2


def _attr(kind: int, payload: bytes) -> bytes:
    return struct.pack("=HH", 4 + len(payload), kind) + payload + b"\0" * (-len(payload) % 4)


def tuple_of(packet: bytes) -> tuple[int, bytes, bytes, int, int, int] | None:
    """(family, src, dst, proto, sport, dport) of a TCP/UDP IP packet, else None."""
    if not packet:
        return None
    if packet[0] >> 4 == 4 and len(packet) >= 20:
        start, proto = (packet[0] & 0xF) * 4, packet[9]
        family, src, dst = socket.AF_INET, packet[12:16], packet[16:20]
    elif packet[0] >> 4 == 6 and len(packet) >= 40:
        start, proto = 40, packet[6]
        family, src, dst = socket.AF_INET6, packet[8:24], packet[24:40]
    else:
        return None
    if proto not in (6, 17) or len(packet) < start + 4:
        return None
    sport, dport = struct.unpack_from(">HH", packet, start)
    return family, src, dst, proto, sport, dport


class Marks:
    """A ctnetlink socket of the current network namespace."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.bind((0, 0))
        self.seq = int.from_bytes(os.urandom(3), "big")

    def close(self) -> None:
        self.sock.close()

    def write(self, packet: bytes, passed: bool) -> bool:
        """Mark the packet's connection with the verdict; False when there is no such
        (confirmed) connection. OSError for any other refusal."""
        t = tuple_of(packet)
        if t is None:
            return False
        family, src, dst, proto, sport, dport = t
        v6 = family == socket.AF_INET6
        ip = _attr(3 if v6 else 1, src) + _attr(4 if v6 else 2, dst)
        ports = (_attr(CTA_PROTO_NUM, bytes([proto])) + _attr(CTA_PROTO_SRC_PORT,
                 struct.pack(">H", sport)) + _attr(CTA_PROTO_DST_PORT, struct.pack(">H", dport)))
        tup = _attr(CTA_TUPLE_IP | NLA_F_NESTED, ip) + _attr(CTA_TUPLE_PROTO | NLA_F_NESTED, ports)
        body = (_attr(CTA_TUPLE_ORIG | NLA_F_NESTED, tup)
                + _attr(CTA_MARK, struct.pack(">I", MARK_PASS if passed else MARK_DROP))
                + _attr(CTA_MARK_MASK, struct.pack(">I", MARK_MASK)))
        self.seq += 1
        msg = struct.pack("=BBH", family, 0, 0) + body
        self.sock.send(struct.pack("=IHHII", 16 + len(msg),
                                   (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW,
                                   NLM_F_REQUEST | NLM_F_ACK, self.seq, 0) + msg)
        return self._ack(self.seq)

    def _ack(self, want: int) -> bool:
        while True:
            data = self.sock.recv(1 << 16)
            at = 0
            while at + 16 <= len(data):
                length, kind, _f, seq, _p = struct.unpack_from("=IHHII", data, at)
                if kind == NLMSG_ERROR and seq == want:
                    code = -struct.unpack_from("=i", data, at + 16)[0]
                    if code in (errno.ENOENT,):
                        return False
                    if code:
                        raise OSError(code, f"ctnetlink: {os.strerror(code)}")
                    return True
                at += (max(length, 16) + 3) & ~3
