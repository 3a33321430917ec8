"""One family's tables (an iptables-save or ip6tables-save dump) as pfc blocks and
chains.

Where each built-in chain goes: filter INPUT/FORWARD/OUTPUT are the ``input``,
``forward``, ``output`` blocks; nat's chains the nat blocks; raw PREROUTING/OUTPUT
``raw prerouting``/``raw output``; mangle PREROUTING/POSTROUTING ``prerouting`` and
``postrouting`` (pfc's blocks at mangle's priority, -150). Mangle INPUT, FORWARD and
OUTPUT run at -150 on the hooks whose pfc block is filter's (0): each becomes a chain
``mangle-INPUT`` ... jumped to first in its block, its ACCEPT a return to the filter
rules (docs/import.md "Tables"). User chains keep their names (other tables' chains
get the table's name in front: ``nat-DOCKER``).

RETURN and ``-g`` are rewritten here, since pfc has neither a return nor iptables'
goto-with-a-stack (``pfc.importers.iptables.flow``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pfc.importers import flow
from pfc.importers.iptables.dump import BUILTIN, Dump, Line
from pfc.importers.iptables.matches import convert_matches
from pfc.importers.iptables.targets import convert_target
from pfc.importers.iptables.words import read_words
from pfc.importers.model import Item, Match, Origin, Refusal, Refuse, Remark, Rule, Skipped

BLOCKS = {("filter", "INPUT"): "input", ("filter", "FORWARD"): "forward",
          ("filter", "OUTPUT"): "output", ("nat", "PREROUTING"): "nat prerouting",
          ("nat", "INPUT"): "nat input", ("nat", "OUTPUT"): "nat output",
          ("nat", "POSTROUTING"): "nat postrouting", ("raw", "PREROUTING"): "raw prerouting",
          ("raw", "OUTPUT"): "raw output", ("mangle", "PREROUTING"): "prerouting",
          ("mangle", "POSTROUTING"): "postrouting"}
MANGLE_FIRST = {"INPUT": "input", "FORWARD": "forward", "OUTPUT": "output"}


@dataclass
class BlockRules:
    items: list[Item]
    default: str | None  # pass/drop; None in nat blocks
    policy: Origin | None = None  # the `:CHAIN POLICY` line


@dataclass
class FamilyRules:
    """One family's firewall before the two families are merged."""

    family: int
    blocks: dict[str, BlockRules] = field(default_factory=dict)
    chains: dict[str, list[Item]] = field(default_factory=dict)
    refusals: list[Refusal] = field(default_factory=list)
    remarks: list[Remark] = field(default_factory=list)


def chain_name(table: str, chain: str) -> str:
    return chain if table == "filter" else f"{table}-{chain}"


def read_family(dump: Dump, family: int) -> FamilyRules:
    out = FamilyRules(family)
    for problem in dump.problems:
        out.refusals.append(Refusal(problem.origin, problem.message, problem.span))
    for table in dump.tables.values():
        if not table.committed:
            continue
        if table.name == "security":
            _refuse_all(out, table, "the security table (SELinux labels, run after "
                        "filter): pfc has no block for it")
            continue
        chains = {chain_name(table.name, c): _rules(out, table, c)
                  for c in table.chains}
        bases = {}
        for builtin in BUILTIN[table.name]:
            policy, origin = table.policies.get(builtin, ("ACCEPT", None))
            rules = _rules(out, table, builtin)
            if table.name == "mangle" and builtin in MANGLE_FIRST:
                chains[f"mangle-{builtin}"] = _mangle_first(rules, policy, origin)
                bases[f"mangle-{builtin}"] = False
                continue
            default = None if table.name == "nat" else policy.lower().replace(
                "accept", "pass")
            if table.name == "nat" and policy != "ACCEPT":
                out.refusals.append(Refusal(origin, f"policy {policy} of a nat chain: "
                                            "pfc's nat blocks have no default",
                                            origin.span))
            bases[BLOCKS[(table.name, builtin)]] = BlockRules(rules, default, origin)
        flow.resolve(out, bases, chains)
    _mangle_jumps(out)
    for name, block in list(out.blocks.items()):
        if not block.items and block.default in (None, "pass"):
            del out.blocks[name]
    return out


def _mangle_jumps(out: FamilyRules) -> None:
    """``jump mangle-INPUT`` first in the ``input`` block (made if missing), for each
    mangle INPUT/FORWARD/OUTPUT chain with rules; the empty ones are left out."""
    for builtin, block_name in MANGLE_FIRST.items():
        name = f"mangle-{builtin}"
        if name not in out.chains:
            continue
        if not any(isinstance(i, Rule) for i in out.chains[name]):
            del out.chains[name]
            continue
        block = out.blocks.setdefault(block_name, BlockRules([], "pass"))
        block.items.insert(0, Rule("jump", None, chain=name))


def _refuse_all(out: FamilyRules, table, reason: str) -> None:
    for line in table.lines:
        out.refusals.append(Refusal(line.origin, reason, line.origin.span))


def _rules(out: FamilyRules, table, chain: str) -> list[Item]:
    items: list[Item] = []
    user = {c for c in table.chains}
    for line in table.rules(chain):
        try:
            rules = convert_line(line, out.family, user, out.remarks)
            items += rules or [Skipped(line.origin, "never matches: its matches "
                                       "contradict each other")]
        except Refuse as refused:
            span = refused.at or line.origin.span
            out.refusals.append(Refusal(line.origin, refused.reason, span))
            items.append(Skipped(line.origin, refused.reason))
    return items


def convert_line(line: Line, family: int, chains: set[str],
                 remarks: list[Remark]) -> list[Rule]:
    """One ``-A`` line as pfc rules (one per disjoint alternative); ``return`` and
    jumps name the iptables chain (renamed later). ``Refuse`` if pfc cannot say it."""
    words = read_words(line.words, line.origin.span.file)
    matched = convert_matches(words, family)
    action = convert_target(words.target, words.goto, matched, family, chains, remarks)
    chain = chain_name(line.table, action.chain) if action.chain else None
    if action.chain is not None and len(matched.alternatives) > 1 and \
            any(m.field in ("mark", "ct-mark") for a in matched.alternatives for m in a):
        raise Refuse("a jump pfc would split in two on a mark the chain may change",
                     line.origin.span)
    return [Rule(action.action, line.origin, matched.protocol, alt, action.options,
                 action.to, chain, family, _comment(matched.comment))
            for alt in matched.alternatives]


def _comment(text: str) -> str:
    return " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())


def _mangle_first(rules: list[Item], policy: str, origin: Origin | None) -> list[Item]:
    """Mangle INPUT/FORWARD/OUTPUT as a chain run first in pfc's block: ACCEPT goes on
    to the filter rules (a return), the policy DROP is the chain's last rule."""
    out: list[Item] = []
    for item in rules:
        if isinstance(item, Rule) and item.action == "pass":
            item = Rule("return", item.origin, item.protocol, item.matches, (), None, None,
                        item.family, item.comment)
        out.append(item)
    if policy == "DROP" and origin is not None:
        out.append(Rule("drop", origin, family=None))
    return out


def proto_match(rule: Rule) -> tuple[Match, ...]:
    """The rule's protocol keyword as a ``proto`` match (for negating it)."""
    numbers = {"tcp": "6", "udp": "17", "icmp": "1", "icmp6": "58"}
    if rule.protocol in numbers:
        return (Match("proto", (numbers[rule.protocol],)),)
    return ()
