"""nft base chains as pfc blocks (docs/import.md "nft"): a base chain's hook, type and
priority name the block (``type filter hook prerouting priority raw`` is ``raw
prerouting``, ``priority mangle`` or ``filter`` ``prerouting``, ``type nat`` the nat
block, ``netdev`` chains ``ingress DEV``/``egress DEV``). One base chain per block is
written in it; an ``ip`` and an ``ip6`` chain on one block are merged as iptables' two
families are (``pfc.importers.families``); more than that on one block is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from pfc.importers import flow
from pfc.importers.families import Listed, merged, merged_block, one_family
from pfc.importers.model import Block, Chain, Firewall, Item, Refusal, Refuse, Remark, Skipped
from pfc.importers.nft.ast import NftChain, NftTable, Ruleset
from pfc.importers.nft.compose import compose
from pfc.importers.nft.convert import Context, convert_rule

FAMILY = {"ip": 4, "ip6": 6, "inet": None, "netdev": None}
_IFNAME = re.compile(r"[A-Za-z0-9_.@-]{1,15}")
CONNTRACK, DSTNAT, SRCNAT = -200, -100, 100


@dataclass
class Base:
    block: str
    chain: NftChain
    table: NftTable
    family: int | None
    items: list[Item] = field(default_factory=list)
    device: str | None = None


@dataclass
class _Out:
    refusals: list[Refusal] = field(default_factory=list)
    remarks: list[Remark] = field(default_factory=list)
    blocks: dict = field(default_factory=dict)
    chains: dict = field(default_factory=dict)
    chain_family: dict = field(default_factory=dict)


@dataclass
class _Rules:
    items: list[Item]
    default: str | None


def read_tables(ruleset: Ruleset) -> Firewall:
    out = _Out()
    for problem in ruleset.problems:
        out.refusals.append(Refusal(problem.origin, problem.message, problem.span))
    has_nat = {c.hook for t in ruleset.tables for c in t.chains.values() if c.type == "nat"}
    bases: list[Base] = []
    names = _chain_names(ruleset)
    for table in ruleset.tables:
        if table.family not in FAMILY:
            _refuse_table(out, table, f"{table.family} tables: pfc has no {table.family} "
                          "hooks")
            continue
        for span in table.flowtables:
            out.remarks.append(Remark("flowtable left out: offloaded flows skip the "
                                      "forward hook, which pfc does not model", span))
        bases += _table(out, table, has_nat, names)
    fw = Firewall(remarks=out.remarks, refusals=out.refusals)
    fw.blocks = _blocks(out, bases)
    fw.chains = [Chain(n, items) for n, items in out.chains.items()]
    fw.source_rules = sum(len(c.rules) for t in ruleset.tables for c in t.chains.values())
    return fw


def _chain_names(ruleset: Ruleset) -> dict[tuple[str, str, str], str]:
    """(family, table, chain) → the pfc chain name: the chain's own; ``table-chain``
    when tables of other names have a chain of that name; ``family-table-chain`` when
    tables of one name in other families do. An ``ip`` and an ``ip6`` table of one name
    share their chains' names: such twins become one chain (``_store``)."""
    def domain(t: NftTable) -> str:
        return "ip" if t.family in ("ip", "ip6") else t.family

    owners: dict[str, set] = {}
    for t in ruleset.tables:
        for c in t.chains.values():
            owners.setdefault(c.name, set()).add((domain(t), t.name))
    names = {}
    for t in ruleset.tables:
        for c in t.chains.values():
            found = owners[c.name]
            if len(found) == 1:
                name = c.name
            elif len({n for _, n in found}) == len(found):
                name = f"{t.name}-{c.name}"
            else:
                name = f"{domain(t)}-{t.name}-{c.name}"
            names[(t.family, t.name, c.name)] = name
    return names


def _refuse_table(out: _Out, table: NftTable, reason: str) -> None:
    for chain in table.chains.values():
        for rule in chain.rules:
            out.refusals.append(Refusal(rule.origin, reason, rule.origin.span))


def _table(out: _Out, table: NftTable, has_nat: set, names: dict) -> list[Base]:
    local = _Out()
    ctx = Context(FAMILY[table.family], table.sets, local.remarks)
    bases: list[Base] = []
    blocks: dict[str, _Rules] = {}
    chains: dict[str, list[Item]] = {}
    for chain in table.chains.values():
        items = _items(local, chain, ctx, table, names,
                       NO_DEVICE.get(chain.hook, "") if chain.base else "")
        if not chain.base:
            chains[names[(table.family, table.name, chain.name)]] = items
            continue
        try:
            block = block_of(chain, table, has_nat)
        except Refuse as refused:
            _refuse_chain(local, chain, refused.reason)
            continue
        if chain.type == "nat" and chain.policy != "accept":
            _refuse_chain(local, chain, "a nat chain with policy drop: pfc's nat blocks "
                          "have no default")
            continue
        key = f"{table.name}:{chain.name}"
        default = None if chain.type == "nat" else chain.policy.replace("accept", "pass")
        blocks[key] = _Rules(items, default)
        bases.append(Base(block, chain, table, FAMILY[table.family]))
    flow.resolve(local, blocks, chains)
    out.refusals += local.refusals
    out.remarks += local.remarks
    for name, items in local.chains.items():
        _store(out, name, items, FAMILY[table.family])
    for base in bases:
        base.items = local.blocks.pop(f"{table.name}:{base.chain.name}").items
    return bases


def _store(out: _Out, name: str, items: list[Item], family: int | None) -> None:
    """A chain into the firewall; the twin of an ``ip`` chain in the ``ip6`` table of
    the same name is merged with it (``families``: each rule keeps its family)."""
    if name not in out.chains:
        out.chains[name] = items
        out.chain_family[name] = family
        return
    if out.chain_family[name] == 4:
        out.chains[name] = merged(out.chains[name], items)
    else:
        out.chains[name] = merged(items, out.chains[name])
    out.chain_family[name] = None


# The device a hook's packets have none of: nft's `iif`/`iifname` read 0 and "" there
# (nft_meta_store_ifindex/ifname of a NULL device), so `iif lo` never holds in output
# and `iif != lo` always does.
NO_DEVICE = {"output": "iif", "prerouting": "oif", "input": "oif", "ingress": "oif"}


def _without_device(rules: list, absent: str) -> list:
    """``rules`` of a base chain whose hook has no ``absent`` device: a rule that asks
    for one never matches, a rule that asks for its absence no longer asks."""
    out = []
    for r in rules:
        asks = [m for m in r.matches if m.field == absent]
        if any(not m.negated for m in asks) and not any("*" == x for m in asks
                                                       for x in m.values):
            continue
        out.append(replace(r, matches=tuple(m for m in r.matches
                                            if m.field != absent or not m.negated)))
    return out


def _items(out: _Out, chain: NftChain, ctx: Context, table: NftTable,
           names: dict, absent: str = "") -> list[Item]:
    items: list[Item] = []
    for rule in chain.rules:
        try:
            rules = convert_rule(rule, ctx)
            rules = _without_device(rules, absent) if absent else rules
        except Refuse as refused:
            out.refusals.append(Refusal(rule.origin, refused.reason,
                                        refused.at or rule.origin.span))
            items.append(Skipped(rule.origin, refused.reason))
            continue
        for r in rules:
            if r.chain is not None:
                key = (table.family, table.name, r.chain)
                if key not in names:
                    out.refusals.append(Refusal(rule.origin, f"{r.action} to `{r.chain}`, "
                                                "a chain the table does not have",
                                                rule.origin.span))
                    items.append(Skipped(rule.origin, "jump to a missing chain"))
                    break
                r = _renamed(r, names[key])
            items.append(r)
        else:
            if not rules:
                items.append(Skipped(rule.origin, "does nothing (no statement, or matches "
                                     "that never hold)"))
    return items


def _renamed(rule, name: str):
    return replace(rule, chain=name)


def _refuse_chain(out: _Out, chain: NftChain, reason: str) -> None:
    for rule in chain.rules:
        out.refusals.append(Refusal(rule.origin, reason, rule.origin.span))
    if not chain.rules and chain.policy == "drop":
        out.refusals.append(Refusal(_origin(chain), reason, chain.span))


def _origin(chain: NftChain):
    from pfc.importers.model import Origin
    return Origin(chain.span, 0, f"chain {chain.name}")


def block_of(chain: NftChain, table: NftTable, has_nat: set) -> str:
    """The pfc block a base chain is (module docstring); ``Refuse`` where pfc has none."""
    hook, kind, prio = chain.hook, chain.type, chain.priority or 0
    if table.family == "netdev":
        if hook not in ("ingress", "egress"):
            raise Refuse(f"netdev hook `{hook}`")
        if not chain.devices:
            raise Refuse(f"a netdev {hook} chain without its device")
        if any(not _IFNAME.fullmatch(d) for d in chain.devices):
            raise Refuse(f"netdev {hook} devices {', '.join(chain.devices)}: pfc names "
                         "each device (no patterns)")
        return hook
    if kind == "nat":
        if hook not in ("prerouting", "input", "output", "postrouting"):
            raise Refuse(f"a nat chain on hook `{hook}`")
        return f"nat {hook}"
    if kind not in ("filter", "route"):
        raise Refuse(f"chain type `{kind}`")
    if hook == "prerouting":
        if prio < CONNTRACK:
            return "raw prerouting"
        if prio >= DSTNAT and "prerouting" in has_nat:
            raise Refuse(f"a prerouting filter chain at priority {prio}, after DNAT: "
                         "pfc's prerouting block runs before it (-150)")
        return "prerouting"
    if hook == "output":
        if prio < CONNTRACK:
            return "raw output"
        if prio < DSTNAT and "output" in has_nat:
            raise Refuse(f"an output filter chain at priority {prio}, before the output "
                         "DNAT: pfc's output block runs after it (0)")
        return "output"
    if hook == "postrouting":
        if prio >= SRCNAT and "postrouting" in has_nat:
            raise Refuse(f"a postrouting filter chain at priority {prio}, after SNAT: "
                         "pfc's postrouting block runs before it (-150)")
        return "postrouting"
    if hook == "input" and prio >= SRCNAT and "input" in has_nat:
        raise Refuse(f"an input filter chain at priority {prio}, after the input SNAT")
    if hook in ("input", "forward"):
        return hook
    raise Refuse(f"hook `{hook}`")


def _blocks(out: _Out, bases: list[Base]) -> list[Block]:
    by_block: dict[str, list[Base]] = {}
    for base in bases:  # a netdev chain on several devices is in each device's block
        for device in base.chain.devices or (None,):
            key = base.block + (f" {device}" if device else "")
            by_block.setdefault(key, []).append(replace(base, device=device))
    blocks = []
    for key, group in by_block.items():
        block = _block(out, key, group)
        if block is not None:
            blocks.append(block)
    return blocks


def _block(out: _Out, key: str, group: list[Base]) -> Block | None:
    name = group[0].block
    device = group[0].device
    label = name if not device else f"{name} {_device(device)}"
    families = sorted({b.family for b in group}, key=str)
    if len(group) == 1 and group[0].family is None:
        return Block(label, group[0].items, policy(group[0]))
    if len(group) == 1:
        b = group[0]
        return one_family(label, Listed(b.items, policy(b), None), b.family,
                          why=f"no ip{'' if b.family == 6 else '6'} chain on this hook "
                          "(nft lets it pass)")
    if len(group) == 2 and families == [4, 6]:
        v4, v6 = sorted(group, key=lambda b: b.family)
        return merged_block(label, Listed(v4.items, policy(v4)),
                            Listed(v6.items, policy(v6), None))
    try:
        return compose(label, group, out.chains, policy)
    except Refuse as refused:
        for b in group:
            _refuse_chain(out, b.chain, f"{len(group)} base chains on `{name}`: "
                          f"{refused.reason}")
        return None


def policy(b: Base) -> str | None:
    return None if b.chain.type == "nat" else b.chain.policy.replace("accept", "pass")


def _device(name: str) -> str:
    from pfc.importers.emit import _NAME
    return name if _NAME.fullmatch(name) else f'"{name}"'
