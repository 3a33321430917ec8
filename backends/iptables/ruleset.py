"""A whole firewall (v2) as ``iptables-restore`` and ``ip6tables-restore`` files: each
netfilter block in a pfc chain of its table (raw, mangle, nat, filter: the priorities of
``hooks.BLOCKS``), jumped to first from the built-in chain (docs/iptables.md "Whole
firewalls"). ``ingress`` and ``egress`` are not iptables' (no netdev hooks).

Per family one main file (every table, ``--noflush``: pfc's chains are declared, so
they are flushed and refilled, and the jumps deleted and inserted at position 1, as a
v1 load does), one ``.init`` file creating the chains and first jumps, and the ipset
file for lists. ``pass`` is ``RETURN``; a v2 action is its target
(``firewall.target``); a rule that needs ``-p tcp`` for its target (``REJECT
--reject-with tcp-reset``, ``REDIRECT``, a NAT with a port) gets it on IPv6 too.
"""

from __future__ import annotations

from dataclasses import dataclass

from pfc.backends.base import Artifact, Options, artifact_name, printable
from pfc.backends.describe import describe
from pfc.backends.iptables import files as fl
from pfc.backends.iptables import firewall as fw
from pfc.backends.iptables import lower as low
from pfc.backends.iptables import stateful as st
from pfc.frontend import ir
from pfc.frontend.diagnostics import CompileError
from pfc.frontend.firewall.hooks import BLOCKS
from pfc.frontend.firewall.ruleset import Ruleset

TABLES = ("raw", "mangle", "nat", "filter")  # in the order iptables-restore reads them
PLACES = {"raw": "raw", "filter": "filter", "nat": "nat"}
_MANGLE = ("prerouting", "postrouting")  # filter blocks where iptables has no filter


@dataclass(frozen=True)
class Place:
    table: str
    base: str
    chain: str


def place(block: str, prefix: str) -> Place:
    """Where a block's rules go: the table of its priority, the built-in chain of its
    hook, and pfc's chain there (``PFC-INPUT``)."""
    info = BLOCKS[block]
    table = "mangle" if info.kind == "filter" and info.hook in _MANGLE else info.kind
    base = info.hook.upper()
    return Place(table, base, f"{prefix}-{base}")


def emit_ruleset(ruleset: Ruleset, options: Options) -> Artifact:
    prefix = fl.chain_name(options.table)
    diags = [d for p in ruleset.lists for d in fw.capability(p) + st.limits(p)]
    if diags:
        raise CompileError(diags)
    lowering = low.Lowering(options.table.lower())
    first = ruleset.lists[0]
    ipset = artifact_name(first, "iptables", "ipset")
    fams = {family: _family(ruleset, family, lowering, prefix) for family in fl.FAMILIES}
    ipset = ipset if lowering.sets else None
    env = fl.environment()
    macros = env.get_template("iptables_ruleset.j2").make_module({
        "source": printable(ruleset.source), "ipset": ipset})
    files = {f["main"]: str(macros.main(f)) for f in fams.values()}
    files |= {f["init"]: str(macros.init(f)) for f in fams.values()}
    if ipset:
        files[ipset] = fl.ipset_text(env, first, lowering, ipset)
    meta = {"ruleset": ruleset, "table": options.table, "prefix": prefix,
            "places": sorted({(c["table"], c["base"], c["chain"]) for f in fams.values()
                              for t in f["tables"] for c in t["chains"]}),
            "lines": {f["name"]: {c["chain"] + "@" + t["name"]: c["owners"]
                                  for t in f["tables"] for c in t["chains"]}
                      for f in fams.values()},
            "sets": sorted(lowering.sets),
            "files": {"ipv4": fams[4]["main"], "ipv6": fams[6]["main"],
                      "init4": fams[4]["init"], "init6": fams[6]["init"], "ipset": ipset}}
    text = "\n".join(files.values())
    return Artifact("iptables", "ruleset", options.format or "restore", text,
                    {k: v.encode() for k, v in files.items()}, first, meta)


def _family(ruleset: Ruleset, family: int, lowering: low.Lowering, prefix: str) -> dict:
    tool, name, _ = fl.FAMILIES[family]
    tables: dict[str, list[dict]] = {t: [] for t in TABLES}
    for policy in ruleset.lists:
        where = place(policy.hook.name, prefix)
        tables[where.table].append(_chain(policy, family, lowering, where))
    first = ruleset.lists[0]
    return {"tool": tool, "name": name,
            "main": artifact_name(first, tool, "restore"),
            "init": artifact_name(first, tool, "init"),
            "tables": [{"name": t, "chains": cs} for t, cs in tables.items() if cs]}


def _chain(policy: ir.Policy, family: int, lowering: low.Lowering, where: Place) -> dict:
    entries, owners = [], []
    for rule in policy.rules:
        if family not in rule.family.versions:
            continue
        pairs = _lines(rule, family, lowering, policy.default)
        note = "" if pairs else f" (never matches {fl.FAMILIES[family][1]}: left out)"
        entries.append({"index": rule.index, "line": rule.line, "note": note,
                        "text": printable(describe(rule)), "lines": [p for p, _ in pairs]})
        owners += [o for _, o in pairs]
    has_default = BLOCKS[policy.hook.name].has_default
    default = "-j DROP" if policy.default is ir.Verdict.DROP else ""
    return {"table": where.table, "base": where.base, "chain": where.chain,
            "block": policy.hook.name, "entries": entries, "has_default": has_default,
            "default": policy.default.value, "default_line": default,
            "owners": owners + ([None] if has_default else [])}


def _lines(rule: ir.Rule, family: int, lowering: low.Lowering,
           default: ir.Verdict) -> list[tuple[str, int | str]]:
    alts = lowering.rule(rule, family)
    argvs = [a.argv() for a in alts]
    if family == 6 and fw.needs_protocol(rule):
        argvs = [["-p", low.PROTO_NAMES[rule.proto]] + argv for argv in argvs]
    return st.rule_lines(rule, family, argvs, _tail(rule, family), lowering.set_prefix,
                         default)


def _tail(rule: ir.Rule, family: int) -> str | None:
    action = rule.action
    if isinstance(action, ir.Drop) and action.audit:
        return "-j RETURN"
    if isinstance(action, ir.Drop):
        return "-j DROP"
    if isinstance(action, ir.Pass):
        return "-j RETURN"
    if isinstance(action, (ir.Count, ir.Log)):
        return None
    return fw.target(rule, family)
