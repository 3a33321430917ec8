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
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pfc.deploy import journal, state
from pfc.deploy import snapshot as copies
from pfc.deploy.base import in_netns
from pfc.kernel import netns
from tests.deploy import kernel_view, kill_view
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


# ------------------------------------------- every commit point of load, set, apply

# (command, target, set file): `pfc set` on small sets is a recompile and atomic replace
# on xdp and tc, on big ones a map swap; nft and iptables change sets in place, and an
# iptables family of one prefix (`-s`, "one") reloads too.
POINT_CASES = [(c, t, "small") for c in ("load", "apply", "set") for t in TARGETS] + \
    [("set", t, "big") for t in TARGETS] + [("set", "iptables", "one")]


@dataclass
class Scene:
    """One case's lab, files and commands."""

    command: str
    target: str
    lab: netns.Lab
    folder: Path

    @property
    def where(self) -> list[str]:
        return ["--dev", "dut", "--netns", self.lab.name]

    def path(self, policy: str) -> Path:
        return self.folder / f"{policy}.pf"

    def config(self, policy: str) -> Path:
        mode = 'mode = "generic"\n' if self.target == "xdp" else ""
        p = self.folder / "pfc.conf"
        p.write_text(f'[[policy]]\nfile = "{policy}.pf"\ndev = "dut"\ntarget = '
                     f'"{self.target}"\nnetns = "{self.lab.name}"\n{mode}')
        return p

    def load(self, policy: str) -> None:
        code, _, err = pfc("load", self.path(policy), "--target", self.target, *self.where,
                           *EXTRA[self.target])
        assert code == 0, err

    def reset(self) -> None:
        """The state each kill starts from: P1 (load, apply) or P2 with the set file's
        contents (set), loaded the way the command under test would find it."""
        if self.command == "apply":
            code, out, err = pfc("apply", "--config", self.config("p1"))
            assert code == 0, out + err
            self.config("p2")
        else:
            self.load("p1" if self.command == "load" else "p2")

    def argv(self) -> list[str]:
        if self.command == "load":
            return ["load", str(self.path("p2")), "--target", self.target, *self.where,
                    *EXTRA[self.target]]
        if self.command == "apply":
            return ["apply", "--config", str(self.folder / "pfc.conf")]
        return ["set", "add", "bl", kill_view.X4, kill_view.X6, "--target", self.target,
                *self.where]

    def view(self) -> dict:
        with in_netns(self.lab.name):
            return kill_view.view(self.target, self.lab.dut_index)


def traced(scene: Scene, trace: Path) -> list[str]:
    """Every commit point the command passes, in order (``name#N`` for the Nth)."""
    from tests.deploy.test_journal import forked

    trace.unlink(missing_ok=True)
    assert forked({journal.TRACE_ENV: str(trace)}, *scene.argv()) == (None, 0)
    seen: collections.Counter = collections.Counter()
    out = []
    for phase in trace.read_text().split():
        seen[phase] += 1
        out.append(phase if seen[phase] == 1 else f"{phase}#{seen[phase]}")
    return out


def leftovers(scene: Scene) -> list[str]:
    """State files a settled place must not have: intents, set markers, pending
    copies, reserves, temporary files."""
    place = Path(os.environ["PFC_STATE_DIR"]) / scene.lab.name
    return sorted(p.name for p in place.rglob("*") if p.is_file() and not
                  re.fullmatch(rf"{scene.target}\.(json|sources)", p.name))


def truthful(scene: Scene, now: dict) -> None:
    """pfc's record and copy say what the kernel holds (``now``), and status says it."""
    with in_netns(scene.lab.name):
        record = state.read(scene.lab.name, "dut", scene.target)
        copy, why = copies.checked(record)
    assert copy is not None, why
    held = {"p1": scene.path("p1"), "p2": scene.path("p2")}[now["policy"]]
    assert record.policy == str(held) and copy.main == str(held)
    text = copy.sources[str(scene.folder / "bl.txt")]
    for address in kill_view.PROBES:
        if address in now:
            assert (address in text) == now[address], (address, now, text)
    e = entry(scene.lab, scene.target)
    assert e["health"] == "ok" and e["policy"] == str(held), e
    assert leftovers(scene) == [] and journal.pending() == []


def survives_a_kill_at(scene: Scene, phase: str, n: int) -> None:
    from tests.deploy.test_journal import forked

    scene.reset()
    before = scene.view()
    sig, _ = forked({journal.KILL_ENV: phase}, *scene.argv())
    assert sig == signal.SIGKILL, f"{scene.command} was not killed at {phase}"
    now = scene.view()
    if scene.command == "set":  # the old set or the new one (a mix: the next finishes)
        assert now["policy"] == "p2", now
        assert now[kill_view.X4] == now[kill_view.X6] or \
            phase.startswith(("set-family", "families")), now
    else:
        assert now["policy"] in ("p1", "p2") or (phase == "families" and
                                                 now["policy"] == "mix"), now
    interrupted = any(name.endswith((".intent", ".set-pending")) for name in leftovers(scene))
    if n % 2 == 0:  # status first: it settles and tells the truth
        code, out, err = pfc("status", "--netns", scene.lab.name, "--format", "json")
        assert code == 0, out + err
        assert bool(json.loads(out)["recovered"]) == interrupted, out
        now = scene.view()
        truthful(scene, now)
    held = now["policy"] if now["policy"] != "mix" else "p2"
    code, out, err = pfc("set", "add", "bl", kill_view.Z4, "--target", scene.target,
                         *scene.where)  # the next command: settles what is left, first
    assert code == 0, out + err
    after = scene.view()
    assert after["policy"] == held and after[kill_view.Z4], (phase, before, now, after)
    if scene.command == "set" and n % 2 == 0:
        assert after[kill_view.X4] == now[kill_view.X4], (phase, now, after)  # no revert
    truthful(scene, after)
    if scene.command == "apply":  # and apply converges on the config
        code, out, err = pfc("apply", "--config", scene.folder / "pfc.conf")
        assert code == 0, out + err
        assert scene.view()["policy"] == "p2"
        truthful(scene, scene.view())


@pytest.mark.parametrize(("command", "target", "kind"), POINT_CASES,
                         ids=[f"{c}-{t}-{k}" for c, t, k in POINT_CASES])
def test_a_kill_at_every_commit_point_reverts_nothing(tmp_path, monkeypatch, command,
                                                      target, kind):
    """K1: ``pfc load``, ``pfc apply`` and ``pfc set`` SIGKILLed at every commit point
    they pass (found by tracing one run): the kernel holds the old or the new policy
    (set contents), ``pfc status`` settles and says which, pfc's record and copy agree
    with the kernel, and the next ``pfc set`` builds on what the kernel holds: nothing
    silently reverted (before, a load killed between its record and its copy made the
    next ``pfc set`` recompile the old policy)."""
    monkeypatch.setenv("PFC_LIB_DIR", str(tmp_path / "lib"))
    with netns.lab() as lab:
        scene = Scene(command, target, lab, tmp_path)
        (tmp_path / "bl.txt").write_text(kill_view.set_file(kind))
        for name, text in (("p1", kill_view.P1), ("p2", kill_view.P2)):
            policy_file(tmp_path, text, f"{name}.pf")
        with in_netns(lab.name):
            clean = snapshot()
        scene.reset()
        phases = traced(scene, tmp_path / "trace")
        assert phases, "the command passed no commit point"
        print(f"{command} {target} {kind}: {' '.join(phases)}")
        for n, phase in enumerate(phases):
            survives_a_kill_at(scene, phase, n)
        code, _, err = pfc("unload", "--target", target, *scene.where)
        assert code == 0, err
        with in_netns(lab.name):
            assert snapshot() == clean
        assert leftovers(scene) == []
