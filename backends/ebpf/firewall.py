"""The eBPF programs' view of the words of whole firewalls (v2): the matches that do
not read the IP packet — the link layer (``ether-src``, ``ether-dst``, ``ether-type``,
``vlan-id``) and what the hook knows besides the bytes (``iif``/``oif``, ``mark``),
tested before a rule's IP branches — and ``reject``'s reply: plain data the templates
print (``templates/ebpf/meta.c.j2``, ``reject.c.j2``).

What each reads, and where (docs/ebpf.md "Whole firewalls"):

- ``ether-dst`` / ``ether-src``: bytes 0-5 / 6-11 of the frame, present when the frame
  has an Ethernet header (14 bytes; ``context.link_check``);
- ``ether-type``: the EtherType as the program reads it (after a skipped tag on XDP,
  at byte 12 on tc and sockets, where the kernel removed the tag), present with it;
- ``vlan-id``: the outer tag's id. XDP reads it in the frame; tc and packet sockets
  read ``skb->vlan_tci`` when the kernel removed the tag (``vlan_present``), else a tag
  still in the frame (an inner one, or one sent in the data at tc egress);
- ``iif`` / ``oif``: the device's ifindex (XDP ``ingress_ifindex``, skb programs
  ``ifindex``) looked up in ``pfc_ifaces``, a hash map from ifindex to a bit mask the
  loader fills from the devices present when it loads the object (``ifaces.fill``):
  bit ``n`` set when the device's name matches the ``n``-th name list of the program
  (exact names and ``eth*`` prefixes alike). A device created later matches no list
  until the next load (nft and iptables match by name at run time);
- ``mark``: ``skb->mark`` (no XDP: no skb yet).

Interface names never reach the C source: only the bit of their list does; the lists
travel in the maps file (``ifaces.record``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pfc.frontend import ir

META_FIELDS = frozenset(("iif", "oif", "mark", "ether-src", "ether-dst", "ether-type",
                         "vlan-id"))
MAC_OFF = {"ether-dst": 0, "ether-src": 6}
IFACE_BITS = 64  # name lists a program can tell apart (bits of a pfc_ifaces value)


@dataclass(frozen=True)
class MetaPlan:
    kind: str  # iface | mark | mac | ethertype | vlan
    field: str
    negated: bool
    bit: int = 0  # iface: its list's bit in pfc_ifaces
    ranges: tuple[tuple[int, int], ...] = ()  # mark, ethertype, vlan
    maximum: int = 0
    off: int = 0  # mac: where the address lies in the frame
    macs: tuple[tuple[int, int], ...] = ()  # mac: (first 4 bytes, last 2), host order
    names: tuple[tuple[int, int, int, int], ...] = ()  # iface: name_words() per name


def name_words(pattern: str) -> tuple[int, int, int, int]:
    """A device name (or ``eth*`` prefix) as the two little-endian 64-bit words of
    ``net_device.name`` to compare under two masks: the name's bytes and its NUL (an
    exact name), or the prefix's bytes alone (``eth*``). For the netfilter programs,
    which read the device's name at run time (nft's ``iifname``). Names are 1-15 bytes
    of letters, digits and ``_ . @ -`` (the checker's allow-list)."""
    prefix = pattern.endswith("*")
    raw = pattern[:-1].encode("ascii") if prefix else pattern.encode("ascii") + b"\0"
    value = raw.ljust(16, b"\0")
    mask = (b"\xff" * len(raw)).ljust(16, b"\0")
    w = [int.from_bytes(x[i:i + 8], "little") for x in (value, mask) for i in (0, 8)]
    return w[0], w[1], w[2], w[3]


def is_meta(match: ir.Match) -> bool:
    return match.field in META_FIELDS


def iface_lists(policy: ir.Policy) -> tuple[tuple[str, ...], ...]:
    """The distinct name lists of the policy's ``iif``/``oif`` matches, in rule order:
    list ``n`` is bit ``n`` of ``pfc_ifaces``' values. ValueError past ``IFACE_BITS``."""
    out: list[tuple[str, ...]] = []
    for rule in policy.rules:
        for m in rule.matches:
            if isinstance(m, ir.IfaceMatch) and m.names not in out:
                out.append(m.names)
    if len(out) > IFACE_BITS:
        raise ValueError(f"more than {IFACE_BITS} different interface lists")
    return tuple(out)


def meta_plan(m: ir.Match, lists: tuple[tuple[str, ...], ...]) -> MetaPlan:
    if isinstance(m, ir.IfaceMatch):
        return MetaPlan("iface", m.field, m.negated, bit=lists.index(m.names),
                        names=tuple(name_words(n) for n in m.names))
    if isinstance(m, ir.MacMatch):
        macs = tuple((int.from_bytes(a[:4], "big"), int.from_bytes(a[4:], "big"))
                     for a in m.macs)
        return MetaPlan("mac", m.field, m.negated, off=MAC_OFF[m.field], macs=macs)
    assert isinstance(m, ir.IntMatch), m
    kind = {"mark": "mark", "ether-type": "ethertype", "vlan-id": "vlan"}[m.field]
    return MetaPlan(kind, m.field, m.negated, ranges=m.ranges,
                    maximum=ir.FIELDS[m.field].maximum or 0)


def rule_meta(rule: ir.Rule, lists: tuple[tuple[str, ...], ...]) -> tuple[MetaPlan, ...]:
    return tuple(meta_plan(m, lists) for m in rule.matches if is_meta(m))


@dataclass(frozen=True)
class RejectPlan:
    """``reject with R``: a TCP reset, or an ICMP / ICMPv6 destination unreachable
    with these codes (``templates/ebpf/reject.c.j2`` builds the reply)."""

    reset: bool
    code4: int
    code6: int


def reject_plan(rule: ir.Rule) -> RejectPlan | None:
    if not isinstance(rule.action, ir.Reject):
        return None
    code4, code6 = ir.REJECTS[rule.action.kind]
    return RejectPlan(rule.action.kind == "tcp-reset", code4 or 0, code6 or 0)
