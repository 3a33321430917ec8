"""The reference interpreter: a policy and the bytes of one Ethernet frame in, the
verdict, the deciding rule, the count rules that held and the frame leaving the hook out.

Every backend is judged against it (semantics.md "The oracle"); ``pfc run`` uses it on
pcaps. Frames are read by :mod:`pfc.oracle.packets` exactly as semantics.md "Reading a frame"
says; nothing here raises on any bytes.

How a rule holds, in order:

1. the family gate: ``Family.ANY`` passes every frame, even a 3-byte runt; ``IP`` needs
   EtherType IPv4 or IPv6 (after one skipped VLAN tag); ``IP4``/``IP6`` that EtherType;
2. the protocol keyword (``rule.proto``): the IPv4 protocol byte (L3+9) / IPv6 Next
   Header (L3+6) read raw, present and equal: no header validity needed, so ``drop tcp``
   drops later fragments and malformed headers too;
3. every match: a match whose field is absent is false, negated or not (``!dport 53``
   is false on a later fragment); otherwise it holds when ``test ^ negated``;
4. ``redirect`` also needs the destination address bytes present, of the family of its
   target address (there must be something to rewrite).

The first terminal rule that holds decides; each ``count`` rule that holds on the way is
recorded and evaluation goes on. If no terminal rule holds, ``policy.default`` decides
(``rule`` None). Rules are compiled once per policy into closures (``_Plan``).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pfc.frontend import ir
from pfc.frontend.ir import Family, Layer, Policy, Rule, Verdict
from pfc.oracle import packets
from pfc.oracle.context import Context, MetaCheck, context_check, link_check, needs_context
from pfc.oracle.events import LogEvent
from pfc.oracle.flow import Flow
from pfc.oracle.packets import FrameView, counted_bytes, read_frame
from pfc.oracle.queue import Decider
from pfc.oracle.rewrite import csum_update, redirect_frame

__all__ = ["Counters", "Flow", "Outcome", "csum_update", "evaluate", "new_flow",
           "redirect_frame", "rule_matches", "run"]

Counters = dict[int, tuple[int, int]]  # Rule.index -> (packets, bytes)
Check = Callable[[FrameView], bool]
T = TypeVar("T")


@dataclass(frozen=True)
class Outcome:
    verdict: Verdict
    rule: int | None  # Rule.index of the deciding rule; None: the default decided
    counted: tuple[int, ...]  # Rule.index of every count rule that held, in order
    nbytes: int  # what each count rule adds in bytes for this frame (counted_bytes)
    frame: bytes  # the frame leaving the hook: rewritten for redirect, else the input
    events: tuple[LogEvent, ...] = ()  # log events, in rule order (oracle.events)
    audited: bool = False  # an audited drop decided: the verdict is pass, would be drop
    reject: str | None = None  # `reject with R` decided (the verdict is drop)
    nat: ir.Nat | None = None  # a nat block's decision for the connection (verdict pass)
    mark: int = 0  # the packet's mark as it leaves the list (`mark ... to N`)
    notrack: bool = False  # a `notrack` rule held
    queued: bool = False  # a `queue` rule handed the packet to the decider


@dataclass(frozen=True)
class _Plan:
    """One rule, compiled: ``holds(view)`` and what to do when it does. ``ct`` and
    ``limit`` need the flow state (``holds_now``), tried after every other match."""

    rule: Rule
    versions: frozenset[int] | None  # None: every frame (Family.ANY)
    proto: int | None
    checks: tuple[Check, ...]
    ct: ir.CtMatch | None = None
    limit: ir.Limit | None = None
    meta: tuple[MetaCheck, ...] = ()  # matches on the context (iif, oif, mark, ...)

    def holds_meta(self, view: FrameView, ctx: Context) -> bool:
        for check in self.meta:
            if not check(view, ctx):
                return False
        return True

    def holds(self, view: FrameView) -> bool:
        if self.versions is not None and view.version not in self.versions:
            return False
        if self.proto is not None and view.l4proto != self.proto:
            return False
        for check in self.checks:
            if not check(view):
                return False
        return True

    def holds_now(self, view: FrameView, flow: Flow) -> bool:
        """The stateful part: the connection state, then the limit (a token is taken
        only when everything else held). A limited `pass` rule holds within the rate,
        a limited `drop` or `reject` rule over it."""
        if self.ct is not None:
            state = flow.ct_state(view)
            if state is None or (state in self.ct.states) == self.ct.negated:
                return False
        limit = self.limit
        if limit is None:
            return True
        if limit.per and packets.ip_field_bytes(view, limit.per) is None:
            return False  # no address to key the bucket by: the rule cannot hold
        within = flow.within(self.rule, limit.rate, view, limit.per)
        return within if isinstance(self.rule.action, ir.Pass) else not within


_VERSIONS = {Family.ANY: None, Family.IP: frozenset((4, 6)), Family.IP4: frozenset((4,)),
             Family.IP6: frozenset((6,))}


def _plan(rule: Rule) -> _Plan:
    checks = [_compile_match(m, rule.proto) for m in rule.matches
              if not isinstance(m, ir.CtMatch) and not needs_context(m)]
    if isinstance(rule.action, ir.Redirect):
        checks.append(_has_destination(rule.action.address.version))
    ct = next((m for m in rule.matches if isinstance(m, ir.CtMatch)), None)
    meta = tuple(context_check(m) for m in rule.matches if needs_context(m))
    return _Plan(rule, _VERSIONS[rule.family], rule.proto, tuple(checks), ct, rule.limit,
                 meta)


def _has_destination(version: int) -> Check:
    end = 20 if version == 4 else 40  # IPv4 dst at L3[16:20], IPv6 at L3[24:40]

    def check(view: FrameView) -> bool:
        return view.version == version and view.l3 + end <= len(view.data)
    return check


# Compiled plans, keyed by id() with the object kept so the id stays valid. Hashing a
# rule would hash every prefix of a 100k-entry set on every call.
_CACHE: dict[int, tuple[object, Any]] = {}
_CACHE_LIMIT = 4096


def _cached(key: object, build: Callable[[], T]) -> T:
    hit = _CACHE.get(id(key))
    if hit is not None and hit[0] is key:
        return hit[1]
    if len(_CACHE) >= _CACHE_LIMIT:
        _CACHE.clear()
    value = build()
    _CACHE[id(key)] = (key, value)
    return value


def _plans(policy: Policy) -> tuple[_Plan, ...]:
    return _cached(policy, lambda: tuple(_plan(r) for r in policy.rules))


def _chain_plans(policy: Policy, name: str) -> tuple[_Plan, ...]:
    chain = policy.chain(name)
    return _cached(chain, lambda: tuple(_plan(r) for r in chain.rules))


def rule_matches(rule: Rule, view: FrameView) -> bool:
    """Whether ``rule``'s stateless part holds on the frame ``view`` (module doc,
    steps 1-4)."""
    return _cached(rule, lambda: _plan(rule)).holds(view)


@dataclass
class _Run:
    """One frame's way through one list: what the rules that held so far did."""

    view: FrameView
    policy: Policy
    flow: Flow | None
    ctx: Context
    counted: list[int] = field(default_factory=list)
    events: list[LogEvent] = field(default_factory=list)
    notrack: bool = False

    def outcome(self, verdict: Verdict, rule: int | None, frame: bytes, **kw) -> Outcome:
        return Outcome(verdict, rule, tuple(self.counted), counted_bytes(self.view), frame,
                       tuple(self.events), mark=self.ctx.mark, notrack=self.notrack, **kw)


def _evaluate(plans: tuple[_Plan, ...], policy: Policy, frame: bytes,
              skip_tag: bool = True, flow: Flow | None = None, sent: bool = False,
              ctx: Context | None = None, commit: bool = True) -> Outcome:
    """Judge ``frame`` by one list. ``ctx``: what the hook knows besides the bytes
    (shared along a path: ``mark ... to N`` changes it). ``commit``: record the frame
    in the flow's connection tracker here (a path walker records once per packet)."""
    run = _Run(read_frame(frame, skip_tag), policy, flow, ctx if ctx is not None else Context())
    out = _through(plans, run, 0)
    if out is None:
        out = _default(run)
    if commit and flow is not None and flow.tracking:
        flow.finish(run.view, sent or out.verdict is Verdict.PASS)  # sent: OUTPUT passed it
    return out


def _through(plans: tuple[_Plan, ...], run: _Run, depth: int) -> Outcome | None:
    """The first decision of ``plans`` (a list or a chain), or None: none decided."""
    view = run.view
    for plan in plans:
        if not plan.holds(view):
            continue
        if plan.meta and not plan.holds_meta(view, run.ctx):
            continue
        if (plan.ct is not None or plan.limit is not None) and not plan.holds_now(view,
                                                                                 run.flow):
            continue
        action = plan.rule.action
        if isinstance(action, ir.Jump):
            out = _through(_chain_plans(run.policy, action.chain), run, depth + 1)
            if out is None and action.goto:  # the hook's default, counted as the goto's
                out = run.outcome(run.policy.default, plan.rule.index, view.data)
            if out is not None:
                return out
        elif not action.terminal:
            _carry_on(plan.rule, run)
        else:
            return _decide(plan.rule, run)
    return None


def _carry_on(rule: Rule, run: _Run) -> None:
    """A rule that holds and does not decide: count, log, mark, notrack."""
    action = rule.action
    if isinstance(action, ir.Log):
        if action.rate is None or run.flow.within(rule, action.rate, run.view):
            run.events.append(_event(rule.line, run.policy.default, False, action, run.view))
    elif isinstance(action, ir.Mark):
        run.ctx.mark = action.value
    elif isinstance(action, ir.Notrack):
        run.notrack = True
    else:
        run.counted.append(rule.index)


def _decide(rule: Rule, run: _Run) -> Outcome:
    action, view = rule.action, run.view
    if isinstance(action, ir.Drop) and action.audit:
        run.events.append(_event(rule.line, Verdict.DROP, True, None, view))
        return run.outcome(Verdict.PASS, rule.index, view.data, audited=True)
    if isinstance(action, ir.Reject):
        return run.outcome(Verdict.DROP, rule.index, view.data, reject=action.kind)
    if isinstance(action, ir.Nat):
        return run.outcome(Verdict.PASS, rule.index, view.data, nat=action)
    if isinstance(action, ir.Queue):  # the decider is an input (oracle.queue)
        verdict, queued = run.flow.queue.verdict(action, view)
        return run.outcome(verdict, rule.index, view.data, queued=queued)
    verdict = Verdict.DROP if isinstance(action, ir.Drop) else Verdict.PASS
    out = redirect_frame(view, rule) if isinstance(action, ir.Redirect) else view.data
    return run.outcome(verdict, rule.index, out)


def _default(run: _Run) -> Outcome:
    policy, view = run.policy, run.view
    if policy.default is Verdict.DROP and policy.default_audit:
        run.events.append(_event(0, Verdict.DROP, True, None, view))
        return run.outcome(Verdict.PASS, None, view.data, audited=True)
    return run.outcome(policy.default, None, view.data)


def _event(line: int, verdict: Verdict, audit: bool, log: ir.Log | None,
           view: FrameView) -> LogEvent:
    snap = log.snap if log is not None else ir.LOG_SNAP_DEFAULT
    return LogEvent(line, verdict.value, audit, log.prefix if log is not None else "",
                    view.data[:snap])


def new_flow(policy: Policy, decider: Decider | None = None) -> Flow | None:
    """A fresh flow state for judging a sequence, or None for a policy that needs none
    (no ``ct state``, no ``limit``, no ``log ... rate``, no ``queue``). ``decider``:
    the user-space decider of ``queue`` rules (``oracle.queue``; None: none listens)."""
    if not policy.stateful:
        return None
    flow = Flow(tracking=any(p.ct is not None for p in _plans(policy)))
    flow.queue.decider = decider
    return flow


def evaluate(policy: Policy, frame: bytes, *, skip_tag: bool = True,
             flow: Flow | None = None, now: int | None = None,
             ctx: Context | None = None, part: bool = False) -> Outcome:
    """Judge one frame (any bytes; never raises). ``skip_tag=False``: the frame is as a
    hook sees it after the kernel removed the outer VLAN tag (``packets.read_frame``).

    A stateful policy (``Policy.stateful``) is judged within ``flow`` at time ``now``
    (nanoseconds); without a flow, as the first frame of a sequence.

    ``ctx``: what the hook knows besides the bytes (``pfc.oracle.context``). ``part``:
    the list is one block of a path (``pfc.oracle.path``), whose walker owns the flow:
    its clock and connection reading are left as they are, nothing is recorded."""
    if flow is None and not part:
        flow = new_flow(policy)
    if flow is not None and not part:
        flow.start(flow.now if now is None else now)
    return _evaluate(_plans(policy), policy, frame, skip_tag, flow, ctx=ctx, commit=not part)


def run(policy: Policy, frames: Iterable[bytes], *, skip_tag: bool = True,
        times: Iterable[int] | None = None, outgoing: Collection[int] = (),
        decider: Decider | None = None) -> tuple[list[Outcome], Counters]:
    """Judge every frame in order; the counters hold one entry for every count rule of
    the policy, zeros included: (packets, bytes) summed over the frames it held on.
    ``times`` (nanoseconds, one per frame; all 0 when not given) drive the rate limits;
    the frames before drive the connection states (``oracle.flow``). ``outgoing``:
    positions of frames the host sent (a cooked capture says so): judged like the
    others, but conntrack takes them as sent, whatever the verdict. ``decider``: the
    user-space decider of ``queue`` rules (``oracle.queue``; None: none listens)."""
    plans = _plans(policy)
    counters: Counters = {r.index: (0, 0) for r in policy.count_rules}
    outcomes = []
    flow = new_flow(policy, decider)
    clock = iter(times) if times is not None else None
    for n, frame in enumerate(frames):
        if flow is not None:
            flow.start(next(clock) if clock is not None else 0)
        out = _evaluate(plans, policy, frame, skip_tag, flow, n in outgoing)
        for index in out.counted:
            packets, nbytes = counters[index]
            counters[index] = (packets + 1, nbytes + out.nbytes)
        outcomes.append(out)
    return outcomes, counters


# ----------------------------------------------------------------------------- matches

def _compile_match(match: ir.Match, proto: int | None) -> Check:
    """A check for one match: False when its field is absent, else ``test ^ negated``."""
    if ir.FIELDS[match.field].layer is ir.Layer.LINK:
        return link_check(match)
    if isinstance(match, ir.AddrMatch):
        return _when_present(_addr_reader(match.field), _addr_test(match.prefixes),
                             match.negated)
    if isinstance(match, ir.IntMatch):
        return _when_present(_int_reader(match.field, proto), _range_test(match.ranges),
                             match.negated)
    if isinstance(match, ir.FlagsMatch):
        must, clear = match.set, match.clear
        return _when_present(_int_reader("flags", proto),
                             lambda f: f & must == must and not f & clear, match.negated)
    if isinstance(match, ir.FragMatch):
        return _when_present(_int_reader("frag", proto), bool, match.negated)
    if isinstance(match, ir.PayloadMatch):
        offset, data = match.offset, match.data

        def read(view: FrameView) -> bytes | None:
            return packets.payload_bytes(view, proto, offset, len(data))
        return _when_present(read, data.__eq__, match.negated)
    raise TypeError(f"not a match: {match!r}")


def _when_present(read: Callable, test: Callable, negated: bool) -> Check:
    def check(view: FrameView) -> bool:
        value = read(view)
        return value is not None and bool(test(value)) != negated
    return check


def _int_reader(name: str, proto: int | None) -> Callable[[FrameView], int | None]:
    if ir.FIELDS[name].layer is Layer.IP:
        return lambda view: packets.ip_field(view, name)
    if proto is None:  # a transport field without a protocol keyword: never present
        return lambda view: None
    return lambda view: packets.transport_field(view, name, proto)


def _addr_reader(name: str) -> Callable[[FrameView], tuple[int, int] | None]:
    """(version, address as an integer), or None."""
    def read(view: FrameView) -> tuple[int, int] | None:
        raw = packets.ip_field_bytes(view, name)
        return None if raw is None else (view.version, int.from_bytes(raw, "big"))
    return read


def _addr_test(prefixes: tuple[ir.IPNetwork, ...]) -> Callable[[tuple[int, int]], bool]:
    """Membership in any prefix of the address's own family: per prefix length, a set
    of network numbers (one lookup per distinct length, whatever the set's size)."""
    tables = {4: _prefix_table(prefixes, 4, 32), 6: _prefix_table(prefixes, 6, 128)}

    def test(value: tuple[int, int]) -> bool:
        version, address = value
        return any(address >> shift in nets for shift, nets in tables[version])
    return test


def _prefix_table(prefixes, version: int, bits: int) -> tuple[tuple[int, frozenset], ...]:
    by_length: dict[int, set[int]] = {}
    for net in prefixes:
        if net.version == version:
            shift = bits - net.prefixlen
            by_length.setdefault(shift, set()).add(int(net.network_address) >> shift)
    return tuple((shift, frozenset(nets)) for shift, nets in sorted(by_length.items()))


def _range_test(ranges: tuple[tuple[int, int], ...]) -> Callable[[int], bool]:
    """Inclusive ranges (sorted and merged here too, so hand-built IR works)."""
    merged: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    if len(merged) <= 4:
        pairs = tuple((lo, hi) for lo, hi in merged)
        return lambda v: any(lo <= v <= hi for lo, hi in pairs)
    los, his = [lo for lo, _ in merged], [hi for _, hi in merged]

    def test(value: int) -> bool:
        i = bisect_right(los, value) - 1
        return i >= 0 and value <= his[i]
    return test
