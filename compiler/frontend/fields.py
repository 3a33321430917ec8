"""The vocabulary of the language and its field catalogue.

Protocol, ICMP type, TCP flag, conntrack and reject names with their numbers, and
``FIELDS``: what each match reads, where, and what it needs. The IR (``pfc.frontend.ir``)
re-exports every name here; the interpreter, the checker, the backends and the language
server read them from there, and nothing else describes a field.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Family(StrEnum):
    """Which frames a rule can match at all.

    ``ANY``: every frame, IP or not (protocol ``all`` with no IP match).
    ``IP``: IPv4 or IPv6. ``IP4``/``IP6``: one family (EtherType 0x0800 / 0x86DD).
    """

    ANY = "any"
    IP = "ip"
    IP4 = "ip4"
    IP6 = "ip6"

    @property
    def versions(self) -> frozenset[int]:
        return {Family.ANY: frozenset((4, 6)), Family.IP: frozenset((4, 6)),
                Family.IP4: frozenset((4,)), Family.IP6: frozenset((6,))}[self]

    @staticmethod
    def of_versions(versions: frozenset[int] | set[int]) -> Family:
        if versions == {4}:
            return Family.IP4
        if versions == {6}:
            return Family.IP6
        return Family.IP


PROTO_NUMBERS = {"icmp": 1, "igmp": 2, "ipip": 4, "tcp": 6, "egp": 8, "udp": 17,
                 "ipv6": 41, "rsvp": 46, "gre": 47, "esp": 50, "ah": 51, "icmp6": 58,
                 "ipv6-icmp": 58, "ospf": 89, "pim": 103, "vrrp": 112, "l2tp": 115,
                 "sctp": 132, "udplite": 136, "dccp": 33}
TCP, UDP, ICMP, ICMP6 = 6, 17, 1, 58

TCP_FLAGS = {"fin": 0x01, "syn": 0x02, "rst": 0x04, "psh": 0x08,
             "ack": 0x10, "urg": 0x20, "ece": 0x40, "cwr": 0x80}

ICMP_TYPES = {
    "echo-reply": 0, "destination-unreachable": 3, "source-quench": 4, "redirect": 5,
    "echo-request": 8, "router-advertisement": 9, "router-solicitation": 10,
    "time-exceeded": 11, "parameter-problem": 12, "timestamp-request": 13,
    "timestamp-reply": 14, "info-request": 15, "info-reply": 16,
    "address-mask-request": 17, "address-mask-reply": 18,
}
ICMP6_TYPES = {
    "destination-unreachable": 1, "packet-too-big": 2, "time-exceeded": 3,
    "parameter-problem": 4, "echo-request": 128, "echo-reply": 129,
    "mld-listener-query": 130, "mld-listener-report": 131, "mld-listener-done": 132,
    "nd-router-solicit": 133, "nd-router-advert": 134, "nd-neighbor-solicit": 135,
    "nd-neighbor-advert": 136, "nd-redirect": 137, "router-renumbering": 138,
    "mld2-listener-report": 143,
}

# ``ct state`` values, in the order nft and iptables print them; ``untracked`` (v2) is a
# packet conntrack was told to skip (``notrack``) or never tracks (ICMPv6 ND, MLD).
CT_STATES = ("invalid", "established", "related", "new", "untracked")
# ``ct status`` bits (include/uapi/linux/netfilter/nf_conntrack_common.h), nft's names.
# ``assured`` is left out: the kernel sets it by per-protocol heuristics (a TCP
# handshake's last ACK, a UDP stream after seconds) the interpreter does not model.
CT_STATUSES = {"expected": 0x1, "seen-reply": 0x2, "confirmed": 0x8, "snat": 0x10,
               "dnat": 0x20}

# ``reject with R``: (ICMP code, ICMPv6 code), nft's ``icmpx`` words (nft_reject.h,
# NFT_REJECT_ICMPX_*); ``tcp-reset`` has no code. The replies of one family only (None
# for the other: iptables' icmp-host-prohibited ..., ip6tables' icmp6-policy-fail ...,
# nft's ``icmp``/``icmpv6`` types) need a rule of that family.
REJECTS = {"port-unreachable": (3, 4), "admin-prohibited": (13, 1),
           "host-unreachable": (1, 3), "no-route": (0, 0), "tcp-reset": (None, None),
           "proto-unreachable": (2, None), "net-prohibited": (9, None),
           "host-prohibited": (10, None), "policy-fail": (None, 5),
           "reject-route": (None, 6)}
REJECT_DEFAULT = "port-unreachable"

# ``ether-type`` names (include/uapi/linux/if_ether.h).
ETHER_TYPES = {"ip": 0x0800, "arp": 0x0806, "vlan": 0x8100, "ip6": 0x86DD,
               "qinq": 0x88A8, "lldp": 0x88CC}

# ``dst-type`` / ``src-type``: the address types a host tells apart (nft ``fib ... type``).
ADDR_TYPES = ("local", "broadcast", "multicast", "unicast")

class Layer(StrEnum):
    IP = "ip"  # read where it lies once the EtherType says IPv4/IPv6 (semantics.md)
    TRANSPORT = "transport"  # needs an accepted IP header, first fragment, the protocol
    STATE = "state"  # not in the frame: the connection tracker's state (IP frames only)
    META = "meta"  # not in the frame: the hook's context (interfaces, mark, address type)
    LINK = "link"  # the Ethernet header (and its VLAN tag)


@dataclass(frozen=True)
class FieldInfo:
    name: str
    layer: Layer
    protocols: frozenset[int] | None  # transport fields: the rule protocols that allow it
    families: Family  # IP fields: families that have it
    values: str  # what the value may be, for diagnostics and hover
    maximum: int | None  # largest integer value, for range checks
    doc: str  # one line, plain English, for hover and docs


FIELDS: dict[str, FieldInfo] = {f.name: f for f in (
    FieldInfo("src", Layer.IP, None, Family.IP, "address, prefix, list or set", None,
              "source address (IPv4 bytes 12-15, IPv6 bytes 8-23 of the IP header)"),
    FieldInfo("dst", Layer.IP, None, Family.IP, "address, prefix, list or set", None,
              "destination address (IPv4 bytes 16-19, IPv6 bytes 24-39)"),
    FieldInfo("proto", Layer.IP, None, Family.IP, "protocol number, name, range or list", 255,
              "IPv4 protocol byte / IPv6 fixed header's Next Header"),
    FieldInfo("ttl", Layer.IP, None, Family.IP, "integer, range or list", 255,
              "IPv4 TTL / IPv6 hop limit"),
    FieldInfo("len", Layer.IP, None, Family.IP, "integer, range or list", 65535,
              "IPv4 total length / IPv6 40 + payload length, in bytes, as written"),
    FieldInfo("frag", Layer.IP, None, Family.IP4, "(no value)", None,
              "IPv4 fragment: more-fragments set or fragment offset not 0"),
    FieldInfo("sport", Layer.TRANSPORT, frozenset((TCP, UDP)), Family.IP,
              "port, range or list", 65535, "TCP/UDP source port"),
    FieldInfo("dport", Layer.TRANSPORT, frozenset((TCP, UDP)), Family.IP,
              "port, range or list", 65535, "TCP/UDP destination port"),
    FieldInfo("flags", Layer.TRANSPORT, frozenset((TCP,)), Family.IP,
              "flag names, `!name` for a clear flag", None,
              "TCP flags byte (fin syn rst psh ack urg ece cwr)"),
    FieldInfo("icmp-type", Layer.TRANSPORT, frozenset((ICMP, ICMP6)), Family.IP,
              "type number, name, range or list", 255, "ICMP / ICMPv6 type byte"),
    FieldInfo("payload", Layer.TRANSPORT, frozenset((TCP, UDP)), Family.IP,
              "byte, one-char string, or LEN bytes (hex or string)", None,
              "bytes after the TCP header (data offset honoured) or the UDP header"),
    FieldInfo("ct", Layer.STATE, None, Family.IP,
              "states: new established related invalid untracked", None,
              "connection tracking state of the packet (`ct state new,established`)"),
    # v2 (docs/language.md "Whole firewalls"): where each may be written is the hook
    # catalogue's business (pfc.frontend.hooks)
    FieldInfo("icmp-code", Layer.TRANSPORT, frozenset((ICMP, ICMP6)), Family.IP,
              "code number, range or list", 255, "ICMP / ICMPv6 code byte"),
    FieldInfo("iif", Layer.META, None, Family.ANY, "interface name (`eth*`), list", None,
              "the interface the packet arrived on"),
    FieldInfo("oif", Layer.META, None, Family.ANY, "interface name (`eth*`), list", None,
              "the interface the packet leaves by"),
    FieldInfo("mark", Layer.META, None, Family.ANY, "32-bit number, range or list",
              0xFFFFFFFF, "the packet's mark (skb->mark)"),
    FieldInfo("dst-type", Layer.META, None, Family.IP, "local broadcast multicast unicast",
              None, "what the destination address is to this host (nft `fib daddr type`)"),
    FieldInfo("src-type", Layer.META, None, Family.IP, "local broadcast multicast unicast",
              None, "what the source address is to this host (nft `fib saddr type`)"),
    FieldInfo("ether-src", Layer.LINK, None, Family.ANY, "MAC address, list", None,
              "Ethernet source address"),
    FieldInfo("ether-dst", Layer.LINK, None, Family.ANY, "MAC address, list", None,
              "Ethernet destination address"),
    FieldInfo("ether-type", Layer.LINK, None, Family.ANY, "number or name (ip ip6 arp ...)",
              0xFFFF, "the EtherType after a removed VLAN tag"),
    FieldInfo("vlan-id", Layer.LINK, None, Family.ANY, "0-4095, range or list", 4095,
              "the VLAN id of the (removed) outer 802.1Q/802.1ad tag"),
    FieldInfo("ct-mark", Layer.STATE, None, Family.IP, "32-bit number, range or list",
              0xFFFFFFFF, "the connection's mark (`ct mark`)"),
    FieldInfo("ct-status", Layer.STATE, None, Family.IP,
              "expected seen-reply confirmed snat dnat", None,
              "the connection's status bits (`ct status dnat`)"),
)}
