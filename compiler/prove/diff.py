"""``pfc diff``: every frame whose verdict, counters or rewritten bytes change between
two policies, as a few readable regions with one witness frame each.

Both policies' meanings (:mod:`pfc.prove.formula`) over one symbolic frame, read as
the reference interpreter reads it (the frame as on the wire, one VLAN tag skipped),
up to ``bound`` bytes. A solver finds a frame on which they differ; the interpreter
judges that frame under both policies (so every reported difference is the
interpreter's, not the formula's); the pair of deciding rules and the counters that
moved name a *region*, which is then excluded, and the search goes on until none is
left or ``limit`` regions are found.

Counters are compared per count rule, paired between the policies by the same
alignment as the rules (``difflib`` over each rule's text): a count rule that is
unchanged (or replaced in place) is one counter; an added or removed one is compared
with a counter that never counts.

Only rules that matter are encoded: the rules the alignment marks as changed, and
those that may hold on a frame a changed rule holds on (:mod:`pfc.prove.boxes`). A
frame no changed rule holds on meets the same rules in the same order under both
policies. When the defaults differ every rule is encoded.
"""

from __future__ import annotations

import dataclasses
import difflib
import time
from dataclasses import dataclass, field

import z3

from pfc.backends.describe import describe, match_text
from pfc.frontend import ir
from pfc.oracle import interp
from pfc.prove import boxes, formula, merge, sets
from pfc.prove.frame import DEFAULT_BOUND, Frame, Reading, frame_bytes, frames_differ
from pfc.prove.frame import solver as solver_

SHORT = 128  # witnesses are looked for among frames this short first
DEFAULT_LIMIT = 8


@dataclass(frozen=True)
class Side:
    """What one policy does to a witness frame."""

    verdict: str  # "pass" | "drop" | "redirect to ADDR[:PORT]"
    rule: int | None
    line: int | None
    text: str  # the deciding rule, or "default pass"
    counted: tuple[int, ...]


@dataclass(frozen=True)
class Region:
    where: str  # the frames, as match words: "udp dst 10.1.0.0/16 dport 54"
    change: str  # "drop → pass", "counted by line 5 → not counted", ...
    old: Side
    new: Side
    witness: bytes

    def line(self) -> str:
        return f"{self.where}: {self.change}"


@dataclass
class Result:
    regions: list[Region] = field(default_factory=list)
    complete: bool = True  # False: ``limit`` regions found, there may be more
    bound: int = DEFAULT_BOUND
    encoded: tuple[int, int] = (0, 0)  # rules encoded (old, new)
    seconds: float = 0.0
    sets: list[sets.SetChange] = field(default_factory=list)  # named lists that changed

    @property
    def same(self) -> bool:
        return not self.regions


# ----------------------------------------------------------------------- alignment

def rule_key(rule: ir.Rule) -> tuple:
    """What a rule does and to which frames: equal keys, the same rule."""
    return (type(rule.action).__name__, merge.signature(rule))


@dataclass(frozen=True)
class Alignment:
    changed_old: frozenset[int]  # positions in old.rules
    changed_new: frozenset[int]
    counters: tuple[tuple[int | None, int | None], ...]  # (old index, new index)
    keys: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())  # each rule's key, numbered


def align(old: ir.Policy, new: ir.Policy) -> Alignment:
    ids: dict[tuple, int] = {}  # each distinct key hashed once, compared as a number
    a = [ids.setdefault(rule_key(r), len(ids)) for r in old.rules]
    b = [ids.setdefault(rule_key(r), len(ids)) for r in new.rules]
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    changed_a, changed_b, pairs = set(), set(), []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            changed_a.update(range(i1, i2))
            changed_b.update(range(j1, j2))
        olds = [old.rules[i].index for i in range(i1, i2) if not old.rules[i].terminal]
        news = [new.rules[j].index for j in range(j1, j2) if not new.rules[j].terminal]
        for k in range(max(len(olds), len(news))):
            pairs.append((olds[k] if k < len(olds) else None,
                          news[k] if k < len(news) else None))
    return Alignment(frozenset(changed_a), frozenset(changed_b), tuple(pairs),
                     (tuple(a), tuple(b)))


def relevant(old: ir.Policy, new: ir.Policy,
             alignment: Alignment) -> tuple[list[ir.Rule], list[ir.Rule]]:
    """The rules to encode (module doc): all when the defaults differ. One box per
    distinct rule; the changed rules' boxes indexed (``boxes.Index``)."""
    if old.default != new.default:
        return list(old.rules), list(new.rules)
    memo: dict[int, boxes.Box] = {}

    def box(rule: ir.Rule, key: int) -> boxes.Box:
        got = memo.get(key)
        if got is None:
            got = memo[key] = boxes.box(rule)
        return got
    (keys_a, keys_b), sides = alignment.keys, ((old, alignment.changed_old, 0),
                                               (new, alignment.changed_new, 1))
    index = boxes.Index([box(p.rules[i], alignment.keys[k][i])
                         for p, marked, k in sides for i in sorted(marked)])
    meets: dict[int, bool] = {}

    def keep(rules: tuple[ir.Rule, ...], keys: tuple, marked: frozenset[int]) -> list[ir.Rule]:
        out = []
        for pos, rule in enumerate(rules):
            key = keys[pos]
            if key not in meets:
                meets[key] = index.meets(box(rule, key))
            if pos in marked or meets[key]:
                out.append(rule)
        return out
    return keep(old.rules, keys_a, alignment.changed_old), keep(new.rules, keys_b,
                                                                alignment.changed_new)


# ------------------------------------------------------------------------- solving

def differ(a: formula.Meaning, b: formula.Meaning, frame: Frame,
           counters: tuple[tuple[int | None, int | None], ...]) -> z3.BoolRef:
    """Some frame's verdict, rewritten bytes or counters differ."""
    terms = [a.passes != b.passes, z3.And(a.passes, b.passes, frames_differ(a.out, b.out, frame))]
    for i, j in counters:
        left = a.counted.get(i, formula.FALSE) if i is not None else formula.FALSE
        right = b.counted.get(j, formula.FALSE) if j is not None else formula.FALSE
        terms.append(left != right)
    return z3.Or(*terms)


def diff(old: ir.Policy, new: ir.Policy, *, bound: int = DEFAULT_BOUND,
         limit: int = DEFAULT_LIMIT, naive: bool = False, progress=None) -> Result:
    """The regions where ``old`` and ``new`` differ (module doc). ``naive``: encode
    every rule (the benchmark's peer). ``progress(text)``, when given, hears what the
    search is doing (stating the rules, each region found)."""
    tell = progress or (lambda text: None)
    used = ir.flow_features(old) + ir.flow_features(new)
    if used:
        raise ValueError("pfc diff compares stateless policies; these use "
                         + ", ".join(dict.fromkeys(used)))
    start = time.perf_counter()
    alignment = align(old, new)
    result = Result(bound=bound, sets=sets.changes(old, new))
    if not naive and not alignment.changed_old and not alignment.changed_new \
            and old.default == new.default:
        result.seconds = time.perf_counter() - start
        return result
    rules_a, rules_b = (list(old.rules), list(new.rules)) if naive else relevant(
        old, new, alignment)
    result.encoded = (len(rules_a), len(rules_b))
    tell(f"stating {len(rules_a)} + {len(rules_b)} rules")
    frame = Frame.fresh(bound=bound)
    reading = Reading(frame, address_sets="prefixes")
    changed = (frozenset(old.rules[i].index for i in alignment.changed_old),
               frozenset(new.rules[j].index for j in alignment.changed_new))
    # unchanged runs that decide alike are merged; a changed rule is its own region
    judge_a = Judge(old, rules_a, changed[0], merged=not naive)
    judge_b = Judge(new, rules_b, changed[1], merged=not naive)
    a, b = judge_a.meaning(reading), judge_b.meaning(reading)
    solver = solver_(light=True)
    # a frame has an Ethernet header (every hook sees 14 bytes or more): no empty witness
    solver.add(frame.valid(), frame.has(0, 14), differ(a, b, frame, alignment.counters))
    while len(result.regions) < limit:
        n = len(result.regions)
        tell(f"{n} region{'s' * (n != 1)} found, looking for more")
        witness = _witness(solver, frame)
        if witness is None:
            break
        region = describe_region(judge_a, judge_b, witness, alignment.counters,
                                 result.sets)
        result.regions.append(region)
        solver.add(z3.Not(_cell(a, b, region, alignment.counters, changed)))
    else:
        result.complete = _witness(solver, frame) is None
    result.seconds = time.perf_counter() - start
    return result


def _witness(solver, frame: Frame) -> bytes | None:
    """A short frame of the current constraints if there is one, else any."""
    solver.push()
    solver.add(z3.ULE(frame.length, SHORT))
    found = solver.check()
    if found != z3.sat:
        solver.pop()
        found = solver.check()
        if found != z3.sat:
            if found == z3.unknown:
                raise RuntimeError(f"the solver gave up: {solver.reason_unknown()}")
            return None
        data = frame_bytes(solver.model(), frame)
    else:
        data = frame_bytes(solver.model(), frame)
        solver.pop()
    return data


def _cell(a: formula.Meaning, b: formula.Meaning, region: Region,
          counters: tuple[tuple[int | None, int | None], ...],
          changed: tuple[frozenset[int], frozenset[int]]) -> z3.BoolRef:
    """The frames reported with ``region``: decided by the same changed rule (a side
    whose deciding rule is unchanged is left free: every unchanged rule a changed one
    overlaps would be a region of its own), with the same verdicts and counters."""
    terms = [a.passes == (region.old.verdict != "drop"),
             b.passes == (region.new.verdict != "drop")]
    keyed = [(a, region.old.rule, changed[0]), (b, region.new.rule, changed[1])]
    pinned = [(m, index) for m, index, marked in keyed if index in marked]
    for m, index in pinned or [(m, index) for m, index, _ in keyed]:
        terms.append(m.rule == m.decider(index))
    for i, j in counters:
        if i is not None and i in a.counted:
            terms.append(a.counted[i] == (i in region.old.counted))
        if j is not None and j in b.counted:
            terms.append(b.counted[j] == (j in region.new.counted))
    return z3.And(*terms)


# ---------------------------------------------------------------------- describing

class Judge:
    """The interpreter on the rules one side encodes. Every witness lies where a
    changed rule holds, where the rules left out hold nowhere: judged by the encoded
    rules alone, as by all. ``merged``: by their runs (:mod:`pfc.prove.merge`), as
    encoded, the deciding member of a run found by the interpreter on the run alone."""

    def __init__(self, policy: ir.Policy, rules: list[ir.Rule] | None = None,
                 alone: frozenset[int] = frozenset(), *, merged: bool = False) -> None:
        rules = list(policy.rules) if rules is None else rules
        self.runs = merge.blocks(rules, alone) if merged else [
            merge.Block(r, (r,)) for r in rules]
        self.by_index = {r.index: r for r in rules}
        self.policy = dataclasses.replace(policy, rules=tuple(b.rule for b in self.runs))
        self.members = {b.rule.index: dataclasses.replace(policy, rules=b.rules)
                        for b in self.runs if len(b.rules) > 1}

    def meaning(self, reading: Reading) -> formula.Meaning:
        m = formula.meaning(self.policy, reading)
        merged = {r.index: b.rule.index for b in self.runs for r in b.rules[1:]}
        return dataclasses.replace(m, merged=merged)

    def rule(self, index: int) -> ir.Rule:
        return self.by_index[index]

    def evaluate(self, frame: bytes) -> interp.Outcome:
        out = interp.evaluate(self.policy, frame)
        run = self.members.get(out.rule) if out.rule is not None else None
        if run is not None:
            out = dataclasses.replace(out, rule=interp.evaluate(run, frame).rule)
        return out

    def side(self, frame: bytes) -> Side:
        out = self.evaluate(frame)
        default = self.policy.default.value
        if out.rule is None:
            return Side(default, None, None, f"default {default}", out.counted)
        rule = self.rule(out.rule)
        verdict = out.verdict.value
        if isinstance(rule.action, ir.Redirect):
            port = f":{rule.action.port}" if rule.action.port is not None else ""
            verdict = f"redirect to {rule.action.address}{port}"
        return Side(verdict, rule.index, rule.line, describe(rule), out.counted)


def describe_region(old: Judge, new: Judge, witness: bytes,
                    counters: tuple[tuple[int | None, int | None], ...] = (),
                    changed_sets: list[sets.SetChange] | None = None) -> Region:
    """The region of ``witness``: what each policy does to it, and the frames the
    deciding rules (and the count rules that differ) hold on together; a named list
    whose contents changed and whose changed entries hold the witness is written as
    those entries (``src 203.0.113.11 (no longer in $admins)``)."""
    a, b = old.side(witness), new.side(witness)
    changes, rules = [], []
    if a.verdict != b.verdict:
        changes.append(f"{a.verdict} → {b.verdict}")
    elif old.evaluate(witness).frame != new.evaluate(witness).frame:
        changes.append(f"rewritten bytes differ ({a.verdict} → {b.verdict})")
    rules += [p.rule(s.rule) for p, s in ((old, a), (new, b)) if s.rule is not None]
    for i, j in counters:
        was, now = i is not None and i in a.counted, j is not None and j in b.counted
        if was != now:
            rule = old.rule(i) if was else new.rule(j)
            arrow = "counted → not counted" if was else "not counted → counted"
            changes.append(f"`{describe(rule)}` (line {rule.line}): {arrow}")
            rules.append(rule)
    if not changes:
        raise AssertionError("pfc diff: the formula and the interpreter disagree on "
                             f"frame {witness.hex()}: this is a pfc bug")
    named = {c.name: c for c in changed_sets or []}
    return Region(where_text(rules, lambda r, m: _changed_text(r, m, named, witness)),
                  "; ".join(changes), a, b, witness)


SPECIFIC = {"all": 0, "ip": 1, "ip6": 1, "tcp": 2, "udp": 2, "icmp": 2, "icmp6": 2}
WHICH = {"removed": "no longer in", "added": "new in"}


def where_text(rules: list[ir.Rule], text=None) -> str:
    """The frames the rules hold on together, as match words (``text(rule, match)``:
    another wording of a match, or None)."""
    if not rules:
        return "frames no rule holds on"
    proto = max((r.proto_name for r in rules), key=lambda p: SPECIFIC.get(p, 1))
    words = [] if proto == "all" else [proto]
    for rule in rules:
        for m in rule.matches:
            word = (text and text(rule, m)) or match_text(m)
            if word not in words:
                words.append(word)
    return " ".join(words) or "every frame"


def _changed_text(rule: ir.Rule, m: ir.Match, named: dict[str, sets.SetChange],
                  witness: bytes) -> str | None:
    """``m`` as the entries of its named list that changed and hold ``witness``."""
    change = named.get(getattr(m, "set_name", None) or "")
    if change is None or m.negated:
        return None
    for which, words in WHICH.items():
        part = sets.changed_part(m, change, which)
        if part is not None and _holds(rule, part, witness):
            return (f"{m.field} {sets.entries_text(change, which)} ({words} "
                    f"${change.name})")
    return None


def _holds(rule: ir.Rule, m: ir.Match, witness: bytes) -> bool:
    """The interpreter finds ``m`` (under ``rule``'s protocol) on ``witness``."""
    probe = dataclasses.replace(rule, index=0, matches=(m,), action=ir.Drop(), limit=None)
    policy = ir.Policy((probe,), ir.Verdict.PASS)
    return interp.evaluate(policy, witness).verdict is ir.Verdict.DROP
