"""``pfc prove`` of a whole firewall: each target's artifact, hook by hook, proved equal
to that hook list's formula (:mod:`.meaning`) over every frame the hook sees and every
value of the hook's inputs (:mod:`.inputs`), as ``pfc prove`` does for one list.

nft is modelled (:mod:`.nft`: the ruleset loaded into a throw-away namespace, read
back, each base chain executed). A target, or a hook, the prover has no model of is one
``not proved: REASON`` line, never a crash and never "proved". A difference is reported
with its witness frame and inputs; it is not run in the kernel (``pfc verify`` runs
whole firewalls: docs/verify.md "Whole firewalls").
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import z3

from pfc.build import build_ruleset
from pfc.frontend import ir
from pfc.frontend.diagnostics import CompileError
from pfc.frontend.firewall.hooks import BLOCKS
from pfc.frontend.firewall.ruleset import Ruleset
from pfc.prove import views
from pfc.prove.firewall import inputs as inputs_
from pfc.prove.firewall.diff import coverage, label
from pfc.prove.firewall.inputs import inputs_text
from pfc.prove.firewall.meaning import HookMeaning, Outcomes, meaning
from pfc.prove.frame import DEFAULT_BOUND, Frame, Reading, concrete, reads_pushed
from pfc.prove.proof import GaveUp, _search
from pfc.prove.targets.cbpf import Unsupported

MODELLED = ("nft", "iptables")


@dataclass
class HookProof:
    target: str
    hook: str
    status: str  # proved | differs-not-run | not-modelled | not-expressible | error
    reason: str = ""
    bound: int = DEFAULT_BOUND
    view: str = ""
    seconds: float = 0.0
    witness: bytes | None = None
    inputs: dict[str, str] = field(default_factory=dict)
    expected: str = ""
    modelled: str = ""
    covers: list[str] = field(default_factory=list)

    def line(self) -> str:
        where = f"{self.target}/{self.hook}"
        if self.status == "proved":
            return (f"{where}: proved, every frame of at most {self.bound} bytes the hook "
                    f"sees ({self.view} view) and every value of its inputs "
                    f"({self.seconds:.2f} s)")
        if self.status == "not-modelled":
            return f"{where}: not proved: {self.reason}"
        if self.status == "not-expressible":
            return f"{where}: not expressible ({self.reason})"
        if self.status == "error":
            return f"{where}: error: {self.reason}"
        return (f"{where}: DIFFERS (differs-not-run): policy {self.expected}, artifact "
                f"{self.modelled}\n    witness (as the hook sees it): {self.witness.hex()}"
                f"\n    inputs: {inputs_text(self.inputs)}\n    not run in the kernel: "
                "`pfc verify` runs whole firewalls")

    def to_json(self) -> dict:
        return {"target": self.target, "hook": self.hook, "status": self.status,
                "error": self.reason if self.status == "error" else None,
                "not_expressible": self.reason if self.status == "not-expressible" else None,
                "not_proved": self.reason if self.status == "not-modelled" else None,
                "max_len": self.bound, "view": self.view or None,
                "seconds": round(self.seconds, 3), "expected": self.expected or None,
                "artifact": self.modelled or None,
                "witness": self.witness.hex() if self.witness else None,
                "inputs": self.inputs or None, "covers": self.covers}


def view_of(block: str) -> str:
    """The frames a block's hook sees (``pfc.prove.views``): device hooks the frame
    with its outer tag removed; input what IP input delivers; the rest IP input's."""
    if BLOCKS[block].kind == "device":
        return "l2"
    return "input" if BLOCKS[block].hook == "input" else "ip"


def prove_firewall(ruleset: Ruleset, specs: list[str], *, explicit: bool = True,
                   bound: int = DEFAULT_BOUND, timeout: float | None = None
                   ) -> Iterator[HookProof]:
    for spec in specs:
        target, _, hook = spec.partition(":")
        if target not in MODELLED:
            yield HookProof(target, hook or "*", "not-modelled",
                            f"no model of whole firewalls on `{target}` (pfc prove models "
                            f"{', '.join(MODELLED)}; `pfc verify` runs it in the kernel)")
            continue
        yield from _prove_target(ruleset, target, hook or None, explicit, bound, timeout)


def _prove_target(ruleset: Ruleset, target: str, only: str | None, explicit: bool,
                  bound: int, timeout: float | None) -> Iterator[HookProof]:
    from pfc import backends
    carries = backends.get(target).carries
    for policy in ruleset.lists:
        if policy.hook.name not in carries and only in (None, label(policy)):
            yield HookProof(target, label(policy), "not-expressible",
                            f"{target} does not carry the `{policy.hook.name}` block")
    ruleset = Ruleset(tuple(p for p in ruleset.lists if p.hook.name in carries),
                      ruleset.chains, ruleset.interfaces, ruleset.source)
    if not ruleset.lists:
        return
    try:
        built, diags = build_ruleset(ruleset, [target])
    except CompileError as exc:
        built, diags = [], exc.diagnostics
    if not built:
        why = "; ".join(d.message for d in diags) or "nothing to build"
        yield HookProof(target, only or "*", "error" if explicit else "not-expressible", why)
        return
    yield from prove_artifact(ruleset, built[0], only, bound, timeout)


def prove_artifact(ruleset: Ruleset, artifact, only: str | None = None,
                   bound: int = DEFAULT_BOUND, timeout: float | None = None
                   ) -> Iterator[HookProof]:
    """Prove a built (or edited) whole-firewall artifact hook by hook."""
    target = artifact.target
    if target == "nft":
        try:
            listings = _listings(artifact)
        except (OSError, RuntimeError) as exc:
            yield HookProof(target, only or "*", "error",
                            f"cannot load it to read it back: {exc}")
            return
    for policy in ruleset.lists:
        name = label(policy)
        if only is not None and name != only and policy.hook.name != only:
            continue
        if target == "nft":
            model = _nft_model(artifact, listings, policy)
        else:
            model = _iptables_model(artifact, policy)
        if isinstance(model, str):
            yield HookProof(target, name, "not-modelled", model)
            continue
        yield _prove_hook(ruleset, policy, model, target, bound, timeout,
                          artifact_names(artifact))


def _nft_model(artifact, listings: dict[str, str], policy: ir.Policy):
    """How to run the block's base chain, or why it cannot be."""
    from pfc.prove.firewall import nft
    chains = {(block, device): (family, name) for name, (family, block, device)
              in artifact.meta["chains"].items()}
    device = policy.hook.devices[0] if policy.hook.devices else None
    where = chains.get((policy.hook.name, device))
    if where is None:
        return "the artifact has no chain for it"
    family, chain = where
    hook = "ingress" if BLOCKS[policy.hook.name].kind == "device" else policy.hook.name
    return lambda frame, env: nft.run(listings[family], chain, hook, frame, env)


def _iptables_model(artifact, policy: ir.Policy):
    from pfc.prove.firewall import iptables
    table, chain = iptables.table_of(policy.hook.name)
    if (table, policy.hook.name.split()[-1].upper(), chain) not in {
            tuple(p) for p in artifact.meta.get("places", ())}:
        return f"the artifact has no chain {chain} in table {table} for it"
    return lambda frame, env: iptables.run(artifact, policy.hook.name, frame, env)


def _listings(artifact) -> dict[str, str]:
    """Each table of the artifact as the kernel lists it (netlink expressions)."""
    from pyroute2 import IPRoute

    from pfc.backends.nft.run import _nft, nft_cmd
    from pfc.kernel import netns
    devices = {d for _, _, d in artifact.meta["chains"].values() if d}
    reason = netns.missing_privileges()
    if reason:
        raise OSError(reason)
    with netns.lab() as _:
        with IPRoute() as ipr:
            for dev in sorted(devices):
                ipr.link("add", ifname=dev, kind="veth", peer=f"p{dev}"[:15])
        ctx = _nft()
        nft_cmd(ctx, artifact.text)
        ctx.set_debug("netlink")
        return {family: nft_cmd(ctx, f"list table {family} {artifact.meta['table']}")
                for family in artifact.meta["tables"]}


def artifact_names(artifact) -> set[str]:
    """The interface names and wildcards (as pfc writes them: ``eth*``) the artifact
    tests, so that the name classes tell apart every name it does (``lo+`` for
    ``lo``: another name starting ``lo`` is a class of its own)."""
    found: set[str] = set()
    if artifact.target == "nft":
        for group in re.findall(r'(?:iif|oif)name\s+(?:!=\s*)?(\{[^}]*\}|"[^"]*")',
                                artifact.text):
            found.update(re.findall(r'"([^"]*)"', group))
        return found
    for data in artifact.files.values():
        for name in re.findall(r"(?:^| )-[io] (\S+)", data.decode(errors="replace"), re.M):
            found.add(name[:-1] + "*" if name.endswith("+") else name)
    return found


def _prove_hook(ruleset: Ruleset, policy: ir.Policy, model, target: str, bound: int,
                timeout: float | None, named: set[str] = frozenset()) -> HookProof:
    from pfc.prove.firewall import nft

    start = time.perf_counter()
    block, name = policy.hook.name, label(policy)
    kind = view_of(block)
    names = inputs_.name_classes(inputs_.patterns_of([policy]) | {"lo"} | named)
    ins = inputs_.Inputs(block, names)
    frame = Frame.fresh(bound=bound)
    reading = Reading(frame, views.skip_tag(kind))
    outcomes = Outcomes()
    pol = meaning(policy, reading, ins, outcomes)
    rules = {r.index: r for r in ruleset.rules}
    env = nft.Env(ins, outcomes, rules, reading.is4)
    result = HookProof(target, name, "proved", bound=bound, view=kind,
                       covers=coverage(block, ins, (policy,)))
    try:
        art = model(frame, env)
        differs = _differ(pol, art, frame)
        differs = z3.And(ins.constraints(reading), differs)
        deadline = None if timeout is None else time.monotonic() + timeout
        witness, _ = _search(kind, frame, differs, deadline)
    except GaveUp as exc:
        return HookProof(target, name, "error", f"no answer within {timeout:g} s ({exc})",
                         bound=bound, view=kind)
    except Unsupported as exc:
        return HookProof(target, name, "not-modelled", str(exc), bound=bound, view=kind,
                         seconds=time.perf_counter() - start)
    except (z3.Z3Exception, KeyError, IndexError, ValueError) as exc:  # a pfc bug
        return HookProof(target, name, "error", f"the model of {target} failed on this "
                         f"hook ({type(exc).__name__}: {exc}): a pfc bug, please report it",
                         bound=bound, view=kind)
    if witness is not None:
        result.status, result.witness = "differs-not-run", witness
        value = _values_on(reads_pushed(differs), frame, witness)
        result.inputs = ins.values(value.model)
        result.expected = _said(value, pol, outcomes)
        result.modelled = _said(value, art, outcomes)
    result.seconds = time.perf_counter() - start
    return result


def _differ(a: HookMeaning, b: HookMeaning, frame: Frame) -> z3.BoolRef:
    from pfc.prove.firewall.diff import differ
    return differ(a, b, frame)


class _Values:
    """Terms evaluated on the witness frame and a model of the inputs."""

    def __init__(self, expr: z3.BoolRef, frame: Frame, data: bytes):
        self.sub = concrete(frame, data)
        s = z3.Solver()
        s.add(z3.substitute(expr, *self.sub))
        s.check()
        self.model = s.model()

    def __call__(self, term: z3.ExprRef) -> z3.ExprRef:
        return self.model.eval(z3.substitute(term, *self.sub), model_completion=True)


def _values_on(expr: z3.BoolRef, frame: Frame, data: bytes) -> _Values:
    return _Values(expr, frame, data)


def _said(value: _Values, m: HookMeaning, outcomes: Outcomes) -> str:
    word = outcomes.words[value(m.outcome).as_long()]
    mark = value(m.mark).as_long()
    notrack = z3.is_true(value(m.notrack))
    return f"{word}, mark {mark:#x}" + (", notrack" if notrack else "")
