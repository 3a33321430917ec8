"""The library API (docs/api.md): what ``import pfc`` offers, and docs/api.md's example."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pfc
from pfc.frontend import ir
from pfc.kernel import netns
from tests.paths import ROOT

EDGE = ROOT / "examples" / "edge-drop.pf"
ROOT_REASON = netns.missing_privileges()


def test_the_example_in_docs_runs():
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "api.py")],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    assert "error unexpected `dprot`" in out.stdout
    assert "netdev ingress on eth0" in out.stdout
    assert "policy.xdp.o" in out.stdout
    assert "cannot express `redirect`" in out.stdout and "^~~~" in out.stdout


def test_the_example_is_the_one_in_the_docs():
    doc = (ROOT / "docs" / "api.md").read_text()
    code = (ROOT / "examples" / "api.py").read_text().split("\n", 2)[2]
    assert code.strip() in doc


def test_a_policy_is_text_a_path_or_a_compiled():
    text = EDGE.read_text()
    as_path = pfc.compile(EDGE, target="ir").text
    assert pfc.compile(str(EDGE), target="ir").text == as_path
    assert pfc.compile(pfc.front(EDGE), target="ir").text == as_path
    assert pfc.compile(text, target="nft", dev="eth0").hook == "ingress"
    with pytest.raises(TypeError, match="a policy is text, a path or a Compiled"):
        pfc.check(42)


def test_check_returns_diagnostics_as_data():
    assert pfc.check("drop udp dport 53\n") == []
    [d] = pfc.check("drop udp dprot 53\n")
    assert d.severity == "error" and d.span.start == len("drop udp ")
    [d] = pfc.check("redirect udp dport 53 to 10.0.0.1\n", targets=["iptables"])
    assert "cannot express `redirect`" in d.message


def test_compile_errors_carry_diagnostics_and_render_like_check():
    with pytest.raises(pfc.CompileError) as exc:
        pfc.compile("drop udp dprot 53\n", target="nft")
    assert exc.value.diagnostics[0].severity == "error"
    assert exc.value.render().startswith("<policy>:1:10: error: unexpected `dprot`")


def test_bad_options_are_option_errors():
    with pytest.raises(pfc.OptionError, match="unknown target `bogus`"):
        pfc.compile("drop\n", target="bogus")
    with pytest.raises(pfc.OptionError, match="no format `asm`"):
        pfc.compile("drop\n", target="nft", format="asm")
    with pytest.raises(pfc.OptionError, match="needs a device"):
        pfc.compile("drop\n", target="nft", hook="ingress")


def test_warnings_travel_with_the_artifact():
    artifact = pfc.compile("drop udp\ndrop udp dport 53\n", target="nft")
    assert [d.severity for d in artifact.diagnostics] == ["warning"]


def test_frames_and_run_are_the_interpreter():
    policy = "default drop\npass udp dport 53\n"
    frames = pfc.frames(policy, 300, seed=3)
    assert frames == pfc.frames(policy, 300, seed=3)
    outcomes, counters = pfc.run(policy, frames)
    assert len(outcomes) == 300 and counters == {}
    assert {o.verdict for o in outcomes} == {ir.Verdict.PASS, ir.Verdict.DROP}


def test_run_reads_a_pcap(tmp_path):
    from pfc.oracle.pcap import write_pcap

    frames = pfc.frames(EDGE, 50)
    write_pcap(tmp_path / "f.pcap", frames)
    assert pfc.run(EDGE, tmp_path / "f.pcap")[0] == pfc.run(EDGE, frames)[0]


def test_dir_lists_the_api():
    assert {"check", "compile", "frames", "run", "verify", "load", "unload", "status",
            "attach_socket", "CompileError"} <= set(dir(pfc))
    with pytest.raises(AttributeError):
        pfc.no_such_thing  # noqa: B018


@pytest.mark.kernel
@pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")
def test_verify_in_the_kernel(tmp_path):
    results = pfc.verify(EDGE, ["xdp", "nft"], frames=300, pcap_dir=tmp_path)
    assert [(r.target, r.status) for r in results] == [("xdp", "agree"), ("nft", "agree")]
    frames = pfc.frames(EDGE, 7, seed=3)
    [mine] = pfc.verify(EDGE, ["tc"], frames=0, pcap=frames)
    assert mine.status == "agree" and mine.report.total == 7
    pcap = tmp_path / "mine.pcap"
    from pfc.oracle.pcap import write_pcap
    write_pcap(pcap, frames)
    [both] = pfc.verify(EDGE, ["tc"], frames=5, pcap=pcap)
    assert both.report.total == 12


def test_verify_needs_frames():
    with pytest.raises(ValueError, match="needs frames"):
        pfc.verify(EDGE, ["xdp"], frames=0)


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("PFC_STATE_DIR", str(tmp_path / "state"))
    pins = Path(f"/sys/fs/bpf/pfc-test-{os.getpid()}-{secrets.token_hex(3)}")
    monkeypatch.setenv("PFC_PIN_DIR", str(pins))
    yield
    shutil.rmtree(pins, ignore_errors=True)


@pytest.mark.kernel
@pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")
@pytest.mark.usefixtures("isolated")
def test_load_status_unload_through_the_api():
    with netns.lab() as lab:
        result = pfc.load(EDGE, "nft", lab.dut, netns=lab.name)
        assert result.record.target == "nft" and result.record.dev == lab.dut
        [entry] = pfc.status(lab.dut, lab.name)
        assert entry.inspection.health == "ok"
        pfc.unload("nft", lab.dut, netns=lab.name)
        assert pfc.status(lab.dut, lab.name) == []
        with pytest.raises(pfc.LoadError, match="does not exist"):
            pfc.load(EDGE, "nft", "nosuchdev0", netns=lab.name)


@pytest.mark.kernel
@pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")
@pytest.mark.usefixtures("isolated")
def test_unload_force_through_the_api():
    """A table recreated outside pfc is left alone, unless force=True."""
    with netns.lab() as lab:
        a = pfc.load(EDGE, "nft", lab.dut, netns=lab.name).record.attach
        table = f"{a['family']} {a['table']}"
        nft = ["ip", "netns", "exec", lab.name, "nft"]
        subprocess.run([*nft, f"delete table {table}; add table {table}"], check=True)
        kept = pfc.unload("nft", lab.dut, netns=lab.name)
        assert any("left it as it is" in m for m in kept.messages)
        assert subprocess.run([*nft, "list", "table", *table.split()]).returncode == 0
        pfc.load(EDGE, "nft", lab.dut, netns=lab.name, force=True)
        subprocess.run([*nft, f"delete table {table}; add table {table}"], check=True)
        gone = pfc.unload("nft", lab.dut, netns=lab.name, force=True)
        assert any(m.startswith("deleted nftables table") for m in gone.messages)
        assert subprocess.run([*nft, "list", "table", *table.split()],
                              capture_output=True).returncode != 0
