"""`pfc verify`: agreement on the examples, and proof that the check can fail."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pfc import backends
from pfc.backends.nfmod import kmod
from pfc.cli.main import main
from pfc.frontend import ir
from pfc.frontend.pipeline import compile_path
from pfc.kernel.netns import missing_privileges
from pfc.oracle.pcap import read_pcap, write_pcap
from tests.paths import EXAMPLES, ROOT

EDGE = str(ROOT / "examples" / "edge-drop.pf")
kernel = pytest.mark.skipif(missing_privileges() is not None,
                            reason=str(missing_privileges()))


def _verify_json(capsys, *args: str) -> tuple[int, dict]:
    code = main(["verify", *args, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.kernel
@kernel
def test_examples_agree_on_ebpf_targets(capsys, tmp_path: Path) -> None:
    code, report = _verify_json(capsys, EDGE, "--targets", "xdp,tc,socket",
                                "--frames", "500", "--pcap-out", str(tmp_path))
    assert code == 0, report
    rows = report["files"][0]["targets"]
    assert [r["status"] for r in rows] == ["agree"] * 3
    assert all(r["agree"] + r["skipped_by_hook"] == 500 for r in rows)


@pytest.mark.kernel
@kernel
def test_every_example_agrees_on_every_target_with_2000_frames(capsys) -> None:
    """The project's own CI run of `pfc verify examples/*.pf --targets all` (issue 6):
    every target that can express an example agrees with the interpreter on 2,000
    generated frames, counters included; the others are reported, not failed. A target
    this kernel cannot run (nfmod without module loading, u32 without act_gact: this
    project's host) is `compiled-only` with the kernel's reason; the kernel lab runs
    them (tests/kernel/test_matrix.py)."""
    examples = [str(p) for p in EXAMPLES]  # one rule list each (whole firewalls: later)
    cannot = {"nfmod": kmod.modules_unavailable(), "u32": kmod.u32_unavailable()}
    code, report = _verify_json(capsys, *examples, "--targets", "all", "--frames", "2000")
    assert code == 0 and report["ok"], report
    assert [f["file"] for f in report["files"]] == examples
    for f in report["files"]:
        rows = {r["target"]: r for r in f["targets"]}
        assert set(rows) == set(backends.registry()) - {"ir"}, f["file"]
        for row in rows.values():
            if row["status"] == "not-expressible":
                assert row["not_expressible"], row
                continue
            if cannot.get(row["target"]):
                assert row["status"] == "compiled-only", row
                assert row["reason"] == f"target `{row['target']}`: {cannot[row['target']]}"
                continue
            assert row["status"] == "agree", row
            # a stateful example also gets its ordered sequences (oracle.sequences)
            assert row["frames"] >= 2000 and row["disagree"] == 0, row
            assert row["agree"] + row["skipped_by_hook"] == row["frames"], row
            assert row["agree"] >= 800 and row["counters_agree"], row


def _off_by_one(policy: ir.Policy) -> ir.Policy:
    """The emitter bug the test plants: every port match is shifted by one."""
    def shift(m):
        if isinstance(m, ir.IntMatch) and m.field == "dport":
            return dataclasses.replace(m, ranges=tuple((lo + 1, hi + 1) for lo, hi in m.ranges))
        return m
    rules = tuple(dataclasses.replace(r, matches=tuple(shift(m) for m in r.matches))
                  for r in policy.rules)
    return dataclasses.replace(policy, rules=rules)


@pytest.mark.kernel
@kernel
def test_a_broken_emitter_fails_with_a_shrunk_pcap_and_replay_commands(
        capsys, monkeypatch, tmp_path: Path) -> None:
    xdp = backends.get("xdp")
    broken = dataclasses.replace(xdp, emit=lambda policy, opts: dataclasses.replace(
        xdp.emit(_off_by_one(policy), opts), policy=policy))
    monkeypatch.setitem(backends.registry(), "xdp", broken)
    code = main(["verify", EDGE, "--targets", "xdp", "--frames", "800",
                 "--pcap-out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert "DISAGREE" in out
    pcap = tmp_path / "edge-drop-xdp-fail.pcap"
    assert pcap.exists()
    [frame] = read_pcap(pcap)
    # Shrunk: the smallest frame that shows the bug is a UDP header with port 12345 or
    # 12346 (no payload), not one of the sample's padded or tagged frames.
    assert len(frame) <= 14 + 4 + 60 + 8
    policy = compile_path(EDGE).require()
    from pfc.oracle.interp import evaluate
    assert evaluate(policy, frame).verdict != evaluate(_off_by_one(policy), frame).verdict
    assert f"pfc run {EDGE} {pcap}" in out.replace("\n", " ")
    assert f"tcpdump -nn -xx -r {pcap}" in out.replace("\n", " ")


def test_not_expressible_is_reported_not_failed_unless_asked(capsys, monkeypatch) -> None:
    monkeypatch.setattr("pfc.verifier.run.missing_privileges", lambda: "needs root (test)")
    redirect = str(ROOT / "examples" / "udp-redirect.pf")
    code, report = _verify_json(capsys, redirect, "--targets", "all", "--frames", "50")
    socket = next(r for r in report["files"][0]["targets"] if r["target"] == "socket")
    assert socket["status"] == "not-expressible"
    assert socket["not_expressible"] == [
        {"line": 4, "rule": "redirect udp dst 192.168.64.2 dport 8080 to 10.0.1.2:8083"}]
    assert code == 2  # not a failure; but nothing ran either (no privileges): below
    code, report = _verify_json(capsys, redirect, "--targets", "socket", "--frames", "50")
    assert code == 1 and report["files"][0]["targets"][0]["status"] == "error"


def test_without_privileges_nothing_is_verified_and_the_exit_says_so(capsys,
                                                                    monkeypatch) -> None:
    """Every target compiled, none run: exit 2 (the environment), not a silent 0."""
    monkeypatch.setattr("pfc.verifier.run.missing_privileges", lambda: "needs root (CAP_BPF)")
    code = main(["verify", EDGE, "--targets", "xdp,tc", "--frames", "20", "--format", "json"])
    out, err = capsys.readouterr()
    report = json.loads(out)
    rows = report["files"][0]["targets"]
    assert code == 2 and not report["ok"]
    assert [(r["status"], r["reason"]) for r in rows] == [
        ("compiled-only", "needs root (CAP_BPF)")] * 2
    assert err == (f"pfc verify: error: {EDGE}: nothing verified: no target was run in "
                   "the kernel: needs root (CAP_BPF)\n")


STATEFUL = "pass ct state established\ndrop ct state invalid\n"


def test_a_policy_no_target_can_express_fails(capsys, tmp_path: Path) -> None:
    """`pfc verify *.pf` in CI must not pass having checked nothing: with only the
    targets that have no conntrack, a `ct state` policy is verified nowhere: exit 1."""
    policy = tmp_path / "st.pf"
    policy.write_text(STATEFUL)
    registry = backends.registry()
    saved = dict(registry)
    try:  # restored in its order: "targets that can" hints list the registry's order
        for name in ("nft", "iptables"):
            del registry[name]
        code = main(["verify", str(policy), "--frames", "20"])
    finally:
        registry.clear()
        registry.update(saved)
    out, err = capsys.readouterr()
    assert code == 1
    assert "xdp: not expressible: line 1: pass ct state established" in out
    assert err == (f"pfc verify: error: {policy}: nothing verified: no target can express "
                   "the policy\n")


def test_a_hook_named_that_cannot_express_the_policy_names_the_one_that_can(
        capsys, tmp_path: Path) -> None:
    policy = tmp_path / "st.pf"
    policy.write_text(STATEFUL)
    code = main(["verify", str(policy), "--targets", "nft:prerouting,iptables:raw-prerouting",
                 "--frames", "20"])
    out = capsys.readouterr().out
    assert code == 1
    assert "nft: not expressible at hook prerouting: line 1: pass ct state established" in out
    assert "nft: hint: hook input can: --targets nft:input" in out
    assert "iptables: hint: hook filter-input can: --targets iptables:filter-input" in out


@pytest.mark.kernel
@kernel
def test_ct_state_is_verified_at_the_hooks_after_conntrack(capsys, tmp_path: Path) -> None:
    """M5: `--targets all` on a `ct state` policy runs nft at `input` and iptables at
    `filter-input` (their default hooks run before conntrack), and says so."""
    policy = tmp_path / "st.pf"
    policy.write_text(STATEFUL)
    code, report = _verify_json(capsys, str(policy), "--frames", "100")
    rows = {r["target"]: r for r in report["files"][0]["targets"]}
    assert code == 0 and report["ok"]
    assert (rows["nft"]["hook"], rows["nft"]["status"]) == ("input", "agree")
    assert (rows["iptables"]["hook"], rows["iptables"]["status"]) == ("filter-input", "agree")
    assert rows["nft"]["reason"].startswith("verified at hook input; the default hook "
                                            "ingress cannot: target `nft` cannot express "
                                            "`ct state` at hook `ingress`")
    assert {r["status"] for t, r in rows.items() if t not in ("nft", "iptables")} == {
        "not-expressible"}


def test_unknown_target_is_a_usage_error(capsys) -> None:
    assert main(["verify", EDGE, "--targets", "xdpp"]) == 2
    assert "unknown target `xdpp`" in capsys.readouterr().err


def _plant_type_blind_icmp(monkeypatch) -> None:
    """The interpreter's ICMP keying before issue 29 (M4): a reply keyed by its
    request's type, a connection found by swapping the addresses alone; so an echo
    reply sent the way its request went was taken as the request again (`new`)."""
    from pfc.oracle import conntrack

    keyed = conntrack._tuple

    def tuple_by_request(view):
        tup = keyed(view)
        if tup is None or tup[1] not in (1, 58):
            return tup
        pairs = conntrack._ICMP_PAIRS[tup[1]]
        request = next((q for q, r in pairs.items() if r == tup[5][0]), tup[5][0])
        return (*tup[:5], bytes((request, 0)))

    def swapped(tup):
        version, proto, src, dst, a, b = tup
        return (version, proto, dst, src, a, b) if proto in (1, 58) else \
            (version, proto, dst, src, b, a)

    monkeypatch.setattr(conntrack, "_tuple", tuple_by_request)
    monkeypatch.setattr(conntrack, "_inverted", swapped)


@pytest.mark.kernel
@kernel
def test_a_type_blind_icmp_tracker_is_caught_with_a_replayable_sequence(
        capsys, monkeypatch, tmp_path: Path) -> None:
    """The generated ICMP mixes (oracle.sequences) catch the old keying, and the failing
    pcap holds the frames before the failing one: `pfc run` on it gives the verdict
    verify expected on its last frame, and the kernel the other one."""
    policy = tmp_path / "st.pf"
    policy.write_text(STATEFUL)
    _plant_type_blind_icmp(monkeypatch)
    code, report = _verify_json(capsys, str(policy), "--targets", "nft:input", "--frames",
                                "50", "--pcap-out", str(tmp_path))
    row = report["files"][0]["targets"][0]
    assert code == 1 and row["status"] == "disagree"
    first = row["mismatches"][0]
    frames = read_pcap(row["pcap"])
    assert row["pcap_frame"] == len(frames) > 1
    assert main(["run", str(policy), row["pcap"], "--format", "json"]) == 0
    replayed = json.loads(capsys.readouterr().out)["packets"]
    assert replayed[-1]["verdict"] == first["expected"] != first["got"]
    from pfc.build import build_artifact
    art, _ = build_artifact(compile_path(str(policy)), "nft", hook="input")
    from pfc.verifier.equiv import compare
    kernel = compare(art, backends.get("nft"), frames)
    assert [m.index for m in kernel.mismatches][:1] == [len(frames) - 1]


@pytest.mark.kernel
@kernel
def test_verify_and_run_number_frames_alike(capsys, monkeypatch, tmp_path: Path) -> None:
    """The finding's capture (an echo request, then an echo reply the same way) under the
    old keying: verify names frame 2, `pfc run` numbers it 2, 1-based both."""
    from tests.oracle.test_conntrack_icmp import echo

    policy, capture = tmp_path / "st.pf", tmp_path / "mine.pcap"
    policy.write_text(STATEFUL)
    write_pcap(capture, [echo(8), echo(0)])
    _plant_type_blind_icmp(monkeypatch)
    code = main(["verify", str(policy), "--targets", "iptables:filter-input", "--pcap",
                 str(capture), "--pcap-out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert "frame 2: expected pass (default), target gave drop" in out
    assert "failing sequence: " in out and "2 frames, the failing one last" in out
    for replay in (capture, tmp_path / "st-iptables-fail.pcap"):  # the same two frames
        assert main(["run", str(policy), str(replay)]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[1].split()[:3] == ["2", "46B", "pass"]
