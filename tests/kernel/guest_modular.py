"""Run INSIDE a kernel-lab guest (Debian's 6.1): ``pfc load`` / ``status`` / ``unload``
of nfmod and u32 with traffic, a replace, and a load that fails after it began.

Not collected on the host (no ``test_`` prefix): tests/kernel/test_modular_load.py
boots the guest once, prebuilds the modules these loads insert (building under
emulation takes minutes; the guest finds them in pfc's module cache) and runs this
file there with pytest. ``PFC_GUEST_POLICIES`` is the folder of the policies
(:data:`POLICIES`), at the same path on both sides (a module's C names its policy file).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pfc.backends.nfmod import kmod
from pfc.build import build_artifact
from pfc.deploy.modular import nfmod as load_nfmod
from pfc.deploy.modular import u32 as load_u32
from pfc.frontend.pipeline import compile_path
from pfc.kernel import netns
from pfc.verifier.equiv import decided_counters, expected_counters
from tests.deploy.test_load import counters_of, deliver, entry, frames_for, interpreter, pfc
from tests.deploy.test_load import probe as udp_probe

POLICIES = {
    # counts and drops both targets express (u32: no transport fields)
    "first": "default pass\ndrop udp dst 10.0.0.0/8\ncount ip src 10.1.0.0/16\n"
             "drop dst 192.168.0.0/16\npass ip6\n",
    # the probe (udp 10.1.0.2 -> 10.1.0.1) is counted by rule 0 and passed
    "second": "default pass\ncount ip dst 10.1.0.1\ndrop udp src 172.16.0.0/12\n",
    "third": "default pass\ndrop ip dst 10.1.0.1\n",
}
TARGETS = ("nfmod", "u32")
FRAMES = 150

pytestmark = pytest.mark.skipif(
    kmod.modules_unavailable() is not None or "PFC_GUEST_POLICIES" not in os.environ,
    reason="runs inside a kernel-lab guest (tests/kernel/test_modular_load.py)")


def policy(name: str) -> Path:
    return Path(os.environ["PFC_GUEST_POLICIES"]) / f"{name}.pf"


@pytest.fixture
def lab(tmp_path, monkeypatch):
    monkeypatch.setenv("PFC_STATE_DIR", str(tmp_path / "state"))
    with netns.lab() as lab:
        yield lab


def load(lab, target: str, name: str) -> tuple[int, str, str]:
    return pfc("load", policy(name), "--target", target, "--dev", lab.dut,
               "--netns", lab.name)


def held(lab, target: str) -> str:
    """What the kernel holds of the target: modules, or the device's filters."""
    if target == "nfmod":
        return " ".join(sorted(m.name for m in Path("/sys/module").glob("pfc_nf*")))
    return subprocess.run(["ip", "netns", "exec", lab.name, "tc", "filter", "show", "dev",
                           lab.dut, "ingress"], capture_output=True, text=True).stdout


@pytest.mark.parametrize("target", TARGETS)
def test_load_count_replace_fail_unload(lab, target, monkeypatch):
    code, out, err = load(lab, target, "first")
    assert code == 0, err
    e = entry(lab, target)
    assert e["health"] == "ok", e
    assert all(v == (0, 0) for v in counters_of(e).values())

    artifact, _ = build_artifact(compile_path(policy("first")), target, None, dev=lab.dut)
    frames = deliver(lab, frames_for(lab, artifact.policy, FRAMES, seed=3))
    outcomes = interpreter(target, artifact.hook, artifact.policy, frames)
    want = expected_counters(artifact.policy, outcomes) | \
        decided_counters(artifact.policy, outcomes)
    assert counters_of(entry(lab, target)) == want
    assert sum(p for p, _ in want.values()) > FRAMES // 3, "frames must reach the hook"

    code, out, err = load(lab, target, "second")
    assert code == 0, err
    first_place = held(lab, target)
    if target == "nfmod":
        assert first_place == "pfc_nf2", "the replace inserts the other name, drops the old"
    else:
        assert "pref 24577 " in first_place and "pref 16385 " not in first_place
    deliver(lab, [udp_probe(lab, 1001, i) for i in range(3)])
    before = counters_of(entry(lab, target))
    assert before[0] == (3, 3 * 36)

    _fail_after_begin(lab, target, monkeypatch)
    assert held(lab, target) == first_place
    e = entry(lab, target)
    assert e["health"] == "ok" and counters_of(e) == before
    deliver(lab, [udp_probe(lab, 1001, 9)])
    assert counters_of(entry(lab, target))[0][0] == 4, "the old policy still filters"

    code, out, err = pfc("unload", "--target", target, "--dev", lab.dut, "--netns", lab.name)
    assert code == 0, err
    assert held(lab, target) == ""
    code, out, _ = pfc("unload", "--target", target, "--dev", lab.dut, "--netns", lab.name)
    assert code == 0 and "nothing loaded" in out


def _fail_after_begin(lab, target: str, monkeypatch) -> None:
    """A load the kernel refuses after the journal began: a module that is not one
    (insmod: Invalid module format), or a tc batch whose last line (the default) tc
    refuses: the lines before it are in the kernel until the rollback."""
    with monkeypatch.context() as m:
        if target == "nfmod":
            release = os.uname().release
            m.setattr(load_nfmod, "ko_for", lambda *a: f"vermagic={release} ".encode())
        else:
            real = load_u32.batch

            def broken(plan, base):
                filters, new = real(plan, base)
                return filters[:-1] + [filters[-1].replace("matchall", "u32 bogus")], new
            m.setattr(load_u32, "batch", broken)
        code, _, err = load(lab, target, "third")
    assert code == 2, err
    assert "the new policy is not in force" in err, err
    if target == "nfmod":
        assert "the kernel refused module pfc_nf" in err
    else:
        assert 'What is "bogus"?' in err and "what it held before" in err


def test_u32_touches_only_its_own_preferences(lab):
    def tc(*args: str) -> None:
        subprocess.run(["ip", "netns", "exec", lab.name, "tc", *args], check=True)

    tc("qdisc", "add", "dev", lab.dut, "clsact")
    theirs = ["filter", "add", "dev", lab.dut, "ingress", "protocol", "all", "matchall",
              "action", "gact", "pass"]
    tc(*theirs[:5], "pref", "40000", *theirs[5:])
    tc(*theirs[:5], "pref", "20000", *theirs[5:])  # inside pfc's range
    before = held(lab, "u32")
    code, _, err = load(lab, "u32", "first")
    assert code == 2 and "tc filters pfc did not load sit in pfc's u32 preferences" in err
    assert "(20000)" in err and held(lab, "u32") == before
    tc("filter", "del", "dev", lab.dut, "ingress", "pref", "20000")
    code, _, err = load(lab, "u32", "first")
    assert code == 0, err
    code, out, err = pfc("unload", "--target", "u32", "--dev", lab.dut, "--netns", lab.name)
    assert code == 0, err
    left = held(lab, "u32")
    assert "pref 40000 matchall" in left and "pref 16385" not in left


def _killed(lab, target: str, name: str, point: str) -> None:
    """``pfc load`` SIGKILLed at a journal point (``PFC_TEST_KILL_AT``)."""
    done = subprocess.run([sys.executable, "-m", "pfc", "load", str(policy(name)),
                           "--target", target, "--dev", lab.dut, "--netns", lab.name],
                          env=os.environ | {"PFC_TEST_KILL_AT": point},
                          capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr


@pytest.mark.parametrize("target", TARGETS)
def test_a_killed_load_is_finished_or_rolled_back(lab, target):
    """Killed once the new policy is in the kernel (the old one not yet removed): the
    next command finishes it; killed before the kernel changed: it rolls back."""
    assert load(lab, target, "first")[0] == 0
    _killed(lab, target, "second", "inserted" if target == "nfmod" else "added")
    e = entry(lab, target)  # status settles the unfinished load first
    assert e["health"] == "ok" and e["policy"] == str(policy("second")), e
    second = held(lab, target)
    if target == "nfmod":
        assert second == "pfc_nf2"
    else:
        assert "pref 24577 " in second and "pref 16385 " not in second
    _killed(lab, target, "third", "begun")
    e = entry(lab, target)
    assert e["health"] == "ok" and e["policy"] == str(policy("second")), e
    assert held(lab, target) == second
    assert pfc("unload", "--target", target, "--dev", lab.dut, "--netns", lab.name)[0] == 0
    assert held(lab, target) == ""
