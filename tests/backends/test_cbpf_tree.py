"""Large policies on cbpf (``backends/cbpf/tree.py``, issue 16): the worlds, the
binary searches and the chains, against the reference interpreter through libpcap's
``bpf_filter`` and in the kernel on a packet socket; the refusal of policies that
cannot fit, fast and naming the rule count.

The thresholds are forced small (``small``) so that policies of a few dozen rules take
the tree: ClassBench-style rules (benchmarks/classbench.py, negations included) with
generated rules of every kind mixed in (IPv6, both families, payload, ttl, frag, flags,
icmp-type, protocol ``all``), both defaults, both variants (searches, chains only),
both links; frames aimed at rule corners, uniform ones and the malformed mix.
"""

from __future__ import annotations

import dataclasses
import random
import time
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks import classbench as cb
from pfc import backends
from pfc.backends.base import Artifact
from pfc.backends.cbpf import asm as cbpf_asm
from pfc.backends.cbpf import backend as cbpf
from pfc.backends.cbpf import cfg as cbpf_cfg
from pfc.backends.cbpf import opt as cbpf_opt
from pfc.backends.cbpf import run as cbpf_run
from pfc.backends.cbpf import tree
from pfc.backends.cbpf.graph import ETHER, MAX_INSNS, RAW_IP
from pfc.frontend.diagnostics import CompileError
from pfc.frontend.pipeline import compile_text
from pfc.kernel import netns
from pfc.oracle import gen
from pfc.verifier.equiv import compare
from tests.strategies import policies

REASON = netns.missing_privileges()
CBPF = backends.get("cbpf")
LIBPCAP = dataclasses.replace(CBPF, run=cbpf.run_libpcap)
SETTINGS = settings(derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


@pytest.fixture
def small(monkeypatch):
    """Trees for policies of 8 IPv4 rules or more, searches of 2 intervals or more."""
    monkeypatch.setattr(tree, "MIN_RULES", 8)
    monkeypatch.setattr(tree, "MIN_GROUP", 2)


def mixed(flavour: str, n: int, extras: str, default: str, seed: int):
    """``n`` ClassBench-style rules with the rule lines of ``extras`` at random places
    (the text, and the rule set for its trace)."""
    ruleset = cb.generate(flavour, n, seed=seed, count=0, negated=0.1)
    body = [r for r in ruleset.text().splitlines()
            if r and not r.startswith(("#", "default"))]
    rng = random.Random(seed)
    for line in extras.splitlines():
        if line and not line.startswith("default"):
            body.insert(rng.randrange(len(body) + 1), line)
    return f"default {default}\n" + "\n".join(body) + "\n", ruleset


def program(policy, link, groups: bool) -> list:
    graph = tree.build(policy, link, tree.plan(policy, link.l3, groups))
    cbpf_opt.optimise(graph, cbpf_cfg.implications(link))
    return cbpf_asm.assemble(graph)


def artifact(policy, insns, link) -> Artifact:
    return Artifact("cbpf", "socket" if link is ETHER else "xt-bpf", "asm",
                    cbpf_asm.to_asm(insns), {}, policy, {"insns": insns, "link": link.name})


def check(art, frames, backend=LIBPCAP):
    report = compare(art, backend, frames)
    assert report.ok, f"{report.summary()}\n{art.policy.source}\n{art.text}"
    return report


@settings(SETTINGS, max_examples=30)
@given(data=st.data(), extras=policies(count=False, redirect=False, max_rules=8))
def test_trees_agree_with_the_interpreter(small, data, extras: str) -> None:
    seed = zlib.crc32(extras.encode())
    flavour = cb.FLAVOURS[seed % 3]
    text, ruleset = mixed(flavour, data.draw(st.integers(8, 60)), extras,
                          "drop" if seed % 2 else "pass", seed)
    policy = compile_text(text, "tree.pf").require()
    assert tree.applies(policy)
    frames = gen.sample(policy, 200, seed=seed) + cb.trace(
        ruleset, 200, seed=seed, malformed=0.2, policy=policy)
    for link in (ETHER, RAW_IP):
        for groups in (True, False):
            check(artifact(policy, program(policy, link, groups), link), frames)


def test_a_search_is_made_and_decides_the_leaves(small) -> None:
    """A run of host rules becomes one binary search: fewer tests per packet than the
    chain's, the same verdicts."""
    body = "".join(f"drop tcp dst 10.0.{i}.1 dport {1000 + i}\n" for i in range(40))
    policy = compile_text("default pass\n" + body + "pass udp\n", "hosts.pf").require()
    plan = tree.plan(policy, ETHER.l3)
    assert [type(s).__name__ for s in plan.valid] == ["Group", "list"]
    assert len(plan.valid[0].spans) == 40
    frames = gen.sample(policy, 1500, seed=3)
    for groups in (True, False):
        check(artifact(policy, program(policy, ETHER, groups), ETHER), frames)


def test_below_the_threshold_the_program_is_todays() -> None:
    text = "".join(f"drop tcp dst 10.0.{i}.1 dport {1000 + i}\n" for i in range(100))
    policy = compile_text(text, "small.pf").require()
    assert not tree.applies(policy)
    graph = cbpf_cfg.build(policy)
    cbpf_opt.optimise(graph, cbpf_cfg.IMPLICATIONS)
    assert cbpf.compile_policy(policy) == cbpf_asm.assemble(graph)


def test_classbench_policies_of_hundreds_of_rules_fit() -> None:
    """500 acl rules (3,900 instructions as one chain) fit as worlds and chains."""
    rules = cb.generate("acl", 500, seed=1, negated=0, count=0)
    policy = compile_text(rules.text(), "acl.pf").require()
    insns = cbpf.compile_policy(policy)
    assert len(insns) <= MAX_INSNS
    check(artifact(policy, insns, ETHER),
          cb.trace(rules, 600, seed=2, malformed=0.3, policy=policy))


def test_thousands_of_rules_are_refused_at_once_naming_the_count(monkeypatch) -> None:
    rules = cb.generate("ipc", 2000, seed=1, negated=0, count=0)
    policy = compile_text(rules.text(), "ipc.pf").require()
    monkeypatch.setattr(tree, "build", lambda *a: pytest.fail("built a graph"))
    start = time.process_time()
    with pytest.raises(CompileError) as info:
        cbpf.compile_policy(policy)
    [diag] = info.value.diagnostics
    assert diag.code == "too-large" and "the policy's 2,000 rules need about" in \
        diag.message and "classic BPF allows 4096" in diag.message
    assert all(h in diag.hint for h in ("socket", "tc", "xdp", "nft"))
    assert time.process_time() - start < 5  # generous: the estimate takes ~0.05 s


def test_a_policy_just_beyond_the_limit_gets_the_exact_count() -> None:
    rules = cb.generate("ipc", 560, seed=1, negated=0, count=0)
    policy = compile_text(rules.text(), "ipc.pf").require()
    with pytest.raises(CompileError) as info:
        cbpf.compile_policy(policy)
    [diag] = info.value.diagnostics
    assert diag.message.startswith("target `cbpf`: the policy's 560 rules need ")
    assert "BPF_MAXINSNS" in diag.message


# ------------------------------------------------------------------------------ kernel

@pytest.fixture(scope="module")
def kernel_session():
    if REASON:
        pytest.skip(REASON)
    with cbpf_run.session() as current:
        yield current


@pytest.mark.kernel
@pytest.mark.skipif(REASON is not None, reason=REASON or "")
@pytest.mark.parametrize("flavour,n,default", [("acl", 400, "pass"), ("fw", 300, "drop")])
def test_trees_in_the_kernel(flavour: str, n: int, default: str, kernel_session) -> None:
    """SO_ATTACH_FILTER takes the program (with searches, and chains only); the
    kernel's verdicts are the interpreter's on corner, uniform and malformed frames."""
    rules = cb.generate(flavour, n, seed=4, negated=0.05, count=0, default=default)
    policy = compile_text(rules.text(), "k.pf").require()
    assert tree.applies(policy)
    frames = cb.trace(rules, 1500, seed=5, malformed=0.3, policy=policy)
    check(artifact(policy, cbpf.compile_policy(policy), ETHER), frames, CBPF)
    check(artifact(policy, program(policy, ETHER, False), ETHER), frames, CBPF)
