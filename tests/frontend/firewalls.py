"""Hypothesis strategies for whole firewalls (v2): valid files of interfaces, defines,
chains and hook blocks, each rule picked from what its block allows by the hook
catalogue (``pfc.frontend.firewall.hooks.BLOCKS``), so the generator and the checker
read the same table. Used by the v2 fmt property tests and the fuzz harness."""

from __future__ import annotations

from hypothesis import strategies as st

from pfc.frontend.firewall.hooks import BLOCKS, allows_field
from tests.strategies import rule_text

# (rule text, fields it uses, action, where): where is "any", "nat" (a nat block's
# form) or "rewrite" (v1's stateless redirect, not in nat blocks)
V2_RULES = (
    ("pass iif {iface}", {"iif"}, "pass", "any"),
    ("drop !iif {{ lo, eth* }}", {"iif"}, "drop", "any"),
    ("drop oif {iface}", {"oif"}, "drop", "any"),
    ("pass ct state established,related", {"ct"}, "pass", "any"),
    ("drop ct state invalid,untracked", {"ct"}, "drop", "any"),
    ("pass ct status dnat", {"ct-status"}, "pass", "any"),
    ("pass tcp ct mark 0x10 dport 22", {"ct-mark"}, "pass", "any"),
    ("drop mark 1-5", {"mark"}, "drop", "any"),
    ("count icmp icmp-code 0-3", {"icmp-code"}, "count", "any"),
    ("drop ether-src aa:bb:cc:dd:ee:ff", {"ether-src"}, "drop", "any"),
    ("drop ether-dst {{ 01:00:5e:00:00:01, ff:ff:ff:ff:ff:ff }}", {"ether-dst"}, "drop",
     "any"),
    ("drop ether-type arp", {"ether-type"}, "drop", "any"),
    ("pass ether-type {{ ip, ip6 }}", {"ether-type"}, "pass", "any"),
    ("drop vlan-id 10-20", {"vlan-id"}, "drop", "any"),
    ("drop dst-type {{ broadcast, multicast }}", {"dst-type"}, "drop", "any"),
    ("reject tcp dport 23 with tcp-reset", set(), "reject", "any"),
    ("reject udp with port-unreachable", set(), "reject", "any"),
    ("reject ip6 limit rate 10/second", set(), "reject", "any"),
    ("reject", set(), "reject", "any"),
    ("notrack udp dport 53", set(), "notrack", "any"),
    ("mark tcp dport 22 to 7", set(), "mark", "any"),
    ("pass tcp dport 22 limit rate 10/second burst 5", set(), "pass", "any"),
    ("dnat tcp dport 8080 to 10.0.0.2:80", set(), "dnat", "any"),
    ("dnat udp dport 53 to [2001:db8::53]:5353", set(), "dnat", "any"),
    ("snat src 10.0.0.0/8 to 203.0.113.2", set(), "snat", "any"),
    ("masquerade", set(), "masquerade", "any"),
    ("redirect tcp dport 80 to :8080", set(), "redirect", "nat"),
    ("redirect udp dst 192.168.64.2 dport 8080 to 10.0.1.2:8083", set(), "redirect",
     "rewrite"),
    ("log tcp dport 22 prefix \"ssh\" rate 5/second", set(), "log", "any"),
)
HOOKS = tuple(b for b in BLOCKS if not BLOCKS[b].per_device)
IFACES = ("eth0", "eth1", "lo", '"eth0.100"', "eth*", "$wan")


def allowed(block: str, fields: set[str], action: str, where: str) -> bool:
    spec = BLOCKS[block]
    if action not in spec.actions or not all(allows_field(spec, f) for f in fields):
        return False
    return where == "any" or (where == "nat") == (spec.kind == "nat")


@st.composite
def _rule(draw, block: str, chains: list[str]) -> str:
    spec = BLOCKS[block]
    pool = [t for t, fields, action, where in V2_RULES if allowed(block, fields, action, where)]
    if chains:
        pool += [f"jump {c} tcp dport 80" for c in chains] + [f"goto {c}" for c in chains]
    if draw(st.booleans()) and pool:
        return draw(st.sampled_from(pool)).format(iface=draw(st.sampled_from(IFACES)))
    text = draw(rule_text(redirect="redirect" in spec.actions and spec.kind != "nat"))
    if text.split()[0] not in spec.actions:  # drop in a nat block: pass instead
        text = "pass" + text[len(text.split()[0]):]
    return text


@st.composite
def _chain_rule(draw, earlier: list[str]) -> str:
    """A rule every block allows (the chain may be jumped to from any of them)."""
    if earlier and draw(st.integers(0, 3)) == 0:
        return f"jump {draw(st.sampled_from(earlier))} udp"
    text = draw(rule_text(redirect=False))
    return draw(st.sampled_from(["pass", "count"])) + text[len(text.split()[0]):]


@st.composite
def firewalls(draw, max_rules: int = 4) -> str:
    """A valid whole firewall."""
    lines = ["define wan = eth0"]
    if draw(st.booleans()):
        lines += ["interface eth0 address 203.0.113.2/24 gateway 203.0.113.1",
                  "interface eth1 address { 10.0.0.1/24, fd00::1/64 }"]
    chains: list[str] = []
    for i in range(draw(st.integers(0, 2))):
        body = draw(st.lists(_chain_rule(chains), min_size=1, max_size=max_rules))
        lines += ["", f"chain c{i} {{", *("    " + r for r in body), "}"]
        chains.append(f"c{i}")
    blocks = draw(st.lists(st.sampled_from(HOOKS + ("ingress eth0", "egress")),
                           min_size=1, max_size=4, unique=True))
    for header in blocks:
        name = header.split(" eth0")[0]
        body = draw(st.lists(_rule(name, chains), min_size=0, max_size=max_rules))
        if BLOCKS[name].has_default and draw(st.booleans()):
            body.insert(0, f"default {draw(st.sampled_from(['pass', 'drop']))}")
        lines += ["", f"{header} {{", *("    " + r for r in body), "}"]
    return "\n".join(lines) + "\n"
