"""``pfc diff``: the regions where two policies differ, each witness judged by the
interpreter; same meaning for rewrites that change nothing."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pfc.cli.main import main
from pfc.frontend import ir
from pfc.frontend.pipeline import compile_text
from pfc.oracle import gen, interp
from pfc.prove import diff as prove_diff
from tests.strategies import policies


def _p(text: str) -> ir.Policy:
    return compile_text(text).require()


SAME = [
    ("reordered disjoint rules", "drop udp dport 53\npass tcp dport 80\ncount icmp\n",
     "pass tcp dport 80\ncount icmp\ndrop udp dport 53\n"),
    ("a prefix split in two", "drop src 10.0.0.0/8\n",
     "drop src 10.0.0.0/9\ndrop src 10.128.0.0/9\n"),
    ("a redundant rule", "drop src 10.0.0.0/8\n", "drop src 10.0.0.0/8\ndrop src 10.1.0.0/16\n"),
    ("a list written as rules", "drop udp dport { 53, 123 }\n",
     "drop udp dport 53\ndrop udp dport 123\n"),
    ("an explicit default", "drop tcp\n", "default pass\ndrop tcp\n"),
    ("a negation spelled out", "drop tcp !dport 0-1023\n", "drop tcp dport 1024-65535\n"),
    ("a redundant count guard", "count tcp dport 80\ndrop ip6\n",
     "count tcp dport 80\ndrop ip6\ndrop ip6 src ::/0\n"),
]


@pytest.mark.parametrize("name,old,new", SAME, ids=[c[0] for c in SAME])
def test_same_meaning(name: str, old: str, new: str) -> None:
    result = prove_diff.diff(_p(old), _p(new))
    assert result.same, [r.line() for r in result.regions]


DIFFERENT = [
    ("a port changed", "drop udp dst 10.1.0.0/16 dport 53\n",
     "drop udp dst 10.1.0.0/16 dport 54\n",
     {"udp dst 10.1.0.0/16 dport 53: drop → pass", "udp dst 10.1.0.0/16 dport 54: pass → drop"}),
    ("overlapping rules swapped", "pass tcp dport 80\ndrop tcp\n", "drop tcp\npass tcp dport 80\n",
     {"tcp dport 80: pass → drop"}),
    ("a count rule removed", "count icmp\ndrop udp\n", "drop udp\n",
     {"icmp: `count icmp` (line 1): counted → not counted"}),
    ("the default changed", "drop tcp\n", "default drop\ndrop tcp\n",
     {"frames no rule holds on: pass → drop"}),
]


@pytest.mark.parametrize("name,old,new,lines", DIFFERENT, ids=[c[0] for c in DIFFERENT])
def test_differences_are_regions_with_witnesses(name, old, new, lines) -> None:
    a, b = _p(old), _p(new)
    result = prove_diff.diff(a, b)
    assert {r.line() for r in result.regions} == lines
    assert result.complete
    for region in result.regions:
        was, now = interp.evaluate(a, region.witness), interp.evaluate(b, region.witness)
        assert (was.verdict, was.counted, was.frame) != (now.verdict, now.counted, now.frame)


def test_a_changed_rewrite_is_a_difference() -> None:
    a = _p("redirect udp dst 192.168.64.2 dport 8080 to 10.0.1.2:8083\n")
    b = _p("redirect udp dst 192.168.64.2 dport 8080 to 10.0.1.2:8084\n")
    [region] = prove_diff.diff(a, b).regions
    assert region.change == "redirect to 10.0.1.2:8083 → redirect to 10.0.1.2:8084"
    assert interp.evaluate(a, region.witness).frame != interp.evaluate(b, region.witness).frame


def test_a_named_set_whose_contents_change_is_a_difference() -> None:
    """Same rule text, another set: not `same meaning` (found by `pfc load --dry-run`
    against a loaded copy whose set file had changed)."""
    a = _p("define bad = { 10.9.0.0/16, 10.1.2.3 }\ndrop src $bad\n")
    b = _p("define bad = { 10.7.0.0/16, 10.1.2.3 }\ndrop src $bad\n")
    result = prove_diff.diff(a, b)
    assert {r.change for r in result.regions} == {"drop → pass", "pass → drop"}
    assert prove_diff.diff(a, _p("define bad = { 10.1.2.3, 10.9.0.0/16 }\n"
                                 "drop src $bad\n")).same


def test_the_limit_stops_the_search() -> None:
    old = "".join(f"drop udp dport {p}\n" for p in range(10))
    new = "".join(f"drop tcp dport {p}\n" for p in range(10))
    result = prove_diff.diff(_p(old), _p(new), limit=3)
    assert len(result.regions) == 3 and not result.complete


def test_pruning_keeps_only_rules_that_meet_the_change() -> None:
    rules = [f"drop udp dst 10.{i // 256}.{i % 256}.0/24 dport 53\n" for i in range(300)]
    changed = rules.copy()
    changed[150] = "drop udp dst 10.0.150.0/24 dport 54\n"
    result = prove_diff.diff(_p("".join(rules)), _p("".join(changed)))
    assert result.encoded == (1, 1)
    assert {r.line() for r in result.regions} == {
        "udp dst 10.0.150.0/24 dport 54: pass → drop",
        "udp dst 10.0.150.0/24 dport 53: drop → pass"}


@settings(max_examples=40, deadline=None)
@given(old=policies(max_rules=4), new=policies(max_rules=4), data=st.data())
def test_no_difference_is_missed_on_generated_frames(old: str, new: str, data) -> None:
    """Where the interpreter finds frames the policies treat differently, diff reports
    differences; where diff says `same`, no generated frame tells them apart; pruned
    and naive encodings agree."""
    a, b = _p(old), _p(new)
    result = prove_diff.diff(a, b, limit=1)
    frames = gen.sample(a, 40, seed=1) + gen.sample(b, 40, seed=2)
    differs = any(_outcome(a, f) != _outcome(b, f) for f in frames)
    if differs:
        assert not result.same
    assert result.same == prove_diff.diff(a, b, limit=1, naive=True).same


def _outcome(policy: ir.Policy, frame: bytes):
    out = interp.evaluate(policy, frame)
    counted = tuple(prove_diff.rule_key(policy.rule(i)) for i in out.counted)
    return out.verdict, out.frame, counted


# ------------------------------------------------------------------------------ CLI

def _files(tmp_path, old: str, new: str):
    a, b = tmp_path / "old.pf", tmp_path / "new.pf"
    a.write_text(old)
    b.write_text(new)
    return str(a), str(b)


def test_cli_exit_codes_and_json(tmp_path, capsys) -> None:
    a, b = _files(tmp_path, "drop udp dport 53\n", "drop udp dport 54\n")
    pcap = tmp_path / "w.pcap"
    assert main(["diff", a, b, "--format", "json", "-w", str(pcap)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["same"] and len(report["regions"]) == 2
    from pfc.oracle.pcap import read_pcap
    assert [f.hex() for f in read_pcap(pcap)] == [r["witness"] for r in report["regions"]]
    assert main(["diff", a, a]) == 0
    assert "same meaning" in capsys.readouterr().out


def test_cli_policy_errors_exit_2(tmp_path, capsys) -> None:
    a, b = _files(tmp_path, "drop udp dprot 53\n", "drop udp\n")
    assert main(["diff", a, b]) == 2
    assert "old.pf:1" in capsys.readouterr().err
    assert main(["diff", a, str(tmp_path / "missing.pf")]) == 2


# ---------------------------------------------------------------- named lists (m1)

WEB = ("define admins = { 203.0.113.10, 203.0.113.11 }\ndefine web = { 80, 443 }\n"
       "default drop\npass tcp src $admins dport 22\npass tcp dport $web\n")
WEB2 = WEB.replace("203.0.113.10, 203.0.113.11", "203.0.113.10").replace(
    "80, 443", "80, 443, 8443")


def test_a_changed_list_is_described_by_its_changed_entries() -> None:
    """Issue 29 m1: `tcp src $admins dport 22: pass → drop` read as "every admin
    loses SSH"; the region is the entry removed from the list."""
    result = prove_diff.diff(_p(WEB), _p(WEB2))
    assert {r.line() for r in result.regions} == {
        "tcp src 203.0.113.11 (no longer in $admins) dport 22: pass → drop",
        "tcp dport 8443 (new in $web): drop → pass"}
    assert [c.text() for c in result.sets] == ["$admins: -203.0.113.11", "$web: +8443"]


def test_list_changes_are_values_not_entries() -> None:
    """`{ 80, 81 }` gaining 82 is `+82`, a prefix split or merged is no change, a
    prefix losing a part is that part."""
    from pfc.prove.sets import changes
    rule = "drop tcp dport $p\ndrop src $a\n"
    old = _p("define p = { 80, 81 }\ndefine a = { 10.0.0.0/24, 10.0.1.0/24, 2001:db8::/64 }\n"
             + rule)
    new = _p("define p = { 80-82 }\ndefine a = { 10.0.0.0/23, 2001:db8::/65 }\n" + rule)
    assert [c.text() for c in changes(old, new)] == ["$a: -2001:db8:0:0:8000::/65",
                                                     "$p: +82"]


def test_cli_diff_shows_lists_and_versioned_json(tmp_path, capsys) -> None:
    a, b = tmp_path / "a.pf", tmp_path / "b.pf"
    a.write_text(WEB)
    b.write_text(WEB2)
    assert main(["diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "  lists: $admins: -203.0.113.11; $web: +8443\n" in out
    assert main(["diff", str(a), str(b), "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["version"] == 1 and report["sets"] == [
        {"name": "admins", "removed": ["203.0.113.11"], "added": []},
        {"name": "web", "removed": [], "added": ["8443"]}]


def test_no_witness_is_shorter_than_an_ethernet_header() -> None:
    """The trial's `every frame: pass → drop` had an empty witness."""
    for old, new in [("default pass\n", "default drop\n"), ("pass udp\n", "default drop\n")]:
        result = prove_diff.diff(_p(old), _p(new))
        assert result.regions and all(len(r.witness) >= 14 for r in result.regions)


# ------------------------------------------------------ large lists (m2: time)

def test_the_default_solver_is_built_only_when_the_tactic_gives_up(monkeypatch) -> None:
    """Issue 29 m2: each region of `pfc diff` against a 50,000-address list asserted
    the formula into z3's default solver too (about a second each add and push),
    though only a tactic that gives up uses it."""
    import z3

    from pfc.prove import frame as prove_frame
    built = []
    real = z3.Solver
    monkeypatch.setattr(z3, "Solver", lambda *a, **k: built.append(1) or real(*a, **k))
    result = prove_diff.diff(_p("drop src { 10.0.0.0/8, 192.0.2.1 }\n"),
                             _p("drop src 10.0.0.0/8\n"))
    assert len(result.regions) == 1 and built == []
    x = z3.BitVec("x", 8)
    s = prove_frame.solver()
    s.add(x * x == 7)  # no square is 7 mod 256
    assert s.check(timeout_ms=1, fall_back=False) in (z3.unsat, z3.unknown) and built == []


def test_diff_uses_the_light_tactic_and_tells_its_progress(monkeypatch) -> None:
    from pfc.prove import frame as prove_frame
    seen, told = [], []
    real = prove_frame._Solver.__init__

    def init(self, tactic=prove_frame._Solver.TACTIC):
        seen.append(tactic)
        real(self, tactic)
    monkeypatch.setattr(prove_frame._Solver, "__init__", init)
    prove_diff.diff(_p("drop udp dport 53\n"), _p("drop udp dport 54\n"), progress=told.append)
    assert seen == [prove_frame.LIGHT]
    assert told == ["stating 1 + 1 rules", "0 regions found, looking for more",
                    "1 region found, looking for more", "2 regions found, looking for more"]


def test_address_lists_are_stated_as_before() -> None:
    """`formula.equals` and `any_of` (z3's C API, for 50,000-entry lists) build the
    terms `==` and `z3.Or` build."""
    import z3

    from pfc.prove.formula import any_of, equals
    x = z3.BitVec("x", 24)
    terms = [equals(x, v) for v in (1, 0xABCDEF, 7)]
    assert all(t.eq(x == v) for t, v in zip(terms, (1, 0xABCDEF, 7), strict=True))
    assert any_of(terms).eq(z3.Or(*terms)) and any_of(terms[:1]).eq(terms[0])
