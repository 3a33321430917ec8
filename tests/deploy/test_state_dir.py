"""A state directory that is full or read-only (K2, K3): an environment error (exit 2)
naming the path and what pfc needs there, saying whether the new policy is in force;
the kernel and pfc's record agree afterwards; no ``.part`` file is left.

Each case runs in a forked copy of this process with its own mount namespace, where
``PFC_STATE_DIR`` is a small tmpfs (the host's mounts are never touched); the fork runs
the pfc commands in-process (``main``) and sends back what they printed. Filling the
tmpfs or remounting it read-only at a commit point (``journal.point``) makes the
kernel phase of a load meet a full or read-only directory deterministically.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import json
import os
import subprocess
from pathlib import Path

import pytest

from pfc.deploy import journal
from pfc.deploy.base import in_netns
from tests.deploy import kill_view
from tests.deploy.test_load import ROOT_REASON, policy_file

pytestmark = [pytest.mark.kernel,
              pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")]

CLONE_NEWNS = 0x00020000
EXTRA = {"xdp": ["--mode", "generic"], "tc": [], "nft": [], "iptables": []}


def in_tmpfs(folder: Path, size: str, steps) -> list:
    """Run ``steps(state_dir)`` in a fork with a private mount namespace whose
    ``folder`` is a tmpfs of ``size``; return what it returned (JSON)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read)
            libc = ctypes.CDLL(None, use_errno=True)
            assert libc.unshare(CLONE_NEWNS) == 0
            subprocess.run(["mount", "--make-rprivate", "/"], check=True)
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                            str(folder)], check=True)
            os.environ["PFC_STATE_DIR"] = str(folder)
            with os.fdopen(write, "w") as out:
                json.dump(steps(folder), out)
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as f:
        text = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and text, "the fork failed"
    return json.loads(text)


def run(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    from pfc.cli.main import main

    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file())


def fill(folder: Path) -> None:
    """Take every free byte of the tmpfs."""
    with open(folder / "ballast", "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 4096)


def test_a_full_state_directory_refuses_the_load_and_changes_nothing(lab, tmp_path):
    """The fuzzing report's K2: a 5000-entry set on nft, state on a 64 kB tmpfs (it was
    exit 70, the new table in force, no copy and a ``.part`` file left)."""
    (tmp_path / "big.txt").write_text("".join(f"10.{i >> 8}.{i & 255}.1\n"
                                              for i in range(5000)))
    big = policy_file(tmp_path, 'set b = file "big.txt"\ndrop src $b\ndrop udp dport 5\n',
                      "full.pf")
    small = policy_file(tmp_path, "drop udp dport 7\n", "small.pf")
    state = tmp_path / "state"
    state.mkdir()
    where = ["--target", "nft", "--dev", lab.dut, "--netns", lab.name]

    def steps(folder: Path) -> list:
        first = run("load", small, *where)
        second = run("load", big, *where)
        with in_netns(lab.name):
            table = subprocess.run(["nft", "list", "table", "netdev", "pfc"],
                                   capture_output=True, text=True).stdout
        listed = files(folder)
        third = run("status", "--netns", lab.name, "--format", "json")
        fourth = run("unload", *where)
        return [first, second, table, listed, third, fourth]

    first, second, table, listed, third, fourth = in_tmpfs(state, "64k", steps)
    assert first[0] == 0, first
    code, _, err = second
    assert code == 2, err
    (line, hint) = err.strip().splitlines()
    assert line.startswith("pfc load: error: cannot write ") and str(state) in line
    assert "No space left on device" in line and "kB more free space" in line
    assert "nothing was changed: the new policy is not in force" in line
    assert hint.startswith("hint: free space in ")
    assert "dport 7" in table and "dport 5" not in table  # the old policy, untouched
    assert not [n for n in listed if n.endswith((".part", ".pending", ".intent",
                                                 ".reserve"))], listed
    (e,) = json.loads(third[1])["loaded"]
    assert third[0] == 0 and e["policy"] == str(small) and e["health"] == "ok"
    assert fourth[0] == 0


@pytest.mark.parametrize("target", ["xdp", "tc", "nft", "iptables"])
def test_a_state_directory_full_after_the_swap_still_takes_the_record(lab, tmp_path,
                                                                      target):
    """The directory fills up right after the kernel switched to the new policy: the
    room the load reserved before takes the record, the load succeeds, and record,
    copy and kernel agree."""
    for name, text in (("p1", kill_view.P1), ("p2", kill_view.P2)):
        policy_file(tmp_path, text, f"{name}.pf")
    (tmp_path / "bl.txt").write_text(kill_view.set_file("small"))
    state = tmp_path / "state"
    state.mkdir()
    where = ["--target", target, "--dev", lab.dut, "--netns", lab.name, *EXTRA[target]]
    swap = "switched" if target == "iptables" else "swapped"

    def steps(folder: Path) -> list:
        loaded = run("load", tmp_path / "p1.pf", *where)
        real = journal.point

        def full_at(phase: str) -> None:
            if phase == swap:
                fill(folder)
            real(phase)

        journal.point = full_at
        try:
            second = run("load", tmp_path / "p2.pf", *where)
        finally:
            journal.point = real
        with in_netns(lab.name):
            held = kill_view.view(target, lab.dut_index)["policy"]
        listed = files(folder)
        (folder / "ballast").unlink()
        status = run("status", "--netns", lab.name, "--format", "json")
        unload = run("unload", *where[:6])
        return [loaded, second, held, listed, status, unload]

    loaded, second, held, listed, status, unload = in_tmpfs(state, "2m", steps)
    assert loaded[0] == 0 and second[0] == 0, (loaded, second)
    assert held == "p2"
    assert not [n for n in listed if n.endswith((".part", ".pending", ".intent",
                                                 ".reserve"))], listed
    (e,) = json.loads(status[1])["loaded"]
    assert status[0] == 0 and e["policy"] == str(tmp_path / "p2.pf"), status
    assert json.loads(status[1])["recovered"] == []
    assert unload[0] == 0, unload


@pytest.mark.parametrize("target", ["nft", "xdp"])
def test_a_state_directory_gone_read_only_after_the_swap_says_the_policy_is_in_force(
        lab, tmp_path, target):
    """Remounted read-only right after the swap: exit 2, the one line says the new
    policy IS in force and that its record could not be written; once the directory
    is writable again, the next command records it (the intent was written before)."""
    for name, text in (("p1", kill_view.P1), ("p2", kill_view.P2)):
        policy_file(tmp_path, text, f"{name}.pf")
    (tmp_path / "bl.txt").write_text(kill_view.set_file("small"))
    state = tmp_path / "state"
    state.mkdir()
    where = ["--target", target, "--dev", lab.dut, "--netns", lab.name, *EXTRA[target]]

    def steps(folder: Path) -> list:
        loaded = run("load", tmp_path / "p1.pf", *where)
        real = journal.point

        def read_only_at(phase: str) -> None:
            if phase == "swapped":  # a read-only bind over it (pfc holds .lock open)
                subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True)
                subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True)
            real(phase)

        journal.point = read_only_at
        try:
            second = run("load", tmp_path / "p2.pf", *where)
        finally:
            journal.point = real
        with in_netns(lab.name):
            held = kill_view.view(target, lab.dut_index)["policy"]
        refused = run("unload", *where[:6])
        subprocess.run(["umount", str(folder)], check=True)  # writable again
        status = run("status", "--netns", lab.name, "--format", "json")
        unload = run("unload", *where[:6])
        return [loaded, second, held, refused, status, unload]

    loaded, second, held, refused, status, unload = in_tmpfs(state, "2m", steps)
    assert loaded[0] == 0, loaded
    code, _, err = second
    line = err.strip().splitlines()[0]
    assert code == 2 and "Read-only file system" in line, err
    assert "the new policy IS in force" in line and "could not write its record" in line
    assert held == "p2"
    assert refused[0] == 2 and "nothing was unloaded" in refused[2], refused
    report = json.loads(status[1])
    assert status[0] == 0 and "finished the interrupted load" in report["recovered"][0]
    assert report["loaded"][0]["policy"] == str(tmp_path / "p2.pf")
    assert unload[0] == 0, unload


def test_a_read_only_state_directory_is_an_environment_error(lab, tmp_path):
    """K3: it was exit 70 (`OSError: Read-only file system: .lock`)."""
    path = policy_file(tmp_path, "drop udp dport 7\n")
    state = tmp_path / "state"
    state.mkdir()
    where = ["--target", "nft", "--dev", lab.dut, "--netns", lab.name]

    def steps(folder: Path) -> list:
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        load = run("load", path, *where)
        status = run("status", "--netns", lab.name)
        with in_netns(lab.name):
            table = subprocess.run(["nft", "list", "tables"], capture_output=True,
                                   text=True).stdout
        return [load, status, table]

    load, status, table = in_tmpfs(state, "1m", steps)
    code, _, err = load
    (line, hint) = err.strip().splitlines()
    assert code == 2 and "Read-only file system" in line and str(state) in line, err
    assert "must be writable" in line and "nothing was changed" in line
    assert hint.startswith("hint: make writable")
    assert status[0] == 2 and "Read-only file system" in status[2], status
    assert "pfc" not in table
