"""``pfc status``: scope per namespace, records of namespaces and devices that are gone,
unreadable records, exit codes, rates, and output that user text cannot break.

Kernel tests in throw-away namespaces (``pfc.kernel.netns.lab``), each with its own
state directory; ``ip netns exec`` runs are real subprocesses.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys

import pytest

from pfc.cli import status as cmd_load
from pfc.deploy import load as loading
from pfc.kernel import bpf_attach, netns
from tests.deploy.test_load import (
    ROOT_REASON,
    counters_of,
    deliver,
    entry,
    load,
    pfc,
    policy_file,
    probe,
)

pytestmark = [pytest.mark.kernel,
              pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")]


def real(*argv: str, exec_in: str | None = None) -> subprocess.CompletedProcess:
    """``pfc ARGV`` as a real process (inside ``ip netns exec NS`` with ``exec_in``)."""
    prefix = ["ip", "netns", "exec", exec_in] if exec_in else []
    return subprocess.run([*prefix, sys.executable, "-m", "pfc.cli", *map(str, argv)],
                          capture_output=True, text=True)


def loaded(json_text: str) -> list[tuple[str, str]]:
    return [(e["netns"], e["target"]) for e in json.loads(json_text)["loaded"]]


# ----------------------------------------------------------------- namespaces

def test_status_is_scoped_to_the_current_namespace(lab, tmp_path):
    path = policy_file(tmp_path, "count udp\n")
    with netns.lab() as other:
        assert load(lab, "nft", [], path)[0] == 0
        assert load(other, "tc", [], path)[0] == 0
        inside = real("status", "--format", "json", exec_in=lab.name)
        assert inside.returncode == 0, inside.stderr
        assert loaded(inside.stdout) == [(lab.name, "nft")]
        assert loaded(pfc("status", "--netns", other.name, "--format", "json")[1]) == \
            [(other.name, "tc")]
        every = loaded(pfc("status", "--all", "--format", "json")[1])
        assert {(lab.name, "nft"), (other.name, "tc")} <= set(every)
        here = loaded(pfc("status", "--format", "json")[1])  # this thread is in `other`
        assert here == [(other.name, "tc")]
        host = json.loads(pfc("status", "--netns", "default", "--format", "json")[1])
        assert not {lab.name, other.name} & {ns for ns, _ in loaded(json.dumps(host))}
        assert {lab.name, other.name} <= set(host["elsewhere"])
        code, out, _ = pfc("status", "--netns", "default")
        assert "--all" in out
    code, _, err = pfc("status", "--netns", "pfc-no-such-ns")
    assert code == 2 and "network namespace `pfc-no-such-ns` does not exist" in err


def test_records_of_a_deleted_namespace_are_noted_and_pruned(tmp_path):
    path = policy_file(tmp_path, "count udp\n")
    with netns.lab() as gone:
        assert load(gone, "xdp", ["--mode", "generic"], path)[0] == 0
        assert load(gone, "iptables", [], path)[0] == 0
    with netns.lab() as here:
        assert load(here, "nft", [], path)[0] == 0
        code, out, _ = pfc("status", "--netns", here.name)
        assert code == 0 and gone.name not in out, out  # another namespace's: counted
        assert "note: 2 records of 1 deleted namespace (`pfc status --all` lists them, " \
            "`--prune` removes them)" in out
        code, out, _ = pfc("status", "--all")
        assert f"{gone.name} (iptables on dut, xdp on dut)" in out and "--prune" in out
        report = json.loads(pfc("status", "--netns", here.name, "--format", "json")[1])
        assert {(g["netns"], g["target"]) for g in report["gone"]} == \
            {(gone.name, "xdp"), (gone.name, "iptables")}
        code, _, err = pfc("status", "--netns", gone.name)
        assert code == 2 and "does not exist" in err and "--prune" in err
        code, out, _ = pfc("unload", "--target", "xdp", "--dev", "dut", "--netns", gone.name)
        assert code == 0 and "is gone" in out
        code, out, _ = pfc("status", "--netns", here.name, "--prune")
        assert code == 0 and f"removed 1 record of 1 deleted namespace: {gone.name}" in out
        code, out, _ = pfc("status", "--netns", here.name)
        assert gone.name not in out and "nft on dut" in out


def test_a_namespace_created_again_under_the_same_name_is_another_one(lab, tmp_path):
    path = policy_file(tmp_path, "count udp\n")
    assert load(lab, "nft", [], path)[0] == 0
    subprocess.run(["ip", "netns", "del", lab.name], check=True)
    subprocess.run(["ip", "netns", "add", lab.name], check=True)
    report = json.loads(pfc("status", "--all", "--format", "json")[1])
    assert (lab.name, "nft") in {(g["netns"], g["target"]) for g in report["gone"]}
    assert (lab.name, "nft") not in loaded(json.dumps(report))


# ------------------------------------------------------------------- devices

def test_a_deleted_device_is_noticed_by_every_target(lab, tmp_path):
    path = policy_file(tmp_path, "drop udp dport 1001\ncount udp\n")
    for target, extra in (("xdp", ["--mode", "generic"]), ("tc", []), ("nft", []),
                          ("iptables", [])):
        assert load(lab, target, extra, path)[0] == 0
    subprocess.run(["ip", "link", "del", "dut"], check=True)  # and its peer inj
    code, out, _ = pfc("status", "--netns", lab.name, "--format", "json")
    assert code == 3
    for e in json.loads(out)["loaded"]:
        assert e["health"] == "vanished" and "device dut no longer exists" in e["detail"]
    for target in ("nft", "iptables"):
        code, out, _ = pfc("unload", "--target", target, "--dev", "dut", "--netns",
                           lab.name)
        assert code == 0 and ("removed" in out or "deleted" in out), out
    assert "pfc" not in subprocess.run(["nft", "list", "tables"], capture_output=True,
                                       text=True).stdout
    assert "PFC" not in subprocess.run(["iptables-save"], capture_output=True,
                                       text=True).stdout


# ---------------------------------------------------------------- unreadable

def test_a_corrupt_record_gives_one_warning_and_unload_still_works(lab, tmp_path):
    path = policy_file(tmp_path, "count udp\ndrop udp dport 1001\n")
    assert load(lab, "xdp", ["--mode", "generic"], path)[0] == 0
    assert load(lab, "nft", [], path)[0] == 0
    from pfc.deploy import state

    state.path(lab.name, "dut", "xdp").write_text('{"target": "xdp", "dev": ')
    code, out, err = pfc("status", "--netns", lab.name)
    assert code == 4 and "nft on dut" in out
    warnings = [ln for ln in out.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and "xdp.json" in warnings[0] and "pfc unload" in warnings[0]
    assert [e["target"] for e in json.loads(pfc("status", "--netns", lab.name, "--format",
                                                "json")[1])["loaded"]] == ["nft"]
    code, out, _ = pfc("unload", "--target", "xdp", "--dev", "dut", "--netns", lab.name)
    assert code == 0 and "warning:" in out and "detached XDP program" in out
    with netns.inside(lab.name):
        assert bpf_attach.xdp_query(lab.dut_index).prog_id == 0
    assert not state.path(lab.name, "dut", "xdp").exists()
    assert pfc("status", "--netns", lab.name)[0] == 0


@pytest.mark.parametrize("dev", ["..", ".", "a/b", "../x"])
def test_device_names_that_are_paths_are_usage_errors(dev):
    for argv in (["unload", "--target", "xdp", "--dev", dev], ["status", "--dev", dev]):
        code, _, err = pfc(*argv)
        assert code == 2 and "invalid device name" in err and "Traceback" not in err


# ----------------------------------------------------------- rendering, rates

HOSTILE = ('drop udp payload[0:3] == "[/]"\n'
           'drop udp payload[0:6] == "[bold]"\n'
           'drop udp payload[0:16] == "[link=x]y[/link]"\n'
           'drop udp dst { 10.0.0.1, 10.0.0.2, 10.0.0.3, 10.0.0.4, 10.0.0.5, 10.0.0.6, '
           '10.0.0.7, 10.0.0.8 } dport { 1, 2, 3, 4 }\n')


def test_the_header_fits_80_columns(lab, tmp_path):
    """New-user finding m17: the load time and `(iptables-nft)` wrapped onto lines of
    their own at 80 columns; now each part of the header is a line of its own."""
    from rich.console import Console

    path = policy_file(tmp_path, "count udp\ndrop udp dport 53\n", "web.pf")
    assert load(lab, "iptables", [], path)[0] == 0
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(
        cmd_load.render(loading.report(netns=lab.name)))
    lines = out.getvalue().splitlines()
    assert all(len(ln) <= 80 for ln in lines), lines
    assert re.fullmatch(r"  chain PFC → PFC\.1 in raw PREROUTING \(iptables-(nft|legacy)\)",
                        lines[1]), lines
    assert re.fullmatch(r"  loaded \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00, sha256 "
                        r"[0-9a-f]{16}…", lines[3]), lines


def test_rule_text_is_never_markup_and_never_cut(lab, tmp_path):
    path = policy_file(tmp_path, HOSTILE, "odd\x1b[2Jname.pf")
    assert load(lab, "nft", [], path)[0] == 0
    report = loading.report(netns=lab.name)
    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(cmd_load.render(report))
    text = out.getvalue()
    assert "\x1b" not in text and "odd\\x1b[2Jname.pf" in text
    column = "".join(ln.split("│")[1].strip() for ln in text.splitlines()
                     if ln.count("│") >= 4)
    for rule in HOSTILE.splitlines():
        assert rule.replace(" ", "") in column.replace(" ", "")
    assert "…" not in column
    code, out, _ = pfc("status", "--netns", lab.name)  # the CLI: no MarkupError
    assert code == 0 and '"[/]"' in out and '"[bold]"' in out


def test_watch_shows_packets_per_second(lab, tmp_path, monkeypatch):
    assert load(lab, "tc", [], policy_file(tmp_path, "count udp\n"))[0] == 0
    clock, calls = [100.0], []

    def sleep(seconds):
        calls.append(seconds)
        if len(calls) == 1:
            deliver(lab, [probe(lab, 7, i) for i in range(6)])
            clock[0] += 2.0
        else:
            raise KeyboardInterrupt

    monkeypatch.setattr(cmd_load.time, "sleep", sleep)
    monkeypatch.setattr(cmd_load.time, "monotonic", lambda: clock[0])
    code, out, _ = pfc("status", "--watch", "--netns", lab.name, "--format", "json")
    first, second = (json.loads(line)["loaded"][0] for line in out.splitlines())
    assert code == 0 and first["rules"][0]["packets_per_s"] is None
    assert second["rules"][0]["packets"] == 6 and second["rules"][0]["packets_per_s"] == 3.0
    calls.clear()
    clock[0] = 100.0
    code, out, _ = pfc("status", "--watch", "--netns", lab.name)
    assert code == 0 and "pkt/s" in out and "3.0" in out


def test_counters_per_the_artifacts_counter_slots(lab, tmp_path, monkeypatch):
    """An artifact with ``counter_slots`` (contract-ebpf.md §1) is read through them:
    every slot named is shown, the default's and not_ready's too. The object here
    counts its count rules at slot = rule index; the meta maps them elsewhere."""
    from pfc import api

    real_compile = api.compile

    def with_slots(*args, **kwargs):
        artifact = real_compile(*args, **kwargs)
        artifact.meta["counter_slots"] = {"rules": {"0": 0, "1": 2}, "default": 2,
                                          "not_ready": 0}
        return artifact

    monkeypatch.setattr(api, "compile", with_slots)
    path = policy_file(tmp_path, "count udp\ndrop udp dport 1001\ncount udp\n")
    assert load(lab, "xdp", ["--mode", "generic"], path)[0] == 0
    deliver(lab, [probe(lab, 7, i) for i in range(4)])
    e = entry(lab, "xdp")
    assert counters_of(e) == {0: (4, 4 * 36), 1: (4, 4 * 36), "default": (4, 4 * 36)}
    assert e["not_ready"]["packets"] == 4 and 2 not in counters_of(e)
