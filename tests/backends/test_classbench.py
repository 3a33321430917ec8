"""The ClassBench-style generator (benchmarks/classbench.py) and the classification
prototypes it feeds (benchmarks/classify_research/, issue 16).

The generator: the same rules and frames for the same seed, the size and mix asked
for (flavours' prefix lengths, port classes, protocols, negations, count rules, both
defaults, nesting), policies that pfc checks without errors, traces aimed at rules'
corners. The prototypes: their rule model gives the interpreter's verdicts and
counts on every kind of frame, and each prototype, in the kernel, gives the
interpreter's verdicts and counters on XDP and tc.
"""

from __future__ import annotations

from collections import Counter

import pytest

from benchmarks import classbench as cb
from benchmarks.classify_research import model
from pfc.frontend.diagnostics import has_errors
from pfc.frontend.pipeline import compile_text
from pfc.oracle import interp
from tests.backends.test_ebpf import kernel


def _policy(rules: cb.RuleSet):
    compiled = compile_text(rules.text(), f"{rules.flavour}.pf")
    assert not has_errors(compiled.diagnostics), compiled.diagnostics[:3]
    return compiled.require()


def test_the_same_seed_gives_the_same_policy_and_trace():
    for flavour in cb.FLAVOURS:
        a, b = cb.generate(flavour, 300, seed=7), cb.generate(flavour, 300, seed=7)
        assert a.text() == b.text()
        assert cb.trace(a, 50, seed=3) == cb.trace(b, 50, seed=3)
        assert cb.generate(flavour, 300, seed=8).text() != a.text()
        assert cb.trace(a, 50, seed=4) != cb.trace(a, 50, seed=3)


@pytest.mark.parametrize("flavour", cb.FLAVOURS)
@pytest.mark.parametrize("n", [1, 32, 700])
def test_size_and_a_policy_pfc_checks(flavour, n):
    rules = cb.generate(flavour, n, seed=1)
    assert len(rules.rules) == n == len(set(rules.rules))
    lines = [ln for ln in rules.text().splitlines() if ln and not ln.startswith("#")]
    assert lines[0] == f"default {cb.FLAVOUR[flavour].default}" and len(lines) == n + 1
    assert len(_policy(rules).rules) == n


def test_both_defaults():
    for default in ("pass", "drop"):
        rules = cb.generate("acl", 50, seed=2, default=default)
        assert _policy(rules).default.value == default


def test_the_mix_asked_for():
    rules = cb.generate("ipc", 4000, seed=1, negated=0.05, count=0.04)
    mix = cb.counts(rules)
    assert 0.03 * 4000 < mix["count"] < 0.05 * 4000
    negated = sum(v for k, v in mix.items() if k.startswith("!"))
    assert 0.035 * 4000 < negated < 0.065 * 4000
    assert {"!src", "!dst", "!dport"} <= set(mix)
    for proto in ("tcp", "udp", "icmp", "any"):
        assert mix[f"proto:{proto}"] > 200, proto
    ports = Counter(r.dport for r in rules.rules if r.dport) + \
        Counter(r.sport for r in rules.rules if r.sport)
    assert ports[(1024, 65535)] and ports[(0, 1023)]
    assert sum(c for (lo, hi), c in ports.items() if lo == hi) > 1000  # exact ports
    assert sum(c for (lo, hi), c in ports.items() if 1 < hi - lo < 1000) > 100  # ranges
    assert all(r.proto in ("tcp", "udp") for r in rules.rules if r.sport or r.dport)


def test_flavours_differ_as_classbench_describes():
    acl, fw, ipc = (cb.generate(f, 3000, seed=1) for f in cb.FLAVOURS)
    acl_dst, fw_src = cb.prefix_lengths(acl, "dst"), cb.prefix_lengths(fw, "src")
    assert acl_dst[32] > 0.6 * 3000  # acl: mostly host destinations
    assert fw_src[0] > 0.5 * 3000  # fw: mostly wildcard sources
    assert cb.prefix_lengths(acl, "src")[0] < fw_src[0]
    ranged = {name: sum(1 for x in r.rules for p in (x.sport, x.dport)
                        if p and p[0] != p[1]) for name, r in (("acl", acl), ("fw", fw))}
    assert ranged["fw"] > ranged["acl"]  # fw: port ranges
    assert sum(1 for r in ipc.rules if r.sport) > 5 * sum(1 for r in acl.rules if r.sport)


def test_prefixes_nest_and_repeat():
    rules = cb.generate("acl", 2000, seed=1)
    dsts = [r.dst for r in rules.rules if r.dst is not None]
    assert len(set(dsts)) < len(dsts)  # several rules on one destination
    by_len = sorted(set(dsts), key=lambda n: n.prefixlen)
    wide = [n for n in by_len if n.prefixlen <= 24]
    nested = sum(1 for n in set(dsts) if n.prefixlen > 24
                 and any(n != w and n.subnet_of(w) for w in wide))
    assert nested > 50


def test_trace_aims_at_rules():
    rules = cb.generate("fw", 400, seed=1)
    cs = model.conds(_policy(rules))
    heads = cb.headers(rules, 2000, seed=1)
    aimed = [h for h in heads if h.aim is not None]
    assert 0.7 * len(heads) < len(aimed) < 0.9 * len(heads)
    hit = sum(1 for h in aimed if model.holds(cs[h.aim], model.key(h.frame())))
    assert hit > 0.6 * len(aimed)  # one in eight fields is aimed just outside
    frames = cb.trace(rules, 300, seed=1, malformed=0.3, policy=_policy(rules))
    assert len(frames) == 300
    assert sum(1 for f in frames if f[12:14] != b"\x08\x00") > 10  # ARP, VLAN, IPv6...


def test_the_model_gives_the_interpreters_outcome():
    """model.classify over model.key: the first terminal rule and the counted rules of
    the interpreter, on corner, uniform and malformed frames."""
    for flavour in cb.FLAVOURS:
        rules = cb.generate(flavour, 250, seed=5, negated=0.2, count=0.1)
        policy = _policy(rules)
        cs = model.conds(policy)
        for frame in cb.trace(rules, 800, seed=2, malformed=0.3, policy=policy):
            out = interp.evaluate(policy, frame)
            assert model.classify(cs, model.key(frame)) == (out.rule, list(out.counted))


PROTOTYPES = ("lbvs-lpm", "lbvs-dir-plain", "lbvs-grouped", "tss", "dtree")


@kernel
@pytest.mark.parametrize("algo", PROTOTYPES)
def test_prototypes_in_the_kernel_agree_with_the_interpreter(algo):
    from benchmarks.classify_research import proto
    from benchmarks.classify_research.run import ALGOS, check

    rules = cb.generate("ipc", 200, seed=9, negated=0.2, count=0.1)
    policy = _policy(rules)
    cs = model.conds(policy)
    build = ALGOS[algo](cs)
    frames = cb.trace(rules, 600, seed=3, malformed=0.3, policy=policy)
    for hook in ("xdp", "tc"):
        loaded = proto.load(build, cs, policy.default.value, hook)
        try:
            report = check(loaded, policy, frames)
        finally:
            loaded.close()
        assert report["frames"] > 500 and report["count_rules"] > 10
        assert report["verdict_mismatches"] == 0 and report["counter_mismatches"] == 0
