"""The words of whole firewalls (v2) for hover and completion: hook blocks, the v2
actions and keywords, and the value names of ``reject with``, ``ct status``,
``dst-type`` and ``ether-type`` (docs/language.md "Whole firewalls")."""

from __future__ import annotations

from pfc.frontend import ir
from pfc.frontend.firewall.hooks import BLOCKS

V2_ACTIONS = {
    "reject": ("drop, and send a reply: a TCP RST (`with tcp-reset`, `tcp` rules) or an "
               "ICMP/ICMPv6 destination unreachable (`with port-unreachable`, the default; "
               "`admin-prohibited`, `host-unreachable`, `no-route`; IPv4 rules: `host-prohibited`, "
               "`net-prohibited`, `proto-unreachable`; IPv6 rules: `policy-fail`, "
               "`reject-route`)", {"reject"}),
    "notrack": ("no connection tracking for this packet (`ct state untracked` later); "
                "goes on with the next rule", {"notrack"}),
    "mark": ("`mark ... to N`: set the packet's mark (32 bits), then go on with the next "
             "rule", {"set-mark"}),
    "dnat": ("`dnat ... to ADDR[:PORT]`: translate the destination of the connection (a "
             "port forward); later packets and replies follow without rules", {"nat"}),
    "snat": ("`snat ... to ADDR[:PORT]`: translate the source of the connection", {"nat"}),
    "masquerade": ("`snat` to the address of the interface the packet leaves by", {"nat"}),
    "jump": ("`jump NAME MATCH*`: run chain NAME on the packets the matches hold for; if "
             "none of its rules decides, go on after the jump", set()),
    "goto": ("`goto NAME MATCH*`: like `jump`, but a packet the chain does not decide gets "
             "the block's default", set()),
}
V2_KEYWORDS = {
    "chain": "`chain NAME { ... }`: an ordered list of rules with no default, run by "
             "`jump NAME` / `goto NAME` from blocks (or chains) below it",
    "interface": "`interface NAME [address A/LEN | { ... }] [gateway ADDR]`: the host the "
                 "file is for (for `pfc run` and `pfc verify`; no artifact depends on it)",
    "address": "`interface NAME address A/LEN`: the interface's address(es), with their "
               "prefix length",
    "gateway": "`interface NAME ... gateway ADDR`: the host's default route (one per IP "
               "version)",
    "with": "`reject ... with R`: the reply: " + ", ".join(ir.REJECTS),
    "status": "`ct status S,...`: the connection's status bits (all of those named): "
              + ", ".join(ir.CT_STATUSES),
    "raw": "`raw prerouting { }` / `raw output { }`: before conntrack (`notrack` here)",
    "nat": "`nat prerouting|input|output|postrouting { }`: the first packet of each "
           "connection decides its translation",
}
# Statement words a v2 file offers at the top level.
TOP_WORDS = ("ingress", "egress", "raw prerouting", "prerouting", "nat prerouting", "input",
             "nat input", "forward", "raw output", "nat output", "output", "postrouting",
             "nat postrouting", "chain", "interface")
SECOND_WORDS = {"raw": ("prerouting", "output"),
                "nat": ("prerouting", "input", "output", "postrouting")}


def block_doc(name: str) -> str:
    """Hover text of a hook block (``input``, ``nat prerouting``)."""
    block = BLOCKS[name]
    where = f"netfilter {block.hook}, priority {block.priority}" if block.priority is not None \
        else f"the device's {block.hook} path (XDP, tc, nft netdev)"
    default = "" if block.has_default else " No `default`: a connection no rule translates " \
        "stays untranslated."
    return f"**{name}** block — {block.doc} ({where}).{default}"


def value_names(name: str) -> list[str]:
    """What a v2 value name is, one line each (empty when it is none of them)."""
    out = []
    if name in ir.REJECTS:
        codes = ir.REJECTS[name]
        tail = "a TCP RST" if codes == (None, None) else ", ".join(
            f"{family} code {code}" for family, code in zip(("ICMP", "ICMPv6"), codes,
                                                             strict=True) if code is not None)
        out.append(f"reject reply **{name}** ({tail})")
    if name in ir.CT_STATUSES:
        out.append(f"connection status **{name}** (0x{ir.CT_STATUSES[name]:x})")
    if name in ir.ADDR_TYPES:
        out.append(f"address type **{name}** (`dst-type {name}`)")
    if name in ir.ETHER_TYPES:
        out.append(f"EtherType **{name}** = 0x{ir.ETHER_TYPES[name]:04x}")
    return out


def value_items(kind: str, names: tuple[str, ...], used) -> list[tuple] | None:
    """Completion items (label, kind, detail, doc) of a v2 completion context, or None
    for a context that is not one of them."""
    if kind in ("hook-second", "chain-name", "iface"):
        what = {"hook-second": ("keyword", "block"), "chain-name": ("value", "chain"),
                "iface": ("value", "interface")}[kind]
        return [(n, *what) for n in names]
    if kind == "interface":
        return [(w, "keyword", "interface", V2_KEYWORDS[w]) for w in ("address", "gateway")]
    tables = {"reject-kind": (ir.REJECTS, "reject reply"),
              "addr-type": (ir.ADDR_TYPES, "address type"),
              "ether-type": (ir.ETHER_TYPES, "EtherType"),
              "ct-status": (ir.CT_STATUSES, "connection status")}
    if kind not in tables:
        return None
    table, detail = tables[kind]
    return [(n, "value", detail) for n in table if n not in used]
