"""``pfc prove`` of nft's large-policy lowering (issue 16): blocks of chains with
verdict maps over concatenated keys (pipapo intervals) jumping to outcome chains.

Generated ClassBench-style policies (``benchmarks/classbench.py``), thresholds forced
small as tests/backends/test_classify.py does so that 100-150 rules take the map path
in many groups; the nft model reads the maps back from the kernel
(``pfc.prove.targets.nft_maps``).
"""

from __future__ import annotations

import random

import pytest

from benchmarks import classbench as cb
from pfc.build import build_artifact
from pfc.frontend.pipeline import compile_text
from pfc.passes import classify as cl
from pfc.prove import mutate, proof

pytestmark = pytest.mark.kernel


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setattr(cl, "MIN_RULES", 4)
    monkeypatch.setattr(cl, "MIN_RUN", 4)
    monkeypatch.setattr(cl, "MAX_NEW", 3)


def mapped(flavour: str, n: int, default: str, hook: str):
    rules = cb.generate(flavour, n, seed=3, default=default, negated=0.1, count=0.1)
    compiled = compile_text(rules.text(), "c.pf")
    built, _ = build_artifact(compiled, "nft", hook=hook, dev="dut")
    assert built.text.count("vmap @") >= 8
    return compiled, built


CASES = [("acl", 150, "drop", "ingress"), ("acl", 100, "pass", "ingress"),
         ("acl", 100, "drop", "prerouting"), ("acl", 150, "pass", "prerouting")]


@pytest.mark.parametrize("flavour,n,default,hook", CASES,
                         ids=["-".join(map(str, c)) for c in CASES])
def test_verdict_maps_are_proved(small, flavour, n, default, hook) -> None:
    compiled, built = mapped(flavour, n, default, hook)
    result = proof.prove(built, compiled.require())
    assert result.equal, (result.expected, result.modelled, result.witness.hex(), result.note)


@pytest.mark.parametrize("hook", ["ingress", "prerouting"])
def test_ipv6_and_mixed_verdict_maps_are_proved(small, hook) -> None:
    """IPv4 and IPv6 blocks, negations, count rules and rules no map holds in between
    (tests/backends/test_classify.py's generator)."""
    from tests.backends.test_classify import mixed
    compiled = compile_text(mixed(2, 60, "pass"), "m.pf")
    built, _ = build_artifact(compiled, "nft", hook=hook, dev="dut")
    assert "ip6 saddr . ip6 daddr" in built.text and built.text.count("vmap @") > 20
    result = proof.prove(built, compiled.require())
    assert result.equal, (result.expected, result.modelled, result.witness.hex(), result.note)


def test_a_cut_transport_header_never_reaches_a_map_without_its_port(small) -> None:
    """The lowering once differed from the policy here (a map whose key did not read
    the port matched a TCP frame whose transport header was cut off, before a count
    rule: docs/prove.md, "Found"); the proof found it and now holds."""
    compiled, built = mapped("fw", 150, "drop", "ingress")
    result = proof.prove(built, compiled.require())
    assert result.equal, (result.expected, result.modelled, result.witness.hex(), result.note)


def test_map_element_mutants_are_caught_in_the_kernel(small) -> None:
    """An element's verdict swapped, an interval bound moved by one: every mutant the
    prover says differs is confirmed in the kernel; every one proved equal agrees
    with the interpreter on generated frames."""
    compiled, built = mapped("acl", 100, "drop", "ingress")
    policy = compiled.require()
    pool = [(w, make) for w, make in mutate._text(built)
            if w.startswith(("element verdict", "interval bound"))]
    random.Random(1).shuffle(pool)
    picked = [p for p in pool if p[0].startswith("element")][:3] + \
        [p for p in pool if p[0].startswith("interval")][:5]
    seen: dict[str, list[str]] = {k: [] for k in mutate.OUTCOMES}
    with mutate.lab("nft"):
        for what, make in picked:
            m = mutate.Mutant(what, make())
            judged = mutate.judge(m, policy)
            seen[judged.outcome].append(what)
            if judged.outcome == "proved":
                assert mutate.disagreement(m.artifact, policy) is None, what
    assert not seen["unconfirmed"] and not seen["models refuse"], seen
    assert seen["differs"]


# ------------------------------------------------------------ the model alone

def test_elements_as_the_kernel_lists_them() -> None:
    from pfc.prove.targets.nft_maps import parse_element
    e = parse_element("\telement 36e1000a 00000006 0000da61  - 36e1000a 00000006 0000dc61  "
                      ": jump -> r0 0 [end]")
    assert e.key == bytes.fromhex("0a00e136" "06000000" "61da0000") and e.verdict == ("jump", "r0")
    assert e.end[-4:] == bytes.fromhex("61dc0000")
    plain = parse_element("\telement 00000011  : 0 [end]")
    assert plain.verdict is None and plain.end is None and plain.flags == 0
    with pytest.raises(Exception, match="data other than verdicts"):
        parse_element("\telement 00000011  : 0000000a 0 [end]")


def test_overlapping_boxes_take_the_first_element_listed() -> None:
    """pfc's elements are disjoint, and the model checks that on the constants before
    it drops the "no earlier element" terms; overlapping ones keep them."""
    import z3

    from pfc.prove.targets.nft_maps import Element, disjoint, lookup
    port = z3.BitVec("port", 16)

    def box(lo: int, hi: int, chain: str) -> Element:
        pad = lambda v: v.to_bytes(2, "big") + b"\0\0"  # noqa: E731
        return Element(pad(lo), pad(hi), 0, ("jump", chain))
    wide, narrow = box(10, 20, "a"), box(15, 15, "b")
    assert not disjoint([[(10, 20)], [(15, 15)]]) and disjoint([[(10, 14)], [(15, 15)]])
    found, choices = lookup([port], [wide, narrow])
    s = z3.Solver()
    s.add(port == 15)
    assert s.check() == z3.sat
    m = s.model()
    taken = [v for c, v in choices if z3.is_true(m.eval(c))]
    assert taken == [("jump", "a")] and z3.is_true(m.eval(found))


@pytest.mark.parametrize("flavour", ["acl", "ipc"])
def test_iptables_trees_of_chains_are_proved(flavour) -> None:
    """A large policy on iptables is a tree of chains (`-g`, `-m iprange`, u32 port
    and protocol reads; backends/iptables/ipt_tree.py): proved equal, counters
    included (the tree's lines are owned through meta["chains"])."""
    rules = cb.generate(flavour, 200, seed=3, default="drop", negated=0.1, count=0.1)
    compiled = compile_text(rules.text(), "c.pf")
    built, _ = build_artifact(compiled, "iptables")
    assert "-g PFC-t" in built.text
    result = proof.prove(built, compiled.require())
    assert result.equal, (result.expected, result.modelled, result.witness.hex(), result.note)
