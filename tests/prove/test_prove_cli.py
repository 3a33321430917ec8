"""``pfc prove`` on the command line (issue 29): what it says and exits with when it
proves nothing (M5), a given nft file's hook (m3), the JSON (m6), each line as soon
as it is known (m9)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from pfc.cli.main import main
from pfc.frontend.pipeline import compile_path
from tests.paths import ROOT

STATEFUL = "pass ct state established\ndrop udp dport 53 limit rate 10/second\nlog tcp dport 22\n"


def test_a_stateful_policy_is_not_proved_and_fails(tmp_path, capsys) -> None:
    """One line, which says why (not "not expressible"), and exit 1: a CI job that
    runs `pfc prove` on a stateful policy does not pass having proved nothing."""
    path = tmp_path / "st.pf"
    path.write_text(STATEFUL)
    assert main(["prove", str(path)]) == 1
    out = capsys.readouterr().out
    assert out == (f"{path}: not proved: pfc prove covers stateless policies (this one "
                   "uses log, limit, ct state)\n")
    assert main(["prove", str(path), "--targets", "nft:input", "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report == {"version": 1, "ok": False, "files": [{
        "file": str(path), "proved": False, "targets": [],
        "reason": "pfc prove covers stateless policies (this one uses log, limit, ct state)"}]}


def test_prove_json_starts_with_the_version(tmp_path, capsys) -> None:
    path = tmp_path / "p.pf"
    path.write_text("drop udp dport 53\n")
    assert main(["prove", str(path), "--targets", "cbpf", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert list(report)[:3] == ["version", "ok", "files"] and report["version"] == 1
    [target] = report["files"][0]["targets"]
    assert target["status"] == "proved" and target["target"] == "cbpf"


def test_usage_errors_are_json_objects_too(capsys) -> None:
    path = str(ROOT / "examples" / "edge-drop.pf")
    assert main(["prove", path, "--targets", "nosuch", "--format", "json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"].startswith("unknown target")
    assert main(["diff", path, path, "--limit", "0", "--format", "json"]) == 2
    assert json.loads(capsys.readouterr().out) == {
        "version": 1, "error": "--limit must be at least 1"}


@pytest.mark.kernel
def test_a_given_nft_file_is_proved_at_its_own_hook(tmp_path, capsys) -> None:
    """`--artifact` of an nft file without `--hook` reads the hook from the file (it
    once tried netdev ingress and stopped with exit 70); a contradicting `--hook` is
    a usage error."""
    path = ROOT / "examples" / "web-server.pf"
    for fmt in ("nft", "json"):
        out = tmp_path / f"ws.{fmt}"
        assert main(["compile", str(path), "--target", "nft", "--format", fmt,
                     "-o", str(out)]) == 0
        capsys.readouterr()
        assert main(["prove", str(path), "--target", "nft", "--artifact", str(out)]) == 0
        assert "nft/prerouting: proved" in capsys.readouterr().out
    assert main(["prove", str(path), "--target", "nft", "--hook", "ingress",
                 "--artifact", str(tmp_path / "ws.nft")]) == 2
    assert "is for hook `prerouting`, not `ingress`" in capsys.readouterr().err


DRIVER = """
import sys
import z3
from pfc.cli.main import main
from pfc.frontend.pipeline import compile_path
from pfc.prove import frame, run
from pfc.prove.rewrite import csum_add, csum_fold, csum_update

real = run.prove

def prove(artifact, *args, **kwargs):
    if artifact.target != "tc":
        return real(artifact, *args, **kwargs)
    hc, old = z3.BitVec("hc", 16), z3.BitVec("old", 32)
    new = z3.BitVecVal(0x0A630035, 32)
    solver = frame.solver()
    solver.add(csum_update(hc, old, new) != csum_fold(
        csum_add(csum_add(~z3.ZeroExt(16, hc), ~old), new)))
    solver.check()  # half a minute or more, unless interrupted
    raise AssertionError("not interrupted")

run.prove = prove
sys.exit(main(["prove", sys.argv[1], "--targets", "cbpf,tc"]))
"""


def test_each_line_comes_as_soon_as_it_is_known(tmp_path) -> None:
    """Into a pipe: the cbpf line is there while the tc proof still runs (then
    interrupted)."""
    policy = tmp_path / "p.pf"
    policy.write_text("drop udp dport 53\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, "-c", DRIVER, str(policy)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = child.stdout.readline()
        assert child.poll() is None  # the second proof has not ended
        child.send_signal(signal.SIGINT)
        child.communicate(timeout=120)  # a safety net, not a measure
    finally:
        child.kill()
    assert first.startswith(f"{policy}: cbpf/socket: proved"), first
    assert child.returncode == 130


def test_targets_without_a_model_are_named_not_failed(tmp_path, capsys) -> None:
    """A target pfc prove has no model of (nfmod, u32, ...: merged after the prover) is a
    line of its own with `--targets all` (it once ended every default run with "no
    view for target `nfmod`", exit 2), `not-modelled` in the JSON."""
    path = tmp_path / "p.pf"
    path.write_text("drop udp dport 53\n")
    assert main(["prove", str(path), "--no-run", "--format", "json"]) == 0
    targets = json.loads(capsys.readouterr().out)["files"][0]["targets"]
    assert [t["status"] for t in targets].count("proved") == 6
    unmodelled = [t for t in targets if t["status"] == "not-modelled"]
    from pfc.backends import registry
    from pfc.prove.run import MODELLED
    others = [t for t in registry() if t not in MODELLED and t != "ir"]
    assert [t["target"] for t in unmodelled] == others and {"nfmod", "u32"} <= set(others)
    assert all(t["not_proved"].startswith("no model for target") for t in unmodelled)


def test_a_redirect_with_a_free_destination_is_announced_first(tmp_path, capsys) -> None:
    """Issue 29 M2: `redirect udp dport 53 to ...` (no `dst` match) ran 31 min with no
    output. Its proof is still not practical (docs/prove.md), so the first line says
    so, before any target; a `dst` list is as free as its widest prefix."""
    from pfc.prove.run import slow_redirects
    path = tmp_path / "rd.pf"
    path.write_text("define d = { 10.0.0.1, 10.1.0.0/16 }\n"
                    "redirect udp dst 10.99.0.1 dport 53 to 10.99.0.53\n"
                    "redirect udp dst 10.99.0.0/24 dport 53 to 10.99.0.53\n"
                    "redirect udp dst $d dport 53 to 10.99.0.53\n"
                    "redirect udp dport 53 to 10.99.0.53\n")
    assert main(["prove", str(path), "--targets", "cbpf"]) == 2  # cbpf: no redirect
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(": note: ")[1][:50] for line in lines[:2]] == [
        "the redirect at line 4 leaves 16 bits of the desti",
        "the redirect at line 5 leaves 32 bits of the desti"]
    assert ": cbpf: error:" in lines[2]
    assert main(["prove", str(path), "--targets", "cbpf", "--format", "json"]) == 2
    [entry] = json.loads(capsys.readouterr().out)["files"]
    assert entry["notes"] == slow_redirects(compile_path(str(path)).require())
    assert len(entry["notes"]) == 2


def test_a_set_error_is_one_json_object(tmp_path, capsys, monkeypatch) -> None:
    """m6: `pfc set --format json` on an error prints one versioned JSON object (after
    the merge with main it printed two, the second through an unimported module)."""
    monkeypatch.setenv("PFC_STATE_DIR", str(tmp_path))
    code = main(["set", "add", "nosuch", "10.0.0.1", "--dev", "lo", "--target", "nft",
                 "--format", "json"])
    assert code == 2
    report = json.loads(capsys.readouterr().out)  # one object, nothing after it
    assert list(report) == ["version", "error"] and report["version"] == 1


def test_a_queue_policy_is_neither_compared_nor_proved(tmp_path, capsys) -> None:
    """`queue` (merged after the prover) hands the verdict to a user-space decider: not
    a per-frame formula. diff once called `queue` the same as `pass` and crashed
    (exit 70) against `drop`; prove crashed loading it (exit 70)."""
    queue, drop = tmp_path / "q.pf", tmp_path / "d.pf"
    queue.write_text("queue udp dport 53\n")
    drop.write_text("drop udp dport 53\n")
    assert main(["diff", str(queue), str(drop), "--format", "json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"] == (
        "pfc diff compares stateless policies; these use queue")
    assert main(["prove", str(queue), "--targets", "nft:input"]) == 1
    assert capsys.readouterr().out == (
        f"{queue}: not proved: pfc prove covers stateless policies (this one uses queue)\n")
