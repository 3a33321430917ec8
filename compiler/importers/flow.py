"""RETURN and goto (iptables' and nft's alike) in pfc's words (docs/import.md
"RETURN and goto").

pfc has no ``return``, and its ``goto`` ends in the hook's default where iptables'
``-g`` ends in the chain below the goer on the call stack. So:

- ``-g X`` is pfc's ``goto X`` where the chain holding it is only ever reached with
  an empty stack (a built-in chain, or a chain reached only by gotos from such
  chains: a *tail* chain); elsewhere it is ``jump X`` followed by a RETURN on the
  same matches.
- RETURN in a built-in chain is its policy: ``pass`` or ``drop``.
- RETURN in a chain with one match M (on a field every packet has: addresses,
  interfaces, protocol, conntrack, marks, address types) puts ``!M`` on every later
  rule of the chain; with several matches, the later rules move to a chain of their
  own (``NAME-1``) jumped to once per disjoint part of ``not (M1 and M2 ...)``. An
  unconditional RETURN leaves the rules after it unreachable (kept as comments).
  A RETURN on a port or another transport field is refused: its negation does not
  hold on fragments, where iptables' match fails.
"""

from __future__ import annotations

from dataclasses import replace

from pfc.importers.model import (
    Item,
    Match,
    Refusal,
    Refuse,
    Remark,
    Rule,
    Skipped,
    conjoin,
    negatable,
)

_NUMBERS = {"tcp": "6", "udp": "17", "icmp": "1", "icmp6": "58"}


def resolve(out, blocks: dict, chains: dict[str, list[Item]]) -> None:
    """``blocks``: pfc block name → its rules (``.items``, ``.default``), or a chain's
    name → False (a chain jumped to first in its block, ``mangle-INPUT``); ``chains``:
    every chain of the table. Fills ``out.blocks`` and ``out.chains`` (``out``: has
    those and ``refusals``)."""
    real = {name: b for name, b in blocks.items() if b is not False}
    tails = _tails(real, chains)
    for name, block in real.items():
        default = block.default or "pass"
        block.items = [_base_return(item, default) for item in block.items]
        out.blocks[name] = block
    for name in list(chains):
        items = chains[name] if name in tails else _unstack_gotos(chains[name])
        chains[name] = items
    for name in list(chains):
        chains[name] = eliminate(name, chains[name], chains, out)
    used = _reachable(real, chains, [n for n, b in blocks.items() if b is False])
    for name, items in chains.items():
        if name in used:
            out.chains[name] = items
        else:
            _unused(out, name, items)


def _unused(out, name: str, items: list[Item]) -> None:
    """A chain no block reaches decides nothing: left out, with a remark; what in it
    pfc could not say is a remark too, not a refusal."""
    origins = {id(i.origin) for i in items if i.origin is not None}
    refused = [r for r in out.refusals if id(r.origin) in origins]
    out.refusals[:] = [r for r in out.refusals if id(r.origin) not in origins]
    first = next((i.origin for i in items if i.origin is not None), None)
    if first is None:
        return
    out.remarks.append(Remark(f"chain `{name}` is left out: no hook reaches it"
                              + (f" ({len(refused)} of its rules pfc could not say)"
                                 if refused else ""), first.span))


def _references(items: list[Item]) -> list[Rule]:
    return [i for i in items if isinstance(i, Rule) and i.chain is not None]


def _tails(blocks: dict, chains: dict[str, list[Item]]) -> set[str]:
    """Chains only ever reached with an empty call stack."""
    callers: dict[str, list[tuple[str | None, bool]]] = {}
    for block in blocks.values():
        for r in _references(block.items):
            callers.setdefault(r.chain, []).append((None, r.action == "goto"))
    for name, items in chains.items():
        for r in _references(items):
            callers.setdefault(r.chain, []).append((name, r.action == "goto"))
    tails = {name for name in chains if name in callers}
    changed = True
    while changed:
        changed = False
        for name in list(tails):
            if any(not goto or (caller is not None and caller not in tails)
                   for caller, goto in callers[name]):
                tails.discard(name)
                changed = True
    return tails


def _reachable(blocks: dict, chains: dict[str, list[Item]], roots: list[str]) -> set[str]:
    todo = [r.chain for b in blocks.values() for r in _references(b.items)] + roots
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name not in chains:
            continue
        seen.add(name)
        todo += [r.chain for r in _references(chains[name])]
    return seen


def _base_return(item: Item, default: str) -> Item:
    if isinstance(item, Rule) and item.action == "return":
        return Rule(default, item.origin, item.protocol, item.matches, (), None, None,
                    item.family, item.comment)
    return item


def _unstack_gotos(items: list[Item]) -> list[Item]:
    """``-g X`` in a chain reached with a caller below it: ``jump X`` then return."""
    out: list[Item] = []
    for item in items:
        if isinstance(item, Rule) and item.action == "goto":
            out.append(Rule("jump", item.origin, item.protocol, item.matches, (), None,
                            item.chain, item.family, item.comment))
            out.append(Rule("return", item.origin, item.protocol, item.matches, (),
                            None, None, item.family))
        else:
            out.append(item)
    return out


def eliminate(name: str, items: list[Item], chains: dict[str, list[Item]],
              out) -> list[Item]:
    """The chain's rules with every RETURN rewritten (module docstring). The guards
    (what earlier RETURNs leave: one negated match per field, lists joined) go on each
    later rule once, so a chain of n RETURNs costs O(n), not O(n^2)."""
    done: list[Item] = []
    guards = Guards()
    tails = 0
    for index, item in enumerate(items):
        if not (isinstance(item, Rule) and item.action == "return"):
            done.append(_guarded(item, guards, out))
            continue
        cond = _condition(item)
        if not cond:
            done += [Skipped(r.origin, f"unreachable: after the RETURN at "
                             f"{item.origin.where}") for r in items[index + 1:]
                     if isinstance(r, Rule) and r.origin is not None]
            return done
        if not negatable(cond):
            out.refusals.append(Refusal(item.origin, "RETURN on a port or another "
                                        "transport field: pfc cannot negate it exactly "
                                        "(fragments)", item.origin.span))
            done.append(Skipped(item.origin, "RETURN on a transport field"))
            continue
        if len(cond) == 1:
            guards.add(cond[0].negate())
            continue
        tails += 1
        tail = _fresh(f"{name}-{tails}", chains)
        chains[tail] = []
        chains[tail] = eliminate(tail, items[index + 1:], chains, out)
        done += [_guarded(Rule("jump", item.origin, None, alt, chain=tail,
                               family=item.family), guards, out)
                 for alt in _not_all(cond)]
        return done
    return done


class Guards:
    """What the RETURNs so far leave for the rules after them: one match per field
    where negations join into one list (``!src { a, b }``), kept as ordered sets so a
    chain of n RETURNs costs O(n)."""

    def __init__(self) -> None:
        self.joined: dict[str, dict[str, None]] = {}
        self.single: list[Match] = []
        self._matches: tuple[Match, ...] | None = ()

    def add(self, guard: Match) -> None:
        if guard.negated and guard.field not in ("flags", "payload", "frag"):
            self.joined.setdefault(guard.field, {}).update(dict.fromkeys(guard.values))
        else:
            self.single.append(guard)
        self._matches = None

    def matches(self) -> tuple[Match, ...]:
        if self._matches is None:
            self._matches = tuple(Match(f, tuple(v), True) for f, v in self.joined.items()
                                  ) + tuple(self.single)
        return self._matches

    def __bool__(self) -> bool:
        return bool(self.joined or self.single)


def _condition(rule: Rule) -> tuple[Match, ...]:
    proto = (Match("proto", (_NUMBERS[rule.protocol],)),) if rule.protocol else ()
    return proto + rule.matches


def _not_all(cond: tuple[Match, ...]) -> list[tuple[Match, ...]]:
    """``not (m1 and m2 ...)`` as disjoint conjunctions: !m1 | m1 !m2 | m1 m2 !m3 ..."""
    return [cond[:i] + (m.negate(),) for i, m in enumerate(cond)]


def _guarded(item: Item, guards: Guards, out) -> Item:
    """``item`` for the packets the guards hold on (RETURNs before it took the rest);
    a rule the guards leave nothing of is unreachable."""
    if not guards or not isinstance(item, Rule) or item.action == "return":
        return item
    extra = []
    for guard in guards.matches():
        if guard.field == "proto" and item.protocol is not None:
            if (_NUMBERS[item.protocol] in guard.values) == guard.negated:
                return Skipped(item.origin, "unreachable: a RETURN before it takes "
                               "every packet it matches")
            continue
        extra.append(guard)
    try:
        matches = conjoin(item.matches, tuple(extra))
    except Refuse as refused:
        reason = f"after a RETURN before it: {refused.reason}"
        out.refusals.append(Refusal(item.origin, reason, item.origin.span))
        return Skipped(item.origin, reason)
    if matches is None:
        return Skipped(item.origin, "unreachable: a RETURN before it takes every packet "
                       "it matches")
    return replace(item, matches=matches)


def _fresh(name: str, taken) -> str:
    while name in taken:
        name += "x"
    return name
