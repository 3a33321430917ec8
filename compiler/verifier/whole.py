"""``pfc verify`` of a whole firewall file (v2): each assignment of its blocks to
targets (a list as ``pfc compile --target`` takes it) compiled, then run in the host lab
against the path interpreter (:func:`pfc.verifier.firewall.verify_ruleset`), as data
the CLI and the library print (docs/verify.md "Whole firewalls").

A result's ``status`` is v1's (``pfc.verifier.run.TargetResult``): ``agree``,
``disagree``, ``not-expressible`` (a block no target of the list carries, a rule the
carrying target cannot express), ``compiled-only`` (no kernel run: privileges, or a
part the host lab does not load yet: an eBPF program of another block than ``ingress
DEV``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pfc.build import build_ruleset
from pfc.frontend.diagnostics import Diagnostic, to_json
from pfc.frontend.firewall.ruleset import Ruleset
from pfc.frontend.source import SourceFile
from pfc.kernel.netns import missing_privileges
from pfc.verifier.firewall import Report, verify_ruleset

RUNS = ("nft", "iptables", "xdp", "tc")  # the parts the host lab loads
DEFAULT = ("nft",)


@dataclass
class FirewallResult:
    targets: list[str]
    status: str = "agree"
    report: Report | None = None
    diagnostics: list[Diagnostic] = field(default_factory=list)  # why not expressible
    reason: str = ""

    @property
    def target(self) -> str:
        return ",".join(self.targets)

    @property
    def ran(self) -> bool:
        return self.status in ("agree", "disagree")

    @property
    def failed(self) -> bool:
        return self.status in ("disagree", "not-expressible")

    def to_json(self, sources: dict[str, SourceFile] | None = None) -> dict:
        r = self.report
        return {"target": self.target, "status": self.status,
                "packets": r.items if r else 0, "agree": r.agree if r else 0,
                "disagree": r.items - r.agree if r else 0,
                "differences": [{"packet": d.item + 1, "what": d.what,
                                 "expected": d.expected, "got": d.got}
                                for d in r.differences[:10]] if r else [],
                "not_expressible": [to_json(d, sources or {}) for d in self.diagnostics],
                "reason": self.reason or None}


def verify_file(ruleset: Ruleset, targets: list[str], n: int = 300, seed: int = 0,
                tick: Callable[[int], None] = lambda _: None) -> FirewallResult:
    """One assignment ``targets`` of ``ruleset``'s blocks, verified (module doc)."""
    artifacts, diags = build_ruleset(ruleset, targets)
    if diags:
        return FirewallResult(targets, "not-expressible", diagnostics=diags)
    others = sorted({a.target for a in artifacts} - set(RUNS)) + sorted(
        f"{a.target} {a.policy.hook.name}" for a in artifacts
        if a.target in ("xdp", "tc") and (a.policy.hook is None or a.policy.hook.name !=
                                          "ingress" or not a.policy.hook.devices))
    if others:
        return FirewallResult(targets, "compiled-only", reason=(
            f"the host lab loads nft and iptables parts and ingress programs on named "
            f"devices, not {', '.join(others)} yet"))
    lacking = missing_privileges()
    if lacking is not None:
        return FirewallResult(targets, "compiled-only", reason=lacking)
    report = verify_ruleset(ruleset, targets, n=n, seed=seed, tick=tick)
    return FirewallResult(targets, "agree" if report.ok else "disagree", report)


def assignments(given: list[str]) -> list[list[str]]:
    """The target lists to verify: each given list (``xdp,nft``) once, the default
    (nft) when none is given."""
    out = [[t.strip() for t in g.split(",") if t.strip()] for g in given]
    return [list(t) for t in dict.fromkeys(tuple(t) for t in out if t)] or [list(DEFAULT)]
