"""``pfc set add|del|replace``: the new contents (add, delete by coverage, replace),
and in the kernel: an nft set replaced with 100k entries under traffic (no packet
judged by neither set, counters kept), an ipset swapped, eBPF by an atomic replace."""

from __future__ import annotations

import ipaddress
import random
import subprocess
import threading

import pytest

from pfc import api
from pfc.deploy import sets
from pfc.deploy.base import LoadError
from pfc.deploy.sets import contents, nft
from pfc.kernel import netns, nfnl
from pfc.oracle import framebuild as fb
from tests.deploy.test_load import (
    ROOT_REASON,
    counters_of,
    deliver,
    entry,
    pfc,
    policy_file,
    status,
)

kernel = pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")


def members(contents: dict) -> set[tuple[int, int]]:
    return {(v, a) for v in (4, 6) for lo, hi in contents[v] for a in range(lo, hi + 1)}


def test_contents_add_del_replace_match_address_sets():
    rng = random.Random(7)
    pool = [f"10.0.{rng.randrange(4)}.{rng.randrange(256)}" for _ in range(300)]
    old = sets.parse_entries("s", pool[:200] + ["10.0.9.0/24", "2001:db8::/126", "# c", ""])
    given = sets.parse_entries("s", pool[100:] + ["10.0.9.128/25 # half", "2001:db8::1"])
    want_old, want_given = members(old), members(given)
    assert members(sets.new_contents("add", old, given)) == want_old | want_given
    assert members(sets.new_contents("del", old, given)) == want_old - want_given
    assert members(sets.new_contents("replace", old, given)) == want_given
    merged = contents.nets(sets.parse_entries("s", ["10.0.0.0/25", "10.0.0.128/25"]))
    assert [sets.text(n) for n in merged[4]] == ["10.0.0.0/24"]
    with pytest.raises(LoadError, match="entry 2 `10.0.0.300`"):
        sets.parse_entries("s", ["10.0.0.1", "10.0.0.300"])
    with pytest.raises(LoadError, match="address sets only"):
        sets.parse_entries("s", ["80"])


@pytest.mark.parametrize("entry", ["10.0.0.0/" + "0" * 4300 + "8", "10.0.0.0/" + "9" * 5000,
                                   "10.0.0.0/²", "::/" + "1" * 65])
def test_a_huge_or_strange_prefix_length_is_a_bad_entry_shown_short(entry):
    """As the compiler reads a set file (at most 64 ASCII digits): a LoadError naming
    the entry in ~40 characters, never a ValueError (exit 70) or the entry in full."""
    with pytest.raises(LoadError) as exc:
        sets.parse_entries("s", ["10.0.0.1", entry])
    assert "entry 2 `" in str(exc.value) and len(str(exc.value)) < 200
    assert sets.parse_entries("s", ["10.0.0.0/0008"])[4] == [(0x0A000000, 0x0AFFFFFF)]


def test_nft_changes_are_element_deltas_in_one_transaction():
    """Interval sets hold a start and an end element per range (and a leading end at
    address 0), as libnftables encodes them; a change deletes the elements that go and
    adds those that come; a set of addresses expands small prefixes, refuses large
    ones (the caller reloads), as it does a family without a set (in the rules)."""
    def ip(x: str, flag: int = 0):
        return ipaddress.ip_address(x).packed, flag

    old = sets.parse_entries("s", ["10.0.0.1", "10.0.0.3", "2001:db8::1"])
    less = sets.parse_entries("s", ["10.0.0.1", "2001:db8::1"])
    more = sets.parse_entries("s", ["10.0.0.1", "10.0.0.3", "10.0.0.7/31", "2001:db8::1"])
    interval = {"s4": nfnl.SetInfo(True, 4), "s6": nfnl.SetInfo(True, 16)}
    end = nfnl.NFT_SET_ELEM_INTERVAL_END
    assert nfnl.interval_elements(old[4], 4) == [ip("0.0.0.0", end), ip("10.0.0.1"),
                                                 ip("10.0.0.2", end), ip("10.0.0.3"),
                                                 ip("10.0.0.4", end)]
    assert nft.steps("s", old, less, interval) == [
        ("delete", "s4", [ip("10.0.0.3"), ip("10.0.0.4", end)])]
    assert nft.steps("s", old, more, interval) == [
        ("add", "s4", [ip("10.0.0.6"), ip("10.0.0.8", end)])]
    grown = sets.parse_entries("s", ["10.0.0.1", "10.0.0.3/31", "2001:db8::1"])
    assert nft.steps("s", old, grown, interval) == [  # whole ranges, never a lone end
        ("delete", "s4", [ip("10.0.0.1"), ip("10.0.0.2", end), ip("10.0.0.3"),
                          ip("10.0.0.4", end)]),
        ("add", "s4", [ip("10.0.0.1"), ip("10.0.0.4", end)])]
    hashed = {"s4": nfnl.SetInfo(False, 4), "s6": nfnl.SetInfo(False, 16)}
    assert nft.steps("s", old, more, hashed) == [
        ("add", "s4", [ip("10.0.0.6"), ip("10.0.0.7")])]
    big = sets.parse_entries("s", ["10.0.0.1", "10.1.0.0/16", "2001:db8::1"])
    assert nft.steps("s", old, big, hashed) is None
    assert nft.steps("s", old, less, {"s6": interval["s6"]}) is None  # in the rules
    assert nft.steps("s", old, old, {}) == []


def test_uses_counts_whole_value_matches_only():
    assert contents.uses('set bl = file "x"\ndrop src $bl\n', "bl") == 1
    assert contents.uses('set bl = file "x"\ndrop src $bl\npass !dst $bl\n', "bl") == 2
    assert contents.uses('set bl = file "x"\ndrop src { $bl, 1.2.3.4 }\n', "bl") is None
    assert contents.uses('set bl = file "x"\ndefine b = $bl\ndrop src $b\n', "bl") is None


# ------------------------------------------------------------------------ kernel

STAY, NEVER = "10.99.0.7", "10.99.0.1"  # in both sets; in neither


def blocklist(rng: random.Random, n: int) -> list[str]:
    out = set()
    while len(out) < n:
        x = rng.getrandbits(32) & 0xDFFFFFFF | 0x01000000
        if x >> 16 != 0x0A63:  # keep 10.99/16 for the probes
            out.add(str(ipaddress.IPv4Address(x)))
    return sorted(out)


def blocklist_policy(tmp_path, seed, n: int):
    """``drop src $bl`` over ``n`` random addresses and STAY, from a set file."""
    rng = seed if isinstance(seed, random.Random) else random.Random(seed)
    (tmp_path / "bl.txt").write_text("\n".join(blocklist(rng, n) + [STAY]) + "\n")
    return policy_file(tmp_path, 'set bl = file "bl.txt"\ndrop src $bl\n', "bl.pf")


def from_(lab, src: str, seq: int) -> bytes:
    s, d = ipaddress.IPv4Address(src).packed, bytes([10, 1, 0, 1])
    udp = fb.udp(s, d, 9, 1003, seq.to_bytes(8, "big"))
    return fb.ethernet(lab.dut_mac, lab.inj_mac, fb.ETH_IP4, fb.ipv4(s, d, 17, udp))


def _traffic(lab, stop: threading.Event, sent: list[int]) -> None:
    with netns.inside(lab.name):
        inj = netns.Injector(lab.inj)
        try:
            while not stop.is_set():
                inj.send(from_(lab, STAY, sent[0]))
                inj.send(from_(lab, NEVER, sent[0]))
                sent[0] += 1
        finally:
            inj.close()


@kernel
@pytest.mark.kernel
def test_nft_100k_replace_under_traffic_loses_nothing(lab, tmp_path):
    rng = random.Random(1)
    path = blocklist_policy(tmp_path, rng, 100_000)
    assert pfc("load", path, "--target", "nft", "--dev", lab.dut, "--netns", lab.name)[0] == 0
    deliver(lab, [from_(lab, STAY, 0)])  # counted before: the counters are kept
    new = blocklist(rng, 100_000) + [STAY]
    stop, sent = threading.Event(), [0]
    sender = threading.Thread(target=_traffic, args=(lab, stop, sent))
    sender.start()
    try:
        (change,) = api.set_entries("replace", "bl", new, lab.dut, target="nft",
                                    netns=lab.name)
    finally:
        stop.set()
        sender.join()
    deliver(lab, [])
    collapsed = contents.nets(sets.parse_entries("bl", new))
    assert change.how == "nft transaction" and change.size == len(collapsed[4])
    print(f"nft: 100k replace in {change.seconds:.2f} s; {sent[0]} probe pairs meanwhile")
    dropped = counters_of(entry(lab, "nft"))[0][0]
    assert sent[0] > 0 and dropped == sent[0] + 1  # every STAY dropped, no NEVER dropped
    listed = netns_nft(lab, "list set netdev pfc bl4")
    assert listed.count(",") + 1 == len(new) and new[0] in listed


def netns_nft(lab, command: str) -> str:
    import subprocess

    return subprocess.run(["ip", "netns", "exec", lab.name, "nft", *command.split()],
                          capture_output=True, text=True, check=True).stdout


@kernel
@pytest.mark.kernel
@pytest.mark.parametrize("target", ["iptables", "xdp"])
def test_set_changes_in_place_or_by_atomic_replace(lab, tmp_path, target):
    path = blocklist_policy(tmp_path, 2, 2000)
    extra = ["--mode", "generic"] if target == "xdp" else []
    assert pfc("load", path, "--target", target, "--dev", lab.dut, "--netns", lab.name,
               *extra)[0] == 0
    code, out, err = pfc("set", "del", "bl", STAY, "--dev", lab.dut, "--netns", lab.name)
    assert code == 0, err
    assert ("ipset swap" if target == "iptables" else "map swap (atomic; counters kept)") in out
    deliver(lab, [from_(lab, STAY, 1)])
    assert counters_of(entry(lab, target))[0][0] == 0  # no longer in the set
    code, out, err = pfc("set", "add", "bl", f"{STAY}/32", "--dev", lab.dut, "--netns",
                         lab.name, "-t", target)
    assert code == 0 and "+1 -0" in out, err
    deliver(lab, [from_(lab, STAY, 2)])
    assert counters_of(entry(lab, target))[0][0] == 1
    code, _, err = pfc("set", "add", "nosuch", "1.2.3.4", "--dev", lab.dut, "--netns",
                       lab.name)
    assert code == 2 and "no `set nosuch = file" in err


@kernel
@pytest.mark.kernel
@pytest.mark.parametrize("target", ["nft", "iptables"])
def test_status_sees_a_set_changed_outside_pfc_and_apply_repairs_it(lab, tmp_path, target):
    import subprocess

    blocklist_policy(tmp_path, 3, 2000)
    config = tmp_path / "pfc.conf"
    config.write_text(f'[[policy]]\nfile = "bl.pf"\ndev = "{lab.dut}"\ntarget = "{target}"\n')
    assert pfc("apply", "--config", config)[0] == 0
    assert pfc("status", "--netns", lab.name)[0] == 0
    (e,) = status(lab)
    sname = "pfc bl4" if target == "nft" else e["attach"]["sets"][0]
    cmd = (["nft", "delete", "element", "netdev", *sname.split(), "{", STAY, "}"]
           if target == "nft" else ["ipset", "del", sname, STAY])
    subprocess.run(["ip", "netns", "exec", lab.name, *cmd], check=True)
    code, out, _ = pfc("status", "--netns", lab.name)
    assert code == 4 and "changed outside pfc: set" in out and "-1" in out, out
    code, out, err = pfc("apply", "--config", config)
    assert code == 0 and "repaired" in out, out + err
    assert pfc("status", "--netns", lab.name)[0] == 0
    deliver(lab, [from_(lab, STAY, 5)])
    assert counters_of(entry(lab, target))[0][0] == 1


@kernel
@pytest.mark.kernel
def test_an_nft_set_killed_before_pfc_wrote_its_copy_is_finished_by_the_next(lab, tmp_path):
    """Killed after the transaction, before pfc's record and copy: the kernel holds the
    new set; the next command (status) finds the marker, checks the kernel's set and
    commits the new contents, and says so; the same command again changes nothing."""
    import os
    import sys

    path = blocklist_policy(tmp_path, 6, 2000)
    assert pfc("load", path, "--target", "nft", "--dev", lab.dut, "--netns", lab.name)[0] == 0
    argv = ["set", "del", "bl", STAY, "--dev", lab.dut, "--netns", lab.name]
    proc = subprocess.run([sys.executable, "-m", "pfc.cli", *argv],
                          env=os.environ | {"PFC_TEST_KILL_AT": "set-changed"},
                          capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    code, out, _ = pfc("status", "--netns", lab.name)
    assert code == 0 and "finished the interrupted `pfc set del bl`" in out, out
    assert "hold its new contents (checked)" in out
    deliver(lab, [from_(lab, STAY, 1)])
    assert counters_of(entry(lab, "nft"))[0][0] == 0  # the new set: STAY passes
    code, out, err = pfc(*argv)
    assert code == 0 and "nft transaction" in out and "+0 -0" in out, err
    assert pfc("status", "--netns", lab.name)[0] == 0


@kernel
@pytest.mark.kernel
def test_nft_interval_set_deltas_match_the_copy(lab, tmp_path):
    """An interval set (prefixes): additions that merge with neighbours, a deletion
    that splits a prefix, a replace; after each the kernel's elements are pfc's copy
    (status 0) and a probe is judged by the new contents."""
    nets = [f"10.{i}.0.0/16" for i in range(1, 40)] + ["10.99.0.0/30", "192.0.2.9"]
    (tmp_path / "bl.txt").write_text("\n".join(nets) + "\n")
    path = policy_file(tmp_path, 'set bl = file "bl.txt"\ndrop src $bl\n', "bl.pf")
    assert pfc("load", path, "--target", "nft", "--dev", lab.dut, "--netns", lab.name)[0] == 0
    steps = [("add", ["10.99.0.4/30", "10.0.255.255"], STAY, 1),  # merges 10.99.0.0/29
             ("del", ["10.99.0.6", "10.5.128.0/17"], STAY, 2),  # splits a prefix
             ("del", [STAY], STAY, 2), ("add", ["10.99.0.0/16"], STAY, 3),
             ("replace", ["10.99.0.7", "10.200.0.0/16"], STAY, 4),
             ("replace", nets, STAY, 4)]
    for op, entries, probe, dropped in steps:
        code, out, err = pfc("set", op, "bl", *entries, "--dev", lab.dut, "--netns",
                             lab.name)
        assert code == 0 and "nft transaction" in out, (op, entries, err)
        assert pfc("status", "--netns", lab.name)[0] == 0, (op, entries)
        deliver(lab, [from_(lab, probe, dropped)])
        assert counters_of(entry(lab, "nft"))[0][0] == dropped, (op, entries)
