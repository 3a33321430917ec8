"""A rule in plain English, from its checked IR (names resolved, values normalised).

``drop udp dst $dut dport 12345`` reads "drops UDP packets to 192.168.0.79 with
destination port 12345". Long lists are summarised ("any of the 120 prefixes in
$blocklist"); the wording follows language.md's tables, and only says what the IR says.
"""

from __future__ import annotations

from pfc.frontend import ir

_VERBS = {"drop": "drops", "pass": "passes", "count": "counts", "redirect": "redirects",
          "log": "logs", "reject": "rejects", "notrack": "exempts from conntrack",
          "mark": "marks", "dnat": "translates the destination of",
          "snat": "translates the source of", "masquerade": "masquerades",
          "jump": "sends", "goto": "sends"}
_NOUNS = {"tcp": "TCP packets", "udp": "UDP packets", "icmp": "ICMP packets",
          "icmp6": "ICMPv6 packets", "ip": "IPv4 packets", "ip6": "IPv6 packets"}
_FAMILY_NOUNS = {ir.Family.ANY: "all frames (IP or not)", ir.Family.IP: "IP packets",
                 ir.Family.IP4: "IPv4 packets", ir.Family.IP6: "IPv6 packets"}
_INT_WHAT = {"sport": "source port", "dport": "destination port", "len": "IP length",
             "proto": "IP protocol", "icmp-type": "ICMP type", "icmp-code": "ICMP code",
             "vlan-id": "VLAN id", "mark": "mark", "ct-mark": "connection mark",
             "ether-type": "EtherType"}
_V2_WITH = {"iif": "that arrive on", "oif": "that leave by", "ether-src": "Ethernet source",
            "ether-dst": "Ethernet destination", "dst-type": "destination of type",
            "src-type": "source of type", "ct-status": "connection status"}
_PROTO_NAMES: dict[int, str] = {}
for _name, _number in ir.PROTO_NUMBERS.items():
    _PROTO_NAMES.setdefault(_number, _name)
LIST_LIMIT = 5  # longer lists are summarised


def reading(rule: ir.Rule) -> str:
    """One line: verb, what packets, then each match in source order."""
    text = f"{_VERBS[rule.action.name]} {_noun(rule)}"
    places = [_address(m) for m in rule.matches if isinstance(m, ir.AddrMatch)]
    withs = [_with(m, rule) for m in rule.matches if not isinstance(m, ir.AddrMatch)]
    if places:
        text += " " + " ".join(places)
    clauses = [w for w in withs if not w.startswith("that ")]
    if clauses:
        text += " with " + " and ".join(clauses)
    text += "".join(" " + w for w in withs if w.startswith("that "))
    if rule.limit is not None:
        text += " " + _limit(rule.limit)
    return text + _tail(rule.action)


def _rate(rate: ir.Rate) -> str:
    return f"{rate.count}/{rate.unit} (bursts up to {rate.capacity})"


def _limit(limit: ir.Limit) -> str:
    per = {"src": " per source address", "dst": " per destination address"}
    return f"beyond {_rate(limit.rate)}{per.get(limit.per, '')}"


def _noun(rule: ir.Rule) -> str:
    return _NOUNS.get(rule.proto_name) or _FAMILY_NOUNS[rule.family]


def _tail(action: ir.Action) -> str:
    if isinstance(action, ir.Redirect):
        port = f" port {action.port}" if action.port is not None else ""
        return f", rewriting their destination to {action.address}{port}"
    if isinstance(action, ir.Count):
        return ", then goes on with the next rule"
    if isinstance(action, ir.Log):
        what = f' with prefix "{action.prefix}"' if action.prefix else ""
        rate = f", at most {_rate(action.rate)}" if action.rate else ""
        return (f"{what} (the first {action.snap} bytes{rate}), then goes on with the "
                "next rule")
    if isinstance(action, ir.Drop) and action.audit:
        return " in audit mode: they pass, counted and logged as would-be drops"
    return _v2_tail(action)


def _v2_tail(action: ir.Action) -> str:
    if isinstance(action, ir.Reject):
        return f", answering with {action.kind}"
    if isinstance(action, ir.Mark):
        return f" with {action.value} (0x{action.value:x}), then goes on with the next rule"
    if isinstance(action, ir.Notrack):
        return ", then goes on with the next rule"
    if isinstance(action, ir.Jump):
        rest = "the block's default" if action.goto else "the rule after this one"
        return f" to chain {action.chain} (undecided: {rest})"
    if isinstance(action, ir.Nat) and action.kind in ("dnat", "snat"):
        port = f" port {action.port}" if action.port is not None else ""
        return f", to {action.address}{port}"
    if isinstance(action, ir.Nat) and action.kind == "redirect":
        return f" to the host itself, port {action.port}" if action.port is not None \
            else " to the host itself"
    return ""


def _address(m: ir.AddrMatch) -> str:
    word = "from" if m.field == "src" else "to"
    shown = [str(p.network_address) if p.num_addresses == 1 else str(p) for p in m.prefixes]
    what = _summary(shown, m.set_name, "prefixes")
    return f"not {word} {what}" if m.negated else f"{word} {what}"


def _with(m: ir.Match, rule: ir.Rule) -> str:
    if isinstance(m, ir.IntMatch):
        shown = [_int(lo, m.field, rule) if lo == hi else f"{lo}-{hi}" for lo, hi in m.ranges]
        values = _summary(shown, m.set_name, "values")
        return f"{_int_what(m.field, rule)} {'other than ' if m.negated else ''}{values}"
    if isinstance(m, ir.FlagsMatch):
        return _flags(m)
    if isinstance(m, ir.FragMatch):
        return "that are not IPv4 fragments" if m.negated else "that are IPv4 fragments"
    if isinstance(m, ir.CtMatch):
        states = " or ".join(m.states)
        return f"connection state {'other than ' if m.negated else ''}{states}"
    if isinstance(m, ir.PayloadMatch):
        return _payload(m)
    return _v2_with(m)


def _v2_with(m: ir.Match) -> str:
    if isinstance(m, ir.MacMatch):
        values = [":".join(f"{b:02x}" for b in mac) for mac in m.macs]
    elif isinstance(m, ir.CtStatusMatch):
        return f"connection status {'not ' if m.negated else ''}{' and '.join(m.statuses)}"
    else:
        values = list(getattr(m, "names", None) or getattr(m, "types", ()))
    shown = _summary(values, getattr(m, "set_name", None), "values")
    what = _V2_WITH[m.field]
    if m.negated and what.startswith("that "):
        return f"that do not {what[5:]} {shown}"
    return f"{what} {'none of ' if m.negated else ''}{shown}"


def _int_what(field: str, rule: ir.Rule) -> str:
    if field == "ttl":
        return {ir.Family.IP4: "TTL", ir.Family.IP6: "hop limit"}.get(rule.family,
                                                                       "TTL (hop limit)")
    if field == "icmp-type" and rule.proto == ir.ICMP6:
        return "ICMPv6 type"
    return _INT_WHAT[field]


def _int(value: int, field: str, rule: ir.Rule) -> str:
    if field == "proto":
        return _PROTO_NAMES.get(value, str(value))
    if field == "icmp-type":
        names = ir.ICMP6_TYPES if rule.proto == ir.ICMP6 else ir.ICMP_TYPES
        return next((n for n, v in names.items() if v == value), str(value))
    return str(value)


def _summary(items: list[str], set_name: str | None, what: str) -> str:
    if len(items) > LIST_LIMIT:
        where = f" in ${set_name}" if set_name else ""
        return f"any of the {len(items)} {what}{where}"
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " or " + items[-1]


def _flags(m: ir.FlagsMatch) -> str:
    def names(bits: int) -> str:
        found = [n.upper() for n, v in ir.TCP_FLAGS.items() if bits & v]
        return found[0] if len(found) == 1 else ", ".join(found[:-1]) + " and " + found[-1]

    parts = ([f"{names(m.set)} set"] if m.set else []) + \
            ([f"{names(m.clear)} clear"] if m.clear else [])
    text = " and ".join(parts)
    return f"TCP flags other than {text}" if m.negated else text


def _payload(m: ir.PayloadMatch) -> str:
    where = (f"payload byte {m.offset}" if len(m.data) == 1
             else f"payload bytes {m.offset}-{m.offset + len(m.data) - 1}")
    text = m.data.decode("ascii") if m.data.isascii() and m.data.decode().isprintable() \
        else "0x" + m.data.hex()
    shown = f'"{text}"' if not text.startswith("0x") else text
    return f"{where} {'not ' if m.negated else ''}equal to {shown}"
