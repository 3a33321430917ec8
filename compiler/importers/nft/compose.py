"""Several nft base chains on one hook as one pfc block (docs/import.md "Several base
chains on one hook").

netfilter runs every base chain of a hook in priority order: ``drop`` in any ends the
packet, ``accept`` (or falling off a chain whose policy is accept) only ends that
chain and the next one runs; the packet is accepted when the last one accepts. In pfc
the block is the first chain's rules; each chain's ``accept`` becomes ``goto`` the next
chain (``NAME-then``: a pfc chain holding the next base chain's rules, and so on), and
falling off a chain with policy accept is ``goto`` the next as well; the last chain's
``accept`` is pfc's ``pass`` and its policy the block's default. A chain of one family
(an ``ip`` table's) lets the other family go on first (``goto NEXT ip6``). Chains
jumped to from a base chain get the same rewrite (a copy per base chain when two
share one). A base chain that ``goto``s somewhere would fall back to its own policy,
not the next chain's: refused.
"""

from __future__ import annotations

from dataclasses import replace

from pfc.importers.model import Block, Item, Refuse, Rule

FAMILY_WORD = {4: "ip", 6: "ip6"}
MAX_STAGES = 8


def compose(label: str, group: list, chains: dict[str, list[Item]], policy) -> Block:
    """``group``: the base chains of one block (``.items``, ``.family``, ``.chain``),
    in any order; ``chains``: the firewall's chains (rewritten copies added)."""
    group = sorted(group, key=lambda b: b.chain.priority or 0)
    if len(group) > MAX_STAGES:
        raise Refuse(f"more than {MAX_STAGES} base chains on one hook (pfc's gotos nest "
                     "16 deep)")
    for base in group[:-1]:
        if any(isinstance(i, Rule) and i.action == "goto" for i in base.items):
            raise Refuse(f"base chain `{base.chain.name}` uses goto and another base chain "
                         "runs after it on the hook")
    names: list[str | None] = [None]
    for b in group[1:]:
        names.append(_fresh(f"{_short(b.chain.name)}-then", chains))
        chains[names[-1]] = []
    for i in range(len(group) - 1, 0, -1):  # the later chains first: they are goto'd
        nxt = names[i + 1] if i + 1 < len(group) else None
        chains[names[i]] = _rewritten(group[i], nxt, chains, policy, i)
    first = _rewritten(group[0], names[1], chains, policy, 0)
    return Block(label, first, policy(group[-1]))


def _rewritten(base, nxt: str | None, chains: dict, policy, index: int) -> list[Item]:
    """One base chain's rules for its place in the pipeline (``nxt``: the next)."""
    items = list(base.items)
    if nxt is None:
        if base.family is not None:
            other = 6 if base.family == 4 else 4
            items.insert(0, Rule("pass", None, FAMILY_WORD[other], family=other,
                                 comment="the last base chain sees one family"))
        return items
    items = _redirected(items, nxt, chains, index)
    if base.family is not None:
        other = 6 if base.family == 4 else 4
        items.insert(0, Rule("goto", None, FAMILY_WORD[other], chain=nxt, family=other,
                             comment=f"IPv{other} skips this {FAMILY_WORD[base.family]} "
                             "chain"))
    own = policy(base)
    items.append(Rule("drop" if own == "drop" else "goto", None,
                      chain=None if own == "drop" else nxt,
                      comment=f"policy {base.chain.policy} of {base.chain.name}"))
    return items


def _redirected(items: list[Item], nxt: str, chains: dict, index: int) -> list[Item]:
    """``pass`` → ``goto nxt`` in ``items`` and in every chain they jump to (a copy,
    ``NAME-N``, when the chain is not only this pipeline stage's)."""
    out = []
    for item in items:
        if isinstance(item, Rule) and item.action == "pass":
            item = replace(item, action="goto", chain=nxt, options=())
        elif isinstance(item, Rule) and item.action in ("jump", "goto") and \
                item.chain in chains:
            copy = _fresh(f"{_short(item.chain)}-{index + 1}", chains)
            chains[copy] = []
            chains[copy] = _redirected(chains[item.chain], nxt, chains, index)
            item = replace(item, chain=copy)
        out.append(item)
    return out


def _short(name: str) -> str:
    return name[:24]


def _fresh(name: str, taken) -> str:
    n = 1
    base = name
    while name in taken:
        n += 1
        name = f"{base}{n}"
    return name
