"""SIGKILL of real ``pfc load`` processes at random moments (issue 17, build 4).

For each target (xdp, tc, nft, iptables: each in its own namespace with its own state
directory, all four running side by side) a policy is loaded, then
``python -m pfc.cli load`` replaces it with the other one again and again, each run
killed (SIGKILL) at a random moment: on even trials anywhere in a measured load, on
odd ones in its kernel phase (from the moment its journal entry appears until the
measured end: most of a load is start-up and compiling, which touch nothing). After
each kill the kernel must hold the old policy or the new one, never a mix (program
tag; ``nft list table``; ``iptables-save``/``ip6tables-save`` and ``ipset list``);
every other trial ``pfc status`` must then settle the record to what the kernel holds,
and otherwise the next load does it. At the end a load and an unload leave each
namespace exactly as it was.

``PFC_KILL_TRIALS`` sets the trials per target (default 20: about a minute on an idle
2-core VM); a bigger run is the same test with a bigger number.
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pfc.deploy import journal, state
from pfc.deploy.base import in_netns
from pfc.kernel import netns
from tests.deploy import kernel_view
from tests.deploy.test_load import ROOT_REASON, entry, load, pfc, policy_file, snapshot, status

pytestmark = [pytest.mark.kernel,
              pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")]

TRIALS = int(os.environ.get("PFC_KILL_TRIALS", "20"))
TARGETS = ("xdp", "tc", "nft", "iptables")
EXTRA = {"xdp": ["--mode", "generic"], "tc": [], "nft": [], "iptables": []}


@dataclass
class Place:
    """One target's namespace, state directory, policies and what its kernel holds."""

    target: str
    lab: netns.Lab
    states: Path
    paths: dict[str, Path]
    known: dict[str, str]
    held: str = "new"
    duration: float = 0.0
    window: float = 0.0
    seen: collections.Counter = field(default_factory=collections.Counter)
    before: dict = field(default_factory=dict)  # the namespace before the first load

    @contextlib.contextmanager
    def inside(self, monkeypatch):
        """In-process checks here: its namespace and its state directory."""
        with monkeypatch.context() as m, in_netns(self.lab.name):
            m.setenv("PFC_STATE_DIR", str(self.states))
            yield

    @property
    def intent(self) -> Path:
        return self.states / self.lab.name / "dut" / f"{self.target}{state.INTENT}"

    def spawn(self, policy: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "pfc.cli", "load", str(self.paths[policy]), "--target",
             self.target, "--dev", "dut", "--netns", self.lab.name, *EXTRA[self.target]],
            env=os.environ | {"PFC_STATE_DIR": str(self.states)},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@dataclass
class Run:
    """One spawned load and when to kill it (None: once its intent appears)."""

    proc: subprocess.Popen
    start: float
    kill_at: float | None
    fraction: float
    killed: bool = False


def race(places: list[Place], policy_of, rng: random.Random | None,
         anywhere: bool = False) -> dict[str, Run]:
    """Spawn one load per place, kill each at a random moment (``anywhere``: of its
    measured duration; else of its kernel phase, once its intent appears), wait for
    all. ``rng`` None: let them finish, measuring each one's duration and phase."""
    runs = {}
    for p in places:
        now, u = time.monotonic(), rng.random() if rng else 0.0
        runs[p.target] = Run(p.spawn(policy_of(p)), now,
                             now + u * p.duration if rng and anywhere else None, u)
    began: dict[str, float] = {}
    ended: dict[str, float] = {}
    while len(ended) < len(places):
        now = time.monotonic()
        for p in places:
            r = runs[p.target]
            if p.target in ended:
                continue
            if r.proc.poll() is not None:
                ended[p.target] = now
                continue
            if p.target not in began and p.intent.exists():
                began[p.target] = now
                if r.kill_at is None and rng is not None:
                    r.kill_at = now + r.fraction * p.window
            if r.kill_at is not None and now >= r.kill_at:
                r.proc.kill()
                r.killed = True
        time.sleep(0.001)
    if rng is None:
        for p in places:
            assert runs[p.target].proc.returncode == 0 and p.target in began
            p.duration = ended[p.target] - runs[p.target].start
            p.window = ended[p.target] - began[p.target]
    return runs


def test_random_sigkills_leave_the_old_or_the_new_policy(tmp_path, monkeypatch):
    with contextlib.ExitStack() as stack:
        places = []
        for target in TARGETS:
            lab = stack.enter_context(netns.lab())
            folder = tmp_path / target
            folder.mkdir()
            paths = {"old": policy_file(folder, kernel_view.OLD, "old.pf"),
                     "new": policy_file(folder, kernel_view.NEW, "new.pf")}
            place = Place(target, lab, folder / "state", paths, {})
            with place.inside(monkeypatch):
                place.known = kernel_view.tags(target) if target in ("xdp", "tc") else {}
                place.before = snapshot()
                assert load(lab, target, EXTRA[target], paths["old"])[0] == 0
            places.append(place)
        race(places, lambda p: "new", None)
        rng, trial = random.Random(17), 0
        while trial < TRIALS or (not all(killed(p) >= TRIALS // 2 for p in places)
                                 and trial < 4 * TRIALS):
            runs = race(places, lambda p: "old" if p.held == "new" else "new", rng,
                        anywhere=trial % 2 == 0)
            for p in places:
                check(p, runs[p.target], trial, monkeypatch)
            trial += 1
        for p in places:
            finish(p, monkeypatch)


def killed(p: Place) -> int:
    """How many of ``p``'s runs so far were killed before they ended. A kill moment
    comes from a duration measured once; on a machine whose load changes, a run may end
    first, so the test runs more trials (up to 4 × TRIALS) until half of TRIALS were
    really killed on every target."""
    return p.seen[(True, "kept")] + p.seen[(True, "changed")]


def check(p: Place, run: Run, trial: int, monkeypatch) -> None:
    other = "old" if p.held == "new" else "new"
    with p.inside(monkeypatch):
        with state.locked():  # an iptables switch outliving pfc holds the lock
            now = kernel_view.which(p.target, p.lab.dut_index, p.known)
        assert now in (p.held, other), f"{p.target} trial {trial}: the kernel holds {now}"
        p.seen[(run.killed, "changed" if now != p.held else "kept")] += 1
        p.held = now
        if trial % 2:
            e = entry(p.lab, p.target)  # status settles an unfinished load first
            assert e["health"] == "ok" and e["policy"] == str(p.paths[p.held]), e
            assert journal.pending() == []


def finish(p: Place, monkeypatch) -> None:
    print(f"{p.target}: load {p.duration:.2f} s, kernel phase {p.window:.2f} s; (killed, "
          f"kernel) over {sum(p.seen.values())} trials: {dict(p.seen)}")
    assert killed(p) >= TRIALS // 2
    other = "old" if p.held == "new" else "new"
    with p.inside(monkeypatch):
        assert load(p.lab, p.target, EXTRA[p.target], p.paths[other])[0] == 0
        assert kernel_view.which(p.target, p.lab.dut_index, p.known) == other
        code, _, _ = pfc("unload", "--target", p.target, "--dev", "dut", "--netns",
                         p.lab.name)
        assert code == 0 and snapshot() == p.before and status(p.lab) == []
        assert journal.pending() == []
