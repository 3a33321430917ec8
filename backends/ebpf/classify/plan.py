"""When a policy is classified instead of tested rule by rule, and the plan the
classifier's template (``templates/ebpf/classify.c.j2``) prints.

A policy of at least :data:`MIN_RULES` rules (after the backend's passes) whose every
rule the model can read (:mod:`.model`: protocol, family, ``proto``, addresses, ports,
negated or not; any action, at most :data:`MAX_REDIRECTS` distinct redirect targets)
is classified: the program's size no longer depends on the rule count, the rules live
in maps filled at load time (:mod:`.tables`). Anything else keeps the linear program,
whose size limit (``MAX_JUMP``) still applies.

Actions, per counter slot in ``pfc_c_rules``: ``slot | action << 24`` with action 0
drop, 1 pass, 2 count, 3 + k the k-th distinct redirect (``redirects``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from pfc.backends.ebpf import counters
from pfc.backends.ebpf import plan as ebpf_plan
from pfc.backends.ebpf.classify import model, tables
from pfc.frontend import ir

MIN_RULES = 128  # docs/ebpf.md "Large policies": the crossover measured (100-150)
MAX_REDIRECTS = 64
ACT_DROP, ACT_PASS, ACT_COUNT, ACT_REDIRECT = 0, 1, 2, 3
ACT_SHIFT = 24
MAX_SLOTS = 1 << ACT_SHIFT
FLOW_CACHE_SLOTS = 4096  # per CPU, 128 bytes each: 512 KiB per CPU (docs/ebpf.md)
FC_COUNTS = 12  # PFC_FC_K: count rules an entry keeps (more: the frame is not cached)
FC_COUNTS_SOCKET = 8  # a socket filter's 512-byte stack holds its window and a copy of 8
FC_HEAD = 56  # struct pfc_fc_entry: key[5], check, decide, nc; then cs[PFC_FC_K]
FC_ENTRY_BYTES = 128  # FC_HEAD + 4 * FC_COUNTS, padded: two cache lines, the first has the key
FC_LINE = 64
_M64 = (1 << 64) - 1


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _mix(h: int, w: int, r: int) -> int:
    h = (_rotl(h, r) + w) & _M64
    return h ^ (h >> 17)


def fc_check(key: list[int], decide: int, counts: list[int]) -> int:
    """The check word of a flow-cache entry (``pfc_fc_check`` in flowcache.c.j2): the
    key's five words, ``decide``, the count rules' slots in order (add-rotate-xor)."""
    chain = 0
    for slot in counts:
        chain = (_rotl(chain, 19) + slot + 1) & _M64
    k = key
    h = (((k[0] ^ _rotl(k[1], 13)) + (_rotl(k[2], 29) ^ _rotl(k[3], 41))) + _rotl(k[4], 53)) \
        & _M64
    h ^= h >> 17
    h = _mix(_mix(h, decide | len(counts) << 32, 23), chain, 41)
    return h ^ (h >> 31)


@dataclass(frozen=True)
class FlowCache:
    """The flow cache in front of the classifier (``templates/ebpf/flowcache.c.j2``):
    ``slots`` entries per CPU (a power of two); ``defeat``: every lookup misses while
    entries are still written (the benchmark's miss path)."""

    slots: int
    defeat: bool = False
    counts: int = FC_COUNTS  # PFC_FC_K

    @property
    def bits(self) -> int:
        return self.slots.bit_length() - 1

    @property
    def entry_bytes(self) -> int:
        """struct pfc_fc_entry: its head and count rules, padded to whole cache lines
        (:data:`FC_ENTRY_BYTES` with :data:`FC_COUNTS`)."""
        return -(-(FC_HEAD + 4 * self.counts) // FC_LINE) * FC_LINE

    def stats(self) -> dict:
        return {"slots": self.slots, "entry_bytes": self.entry_bytes, "counts": self.counts,
                "bytes_per_cpu": self.slots * self.entry_bytes, "defeat": self.defeat}


def flow_cache(knob) -> FlowCache | None:
    """The cache from the build option ``extra["flow_cache"]``: None (the default,
    :data:`FLOW_CACHE_SLOTS`), a power of two (slots per CPU; 1: every flow collides),
    0 (no cache), or ``"miss"`` (the default size, defeated: benchmarks)."""
    if knob is None or knob == "miss":
        return FlowCache(FLOW_CACHE_SLOTS, knob == "miss")
    slots = int(knob)
    if slots == 0:
        return None
    if slots < 1 or slots & (slots - 1) or slots > 1 << 24:
        raise ValueError(f"flow_cache: {knob!r} is not 0, \"miss\" or a power of two "
                         "up to 2**24")
    return FlowCache(slots)


@dataclass
class ClassifyPlan:
    """What classify.c.j2 prints; the names the shared parts of the templates read
    (hook, slots, need, l4_versions, features) mean what they mean in ProgramPlan."""

    hook: str
    default: str
    slots: counters.Slots
    need: int
    l4_versions: frozenset[int]
    features: frozenset[str]
    tables: tables.Tables
    redirects: list[ebpf_plan.RedirectPlan]
    rules: int
    cache: FlowCache | None = None
    build_s: float = 0.0
    sets: tuple = ()
    stats: dict = field(default_factory=dict)

    @property
    def maps(self) -> list[tables.MapData]:
        return self.tables.maps

    @property
    def fields(self) -> list[tables.FieldTables]:
        return self.tables.fields

    def field(self, name: str) -> tables.FieldTables | None:
        return next((f for f in self.fields if f.name == name), None)


def wanted(policy: ir.Policy, hook: str, minimum: int | None = None) -> bool:
    """Whether ``policy`` is large enough to be classified (``minimum`` overrides
    :data:`MIN_RULES`, for tests)."""
    return len(policy.rules) >= (MIN_RULES if minimum is None else minimum)


def _redirect_key(r: ebpf_plan.RedirectPlan) -> tuple:
    return (r.version, r.words, r.port)


def actions(policy: ir.Policy, slots: counters.Slots) -> tuple[list[int], list]:
    """Per policy position ``slot | action << 24``, and the distinct redirects."""
    redirects: dict[tuple, int] = {}
    plans = []
    out = []
    for rule in policy.rules:
        slot = slots.rules[rule.index]
        if isinstance(rule.action, ir.Redirect):
            r = ebpf_plan.redirect_plan(rule)
            k = redirects.setdefault(_redirect_key(r), len(redirects))
            if k == len(plans):
                plans.append(r)
            act = ACT_REDIRECT + k
        else:
            act = {"drop": ACT_DROP, "pass": ACT_PASS, "count": ACT_COUNT}[rule.action.name]
        out.append(slot | act << ACT_SHIFT)
    return out, plans


def classify_plan(policy: ir.Policy, hook: str, cache: FlowCache | None = None,
                  tuning: dict | None = None) -> ClassifyPlan | None:
    """The classifier for ``policy`` (with the flow cache ``cache``), or None when a
    rule cannot be classified. ``tuning`` (``extra["classify_tuning"]``, benchmarks
    and tests, not a user's flag): ``dense_max``, bytes of dense vectors at most
    (:data:`tables.DENSE_MAX`); ``fc_counts``, count rules a flow-cache entry keeps at
    most (:data:`FC_COUNTS`; 2 makes the entry one cache line)."""
    tuning = tuning or {}
    if len(policy.rules) >= MAX_SLOTS or policy.default_audit:
        return None
    if hook == "socket" and any(isinstance(r.action, ir.Redirect) for r in policy.rules):
        raise ValueError("a socket filter cannot rewrite packets (`redirect`)")
    t0 = time.perf_counter()
    cs = model.conds(policy)
    if cs is None:
        return None
    built = tables.build(cs, tuning.get("dense_max"))
    if not built.fields:
        return None  # no rule constrains any field: the linear program is a few tests
    slots = counters.slots(policy, True)
    per_rule, redirects = actions(policy, slots)
    if len(redirects) > MAX_REDIRECTS:
        return None
    built.maps.append(tables.rule_table(built, per_rule))
    names = {f.name for f in built.fields}
    l4 = frozenset((4, 6)) if names & {"sport", "dport"} else frozenset()
    l4 |= {r.version for r in redirects}
    l2 = 18 if hook == "xdp" else 14
    features = frozenset(["redirect"] if redirects else [])
    if cache and hook == "socket":
        cache = replace(cache, counts=FC_COUNTS_SOCKET)
    if cache and tuning.get("fc_counts"):  # benchmarks: fewer count rules, a smaller entry
        cache = replace(cache, counts=min(cache.counts, int(tuning["fc_counts"])))
    plan = ClassifyPlan(hook, policy.default.value, slots, l2 + 60 + (18 if redirects else 4),
                        l4, features, built, redirects, len(policy.rules), cache)
    plan.build_s = time.perf_counter() - t0
    plan.stats = {"rules": len(policy.rules), "words": built.words, "summary_words": built.sums,
                  "groups": [p.words * 64 for p in built.groups],
                  "count_rules": sum(not c.terminal for c in cs),
                  "classes": {f.name: f.classes for f in built.fields},
                  "dense": built.dense, "map_bytes": tables.memory(built),
                  "build_s": round(plan.build_s, 3),
                  "flow_cache": cache.stats() if cache else None}
    return plan
