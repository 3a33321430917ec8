"""``pfc prove``: an artifact equal to its policy on every frame its hook can see, up
to a frame length bound.

The artifact's behaviour (its target's symbolic executor in :mod:`pfc.prove.targets`:
``cbpf``, ``ebpf``, ``nft``, ``iptables``) and the policy's meaning
(:mod:`pfc.prove.formula`) over one symbolic frame, the frame as the hook sees it
(:mod:`pfc.prove.views`). The solver looks for a frame where the verdicts differ, or
both pass with other bytes, or (where the target's counters are modelled) a count
rule's counter moves on one side only. None: proved. One: the witness, which is then
run through the artifact itself (in the kernel, through the backend's runner and
:func:`pfc.verifier.equiv.compare`) to confirm the difference before it is reported.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import z3

from pfc import backends
from pfc.backends.base import Artifact
from pfc.frontend import ir
from pfc.kernel.observation import KernelUnavailable
from pfc.prove import formula, views
from pfc.prove.frame import (
    DEFAULT_BOUND,
    Behaviour,
    Frame,
    Reading,
    check,
    concrete,
    frame_bytes,
    frames_differ,
    reads_pushed,
    solver,
)
from pfc.prove.targets.cbpf import Unsupported

SHORT = 128
SHORT_MS = 1000  # how long to look for a witness of at most SHORT bytes


@dataclass
class Proof:
    target: str
    hook: str
    equal: bool
    bound: int
    seen: str  # which frames: the view kind
    witness: bytes | None = None  # as the hook sees it
    wire: bytes | None = None  # a frame to send for the hook to see ``witness``
    expected: str = ""  # what the policy does to the witness
    modelled: str = ""  # what the model of the artifact does to it
    confirmed: bool | None = None  # the artifact, run on the witness, differs
    note: str = ""
    seconds: float = 0.0
    fell_back: str = ""  # why the bit-blasting tactic gave up (then z3's default solved)

    @property
    def status(self) -> str:
        if self.equal:
            return "proved"
        return {True: "differs", False: "unconfirmed", None: "differs (not run)"}[
            self.confirmed]


def behaviour(artifact: Artifact, frame: Frame) -> Behaviour:
    """The artifact's behaviour on the symbolic frame (its target's executor)."""
    target = artifact.target
    if target == "cbpf":
        from pfc.prove.targets import cbpf
        kept, whole = cbpf.behaviour(list(artifact.meta["insns"]), frame)
        return Behaviour(kept, valid=whole)
    if target in ("socket", "tc", "xdp"):
        from pfc.prove.targets import ebpf
        return ebpf.behaviour(artifact, frame)
    if target == "nft":
        from pfc.prove.targets import nft
        return nft.behaviour(artifact, frame)
    if target == "iptables":
        from pfc.prove.targets import iptables
        return iptables.behaviour(artifact, frame)
    raise ValueError(f"pfc prove has no model of target `{target}`")


def differ(pol: formula.Meaning, art: Behaviour, frame: Frame) -> z3.BoolRef:
    out = frame.data if art.out is None else art.out
    terms = [pol.passes != art.passes,
             z3.And(pol.passes, art.passes, frames_differ(pol.out, out, frame))]
    if art.valid is not None:
        terms.append(z3.Not(art.valid))
    if art.counted is not None:
        for index, held in pol.counted.items():
            terms.append(held != art.counted.get(index, formula.FALSE))
    return z3.Or(*terms)


def prove(artifact: Artifact, policy: ir.Policy | None = None, *,
          bound: int = DEFAULT_BOUND, confirm: bool = True,
          timeout: float | None = None) -> Proof:
    """Prove ``artifact`` equal to ``policy`` (default: the artifact's own). With
    ``timeout`` (seconds from the start), :class:`GaveUp` when the solver has not
    answered by then (the symbolic execution before it is not interrupted)."""
    start = time.perf_counter()
    deadline = None if timeout is None else time.monotonic() + timeout
    policy = policy or artifact.policy
    kind = views.kind(artifact.target, artifact.hook)
    frame = Frame.fresh(bound=bound)
    pol = formula.meaning(policy, Reading(frame, views.skip_tag(kind)))
    art = behaviour(artifact, frame)
    proof = Proof(artifact.target, artifact.hook, True, bound, kind)
    try:
        witness, proof.fell_back = _search(kind, frame, differ(pol, art, frame), deadline)
    except GaveUp as exc:
        raise GaveUp(f"no answer within {timeout:g} s ({exc}); the proof may need "
                     "longer: docs/prove.md \"Speed\"") from None
    if witness is not None:
        proof.equal, proof.witness = False, witness
        proof.wire = views.wire(kind, witness)
        proof.expected, proof.modelled = _describe(policy, pol, art, frame, witness, kind)
        if confirm:
            proof.confirmed, proof.note = run_witness(artifact, policy, proof.wire)
    proof.seconds = time.perf_counter() - start
    return proof


def _search(kind: str, frame: Frame, differs: z3.BoolRef,
            deadline: float | None = None) -> tuple[bytes | None, str]:
    """(a frame the hook sees on which ``differs`` holds or None, why the tactic gave
    up if it did). Where the hook sees only IPv4 headers whose checksum verifies, the
    search first leaves the checksum free (a superset: none there, none at all), then
    sets it in the witness (:func:`views.repair`) and keeps it when the frame still
    differs; only otherwise is the checksum part of the search. A solver finds a frame
    whose header sums to 0xffff slowly: 5-130 s for an iptables mutant's witness on a
    loaded machine, against 0.1-1 s with the checksum set afterwards."""
    check = solver()
    differs = reads_pushed(differs)
    check.add(views.constraint(kind, frame, checksum=not views.checked(kind)), differs)
    witness = _witness(check, frame, deadline)
    if witness is not None and views.checked(kind):
        repaired = views.repair(kind, witness)
        if _holds_on(z3.And(views.constraint(kind, frame), differs), frame, repaired):
            return repaired, check.fell_back
        check.add(views.constraint(kind, frame))
        witness = _witness(check, frame, deadline)
    return witness, check.fell_back


def _holds_on(expr: z3.BoolRef, frame: Frame, data: bytes) -> bool:
    """``expr`` can hold with the frame ``data`` (other variables free)."""
    fixed = z3.Solver()
    fixed.add(z3.substitute(expr, *concrete(frame, data)))
    return check(fixed) == z3.sat


def _witness(solver, frame: Frame, deadline: float | None = None) -> bytes | None:
    """A frame on which the two sides differ, or None (proved). Every frame first
    (a proof is one query); on a difference, a short one (<= ``SHORT`` bytes) when
    there is one, for a readable witness."""
    found = _check(solver, deadline)
    if found == z3.unsat:
        return None
    data = frame_bytes(solver.model(), frame)
    if len(data) > SHORT:  # a shorter one if the solver finds it soon (it can take
        solver.push()      # 100x longer than the first: an IPv4 header checksum
        solver.add(z3.ULE(frame.length, SHORT))  # over fewer free bytes)
        if solver.check(SHORT_MS, fall_back=False) == z3.sat:
            data = frame_bytes(solver.model(), frame)
        solver.pop()
    return data


class GaveUp(Unsupported):
    """The solver had no answer by the proof's deadline (``pfc prove --timeout``)."""


def _check(solver, deadline: float | None = None) -> z3.CheckSatResult:
    found = solver.check(deadline=deadline)
    if found == z3.unknown and deadline is not None:
        raise GaveUp(f"the solver's reason: {solver.reason_unknown()}")
    if found == z3.unknown:
        raise RuntimeError(f"the solver gave up: {solver.reason_unknown()}")
    return found


def _describe(policy: ir.Policy, pol: formula.Meaning, art: Behaviour, frame: Frame,
              witness: bytes, kind: str) -> tuple[str, str]:
    from pfc.oracle import interp
    want = interp.evaluate(policy, witness, skip_tag=views.skip_tag(kind))
    rule = "default" if want.rule is None else f"rule at line {policy.rule(want.rule).line}"
    got = formula.evaluate(formula.Meaning(art.passes, formula.bv(0), art.counted or {},
                                           frame.data if art.out is None else art.out),
                           frame, witness)
    expected = f"{want.verdict.value} ({rule})"
    modelled = "pass" if got.passes else "drop"
    if got.passes and want.verdict is ir.Verdict.PASS and got.out != want.frame:
        modelled += " with other bytes"
    if art.counted is not None and set(got.counted) != set(want.counted):
        modelled += f", counters of rules {sorted(got.counted)} (policy: {sorted(want.counted)})"
    return expected, modelled


def run_witness(artifact: Artifact, policy: ir.Policy, wire: bytes) -> tuple[bool | None, str]:
    """Run the artifact on ``wire`` (its backend's runner, in the kernel) and judge it
    against the interpreter: (it differs, a note)."""
    from dataclasses import replace

    from pfc.verifier.equiv import compare
    backend = backends.get(artifact.target)
    if backend.run is None:
        return None, f"target `{artifact.target}` has no runner"
    judged = replace_policy(artifact, policy) if policy is not artifact.policy else artifact
    try:
        report = compare(judged, backend, [wire])
    except KernelUnavailable as exc:
        return None, f"not run: {exc}"
    except (RuntimeError, AssertionError, OSError) as exc:
        if refused(exc):
            return None, f"not run: {REFUSED}: " + str(exc).splitlines()[0]
        return True, f"the artifact misbehaves on the witness: {exc}"
    if report.seen == 0:
        return None, "the hook's runner does not show it this frame"
    if not report.ok:
        return True, replace(report, mismatches=report.mismatches[:1]).summary()
    return False, ("the artifact, run on the witness, agrees with the policy: the model "
                   "of the target is wrong (a pfc bug, please report it)")


REFUSED = "the kernel refuses to load the artifact"


def refused(exc: BaseException) -> bool:
    """``exc`` is the kernel (or its loader) refusing the artifact, not the artifact
    misbehaving once loaded: the eBPF verifier or libbpf, ``SO_ATTACH_FILTER``, nft,
    ``iptables-restore`` and ``ipset restore`` (the iptables runner's failed tool)."""
    from pfc.backends.cbpf.run import KernelRejected
    from pfc.backends.nft.run import NftError
    from pfc.kernel.bpf import BpfError
    if isinstance(exc, BpfError | KernelRejected | NftError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and text.startswith("`") and (
        "restore" in text.split("`")[1]) and "failed" in text


def loads(artifact: Artifact, frame: bytes) -> bool:
    """The kernel takes the artifact (its runner loads it and runs it on ``frame``)."""
    from pfc.verifier.equiv import compare
    try:
        compare(artifact, backends.get(artifact.target), [frame])
    except (RuntimeError, AssertionError, OSError) as exc:
        return not refused(exc)
    return True


def replace_policy(artifact: Artifact, policy: ir.Policy) -> Artifact:
    from dataclasses import replace
    return replace(artifact, policy=policy)


# ------------------------------------------------------------------- given artifacts

def given_hook(target: str, path: str, hook: str | None) -> str | None:
    """The hook a given artifact file is for: ``hook`` (``--hook``) or, for nft, the
    base chain's hook the file declares (the file's table and chain are the ones
    loaded and read back). ValueError (a usage error) when they disagree or an nft
    file names no single hook and none is given; OSError when it cannot be read."""
    if target != "nft":
        return hook
    from pathlib import Path

    from pfc.prove.targets import nft
    declared = nft.hook_of(Path(path).read_bytes())
    if hook is not None and declared is not None and declared != hook:
        raise ValueError(f"{path} is for hook `{declared}`, not `{hook}` (--hook)")
    if hook is None and declared is None:
        raise ValueError(f"{path}: no single base chain hook in the file; give --hook")
    return hook or declared


def adopt(artifact: Artifact, path: str) -> Artifact:
    """``artifact`` (pfc's own, for its meta data and runner) with the program read
    from ``path`` instead: a hand-edited or foreign file of the same target and hook.
    ValueError when the file cannot be read as that target's artifact."""
    from dataclasses import replace
    from pathlib import Path

    data = Path(path).read_bytes()
    target = artifact.target
    if target == "cbpf":
        from pfc.prove.targets import cbpf
        fmt = Path(path).suffix.lstrip(".")
        if fmt not in ("asm", "c", "ddd", "bin"):
            raise ValueError(f"{path}: a cbpf program file ends in .asm, .c, .ddd or .bin")
        insns = cbpf.parse(data, fmt)
        return replace(artifact, format=fmt, files={Path(path).name: data},
                       meta=artifact.meta | {"insns": insns, "length": len(insns)})
    if target in ("socket", "tc", "xdp"):
        from pfc.prove.targets import ebpf
        return ebpf.adopt(artifact, Path(path), data)
    if target == "nft":
        from pfc.prove.targets import nft
        return nft.adopt(artifact, Path(path), data)
    if target == "iptables":
        from pfc.prove.targets import iptables
        return iptables.adopt(artifact, Path(path), data)
    raise ValueError(f"pfc prove has no model of target `{target}`")
