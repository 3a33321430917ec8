"""Whole firewalls built in Python for the path interpreter's tests (no parser needed):
``rule("pass", "tcp", dport=22, iif="eth1")`` and ``ruleset({"input": [...]})``."""

from __future__ import annotations

import ipaddress
import itertools

from pfc.frontend import ir
from pfc.frontend.firewall.ruleset import Interface, Ruleset

_index = itertools.count()


def rule(action: str | ir.Action, proto: str = "all", **fields) -> ir.Rule:
    """A rule; ``fields`` by name (``dport=22``, ``src="10.0.0.0/8"``, ``iif="eth0"``,
    ``ct_state=("established",)``, ``ct_status=("dnat",)``, ``icmp_type=8``,
    ``limit=(10, "second", 10)``)."""
    number, family = ir.PROTOCOLS[proto]
    act = {"pass": ir.Pass(), "drop": ir.Drop(), "count": ir.Count()}.get(action, action)
    matches, limit = [], None
    for name, value in fields.items():
        if name == "limit":
            limit = ir.Limit(ir.Rate(value[0], value[1], value[2]))
        else:
            matches.append(_match(name.replace("_", "-"), value))
    if isinstance(act, ir.Nat) and act.address is not None:
        family = ir.Family.of_versions({act.address.version})
    for m in matches:
        if isinstance(m, ir.AddrMatch):
            family = ir.Family.of_versions({p.version for p in m.prefixes})
        elif family is ir.Family.ANY and m.field in ("ct", "ct-status"):
            family = ir.Family.IP
    index = next(_index)
    return ir.Rule(index, act, family, number, tuple(matches), proto_name=proto,
                   line=index + 1, limit=limit)


def _match(field: str, value) -> ir.Match:
    if field in ("src", "dst"):
        values = value if isinstance(value, tuple) else (value,)
        return ir.AddrMatch(field, tuple(ipaddress.ip_network(v) for v in values))
    if field in ("iif", "oif"):
        return ir.IfaceMatch(field, value if isinstance(value, tuple) else (value,))
    if field == "ct-state":
        return ir.CtMatch(tuple(s for s in ir.CT_STATES if s in value))
    if field == "ct-status":
        return ir.CtStatusMatch(tuple(value))
    if field in ("dst-type", "src-type"):
        return ir.AddrTypeMatch(field, tuple(value))
    values = value if isinstance(value, tuple) else (value,)
    return ir.IntMatch(field, tuple((v, v) if isinstance(v, int) else v for v in values))


def ruleset(blocks: dict[str, list[ir.Rule] | tuple], interfaces=(),
            defaults: dict[str, str] | None = None) -> Ruleset:
    lists = []
    for name, rules in blocks.items():
        default = ir.Verdict((defaults or {}).get(name, "pass"))
        lists.append(ir.Policy(tuple(rules), default, hook=ir.Hook(name)))
    ifaces = tuple(Interface(n, tuple(ipaddress.ip_interface(a) for a in addrs),
                             ipaddress.ip_address(gw) if gw else None)
                   for n, addrs, gw in interfaces)
    return Ruleset(tuple(lists), (), ifaces, "<test>")
