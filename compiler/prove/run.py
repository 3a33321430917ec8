"""Prove one policy file on several targets: compile each, prove each artifact.

``TARGET`` or ``TARGET:HOOK`` per entry, as ``pfc verify`` takes them; compiled with
the options ``pfc verify`` uses (an nft artifact for netdev ingress on ``dut``, the
device of the throw-away namespaces the runners use). A target that cannot express
the policy is reported as such (an error when it was named explicitly); so is a target
the prover has no model of (``nfmod``, ``u32``: ``pfc verify`` runs them).
"""

from __future__ import annotations

from dataclasses import dataclass

from pfc.build import build_artifact
from pfc.frontend import ir
from pfc.frontend.diagnostics import CompileError
from pfc.frontend.pipeline import Compiled
from pfc.prove.proof import Proof, adopt, prove
from pfc.prove.targets.cbpf import Unsupported
from pfc.prove.views import KINDS

MODELLED = tuple(dict.fromkeys(t for t, _ in KINDS))  # the targets the prover reads

OPTIONS = {"dev": "dut"}  # as pfc.verifier.run.RUN_OPTIONS


@dataclass
class TargetProof:
    target: str
    hook: str = ""
    proof: Proof | None = None
    error: str = ""  # the artifact could not be built or modelled (exit 2)
    skipped: str = ""  # not expressible, with `--targets all`
    unmodelled: str = ""  # no model of the target, with `--targets all`: not proved

    def line(self) -> str:
        where = f"{self.target}/{self.hook}" if self.hook else self.target
        if self.skipped:
            return f"{where}: not expressible ({self.skipped})"
        if self.unmodelled:
            return f"{where}: not proved: {self.unmodelled}"
        if self.error:
            return f"{where}: error: {self.error}"
        p = self.proof
        if p.equal:
            return (f"{where}: proved, every frame of at most {p.bound} bytes the hook "
                    f"sees ({p.seen} view) ({p.seconds:.2f} s)")
        lines = [f"{where}: DIFFERS ({p.status}): policy {p.expected}, artifact "
                 f"{p.modelled}", f"    witness (as the hook sees it): {p.witness.hex()}"]
        if p.note:
            lines.append("    " + p.note.replace("\n", "\n    "))
        return "\n".join(lines)

    def to_json(self) -> dict:
        out = {"target": self.target, "hook": self.hook, "error": self.error or None,
               "not_expressible": self.skipped or None,
               "not_proved": self.unmodelled or None}
        p = self.proof
        if p is not None:
            out |= {"status": p.status, "max_len": p.bound, "view": p.seen,
                    "seconds": round(p.seconds, 3), "expected": p.expected or None,
                    "artifact": p.modelled or None,
                    "witness": p.witness.hex() if p.witness else None,
                    "wire": p.wire.hex() if p.wire else None, "note": p.note or None}
        return out


def prove_file(compiled: Compiled, specs: list[str], *, explicit: bool = True,
               artifact: str | None = None, bound: int, confirm: bool = True,
               timeout: float | None = None) -> list[TargetProof]:
    """One proof per target spec; ``timeout``: seconds each proof may take (a proof
    the solver has not finished by then is an error, exit 2)."""
    return [_one(compiled, spec, explicit, artifact, bound, confirm, timeout)
            for spec in specs]


def _one(compiled: Compiled, spec: str, explicit: bool, path: str | None, bound: int,
         confirm: bool, timeout: float | None) -> TargetProof:
    target, _, hook = spec.partition(":")
    result = TargetProof(target, hook)
    if target not in MODELLED:
        why = (f"no model for target `{target}` (pfc prove models "
               f"{', '.join(MODELLED)}; `pfc verify` runs it in the kernel)")
        result.error, result.unmodelled = (why, "") if explicit else ("", why)
        return result
    used = ir.flow_features(compiled.require())
    if used:  # the formula is per frame: logs, buckets and connections are not in it
        why = f"pfc prove covers stateless policies; this one uses {', '.join(used)}"
        result.error, result.skipped = (why, None) if explicit else (None, why)
        return result
    built, diags = build_artifact(compiled, target, hook=hook or None,
                                  **(OPTIONS if target == "nft" else {}))
    if built is None:
        what = "; ".join(d.message for d in diags)
        if explicit:
            result.error = what
        else:
            result.skipped = what
        return result
    result.hook = built.hook
    try:
        if path is not None:
            built = adopt(built, path)
        result.proof = prove(built, compiled.require(), bound=bound, confirm=confirm,
                             timeout=timeout)
    except (Unsupported, CompileError, OSError) as exc:
        result.error = str(exc)
    return result
