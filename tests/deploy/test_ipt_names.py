"""iptables loads never take over what pfc did not create, and only the artifact's
own rules and sets reach the kernel (fuzz-and-faults.md defects 1 and 8).
"""

from __future__ import annotations

import subprocess

import pytest

from tests.deploy.test_load import (
    ROOT_REASON,
    entry,
    load,
    pfc,
    policy_file,
    snapshot,
)

pytestmark = [pytest.mark.kernel,
              pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")]

POLICY = "define bad = { 10.9.0.0/16, 10.8.0.1 }\ndrop src $bad\ndrop udp dport 1001\n"


def sh(command: str) -> str:
    return subprocess.run(command, shell=True, capture_output=True, text=True,
                          check=True).stdout


def members(name: str) -> list[str]:
    text = sh(f"ipset list {name}")
    return sorted(text.split("Members:\n", 1)[1].split())


def test_sets_and_chains_of_the_same_name_are_never_taken_over(lab, tmp_path):
    sh("ipset create pfc-bad4 hash:net family inet && ipset add pfc-bad4 192.0.2.0/24 && "
       "ipset create pfc-bad4.g1 hash:net family inet && iptables -t raw -N PFC.2")
    before = snapshot()
    path = policy_file(tmp_path, POLICY)
    for _ in range(2):  # a first load (gen 1 and 2 are taken: 3) and a replace (4)
        assert load(lab, "iptables", [], path)[0] == 0
    attach = entry(lab, "iptables")["attach"]
    assert attach["gen_chain"] == "PFC.4" and attach["sets"] == ["pfc-bad4.g4"]
    assert members("pfc-bad4.g4") == ["10.8.0.1", "10.9.0.0/16"]
    assert members("pfc-bad4") == ["192.0.2.0/24"] and members("pfc-bad4.g1") == []
    code, out, _ = pfc("unload", "--target", "iptables", "--dev", "dut", "--netns", lab.name)
    assert code == 0 and "destroyed ipset pfc-bad4.g4" in out
    assert snapshot() == before and members("pfc-bad4") == ["192.0.2.0/24"]


INJECTED = ["inj6\n*filter\n-A INPUT -p udp --dport 9 -j DROP\nCOMMIT\n#.pf",
            "inj3\ncreate fzzevil hash:ip\nadd fzzevil 10.9.9.9\n#.pf",
            "inj5\n*raw\n-A PFC -j DROP\nCOMMIT\n#.pf"]


@pytest.mark.parametrize("name", INJECTED, ids=["filter-rule", "ipset", "own-chain"])
def test_text_in_the_policy_file_name_never_reaches_the_kernel(lab, tmp_path, name):
    before = snapshot()
    path = policy_file(tmp_path, POLICY, name)
    code, _, err = load(lab, "iptables", [], path)
    saved = sh("iptables-save; ip6tables-save")
    assert "--dport 9" not in saved and "fzzevil" not in sh("ipset list -n")
    if code:  # an extra `-A PFC` line in the file: the artifact is refused as a whole
        assert code == 2 and "do not match its line table" in err and \
            "nothing was changed" in err
        assert snapshot() == before
        return
    assert [ln for ln in saved.splitlines() if ln.startswith("-A PFC ")] == \
        ["-A PFC -g PFC.1"] * 2  # the switch chain of each family: one goto, no DROP
    assert pfc("unload", "--target", "iptables", "--dev", "dut", "--netns", lab.name)[0] == 0
    assert snapshot() == before
