"""``pfc set`` on xdp and tc: the set's map swapped in its ``ARRAY_OF_MAPS`` slot.

A 100k-entry replace under traffic judges every probe by the old set or the new one and
keeps the counters; a set the policy uses twice is replaced by reloading the policy;
a map changed outside pfc is read back by ``pfc status`` (exit 4) and repaired by
``pfc apply``; a ``pfc set`` killed between filling the new map and the swap leaves the
old contents in force, and the next command rolls it back and says so.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import random
import subprocess
import sys
import threading

import pytest

from pfc import api
from pfc.deploy import sets
from pfc.deploy.base import in_netns
from pfc.deploy.sets import contents
from pfc.kernel import bpf_attach, bpf_maps
from tests.deploy.test_load import ROOT_REASON, counters_of, deliver, entry, pfc
from tests.deploy.test_sets import STAY, _traffic, blocklist, blocklist_policy, from_

kernel = pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")
EXTRA = {"xdp": ["--mode", "generic"], "tc": []}


def load(lab, path, target: str) -> None:
    code, _, err = pfc("load", path, "--target", target, "--dev", lab.dut, "--netns",
                       lab.name, *EXTRA[target])
    assert code == 0, err


@kernel
@pytest.mark.kernel
@pytest.mark.parametrize("target", ["xdp", "tc"])
def test_100k_replace_under_traffic_swaps_the_map_and_keeps_counters(lab, tmp_path, target):
    rng = random.Random(11)
    load(lab, blocklist_policy(tmp_path, rng, 100_000), target)
    deliver(lab, [from_(lab, STAY, 0)])  # counted before: the counters are kept
    prog = entry(lab, target)["attach"]["prog_id"]
    new = blocklist(rng, 100_000) + [STAY]
    stop, sent = threading.Event(), [0]
    sender = threading.Thread(target=_traffic, args=(lab, stop, sent))
    sender.start()
    try:
        (change,) = api.set_entries("replace", "bl", new, lab.dut, target=target,
                                    netns=lab.name)
    finally:
        stop.set()
        sender.join()
    deliver(lab, [])
    print(f"{target}: 100k replace in {change.seconds:.2f} s; {sent[0]} probe pairs")
    assert change.how.startswith("map swap")
    assert change.size == len(contents.nets(sets.parse_entries("bl", new))[4])
    e = entry(lab, target)
    assert e["attach"]["prog_id"] == prog and e["health"] == "ok"  # same program
    assert sent[0] > 0 and counters_of(e)[0][0] == sent[0] + 1  # every STAY, no NEVER
    assert pfc("status", "--netns", lab.name)[0] == 0  # the map holds pfc's copy


@kernel
@pytest.mark.kernel
def test_a_set_used_twice_is_replaced_by_a_reload(lab, tmp_path):
    (tmp_path / "bl.txt").write_text("\n".join(blocklist(random.Random(4), 100)) + "\n")
    path = tmp_path / "two.pf"
    path.write_text('set bl = file "bl.txt"\ncount dst $bl\ndrop src $bl\n')
    load(lab, path, "tc")
    code, out, err = pfc("set", "add", "bl", STAY, "--dev", lab.dut, "--netns", lab.name)
    assert code == 0 and "policy replaced atomically" in out, err
    deliver(lab, [from_(lab, STAY, 1)])
    assert counters_of(entry(lab, "tc"))[1][0] == 1


def _zero_top_entry(lab, target: str, address: str) -> None:
    """Outside pfc: clear the bitmap's top entry holding ``address`` (its /24s gone)."""
    e = entry(lab, target)
    with in_netns(lab.name):
        outer = bpf_attach.prog_map_fd(e["attach"]["prog_id"], "pfc_r0_src4")
        inner = bpf_maps.slot_fd(outer)
        try:
            key = ctypes.c_uint32(int(ipaddress.IPv4Address(address)) >> 14)
            zero = ctypes.create_string_buffer(32)
            assert bpf_maps.lib().bpf_map_update_elem(inner, ctypes.byref(key), zero, 0) == 0
        finally:
            os.close(inner)
            os.close(outer)


@kernel
@pytest.mark.kernel
def test_status_reads_the_maps_back_and_apply_repairs_them(lab, tmp_path):
    blocklist_policy(tmp_path, 3, 2000)
    config = tmp_path / "pfc.conf"
    config.write_text(f'[[policy]]\nfile = "bl.pf"\ndev = "{lab.dut}"\ntarget = "xdp"\n'
                      'mode = "generic"\n')
    assert pfc("apply", "--config", config)[0] == 0
    assert pfc("status", "--netns", lab.name)[0] == 0
    _zero_top_entry(lab, "xdp", STAY)
    code, out, _ = pfc("status", "--netns", lab.name)
    assert code == 4 and "changed outside pfc: map pfc_r0_src4 (set bl)" in out, out
    code, out, err = pfc("apply", "--config", config)
    assert code == 0 and "repaired" in out, out + err
    assert pfc("status", "--netns", lab.name)[0] == 0
    deliver(lab, [from_(lab, STAY, 5)])
    assert counters_of(entry(lab, "xdp"))[0][0] == 1


@kernel
@pytest.mark.kernel
def test_a_set_killed_before_the_swap_leaves_the_old_contents(lab, tmp_path):
    path = blocklist_policy(tmp_path, 5, 2000)
    load(lab, path, "tc")
    proc = subprocess.run(
        [sys.executable, "-m", "pfc.cli", "set", "del", "bl", STAY, "--dev", lab.dut,
         "--netns", lab.name], env=os.environ | {"PFC_TEST_KILL_AT": "set-filled"},
        capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr  # SIGKILL between the fill and the swap
    code, out, _ = pfc("status", "--netns", lab.name)
    assert code == 0 and "rolled back the interrupted `pfc set del bl`" in out, out
    deliver(lab, [from_(lab, STAY, 1)])
    assert counters_of(entry(lab, "tc"))[0][0] == 1  # the old contents: STAY dropped
    code, out, err = pfc("set", "del", "bl", STAY, "--dev", lab.dut, "--netns", lab.name)
    assert code == 0 and "map swap" in out and "-1" in out, err
    assert pfc("status", "--netns", lab.name)[0] == 0
    deliver(lab, [from_(lab, STAY, 2)])
    assert counters_of(entry(lab, "tc"))[0][0] == 1


def test_bitmap_headroom_and_set_use_decide_in_place():
    """In place only for a set used once as a whole match value, each changed family
    with its own map, a bitmap with room for the new partial /24s."""
    from pfc.deploy.sets import ebpf
    from pfc.deploy.state import Record

    old = sets.parse_entries("bl", [f"10.0.{i}.1" for i in range(40)])
    new = sets.new_contents("add", old, sets.parse_entries("bl", ["10.9.9.9"]))
    lpm = {"name": "pfc_r0_src4", "inner": "pfc_r0_src4i", "set": "bl", "family": 4,
           "type": "lpm_trie", "key_size": 8}
    def record(m: dict) -> Record:
        return Record("xdp", "xdp", "dut", "ns", "p.pf", "", "", [], "pass",
                      {"set_maps": [m]})

    once, twice = 'set bl = file "x"\ndrop src $bl\n', 'set bl = file "x"\ndrop src $bl\n' \
        'drop dst $bl\n'
    assert ebpf.plan(record(lpm), once, "bl", old, new) == [
        (lpm, contents.prefixes(4, new[4]))]
    assert ebpf.plan(record(lpm), twice, "bl", old, new) is None
    six = sets.new_contents("add", old, sets.parse_entries("bl", ["2001:db8::1"]))
    assert ebpf.plan(record(lpm), once, "bl", old, six) is None  # no IPv6 map
    full = dict(lpm, type="ipv4_bitmap", leaf_capacity=40)
    assert ebpf.plan(record(full), once, "bl", old, new) is None  # 41 partial /24s


def test_the_prover_looks_a_set_up_through_its_slot(tmp_path):
    """``pfc prove`` executes the object: the lookup in the set's slot gives the inner
    LPM trie the maps file fills (a /24 bitmap it does not model, as before)."""
    from pfc.frontend.pipeline import compile_path
    from pfc.prove.run import prove_file

    (tmp_path / "s.txt").write_text("".join(f"10.0.{i}.{j}\n" for i in range(3)
                                            for j in range(0, 250, 7)) + "2001:db8::1\n")
    (tmp_path / "s.pf").write_text('set bl = file "s.txt"\ndrop src $bl\n')
    (proof,) = prove_file(compile_path(tmp_path / "s.pf"), ["xdp"], bound=128,
                          confirm=False)
    assert not proof.error and proof.proof.equal, proof.error
