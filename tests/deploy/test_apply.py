"""``pfc apply`` and pfc.service: the host made to match /etc/pfc/pfc.conf, a second run
that changes nothing, a broken config that keeps the previous policy, and a reboot
(the namespace deleted and created again, the unit's ExecStart run in it) that brings
the policy back, from the last good copy when the config is broken by then.

Kernel tests in throw-away namespaces; the unit is installed with DESTDIR into the
test's directory and its command run as systemd would run it (its Environment=, the
paths moved under that directory)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pyroute2 import netns as pyroute_netns

from pfc.kernel import netns
from tests.deploy.test_load import (
    ROOT_REASON,
    counters_of,
    deliver,
    pfc,
    policy_file,
    probe,
    snapshot,
    status,
)
from tests.paths import ROOT

pytestmark = [pytest.mark.kernel,
              pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")]

POLICY = "count udp\ndrop udp dport 1001\n"
TARGETS = (("xdp", 'mode = "generic"'), ("tc", ""), ("nft", ""), ("iptables", ""))
PFC_BIN = Path(sys.executable).with_name("pfc")


def write_config(path: Path, policy: str, dev: str, targets=TARGETS, extra: str = "") -> Path:
    text = extra + "".join(f'[[policy]]\nfile = "{policy}"\ndev = "{dev}"\n'
                           f'target = "{t}"\n{more}\n' for t, more in targets)
    path.write_text(text)
    return path


def apply(config: Path, *more: str) -> tuple[int, dict]:
    code, out, err = pfc("apply", "--config", config, "--format", "json", *more)
    assert code in (0, 1), err
    return code, json.loads(out)


def actions(report: dict) -> dict[str, str]:
    return {o["place"].split(" (")[0]: o["action"] for o in report["outcomes"]}


def records(lab) -> dict[str, tuple]:
    return {e["target"]: (e["attach"], e["loaded_at"], e["health"]) for e in status(lab)}


def test_apply_loads_then_has_nothing_to_change(lab, tmp_path):
    policy_file(tmp_path, POLICY, "edge.pf")
    config = write_config(tmp_path / "pfc.conf", "edge.pf", lab.dut)
    code, first = apply(config)
    assert code == 0 and set(actions(first).values()) == {"loaded"}, first
    assert {t: h for t, (_, _, h) in records(lab).items()} == dict.fromkeys(
        ("xdp", "tc", "nft", "iptables"), "ok")
    before, kernel = records(lab), snapshot()
    code, out, _ = pfc("apply", "--config", config)
    assert code == 0 and out.rstrip().endswith("nothing to change"), out
    code, again = apply(config, "--dry-run")
    assert code == 0 and not again["changed"]
    assert (records(lab), snapshot()) == (before, kernel)
    deliver(lab, [probe(lab, 1001, 1), probe(lab, 1003, 2)])
    assert counters_of([e for e in status(lab) if e["target"] == "xdp"][0])[0][0] == 2

    before, kernel = records(lab), snapshot()
    policy_file(tmp_path, POLICY.replace("1001", "1002"), "edge.pf")
    code, dry = apply(config, "--dry-run")
    assert code == 0 and dry["changed"] and (records(lab), snapshot()) == (before, kernel)
    assert {o["preview"]["added"][0]["text"] for o in dry["outcomes"]} == \
        {"drop udp dport 1002"}
    code, second = apply(config)
    assert code == 0 and set(actions(second).values()) == {"replaced"}
    write_config(config, "edge.pf", lab.dut, TARGETS[2:])
    code, third = apply(config)
    assert actions(third) == {"xdp on dut": "unloaded", "tc on dut": "unloaded",
                              "nft on dut": "unchanged", "iptables on dut": "unchanged"}
    assert set(records(lab)) == {"nft", "iptables"}


def test_a_broken_config_keeps_the_previous_policy(lab, tmp_path):
    policy_file(tmp_path, POLICY, "edge.pf")
    config = write_config(tmp_path / "pfc.conf", "edge.pf", lab.dut)
    assert apply(config)[0] == 0
    before, kernel = records(lab), snapshot()
    policy_file(tmp_path, "count udp\ndrop udp dport\n", "edge.pf")
    code, out, err = pfc("apply", "--config", config)
    assert code == 1 and "edge.pf:2:15: error" in err and "previous policy stays" in err
    assert (records(lab), snapshot()) == (before, kernel)
    config.write_text("[[policy]\nfile = ")
    code, out, err = pfc("apply", "--config", config)
    assert code == 2 and "pfc.conf: " in err and "line 1" in err
    assert (records(lab), snapshot()) == (before, kernel)
    config.write_text("[[policy]]\nfile = \"edge.pf\"\nprio = " + "9" * 5000 + "\n")
    code, out, err = pfc("apply", "--config", config)  # tomllib: a ValueError, not 70
    assert code == 2 and "pfc.conf: not a valid config: Exceeds the limit" in err, err
    assert (records(lab), snapshot()) == (before, kernel)
    deliver(lab, [probe(lab, 1003, 1)])
    assert all(counters_of(e)[0][0] == 1 for e in status(lab))  # still filtering


def test_an_unreadable_config_says_so_and_nothing_else(lab, tmp_path, monkeypatch):
    """New-user finding m5: with policies loaded, a missing config, a config with an
    unknown key said "nothing to change: the config lists no policy and pfc has none
    loaded" (false twice), its JSON had no ``error``, and the key had no TOML line."""
    monkeypatch.setenv("PFC_LIB_DIR", str(tmp_path / "lib"))
    policy_file(tmp_path, POLICY, "edge.pf")
    config = write_config(tmp_path / "pfc.conf", "edge.pf", lab.dut, TARGETS[2:])
    assert apply(config)[0] == 0
    before, kernel = records(lab), snapshot()
    for path in (tmp_path / "nonexist.conf", tmp_path):  # missing; a directory
        code, out, err = pfc("apply", "--config", path)
        assert code == 2 and f"pfc apply: error: {path}: cannot read it" in err, err
        assert "nothing to change" not in out and "previous policy stays in force" in err
        assert out.splitlines()[-1] == "the config was not applied: nothing was changed " \
            "(what pfc loaded before stays in force)"
        code, out, _ = pfc("apply", "--config", path, "--format", "json")
        report = json.loads(out)
        assert code == 2 and report["exit"] == 2 and report["error"].startswith(str(path))
        assert {o["action"] for o in report["outcomes"]} == {"failed"}
        assert not report["changed"]
    text = config.read_text()
    config.write_text(text.replace('target = "iptables"', 'target = "iptables"\nbogus = 1'))
    code, out, err = pfc("apply", "--config", config)
    line = text.splitlines().index('target = "iptables"') + 2
    assert code == 2 and f"{config}:{line}: policy 2: unknown key `bogus`" in err, err
    config.write_text("colour = 1\n" + text)
    code, out, err = pfc("apply", "--config", config, "--dry-run")
    assert code == 2 and f"{config}:1: unknown key `colour`" in err, err
    assert "nothing to change" not in out
    config.write_text(text + text.split("\n\n")[0] + "\n")  # nft listed twice
    code, out, err = pfc("apply", "--config", config)
    assert code == 2 and f"{config}:{len(text.splitlines()) + 1}: policy 3: nft on dut" in err
    assert (records(lab), snapshot()) == (before, kernel)


# ------------------------------------------------------------------------ boot

def install_unit(root: Path) -> tuple[list[str], dict[str, str]]:
    """packaging/install-systemd into ``root``; the unit's ExecStart and Environment=,
    with /etc/pfc and /var/lib/pfc moved under ``root``."""
    run = subprocess.run([ROOT / "packaging" / "install-systemd"], capture_output=True,
                         text=True, env=os.environ | {"DESTDIR": str(root),
                                                      "PFC_BIN": str(PFC_BIN)})
    assert run.returncode == 0, run.stderr
    unit = (root / "etc/systemd/system/pfc.service").read_text()
    if shutil.which("systemd-analyze"):
        check = subprocess.run(["systemd-analyze", "verify",
                                root / "etc/systemd/system/pfc.service"],
                               capture_output=True, text=True)
        assert check.returncode == 0 and "pfc.service" not in check.stderr, check.stderr
    for key in ("Type=oneshot", "RemainAfterExit=yes", "Before=network-pre.target",
                "WantedBy=sysinit.target"):
        assert re.search(rf"^{re.escape(key)}", unit, re.MULTILINE), key
    moved = unit.replace("/etc/pfc", str(root / "etc/pfc")).replace(
        "/var/lib/pfc", str(root / "var/lib/pfc"))
    start = shlex.split(re.search(r"^ExecStart=(.*)$", moved, re.MULTILINE).group(1))
    env = dict(kv.split("=", 1) for kv in shlex.split(
        re.search(r"^Environment=(.*)$", moved, re.MULTILINE).group(1)))
    return start, env


def boot(name: str, start: list[str], env: dict[str, str], run_dir: Path):
    """A reboot of namespace ``name``: deleted (with everything in it) and created again
    with its veth pair, /run empty (a new state directory), then the unit's command."""
    with contextlib.suppress(OSError):
        pyroute_netns.remove(name)
    pyroute_netns.create(name)
    with netns.inside(name):
        lab = netns._make_pair(name)
    shutil.rmtree(run_dir, ignore_errors=True)
    done = subprocess.run(["ip", "netns", "exec", name, *start], capture_output=True,
                          text=True, env=os.environ | env | {"PFC_STATE_DIR": str(run_dir)})
    return lab, done


def test_a_reboot_brings_the_policy_back(tmp_path, monkeypatch):
    root, run_dir = tmp_path / "root", tmp_path / "run"
    start, env = install_unit(root)
    assert start[0] == str(PFC_BIN) and start[1:] == ["apply"]
    monkeypatch.setenv("PFC_STATE_DIR", str(run_dir))
    with netns.lab() as first:
        conf = root / "etc/pfc/pfc.conf"
        assert conf.read_text().startswith("# /etc/pfc/pfc.conf")  # the example
        policy_file(root / "etc/pfc", POLICY, "edge.pf")
        write_config(conf, "edge.pf", first.dut)
        for broken in (False, True):
            if broken:  # the config is broken by the next boot: the last good copy
                policy_file(root / "etc/pfc", "drop udp dport\n", "edge.pf")
            lab, done = boot(first.name, start, env, run_dir)
            assert done.returncode == int(broken), done.stdout + done.stderr
            with netns.inside(lab.name):
                assert {e["target"]: e["health"] for e in status(lab)} == dict.fromkeys(
                    ("xdp", "tc", "nft", "iptables"), "ok")
                if broken:
                    assert done.stdout.count("fell back to the last good copy") == 4
                deliver(lab, [probe(lab, 1001, 1), probe(lab, 1003, 2)])
                xdp = [e for e in status(lab) if e["target"] == "xdp"][0]
                assert counters_of(xdp)[0][0] == 2 and counters_of(xdp)[1][0] == 1
