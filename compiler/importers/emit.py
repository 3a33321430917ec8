"""The shared rule model printed as a pfc v2 policy (docs/language.md "Whole
firewalls"), before pfc's formatter gives it its canonical form.

Chains come first, each after the chains it jumps to (pfc's rule: a chain may only
use chains above it), then the blocks in path order. Every rule carries a trailing
comment with the source line it came from (both lines when it was merged from an
IPv4 and an IPv6 twin) and the source's own comment. A skipped source rule (refused,
or unreachable in the source itself) stays in its place as a comment line. Chain
names are kept where pfc takes them as written, else made into pfc names (a remark
says which). ``lines`` maps each printed line to its rule, so that what pfc's checker
says about a line can be said about the source rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from pfc.importers.model import Chain, Firewall, Item, Match, Rule, Skipped

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
KEYWORDS = frozenset("""define set file default to drop pass accept count redirect log
prefix rate snap limit burst per audit ct state all ip ip6 tcp udp icmp icmp6 src dst
sport dport proto icmp-type ttl len flags frag payload ingress egress raw nat prerouting
input forward output postrouting chain interface address gateway reject notrack mark
dnat snat masquerade jump goto with status iif oif ether-src ether-dst ether-type
vlan-id icmp-code dst-type src-type""".split())
PIN_ANY = {4: "0.0.0.0/0", 6: "::/0"}
MAX_NAME = 31  # pfc's longest chain name (nft's own limit is longer)
PROTO_KEYWORD = {"6": "tcp", "17": "udp"}
ONE_FAMILY_REPLIES = frozenset(f"with {k}" for k in ("host-prohibited", "net-prohibited",
                                                     "proto-unreachable", "policy-fail",
                                                     "reject-route"))


@dataclass
class Printed:
    text: str
    lines: dict[int, Item] = field(default_factory=dict)  # 1-based line → rule
    renamed: dict[str, str] = field(default_factory=dict)


def _declarations(fw: Firewall, body: list[tuple[str, Item | None]]
                  ) -> list[tuple[str, Item | None]]:
    """The defines and set files the printed rules use (``$name``), and a blank line."""
    used = set(re.findall(r"\$([A-Za-z_][A-Za-z0-9_-]*)",
                          "\n".join(line for line, item in body if item is not None)))
    out = [(f"define {name} = {value}", None) for name, value in fw.defines if name in used]
    out += [(f'set {name} = file "{path}"', None) for name, path, _ in fw.sets
            if name in used]
    return out + [("", None)] if out else out


def emit(fw: Firewall, families: frozenset[int] = frozenset((4, 6))) -> Printed:
    names = _names(fw)
    chains = _ordered_chains(fw.chains, names)
    reach = _reach(fw, chains, families)
    out = Printed("", renamed={k: v for k, v in names.items() if k != v})
    rows: list[tuple[str, Item | None]] = [(f"# {h}" if h else "", None) for h in fw.header]
    if rows:
        rows.append(("", None))
    body: list[tuple[str, Item | None]] = []
    for chain in chains:
        comment = chain.comment or (f"chain {chain.name} of the source"
                                    if names[chain.name] != chain.name else "")
        body += _container(f"chain {names[chain.name]}", chain.items, None, names,
                           reach[chain.name], comment)
    for block in fw.blocks:
        body += _container(block.name, block.items, block.default, names,
                           block.reach or families, block.comment)
    rows += _declarations(fw, body) + body
    text = []
    for number, (line, item) in enumerate(rows, start=1):
        text.append(line)
        if item is not None:
            out.lines[number] = item
    out.text = "\n".join(text).rstrip("\n") + "\n"
    return out


def _container(head: str, items: list[Item], default: str | None, names: dict[str, str],
               reach: frozenset[int], comment: str) -> list[tuple[str, Item | None]]:
    rows: list[tuple[str, Item | None]] = []
    if comment:
        rows.append((f"# {comment}", None))
    rows.append((head + " {", None))
    if default is not None:
        rows.append((f"    default {default}", None))
    for item in items:
        if isinstance(item, Skipped):
            rows.append(("    " + skipped_line(item), item))
        else:
            rows.append(("    " + rule_line(pinned(item, reach), names), item))
    rows.append(("}", None))
    rows.append(("", None))
    return rows


def skipped_line(item: Skipped) -> str:
    text = " ".join(item.origin.text.split())
    return _one_line(f"# {item.origin.where}: {item.why}: {text}")


def rule_line(rule: Rule, names: dict[str, str] | None = None) -> str:
    parts = [rule.action]
    if rule.chain is not None:
        parts.append(names.get(rule.chain, rule.chain) if names else rule.chain)
    protocol, matches = _protocol(rule)
    if protocol:
        parts.append(protocol)
    parts += [m.text() for m in sorted(matches, key=_rank)]
    parts += rule.options
    if rule.to is not None:
        parts.append(f"to {rule.to}")
    return " ".join(parts) + "  " + _one_line("# " + where(rule))


ORDER = ("iif", "oif", "ether-src", "ether-dst", "src", "dst", "proto", "sport", "dport",
         "flags", "icmp-type", "icmp-code", "ttl", "len", "frag", "ct", "ct-status",
         "ct-mark", "mark", "dst-type", "src-type")


def _rank(m: Match) -> int:
    """Matches in the order a person writes them: interfaces, addresses, ports, ..."""
    return ORDER.index(m.field) if m.field in ORDER else len(ORDER)


def where(rule: Rule) -> str:
    places = [o.where for o in (rule.origin, rule.twin) if o is not None]
    text = ", ".join(places)
    if rule.comment:
        text = f"{text}: {rule.comment}" if text else rule.comment
    return text


def _one_line(text: str) -> str:
    return "".join(ch if ch.isprintable() else " " for ch in text)


def _protocol(rule: Rule) -> tuple[str | None, tuple[Match, ...]]:
    """A positive ``proto 6``/``proto 17`` with no protocol is the keyword."""
    if rule.protocol is None:
        for m in rule.matches:
            if m.field == "proto" and not m.negated and len(m.values) == 1 \
                    and m.values[0] in PROTO_KEYWORD:
                return PROTO_KEYWORD[m.values[0]], tuple(x for x in rule.matches
                                                           if x is not m)
    return rule.protocol, rule.matches


def pinned(rule: Rule, reach: frozenset[int]) -> Rule:
    """``rule`` held to its family where other families reach its list and its own
    words do not already hold it (module docstring of ``pfc.importers.families``)."""
    family = rule.family
    if family is None or rule.protocol in ("icmp", "icmp6", "ip", "ip6"):
        return rule
    if reach == {family} and not any(o in ONE_FAMILY_REPLIES for o in rule.options):
        return rule  # (a reply of one family needs a rule that says it, reach or not)
    if any(m.field in ("src", "dst") and not m.negated for m in rule.matches):
        return rule
    protocol, _ = _protocol(rule)
    if protocol is None:
        return replace(rule, protocol="ip" if family == 4 else "ip6")
    return replace(rule, matches=rule.matches + (Match("src", (PIN_ANY[family],)),))


def _names(fw: Firewall) -> dict[str, str]:
    """Each chain's pfc name: as written when pfc takes it, else made one."""
    taken: set[str] = set()
    out: dict[str, str] = {}
    for chain in fw.chains:
        name = chain.name
        if not _NAME.fullmatch(name) or name in KEYWORDS:
            name = re.sub(r"[^A-Za-z0-9_-]", "_", name)
            if not _NAME.fullmatch(name) or name in KEYWORDS:
                name = "c_" + name
        name = name[:MAX_NAME]
        n = 1
        while name in taken:
            n += 1
            name = f"{name[:MAX_NAME - len(str(n)) - 1]}_{n}"
        taken.add(name)
        out[chain.name] = name
    return out


def _ordered_chains(chains: list[Chain], names: dict[str, str]) -> list[Chain]:
    """Callees before callers (iptables and nft refuse loops, so there is an order)."""
    by_name = {c.name: c for c in chains}
    done: list[Chain] = []
    state: dict[str, int] = {}

    def visit(name: str) -> None:
        stack = [(name, iter(_callees(by_name[name])))]
        state[name] = 1
        while stack:
            current, it = stack[-1]
            nxt = next((c for c in it if c in by_name and state.get(c) != 2), None)
            if nxt is None:
                stack.pop()
                state[current] = 2
                done.append(by_name[current])
            elif state.get(nxt) != 1:
                state[nxt] = 1
                stack.append((nxt, iter(_callees(by_name[nxt]))))
            else:
                raise ValueError(f"chains jump in a loop through {nxt}")

    for chain in chains:
        if state.get(chain.name) != 2:
            visit(chain.name)
    return done


def _callees(chain: Chain) -> list[str]:
    return [i.chain for i in chain.items if isinstance(i, Rule) and i.chain is not None]


def _reach(fw: Firewall, chains: list[Chain], families: frozenset[int]
           ) -> dict[str, frozenset[int]]:
    """The IP versions whose packets can reach each chain."""
    reach: dict[str, set[int]] = {c.name: set() for c in chains}

    def note(items: list[Item], here: frozenset[int]) -> None:
        for i in items:
            if isinstance(i, Rule) and i.chain in reach:
                reach[i.chain] |= {i.family} if i.family else here

    for block in fw.blocks:
        note(block.items, block.reach or families)
    for chain in reversed(chains):  # callers after callees: walk callers first
        note(chain.items, frozenset(reach[chain.name]))
    return {k: frozenset(v) for k, v in reach.items()}


