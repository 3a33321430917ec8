"""pcap-filter expressions (tcpdump's): the packets they capture pass, the rest drop."""

from __future__ import annotations

from pfc.frontend.source import SourceFile
from pfc.importers.model import Block, Firewall, Origin, Refusal, Refuse


def import_pcap(sources: list[SourceFile]) -> tuple[Firewall, frozenset[int]]:
    """One expression (a file holding one, or ``--expr``) as an ``ingress`` block:
    ``default drop`` and one ``pass`` rule per conjunction of its disjunctive form."""
    from pfc.importers.pcap.convert import dnf, rule_of
    from pfc.importers.pcap.parse import PcapError, parse
    source = sources[0]
    whole = source.span(0, len(source.text.rstrip()))
    origin = Origin(whole, 1, " ".join(source.text.split()))
    fw = Firewall(source_rules=1)
    fw.header = [f"imported by `pfc import` from {source.name} (pcap-filter): the "
                 "packets `tcpdump` would capture pass, the rest drop",
                 f"expression: {' '.join(source.text.split())[:200]}"]
    block = Block("ingress", default="drop")
    fw.blocks.append(block)
    try:
        tree = parse(source)
        parts = [()] if tree is None else dnf(tree)
        block.items = _families_joined([rule_of(conj, origin) for conj in parts])
    except PcapError as exc:
        fw.refusals.append(Refusal(origin, exc.message, exc.span))
    except Refuse as refused:
        fw.refusals.append(Refusal(origin, refused.reason, refused.at or whole))
    return fw, frozenset((4, 6))


def _families_joined(rules: list) -> list:
    """An IPv4 rule and its IPv6 twin (same words) as one rule for both."""
    from dataclasses import replace
    out: list = []
    for rule in rules:
        twin = next((i for i, r in enumerate(out) if r.family is not None
                     and r.family != rule.family and r.protocol == rule.protocol
                     and r.matches == rule.matches and rule.protocol not in ("ip", "ip6",
                                                                             "icmp")), None)
        if twin is not None and not any(m.field in ("src", "dst") for m in rule.matches):
            out[twin] = replace(out[twin], family=None)
        else:
            out.append(rule)
    return out
