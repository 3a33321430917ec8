"""`pfc load`, `status`, `unload` and `apply` of a whole firewall (v2) through the
command line, in a namespace whose devices carry the file's names: every part or none
(an eBPF part that fails after the nft part committed puts the nft part back), the
usage errors of the new forms, the exit codes."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from pfc.cli.main import main
from pfc.deploy.base import LoadError, in_netns
from pfc.deploy.firewall import ebpf
from pfc.frontend.pipeline import compile_path
from pfc.kernel import hostlab
from pfc.kernel.netns import missing_privileges
from pfc.oracle.path.host import host_of
from tests.paths import ROOT

ROUTER = str(ROOT / "examples" / "home-router.pf")
HOST = str(ROOT / "examples" / "host-firewall.pf")
EDGE = str(ROOT / "examples" / "ddos-edge.pf")


def kernel(test):
    return pytest.mark.kernel(pytest.mark.skipif(
        missing_privileges() is not None, reason=str(missing_privileges()))(test))



@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("PFC_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("PFC_LIB_DIR", str(tmp_path / "lib"))


@pytest.fixture
def ns():
    """A namespace with eth0 and eth1 (the home router's devices)."""
    host = host_of(compile_path(ROUTER).ruleset)
    with hostlab.host_lab(host, observe=False) as lab:
        yield lab.host_ns


def _tables(ns: str) -> str:
    with in_netns(ns):
        nft = subprocess.run(["nft", "list", "ruleset"], capture_output=True, text=True)
        ipt = subprocess.run(["iptables-save"], capture_output=True, text=True)
    text = nft.stdout + "\n".join(ln for ln in ipt.stdout.splitlines()
                                  if not ln.startswith("#"))
    return re.sub(r"\[\d+:\d+\]|packets \d+ bytes \d+", "", text)  # counters


def _status(capsys, ns: str) -> list[dict]:
    assert main(["status", "--netns", ns, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)["loaded"]


@pytest.mark.parametrize("args, message", [
    ([ROUTER, "--target", "nft", "--dev", "eth0"], "--dev is for one rule list"),
    ([ROUTER, "--target", "nft", "--hook", "input"], "--hook is for one rule list"),
    ([ROUTER, "--target", "nft,socket"], "not `socket`"),
    ([ROUTER, "--target", "nft", "--mode", "native"], "--mode applies to --target xdp"),
    ([str(ROOT / "examples" / "edge-drop.pf"), "--target", "nft"], "--dev DEV names"),
    ([str(ROOT / "examples" / "edge-drop.pf"), "--target", "xdp,nft", "--dev", "eth0"],
     "a list of targets is for whole firewalls"),
])
def test_usage_errors_exit_2(capsys, args, message):
    assert main(["load", *args]) == 2
    assert message in capsys.readouterr().err


def test_a_block_no_target_carries_exit_1(capsys):
    assert main(["load", EDGE, "--target", "iptables", "--netns", "nosuch"]) == 1
    assert "no target of iptables carries the `ingress` block" in capsys.readouterr().err


@kernel
@pytest.mark.parametrize("target", ["nft", "iptables"])
def test_load_status_unload(capsys, ns, target):
    clean = _tables(ns)
    assert main(["load", ROUTER, "--target", target, "--netns", ns]) == 0
    assert f"as the firewall of namespace {ns} ({target})" in capsys.readouterr().out
    [entry] = _status(capsys, ns)
    assert (entry["target"], entry["health"]) == ("firewall", "ok")
    assert {r["block"] for r in entry["rules"]} == {
        "nat prerouting", "input", "forward", "nat postrouting"}
    assert "masquerade" in _tables(ns).lower()
    assert main(["unload", "--target", target, "--netns", ns]) == 0
    assert "removed" in capsys.readouterr().out or target == "nft"
    assert _tables(ns) == clean and _status(capsys, ns) == []


@kernel
def test_a_part_that_fails_leaves_the_previous_firewall(capsys, ns, monkeypatch):
    """ddos-edge as xdp,nft over the host firewall on nft: the nft part commits, then
    the XDP part fails: the nft part is put back, the previous firewall is in force."""
    assert main(["load", HOST, "--target", "nft", "--netns", ns]) == 0
    before = _tables(ns)
    capsys.readouterr()

    real = ebpf.attach

    def refused(part, txn):
        raise LoadError("the XDP attach failed (test)", hint="none")
    monkeypatch.setattr(ebpf, "attach", refused)
    assert main(["load", EDGE, "--target", "xdp,nft", "--netns", ns]) == 2
    assert "the XDP attach failed (test)" in capsys.readouterr().err
    assert _tables(ns) == before
    [entry] = _status(capsys, ns)
    assert entry["policy"].endswith("host-firewall.pf") and entry["health"] == "ok"
    with in_netns(ns):
        link = subprocess.run(["ip", "link", "show", "eth0"], capture_output=True,
                              text=True).stdout
    assert "xdp" not in link
    monkeypatch.setattr(ebpf, "attach", real)
    assert main(["load", EDGE, "--target", "xdp,nft", "--netns", ns]) == 0
    assert "(nft, xdp:eth0)" in capsys.readouterr().out
    assert main(["unload", "--target", "xdp", "--netns", ns]) == 0
    assert "detached XDP program" in capsys.readouterr().out


@kernel
def test_apply_a_config_naming_a_whole_firewall(capsys, ns, tmp_path: Path):
    conf = tmp_path / "pfc.conf"
    conf.write_text(f'[[policy]]\nfile = "{ROUTER}"\ntarget = "iptables"\nnetns = "{ns}"\n')
    assert main(["apply", "--config", str(conf)]) == 0
    assert "firewall (iptables) (namespace" in capsys.readouterr().out
    assert main(["apply", "--config", str(conf)]) == 0
    assert ": unchanged" in capsys.readouterr().out
    conf.write_text(conf.read_text().replace("iptables", "nft"))
    assert main(["apply", "--config", str(conf), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would replace" in out and "nft -c" in out and "rules: none added" in out
    assert _status(capsys, ns)[0]["attach"]["targets"] == ["iptables"]
    assert main(["apply", "--config", str(conf)]) == 0
    assert ": replaced" in capsys.readouterr().out
    [entry] = _status(capsys, ns)
    assert entry["attach"]["targets"] == ["nft"] and entry["health"] == "ok"
    conf.write_text(conf.read_text().replace('target = "nft"', 'target = "nft"\nhook = "x"'))
    assert main(["apply", "--config", str(conf)]) == 2
    assert "`hook` is for one rule list" in capsys.readouterr().err


@kernel
def test_apply_falls_back_to_the_last_good_firewall(capsys, ns, tmp_path: Path):
    """A whole firewall that no longer compiles, with nothing of pfc's in force (after
    an unload, as at boot): its last good copy is loaded, every part."""
    fw = tmp_path / "router.pf"
    fw.write_text(Path(ROUTER).read_text())
    conf = tmp_path / "pfc.conf"
    conf.write_text(f'[[policy]]\nfile = "router.pf"\ntarget = "nft"\nnetns = "{ns}"\n')
    assert main(["apply", "--config", str(conf)]) == 0
    assert main(["unload", "--target", "nft", "--netns", ns]) == 0
    fw.write_text(fw.read_text().replace("masquerade oif eth0", "masquerade oif"))
    capsys.readouterr()
    assert main(["apply", "--config", str(conf)]) == 1
    out = capsys.readouterr().out
    assert "firewall (nft) (namespace" in out and "fell back to the last good copy" in out
    [entry] = _status(capsys, ns)
    assert entry["health"] == "ok" and "masquerade" in _tables(ns).lower()


@kernel
def test_dry_run_checks_with_the_kernel_and_changes_nothing(capsys, ns):
    """Nothing loaded, then over the router: the kernel's checks of every part, the
    rules removed and added block by block, and the namespace as it was."""
    clean = _tables(ns)
    assert main(["load", ROUTER, "--target", "nft", "--netns", ns, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "nft: the kernel accepted the transaction (nft -c" in out
    assert "the whole policy would be new" in out and _tables(ns) == clean
    assert main(["load", ROUTER, "--target", "nft", "--netns", ns]) == 0
    loaded = _tables(ns)
    capsys.readouterr()
    assert main(["load", EDGE, "--target", "xdp,nft", "--netns", ns, "--dry-run",
                 "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["target"] == "firewall" and doc["compared"] == "compared"
    assert doc["checked"][0].startswith("xdp:eth0: the verifier accepted")
    assert {"line": 29, "text": "nat postrouting: masquerade oif eth0"} in doc["removed"]
    assert {"line": 17, "text": "ingress: drop frag"} in doc["added"]
    assert _tables(ns) == loaded
    with in_netns(ns):
        assert "xdp" not in subprocess.run(["ip", "link", "show", "eth0"],
                                           capture_output=True, text=True).stdout
    assert main(["load", ROUTER, "--target", "iptables", "--netns", ns, "--dry-run"]) == 0
    assert "iptables-restore --test accepted generation 1" in capsys.readouterr().out
    with in_netns(ns):
        subprocess.run(["nft", "add", "table", "inet", "mine"], check=True)
    assert main(["load", ROUTER, "--target", "nft", "--netns", ns, "--table", "mine",
                 "--dry-run"]) == 2
    assert "exists and pfc did not load it" in capsys.readouterr().err
