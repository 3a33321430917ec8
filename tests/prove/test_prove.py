"""``pfc prove``: pfc's own artifacts proved equal to their policies; artifacts with
one change each caught with a witness that really differs when run in the kernel.

The mutation tests draw ``PFC_MUTANTS`` mutants per target (default 12; the issue's
100 with ``PFC_MUTANTS=100``, as ``benchmarks/prove.py --mutants 100`` does).
"""

from __future__ import annotations

import os

import pytest

from pfc.build import build_artifact
from pfc.cli.main import main
from pfc.frontend.pipeline import compile_path, compile_text
from pfc.prove import mutate, proof
from tests.paths import EXAMPLES, ROOT

pytestmark = pytest.mark.kernel
MUTANTS = int(os.environ.get("PFC_MUTANTS", "12"))
OPTIONS = {"nft": {"dev": "dut"}}
# (example, target): proved here one by one for a readable failure; every example on
# every target is proved by the CLI test below (the CI command), not twice.
FAST = [("edge-drop", t) for t in ("cbpf", "xdp", "tc", "socket", "nft", "iptables")]


def _artifact(path, target: str, hook: str | None = None):
    compiled = compile_path(path)
    built, diags = build_artifact(compiled, target, hook=hook, **OPTIONS.get(target, {}))
    return compiled, built


@pytest.mark.parametrize("example,target", FAST, ids=[f"{e}-{t}" for e, t in FAST])
def test_pfc_artifacts_are_proved(example: str, target: str) -> None:
    compiled, built = _artifact(ROOT / "examples" / f"{example}.pf", target)
    result = proof.prove(built, compiled.require())
    assert result.equal, (result.expected, result.modelled, result.witness.hex(), result.note)


@pytest.mark.parametrize("target", ["tc", "nft"])
def test_rewrites_are_proved_by_the_bit_blasting_tactic(target: str) -> None:
    """The redirect proofs read frames the artifact wrote; they must reach the solver
    as reads of the input frame (``frame.reads_pushed``), or the tactic gives up and
    z3's default solver takes 20-30x longer (docs/prove.md "Speed")."""
    compiled, built = _artifact(ROOT / "examples" / "udp-redirect.pf", target)
    result = proof.prove(built, compiled.require())
    assert result.equal and not result.fell_back, result.fell_back


@pytest.mark.parametrize("hook", ["prerouting", "input"])
def test_nft_ip_hooks_are_proved(hook: str) -> None:
    compiled, built = _artifact(ROOT / "examples" / "web-server.pf", "nft", hook)
    assert proof.prove(built, compiled.require()).equal


def test_iptables_input_is_proved() -> None:
    compiled, built = _artifact(ROOT / "examples" / "web-server.pf", "iptables", "filter-input")
    assert proof.prove(built, compiled.require()).equal


def test_a_wrong_artifact_is_caught_and_confirmed_in_the_kernel() -> None:
    good = compile_text("drop udp dport 53\n")
    bad = compile_text("drop udp dport 54\n")
    built, _ = build_artifact(bad, "cbpf")
    result = proof.prove(built, good.require())
    assert not result.equal and result.confirmed, result.note
    assert result.expected.startswith("drop") or result.modelled.startswith("drop")


# --------------------------------------------------------------------------- mutants

MUTATED = [("ddos-drop-tcp-subnet-payload", t) for t in
           ("cbpf", "xdp", "tc", "socket", "nft", "iptables")]


@pytest.mark.parametrize("example,target", MUTATED, ids=[f"{e}-{t}" for e, t in MUTATED])
def test_mutants_are_caught_with_witnesses_that_really_differ(example, target) -> None:
    """Every mutant the prover says differs has a witness on which the artifact,
    run in the kernel, disagrees with the policy; every mutant proved equal agrees
    with the interpreter on generated frames too; a mutant the models cannot read is
    one the kernel refuses to load as well (``benchmarks/prove.py --mutants`` runs the
    same judge on larger examples, where docs/prove.md lists the few that are not)."""
    compiled, built = _artifact(ROOT / "examples" / f"{example}.pf", target)
    policy = compiled.require()
    seen: dict[str, list] = {k: [] for k in mutate.OUTCOMES}
    with mutate.lab(target):
        for m in mutate.mutants(compiled, built, MUTANTS, seed=1):
            judged = mutate.judge(m, policy)
            seen[judged.outcome].append(f"{m.what}: {judged.note}")
            if judged.outcome == "proved":
                assert mutate.disagreement(m.artifact, policy) is None, (
                    f"{m.what} was proved equal but differs on a sample")
    assert not seen["unconfirmed"], seen["unconfirmed"]
    assert not seen["models refuse"], seen["models refuse"]
    assert seen["differs"]


# ------------------------------------------------------------------------------ CLI

@pytest.mark.slow
def test_cli_prove_every_example_on_every_target(capsys) -> None:
    """CI: `pfc prove examples/*.pf --targets all`: the stateless examples proved, each
    stateful one "not proved" (exit 1: issue 29 M5)."""
    from pfc.frontend.ir import flow_features
    from pfc.frontend.pipeline import compile_path
    stateful = [p for p in EXAMPLES if flow_features(compile_path(p).require())]
    assert stateful, "rate-limit-log.pf is stateful"
    assert main(["prove", *map(str, stateful)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(stateful)
    assert all(": not proved: pfc prove covers stateless policies" in line for line in out)
    stateless = [str(p) for p in EXAMPLES if p not in stateful]
    assert main(["prove", *stateless, "--targets", "all"]) == 0
    out = capsys.readouterr().out
    assert out.count(": proved,") >= 40 and "DIFFERS" not in out and "error" not in out
    for target in ("nfmod", "u32"):  # no model: said on every file, not left out
        assert out.count(f": {target}: not proved: no model for target `{target}`") == len(
            stateless)


def test_cli_prove_a_target_without_a_model_named_explicitly(capsys) -> None:
    path = str(ROOT / "examples" / "ddos-drop-all.pf")
    assert main(["prove", path, "--targets", "nfmod,xdp"]) == 2
    out = capsys.readouterr().out
    assert "nfmod: error: no model for target `nfmod`" in out
    assert "xdp/xdp: proved," in out


def test_cli_prove_a_hand_edited_artifact(tmp_path, capsys) -> None:
    path = ROOT / "examples" / "edge-drop.pf"
    asm = tmp_path / "edge.asm"
    assert main(["compile", str(path), "--target", "cbpf", "--format", "asm",
                 "-o", str(asm)]) == 0
    asm.write_text(asm.read_text().replace("#0x3039", "#0x303a"))
    pcap = tmp_path / "w.pcap"
    code = main(["prove", str(path), "--target", "cbpf", "--artifact", str(asm),
                 "--format", "json", "-w", str(pcap)])
    assert code == 1
    import json
    report = json.loads(capsys.readouterr().out)
    assert report["version"] == 1 and not report["ok"]
    [entry] = report["files"]
    [result] = entry["targets"]
    assert result["status"] == "differs" and result["witness"]
    from pfc.oracle.pcap import read_pcap
    assert read_pcap(pcap)[0].hex() == result["wire"]


def test_cli_prove_usage_errors(capsys) -> None:
    path = str(ROOT / "examples" / "edge-drop.pf")
    assert main(["prove", path, "--artifact", "x.asm"]) == 2
    assert main(["prove", path, "--targets", "nosuch"]) == 2
    assert "unknown target" in capsys.readouterr().err


def test_cli_prove_timeout(capsys) -> None:
    """`--timeout S`: a proof the solver has not finished S seconds after it began is an
    error naming the limit (exit 2); within the limit it is proved as before."""
    path = str(ROOT / "examples" / "web-server.pf")
    assert main(["prove", path, "--targets", "xdp", "--timeout", "0.001"]) == 2
    assert "no answer within 0.001 s" in capsys.readouterr().out
    small = str(ROOT / "examples" / "ddos-drop-udp-subnet.pf")
    assert main(["prove", small, "--targets", "tc", "--timeout", "600"]) == 0
    assert main(["prove", small, "--timeout", "0"]) == 2
    assert "a number of seconds above 0" in capsys.readouterr().err
