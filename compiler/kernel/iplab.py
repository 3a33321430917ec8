"""The IP-input lab: what the kernel runners of netfilter hooks (iptables raw PREROUTING
and filter INPUT, nft netdev ingress and inet prerouting / input) share.

- :func:`configure` makes a :func:`pfc.kernel.netns.lab` deliver every generated IP packet to
  the IP hooks: every unicast address local (AnyIP), ``accept_local``,
  ``route_localnet``, no reverse-path filter, MTU 65535 on the veth pair.
- :class:`Nflog` listens to one NFLOG group: an observer rule after the hook (``-j
  NFLOG`` / nft ``log group N``) tells, per packet and in processing order, that it
  passed and with which bytes.
- :func:`ip_marker` is an end-of-batch marker an IP hook sees (an IPv4/UDP datagram
  from :data:`MARK_MAC`), :func:`pinned` sends from one CPU so the veth backlog keeps
  the frames' order.
- :func:`hook_view` / :func:`delivered` say what PREROUTING and INPUT see of a frame in
  this lab (measured on Linux 6.18, docs/iptables.md "What filter INPUT sees").

Nothing in the lab may enable conntrack: with conntrack on, nf_defrag_ipv4 (priority
-400) reassembles IPv4 fragments before raw PREROUTING (-300) sees them (measured).
"""

from __future__ import annotations

import socket
import struct

from pyroute2 import IPRoute

from pfc.frontend import ir
from pfc.kernel import netns, nflog
from pfc.kernel.observation import Observation
from pfc.oracle import framebuild as fb
from pfc.oracle import packets

MARK_MAC = bytes.fromhex("027066630001")  # source MAC of batch markers
SEND_MAC = bytes.fromhex("027066630002")  # source MAC of injected frames
MAX_MTU = 65535
SYSCTLS = {"ipv4/ip_forward": "0", "ipv4/conf/all/rp_filter": "0",
           "ipv4/conf/default/rp_filter": "0", "ipv4/conf/all/accept_local": "1",
           "ipv4/conf/all/route_localnet": "1"}
DEVICE_SYSCTLS = {"rp_filter": "0", "accept_local": "1", "route_localnet": "1"}


# ------------------------------------------------------------------------ lab setup

def configure(lab: netns.Lab) -> None:
    """Make every unicast destination this host's own (AnyIP), so that INPUT sees what
    the routing step would otherwise forward or drop: ``local 0.0.0.0/0`` and ``local
    ::/0`` on lo in table local; sources that are "local" too are accepted
    (accept_local), 127/8 is routable (route_localnet), no reverse-path filter. The
    veth MTU is veth's maximum, so no generated frame is too long to send. Run inside
    the lab's namespace."""
    for path, value in SYSCTLS.items():
        sysctl(path, value)
    for key, value in DEVICE_SYSCTLS.items():
        sysctl(f"ipv4/conf/{lab.dut}/{key}", value)
    with IPRoute() as ipr:
        for ifname in (lab.inj, lab.dut):
            ipr.link("set", index=ipr.link_lookup(ifname=ifname)[0], mtu=MAX_MTU)
        lo = ipr.link_lookup(ifname="lo")[0]
        for family, dst in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
            ipr.route("add", family=family, dst=dst, dst_len=0, oif=lo, type="local",
                      scope=254, table=255)


def sysctl(path: str, value: str) -> None:
    """Write ``/proc/sys/net/PATH`` (in the current namespace)."""
    with open(f"/proc/sys/net/{path}", "w") as f:
        f.write(value)


def observation(frames: list[bytes], seen: list[bytes | None],
                counters: dict | None) -> Observation:
    """A runner's ``Observation``: ``seen[i]`` is the IP packet that came out behind the
    hook for ``frames[i]`` (None: dropped), given back its Ethernet header."""
    verdicts = [ir.Verdict.DROP if s is None else ir.Verdict.PASS for s in seen]
    out = [None if s is None else f[:14] + s for f, s in zip(frames, seen, strict=True)]
    return Observation(verdicts, out, counters)


def ip_marker(seq: int, dst_mac: bytes) -> bytes:
    """End-of-batch marker ``seq``: IPv4/UDP 192.0.2.1 → 192.0.2.2 port 9, the sequence
    number as the 8-byte payload (IP bytes 28..36), from :data:`MARK_MAC`."""
    ip = fb.ipv4(bytes([192, 0, 2, 1]), bytes([192, 0, 2, 2]), 17,
                 fb.udp(b"\xc0\0\2\1", b"\xc0\0\2\2", 9, 9, struct.pack("!Q", seq)))
    return fb.ethernet(dst_mac, MARK_MAC, fb.ETH_IP4, ip)


def marker_seq(packet: bytes) -> int | None:
    """The sequence number of an :func:`ip_marker` seen from its IP header on."""
    return struct.unpack("!Q", packet[28:36])[0] if len(packet) >= 36 else None


def mac_text(mac: bytes) -> str:
    return ":".join(f"{b:02x}" for b in mac)


# ------------------------------------------------------------------------ NFLOG

class Nflog(nflog.Listener):
    """An nfnetlink_log (NFLOG) listener on one group, in the current namespace.

    Each message carries the log prefix and the packet from ``skb->data`` on: the IP
    header at the IP hooks, and at netdev ingress too (the Ethernet header was pulled).
    Messages of one group arrive in the order the packets were processed."""

    def __init__(self, group: int):
        super().__init__(group, burst=True)

    def packets(self, timeout: float) -> list[tuple[str, bytes]]:
        """(prefix, packet bytes) of the messages in the next datagram."""
        return [(m.prefix, m.payload) for m in self.receive(timeout)]


# ------------------------------------------------------------------------ views

def hook_view(input_hook: bool, frame: bytes) -> bytes | None:
    """What an IP hook sees of a frame in this lab: the IP packet as ``ip_rcv`` /
    ``ipv6_rcv`` leave it (``packets.ip_input_view``; None for non-IP frames or packets
    they drop), and for an INPUT hook only packets the lab delivers locally
    (:func:`delivered`)."""
    seen = packets.ip_input_view(frame)
    if seen is None or not input_hook:
        return seen
    return seen if delivered(seen[14:]) else None


ALL_HOSTS = bytes([224, 0, 0, 1])
BROADCAST = b"\xff" * 4
ALL_NODES = bytes.fromhex("ff020000000000000000000000000001")


def delivered(packet: bytes) -> bool:
    """Whether a packet past PREROUTING reaches INPUT in the lab (``configure``: every
    unicast address is local), as measured on Linux 6.18 (docs/iptables.md):

    - IPv4 fragments never do: ``ip_local_deliver`` reassembles before LOCAL_IN;
    - IPv4 options other than NOP, Router Alert and a final run of EOLs: not judged
      (``ip_options_compile`` drops bad ones, and rewrites record-route, timestamps and
      bytes after an EOL, so INPUT would see other bytes than PREROUTING);
    - martians: a multicast or 255.255.255.255 source; a 0.0.0.0 destination unless
      from 0.0.0.0; a 0.0.0.0 source unless sent to 255.255.255.255 or 224.0.0.1;
    - multicast: only the groups every host joins, 224.0.0.1 and ff02::1;
    - IPv6 link-local destinations: only the device's own address would be local.
    """
    if packet[0] >> 4 == 6:
        dst = packet[24:40]
        if dst[0] == 0xFF:
            return dst == ALL_NODES
        return not (dst[0] == 0xFE and dst[1] & 0xC0 == 0x80)
    ihl = (packet[0] & 0x0F) * 4
    if struct.unpack("!H", packet[6:8])[0] & 0x3FFF or not packets.plain_options(packet[20:ihl]):
        return False
    src, dst = packet[12:16], packet[16:20]
    if src[0] >> 4 == 0xE or src == BROADCAST:
        return False
    if dst == bytes(4):  # 0.0.0.0 → 0.0.0.0 is taken as a broadcast
        return src == bytes(4)
    if src == bytes(4):
        return dst in (BROADCAST, ALL_HOSTS)
    return dst[0] >> 4 != 0xE or dst == ALL_HOSTS
