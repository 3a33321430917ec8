"""Two families' rule lists as one policy (an iptables-save dump and its
ip6tables-save twin, nft's ``ip`` and ``ip6`` tables).

A pfc block holds both families' rules. Each block and each chain is merged from its
IPv4 and IPv6 lists by a longest common subsequence of what the rules do: a rule in
both lists is written once, for both families; a rule in one list keeps its family
(the emitter pins it: ``ip``, ``ip6``, or an address of the family when the rule's
words do not already say it). An IPv4 packet meets exactly the IPv4 list's rules, in
their order, and so does an IPv6 packet: the merge changes no verdict. Block
defaults that differ become a last rule for one family (``drop ip6``).

With one family only, every block starts with ``pass`` for the other family (``pass
ip6``): what an empty ip6tables does with IPv6 (docs/import.md "One family").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from difflib import SequenceMatcher

from pfc.importers.model import Block, Chain, Firewall, Item, Origin, Rule, Skipped

PATH_ORDER = ("raw prerouting", "prerouting", "nat prerouting", "input", "nat input",
              "forward", "raw output", "nat output", "output", "postrouting",
              "nat postrouting")
OTHER = {4: 6, 6: 4}
FAMILY_WORD = {4: "ip", 6: "ip6"}


@dataclass
class Listed:
    """One family's block: its items, default (None: nat) and the policy's line."""

    items: list[Item]
    default: str | None
    policy: Origin | None = None


def merge(families: dict[int, tuple[dict[str, Listed], dict[str, list[Item]]]],
          why: str = "not in the dump (an empty {tool} accepts it)") -> Firewall:
    """``families``: IP version → (blocks by name, chains by name). ``why``: the
    comment of the first rule that lets the other family pass, when there is one."""
    fw = Firewall()
    if len(families) == 1:
        (family, (blocks, chains)), = families.items()
        for name in _ordered(blocks):
            fw.blocks.append(one_family(name, blocks[name], family, why))
        fw.chains = [Chain(n, list(items)) for n, items in chains.items()]
        return fw
    (b4, c4), (b6, c6) = families[4], families[6]
    for name in _ordered({**b4, **b6}):
        fw.blocks.append(merged_block(name, b4.get(name), b6.get(name)))
    for name in list(dict.fromkeys([*c4, *c6])):
        fw.chains.append(Chain(name, merged(c4.get(name, []), c6.get(name, []))))
    return fw


def _ordered(blocks: dict) -> list[str]:
    return sorted(blocks, key=lambda n: PATH_ORDER.index(n) if n in PATH_ORDER else 99)


def one_family(name: str, listed: Listed, family: int,
               why: str = "not in the dump (an empty {tool} accepts it)") -> Block:
    other = OTHER[family]
    items = list(listed.items)
    if items or listed.default == "drop":
        tool = f"ip{'6' if other == 6 else ''}tables"
        items.insert(0, Rule("pass", None, FAMILY_WORD[other], family=other,
                             comment=f"IPv{other}: " + why.format(tool=tool)))
    return Block(name, items, listed.default, reach=frozenset((family,)))


def merged_block(name: str, a: Listed | None, b: Listed | None) -> Block:
    a = a or Listed([], "pass" if (b and b.default) else None)
    b = b or Listed([], "pass" if a.default else None)
    items = merged(a.items, b.items)
    default = a.default
    if a.default != b.default:
        items.append(Rule(b.default or "pass", b.policy, FAMILY_WORD[6], family=6,
                          comment="ip6tables' policy"))
    return Block(name, items, default)


def merged(a: list[Item], b: list[Item]) -> list[Item]:
    """IPv4 list ``a`` and IPv6 list ``b`` as one list (module docstring)."""
    keys_a, keys_b = [_key(i) for i in a], [_key(i) for i in b]
    out: list[Item] = []
    matcher = SequenceMatcher(None, keys_a, keys_b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            out += [_both(x, y) for x, y in zip(a[i1:i2], b[j1:j2], strict=True)]
        else:
            out += a[i1:i2] + b[j1:j2]
    return out


def _key(item: Item) -> object:
    if isinstance(item, Skipped):
        return ("skipped", id(item))
    return item.key()


def _both(item: Item, twin: Item) -> Item:
    if isinstance(item, Rule):
        return replace(item, family=None, comment=item.comment or twin.comment,
                       twin=twin.origin if twin.origin != item.origin else None)
    return item
