"""What a hook list reads besides the frame, as symbolic inputs (docs/prove.md "Whole
firewalls"): the proof covers every value of each.

- ``iif``/``oif``: a number per *class* of interface names. A match tests a name for
  equality with the names written and for the prefixes of the wildcards (``eth*``), so
  two names that equal the same written name, or else start with the same longest
  written prefix, are alike to every rule: one representative each (``eth0``; ``eth~``
  for "another name starting eth"; ``~`` for a name none of them names). Present where
  the hook has the interface (``pfc.frontend.firewall.hooks``), as the path
  interpreter's context.
- ``mark``: the packet's mark entering the list (32 bits); ``mark ... to N`` in the
  list changes it for later rules (:mod:`.meaning`).
- ``ct state``: one of ``CT_STATES`` on IP frames; ``ct status`` (32 bits) and ``ct
  mark`` where the state is ``new``, ``established`` or ``related`` (the path
  interpreter: none on untracked and invalid packets).
- ``src-type``/``dst-type``: one of ``ADDR_TYPES`` for each address: an input, not a
  function of the address and the host (a superset of what a host can see).
- ``limit``: whether the packet is within a rule's rate, one bit per rule (rules that
  test the same frames at the same rate share it, so the same rule in two files is one
  input); ``queue``: the decider's verdict, likewise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

import z3

from pfc.frontend import ir
from pfc.frontend.firewall.hooks import BLOCKS, allows_field
from pfc.frontend.source import NO_SPAN
from pfc.prove.frame import Reading

LOOPBACK = "lo"
OTHER = "~"  # a character no interface name has: the representative's tail
CT_BITS, TYPE_BITS, IFACE_BITS = 3, 2, 8
TRACKED = ("established", "related", "new")


def name_classes(patterns: Iterable[str]) -> tuple[str, ...]:
    """One representative name per class of names (module doc), literals first."""
    patterns = set(patterns)
    literals = sorted(p for p in patterns if not p.endswith("*"))
    prefixes = sorted({p[:-1] for p in patterns if p.endswith("*")})
    others = [p + OTHER for p in prefixes if p != ""]
    return tuple(literals + others + [OTHER])


def shown(name: str) -> str:
    """A representative as the witness says it."""
    if name == OTHER:
        return "(a name no rule names)"
    if name.endswith(OTHER):
        return f"{name[:-1]}… (another name starting `{name[:-1]}`)"
    return name


@dataclass
class Inputs:
    """The inputs of one hook list (shared by both sides of a diff: the same names)."""

    block: str  # the hook block's name (``input``, ``nat prerouting``, ``ingress``)
    names: tuple[str, ...]
    prefix: str = "in"
    vars: dict = field(default_factory=dict)
    read: set = field(default_factory=set)  # the inputs some rule read (for reports)

    def _var(self, key: str, make):
        got = self.vars.get(key)
        if got is None:
            got = self.vars[key] = make(f"{self.prefix}_{key}")
        return got

    def constraints(self, reading: Reading | None = None) -> z3.BoolRef:
        """Each input within its values. With the frame's ``reading``: a frame received
        on ``lo`` has zero Ethernet addresses (the path interpreter's loopback frames:
        what a rule's ``ether-src``/``ether-dst`` reads there), and a source address
        equal to the destination has its type. Call it after every rule was read."""
        terms = [z3.ULT(self._var(f, _iface), len(self.names)) for f in ("iif", "oif")]
        terms.append(z3.ULT(self.ct_state_var, len(ir.CT_STATES)))
        if reading is not None and LOOPBACK in self.names:
            terms.append(z3.Implies(self._var("iif", _iface) == self.names.index(LOOPBACK),
                                    reading.frame.bytes_(0, 12) == 0))
        if reading is not None and {"src-type", "dst-type"} <= set(self.vars):
            same = z3.Or(*[z3.And(reading.is_version(v), reading.frame.has(
                reading.l3 + (16 if v == 4 else 24) + (4 if v == 4 else 16), 0),
                _address(reading, v, "src") == _address(reading, v, "dst")) for v in (4, 6)])
            terms.append(z3.Implies(same, self.vars["src-type"] == self.vars["dst-type"]))
        return z3.And(*terms)

    # -- interfaces -------------------------------------------------------------

    def iface(self, match: ir.IfaceMatch) -> z3.BoolRef:
        self.read.add(match.field)
        if not allows_field(BLOCKS[self.block], match.field):
            return z3.BoolVal(False)  # the hook has no such interface: absent
        var = self._var(match.field, _iface)
        hits = [i for i, name in enumerate(self.names)
                if any(_matches(p, name) for p in match.names)]
        held = z3.Or(*[var == i for i in hits]) if hits else z3.BoolVal(False)
        return z3.Not(held) if match.negated else held

    # -- marks and connections --------------------------------------------------

    @property
    def mark(self) -> z3.BitVecRef:
        return self._var("mark", lambda n: z3.BitVec(n, 32))

    @property
    def ct_state_var(self) -> z3.BitVecRef:
        return self._var("ct_state", lambda n: z3.BitVec(n, CT_BITS))

    def ct_state(self, match: ir.CtMatch, reading: Reading) -> z3.BoolRef:
        self.read.add("ct")
        var = self.ct_state_var
        held = z3.Or(*[var == ir.CT_STATES.index(s) for s in match.states])
        return z3.And(_ip(reading), z3.Not(held) if match.negated else held)

    def tracked(self, reading: Reading) -> z3.BoolRef:
        var = self.ct_state_var
        return z3.And(_ip(reading), z3.Or(*[var == ir.CT_STATES.index(s) for s in TRACKED]))

    def ct_status(self, match: ir.CtStatusMatch, reading: Reading) -> z3.BoolRef:
        self.read.update(("ct", "ct-status"))
        bits = sum(ir.CT_STATUSES[s] for s in match.statuses)
        status = self._var("ct_status", lambda n: z3.BitVec(n, 32))
        held = status & bits == bits
        return z3.And(self.tracked(reading), z3.Not(held) if match.negated else held)

    def ct_mark(self) -> z3.BitVecRef:
        self.read.update(("ct", "ct-mark"))
        return self._var("ct_mark", lambda n: z3.BitVec(n, 32))

    # -- address types, rates, deciders -----------------------------------------

    def addr_type(self, match: ir.AddrTypeMatch, present: z3.BoolRef) -> z3.BoolRef:
        self.read.add(match.field)
        var = self._var(match.field, lambda n: z3.BitVec(n, TYPE_BITS))
        held = z3.Or(*[var == ir.ADDR_TYPES.index(t) for t in match.types])
        return z3.And(present, z3.Not(held) if match.negated else held)

    def within(self, rule: ir.Rule) -> z3.BoolRef:
        """The packet is within ``rule``'s rate."""
        self.read.add("limit")
        key = f"limit_{_key(rule, rule.limit)}"
        return self._var(key, z3.Bool)

    def queued_pass(self, rule: ir.Rule) -> z3.BoolRef:
        self.read.add("queue")
        return self._var(f"queue_{_key(rule, rule.action)}", z3.Bool)

    # -- a witness --------------------------------------------------------------

    def values(self, model: z3.ModelRef) -> dict[str, str]:
        """The value of every input some rule read, as the witness says it."""
        def val(key: str) -> int:
            return model.eval(self.vars[key], model_completion=True).as_long()
        out: dict[str, str] = {}
        for f in ("iif", "oif"):
            if f in self.read and f in self.vars:
                out[f] = self.names[val(f)]
        if "mark" in self.read:
            out["mark"] = hex(val("mark"))
        if "ct" in self.read:
            out["ct state"] = ir.CT_STATES[min(val("ct_state"), len(ir.CT_STATES) - 1)]
        for key, word in (("ct_status", "ct status"), ("ct_mark", "ct mark")):
            if key in self.vars:
                out[word] = hex(val(key))
        for f in ("src-type", "dst-type"):
            if f in self.vars:
                out[f] = ir.ADDR_TYPES[val(f)]
        for key, var in self.vars.items():
            if key.startswith(("limit_", "queue_")):
                out[key] = str(z3.is_true(model.eval(var, model_completion=True)))
        return out


def inputs_text(values: dict[str, str]) -> str:
    """A witness's inputs (:meth:`Inputs.values`) in words."""
    words = []
    for key, value in values.items():
        if key in ("iif", "oif"):
            words.append(f"{key} {shown(value)}")
        elif key.startswith("limit_"):
            words.append("within the rate" if value == "True" else "over the rate")
        elif key.startswith("queue_"):
            words.append("the decider passes" if value == "True" else "the decider drops")
        else:
            words.append(f"{key} {value}")
    return ", ".join(words) or "none"


def _address(reading: Reading, version: int, which: str) -> z3.BitVecRef:
    at = (12 if which == "src" else 16) if version == 4 else (8 if which == "src" else 24)
    return reading.frame.bytes_(reading.l3 + at, 4 if version == 4 else 16)


def _iface(name: str) -> z3.BitVecRef:
    return z3.BitVec(name, IFACE_BITS)


def _ip(reading: Reading) -> z3.BoolRef:
    return z3.Or(reading.is4, reading.is6)


def _matches(pattern: str, name: str) -> bool:
    """``pfc.oracle.context.iface_matches``."""
    return name.startswith(pattern[:-1]) if pattern.endswith("*") else name == pattern


_KEYS: dict[tuple, int] = {}


def _key(rule: ir.Rule, what) -> int:
    """A number per (what the rule tests, ``what``): the same rule in two files, one
    input."""
    return _KEYS.setdefault((signature(rule), repr(_spanless(what))), len(_KEYS))


def signature(rule: ir.Rule) -> tuple:
    """What ``rule`` holds on (``merge.signature``, v2 matches too)."""
    return (rule.family, rule.proto, tuple(repr(_spanless(m)) for m in rule.matches),
            repr(_spanless(rule.limit)))


def _spanless(value):
    """``value`` without its span and set name (where it was written)."""
    if not dataclasses.is_dataclass(value):
        return value
    names = {f.name for f in dataclasses.fields(value)}
    changes = {k: v for k, v in (("span", NO_SPAN), ("set_name", None)) if k in names}
    return dataclasses.replace(value, **changes)


def patterns_of(policies: Iterable[ir.Policy]) -> set[str]:
    """Every interface name or wildcard the lists and their chains name."""
    out: set[str] = set()
    for p in policies:
        for r in list(p.rules) + [r for c in p.chains for r in c.rules]:
            for m in r.matches:
                if isinstance(m, ir.IfaceMatch):
                    out.update(m.names)
    return out
