"""``pfc verify``: every compiled form of a policy against the reference interpreter.

For each requested target: compile (a rule the target cannot express is reported as
"not expressible", not as a failure, unless the target was asked for by name), take the
user's frames (``Request.user_frames``, from ``--pcap``) followed by ``Request.frames``
frames generated from the policy's constants (and for a stateful policy the ordered
sequences of ``oracle.sequences``: connections, bursts), run the target in the kernel on the
frames its hook can see (``equiv.compare``), and on a disagreement let hypothesis find
and shrink a minimal failing frame (the first failing frame when it finds none: with
the user's frames, often one of theirs), written to a pcap with the commands that
replay it.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from hypothesis import HealthCheck, Phase, Verbosity, find, settings
from hypothesis.errors import NoSuchExample

from pfc import backends
from pfc.backends.base import Backend
from pfc.backends.ebpf import kernels as ebpf_kernels
from pfc.build import build_artifact
from pfc.frontend.diagnostics import Diagnostic
from pfc.frontend.pipeline import Compiled
from pfc.kernel.netns import missing_privileges
from pfc.kernel.observation import KernelUnavailable
from pfc.oracle import gen, sequences
from pfc.oracle.pcap import PcapError, write_pcap
from pfc.verifier.equiv import Report, compare

# Options a kernel run needs (the lab's device is called `dut`), and the lowerings the
# running kernel has (eBPF: docs/kernels.md; on 5.10 the linear program, not the
# classifier, and features it lacks reported as not expressible).
RUN_OPTIONS = {"dev": "dut", "extra": {"kernel": ebpf_kernels.running()}}


@dataclass
class TargetResult:
    target: str
    hook: str = ""
    status: str = "agree"  # agree | disagree | not-expressible | compiled-only | error
    report: Report | None = None
    not_expressible: list[tuple[int, str]] = field(default_factory=list)  # (line, rule)
    reason: str = ""  # compiled-only / error: why
    pcap: Path | None = None
    replay: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.status in ("disagree", "error")

    def to_json(self) -> dict:
        r = self.report
        return {"target": self.target, "hook": self.hook, "status": self.status,
                "frames": r.total if r else 0, "agree": r.agree if r else 0,
                "disagree": len(r.mismatches) if r else 0,
                "skipped_by_hook": r.skipped if r else 0,
                "counters_agree": r.counters_agree if r else None,
                "not_expressible": [{"line": line, "rule": text}
                                    for line, text in self.not_expressible],
                "reason": self.reason or None,
                "pcap": str(self.pcap) if self.pcap else None, "replay": self.replay}


@dataclass
class Request:
    compiled: Compiled
    path: str
    targets: list[str]  # TARGET or TARGET:HOOK
    explicit: bool  # targets named by the user: not expressible is a failure
    frames: int = 2000  # generated frames, after user_frames
    seed: int = 0
    pcap_dir: Path | None = None
    shrink_examples: int = 400
    user_frames: list[bytes] = field(default_factory=list)  # Ethernet frames, first


def verify(req: Request, tick: Callable[[str], None] = lambda _: None) -> list[TargetResult]:
    policy = req.compiled.require()
    frames = list(req.user_frames)
    if req.frames > 0:
        frames += gen.sample(policy, req.frames, seed=req.seed)
    note = ""
    if policy.stateful:  # ordered sequences: connections and bursts (oracle.sequences)
        frames += sequences.connections(policy) + sequences.bursts(policy, frames)
        if sequences.fast(policy):
            req = replace(req, compiled=replace(req.compiled,
                                                policy=sequences.slowed(policy)))
            note = ("rates verified at 1/minute, bucket sizes kept (a run takes seconds; "
                    "a fast bucket would refill meanwhile)")
    lacking = missing_privileges()
    results = []
    for target in req.targets:
        tick(target)
        result = _verify_target(req, target, frames, lacking)
        if note and result.status == "agree":
            result.reason = note
        results.append(result)
    return results


def _verify_target(req: Request, spec: str, frames: list[bytes],
                   lacking: str | None) -> TargetResult:
    target, _, hook = spec.partition(":")
    backend = backends.get(target)
    artifact, diags = build_artifact(req.compiled, target, hook=hook or None, **RUN_OPTIONS)
    if artifact is None:
        return _not_expressible(req, target, hook, diags)
    result = TargetResult(target, artifact.hook)
    if backend.run is None:
        return TargetResult(target, artifact.hook, "compiled-only",
                            reason="this target has no runner")
    if lacking:
        return TargetResult(target, artifact.hook, "compiled-only", reason=lacking)
    try:
        result.report = compare(artifact, backend, frames)
    except KernelUnavailable as exc:
        return TargetResult(target, artifact.hook, "compiled-only", reason=str(exc))
    if not result.report.ok:
        result.status = "disagree"
        _record_failure(req, result, backend, artifact)
    return result


def _not_expressible(req: Request, target: str, hook: str,
                     diags: list[Diagnostic]) -> TargetResult:
    src = req.compiled.source
    lines = [(src.position(d.span.start)[0], " ".join(src.text[d.span.start:d.span.end]
                                                       .split())) for d in diags]
    status = "error" if req.explicit else "not-expressible"
    return TargetResult(target, hook, status=status, not_expressible=lines,
                        reason="; ".join(d.message for d in diags))


def _record_failure(req: Request, result: TargetResult, backend: Backend, artifact) -> None:
    failing = [m.frame for m in result.report.mismatches]
    frame = shrink(req, backend, artifact) or failing[0]
    if req.pcap_dir is None:
        return
    stem = Path(req.path).stem if not req.path.startswith("<") else "policy"
    pcap = req.pcap_dir / f"{stem}-{result.target}-fail.pcap"
    try:
        req.pcap_dir.mkdir(parents=True, exist_ok=True)
        write_pcap(pcap, [frame])
        if len(failing) > 1:
            write_pcap(req.pcap_dir / f"{stem}-{result.target}-all-failures.pcap", failing)
    except (OSError, PcapError) as exc:  # the verdict stands; say why there is no file
        result.reason = f"could not write the failing frames to {req.pcap_dir}: {exc}"
        return
    result.pcap = pcap
    result.replay = replay_commands(req.path, result.target, artifact.hook, result.pcap)


def shrink(req: Request, backend: Backend, artifact) -> bytes | None:
    """A minimal frame on which the target disagrees, found and shrunk by hypothesis
    over the same frame strategy the sample came from; None if it finds none within
    ``req.shrink_examples`` examples (the caller then keeps the first failing frame)."""
    policy = req.compiled.require()

    def disagrees(frame: bytes) -> bool:
        seen = backend.view(artifact.hook, frame)
        return seen is not None and not compare(artifact, backend, [frame]).ok

    conf = settings(max_examples=req.shrink_examples, database=None, deadline=None,
                    phases=[Phase.generate, Phase.shrink], verbosity=Verbosity.quiet,
                    suppress_health_check=list(HealthCheck), derandomize=True)
    try:
        return find(gen.frames(policy), disagrees, settings=conf)
    except NoSuchExample:
        return None


def replay_commands(path: str, target: str, hook: str, pcap: Path) -> list[str]:
    q = shlex.quote
    return [f"pfc run {q(path)} {q(str(pcap))}",
            f"tcpdump -nn -xx -r {q(str(pcap))}",
            f"pfc compile {q(path)} --target {target} --hook {hook} -o {q(target)}/"]
