"""The v2 words in iptables (docs/language.md "Whole firewalls"): interface, MAC,
address-type, mark and connection-status matches as alternatives (``lower.Alts``), and
the ``reject``, NAT, ``mark`` and ``notrack`` targets.

Alternatives stay pairwise disjoint (one packet, one line): an interface list keeps
only the patterns no other pattern of it covers (``eth+`` covers ``eth0``), a MAC list
is distinct MACs. What one iptables rule cannot say is a capability error on the rule
(``refusals``): a negated list of interfaces or MACs (iptables takes one ``-i``), an
Ethernet destination (``-m mac`` reads the source only), a mark range of more than
``MARK_VALUES`` values, "not every one of these statuses" (``! --ctstatus A,B`` is
"none of them").
"""

from __future__ import annotations

from pfc.frontend import ir
from pfc.frontend.diagnostics import Diagnostic, error

MARK_VALUES = 16
REJECT_WITH = {  # kind -> (iptables, ip6tables) --reject-with
    "port-unreachable": ("icmp-port-unreachable", "icmp6-port-unreachable"),
    "admin-prohibited": ("icmp-admin-prohibited", "icmp6-adm-prohibited"),
    "host-unreachable": ("icmp-host-unreachable", "icmp6-addr-unreachable"),
    "no-route": ("icmp-net-unreachable", "icmp6-no-route"),
    "tcp-reset": ("tcp-reset", "tcp-reset"),
    # one family's replies: the checker holds their rules to that family
    "proto-unreachable": ("icmp-proto-unreachable", None),
    "net-prohibited": ("icmp-net-prohibited", None),
    "host-prohibited": ("icmp-host-prohibited", None),
    "policy-fail": (None, "icmp6-policy-fail"), "reject-route": (None, "icmp6-reject-route"),
}
_NATIVE = ("iif", "oif", "ether-src", "dst-type", "src-type", "mark", "ct-mark")


def is_v2(m: ir.Match) -> bool:
    return isinstance(m, (ir.IfaceMatch, ir.MacMatch, ir.AddrTypeMatch, ir.CtStatusMatch)) \
        or m.field in ("mark", "ct-mark", "ether-type", "vlan-id")


def match(rule: ir.Rule, m: ir.Match) -> list[tuple[str, ...]]:
    """A v2 match as alternatives: each the arguments of one iptables line."""
    neg = ("!",) if m.negated else ()
    if isinstance(m, ir.IfaceMatch):
        flag = "-i" if m.field == "iif" else "-o"
        return [neg + (flag, _pattern(n)) for n in uncovered(m.names)]
    if isinstance(m, ir.MacMatch):
        return [("-m", "mac") + neg + ("--mac-source", _mac(mac)) for mac in m.macs]
    if isinstance(m, ir.AddrTypeMatch):
        flag = "--dst-type" if m.field == "dst-type" else "--src-type"
        return [("-m", "addrtype") + neg + (flag, ",".join(t.upper() for t in m.types))]
    if isinstance(m, ir.CtStatusMatch):
        if not m.negated:
            return [tuple(a for s in m.statuses for a in _ct_status(s, ()))]
        # `! --ctstate DNAT` holds on packets with no connection: pfc's is absent there
        guard = ("-m", "conntrack", "!", "--ctstate", "INVALID,UNTRACKED")
        return [guard + _ct_status(m.statuses[0], ("!",))]
    module = "mark" if m.field == "mark" else "connmark"
    if _count(m.ranges) > MARK_VALUES:  # `capability` refused it before lowering
        raise ValueError(f"rule {rule.index}: too many {m.field} values for iptables")
    values = [v for lo, hi in m.ranges for v in range(lo, hi + 1)]
    if m.negated:
        return [("-m", module, "!", "--mark", f"{values[0]:#x}")]
    return [("-m", module, "--mark", f"{v:#x}") for v in values]


def _ct_status(status: str, neg: tuple[str, ...]) -> tuple[str, ...]:
    """``snat``/``dnat`` are xt_conntrack's virtual states (``--ctstate DNAT`` tests
    IPS_DST_NAT, as nft's ``ct status dnat``); the other bits are ``--ctstatus``."""
    flag = "--ctstate" if status in ("snat", "dnat") else "--ctstatus"
    return ("-m", "conntrack", *neg, flag, status.upper().replace("-", "_"))


def uncovered(names: tuple[str, ...]) -> list[str]:
    """The patterns of a list no other pattern covers (``eth*`` covers ``eth0`` and
    ``eth1*``), so no name matches two alternatives."""
    def covers(a: str, b: str) -> bool:
        return a != b and a.endswith("*") and b.startswith(a[:-1])
    return [n for n in dict.fromkeys(names) if not any(covers(o, n) for o in names)]


def _pattern(name: str) -> str:
    return name[:-1] + "+" if name.endswith("*") else name


def _mac(mac: bytes) -> str:
    return ":".join(f"{b:02X}" for b in mac)


def refusals(rule: ir.Rule) -> list[str]:
    """Why iptables cannot say this rule (empty when it can)."""
    out = []
    for m in rule.matches:
        if m.field in ("ether-dst", "ether-type", "vlan-id"):
            out.append(f"`{m.field}` (iptables' `-m mac` reads the source only)")
        elif isinstance(m, (ir.IfaceMatch, ir.MacMatch)) and m.negated and \
                len(m.names if isinstance(m, ir.IfaceMatch) else m.macs) > 1:
            out.append(f"a negated list of `{m.field}` (one `-i`/`-o`/`--mac-source` a rule)")
        elif isinstance(m, ir.CtStatusMatch) and m.negated and len(m.statuses) > 1:
            out.append("`!ct status` of several statuses (`! --ctstatus A,B` is none of them)")
        elif m.field in ("mark", "ct-mark") and _count(m.ranges) > (1 if m.negated
                                                                   else MARK_VALUES):
            out.append(f"`{m.field}` with more than {MARK_VALUES} values (or a negated "
                       "range)")
    return out


def _count(ranges) -> int:
    return sum(hi - lo + 1 for lo, hi in ranges)


REJECT_BLOCKS = ("input", "forward", "output")  # xt_REJECT's hooks


def capability(policy: ir.Policy) -> list[Diagnostic]:
    """One error per rule ``refusals`` names."""
    seen, out = set(), []
    for rule in policy.rules:
        reasons = refusals(rule)
        if isinstance(rule.action, ir.Reject) and policy.hook is not None \
                and policy.hook.name not in REJECT_BLOCKS:
            reasons.append(f"`reject` in `{policy.hook.name}` (iptables' REJECT works in "
                           "input, forward and output only)")
        if policy.hook is not None and policy.hook.name in ("postrouting", "nat postrouting") \
                and any(m.field == "iif" for m in rule.matches):
            reasons.append(f"`iif` in `{policy.hook.name}` (iptables takes no `-i` in "
                           "POSTROUTING)")
        if reasons and rule.index not in seen:
            seen.add(rule.index)
            out.append(error(f"target `iptables` cannot express {reasons[0]} (rule at line "
                             f"{rule.line})", rule.span, hint="targets that can: nft",
                             code="unsupported"))
    return out


# --------------------------------------------------------------------------- targets

def target(rule: ir.Rule, family: int) -> str | None:
    """The ``-j`` of a v2 action, or None for an action that is not one."""
    action = rule.action
    if isinstance(action, ir.Reject):
        return f"-j REJECT --reject-with {REJECT_WITH[action.kind][family == 6]}"
    if isinstance(action, ir.Mark):
        return f"-j MARK --set-mark {action.value:#x}"
    if isinstance(action, ir.Notrack):
        return "-j CT --notrack"
    if isinstance(action, ir.Nat):
        return _nat(action)
    return None


def _nat(action: ir.Nat) -> str:
    if action.kind == "masquerade":
        return "-j MASQUERADE"
    if action.kind == "redirect":
        return f"-j REDIRECT --to-ports {action.port}"
    where = str(action.address)
    if action.port is not None:
        where = f"[{where}]:{action.port}" if action.address.version == 6 \
            else f"{where}:{action.port}"
    flag = "--to-destination" if action.kind == "dnat" else "--to-source"
    return f"-j {action.kind.upper()} {flag} {where}"


def needs_protocol(rule: ir.Rule) -> bool:
    """REJECT with tcp-reset, REDIRECT and a NAT with a port take ``-p tcp|udp``
    (xt_REJECT's and the NAT targets' checks read the rule's protocol)."""
    action = rule.action
    if isinstance(action, ir.Reject):
        return action.kind == "tcp-reset"
    return isinstance(action, ir.Nat) and action.port is not None
