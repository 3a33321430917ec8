"""The grouping pass keeps the meaning: same verdicts and counters before and after."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pfc.frontend.pipeline import compile_text
from pfc.oracle import gen
from pfc.oracle.interp import run
from pfc.passes.group import group_runs
from tests.strategies import rule_text


def _same_meaning(text: str, frames: int = 400) -> tuple[int, int]:
    policy = compile_text(text).require()
    grouped = group_runs(policy)
    sample = gen.sample(policy, frames, seed=1)
    before, counters_before = run(policy, sample)
    after, counters_after = run(grouped, sample)
    assert [o.verdict for o in before] == [o.verdict for o in after]
    assert [o.frame for o in before] == [o.frame for o in after]
    assert counters_before == counters_after
    return len(policy.rules), len(grouped.rules)


def test_a_blocklist_written_as_rules_becomes_one_set_lookup() -> None:
    lines = [f"drop src 10.0.{i // 256}.{i % 256}" for i in range(1000)]
    lines += [f"drop src 2001:db8::{i:x}" for i in range(50)]
    before, after = _same_meaning("\n".join(lines) + "\npass tcp dport 22\n")
    assert (before, after) == (1051, 2)


def test_runs_break_at_other_actions_and_counts() -> None:
    text = "\n".join(["drop udp dport 53", "drop udp dport 54", "count udp dport 55",
                      "drop udp dport 56", "pass udp dport 57", "pass udp dport 58"])
    assert _same_meaning(text) == (6, 4)


def test_negated_and_differing_matches_do_not_merge() -> None:
    text = "drop tcp !dport 22\ndrop tcp !dport 23\ndrop tcp dport 1 flags syn\ndrop tcp dport 2"
    assert _same_meaning(text) == (4, 4)


@settings(max_examples=60, deadline=None)
@given(st.lists(rule_text(), min_size=2, max_size=8), st.integers(0, 3))
def test_generated_policies_keep_their_meaning(rules: list[str], dup: int) -> None:
    # Duplicate one rule with a shifted value so that runs actually occur.
    rules = rules + [rules[-1].replace("10.1.2.3", "10.1.2.4").replace("80", "81")] * dup
    _same_meaning("\n".join(rules) + "\n", frames=200)


def test_a_family_keyword_is_part_of_what_must_be_equal() -> None:
    """`pass ip6 dst A` then `pass dst B` (IPv4): merged, the rule would be `ip6` and
    lose B (found by `pfc prove` on nft, iptables and xdp)."""
    text = "default drop\npass ip6 dst 2001:db8:1::/48\npass dst 192.168.0.0/16\n"
    assert _same_meaning(text) == (2, 2)
    mixed = "pass tcp dst 2001:db8:1::/48\npass tcp dst 192.168.0.0/16\n"
    assert _same_meaning(mixed) == (2, 1)
