"""The meaning of one hook list of a whole firewall as a formula over one symbolic
frame and the hook's inputs (:mod:`.inputs`).

It follows the reference interpreter (``pfc.oracle.interp``) as the path interpreter
calls it for one block: rules in order, ``jump``/``goto`` into chains followed where
they are (the chain's rules under the jump's condition; a ``goto`` the chain does not
decide ends with the list's default, decided by the ``goto``), ``mark ... to N``
changing the mark later rules read, ``notrack`` noted, the first terminal rule that
holds deciding. v1 matches are :mod:`pfc.prove.formula`'s; the rest read the inputs or
the Ethernet header.

The result, for every frame and inputs: ``outcome`` (a number of :class:`Outcomes`:
``pass``, ``drop``, ``reject with R``, a nat block's ``dnat to A:P``, ...), the
deciding ``rule`` (``formula.DEFAULT_RULE`` for the default), the ``mark`` leaving the
list, ``notrack`` and the frame leaving it (``out``: a v1 ``redirect`` rewrites it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import z3

from pfc.frontend import ir
from pfc.frontend.firewall.hooks import BLOCKS
from pfc.prove import formula, rewrite
from pfc.prove.firewall.inputs import Inputs
from pfc.prove.frame import TPIDS, Reading, bv, u32

TRUE, FALSE = z3.BoolVal(True), z3.BoolVal(False)
OUTCOME_BITS = 8
LINK = frozenset(("ether-src", "ether-dst", "ether-type", "vlan-id"))


@dataclass
class Outcomes:
    """The outcomes of the lists compared, one number each (shared by a diff's sides)."""

    words: list[str] = field(default_factory=list)

    def code(self, word: str) -> int:
        if word not in self.words:
            self.words.append(word)
        return self.words.index(word)


@dataclass(frozen=True)
class HookMeaning:
    outcome: z3.BitVecRef
    rule: z3.BitVecRef
    mark: z3.BitVecRef
    notrack: z3.BoolRef
    out: z3.ArrayRef


def outcome_word(action: ir.Action) -> str:
    """What a terminal action does, as a report says it."""
    if isinstance(action, ir.Reject):
        return f"reject with {action.kind}"
    if isinstance(action, ir.Nat):
        if action.kind == "masquerade":
            return "masquerade"
        port = f":{action.port}" if action.port is not None else ""
        where = f"{action.address}{port}" if action.address is not None else port
        return f"{action.kind} to {where}"
    if isinstance(action, ir.Redirect):
        port = f":{action.port}" if action.port is not None else ""
        return f"redirect to {action.address}{port}"
    if isinstance(action, ir.Drop):
        return "drop"
    return "pass"


def default_word(policy: ir.Policy) -> str:
    return "drop" if policy.default is ir.Verdict.DROP else "pass"


class _Walk:
    """The list's rules in order, each decision nested into the state so far."""

    def __init__(self, policy: ir.Policy, reading: Reading, inputs: Inputs,
                 outcomes: Outcomes):
        self.policy, self.reading, self.inputs, self.outcomes = (policy, reading, inputs,
                                                                 outcomes)
        self.undecided = TRUE
        self.outcome = bv(outcomes.code(default_word(policy)), OUTCOME_BITS)
        self.rule = bv(formula.DEFAULT_RULE)
        self.mark = inputs.mark
        self.notrack = FALSE
        self.out = reading.frame.data

    def rules(self, rules: tuple[ir.Rule, ...], guard: z3.BoolRef, depth: int = 0) -> None:
        for rule in rules:
            held = z3.And(guard, self.undecided, rule_holds(rule, self.reading,
                                                            self.inputs, self.mark))
            action = rule.action
            if isinstance(action, ir.Jump):
                self.rules(self.policy.chain(action.chain).rules, held, depth + 1)
                if action.goto:
                    self.decide(z3.And(held, self.undecided), rule.index,
                                default_word(self.policy))
            elif isinstance(action, ir.Mark):
                self.inputs.read.add("mark")
                self.mark = z3.If(held, bv(action.value), self.mark)
            elif isinstance(action, ir.Notrack):
                self.notrack = z3.Or(self.notrack, held)
            elif isinstance(action, ir.Queue):
                self.decide(held, rule.index, z3.If(self.inputs.queued_pass(rule),
                                                    self._code("pass"), self._code("drop")))
            elif action.terminal:
                self.decide(held, rule.index, outcome_word(action))
                if isinstance(action, ir.Redirect):
                    self.out = z3.If(held, rewrite.redirect(self.reading, action, rule.proto),
                                     self.out)

    def _code(self, word: str) -> z3.BitVecRef:
        return bv(self.outcomes.code(word), OUTCOME_BITS)

    def decide(self, held: z3.BoolRef, index: int, word) -> None:
        code = self._code(word) if isinstance(word, str) else word
        self.outcome = z3.If(held, code, self.outcome)
        self.rule = z3.If(held, bv(index), self.rule)
        self.undecided = z3.And(self.undecided, z3.Not(held))


def meaning(policy: ir.Policy, reading: Reading, inputs: Inputs,
            outcomes: Outcomes) -> HookMeaning:
    walk = _Walk(policy, reading, inputs, outcomes)
    walk.rules(policy.rules, TRUE)
    return HookMeaning(walk.outcome, walk.rule, walk.mark, walk.notrack, walk.out)


def scope(block: str, reading: Reading) -> z3.BoolRef:
    """The frames the hook sees: an Ethernet header; IP (untagged) past IP input."""
    frame = reading.frame
    base = z3.And(frame.valid(), frame.has(0, 14))
    if BLOCKS[block].kind == "device":
        return base
    return z3.And(base, z3.Or(reading.is4, reading.is6))


# ------------------------------------------------------------------------------ rules

def rule_holds(rule: ir.Rule, reading: Reading, inputs: Inputs,
               mark: z3.BitVecRef) -> z3.BoolRef:
    """Whether ``rule`` holds (interp's steps 1-4, the context's matches, the limit)."""
    terms = [formula.family_gate(rule.family, reading)]
    if rule.proto is not None:
        terms.append(z3.And(reading.l4proto_present, reading.l4proto == rule.proto))
    terms += [match_holds(m, rule.proto, reading, inputs, mark) for m in rule.matches]
    if isinstance(rule.action, ir.Redirect):
        version = rule.action.address.version
        terms.append(z3.And(reading.is_version(version), reading.frame.has(
            reading.l3 + (20 if version == 4 else 40), 0)))
    if rule.limit is not None:
        if rule.limit.per is not None:
            terms.append(_present(rule.limit.per, reading))
        within = inputs.within(rule)
        terms.append(within if isinstance(rule.action, ir.Pass) else z3.Not(within))
    return z3.And(*terms)


def match_holds(m: ir.Match, proto: int | None, reading: Reading, inputs: Inputs,
                mark: z3.BitVecRef) -> z3.BoolRef:
    if isinstance(m, ir.IfaceMatch):
        return inputs.iface(m)
    if isinstance(m, ir.CtMatch):
        return inputs.ct_state(m, reading)
    if isinstance(m, ir.CtStatusMatch):
        return inputs.ct_status(m, reading)
    if isinstance(m, ir.AddrTypeMatch):
        return inputs.addr_type(m, _present(m.field[:3], reading))
    if isinstance(m, ir.MacMatch):
        at = 0 if m.field == "ether-dst" else 6
        raw = reading.frame.bytes_(at, 6)
        held = z3.Or(*[raw == int.from_bytes(mac, "big") for mac in m.macs])
        return _when(reading.frame.has(0, 14), held, m.negated)
    if isinstance(m, ir.IntMatch) and m.field in ("mark", "ct-mark"):
        if m.field == "mark":
            inputs.read.add("mark")
            return _when(TRUE, formula.in_ranges(mark, m.ranges), m.negated)
        return _when(inputs.tracked(reading), formula.in_ranges(inputs.ct_mark(), m.ranges),
                     m.negated)
    if isinstance(m, ir.IntMatch) and m.field in LINK:
        present, value = _link(m.field, reading)
        return _when(present, formula.in_ranges(value, m.ranges), m.negated)
    return formula.match_holds(m, proto, reading)


def _when(present: z3.BoolRef, held: z3.BoolRef, negated: bool) -> z3.BoolRef:
    return z3.And(present, z3.Not(held) if negated else held)


def _present(name: str, reading: Reading) -> z3.BoolRef:
    """The IP address field ``name`` is in the frame."""
    return z3.Or(*[formula.ip_raw(name, v, reading)[0] for v in (4, 6)])


def _link(name: str, reading: Reading) -> tuple[z3.BoolRef, z3.BitVecRef]:
    """``ether-type`` (after a skipped tag, as the frame is read) or ``vlan-id`` (the
    outer tag at byte 12: ``pfc.oracle.context``)."""
    frame = reading.frame
    if name == "ether-type":
        return reading.l3_known, u32(reading.ethertype)
    tagged = z3.And(frame.has(0, 18), z3.Or(*[frame.u16(12) == t for t in TPIDS]))
    return tagged, u32(frame.u16(14) & 0x0FFF)
