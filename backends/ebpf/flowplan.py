"""The eBPF hooks' view of ``log``, ``limit`` and audit: plain data the templates print
(``templates/ebpf/flow.c.j2``), as :mod:`pfc.backends.ebpf.plan` is for matches.

- **Events** (``log`` rules within their rate, audited drops) go into the ring buffer
  ``pfc_events`` (``BPF_MAP_TYPE_RINGBUF``), one record each: the fixed head of
  :mod:`pfc.backends.ebpf.events` then the first ``snap`` bytes of the frame. The prefix
  travels in the record as four 64-bit integers built here from the checked prefix
  (docs/language.md: 1-32 characters of an allow-list): no user text reaches the C.
- **Token buckets** hold one ``u64`` each: ``Z + 2^62``, where ``Z`` is the time (ns) at
  which the bucket would be empty, 0 before its first packet. ``tokens(now) =
  min(now - Z, most)``; a packet within the rate moves ``Z`` to ``max(Z, now - most) +
  cost``, one over it to ``max(Z, now - most)``: for times that do not run backwards
  this is exactly ``pfc.oracle.flow.Bucket`` (tokens, last) with ``Z = last - tokens``,
  and one word can be swapped atomically (``cmpxchg``) by every CPU: a global bucket,
  no per-CPU share of the rate, no lock (socket filters may not take ``bpf_spin_lock``,
  and LRU hash maps cannot hold one: measured on Linux 6.18).
- Buckets per rule and IP version live in the array ``pfc_buckets`` (two entries per
  rule: IPv4, IPv6; three for a rule matching every frame: non-IP frames have a bucket
  of their own, as ``pfc.oracle.flow``'s); ``per src|dst`` buckets in the LRU hash
  ``pfc_per`` keyed by (rule index, IP version, address).
- The clock is ``bpf_ktime_get_ns()`` unless the one-entry array ``pfc_clock`` holds a
  non-zero time: tests write each frame's time there before its test run
  (``BPF_PROG_TEST_RUN`` cannot set the clock); nothing else writes it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pfc.frontend import ir

NSEC = 1_000_000_000
PREFIX_BYTES = 32
PER_ENTRIES = 65536  # pfc_per: addresses with a bucket at once (LRU: the oldest go)
EVENTS_BYTES = 1 << 18  # pfc_events: 256 KiB (about 800 events of 304 bytes)


@dataclass(frozen=True)
class EventPlan:
    """One kind of event a rule sends."""

    line: int
    verdict: int  # the verdict so far: 0 pass, 1 drop
    audit: int
    prefix: tuple[int, int, int, int]  # the prefix, NUL-padded, as little-endian u64s
    snap: int


@dataclass(frozen=True)
class BucketPlan:
    """A rule's token bucket: ``cost`` ns of tokens a packet, ``most`` ns at most."""

    cost: int
    most: int
    index: int = 0  # pfc_buckets: the IPv4 entry; +1 for IPv6; +2 non-IP (not split)
    split: bool = True  # an IP rule (False: a rule for every frame, non-IP ones too)
    per: str | None = None  # "src" | "dst": one bucket per address in pfc_per
    rule: int = 0  # the rule's index (pfc_per's key)
    within: bool = False  # `limit` on a pass rule: it holds within the rate, not over it


@dataclass(frozen=True)
class RuleFlow:
    """What a rule adds to its matches: a bucket that must be over the rate (``limit``)
    or within it (``log ... rate``), an event to send, whether a drop is audited."""

    event: EventPlan | None = None
    limit: BucketPlan | None = None
    rate: BucketPlan | None = None
    audit: bool = False


@dataclass(frozen=True)
class ProgramFlow:
    buckets: int  # entries of pfc_buckets (0: no array)
    per: bool  # pfc_per is needed
    events: bool  # pfc_events is needed
    default_event: EventPlan | None  # an audited default drop
    clock: bool  # a bucket reads the clock
    snap_max: int = 0  # the largest snap of an event: every record has room for it
    per_entries: int = PER_ENTRIES
    events_bytes: int = EVENTS_BYTES
    per_over: bool = False  # a `limit ... per` on a drop or reject rule: pfc_over_per
    per_within: bool = False  # ... on a pass rule: pfc_within_per


def prefix_words(prefix: str) -> tuple[int, int, int, int]:
    raw = prefix.encode("ascii")[:PREFIX_BYTES].ljust(PREFIX_BYTES, b"\0")
    return tuple(int.from_bytes(raw[i:i + 8], "little")  # type: ignore[return-value]
                 for i in range(0, PREFIX_BYTES, 8))


def bucket(rate: ir.Rate, rule: ir.Rule, index: int, per: str | None = None) -> BucketPlan:
    """``pfc.oracle.flow.Bucket.full``'s arithmetic: a token is ``unit / count`` ns."""
    cost = rate.seconds * NSEC // rate.count
    return BucketPlan(cost, cost * rate.capacity, index, rule.family is not ir.Family.ANY,
                      per, rule.index)


def audit_event(line: int) -> EventPlan:
    """The event of an audited drop (no prefix, the default snap: ``interp._event``)."""
    return EventPlan(line, 1, 1, prefix_words(""), ir.LOG_SNAP_DEFAULT)


def _rate_text(rate: ir.Rate) -> str:
    return f"rate {rate.count}/{rate.unit} burst {rate.burst}"


def options_text(rule: ir.Rule) -> list[str]:
    """The rule's options for its C comment, from numbers only (the prefix stays out)."""
    action, words = rule.action, []
    if isinstance(action, ir.Log):
        words += ([_rate_text(action.rate)] if action.rate else []) + [f"snap {action.snap}"]
        words += ["prefix (in the event)"] if action.prefix else []
    if rule.limit is not None:
        words.append("limit " + _rate_text(rule.limit.rate) +
                     (f" per {rule.limit.per}" if rule.limit.per else ""))
    if isinstance(action, ir.Drop) and action.audit:
        words.append("audit")
    return words


def rule_flow(rule: ir.Rule, default: ir.Verdict, next_bucket: int) -> RuleFlow | None:
    """The rule's flow part; ``next_bucket`` is its first free ``pfc_buckets`` entry."""
    action, flow = rule.action, RuleFlow()
    if isinstance(action, ir.Log):
        verdict = 1 if default is ir.Verdict.DROP else 0
        event = EventPlan(rule.line, verdict, 0, prefix_words(action.prefix), action.snap)
        rate = bucket(action.rate, rule, next_bucket) if action.rate else None
        flow = RuleFlow(event=event, rate=rate)
    elif isinstance(action, ir.Drop) and action.audit:
        flow = RuleFlow(event=audit_event(rule.line), audit=True)
    if rule.limit is not None:
        limit = replace(bucket(rule.limit.rate, rule, next_bucket, rule.limit.per),
                        within=isinstance(action, ir.Pass))
        flow = RuleFlow(flow.event, limit, flow.rate, flow.audit)
    return flow if flow != RuleFlow() else None


def uses_buckets(flow: RuleFlow | None) -> int:
    """How many ``pfc_buckets`` entries the rule takes: IPv4 and IPv6, and non-IP
    frames for a rule of every frame; none without a bucket of its own."""
    if flow is None:
        return 0
    held = flow.rate or (flow.limit if flow.limit is not None and not flow.limit.per else None)
    return 0 if held is None else 2 if held.split else 3


def rule_flows(policy: ir.Policy) -> dict[int, RuleFlow]:
    """Every rule's flow part, by rule index (rules without one left out)."""
    out, used = {}, 0
    for rule in policy.rules:
        flow = rule_flow(rule, policy.default, used)
        if flow is not None:
            out[rule.index] = flow
            used += uses_buckets(flow)
    return out


def program_flow(policy: ir.Policy, flows: dict[int, RuleFlow]) -> ProgramFlow | None:
    default = audit_event(0) if policy.default_audit and \
        policy.default is ir.Verdict.DROP else None
    if not flows and default is None:
        return None
    buckets = sum(uses_buckets(f) for f in flows.values())
    pers = [f.limit for f in flows.values() if f.limit is not None and f.limit.per]
    per = bool(pers)
    events = default is not None or any(f.event is not None for f in flows.values())
    snaps = [f.event.snap for f in flows.values() if f.event] + ([default.snap] if default
                                                                else [])
    return ProgramFlow(buckets, per, events, default, bool(buckets) or per,
                       max(snaps, default=0), per_over=any(not b.within for b in pers),
                       per_within=any(b.within for b in pers))
