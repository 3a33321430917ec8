"""The v2 keywords, and what pfc says to words of nftables and iptables rulesets
(``iifname``, ``-i eth0``, ``-j REJECT --reject-with icmp-port-unreachable``,
``masq``): hints for syntax errors (``pfc.frontend.hints`` asks here).
"""

from __future__ import annotations

import re

# Each v2 keyword and the grammar terminals it is lexed as (for "did you mean").
V2_KEYWORDS: dict[str, tuple[str, ...]] = {
    **{w: (w.upper(),) for w in ("ingress", "egress", "raw", "nat", "prerouting", "input",
                                 "forward", "output", "postrouting", "chain", "interface",
                                 "address", "gateway", "reject", "notrack", "dnat", "snat",
                                 "masquerade", "jump", "goto", "with", "status")},
    "mark": ("MARK", "V2FIELD"),
    **{w: ("V2FIELD",) for w in ("iif", "oif", "ether-src", "ether-dst", "ether-type",
                                 "vlan-id", "icmp-code", "dst-type", "src-type")},
}

_IFACE = "pfc writes the interface as `{0} NAME` (`{0} eth0`, `{0} \"eth*\"` or `{0} eth*`)"
WORD_HINTS = {
    "iifname": _IFACE.format("iif"), "oifname": _IFACE.format("oif"),
    "meta": "write the match alone: nft's `meta iifname eth0` is `iif eth0`, `meta mark 1` "
            "is `mark 1`",
    "masq": "write `masquerade`",
    "saddr": "write `src ADDRESS`", "daddr": "write `dst ADDRESS`",
    "counter": "every pfc rule counts its packets; `count` is a rule that only counts",
    "policy": "a block's default is a statement of its own: `default drop`",
    "hook": "a block is named by its hook: `input {`, `nat prerouting {`",
    "icmpx": "the reply is one word for IPv4 and IPv6: `reject with admin-prohibited`",
    "ct-state": "write `ct state established,related`",
    "state": "write `ct state established,related`",
}
_DASH = re.compile(r"-?([A-Za-z][A-Za-z-]*)[ \t]*(\S*)")
_DASH_HINTS = {
    "i": "iptables' `-i DEV` is `iif DEV` in pfc", "in-interface": "iptables' `-i DEV` is "
    "`iif DEV` in pfc", "o": "iptables' `-o DEV` is `oif DEV` in pfc",
    "out-interface": "iptables' `-o DEV` is `oif DEV` in pfc",
    "j": "the action starts the rule: `-j ACCEPT` is `pass ...`, `-j REJECT` is "
         "`reject ...`", "jump": "the action starts the rule: `-j ACCEPT` is `pass ...`",
    "s": "write `src ADDRESS`", "d": "write `dst ADDRESS`", "p": "write the protocol "
    "after the action: `pass tcp ...`", "dport": "write `dport PORT`",
    "sport": "write `sport PORT`", "state": "write `ct state S,S`",
    "ctstate": "write `ct state S,S`", "to-destination": "write `dnat ... to ADDR[:PORT]`",
    "to-source": "write `snat ... to ADDR[:PORT]`", "to-ports": "write `redirect ... to :PORT`",
    "set-mark": "write `mark ... to N`",
}


def word_hint(word: str) -> str | None:
    return WORD_HINTS.get(word.lower())


def dash_hint(before: str, after: str) -> str | None:
    """An iptables option where pfc expected something else: ``-i eth0``,
    ``--reject-with icmp-port-unreachable``."""
    m = _DASH.match(after)
    if m is None or before.rstrip().endswith(tuple("0123456789")):
        return None
    option, arg = m.group(1).lower(), m.group(2)
    if option == "reject-with":
        reply = arg.lower().removeprefix("icmp6-").removeprefix("icmp-") or "port-unreachable"
        reply = {"net-unreachable": "no-route", "tcp-rst": "tcp-reset",
                 "adm-prohibited": "admin-prohibited", "addr-unreachable": "host-unreachable",
                 "proto-unreachable": "proto-unreachable"}.get(reply, reply)
        return f"iptables' `--reject-with {arg}` is `reject ... with {reply}` in pfc"
    return _DASH_HINTS.get(option)


def v2_candidates(expected) -> list[str]:
    """The v2 keywords the parser could take where ``expected`` are the terminals."""
    return [w for w, terminals in V2_KEYWORDS.items() if any(t in expected for t in terminals)]
