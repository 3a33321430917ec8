"""``pfc verify``: every compiled form of a policy against the reference interpreter.

For each requested target: compile (a rule the target cannot express is reported as
"not expressible", not as a failure, unless the target was asked for by name), take the
user's frames (``Request.user_frames``, from ``--pcap``) followed by ``Request.frames``
frames generated from the policy's constants (and for a stateful policy the ordered
sequences of ``oracle.sequences``: connections, bursts), run the target in the kernel on the
frames its hook can see (``equiv.compare``), and on a disagreement let hypothesis find
and shrink a minimal failing frame (the first failing frame when it finds none: with
the user's frames, often one of theirs), written to a pcap with the commands that
replay it. For a stateful policy whose failing frame agrees when judged alone, the
pcap holds the frames the hook saw up to and including it (``failing_sequence``), so
``pfc run`` replays the state it was judged in.

A target asked for without a hook whose default hook cannot express the policy
(``ct state`` before conntrack) is verified at the first of its hooks that can
(``_build``); a hook asked for by name is kept, and a hook that could is named in a
hint. ``nothing_verified`` says why a policy had no target run at all (the CLI's exit
code: docs/verify.md).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from hypothesis import HealthCheck, Phase, Verbosity, find, settings
from hypothesis.errors import NoSuchExample

from pfc import backends
from pfc.backends.base import Backend, Options, feature_errors
from pfc.backends.ebpf import kernels as ebpf_kernels
from pfc.build import build_artifact
from pfc.frontend.diagnostics import Diagnostic
from pfc.frontend.pipeline import Compiled
from pfc.kernel.netns import missing_privileges
from pfc.kernel.observation import KernelUnavailable
from pfc.oracle import gen, sequences
from pfc.oracle.packets import ip_field_bytes, read_frame
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
    reason: str = ""  # compiled-only / error: why; or why the failing frames were not written
    notes: list[str] = field(default_factory=list)  # another hook, slowed rates
    hint: str = ""  # not expressible at this hook: the hook that can
    pcap: Path | None = None
    pcap_frame: int | None = None  # the failing frame's number in ``pcap`` (1-based)
    replay: list[str] = field(default_factory=list)

    @property
    def ran(self) -> bool:
        """Whether the target was run in the kernel and judged."""
        return self.status in ("agree", "disagree")

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
                "mismatches": [m.to_json() for m in r.mismatches[:10]] if r else [],
                "not_expressible": [{"line": line, "rule": text}
                                    for line, text in self.not_expressible],
                "reason": " ".join([self.reason, *self.notes, self.hint]).strip() or None,
                "pcap": str(self.pcap) if self.pcap else None,
                "pcap_frame": self.pcap_frame, "replay": self.replay}


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
        if note and result.ran:
            result.notes.append(note)
        results.append(result)
    return results


def nothing_verified(results: list[TargetResult]) -> str | None:
    """Why no target of a policy was run and judged, or None if one was: every target
    only compiled (the environment: privileges, a kernel feature), or none could express
    the policy."""
    if any(r.ran for r in results):
        return None
    only = [r for r in results if r.status == "compiled-only"]
    if only:
        reasons = sorted({r.reason for r in only})
        return "no target was run in the kernel: " + "; ".join(reasons)
    return "no target can express the policy"


def _verify_target(req: Request, spec: str, frames: list[bytes],
                   lacking: str | None) -> TargetResult:
    target, _, hook = spec.partition(":")
    backend = backends.get(target)
    artifact, diags, note = _build(req, backend, hook)
    if artifact is None:
        return _not_expressible(req, backend, hook, diags)
    result = TargetResult(target, artifact.hook, notes=[note] if note else [])
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
        _record_failure(req, result, backend, artifact, frames)
    return result


def _build(req: Request, backend: Backend, hook: str):
    """(artifact, diagnostics, note): for the hook asked for; with none, the default
    hook's, or when it cannot express the policy, the first other hook's that can, and
    a note saying so (the default's diagnostics when none can)."""
    artifact, diags = build_artifact(req.compiled, backend.name, hook=hook or None,
                                     **RUN_OPTIONS)
    if artifact is not None or hook:
        return artifact, diags, ""
    default = backend.default_hook(Options(backend.name, **RUN_OPTIONS))
    other = _able_hook(req, backend, default)
    if other is None:
        return None, diags, ""
    more = f" (and {len(diags) - 1} more rules)" if len(diags) > 1 else ""
    return other, [], (f"verified at hook {other.hook}; the default hook {default} "
                       f"cannot: {diags[0].message}{more}")


def _able_hook(req: Request, backend: Backend, skip: str):
    """The artifact for the first hook of ``backend`` other than ``skip`` that can
    express the policy, or None (at once when a rule needs a feature the target lacks:
    no hook has it)."""
    if feature_errors(req.compiled.require(), backend, backends.registry()):
        return None
    for hook in backend.hooks:
        if hook != skip:
            artifact, _ = build_artifact(req.compiled, backend.name, hook=hook,
                                         **RUN_OPTIONS)
            if artifact is not None:
                return artifact
    return None


def _not_expressible(req: Request, backend: Backend, hook: str,
                     diags: list[Diagnostic]) -> TargetResult:
    src = req.compiled.source
    lines = [(src.position(d.span.start)[0], " ".join(src.text[d.span.start:d.span.end]
                                                       .split())) for d in diags]
    status = "error" if req.explicit else "not-expressible"
    able = _able_hook(req, backend, hook) if hook else None
    hint = f"hook {able.hook} can: --targets {backend.name}:{able.hook}" if able else ""
    return TargetResult(backend.name, hook, status=status, not_expressible=lines,
                        reason="; ".join(d.message for d in diags), hint=hint)


def _record_failure(req: Request, result: TargetResult, backend: Backend, artifact,
                    frames: list[bytes]) -> None:
    report = result.report
    failing = [m.frame for m in report.mismatches]
    sequence = failing_sequence(backend, artifact, frames, report)
    if sequence is None:
        frame = shrink(req, backend, artifact) or (failing[0] if failing else None)
        sequence = [frame] if frame is not None else [v for _, v in report.views]
    if req.pcap_dir is None:
        return
    stem = Path(req.path).stem if not req.path.startswith("<") else "policy"
    pcap = req.pcap_dir / f"{stem}-{result.target}-fail.pcap"
    try:
        req.pcap_dir.mkdir(parents=True, exist_ok=True)
        write_pcap(pcap, sequence, [0] * len(sequence))  # one instant, as judged
        if len(failing) > 1:
            write_pcap(req.pcap_dir / f"{stem}-{result.target}-all-failures.pcap", failing)
    except (OSError, PcapError) as exc:  # the verdict stands; say why there is no file
        result.reason = f"could not write the failing frames to {req.pcap_dir}: {exc}"
        return
    result.pcap, result.pcap_frame = pcap, len(sequence)
    result.replay = replay_commands(req.path, result.target, artifact.hook, result.pcap)


def failing_sequence(backend: Backend, artifact, frames: list[bytes],
                     report: Report) -> list[bytes] | None:
    """For a stateful policy whose first failing frame agrees when judged alone: the
    frames the hook saw up to and including it, as it saw them, so that ``pfc run``
    judges it in the same state. Shortened to the frames between the same two addresses
    when that still fails on its last frame (one more kernel run), else the whole
    prefix. None for a stateless policy, or a frame that fails alone (hypothesis
    shrinks those)."""
    if not artifact.policy.stateful or not report.mismatches:
        return None
    first = report.mismatches[0]
    if not compare(artifact, backend, [frames[first.index]]).ok:
        return None
    prefix = [(i, v) for i, v in report.views if i <= first.index]
    pair = _endpoints(first.frame)
    short = [(i, v) for i, v in prefix if pair is not None and _endpoints(v) == pair]
    if len(short) < len(prefix):
        again = compare(artifact, backend, [frames[i] for i, _ in short])
        if any(m.index == len(short) - 1 for m in again.mismatches):
            prefix = short
    return [v for _, v in prefix]


def _endpoints(view: bytes) -> frozenset[bytes] | None:
    """The two IP addresses of a frame, in either order (None: not IP)."""
    seen = read_frame(view)
    src, dst = ip_field_bytes(seen, "src"), ip_field_bytes(seen, "dst")
    return None if src is None or dst is None else frozenset((src, dst))


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
