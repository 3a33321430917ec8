"""iptables for large policies (issue 16): blocks of ``pfc.passes.classify`` dispatched
by a tree of user chains over the addresses (``pfc.backends.iptables.ipt_tree``), in
the kernel against the reference interpreter (verdicts and every rule's counter), both
defaults, both iptables flavours, corner and malformed frames; ``pfc load`` replaces
and unloads tree policies leaving ``iptables-save`` as before.

Thresholds are forced small so 300-rule policies take the tree path with many blocks.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from benchmarks import classbench as cb
from pfc import backends
from pfc.backends.iptables import ipt_tree
from pfc.backends.iptables import run as iptrun
from pfc.build import build_artifact
from pfc.frontend.pipeline import compile_text
from pfc.kernel import netns
from pfc.oracle import gen
from pfc.passes import classify as cl
from pfc.verifier.equiv import compare
from tests.backends import test_classify


def mixed(seed: int, n: int, default: str) -> str:
    """test_classify's mixed policy without redirect (iptables cannot express it)."""
    return test_classify.mixed(seed, n, default).replace(
        "redirect udp dst 10.1.2.3 dport 53 to 10.1.9.9:5353", "pass ttl 7")


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setattr(cl, "MIN_RULES", 4)
    monkeypatch.setattr(cl, "MIN_RUN", 4)
    monkeypatch.setattr(ipt_tree, "LEAF", 4)


def compiled(text: str, **options):
    art, diags = build_artifact(compile_text(text, "t.pf"), "iptables", **options)
    assert art is not None, diags
    return art


def test_small_policies_keep_the_ordered_chain():
    art = compiled(mixed(1, cl.MIN_RULES - 1, "pass"))
    assert "-t" not in "".join(art.meta["chains"]["IPv4"]) and "PFC-t" not in art.text


def test_tree_chains_are_short(small):
    rules = cb.generate("acl", 300, seed=2)
    art = compiled(rules.text())
    chains = art.meta["chains"]["IPv4"]
    assert len(chains) > 10 and all(len(c) <= 28 for c in chains)
    assert len(art.meta["lines"]["IPv4"]) < 5  # the main chain only jumps


def test_tree_lines_name_their_rule(small):
    """Each run of a rule's lines in the tree's chains follows `# rule N, line L: TEXT`
    (the ordered chain's comment), so a reader of the restore file can find the rule."""
    rules = cb.generate("acl", 300, seed=2)
    art = compiled(rules.text())
    text = art.files[art.meta["files"]["ipv4"]].decode()
    owners = art.meta["chains"]["IPv4"]
    named = 0
    for chain, lines in owners.items():
        body = [ln for ln in text.splitlines() if ln.startswith(f"-A {chain} ")
                or ln.startswith("# rule ")]
        previous = None
        at = 0
        for i, line in enumerate(body):
            if not line.startswith("-A"):
                continue
            owner = lines[at]
            at += 1
            if isinstance(owner, int) and owner != previous:
                assert body[i - 1].startswith(f"# rule {owner}, line "), (chain, line)
                named += 1
            previous = owner
    assert named > 100


@pytest.fixture(scope="module")
def lab():
    reason = netns.missing_privileges()
    if reason:
        pytest.skip(reason)
    with iptrun.session() as s:
        yield s


def check(text: str, frames: list[bytes], **options):
    art = compiled(text, **options)
    assert art.meta["chains"]["IPv4"] or art.meta["chains"]["IPv6"]
    report = compare(art, backends.get("iptables"), frames)
    assert report.ok, report.summary()
    return art


@pytest.mark.kernel
@pytest.mark.parametrize("flavour,default,ipt", [("acl", "drop", "nft"),
                                                 ("fw", "pass", "legacy"),
                                                 ("ipc", "drop", "legacy")])
def test_classbench_tree_agrees_with_the_interpreter(lab, small, flavour, default, ipt):
    rules = cb.generate(flavour, 300, seed=5, default=default, negated=0.08, count=0.08)
    policy = compile_text(rules.text(), "c.pf").require()
    check(rules.text(), cb.trace(rules, 500, seed=5, malformed=0.4, policy=policy),
          extra={"flavour": ipt})


@pytest.mark.kernel
@pytest.mark.parametrize("default,ipt,notrack", [("drop", "nft", False),
                                                 ("pass", "legacy", True)])
def test_mixed_families_tree_agrees_with_the_interpreter(lab, small, default, ipt, notrack):
    text = mixed(11, 80, default)
    art = check(text, gen.sample(compile_text(text, "m.pf").require(), 600, seed=11),
                extra={"flavour": ipt}, notrack=notrack)
    assert art.meta["chains"]["IPv4"] and art.meta["chains"]["IPv6"]


def _saved(lab_name: str) -> str:
    out = []
    for tool in ("iptables-save", "ip6tables-save"):
        text = subprocess.run(["ip", "netns", "exec", lab_name, tool], capture_output=True,
                              text=True, check=True).stdout
        out += [ln for ln in text.splitlines() if not ln.startswith("#")]
    return "\n".join(out)


@pytest.mark.kernel
def test_pfc_load_replaces_and_unloads_tree_policies(tmp_path, monkeypatch, small):
    from pfc.cli.main import main

    reason = netns.missing_privileges()
    if reason:
        pytest.skip(reason)
    monkeypatch.setenv("PFC_STATE_DIR", str(tmp_path / "state"))
    texts = [cb.generate("acl", 120, seed=1).text(), cb.generate("fw", 120, seed=1).text(),
             "drop udp dport 53\n", cb.generate("ipc", 120, seed=1).text()]
    with netns.lab() as lab:
        subprocess.run(["ip", "netns", "exec", lab.name, "iptables", "-t", "raw", "-A",
                        "PREROUTING", "-p", "udp", "-j", "ACCEPT"], check=True)
        before = _saved(lab.name)
        for n, text in enumerate(texts):
            path = tmp_path / f"p{n}.pf"
            path.write_text(text)
            assert main(["load", str(path), "--target", "iptables", "--dev", lab.dut,
                         "--netns", lab.name]) == 0
            chains = re.findall(r"^:(PFC\S*)", _saved(lab.name), re.MULTILINE)
            gens = {c.split("-")[0] for c in chains if c != "PFC"}
            assert len(gens) == 1  # the previous generation's tree chains are gone
            assert any("-t" in c for c in chains) == (n != 2)
            assert main(["status", "--dev", lab.dut,
                         "--netns", lab.name]) == 0
        assert main(["unload", "--target", "iptables", "--dev", lab.dut,
                     "--netns", lab.name]) == 0
        assert _saved(lab.name) == before
