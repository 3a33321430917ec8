"""The reference interpreter on one hook list with given inputs (a witness's), and the
formula evaluated on the same frame and inputs: what the firewall proof tests compare."""

from __future__ import annotations

import random

import z3

from pfc.frontend import ir
from pfc.frontend.firewall.hooks import BLOCKS, allows_field
from pfc.oracle import interp
from pfc.oracle.conntrack import Reading
from pfc.oracle.context import Context
from pfc.oracle.flow import Flow
from pfc.oracle.packets import ip_field, read_frame
from pfc.prove.firewall.inputs import TRACKED, Inputs
from pfc.prove.firewall.meaning import meaning, outcome_word
from pfc.prove.frame import Frame, bv, concrete
from pfc.prove.frame import Reading as FrameReading


def consistent(view, values: dict) -> dict:
    """``values`` with one type for a source address equal to the destination (the
    inputs' constraint)."""
    src, dst = ip_field(view, "src"), ip_field(view, "dst")
    kind = values.get("dst-type", values.get("src-type"))
    if src is not None and src == dst and kind is not None:
        return values | {"src-type": kind, "dst-type": kind}
    return values


class Types:
    """Address types as the inputs say (``src-type``, ``dst-type``)."""

    def __init__(self, view, src: str, dst: str):
        self.by = {ip_field(view, "src"): src, ip_field(view, "dst"): dst}

    def addr_type(self, address) -> str:
        return self.by[address]


def interpreted(policy: ir.Policy, frame: bytes, values: dict) -> tuple:
    """(outcome word, deciding rule, mark, notrack) of the interpreter under ``values``
    (iif, oif, mark, ct state, ct status, ct mark, src-type, dst-type: as ints/names;
    every rate within)."""
    block = BLOCKS[policy.hook.name]
    skip = policy.hook.name == "ingress"
    view = read_frame(frame, skip)
    values = consistent(view, values)
    state = values.get("ct state", "new")
    tracked = state in TRACKED
    ctx = Context(iif=values.get("iif") if allows_field(block, "iif") else None,
                  oif=values.get("oif") if allows_field(block, "oif") else None,
                  mark=values.get("mark", 0),
                  ct_status=values.get("ct status", 0) if tracked else None,
                  ct_mark=values.get("ct mark", 0) if tracked else None,
                  host=Types(view, values.get("src-type", "unicast"),
                             values.get("dst-type", "unicast")))
    flow = Flow(tracking=True)
    flow.reading = Reading(state if view.version is not None else None)
    out = interp.evaluate(policy, frame, skip_tag=skip, flow=flow, ctx=ctx, part=True)
    if out.reject:
        word = f"reject with {out.reject}"
    elif out.nat is not None:
        word = outcome_word(out.nat)
    else:
        word = out.verdict.value
    return word, out.rule, out.mark, out.notrack


class Formula:
    """A list's meaning over a symbolic frame and inputs, evaluated concretely."""

    def __init__(self, policy: ir.Policy, names: tuple[str, ...]):
        from pfc.prove.firewall.meaning import Outcomes
        self.policy, self.outcomes = policy, Outcomes()
        self.frame = Frame.fresh()
        self.inputs = Inputs(policy.hook.name, names)
        reading = FrameReading(self.frame, skip_tag=policy.hook.name == "ingress")
        self.m = meaning(policy, reading, self.inputs, self.outcomes)

    def evaluate(self, frame: bytes, values: dict) -> tuple:
        ins = self.inputs
        skip = self.policy.hook.name == "ingress"
        values = consistent(read_frame(frame, skip), values)
        sub = concrete(self.frame, frame)
        fixed = {"iif": ins.names.index(values.get("iif", ins.names[-1])),
                 "oif": ins.names.index(values.get("oif", ins.names[-1])),
                 "mark": values.get("mark", 0),
                 "ct_state": ir.CT_STATES.index(values.get("ct state", "new")),
                 "ct_status": values.get("ct status", 0), "ct_mark": values.get("ct mark", 0),
                 "src-type": ir.ADDR_TYPES.index(values.get("src-type", "unicast")),
                 "dst-type": ir.ADDR_TYPES.index(values.get("dst-type", "unicast"))}
        for key, var in ins.vars.items():
            if key.startswith(("limit_", "queue_")):
                sub.append((var, z3.BoolVal(True)))
            elif key in fixed:
                sub.append((var, bv(fixed[key], var.size())))

        def value(term):
            return z3.simplify(z3.substitute(term, *sub))
        rule = value(self.m.rule).as_long()
        return (self.outcomes.words[value(self.m.outcome).as_long()],
                None if rule == 0xFFFFFFFF else rule, value(self.m.mark).as_long(),
                z3.is_true(value(self.m.notrack)))


def random_values(rng: random.Random, names: tuple[str, ...]) -> dict:
    return {"iif": rng.choice(names), "oif": rng.choice(names),
            "mark": rng.choice((0, 7, 8, rng.getrandbits(32))),
            "ct state": rng.choice(ir.CT_STATES),
            "ct status": rng.choice((0, 0x20, 0x2A, 0x8)),
            "ct mark": rng.choice((0, 0x10)),
            "src-type": rng.choice(ir.ADDR_TYPES), "dst-type": rng.choice(ir.ADDR_TYPES)}


def model_values(model: z3.ModelRef, inputs: Inputs) -> dict:
    """The inputs a model gives, as :func:`interpreted` takes them."""
    def val(key: str) -> int:
        return model.eval(inputs.vars[key], model_completion=True).as_long()
    out: dict = {}
    for key in ("iif", "oif"):
        if key in inputs.vars:
            out[key] = inputs.names[val(key)]
    for key, word in (("mark", "mark"), ("ct_status", "ct status"), ("ct_mark", "ct mark")):
        if key in inputs.vars:
            out[word] = val(key)
    if "ct_state" in inputs.vars:
        out["ct state"] = ir.CT_STATES[val("ct_state")]
    for key in ("src-type", "dst-type"):
        if key in inputs.vars:
            out[key] = ir.ADDR_TYPES[val(key)]
    return out


def deciding_witnesses(f: Formula) -> dict[int | None, tuple[bytes, dict]]:
    """For each rule of the list (and the default) that can decide, set the mark or
    ``notrack``: a frame and inputs on which it does (every rate within)."""
    from pfc.prove.firewall.meaning import scope
    from pfc.prove.frame import frame_bytes, solver

    every = list(f.policy.rules) + [r for c in f.policy.chains for r in c.rules]
    found = {}
    reading = FrameReading(f.frame, skip_tag=f.policy.hook.name == "ingress")
    goals = [(r.index, f.m.rule == r.index) for r in every if r.terminal or isinstance(
        r.action, ir.Jump)]
    goals.append((None, f.m.rule == 0xFFFFFFFF))
    goals += [(r.index, z3.And(f.m.mark == r.action.value, f.inputs.mark != r.action.value))
              for r in every if isinstance(r.action, ir.Mark)]
    goals += [(r.index, f.m.notrack) for r in every if isinstance(r.action, ir.Notrack)]
    for index, goal in goals:
        s = solver(light=True)
        s.add(scope(f.policy.hook.name, reading), f.inputs.constraints(reading),
              z3.ULE(f.frame.length, 128), goal)
        s.add(*[var for key, var in f.inputs.vars.items() if key.startswith("limit_")])
        if s.check() == z3.sat:
            model = s.model()
            found[index] = (frame_bytes(model, f.frame), model_values(model, f.inputs))
    return found
