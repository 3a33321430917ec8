"""Loads as transactions: a load killed at every phase boundary (``PFC_TEST_KILL_AT``)
leaves the old policy or the new one, and the next ``status``, ``load`` or ``unload``
finishes or rolls it back and says so; Ctrl-C settles at once; ``ip netns exec`` and
a lost record still find pfc's program by id, name and tag.

Kernel tests in throw-away namespaces. A killed load is a forked copy of this process
running ``pfc.cli.main.main`` (it SIGKILLs itself at the phase: a real process death,
without an interpreter start per case); tests/deploy/test_kill.py kills real
``python -m pfc.cli`` processes at random moments.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess

import pytest

from pfc.deploy import journal
from pfc.kernel import bpf_attach
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
from tests.deploy.test_status import real

pytestmark = [pytest.mark.kernel,
              pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")]

EXTRA = {"xdp": ["--mode", "generic"], "tc": [], "nft": [], "iptables": []}
# (target, phase the load dies at, what the kernel holds right after)
PHASES = [("xdp", "begun", "old"), ("xdp", "swapped", "new"), ("xdp", "recorded", "new"),
          ("xdp", "retired", "new"),
          ("tc", "begun", "old"), ("tc", "swapped", "new"), ("tc", "recorded", "new"),
          ("nft", "begun", "old"), ("nft", "swapped", "new"), ("nft", "recorded", "new"),
          ("iptables", "begun", "old"), ("iptables", "sets", "old"),
          ("iptables", "chains", "old"), ("iptables", "families", "mix"),
          ("iptables", "switched", "new"), ("iptables", "recorded", "new"),
          ("iptables", "retired", "new")]
RECOVERERS = ("status", "load", "unload")


def forked(env: dict[str, str], *argv: str) -> tuple[int | None, int | None]:
    """Run ``pfc ARGV`` in a forked copy of this process with ``env`` added: (the
    signal that ended it, None) or (None, its exit code)."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 70
        try:
            os.environ.update(env)
            with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), \
                    contextlib.redirect_stderr(null):
                from pfc.cli.main import main

                code = main(list(argv))
        finally:
            os._exit(code)
    _, wait = os.waitpid(pid, 0)
    if os.WIFSIGNALED(wait):
        return os.WTERMSIG(wait), None
    return None, os.WEXITSTATUS(wait)


def killed_at(phase: str, *argv: str) -> int:
    """Run ``pfc ARGV`` in a forked copy of this process that dies by SIGKILL at
    ``phase``; the signal that ended it (0: it exited)."""
    sig, _ = forked({journal.KILL_ENV: phase}, *argv)
    return sig or 0


def _tags(target: str) -> dict[str, str]:
    return kernel_view.tags(target) if target in ("xdp", "tc") else {}


@pytest.mark.parametrize(("target", "phase", "held"), PHASES,
                         ids=[f"{t}-{p}" for t, p, _ in PHASES])
def test_a_load_killed_at_each_phase_is_settled_by_the_next_command(
        lab, tmp_path, target, phase, held):
    before = snapshot()
    old = policy_file(tmp_path, kernel_view.OLD, "old.pf")
    new = policy_file(tmp_path, kernel_view.NEW, "new.pf")
    known = _tags(target)
    assert load(lab, target, EXTRA[target], old)[0] == 0
    sig = killed_at(phase, "load", str(new), "--target", target, "--dev", "dut",
                    "--netns", lab.name, *EXTRA[target])
    assert sig == signal.SIGKILL, f"the load was not killed at {phase}"
    assert kernel_view.which(target, lab.dut_index, known) == held
    recoverer = RECOVERERS[PHASES.index((target, phase, held)) % 3]
    settled = "rolled back" if held == "old" else "finished"
    if recoverer == "status":
        code, out, err = pfc("status", "--netns", lab.name, "--format", "json")
        report = json.loads(out)
        assert code == 0, err
        assert len(report["recovered"]) >= 1 and settled in report["recovered"][0]
        want = old if held == "old" else new
        assert entry(lab, target)["policy"] == str(want)
        assert kernel_view.which(target, lab.dut_index, known) == held.replace("mix", "new")
    elif recoverer == "load":
        code, _, err = load(lab, target, EXTRA[target], new)
        assert code == 0 and settled in err, err
        assert entry(lab, target)["health"] == "ok"
        assert kernel_view.which(target, lab.dut_index, known) == "new"
    code, out, _ = pfc("unload", "--target", target, "--dev", "dut", "--netns", lab.name)
    assert code == 0
    if recoverer == "unload":
        assert settled in out
    assert kernel_view.which(target, lab.dut_index, known) == "none"
    assert snapshot() == before and status(lab) == []
    assert journal.pending() == []


def test_a_first_tc_load_killed_after_creating_clsact_leaves_nothing(lab, tmp_path):
    before = snapshot()
    new = policy_file(tmp_path, kernel_view.NEW, "new.pf")
    assert killed_at("qdisc", "load", str(new), "--target", "tc", "--dev", "dut",
                     "--netns", lab.name) == signal.SIGKILL
    assert "clsact" in snapshot()["qdisc"]
    code, out, _ = pfc("status", "--netns", lab.name)
    assert code == 0 and "rolled back" in out and "deleted the clsact qdisc" in out
    assert snapshot() == before and journal.pending() == []


@pytest.mark.parametrize("target", ["xdp", "nft", "iptables"])
def test_ctrl_c_during_a_load_settles_it_at_once(lab, tmp_path, target, monkeypatch):
    old = policy_file(tmp_path, kernel_view.OLD, "old.pf")
    new = policy_file(tmp_path, kernel_view.NEW, "new.pf")
    known = _tags(target)
    assert load(lab, target, EXTRA[target], old)[0] == 0
    phase = "switched" if target == "iptables" else "swapped"

    def interrupt(at: str) -> None:
        if at == phase:
            raise KeyboardInterrupt

    monkeypatch.setattr(journal, "point", interrupt)
    code, _, err = load(lab, target, EXTRA[target], new)
    assert code == 130 and "interrupted" in err
    assert journal.pending() == []
    assert entry(lab, target)["policy"] == str(new) and entry(lab, target)["health"] == "ok"
    assert kernel_view.which(target, lab.dut_index, known) == "new"


# ------------------------------------------------------- ip netns exec, identity

@pytest.mark.parametrize("target", ["xdp", "tc"])
def test_ip_netns_exec_load_status_unload(lab, tmp_path, target):
    """`ip netns exec` mounts a fresh /sys for each command: nothing of pfc's may
    depend on a bpffs there (new-user finding 1, fuzz defect 3)."""
    path = policy_file(tmp_path, "count udp\ndrop udp dport 1001\n")
    extra = EXTRA[target]
    for unload_from_host in (False, True):
        proc = real("load", path, "--target", target, "--dev", "dut", *extra,
                    exec_in=lab.name)
        assert proc.returncode == 0, proc.stderr
        from tests.deploy.test_load import deliver, probe

        deliver(lab, [probe(lab, 7, i) for i in range(3)])
        proc = real("status", "--format", "json", exec_in=lab.name)
        (e,) = json.loads(proc.stdout)["loaded"]
        assert proc.returncode == 0 and e["health"] == "ok" and e["netns"] == lab.name
        assert e["rules"][0]["packets"] == 3
        proc = real("unload", "--target", target, "--dev", "dut",
                    *(["--netns", lab.name] if unload_from_host else []),
                    exec_in=None if unload_from_host else lab.name)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        prog = bpf_attach.xdp_query(lab.dut_index).prog_id if target == "xdp" else \
            bpf_attach.tc_query(lab.dut_index, 0x7066, 1)
        assert not prog


def test_pfcs_program_is_known_by_name_and_tag(lab, tmp_path):
    """A record whose program id is stale (the same policy attached again outside
    pfc) still names pfc's program: status says the id changed, unload removes it;
    a `pfc_xdp` of another policy is left alone unless --force."""
    from pfc.backends.ebpf import maps as ebpf_maps
    from pfc.build import build_artifact
    from pfc.frontend.pipeline import compile_path, compile_text

    path = policy_file(tmp_path, kernel_view.OLD, "old.pf")
    assert load(lab, "xdp", ["--mode", "generic"], path)[0] == 0
    first = entry(lab, "xdp")["attach"]["prog_id"]

    def attach_again(artifact) -> int:
        with ebpf_maps.open_filled(artifact) as obj:
            fd = obj.programs["pfc_xdp"].fd
            old = bpf_attach.prog_fd_by_id(bpf_attach.xdp_query(lab.dut_index).prog_id)
            try:
                bpf_attach.xdp_attach(lab.dut_index, fd, "generic", old)
            finally:
                os.close(old)
            return bpf_attach.prog_info(fd).id

    same, _ = build_artifact(compile_path(path), "xdp")
    again = attach_again(same)
    e = entry(lab, "xdp")
    assert again != first and e["health"] == "changed" and "same name and tag" in e["detail"]
    code, out, _ = pfc("unload", "--target", "xdp", "--dev", "dut", "--netns", lab.name)
    assert code == 0 and f"detached XDP program id {again}" in out
    assert load(lab, "xdp", ["--mode", "generic"], path)[0] == 0
    other, _ = build_artifact(compile_text(kernel_view.NEW, "other.pf"), "xdp")
    attach_again(other)
    code, out, _ = pfc("unload", "--target", "xdp", "--dev", "dut", "--netns", lab.name)
    assert code == 0 and "left it as it is" in out and "--force" in out
    assert bpf_attach.xdp_query(lab.dut_index).prog_id
    assert load(lab, "xdp", ["--mode", "generic"], path, "--force")[0] == 0
    subprocess.run(["rm", "-rf", os.environ["PFC_STATE_DIR"]], check=True)  # records lost
    code, out, _ = pfc("unload", "--target", "xdp", "--dev", "dut", "--netns", lab.name)
    assert code == 0 and "nothing loaded" in out and "--force" in out
    code, out, _ = pfc("unload", "--target", "xdp", "--dev", "dut", "--netns", lab.name,
                       "--force")
    assert code == 0 and "detached" in out and not bpf_attach.xdp_query(lab.dut_index).prog_id
