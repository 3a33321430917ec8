"""The hook catalogue of whole firewalls (v2): the blocks a file may have, in the order a
packet meets them, and what may be written in each (docs/language.md "Hook blocks",
semantics.md "The path of a packet").

The checker refuses a match or an action a block does not allow; the interpreter
(``pfc.oracle.path``) walks the blocks in ``ORDER``; a backend says which blocks it
carries (``Backend.carries``) and reads ``Block.hook`` and ``Block.priority`` to place
them. Priorities are iptables' tables (raw -300, mangle -150, dstnat -100, filter 0,
srcnat 100), so the nft and iptables forms of one file order their hooks alike.
"""

from __future__ import annotations

from dataclasses import dataclass

# The netfilter hooks (NF_INET_*) and the two device hooks, in path order.
NF_HOOKS = ("prerouting", "input", "forward", "output", "postrouting")
DEVICE_HOOKS = ("ingress", "egress")

V1_ACTIONS = frozenset(("drop", "pass", "count", "log", "jump", "goto"))
NAT_ACTIONS = frozenset(("dnat", "snat", "masquerade", "redirect"))


@dataclass(frozen=True)
class Block:
    """One kind of hook block. ``kind``: ``device`` (ingress/egress: XDP, tc, nft
    netdev), ``raw``, ``filter`` or ``nat``. ``fields``: the v2 fields allowed in it
    (v1's fields are allowed everywhere, except ``ct`` where ``fields`` lacks it);
    ``actions``: every action allowed."""

    name: str
    hook: str  # a netfilter hook (NF_HOOKS) or a device hook (DEVICE_HOOKS)
    kind: str
    priority: int | None  # netfilter priority; None for the device hooks
    fields: frozenset[str]
    actions: frozenset[str]
    doc: str

    @property
    def has_default(self) -> bool:
        """Nat blocks have no default: a connection no rule translates is not."""
        return self.kind != "nat"

    @property
    def per_device(self) -> bool:
        return self.kind == "device"


_CT = frozenset(("ct", "ct-status", "ct-mark"))
_ALWAYS = frozenset(("mark", "icmp-code"))
_IP_META = frozenset(("dst-type", "src-type"))
_ETHER = frozenset(("ether-src", "ether-dst"))
_IN, _OUT = frozenset(("iif",)), frozenset(("oif",))
_FILTER = V1_ACTIONS | {"mark"}
_REJECT = _FILTER | {"reject"}
_QUEUE = _REJECT | {"queue"}  # after conntrack: a flow's verdict is kept in its entry


def _nat(actions: set[str]) -> frozenset[str]:
    return frozenset(actions | {"pass", "count", "log", "jump", "goto"})


BLOCKS: dict[str, Block] = {b.name: b for b in (
    Block("ingress", "ingress", "device", None,
          _ALWAYS | _IN | _ETHER | {"ether-type", "vlan-id"},
          _REJECT | {"redirect"}, "every frame a device receives, before IP"),
    Block("raw prerouting", "prerouting", "raw", -300, _ALWAYS | _IP_META | _IN | _ETHER,
          _FILTER | {"notrack", "redirect"}, "received IP packets, before conntrack"),
    Block("prerouting", "prerouting", "filter", -150,
          _ALWAYS | _IP_META | _IN | _ETHER | _CT, _QUEUE,
          "received IP packets, after conntrack, before DNAT"),
    Block("nat prerouting", "prerouting", "nat", -100, _ALWAYS | _IP_META | _IN | _CT,
          _nat({"dnat", "redirect"}), "the first packet of each received connection"),
    Block("input", "input", "filter", 0, _ALWAYS | _IP_META | _IN | _ETHER | _CT, _QUEUE,
          "packets for this host"),
    Block("nat input", "input", "nat", 100, _ALWAYS | _IP_META | _IN | _CT,
          _nat({"snat"}), "the first packet of each connection delivered here"),
    Block("forward", "forward", "filter", 0,
          _ALWAYS | _IP_META | _IN | _OUT | _ETHER | _CT, _QUEUE, "routed packets"),
    Block("raw output", "output", "raw", -300, _ALWAYS | _IP_META | _OUT,
          _FILTER | {"notrack"}, "packets this host sends, before conntrack"),
    Block("nat output", "output", "nat", -100, _ALWAYS | _IP_META | _OUT | _CT,
          _nat({"dnat", "redirect"}), "the first packet of each connection sent here"),
    Block("output", "output", "filter", 0, _ALWAYS | _IP_META | _OUT | _CT, _QUEUE,
          "packets this host sends"),
    # iif after routing: a forwarded packet's input device; the host's own packets have
    # none (`iif X` does not hold, `!iif X` does: nft's iif 0, iifname "")
    Block("postrouting", "postrouting", "filter", -150,
          _ALWAYS | _IP_META | _IN | _OUT | _CT, _FILTER,
          "sent and forwarded packets, before SNAT"),
    Block("nat postrouting", "postrouting", "nat", 100,
          _ALWAYS | _IP_META | _IN | _OUT | _CT, _nat({"snat", "masquerade"}),
          "the first packet of each connection leaving"),
    Block("egress", "egress", "device", None,
          _ALWAYS | _OUT | _ETHER | {"ether-type", "vlan-id"}, _FILTER,
          "every frame a device sends, after SNAT"),
)}

ORDER = tuple(BLOCKS)  # the order a packet meets them (received, then sent)
V2_FIELDS = frozenset().union(*(b.fields for b in BLOCKS.values()))


def allows_field(block: Block, field: str) -> bool:
    """Whether ``field`` may be written in ``block`` (v1 fields everywhere but ``ct``)."""
    if field in V2_FIELDS or field in _CT:
        return field in block.fields
    return True


def blocks_allowing(field: str | None = None, action: str | None = None) -> list[str]:
    """The names of the blocks where ``field`` (or ``action``) may be written, in path
    order: for "only in ..." diagnostics."""
    return [b.name for b in BLOCKS.values()
            if (field is None or allows_field(b, field))
            and (action is None or action in b.actions)]
