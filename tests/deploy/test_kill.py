"""SIGKILL of real ``pfc load`` processes at random moments (issue 17, build 4).

Per target, a policy is loaded, then ``python -m pfc.cli load`` replaces it with the
other one again and again, each run killed (SIGKILL) at a random moment: on even
trials anywhere in a measured load, on odd ones in its kernel phase (from the moment
its journal entry appears until it would have exited: most of a load is start-up and
compiling, which touch nothing). After each kill the kernel must hold the old policy
or the new one,
never a mix (program tag; ``nft list table``; ``iptables-save``/``ip6tables-save`` and
``ipset list``); every other trial ``pfc status`` must then settle the record to what
the kernel holds, and otherwise the next load does it. At the end a load and an unload
leave the namespace exactly as it was.

``PFC_KILL_TRIALS`` sets the trials per target (default 20: about 25 s per target on
an idle 2-core VM); a bigger run is the same test with a bigger number.
"""

from __future__ import annotations

import collections
import os
import random
import subprocess
import sys
import time

import pytest

from pfc.deploy import journal, state
from tests.deploy import kernel_view
from tests.deploy.test_load import (
    ROOT_REASON,
    entry,
    load,
    pfc,
    policy_file,
    snapshot,
    status,
)

pytestmark = [pytest.mark.kernel,
              pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")]

TRIALS = int(os.environ.get("PFC_KILL_TRIALS", "20"))
EXTRA = {"xdp": ["--mode", "generic"], "tc": [], "nft": [], "iptables": []}


def intent_path(lab, target: str):
    return state.path(lab.name, "dut", target, state.INTENT)


def wait_for(path, proc: subprocess.Popen) -> float | None:
    """When ``path`` appeared (None if ``proc`` exited first), polling every 1 ms."""
    while proc.poll() is None:
        if path.exists():
            return time.monotonic()
        time.sleep(0.001)
    return None


def spawn(lab, target: str, path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pfc.cli", "load", str(path), "--target",
                             target, "--dev", "dut", "--netns", lab.name, *EXTRA[target]],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("target", ["xdp", "tc", "nft", "iptables"])
def test_random_sigkills_leave_the_old_or_the_new_policy(lab, tmp_path, target):
    before = snapshot()
    paths = {"old": policy_file(tmp_path, kernel_view.OLD, "old.pf"),
             "new": policy_file(tmp_path, kernel_view.NEW, "new.pf")}
    known = kernel_view.tags(target) if target in ("xdp", "tc") else {}
    assert load(lab, target, EXTRA[target], paths["old"])[0] == 0
    start = time.monotonic()
    proc = spawn(lab, target, paths["new"])
    began = wait_for(intent_path(lab, target), proc)
    assert proc.wait() == 0 and began, proc.stderr.read() if proc.stderr else ""
    end = time.monotonic()
    duration, window = end - start, end - began
    held, rng, seen = "new", random.Random(f"{target}-17"), collections.Counter()
    for trial in range(TRIALS):
        other = "old" if held == "new" else "new"
        proc = spawn(lab, target, paths[other])
        if trial % 2:
            wait_for(intent_path(lab, target), proc)
        try:
            proc.wait(timeout=rng.uniform(0, window if trial % 2 else duration))
            killed = False
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            killed = True
        proc.stderr.close()
        with state.locked():  # an iptables switch outliving pfc holds the lock
            now = kernel_view.which(target, lab.dut_index, known)
        assert now in (held, other), f"trial {trial}: the kernel holds {now}"
        seen[(killed, "changed" if now != held else "kept")] += 1
        held = now
        if trial % 2:
            e = entry(lab, target)  # status settles an unfinished load first
            assert e["health"] == "ok" and e["policy"] == str(paths[held]), e
            assert journal.pending() == []
    print(f"{target}: load {duration:.2f} s, kernel phase {window:.2f} s; (killed, "
          f"kernel) over {TRIALS} trials: {dict(seen)}")
    assert seen[(True, "kept")] + seen[(True, "changed")] >= TRIALS // 2
    other = "old" if held == "new" else "new"
    assert load(lab, target, EXTRA[target], paths[other])[0] == 0
    assert kernel_view.which(target, lab.dut_index, known) == other
    code, _, _ = pfc("unload", "--target", target, "--dev", "dut", "--netns", lab.name)
    assert code == 0 and snapshot() == before and status(lab) == []
    assert journal.pending() == []
