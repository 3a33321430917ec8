"""Prove one policy file on several targets: compile each, prove each artifact.

``TARGET`` or ``TARGET:HOOK`` per entry, as ``pfc verify`` takes them; compiled with
the options ``pfc verify`` uses (an nft artifact for netdev ingress on ``dut``, the
device of the throw-away namespaces the runners use). A target that cannot express
the policy is reported as such (an error when it was named explicitly); so is a target
the prover has no model of (``nfmod``, ``u32``: ``pfc verify`` runs them). A policy
with ``log``, ``limit``, ``audit`` or ``ct state`` is not proved at all
(:func:`stateful`): the formula is per frame.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pfc.backends import registry
from pfc.backends.nft.run import NftError
from pfc.build import build_artifact
from pfc.frontend import ir
from pfc.frontend.diagnostics import CompileError
from pfc.frontend.pipeline import Compiled
from pfc.prove.proof import Proof, adopt, given_hook, prove
from pfc.prove.targets.cbpf import Unsupported
from pfc.prove.views import KINDS

MODELLED = tuple(t for t in registry() if any(t == k for k, _ in KINDS))  # with a model

OPTIONS = {"dev": "dut"}  # as pfc.verifier.run.RUN_OPTIONS
STATUS = {"proved": "proved", "differs": "differs", "unconfirmed": "unconfirmed",
          "differs (not run)": "differs-not-run"}  # Proof.status -> the JSON's word


@dataclass
class TargetProof:
    target: str
    hook: str = ""
    proof: Proof | None = None
    error: str = ""  # the artifact could not be built or modelled (exit 2)
    skipped: str = ""  # not expressible, with `--targets all`
    unmodelled: str = ""  # no model of the target, with `--targets all`: not proved

    @property
    def status(self) -> str:
        if self.unmodelled:
            return "not-modelled"
        if self.skipped:
            return "not-expressible"
        if self.error:
            return "error"
        return STATUS[self.proof.status]

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
        out = {"target": self.target, "hook": self.hook, "status": self.status,
               "error": self.error or None, "not_expressible": self.skipped or None,
               "not_proved": self.unmodelled or None}
        p = self.proof
        if p is not None:
            out |= {"max_len": p.bound, "view": p.seen,
                    "seconds": round(p.seconds, 3), "expected": p.expected or None,
                    "artifact": p.modelled or None,
                    "witness": p.witness.hex() if p.witness else None,
                    "wire": p.wire.hex() if p.wire else None, "note": p.note or None}
        return out


def stateful(compiled: Compiled) -> str | None:
    """Why ``pfc prove`` does not prove this policy at all (it uses log, limit, audit
    or ct state: time and connections, which a formula over one frame cannot state),
    or None."""
    used = ir.flow_features(compiled.require())
    if not used:
        return None
    return f"pfc prove covers stateless policies (this one uses {', '.join(used)})"


FREE_BITS = 8  # a redirect's rule leaving more destination address bits free: slow


def slow_redirects(policy: ir.Policy) -> list[str]:
    """A note per ``redirect`` whose rule leaves more than ``FREE_BITS`` bits of the
    destination address free: every checksum update is then over a free address, which
    the solver takes minutes for or does not finish (docs/prove.md "What is not
    proved": /32 0.6 s, /24 26 s, /16 and no ``dst`` match over 60 s on tc)."""
    notes = []
    for rule in policy.rules:
        if not isinstance(rule.action, ir.Redirect):
            continue
        size = rule.action.address.max_prefixlen
        fixed = [min((p.prefixlen for p in m.prefixes if p.max_prefixlen == size),
                     default=0) for m in rule.matches
                 if isinstance(m, ir.AddrMatch) and m.field == "dst" and not m.negated]
        free = size - max(fixed, default=0)
        if free > FREE_BITS:
            notes.append(f"the redirect at line {rule.line} leaves {free} bits of the "
                         "destination address free: its proof may not finish "
                         "(docs/prove.md \"What is not proved\"; --timeout S bounds it)")
    return notes


def prove_file(compiled: Compiled, specs: list[str], *, explicit: bool = True,
               artifact: str | None = None, bound: int, confirm: bool = True,
               timeout: float | None = None) -> Iterator[TargetProof]:
    """One proof per target spec, each as soon as it is done (a stateless policy:
    :func:`stateful` first); ``timeout``: seconds each proof may take (a proof the
    solver has not finished by then is an error, exit 2)."""
    for spec in specs:
        yield _one(compiled, spec, explicit, artifact, bound, confirm, timeout)


def _one(compiled: Compiled, spec: str, explicit: bool, path: str | None, bound: int,
         confirm: bool, timeout: float | None) -> TargetProof:
    target, _, hook = spec.partition(":")
    if path is not None:
        try:
            hook = given_hook(target, path, hook or None) or ""
        except OSError as exc:
            return TargetProof(target, hook, error=f"cannot read {path}: {exc.strerror}")
    result = TargetProof(target, hook)
    if target not in MODELLED:
        why = (f"no model for target `{target}` (pfc prove models "
               f"{', '.join(MODELLED)}; `pfc verify` runs it in the kernel)")
        result.error, result.unmodelled = (why, "") if explicit else ("", why)
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
    except (Unsupported, CompileError, OSError, NftError) as exc:
        result.error = _first_line(exc)
    return result


def _first_line(exc: BaseException) -> str:
    """An error as one line (nft's own messages span three, with carets)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines[:2]) if lines else type(exc).__name__
