"""A whole firewall (v2) as one nftables ruleset: ``table inet TABLE`` with a base chain
per netfilter block and ``table netdev TABLE`` with a base chain per device of each
``ingress``/``egress`` block, in one ``nft -f`` transaction (docs/nft.md "Whole
firewalls").

Each block's rules are lowered exactly as a v1 policy's (``backend.entries``, chains
inlined by ``build_ruleset``); a block's chain has the priority of its table in
iptables (``hooks.BLOCKS``), ``policy accept`` and the block's default as its last rule
(nat blocks have none). Both tables are deleted first, so a load replaces pfc's
previous firewall whole, including a table the new one no longer uses.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from pfc.backends.base import Artifact, Options, artifact_name, check_dev, check_name, printable
from pfc.backends.nft import chain as ch
from pfc.backends.nft import lower as low
from pfc.frontend import ir
from pfc.frontend.diagnostics import CompileError, error
from pfc.frontend.firewall.hooks import BLOCKS
from pfc.frontend.firewall.ruleset import Ruleset

FAMILIES = ("inet", "netdev")


@dataclass
class Chain:
    name: str
    block: str
    line: int
    type: str
    hook: str
    priority: int
    dev: str | None
    entries: list[ch.Entry]
    default: low.NftRule | None
    default_name: str = "pass"


@dataclass
class Table:
    family: str
    lowering: low.Lowering
    chains: list[Chain] = field(default_factory=list)
    counters: list[str] = field(default_factory=list)


def lower(ruleset: Ruleset, options: Options) -> list[Table]:
    tables = {f: Table(f, low.Lowering(f)) for f in FAMILIES}
    names: set[str] = set()
    for policy in ruleset.lists:
        block = BLOCKS[policy.hook.name]
        table = tables["netdev" if block.per_device else "inet"]
        for dev in _devices(policy, options) if block.per_device else [None]:
            name = _chain_name(policy.hook.name, dev, names)
            table.chains.append(_chain(policy, table.lowering, name, dev))
        table.counters += [ch.counter_name(r.index) for r in policy.count_rules]
    for table in tables.values():
        table.counters = list(dict.fromkeys(table.counters))
    return list(tables.values())


def _devices(policy: ir.Policy, options: Options) -> list[str]:
    devices = list(policy.hook.devices) or ([options.dev] if options.dev else [])
    if not devices:
        raise CompileError([error(
            f"target `nft`: the `{policy.hook.name}` block names no device: write "
            f"`{policy.hook.name} eth0 {{` or pass --dev DEV", policy.hook.span,
            code="no-device")])
    return [check_dev(d) for d in devices]


def _chain_name(block: str, dev: str | None, taken: set[str]) -> str:
    base = block.replace(" ", "_") + (f"_{re.sub(r'[^A-Za-z0-9_]', '_', dev)}" if dev else "")
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    taken.add(name)
    return check_name(name[:31], "chain")


def _chain(policy: ir.Policy, lowering: low.Lowering, name: str, dev: str | None) -> Chain:
    block = BLOCKS[policy.hook.name]
    found = ch.entries(policy, lowering)
    default = ch.default_rule(policy) if block.has_default else None
    hook = block.hook
    priority = block.priority if block.priority is not None else 0
    return Chain(name, block.name, _line(policy), "nat" if block.kind == "nat" else "filter",
                 hook, priority, dev, found, default, policy.default.value)


def _line(policy: ir.Policy) -> int:
    return min((r.line for r in policy.rules), default=0)


# ------------------------------------------------------------------------ printing

def emit_ruleset(ruleset: Ruleset, options: Options) -> Artifact:
    tables = lower(ruleset, options)
    table = check_name(options.table, "table")
    fmt = options.format or "nft"
    text = render_text(ruleset, tables, table) if fmt == "nft" else \
        json.dumps(render_json(tables, table), indent=1) + "\n"
    first = ruleset.lists[0]
    name = artifact_name(first, "nft", "nft" if fmt == "nft" else "json")
    meta = {"ruleset": ruleset, "table": table,
            "tables": [t.family for t in tables if t.chains],
            "chains": {c.name: (t.family, c.block, c.dev) for t in tables for c in t.chains},
            "counters": {r.index: ch.counter_name(r.index)
                         for p in ruleset.lists for r in p.count_rules},
            "text" if fmt == "nft" else "json": text}
    return Artifact("nft", "ruleset", fmt, text, {name: text.encode()}, first, meta)


def render_text(ruleset: Ruleset, tables: list[Table], table: str) -> str:
    return ch.environment().get_template("nft_ruleset.j2").render(
        source=printable(ruleset.source), table=table,
        tables=[_table_view(t) for t in tables])


def _table_view(t: Table) -> dict:
    entries = [e for c in t.chains for e in c.entries]
    return {"family": t.family, "counters": t.counters,
            "sets": [{"name": s.name, "type": s.type, "interval": s.interval,
                      "lines": ch.element_lines(s)} for s in t.lowering.sets.values()],
            "fix_chains": {n: [r.text for r in rules]
                           for n, rules in ch.fix_chains(entries).items()},
            "chains": [{"name": c.name, "block": c.block, "line": c.line, "type": c.type,
                        "hook": c.hook, "priority": c.priority, "dev": c.dev,
                        "entries": [{"index": e.index, "line": e.line, "text": e.text,
                                     "note": e.note, "lines": [r.text for r in e.rules]}
                                    for e in c.entries],
                        "default": c.default_name,
                        "default_line": c.default.text if c.default else ""}
                       for c in t.chains]}


def render_json(tables: list[Table], table: str) -> dict:
    """The same ruleset as libnftables JSON commands (``nft -j -f``)."""
    cmds: list[dict] = []
    for t in tables:
        one = {"family": t.family, "name": table}
        cmds += [{"add": {"table": one}}, {"delete": {"table": one}}]
    for t in (t for t in tables if t.chains):
        cmds += _table_json(t, table)
    return {"nftables": [{"metainfo": {"json_schema_version": 1}}] + cmds}


def _table_json(t: Table, table: str) -> list[dict]:
    where = {"family": t.family, "table": table}
    cmds = [{"add": {"table": {"family": t.family, "name": table}}}]
    cmds += [{"add": {"counter": {**where, "name": c}}} for c in t.counters]
    for s in t.lowering.sets.values():
        one = {**where, "name": s.name, "type": s.type, "elem": [e.json for e in s.elements]}
        if s.interval:
            one["flags"] = ["interval"]
        cmds.append({"add": {"set": one}})
    fixes = ch.fix_chains([e for c in t.chains for e in c.entries])
    cmds += [{"add": {"chain": {**where, "name": n}}} for n in fixes]
    for n, rules in fixes.items():
        cmds += [{"add": {"rule": r.json(t.family, table, n)}} for r in rules]
    for c in t.chains:
        chain = {**where, "name": c.name, "type": c.type, "hook": c.hook, "prio": c.priority,
                 "policy": "accept"}
        if c.dev:
            chain["dev"] = c.dev
        cmds.append({"add": {"chain": chain}})
        rules = [r for e in c.entries for r in e.rules] + ([c.default] if c.default else [])
        cmds += [{"add": {"rule": r.json(t.family, table, c.name)}} for r in rules]
    return cmds
