"""``pfc set`` on iptables: both families or neither (fuzzing report F2), ``/0`` as the
compiler handles it, and a copy that is not the record's refused; ``pfc unload``
leaves no ``set-pending`` marker.

F2: a change of an IPv4 and an IPv6 entry whose IPv6 half ipset refused left the IPv4
set changed and said "the set is as it was"; ``::/0`` and ``0.0.0.0/0`` were always
refused (``hash:net`` takes no ``/0``), though a set file holding them loads.
"""

from __future__ import annotations

import json
import random
import subprocess

import pytest

from pfc.deploy import ipt_kernel, state
from pfc.deploy import snapshot as copies
from tests.deploy.test_load import ROOT_REASON, pfc, policy_file

pytestmark = [pytest.mark.kernel,
              pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")]


def mixed(tmp_path):
    """The fuzzing report's policy: 100 IPv4 and 100 IPv6 entries in one set."""
    r = random.Random(4)
    lines = [f"10.{r.randrange(256)}.{r.randrange(256)}.{r.randrange(256)}" for _ in
             range(100)] + [f"2001:db8:{r.randrange(65536):x}::{r.randrange(65536):x}"
                            for _ in range(100)]
    (tmp_path / "mix.txt").write_text("\n".join(lines) + "\n")
    return policy_file(tmp_path, 'set bl = file "mix.txt"\ndrop src $bl\n', "mix.pf")


def ipsets(lab) -> dict[str, int]:
    """pfc's ipsets in the lab and their number of entries."""
    out = subprocess.run(["ip", "netns", "exec", lab.name, "ipset", "list", "-t"],
                         capture_output=True, text=True, check=True).stdout
    names = [ln.split(": ")[1] for ln in out.splitlines() if ln.startswith("Name: ")]
    counts = [int(ln.split(": ")[1]) for ln in out.splitlines()
              if ln.startswith("Number of entries: ")]
    return dict(zip(names, counts, strict=True))


def member(lab, name: str, address: str) -> bool:
    return subprocess.run(["ip", "netns", "exec", lab.name, "ipset", "test", name, address],
                          capture_output=True).returncode == 0


def loaded(lab, tmp_path) -> dict[str, int]:
    code, _, err = pfc("load", mixed(tmp_path), "--target", "iptables", "--dev", lab.dut,
                       "--netns", lab.name)
    assert code == 0, err
    sets = ipsets(lab)
    assert sorted(sets.values()) == [100, 100]
    return sets


def failing(monkeypatch, when) -> None:
    """ipset fails for the calls ``when(argv, text)`` picks (as a refusal would)."""
    real = ipt_kernel.call

    def call(argv, text=None):
        if when(argv, text):
            raise ipt_kernel.Failed(f"`{' '.join(argv[:3])}` failed: injected refusal")
        return real(argv, text)

    monkeypatch.setattr(ipt_kernel, "call", call)


def test_a_refused_ipv6_half_changes_neither_family(lab, tmp_path, monkeypatch):
    sets = loaded(lab, tmp_path)
    failing(monkeypatch, lambda argv, text: argv[:2] == ["ipset", "restore"]
            and "family inet6" in (text or ""))
    code, _, err = pfc("set", "add", "bl", "10.0.0.5", "2001:db8:ffff::5", "--dev",
                       lab.dut, "--netns", lab.name)
    assert code == 2 and "ipset refused the new IPv6 set" in err, err
    assert "nothing was swapped: the sets are as they were" in err
    assert ipsets(lab) == sets  # no temporary set left, both as loaded
    assert not any(member(lab, s, "10.0.0.5") for s in sets)
    monkeypatch.undo()
    assert pfc("status", "--netns", lab.name)[0] == 0


def test_a_refused_second_swap_swaps_the_first_back(lab, tmp_path, monkeypatch):
    sets = loaded(lab, tmp_path)
    six = next(s for s in sets if s.startswith("pfc-bl6"))
    failing(monkeypatch, lambda argv, text: argv[:2] == ["ipset", "swap"] and six in argv)
    code, _, err = pfc("set", "add", "bl", "10.0.0.5", "2001:db8:ffff::5", "--dev",
                       lab.dut, "--netns", lab.name)
    assert code == 2 and "ipset refused to swap the IPv6 set" in err, err
    assert "swapped the IPv4 set back" in err
    assert "checked: the sets hold what they held before" in err
    assert ipsets(lab) == sets and not any(member(lab, s, "10.0.0.5") for s in sets)
    monkeypatch.undo()
    assert pfc("status", "--netns", lab.name)[0] == 0


def test_both_families_change_together_and_a_slash_0_reloads(lab, tmp_path):
    sets = loaded(lab, tmp_path)
    code, out, err = pfc("set", "add", "bl", "10.0.0.5", "2001:db8:ffff::5", "--dev",
                         lab.dut, "--netns", lab.name)
    assert code == 0 and "ipset swap (both families or neither)" in out, err
    assert sorted(ipsets(lab).values()) == [101, 101]
    code, out, err = pfc("set", "add", "bl", "::/0", "--dev", lab.dut, "--netns", lab.name)
    assert code == 0 and "policy replaced atomically" in out, err  # the report's repro
    six = subprocess.run(["ip", "netns", "exec", lab.name, "ip6tables-save", "-t", "raw"],
                         capture_output=True, text=True, check=True).stdout
    assert "--match-set" not in six and " -j DROP" in six  # every IPv6 source: dropped
    assert member(lab, next(s for s in ipsets(lab) if "bl4" in s), "10.0.0.5")
    code, out, err = pfc("set", "add", "bl", "0.0.0.0/0", "--dev", lab.dut, "--netns",
                         lab.name)
    assert code == 0 and "policy replaced atomically" in out, err
    assert ipsets(lab) == {}  # both families match every source: no set at all
    code, out, err = pfc("set", "replace", "bl", "10.0.0.5", "10.0.0.9", "--dev", lab.dut,
                         "--netns", lab.name)
    assert code == 0, err
    assert sorted(ipsets(lab).values()) == [2] and sets


def test_a_copy_that_is_not_the_records_is_refused(lab, tmp_path):
    loaded(lab, tmp_path)
    p = copies.loaded_path(lab.name, lab.dut, "iptables")
    data = json.loads(p.read_text())
    key = next(k for k in data["sources"] if k.endswith("mix.txt"))
    data["sources"][key] = "10.9.9.9\n10.9.9.10\n"  # an older policy's copy, say
    p.write_text(json.dumps(data))
    code, _, err = pfc("set", "add", "bl", "10.0.0.5", "--dev", lab.dut, "--netns", lab.name)
    assert code == 2 and "is not the copy pfc's record names" in err, err
    assert "pfc will not change a set from it" in err and "pfc apply" in err
    config = tmp_path / "pfc.conf"
    config.write_text(f'[[policy]]\nfile = "mix.pf"\ndev = "{lab.dut}"\ntarget = '
                      f'"iptables"\nnetns = "{lab.name}"\n')
    code, out, err = pfc("apply", "--config", config)
    assert code == 0 and "replaced" in out and "is not the copy pfc's record names" in \
        out + err, out + err
    code, out, err = pfc("set", "add", "bl", "10.0.0.5", "--dev", lab.dut, "--netns",
                         lab.name)
    assert code == 0, err


def test_unload_removes_the_set_pending_marker(lab, tmp_path, monkeypatch):
    """The report's stale ``iptables.set-pending`` after an unload that said
    everything was removed."""
    loaded(lab, tmp_path)
    marker = state.path(lab.name, lab.dut, "iptables", ".set-pending")
    marker.write_text('{"set": "bl", "op": "add", "before": "x", "after": "y"}')
    code, out, err = pfc("unload", "--target", "iptables", "--dev", lab.dut, "--netns",
                         lab.name)
    assert code == 0, err
    assert not marker.exists() and not marker.parent.exists()
    assert not list(state.state_dir().rglob("*.set-pending"))
