"""Whole firewalls (v2), one block on one hook: a compiled block judged against the
interpreter frame by frame with what the hook knows besides the bytes — the device
and the packet's mark (``pfc.oracle.context.Context``), as ``pfc.verifier.equiv``
judges v1 lists (verdicts, bytes out, every counter), and in addition the reply a
``reject`` sent back (``pfc.oracle.path.walk.ingress_frame`` of the frame as the hook
saw it) and the mark after the hook (``mark ... to N``).

The devices are dummies in a throw-away namespace (:func:`devices`): their ifindexes
go into the test runs, the objects are loaded there (``pfc_ifaces`` is filled from
them) and the interpreter gets their names.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from pyroute2 import IPRoute

from pfc.backends.base import Artifact, Backend
from pfc.frontend import ir
from pfc.kernel import netns
from pfc.kernel.observation import Observation
from pfc.oracle.context import Context
from pfc.oracle.interp import Outcome, evaluate, new_flow
from pfc.oracle.path.walk import ingress_frame
from pfc.verifier.equiv import decided_counters, expected_counters

# Devices of the judging namespace: names a policy's interface lists meet in every way
# (exact, prefix of several, none).
DEVICES = ("eth0", "eth1", "wan0", "wan1", "ppp0")


@dataclass(frozen=True)
class Shot:
    """One frame on a device (None: loopback, the test runs' default) with a mark."""

    frame: bytes
    dev: str | None = None
    mark: int = 0


@dataclass
class Verdicts:
    seen: int = 0
    problems: list[str] = field(default_factory=list)
    replies: int = 0  # frames a reject answered (expected and got)
    marked: int = 0  # frames whose mark the hook changed
    held: float = 0.0  # the share of count rules that held on some frame

    @property
    def ok(self) -> bool:
        return not self.problems


@contextlib.contextmanager
def devices(names: tuple[str, ...] = DEVICES) -> Iterator[dict[str, int]]:
    """A throw-away namespace (this thread is in it while the block runs) with devices
    ``names`` up (veths, each with a peer ``xN``: this kernel has no dummy devices),
    and their ifindexes (``lo`` too)."""
    with netns.lab() as _lab, IPRoute() as ipr:
        for n, name in enumerate(names):
            ipr.link("add", ifname=name, kind="veth", peer=f"x{n}")
            for dev in (name, f"x{n}"):
                ipr.link("set", index=ipr.link_lookup(ifname=dev)[0], state="up")
        peers = tuple(f"x{n}" for n in range(len(names)))
        yield {name: ipr.link_lookup(ifname=name)[0] for name in (*names, *peers, "lo")}


def judge(artifact: Artifact, backend: Backend, shots: list[Shot], index: dict[str, int],
          run: Callable[[Artifact, list[bytes], list[tuple[int, int]]], Observation],
          outward: bool = False, view: Callable[[bytes], bytes | None] | None = None,
          skip_tag: Callable[[bytes, bytes], bool] | None = None,
          context: Callable[[Shot], Context] | None = None) -> Verdicts:
    """Run ``shots`` through the artifact (``run(artifact, views, [(ifindex, mark)])``)
    and compare with the interpreter. ``outward``: the device is the packet's ``oif``
    (egress, output), else its ``iif``. ``view``: what the hook sees of a frame
    (default the backend's); ``skip_tag(frame, view)``: whether the interpreter skips a
    VLAN tag in the view (default: when the view is the frame, as equiv.compare).
    ``context``: what the interpreter is told of a shot, instead (a netfilter test
    run's loopback is the input and the output device of a forwarded packet)."""
    see = view or (lambda f: backend.view(artifact.hook, f))
    skips = skip_tag or (lambda frame, v: v == frame)
    seen = [(s, v) for s in shots if (v := see(s.frame)) is not None]
    out = Verdicts(len(seen))
    policy = artifact.policy
    flow = new_flow(policy)  # a stateful list: one sequence at one instant, from empty
    expected = []
    for shot, v in seen:
        dev = shot.dev or "lo"
        ctx = Context(oif=dev, mark=shot.mark) if outward else Context(iif=dev, mark=shot.mark)
        ctx = context(shot) if context is not None else ctx
        expected.append(evaluate(policy, v, skip_tag=skips(shot.frame, v), ctx=ctx,
                                 flow=flow, now=0))
    got = run(artifact, [v for _, v in seen],
              [(index[s.dev or "lo"], s.mark) for s, _ in seen])
    for n, ((shot, v), exp) in enumerate(zip(seen, expected, strict=True)):
        # the reply is built from the frame as received (a removed outer tag is put
        # back on the way out): the hook's view of ingress_frame's frame
        reply = ingress_frame(shot.frame, exp.reject) if exp.reject else None
        reply = see(reply) if reply is not None else None
        out.problems += _frame_problems(n, v, exp, reply, got)
        out.replies += bool(got.replies and got.replies[n])
        out.marked += exp.mark != shot.mark
    counts = expected_counters(policy, expected)
    out.held = sum(1 for p, _ in counts.values() if p) / max(1, len(counts))
    want = {**counts, **decided_counters(policy, expected)}
    if got.counters is not None and got.counters != want:
        out.problems.append(f"counters: expected {want}, got {got.counters}")
    return out


def _frame_problems(n: int, view: bytes, exp: Outcome, reply: bytes | None,
                    got: Observation) -> list[str]:
    where = f"frame {n} ({view.hex()}), rule {exp.rule}"
    problems = []
    if got.verdicts[n] is not exp.verdict:
        problems.append(f"{where}: expected {exp.verdict.value}, got {got.verdicts[n].value}")
    if exp.verdict is ir.Verdict.PASS and got.frames_out[n] is not None \
            and got.frames_out[n] != exp.frame:
        problems.append(f"{where}: bytes out {got.frames_out[n].hex()}, expected "
                        f"{exp.frame.hex()}")
    if got.replies is not None:
        if got.replies[n] != reply:
            problems.append(f"{where}: reply {got.replies[n] and got.replies[n].hex()}, "
                            f"expected {reply and reply.hex()}")
    if got.marks is not None and got.marks[n] != exp.mark:
        problems.append(f"{where}: mark {got.marks[n]:#x}, expected {exp.mark:#x}")
    return problems
