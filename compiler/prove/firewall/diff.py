"""``pfc diff`` of two whole firewalls: per hook list, the regions of frames (and
inputs) whose outcome, mark, ``notrack`` or rewritten bytes change, each with a witness
frame and the values of the inputs it needs (docs/prove.md "Whole firewalls").

Lists are paired by block (``input`` with ``input``; ``ingress``/``egress`` by their
devices too); a block one file lacks is the empty list (every packet passes, nothing
translated), as the path interpreter takes it. Each pair is compared on its own, its
context free (:mod:`.inputs`): equal lists give an equal firewall; a list that differs
is reported with what the proof of it covers (:func:`coverage`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import z3

from pfc.backends.describe import describe
from pfc.frontend import ir
from pfc.frontend.firewall.hooks import BLOCKS
from pfc.frontend.firewall.ruleset import Ruleset
from pfc.prove import formula
from pfc.prove.diff import SHORT, Side, where_text
from pfc.prove.firewall import inputs as inputs_
from pfc.prove.firewall.meaning import HookMeaning, Outcomes, meaning, scope
from pfc.prove.frame import DEFAULT_BOUND, Frame, Reading, frame_bytes, frames_differ
from pfc.prove.frame import solver as solver_

DEFAULT_LIMIT = 8


@dataclass(frozen=True)
class FwRegion:
    where: str
    change: str
    old: Side
    new: Side
    witness: bytes
    inputs: dict[str, str]

    def line(self) -> str:
        return f"{self.where}: {self.change}"


@dataclass
class HookDiff:
    hook: str  # the block's label: ``input``, ``nat prerouting``, ``ingress eth0``
    regions: list[FwRegion] = field(default_factory=list)
    complete: bool = True
    notes: list[str] = field(default_factory=list)  # what the comparison covers
    seconds: float = 0.0

    @property
    def same(self) -> bool:
        return not self.regions


@dataclass
class FirewallDiff:
    hooks: list[HookDiff]
    bound: int = DEFAULT_BOUND

    @property
    def same(self) -> bool:
        return all(h.same for h in self.hooks)


def label(policy: ir.Policy) -> str:
    return " ".join((policy.hook.name, *policy.hook.devices))


def pairs(old: Ruleset, new: Ruleset) -> list[tuple[str, ir.Policy, ir.Policy]]:
    """(label, old list, new list) per block either file has, in path order."""
    a, b = {label(p): p for p in old.lists}, {label(p): p for p in new.lists}
    out = []
    for name in dict.fromkeys([*a, *b]):
        left, right = a.get(name), b.get(name)
        hook = (left or right).hook
        out.append((name, left or _empty(hook, new), right or _empty(hook, old)))
    return out


def _empty(hook: ir.Hook, other: Ruleset) -> ir.Policy:
    return ir.Policy((), ir.Verdict.PASS, hook=hook, source=other.source)


def diff(old: Ruleset, new: Ruleset, *, bound: int = DEFAULT_BOUND,
         limit: int = DEFAULT_LIMIT, progress=None) -> FirewallDiff:
    tell = progress or (lambda text: None)
    hooks = []
    for name, a, b in pairs(old, new):
        tell(f"comparing {name}")
        hooks.append(diff_lists(name, a, b, bound=bound, limit=limit))
    return FirewallDiff(hooks, bound)


def _same_lists(a: ir.Policy, b: ir.Policy) -> bool:
    def rules(p: ir.Policy) -> list:
        every = list(p.rules) + [r for c in p.chains for r in c.rules]
        return [(r.index, inputs_.signature(r), repr(inputs_._spanless(r.action)))
                for r in every]
    return a.default == b.default and rules(a) == rules(b) and [
        c.name for c in a.chains] == [c.name for c in b.chains]


def diff_lists(name: str, a: ir.Policy, b: ir.Policy, *, bound: int = DEFAULT_BOUND,
               limit: int = DEFAULT_LIMIT) -> HookDiff:
    start = time.perf_counter()
    block = a.hook.name
    names = inputs_.name_classes(inputs_.patterns_of((a, b)))
    ins = inputs_.Inputs(block, names)
    frame = Frame.fresh(bound=bound)
    reading = Reading(frame, skip_tag=block == "ingress", address_sets="prefixes")
    outcomes = Outcomes()
    ma, mb = meaning(a, reading, ins, outcomes), meaning(b, reading, ins, outcomes)
    result = HookDiff(name, notes=coverage(block, ins, (a, b)))
    if _same_lists(a, b):
        result.seconds = time.perf_counter() - start
        return result
    solver = solver_(light=True)
    solver.add(scope(block, reading), differ(ma, mb, frame), ins.constraints(reading))
    judge = _Judge(a, b, ma, mb, ins, outcomes)
    while len(result.regions) < limit:
        model = _model(solver, frame)
        if model is None:
            break
        region = judge.region(model, frame)
        result.regions.append(region)
        solver.add(z3.Not(z3.And(ma.rule == _rule(region.old), mb.rule == _rule(region.new))))
    else:
        result.complete = _model(solver, frame) is None
    result.seconds = time.perf_counter() - start
    return result


def differ(a: HookMeaning, b: HookMeaning, frame: Frame) -> z3.BoolRef:
    return z3.Or(a.outcome != b.outcome, a.mark != b.mark, a.notrack != b.notrack,
                 z3.And(a.outcome == b.outcome, frames_differ(a.out, b.out, frame)))


def _rule(side: Side) -> int:
    return formula.DEFAULT_RULE if side.rule is None else side.rule


def _model(solver, frame: Frame) -> z3.ModelRef | None:
    """A model with a short frame if there is one, else any, else None."""
    solver.push()
    solver.add(z3.ULE(frame.length, SHORT))
    found = solver.check()
    if found == z3.sat:
        model = solver.model()
        solver.pop()
        return model
    solver.pop()
    found = solver.check()
    if found == z3.unknown:
        raise RuntimeError(f"the solver gave up: {solver.reason_unknown()}")
    return solver.model() if found == z3.sat else None


class _Judge:
    def __init__(self, a: ir.Policy, b: ir.Policy, ma: HookMeaning, mb: HookMeaning,
                 ins: inputs_.Inputs, outcomes: Outcomes):
        self.sides = ((a, ma), (b, mb))
        self.ins, self.outcomes = ins, outcomes

    def side(self, policy: ir.Policy, m: HookMeaning, model: z3.ModelRef) -> Side:
        word = self.outcomes.words[_value(model, m.outcome)]
        index = _value(model, m.rule)
        if index == formula.DEFAULT_RULE:
            return Side(word, None, None, f"default {word}" if policy.rules or
                        BLOCKS[policy.hook.name].has_default else "no rule", ())
        rule = _rules(policy)[index]
        return Side(word, index, rule.line, describe(rule), ())

    def region(self, model: z3.ModelRef, frame: Frame) -> FwRegion:
        (a, ma), (b, mb) = self.sides
        old, new = self.side(a, ma, model), self.side(b, mb, model)
        changes = []
        if old.verdict != new.verdict:
            changes.append(f"{old.verdict} → {new.verdict}")
        marks = [_value(model, m.mark) for m in (ma, mb)]
        if marks[0] != marks[1]:
            changes.append(f"mark {marks[0]:#x} → {marks[1]:#x}")
        tracks = [z3.is_true(model.eval(m.notrack, model_completion=True)) for m in (ma, mb)]
        if tracks[0] != tracks[1]:
            changes.append("notrack → tracked" if tracks[0] else "tracked → notrack")
        if not changes:
            changes.append(f"rewritten bytes differ ({old.verdict})")
        deciding = [_rules(p)[s.rule] for p, s in ((a, old), (b, new)) if s.rule is not None]
        return FwRegion(where_text(deciding), "; ".join(changes), old, new,
                        frame_bytes(model, frame), self.ins.values(model))


def _value(model: z3.ModelRef, term: z3.ExprRef) -> int:
    return model.eval(term, model_completion=True).as_long()


def _rules(policy: ir.Policy) -> dict[int, ir.Rule]:
    every = list(policy.rules) + [r for c in policy.chains for r in c.rules]
    return {r.index: r for r in every}


# ----------------------------------------------------------------------- coverage

def coverage(block: str, ins: inputs_.Inputs, lists: tuple[ir.Policy, ...]) -> list[str]:
    """What the comparison of a hook's lists covers, in plain words, for what they
    read and do."""
    every = [r for p in lists for r in reachable(p)]
    notes = []
    if ins.read & {"iif", "oif"}:
        notes.append(f"interfaces: every name ({len(ins.names)} classes of names: those "
                     "written, the other names each wildcard takes, and any other)")
    if "ct" in ins.read:
        notes.append("ct state (and ct status, ct mark) treated as an input: the proof "
                     "covers every value, not which value conntrack gives a packet")
    if ins.read & {"src-type", "dst-type"}:
        notes.append("address type treated as an input: every type for every address")
    if "limit" in ins.read:
        notes.append("limit: whether a packet is within the rate is an input (both "
                     "answers covered); the buckets themselves are not compared")
    if "queue" in ins.read:
        notes.append("queue: the decider's verdict is an input (both covered)")
    if "mark" in ins.read:
        notes.append("mark: every value the packet enters the hook with")
    if BLOCKS[block].kind == "nat":
        notes.append("NAT: the first packet's translation (the rule and its target) is "
                     "compared; conntrack's application of it to the connection's later "
                     "packets and replies is not proved")
    if any(isinstance(r.action, ir.Log | ir.Count) for r in every):
        notes.append("log events and count rules' counters are not compared")
    if any(isinstance(r.action, ir.Reject) for r in every):
        notes.append("reject: the reply kind is compared (which reply is sent), not the "
                     "reply's bytes")
    return notes


def reachable(policy: ir.Policy) -> list[ir.Rule]:
    """The list's rules and those of the chains it reaches."""
    out, todo, seen = [], list(policy.rules), set()
    while todo:
        rule = todo.pop(0)
        out.append(rule)
        if isinstance(rule.action, ir.Jump) and rule.action.chain not in seen:
            seen.add(rule.action.chain)
            todo += list(policy.chain(rule.action.chain).rules)
    return out


def region_json(r: FwRegion) -> dict:
    def side(s: Side) -> dict:
        return {"verdict": s.verdict, "rule": s.rule, "line": s.line, "text": s.text}
    return {"where": r.where, "change": r.change, "old": side(r.old), "new": side(r.new),
            "witness": r.witness.hex(), "inputs": r.inputs}



