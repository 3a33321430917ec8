"""One helper judges every target against the reference interpreter.

``compare(artifact, backend, frames)`` shows each frame to the target's hook as that hook
sees it (``backend.view``: a removed VLAN tag, the kernel's IP input checks), runs the
target on the frames it can see (``backend.run``), and compares, per semantics.md "What
is compared": the verdict per frame, the bytes leaving the hook for redirected frames,
and the counters after the run: every count rule's (the packets it held on), every
terminal rule's (the packets it decided) and the default's (``DEFAULT_COUNTER``: the
packets no terminal rule decided).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from pfc.backends.base import DEFAULT_COUNTER, Artifact, Backend
from pfc.frontend import ir
from pfc.oracle.conntrack import held_for_reassembly, unmodelled
from pfc.oracle.interp import Outcome, evaluate, new_flow


@dataclass(frozen=True)
class Mismatch:
    index: int  # 0-based position in the frames given to compare()
    frame: bytes  # as the hook saw it
    expected: Outcome
    got: ir.Verdict
    got_frame: bytes | None
    what: str  # "verdict" | "bytes"
    line: int | None = None  # the line of the rule that decided (expected); None: default

    @property
    def number(self) -> int:
        """The frame's number as users see it: 1-based, as ``pfc run``, tcpdump and
        Wireshark number the packets of a capture (``--pcap``'s frames come first)."""
        return self.index + 1

    def describe(self) -> str:
        rule = "default" if self.expected.rule is None else f"line {self.line}"
        if self.what == "verdict":
            return (f"frame {self.number}: expected {self.expected.verdict.value} ({rule}), "
                    f"target gave {self.got.value}")
        return (f"frame {self.number}: bytes differ after {rule}: expected "
                f"{self.expected.frame.hex()}, target gave "
                f"{self.got_frame.hex() if self.got_frame else None}")

    def to_json(self) -> dict:
        return {"frame": self.number, "what": self.what,
                "expected": self.expected.verdict.value, "got": self.got.value,
                "line": self.line}


@dataclass
class Report:
    target: str
    hook: str
    total: int = 0  # frames offered
    seen: int = 0  # frames the hook can see
    agree: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    counters_expected: dict[int | str, tuple[int, int]] = field(default_factory=dict)
    counters_got: dict[int | str, tuple[int, int]] | None = None
    # the frames the hook saw, in order: (0-based position in the frames given, view)
    views: list[tuple[int, bytes]] = field(default_factory=list, repr=False)

    @property
    def skipped(self) -> int:
        return self.total - self.seen

    @property
    def counters_agree(self) -> bool:
        return self.counters_got is None or self.counters_got == self.counters_expected

    @property
    def ok(self) -> bool:
        return not self.mismatches and self.counters_agree

    def summary(self) -> str:
        lines = [f"{self.target}/{self.hook}: {self.seen} of {self.total} frames seen, "
                 f"{self.agree} agree, {len(self.mismatches)} disagree"]
        lines += [m.describe() for m in self.mismatches[:10]]
        if not self.counters_agree:
            lines.append(f"counters: expected {self.counters_expected}, "
                         f"target gave {self.counters_got}")
        return "\n".join(lines)


def expected_counters(policy: ir.Policy, outcomes: list[Outcome]) -> dict[int, tuple[int, int]]:
    counters = {r.index: (0, 0) for r in policy.count_rules}
    for out in outcomes:
        for index in out.counted:
            packets, nbytes = counters[index]
            counters[index] = (packets + 1, nbytes + out.nbytes)
    return counters


def decided_counters(policy: ir.Policy,
                     outcomes: list[Outcome]) -> dict[int | str, tuple[int, int]]:
    """(packets, bytes) per terminal rule (the packets it decided) and for the default
    (``DEFAULT_COUNTER``), zeros included."""
    out: dict[int | str, tuple[int, int]] = {r.index: (0, 0) for r in policy.rules
                                             if r.terminal}
    out[DEFAULT_COUNTER] = (0, 0)
    for o in outcomes:
        key = DEFAULT_COUNTER if o.rule is None else o.rule
        packets, nbytes = out[key]
        out[key] = (packets + 1, nbytes + o.nbytes)
    return out


def compare(artifact: Artifact, backend: Backend, frames: list[bytes],
            times: list[int] | None = None) -> Report:
    """Run ``backend`` on what its hook sees of ``frames`` and judge it. A stateful
    policy (``ct state``, ``limit``, ``log ... rate``) is judged as one ordered sequence
    of the frames the hook sees, at ``times`` (ns; all 0 when not given)."""
    if backend.run is None:
        raise ValueError(f"target `{backend.name}` has no runner")
    report = Report(artifact.target, artifact.hook, total=len(frames))
    tracked = any(isinstance(m, ir.CtMatch) for r in artifact.policy.rules for m in r.matches) \
        or any(isinstance(r.action, ir.Queue) and r.action.first is not None
               for r in artifact.policy.rules)  # the verdict cache turns conntrack on
    seen = [(i, v) for i, f in enumerate(frames)
            if (v := backend.view(artifact.hook, f)) is not None
            and not (tracked and (held_for_reassembly(v) or unmodelled(v)))]
    report.seen, report.views = len(seen), seen
    policy = artifact.policy
    # A view that differs from the frame had its outer tag removed (or is behind IP
    # input): a tag left in it is an inner one, which makes the frame not IP.
    flow = new_flow(policy)
    expected = [evaluate(policy, v, skip_tag=v == frames[i], flow=flow,
                         now=times[i] if times else 0) for i, v in seen]
    observed = backend.run(artifact, [v for _, v in seen])
    lines = {r.index: r.line for r in policy.rules}
    for (index, view), exp, got, got_frame in zip(
            seen, expected, observed.verdicts, observed.frames_out, strict=True):
        mismatch = _judge(index, view, exp, got, got_frame)
        if mismatch is None:
            report.agree += 1
        else:
            report.mismatches.append(replace(mismatch, line=lines.get(exp.rule)))
    report.counters_expected = {**expected_counters(policy, expected),
                                **decided_counters(policy, expected)}
    logs = {r.index for r in policy.rules if isinstance(r.action, ir.Log)}
    report.counters_got = None if observed.counters is None else {
        k: v for k, v in observed.counters.items() if k not in logs}  # log rules count nothing
    return report


def _judge(index: int, view: bytes, exp: Outcome, got: ir.Verdict,
           got_frame: bytes | None) -> Mismatch | None:
    if got != exp.verdict:
        return Mismatch(index, view, exp, got, got_frame, "verdict")
    if got_frame is not None and exp.verdict is ir.Verdict.PASS and got_frame != exp.frame:
        return Mismatch(index, view, exp, got, got_frame, "bytes")
    return None
