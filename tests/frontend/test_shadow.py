"""Shadow warnings: the indexed search finds exactly the first coverer the plain
pairwise search finds, and stays fast on policies of many one-value rules."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pfc.frontend import ir
from pfc.frontend.pipeline import compile_text
from pfc.frontend.shadow import covers, shadowed
from tests.strategies import policies


def pairwise(policy: ir.Policy) -> list[tuple[int, int]]:
    """(shadowed line, shadowing line) by trying every earlier terminal rule."""
    out, earlier = [], []
    for rule in policy.rules:
        cover = next((a for a in earlier if covers(a, rule)), None)
        if cover is not None:
            out.append((rule.line, cover.line))
        if rule.terminal:
            earlier.append(rule)
    return out


def indexed(policy: ir.Policy) -> list[tuple[int, int]]:
    line = {r.span: r.line for r in policy.rules}
    return [(line[d.span], line[d.notes[0].span]) for d in shadowed(policy)]


# Rules built from few values, so that covering pairs are common.
_ADDRS = {4: ["10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "10.1.2.3", "10.1.2.4",
              "192.168.0.0/16"],
          6: ["2001:db8::/32", "2001:db8::1", "2001:db8:0:1::/64"]}
_PORTS = ["53", "80", "{ 53, 80 }", "1-1023", "{ 22, 53, 80 }"]


@st.composite
def _dense_rule(draw) -> str:
    action = draw(st.sampled_from(["drop", "pass", "count"]))
    proto = draw(st.sampled_from(["", "tcp ", "udp "]))
    parts = [f"{action} {proto}".rstrip()]
    pool = _ADDRS[draw(st.sampled_from([4, 4, 6]))]
    for field in draw(st.lists(st.sampled_from(["src", "dst"]), max_size=2, unique=True)):
        neg = "!" if draw(st.booleans()) and draw(st.booleans()) else ""
        values = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3, unique=True))
        parts.append(f"{neg}{field} " + (values[0] if len(values) == 1
                                         else "{ " + ", ".join(values) + " }"))
    if proto and draw(st.booleans()):
        parts.append(f"dport {draw(st.sampled_from(_PORTS))}")
    return " ".join(parts)


def _compiled(text: str) -> ir.Policy:
    compiled = compile_text(text)
    assert compiled.policy is not None, compiled.diagnostics
    return compiled.policy


@settings(max_examples=300, deadline=None)
@given(st.lists(_dense_rule(), min_size=2, max_size=12))
def test_index_finds_the_same_first_coverer_on_dense_policies(rules: list[str]) -> None:
    policy = _compiled("\n".join(rules) + "\n")
    assert indexed(policy) == pairwise(policy)


@settings(max_examples=100, deadline=None)
@given(policies(max_rules=10))
def test_index_finds_the_same_first_coverer_on_any_policy(text: str) -> None:
    policy = _compiled(text)
    assert indexed(policy) == pairwise(policy)


def test_ten_thousand_one_address_rules() -> None:
    """10k `drop src A` rules (the blocklist written out) and a duplicate at the end:
    found through the index, where trying every pair took minutes."""
    lines = [f"drop src 10.{i >> 8}.{i & 255}.1" for i in range(10_000)]
    lines += ["drop src 10.0.0.0/16", "drop src 10.3.7.1", "pass tcp dport 80",
              "drop tcp dport 80"]
    found = indexed(_compiled("\n".join(lines) + "\n"))
    assert found == [(10_002, 776), (10_004, 10_003)]
