"""An nfnetlink_log (NFLOG) listener with the attributes ``pfc log`` needs.

One ``AF_NETLINK``/``NETLINK_NETFILTER`` socket bound to one group in the current
network namespace (include/uapi/linux/netfilter/nfnetlink_log.h): ``NFULNL_CFG_CMD_BIND``,
copy mode ``NFULNL_COPY_PACKET`` (the bytes the rule's snaplen / ``--nflog-size`` let
through), a queue threshold of 1 and a flush timeout of 10 ms, so a message leaves the
kernel at once. Each message gives the prefix (``NFULA_PREFIX``), the packet from
``skb->data`` on (``NFULA_PAYLOAD``: the network header at netfilter's hooks, netdev
ingress included) and the input interface (``NFULA_IFINDEX_INDEV``).

Only one socket may bind a group in a namespace: a second ``bind`` fails with EBUSY.
"""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass

NETLINK_NETFILTER = 12
SUBSYS_ULOG = 4
MSG_PACKET, MSG_CONFIG = 0, 1
ATTR_IFINDEX_INDEV, ATTR_PAYLOAD, ATTR_PREFIX = 4, 9, 10


@dataclass(frozen=True)
class Message:
    prefix: str
    payload: bytes
    indev: int  # 0 when the message carries none


def _attr(kind: int, payload: bytes) -> bytes:
    size = 4 + len(payload)
    return struct.pack("=HH", size, kind) + payload + bytes(-size % 4)


def _attrs(data: bytes) -> dict[int, bytes]:
    out, off = {}, 0
    while off + 4 <= len(data):
        size, kind = struct.unpack_from("=HH", data, off)
        if size < 4:
            break
        out[kind & 0x7FFF] = data[off + 4:off + size]
        off += (size + 3) & ~3
    return out


class Listener:
    """Messages of NFLOG ``group``, in the namespace this is created in."""

    def __init__(self, group: int, burst: bool = False):
        """``burst``: for a flood of messages (test labs), a 64 MiB socket buffer
        (``SO_RCVBUFFORCE``, root) and 128 KiB kernel batches (``NFULA_CFG_NLBUFSIZ``)."""
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        if burst:
            self.sock.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE
        self.sock.bind((0, 0))
        self.seq = 0
        try:
            self._config(group, _attr(1, b"\x01"))  # NFULNL_CFG_CMD_BIND
            self._config(group, _attr(2, struct.pack("!IBx", 0xFFFF, 2)))  # COPY_PACKET
            self._config(group, _attr(5, struct.pack("!I", 1)))  # NFULA_CFG_QTHRESH
            self._config(group, _attr(4, struct.pack("!I", 1)))  # flush after 10 ms
            if burst:
                self._config(group, _attr(3, struct.pack("!I", 1 << 17)))  # NLBUFSIZ
        except OSError:
            self.sock.close()
            raise

    def _config(self, group: int, attrs: bytes) -> None:
        self.seq += 1
        body = struct.pack("!BBH", socket.AF_UNSPEC, 0, group) + attrs
        header = struct.pack("=IHHII", 16 + len(body), SUBSYS_ULOG << 8 | MSG_CONFIG,
                             1 | 4, self.seq, 0)  # NLM_F_REQUEST | NLM_F_ACK
        self.sock.send(header + body)
        reply = self.sock.recv(65536)
        if struct.unpack_from("=H", reply, 4)[0] == 2:  # NLMSG_ERROR
            err = struct.unpack_from("=i", reply, 16)[0]
            if err:
                raise OSError(-err, f"NFLOG group {group}: {os.strerror(-err)}")

    def receive(self, timeout: float | None) -> list[Message]:
        """The messages of the next datagram; TimeoutError after ``timeout`` seconds
        (None: wait for ever)."""
        self.sock.settimeout(timeout)
        data, out, off = self.sock.recv(1 << 20), [], 0
        while off + 16 <= len(data):
            size, kind = struct.unpack_from("=IH", data, off)
            if kind == SUBSYS_ULOG << 8 | MSG_PACKET and size >= 20:
                attrs = _attrs(data[off + 20:off + size])
                indev = attrs.get(ATTR_IFINDEX_INDEV, b"")
                out.append(Message(attrs.get(ATTR_PREFIX, b"").rstrip(b"\0").decode(
                    "ascii", "replace"), attrs.get(ATTR_PAYLOAD, b""),
                    struct.unpack("!I", indev)[0] if len(indev) == 4 else 0))
            off += max(16, (size + 3) & ~3)
        return out

    def close(self) -> None:
        self.sock.close()


def flush_conntrack() -> None:
    """Empty the current namespace's connection table (ctnetlink ``IPCTNL_MSG_CT_DELETE``
    with no tuple: every entry of every family), as ``conntrack -F`` does. Test labs
    call it between policies, so one run's connections never decide the next's."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    try:
        sock.bind((0, 0))
        body = struct.pack("!BBH", socket.AF_UNSPEC, 0, 0)
        header = struct.pack("=IHHII", 16 + len(body), 1 << 8 | 2, 1 | 4, 1, 0)
        sock.send(header + body)
        reply = sock.recv(65536)
        if struct.unpack_from("=H", reply, 4)[0] == 2:  # NLMSG_ERROR
            err = struct.unpack_from("=i", reply, 16)[0]
            if err and err != -2:  # ENOENT: nothing to flush (conntrack never used)
                raise OSError(-err, f"conntrack flush: {os.strerror(-err)}")
    finally:
        sock.close()
