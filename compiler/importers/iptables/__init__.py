"""iptables-save and ip6tables-save dumps (legacy and nft flavours, every table)."""

from __future__ import annotations

from pfc.frontend.source import SourceFile
from pfc.importers.families import Listed, merge
from pfc.importers.iptables.dump import read_dump
from pfc.importers.iptables.tables import read_family
from pfc.importers.model import Firewall, Refusal, Remark


def import_iptables(sources: list[SourceFile]) -> tuple[Firewall, frozenset[int]]:
    """One dump, or a dump and its other family's twin, as one firewall; and the IP
    versions it speaks for."""
    dumps = [read_dump(s) for s in sources]
    families: dict[int, object] = {}
    refusals: list[Refusal] = []
    remarks: list[Remark] = []
    for index, dump in enumerate(dumps):
        family = dump.family or (4 if index == 0 or 4 not in families else 6)
        if family in families:
            family = 6 if family == 4 else 4
            remarks.append(Remark(f"{dump.source.name} read as the IPv{family} dump "
                                  "(the other file is IPv"
                                  f"{4 if family == 6 else 6})", dump.source.span(0, 0)))
        rules = read_family(dump, family)
        refusals += rules.refusals
        remarks += rules.remarks
        blocks = {n: Listed(b.items, b.default, b.policy) for n, b in rules.blocks.items()}
        families[family] = (blocks, rules.chains)
    fw = merge(families)
    fw.refusals, fw.remarks = refusals, remarks
    fw.source_rules = sum(len(t.lines) for d in dumps for t in d.tables.values())
    names = ", ".join(s.name for s in sources)
    fw.header = [f"imported by `pfc import` from {names} (iptables-save)"]
    return fw, frozenset(families)
