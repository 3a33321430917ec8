"""``pfc bench`` in the kernel: JSON shape, drops agree with the interpreter, --plot,
usage errors. Short runs (a fixed number of frames); no timing assertions."""

from __future__ import annotations

import json
import os
import re

import pytest

from pfc.bench import naive as bench_naive
from pfc.cli.main import main
from pfc.frontend import ir
from pfc.frontend.pipeline import compile_text
from pfc.kernel.netns import missing_privileges
from tests.paths import ROOT

EDGE = str(ROOT / "examples" / "edge-drop.pf")
kernel = pytest.mark.skipif(missing_privileges() is not None,
                            reason=missing_privileges() or "")
RUN = ["--duration", "0.5", "--packets", "3000", "--repeat", "1000"]


def _bench(capsys, *args: str) -> tuple[int, dict | None, str]:
    code = main(["bench", *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.startswith("{") else None), err


def _keys(value) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


def _dropped_as_expected(name: str, row: dict) -> None:
    """What the policy dropped is what the interpreter says of the frames sent. On a busy
    machine veth's ring can overflow before the hook (XDP on veth drops rather than push
    back): those frames are counted apart, and the interpreter's count is then an upper
    bound (docs/bench.md)."""
    t = row["traffic"]
    lost = t["lost_in_veth"]
    assert t["passed"] + t["dropped"] + lost == t["sent"], (name, t)
    if lost == 0:
        assert t["dropped"] == row["expected_dropped"], (name, t)
    else:
        assert t["dropped"] <= row["expected_dropped"], (name, t)


@pytest.mark.kernel
@kernel
def test_bench_json_xdp_nft_none(capsys, tmp_path):
    png = tmp_path / "bench.png"
    code, report, err = _bench(capsys, EDGE, "--targets", "xdp,nft", "--baselines", "none",
                               "--format", "json", "--plot", str(png), *RUN)
    assert code == 0, err
    assert {"file", "frames", "rows", "duration", "repeat"} <= set(report)
    assert next(iter(report)) == "version" and report["version"] == 1
    assert report["kernel"] == os.uname().release and report["elapsed_s"] > 0
    assert report["started"][:4].isdigit() and "T" in report["started"]
    docs = (ROOT / "docs" / "json.md").read_text()
    for key in _keys(report):  # every field is documented (docs/json.md)
        assert re.search(rf"[`.]{re.escape(key)}`", docs), key
    assert [f["verdict"] for f in report["frames"]] == ["drop", "pass"]
    rows = {r["name"]: r for r in report["rows"]}
    assert set(rows) == {"none", "xdp", "nft"}
    for name, row in rows.items():
        assert row["status"] == "ok", row
        t = row["traffic"]
        assert {"sent", "pps", "passed", "dropped", "dropped_pps", "cpu_ns_per_packet",
                "latency_us", "lost_in_veth"} <= set(t)
        assert t["sent"] > 0 and t["pps"] > 0
        _dropped_as_expected(name, row)
        assert t["latency_us"]["median"] > 0
    assert rows["none"]["expected_dropped"] == 0
    assert rows["xdp"]["expected_dropped"] > 0
    assert rows["xdp"]["test_run_ns"]["drop"] > 0 and rows["xdp"]["test_run_ns"]["pass"] > 0
    assert rows["nft"]["ratio_to_none"]["pps"] > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.kernel
@kernel
def test_bench_naive_baselines_drop_what_the_policy_drops(capsys):
    code, report, err = _bench(capsys, EDGE, "--targets", "iptables", "--baselines",
                               "nft-naive,iptables-naive,xdp-filter", "--format", "json",
                               *RUN)
    assert code == 0, err
    rows = {r["name"]: r for r in report["rows"]}
    for name in ("iptables", "nft-naive", "iptables-naive"):
        _dropped_as_expected(name, rows[name])
        assert rows[name]["expected_dropped"] > 0, name
    # one rule ANDing two fields: xdp-filter's lists cannot say that (or it is absent)
    assert rows["xdp-filter"]["status"].startswith(("refused: xdp-filter cannot express "
                                                    "rule 0 (line 7)", "not installed"))


def test_bad_target_is_a_usage_error(capsys):
    assert main(["bench", EDGE, "--targets", "xdp,bogus"]) == 2
    assert "unknown target `bogus`" in capsys.readouterr().err


def test_without_privileges_bench_is_an_environment_error(capsys, monkeypatch):
    """Exit 2 like every environment refusal (it was 1, the policy-error code)."""
    monkeypatch.setattr("pfc.bench.measure.missing_privileges",
                        lambda: "needs CAP_BPF (loading eBPF programs): run it as root")
    assert main(["bench", EDGE]) == 2
    assert "pfc bench: error: needs CAP_BPF" in capsys.readouterr().err


def test_bad_baseline_is_a_usage_error(capsys):
    assert main(["bench", EDGE, "--baselines", "nft-clever"]) == 2
    assert "unknown baseline `nft-clever`" in capsys.readouterr().err


def test_naive_refuses_what_it_cannot_write_and_names_the_rule():
    policy = compile_text("default pass\ndrop tcp flags syn\n").require()
    with pytest.raises(bench_naive.Refused, match=r"rule 0 \(line 2\)"):
        bench_naive.nft_text(policy, "dut")


def test_naive_nft_is_one_rule_per_address():
    policy = compile_text("default pass\ndrop udp src { 10.0.0.1, 10.0.0.2 } dport 53\n"
                          "pass ip6\n").require()
    text = bench_naive.nft_text(policy, "dut")
    assert "ip saddr 10.0.0.1/32 udp dport 53 drop" in text
    assert "ip saddr 10.0.0.2/32 udp dport 53 drop" in text
    assert "meta protocol ip6 accept" in text
    assert policy.default is ir.Verdict.PASS


@pytest.mark.kernel
@kernel
def test_bench_xdp_filter_baseline_drops_what_the_policy_drops(capsys, tmp_path):
    policy = tmp_path / "deny.pf"
    policy.write_text("default pass\ndrop src { 10.0.0.1, 10.0.0.2 }\ndrop udp dport 5353\n")
    code, report, err = _bench(capsys, str(policy), "--targets", "xdp", "--baselines",
                               "xdp-filter", "--format", "json", *RUN)
    assert code == 0, err
    row = {r["name"]: r for r in report["rows"]}["xdp-filter"]
    if row["status"] == "not installed":
        return
    assert row["status"] == "ok", row
    _dropped_as_expected("xdp-filter", row)
    assert row["expected_dropped"] > 0


def test_xdp_filter_commands_keep_default_pass_as_policy_allow():
    policy = compile_text("default pass\ndrop src 10.0.0.1\ndrop tcp sport 22\n").require()
    cmds = bench_naive.xdp_filter_commands(policy, "dut", "native")
    assert cmds == [
        ["xdp-filter", "load", "dut", "--mode", "native", "--policy", "allow"],
        ["xdp-filter", "ip", "10.0.0.1", "--mode", "src"],
        ["xdp-filter", "port", "22", "--mode", "src", "--proto", "tcp"]]
