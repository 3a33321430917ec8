"""``pfc load --dry-run``: the kernel checks what a load would send, the rules and
verdicts that would change are printed, and nothing in the namespace or in pfc's state
changes. Kernel tests in throw-away namespaces."""

from __future__ import annotations

import json

import pytest

from pfc import api
from pfc.kernel import bpf
from pfc.oracle.interp import evaluate
from tests.deploy.test_load import (
    ROOT_REASON,
    WAY_IDS,
    WAYS,
    entry,
    pfc,
    policy_file,
    snapshot,
)

pytestmark = [pytest.mark.kernel,
              pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")]

OLD = 'set bad = file "bad.txt"\ncount tcp\ndrop udp dport 1001\ndrop src $bad\n'
NEW = 'set bad = file "bad.txt"\ncount tcp\ndrop udp dport 1002\ndrop src $bad\n'


def dry(lab, target: str, extra: list[str], path) -> tuple[int, dict | str]:
    code, out, err = pfc("load", path, "--target", target, "--dev", lab.dut, "--netns",
                         lab.name, *extra, "--dry-run", "--format", "json")
    return code, json.loads(out) if code == 0 else err


def state_files(tmp_path) -> dict[str, str]:
    root = tmp_path / "state"
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != ".lock"}


@pytest.mark.parametrize(("target", "extra"), WAYS, ids=WAY_IDS)
def test_dry_run_changes_nothing_and_shows_the_change(lab, tmp_path, target, extra):
    (tmp_path / "bad.txt").write_text("10.9.0.0/16\n")
    old, new = policy_file(tmp_path, OLD, "old.pf"), policy_file(tmp_path, NEW, "new.pf")
    kernel, files = snapshot(), state_files(tmp_path)
    code, first = dry(lab, target, extra, old)
    assert code == 0, first
    assert first["compared"] == "nothing loaded" and first["changes"]
    assert first["checked"] and (snapshot(), state_files(tmp_path)) == (kernel, files)

    assert pfc("load", old, "--target", target, "--dev", lab.dut, "--netns", lab.name,
               *extra)[0] == 0
    before, kernel, files = entry(lab, target), snapshot(), state_files(tmp_path)
    (tmp_path / "bad.txt").write_text("10.7.0.0/16\n")  # the loaded copy keeps 10.9/16
    code, seen = dry(lab, target, extra, new)
    assert code == 0, seen
    assert (snapshot(), state_files(tmp_path)) == (kernel, files)
    assert entry(lab, target)["attach"] == before["attach"]
    assert seen["compared"] == "compared" and seen["loaded"]["health"] == "ok"
    assert [r["text"] for r in seen["removed"]] == ["drop udp dport 1001", "drop src $bad"]
    assert [r["text"] for r in seen["added"]] == ["drop udp dport 1002", "drop src $bad"]
    assert seen["set_files"] == {str(tmp_path / "bad.txt"): {"removed": 1, "added": 1}}
    assert {(r["where"], r["change"]) for r in seen["regions"]} == {
        ("src 10.9.0.0/16 (no longer in $bad)", "drop → pass"),
        ("src 10.7.0.0/16 (new in $bad)", "pass → drop"),
        ("udp dport 1001", "drop → pass"), ("udp dport 1002", "pass → drop")}

    code, same = dry(lab, target, extra, old)  # the file on disk now differs: its set
    assert code == 0 and same["regions"], same


def test_dry_run_regions_are_the_interpreters(lab, tmp_path):
    """Every witness the dry run reports is judged differently by the interpreter under
    the loaded policy and the new one (the regions come from `pfc diff`)."""
    (tmp_path / "bad.txt").write_text("10.9.0.0/16\n")
    old, new = policy_file(tmp_path, OLD, "old.pf"), policy_file(tmp_path, NEW, "new.pf")
    assert pfc("load", old, "--target", "nft", "--dev", lab.dut, "--netns", lab.name)[0] == 0
    result = api.dry_run(new, "nft", lab.dut, netns=lab.name)
    assert result.diff is not None and result.diff.regions
    a, b = api.front(old).require(), api.front(new).require()
    for region in result.diff.regions:
        assert evaluate(a, region.witness).verdict != evaluate(b, region.witness).verdict
    code, out, _ = pfc("load", new, "--target", "nft", "--dev", lab.dut, "--netns",
                       lab.name, "--dry-run")
    assert code == 0 and "nothing was changed" in out and "- line 3: drop udp dport " \
        "1001" in out and "udp dport 1002: pass → drop" in out


def _corrupt(monkeypatch, how) -> None:
    real = api.compile

    def compile_(*args, **kwargs):
        artifact = real(*args, **kwargs)
        how(artifact)
        return artifact
    monkeypatch.setattr(api, "compile", compile_)


def _nft_bad(artifact) -> None:
    doc, meta = json.loads(artifact.meta["json"]), artifact.meta
    doc["nftables"].append({"add": {"rule": {
        "family": meta["family"], "table": meta["table"], "chain": meta["chain"],
        "expr": [{"jump": {"target": "pfc_no_such_chain"}}]}}})
    artifact.meta["json"] = json.dumps(doc)


def _ipt_bad(artifact) -> None:
    name = artifact.meta["files"]["ipv4"]
    text = artifact.files[name].decode()
    first = next(ln for ln in text.splitlines()
                 if ln.startswith(f"-A {artifact.meta['chain']} ") and " -j " in ln)
    artifact.files[name] = text.replace(
        first, first.replace(" -j ", " -m set --match-set pfc-no-such-set src -j "), 1
    ).encode()


def _verifier_refuses(elf, name="pfc"):
    raise bpf.BpfError(13, f"cannot load BPF object {name}", "", "invalid access")


@pytest.mark.parametrize("target", ["nft", "iptables", "xdp", "tc"])
def test_dry_run_reports_what_the_kernel_would_refuse(lab, tmp_path, target, monkeypatch):
    (tmp_path / "bad.txt").write_text("10.9.0.0/16\n")
    old, new = policy_file(tmp_path, OLD, "old.pf"), policy_file(tmp_path, NEW, "new.pf")
    extra = ["--mode", "generic"] if target == "xdp" else []
    assert pfc("load", old, "--target", target, "--dev", lab.dut, "--netns", lab.name,
               *extra)[0] == 0
    kernel, files = snapshot(), state_files(tmp_path)
    if target == "nft":
        _corrupt(monkeypatch, _nft_bad)
    elif target == "iptables":
        _corrupt(monkeypatch, _ipt_bad)
    else:
        monkeypatch.setattr(bpf, "Object", _verifier_refuses)
    code, err = dry(lab, target, extra, new)
    assert code == 2, err
    assert {"nft": "nftables would refuse the ruleset",
            "iptables": "the kernel would refuse the iptables rules",
            "xdp": "the kernel refused program", "tc": "the kernel refused program"}[
        target] in err
    assert (snapshot(), state_files(tmp_path)) == (kernel, files)
