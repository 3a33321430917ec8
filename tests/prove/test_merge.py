"""What makes ``pfc diff`` fast keeps its meaning: runs of rules merged into one
(``pfc.prove.merge``) decide every frame as the rules one by one, and the index of
changed boxes (``pfc.prove.boxes.Index``) finds every box a pairwise test finds."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pfc.frontend import ir
from pfc.frontend.pipeline import compile_text
from pfc.oracle import gen, interp
from pfc.prove import boxes, formula, merge
from pfc.prove.diff import Judge
from pfc.prove.frame import Frame, Reading
from tests.strategies import policies

TEMPLATES = ["drop src {a}", "drop dst {a}", "pass src {a}", "drop udp dst {a} dport {p}",
             "drop udp dst 10.0.0.0/8 dport {p}", "pass tcp dport {p} flags syn",
             "drop tcp sport {p}", "count udp dport {p}", "drop ip6 src {a6}",
             "pass !src {a}", "drop tcp dst {a} dport {p}"]
ADDRS = ["10.0.0.1", "10.0.0.0/24", "10.1.0.0/16", "192.168.0.79", "172.16.0.0/12",
         "10.0.0.128/25", "0.0.0.0/0"]
ADDRS6 = ["2001:db8::1", "2001:db8::/32", "fe80::/10"]
PORTS = ["53", "80", "1-1023", "443", "8000-8080", "65535", "0"]


@st.composite
def runs(draw) -> str:
    """Policies made of runs of rules from one template: what merging meets."""
    lines = []
    for _ in range(draw(st.integers(1, 4))):
        template = draw(st.sampled_from(TEMPLATES))
        for _ in range(draw(st.integers(1, 4))):
            lines.append(template.format(a=draw(st.sampled_from(ADDRS)),
                                         a6=draw(st.sampled_from(ADDRS6)),
                                         p=draw(st.sampled_from(PORTS))))
    default = draw(st.sampled_from(["", "default drop\n"]))
    return default + "\n".join(lines) + "\n"


def _policy(text: str) -> ir.Policy:
    return compile_text(text).require()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(runs(), policies(max_rules=5)), data=st.data())
def test_merged_runs_decide_as_the_rules(text: str, data: st.DataObject) -> None:
    policy = _policy(text)
    judge = Judge(policy, merged=True)
    frame = Frame.fresh()
    m = judge.meaning(Reading(frame, address_sets=data.draw(
        st.sampled_from(["prefixes", "intervals"]))))
    for _ in range(10):
        data_ = data.draw(gen.frames(policy))
        want = interp.evaluate(policy, data_)
        got = formula.evaluate(m, frame, data_)
        assert (got.passes, got.counted, got.out) == (
            want.verdict is ir.Verdict.PASS, want.counted, want.frame), data_.hex()
        assert got.rule == (None if want.rule is None else m.merged.get(want.rule, want.rule))
        assert judge.evaluate(data_) == want


def test_a_blocklist_is_one_rule() -> None:
    text = "".join(f"drop src 10.0.{i}.0/24\n" for i in range(50)) + "pass tcp\n" + "".join(
        f"drop udp dport {p}\n" for p in range(100, 120))
    got = merge.blocks(_policy(text).rules)
    assert [len(b.rules) for b in got] == [50, 1, 20]
    assert len(got[0].rule.matches[0].prefixes) == 50
    assert got[2].rule.matches[0].ranges == ((100, 119),)


def test_rules_kept_alone_and_unlike_rules_are_not_merged() -> None:
    policy = _policy("drop src 10.0.0.1\ndrop src 10.0.0.2\ndrop src 10.0.0.3\n"
                     "pass src 10.0.0.4\ndrop !src 10.0.0.5\ndrop !src 10.0.0.6\n"
                     "drop udp dport 53\ndrop tcp dport 53\ncount src 10.0.0.7\n"
                     "count src 10.0.0.8\n")
    got = merge.blocks(policy.rules, alone=frozenset({1}))
    assert [len(b.rules) for b in got] == [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    got = merge.blocks(policy.rules)
    assert [len(b.rules) for b in got] == [3, 1, 1, 1, 1, 1, 1, 1]


@settings(max_examples=60, deadline=None)
@given(changed=policies(max_rules=4), others=policies(max_rules=6))
def test_the_index_finds_what_pairs_find(changed: str, others: str) -> None:
    marked = [boxes.box(r) for r in _policy(changed).rules]
    index = boxes.Index(marked)
    for rule in _policy(others).rules:
        b = boxes.box(rule)
        assert index.meets(b) == any(not c.disjoint(b) for c in marked), rule


def test_the_index_on_many_prefixes() -> None:
    marked = [boxes.box(r) for r in _policy("".join(
        f"drop dst 10.{i}.0.0/16\n" for i in range(0, 200, 2)) + "drop udp dport 53\n").rules]
    index = boxes.Index(marked)
    for rule in _policy("".join(f"drop tcp dst 10.{i}.1.0/24\n" for i in range(200))
                        + "drop src 10.0.0.0/8\n").rules:
        b = boxes.box(rule)
        assert index.meets(b) == any(not c.disjoint(b) for c in marked)
