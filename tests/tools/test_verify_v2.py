"""`pfc verify` of a whole firewall (v2): target lists, the text and JSON reports, exit
codes (0 agree; 1 disagree or not expressible; 2 nothing run: privileges, a part the
host lab does not load, a bad option)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pfc.cli.main import main
from pfc.kernel.netns import missing_privileges
from pfc.verifier import firewall as fwv
from pfc.verifier import whole
from tests.paths import ROOT

ROUTER = str(ROOT / "examples" / "home-router.pf")
EDGE = str(ROOT / "examples" / "ddos-edge.pf")
V1 = str(ROOT / "examples" / "edge-drop.pf")
ERR: list[str] = []


def kernel(test):
    return pytest.mark.kernel(pytest.mark.skipif(
        missing_privileges() is not None, reason=str(missing_privileges()))(test))


def _json(capsys, *args: str) -> tuple[int, dict]:
    code = main(["verify", *args, "--format", "json"])
    captured = capsys.readouterr()
    ERR[:] = [captured.err]
    return code, json.loads(captured.out)


@pytest.mark.parametrize("args, lists", [
    ([], [["nft"]]), (["--targets", "all"], [["nft"], ["iptables"]]),
    (["--targets", "nft,iptables"], [["nft"], ["iptables"]]),
    (["--target", "xdp,nft", "--target", "iptables"], [["xdp", "nft"], ["iptables"]]),
    (["--target", "nft", "--target", "nft"], [["nft"]]),
])
def test_the_target_lists_of_a_whole_firewall(monkeypatch, args, lists):
    seen = []
    monkeypatch.setattr(whole, "verify_file", lambda rs, t, **kw: seen.append(t) or
                        whole.FirewallResult(t, "compiled-only", reason="test"))
    assert main(["verify", ROUTER, *args, "--format", "json"]) == 2
    assert seen == lists


def test_a_block_no_target_carries_fails_with_its_line(capsys):
    code, report = _json(capsys, EDGE, "--target", "iptables")
    assert code == 1 and not report["ok"]
    [entry] = report["files"]
    assert entry["firewall"] and entry["file"] == EDGE
    [row] = entry["targets"]
    assert row["status"] == "not-expressible" and row["packets"] == 0
    [d] = row["not_expressible"]
    assert (d["line"], d["code"]) == (11, "unsupported")
    assert "no target of iptables carries the `ingress` block" in d["message"]


def test_a_diagnostic_in_text_has_its_caret(capsys):
    assert main(["verify", EDGE, "--target", "iptables"]) == 1
    captured = capsys.readouterr()
    assert "not expressible" in captured.out
    assert "ddos-edge.pf:11:1: error: no target of iptables carries" in captured.err
    assert "^" in captured.err


def test_parts_the_lab_does_not_load_are_compiled_only(capsys):
    code, report = _json(capsys, EDGE, "--target", "socket,nft")
    [row] = report["files"][0]["targets"]
    assert code == 2 and row["status"] == "compiled-only"
    assert "not socket" in row["reason"]
    assert "nothing verified" in ERR[0]


DECIDING_INGRESS = """\
interface eth0 address 192.0.2.10/24 gateway 192.0.2.1

ingress eth0 {
    drop tcp
}

input {
    default drop
    pass tcp
    pass udp
}
"""


@kernel
def test_ingress_programs_are_attached_and_judged(capsys, tmp_path: Path, monkeypatch):
    """xdp,nft and tc,nft: the ingress block's program on eth0 of the lab, the rest in
    nft; every TCP opener is dropped at ingress. Left unattached, verify must see the
    openers delivered (which it did not, before delivered packets were compared)."""
    path = tmp_path / "edge.pf"
    path.write_text(DECIDING_INGRESS)
    code, report = _json(capsys, str(path), "--target", "xdp,nft", "--target", "tc,nft",
                         "--frames", "30")
    assert code == 0, report
    assert [r["status"] for r in report["files"][0]["targets"]] == ["agree", "agree"]
    monkeypatch.setattr(fwv, "_ebpf", lambda artifact: None)
    code, report = _json(capsys, str(path), "--target", "xdp,nft", "--frames", "30")
    [row] = report["files"][0]["targets"]
    assert code == 1 and row["status"] == "disagree"
    assert row["differences"][0]["what"].startswith("delivered (dropped at ingress)")


def test_without_privileges_nothing_runs_exit_2(capsys, monkeypatch):
    monkeypatch.setattr(whole, "missing_privileges", lambda: "needs root (test)")
    code, report = _json(capsys, ROUTER)
    assert code == 2 and report["files"][0]["targets"][0]["reason"] == "needs root (test)"


@pytest.mark.parametrize("args, message", [
    (["--pcap", "x.pcap"], "--pcap is for one rule list"),
    (["--target", "nosuch"], "unknown target `nosuch`"),
    (["--frames", "0"], "--frames must be at least 1"),
])
def test_usage_errors_exit_2(capsys, tmp_path: Path, args, message):
    if "--pcap" in args:
        args = ["--pcap", str(tmp_path / "x.pcap")]
        from pfc.oracle.pcap import write_pcap
        write_pcap(args[1], [bytes(60)])
    assert main(["verify", ROUTER, *args]) == 2
    assert message in capsys.readouterr().err


def test_a_rule_list_takes_target_as_targets(monkeypatch):
    from pfc import api
    seen = []
    monkeypatch.setattr(api, "verify", lambda c, t, **kw: seen.append(t) or [])
    main(["verify", V1, "--target", "nft", "--target", "xdp"])
    assert seen == [["nft", "xdp"]]


@kernel
def test_a_router_agrees_in_the_kernel(capsys):
    """The command's path (tests/kernel/test_verify_firewall.py: every example, both
    netfilter targets)."""
    code, report = _json(capsys, ROUTER, "--frames", "30")
    [row] = report["files"][0]["targets"]
    assert code == 0 and report["ok"], row
    assert row["status"] == "agree" and row["packets"] == row["agree"] > 50


@kernel
def test_a_wrong_ruleset_disagrees_exit_1(capsys, monkeypatch):
    """The nft ruleset's port forward points elsewhere: verify reports the packets."""
    real = fwv._nft
    monkeypatch.setattr(fwv, "_nft", lambda text: real(
        text.replace("dnat ip to 10.0.0.2:80", "dnat ip to 10.0.0.3:80")))
    assert main(["verify", ROUTER, "--frames", "30"]) == 1
    out = capsys.readouterr().out
    assert "DISAGREE" in out and "difference" in out and "0a000003" in out


def test_kernel_runs_pass_the_target_lists_on(capsys, monkeypatch):
    """`--kernel host`: the guest's pfc verify gets each --target list as given, and no
    --targets when none was given (a whole firewall's default is nft, not `all`)."""
    from pfc.verifier import kernels
    seen = []

    class Run:
        ok, error, returncode = True, None, 0

        def to_json(self):
            return {}
    monkeypatch.setattr(kernels, "run_host", lambda argv, out: seen.append(argv) or Run())
    main(["verify", ROUTER, "--kernel", "host", "--target", "xdp,nft", "--format", "json"])
    main(["verify", ROUTER, "--kernel", "host", "--targets", "all", "--format", "json"])
    assert "--targets" not in seen[0] and seen[0][-2:] == ["--target", "xdp,nft"]
    assert seen[1][seen[1].index("--targets") + 1] == "all"
