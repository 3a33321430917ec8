"""K1 for whole firewalls: a v2 load SIGKILLed at every commit point it passes (found
by tracing one run), for nft, iptables, tc + iptables and xdp + nft: after each kill
every part of the firewall holds the old version or every part the new one (read from
the kernel: nft listings, iptables-save of both families, a test run of the attached
program), ``pfc status`` settles it and says so, its record and pfc's copy name what
the kernel holds, and the next load builds on it; an unload leaves the namespace as it
was."""

from __future__ import annotations

import collections
import contextlib
import os
import re
import signal
import socket
from dataclasses import replace
from pathlib import Path

import pytest

from pfc.deploy import journal, snapshot, state
from pfc.deploy import load as deploying
from pfc.deploy.base import in_netns
from pfc.deploy.firewall import commit
from pfc.deploy.firewall.loader import DEV, TARGET
from pfc.kernel import bpf_attach
from tests.deploy import fw_lab, kill_view
from tests.deploy.fw_lab import edge, run
from tests.deploy.test_load import ROOT_REASON

pytestmark = [pytest.mark.kernel,
              pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")]

CASES = ["nft", "iptables", "tc,iptables", "xdp,nft"]
PORTS = {7: "p1", 8: "p2"}


def _ports(found: set[int]) -> str:
    return PORTS[found.pop()] if len(found) == 1 and found <= set(PORTS) else "mix"


def _bpf(target: str) -> str:
    index = socket.if_nametoindex("eth1")
    prog = bpf_attach.xdp_query(index).prog_id if target == "xdp" else \
        bpf_attach.tc_query(index, 0x7066, 1)
    if not prog:
        return "none"
    fd = bpf_attach.prog_fd_by_id(prog)
    try:
        attached = kill_view._Attached(fd)
        drop = {"xdp": 1, "tc": 2}[target]
        return _ports({p for p in PORTS
                       if attached.test_run(kill_view._frame(kill_view.INNOCENT, p)).retval
                       == drop})
    finally:
        os.close(fd)


_NS: list[str] = []


def fw_lab_ns() -> str:
    return _NS[-1]


def view(targets: str) -> str:
    """"p1", "p2", "none" or "mix": what every part of the firewall holds."""
    seen = parts(targets)
    return seen[0] if len(set(seen)) == 1 else "mix"


def parts(targets: str) -> list[str]:
    """What each part holds (iptables: each family)."""
    seen = []
    ns = fw_lab_ns()
    for target in targets.split(","):
        if target == "nft":
            text = run(ns, "nft list ruleset")
            ports = {int(p) for p in re.findall(r"[tu][cd]p dport (\d+) .*drop", text)}
            seen.append(_ports(ports) if "table inet pfc" in text else "none")
        elif target == "iptables":
            for tool in ("iptables-save", "ip6tables-save"):
                text = run(ns, f"{tool} -t filter")
                goto = re.search(r"^-A PFC-INPUT -g (\S+)$", text, re.MULTILINE)
                if goto is None:
                    seen.append("none")
                    continue
                body = "\n".join(ln for ln in text.splitlines()
                                 if ln.startswith(f"-A {goto[1]} ") and "DROP" in ln)
                seen.append(_ports({int(p, 16) for p in re.findall(r'=0x([0-9a-f]+)"', body)
                                    if int(p, 16) in PORTS}))
        else:
            with in_netns(ns):
                seen.append(_bpf(target))
    return seen


def forked(env: dict[str, str], fn) -> int | None:
    """Run ``fn`` in a forked copy of this process with ``env`` added; the signal that
    ended it, or None."""
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            os.environ.update(env)
            fn()
            code = 0
        finally:
            os._exit(code)
    _, wait = os.waitpid(pid, 0)
    return os.WTERMSIG(wait) if os.WIFSIGNALED(wait) else None


def leftovers(ns: str) -> list[str]:
    place = Path(os.environ["PFC_STATE_DIR"]) / ns
    return sorted(p.name for p in place.rglob("*") if p.is_file() and not
                  re.fullmatch(r"firewall\.(json|sources)", p.name))


@pytest.mark.parametrize("targets", CASES)
def test_a_kill_at_every_commit_point_of_a_firewall_load(tmp_path, targets):
    versions = {"p1": edge(7), "p2": edge(8)}
    if targets == "iptables":  # (no ingress block: iptables has no device hooks)
        versions = {k: replace(v, lists=v.lists[1:]) for k, v in versions.items()}
    paths = {k: tmp_path / f"{k}.pf" for k in versions}
    for k, p in paths.items():
        p.write_text(f"# {k}\n")
    mode = {"mode": "generic"} if "xdp" in targets else {}

    def load(k: str):
        copy = snapshot.Copy(str(paths[k]), {str(paths[k]): paths[k].read_text()},
                             {"target": targets})
        return fw_lab.load(versions[k], targets, fw_lab_ns(), str(paths[k]), copy=copy,
                           **mode)

    with fw_lab.lab() as lab, contextlib.ExitStack() as stack:
        _NS.append(lab.host_ns)
        stack.callback(_NS.pop)
        clean = fw_lab.snapshot(lab.host_ns)
        load("p1")
        trace = tmp_path / "trace"
        assert forked({journal.TRACE_ENV: str(trace)}, lambda: load("p2")) is None
        counts: collections.Counter = collections.Counter()
        phases = []
        for phase in trace.read_text().split():
            counts[phase] += 1
            phases.append(phase if counts[phase] == 1 else f"{phase}#{counts[phase]}")
        print(f"{targets}: {' '.join(phases)}")
        assert {"begun", "recorded", "copied"} <= set(phases)
        for n, phase in enumerate(phases):
            load("p1")
            assert forked({journal.KILL_ENV: phase}, lambda: load("p2")) == signal.SIGKILL
            # each part atomic (but iptables' families when the switch child is killed
            # between them); across parts, a mix until the next command settles it
            held = parts(targets)
            assert set(held) <= {"p1", "p2"}, (phase, held)
            now = view(targets)
            if n % 2 == 0:  # status settles it and tells the truth
                interrupted = any(x.endswith(".intent") for x in leftovers(lab.host_ns))
                report = deploying.report(None, lab.host_ns)
                now = view(targets)
                assert now in ("p1", "p2"), (phase, now)
                (s,) = report.entries
                assert bool(report.messages) == interrupted, (phase, report.messages)
                assert s.inspection.health == "ok", (phase, s.inspection)
                assert s.record.policy == str(paths[now]), (phase, now)
                with in_netns(lab.host_ns):
                    copy, why = snapshot.checked(s.record)
                assert copy is not None and copy.main == str(paths[now]), why
                assert leftovers(lab.host_ns) == [] and journal.pending() == []
                assert view(targets) == now
            else:  # the next load settles it first
                load("p1")
                assert view(targets) == "p1"
        load("p2")
        assert view(targets) == "p2"
        commit.unload(lab.host_ns)
        assert fw_lab.snapshot(lab.host_ns) == clean
        assert state.read(lab.host_ns, DEV, TARGET) is None
