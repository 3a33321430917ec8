"""An NFQUEUE client over raw netlink (``nfnetlink_queue``), no libnetfilter_queue.

``Queue(num)`` binds queue ``num`` of the current network namespace in packet-copy mode
(``copy_range`` bytes of each packet), with ``NFQA_CFG_F_GSO`` (GSO packets arrive
whole instead of being segmented for us; ``gso=False``: segmented, wire-size packets)
and ``NFQA_CFG_F_FAIL_OPEN`` when asked (packets pass when the queue is full).
``read()`` returns every packet of one ``recv`` (the kernel fills the buffer with as
many as are waiting: batched reads); ``verdicts()`` answers a batch in one ``send``
(one netlink message each, which nfnetlink processes in order). Packets are (id,
payload: the IP packet).

Protocol: include/uapi/linux/netfilter/nfnetlink_queue.h; messages are nfnetlink's
(``struct nfgenmsg`` with the queue number as ``res_id``, big-endian attributes).
"""

from __future__ import annotations

import errno
import os
import socket
import struct

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN = 1, 2, 3
NFQA_CFG_MASK, NFQA_CFG_FLAGS = 4, 5
NFQA_PACKET_HDR, NFQA_VERDICT_HDR, NFQA_MARK, NFQA_PAYLOAD = 1, 2, 3, 10
NFQNL_CFG_CMD_BIND, NFQNL_CFG_CMD_UNBIND = 1, 2
NFQNL_COPY_PACKET = 2
NFQA_CFG_F_FAIL_OPEN, NFQA_CFG_F_GSO = 0x1, 0x4
NF_DROP, NF_ACCEPT = 0, 1
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4
NLMSG_ERROR = 2
SOL_NETLINK, NETLINK_NO_ENOBUFS = 270, 5
SO_RCVBUFFORCE = 33
COPY_RANGE = 0xFFFF


def _attr(kind: int, payload: bytes) -> bytes:
    return struct.pack("=HH", 4 + len(payload), kind) + payload + b"\0" * (-len(payload) % 4)


def _attrs(data: bytes, at: int = 0) -> dict[int, bytes]:
    out = {}
    while at + 4 <= len(data):
        length, kind = struct.unpack_from("=HH", data, at)
        if length < 4:
            break
        out[kind & 0x3FFF] = data[at + 4:at + length]
        at += (length + 3) & ~3
    return out


class Queue:
    """One bound NFQUEUE queue (``num``) of the current network namespace."""

    def __init__(self, num: int, fail_open: bool = False, maxlen: int = 4096,
                 rcvbuf: int = 8 << 20, gso: bool = True) -> None:
        self.num = num
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
        self.sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
        self.sock.bind((0, 0))
        self.seq = int.from_bytes(os.urandom(3), "big")
        self._config(_attr(NFQA_CFG_CMD, struct.pack(">BxH", NFQNL_CFG_CMD_BIND, 0)))
        flags = (NFQA_CFG_F_GSO if gso else 0) | (NFQA_CFG_F_FAIL_OPEN if fail_open else 0)
        self._config(_attr(NFQA_CFG_PARAMS, struct.pack(">IB", COPY_RANGE, NFQNL_COPY_PACKET))
                     + _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack(">I", maxlen))
                     + _attr(NFQA_CFG_FLAGS, struct.pack(">I", flags))
                     + _attr(NFQA_CFG_MASK, struct.pack(">I", flags)))

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def fileno(self) -> int:
        return self.sock.fileno()

    def _message(self, kind: int, flags: int, payload: bytes) -> bytes:
        self.seq += 1
        body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(self.num)) + payload
        return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind,
                           flags, self.seq, 0) + body

    def _config(self, payload: bytes) -> None:
        """Send one config message and wait for its acknowledgement."""
        self.sock.send(self._message(NFQNL_MSG_CONFIG, NLM_F_REQUEST | NLM_F_ACK, payload))
        want = self.seq
        while True:
            for kind, seq, body in _messages(self.sock.recv(1 << 16)):
                if kind == NLMSG_ERROR and seq == want:
                    code = -struct.unpack_from("=i", body)[0]
                    if code:
                        raise OSError(code, f"NFQUEUE {self.num}: {os.strerror(code)}"
                                      + (" (is another program bound to it?)"
                                         if code == errno.EBUSY else ""))
                    return

    def read(self, size: int = 1 << 20) -> list[tuple[int, bytes]]:
        """The packets of one ``recv``: (id, the IP packet). Blocks until one comes."""
        data = self.sock.recv(size)
        out = []
        for kind, _seq, body in _messages(data):
            if kind & 0xFF != NFQNL_MSG_PACKET or kind >> 8 != NFNL_SUBSYS_QUEUE:
                continue
            attrs = _attrs(body, 4)
            head, payload = attrs.get(NFQA_PACKET_HDR), attrs.get(NFQA_PAYLOAD, b"")
            if head is not None:
                out.append((struct.unpack_from(">I", head)[0], payload))
        return out

    def verdicts(self, answers: list[tuple[int, bool]]) -> None:
        """``(id, accept)`` for each packet, in one send."""
        if answers:
            self.sock.send(b"".join(
                self._message(NFQNL_MSG_VERDICT, NLM_F_REQUEST, _attr(
                    NFQA_VERDICT_HDR, struct.pack(">II", NF_ACCEPT if ok else NF_DROP, pid)))
                for pid, ok in answers))


def _messages(data: bytes):
    at = 0
    while at + 16 <= len(data):
        length, kind, _flags, seq, _pid = struct.unpack_from("=IHHII", data, at)
        if length < 16:
            break
        yield kind, seq, data[at + 16:at + length]
        at += (length + 3) & ~3
