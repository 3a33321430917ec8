"""The flow cache in front of the eBPF classifier (templates/ebpf/flowcache.c.j2).

A hit must do exactly what the miss path did for that key: the same verdict, the same
rewritten bytes, the same counters (the decider's or the default's, and every count
rule that held). Frames are sent several times, interleaved, with the test pinned to
one CPU (the cache is per CPU), so the second and later copies hit; a tiny cache makes
flows collide and evict each other; poisoned entries show the hits are served from the
cache; entries torn between two flows' writes (a check word that does not fit) are
never served; a frame that up to PFC_FC_K (12) count rules hold is cached, one that
more hold is not; a fresh, all-zero cache never hits.
"""

from __future__ import annotations

import ipaddress
import os
import random

import pytest

from pfc.backends.ebpf import run as ebpf_run
from pfc.backends.ebpf.classify import plan as classify_plan
from pfc.build import build_artifact
from pfc.frontend.pipeline import compile_text
from pfc.oracle import gen
from tests.backends.test_ebpf import kernel
from tests.backends.test_ebpf_classify import check, mixed_policy

CACHE = "pfc_flow_cache"
CHECK, DECIDE, NC, CS = 40, 48, 52, 56  # struct pfc_fc_entry: key[5], check, decide, nc, cs[]


def build(text: str, hook: str, cache=None):
    compiled = compile_text(text, "fc.pf")
    artifact, diags = build_artifact(compiled, hook, extra={"flow_cache": cache})
    assert artifact is not None and "classifier" in artifact.meta, diags[:3]
    return artifact


@pytest.fixture
def one_cpu():
    """The test on one CPU: every test run sees the same per-CPU cache."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    yield
    os.sched_setaffinity(0, before)


def repeated(frames: list[bytes], times: int, seed: int) -> list[bytes]:
    """Each frame ``times`` times: the first copies in order, the rest shuffled."""
    rest = frames * (times - 1)
    random.Random(seed).shuffle(rest)
    return frames + rest


def entries(artifact) -> list[tuple[int, bytes]]:
    """(slot, value) of every stored entry (tag bit set) on any CPU."""
    cache = ebpf_run.loaded(artifact).maps[CACHE]
    out = []
    for slot in range(cache.max_entries):
        for value in cache.lookup(slot):
            if int.from_bytes(value[:8], "little"):
                out.append((slot, value))
                break
    return out


V4_HOSTS = ["10.1.2.3", "10.1.2.4", "10.1.2.200", "192.168.7.9", "10.200.0.1", "1.2.3.4"]
V6_HOSTS = ["2001:db8:1::5", "2001:db8:1::6", "2001:db8:1:2::1", "2001:db8::1", "fe80::1",
            "::1", "8000::1"]
PORTS = [0, 22, 53, 80, 443, 1023, 1024, 5005, 8080, 65535]


def _put(frame: bytes, at: int, data: bytes) -> bytes:
    return frame[:at] + data + frame[at + len(data):]


def neighbours(frame: bytes, rng: random.Random) -> list[tuple[bytes, bytes]]:
    """Pairs of flows whose keys differ in one word: an untagged IPv4/IPv6 frame and
    a copy with an address changed to one the rules name, or a port to a rule's edge;
    for IPv6 also 2001:db8:1::5 against ::6 (the address's last 8 bytes alone)."""
    etype = frame[12:14]
    if etype == b"\x08\x00" and len(frame) >= 34:
        addrs, hosts, ports_at = (26, 30), V4_HOSTS, 14 + (frame[14] & 0xf) * 4
        transport = frame[23] in (6, 17)
    elif etype == b"\x86\xdd" and len(frame) >= 54:
        addrs, hosts, ports_at, transport = (22, 38), V6_HOSTS, 54, frame[20] in (6, 17)
    else:
        return []
    out = []
    for at in addrs:
        out.append((frame, _put(frame, at, ipaddress.ip_address(rng.choice(hosts)).packed)))
        if hosts is V6_HOSTS:
            low = [_put(frame, at, ipaddress.ip_address(f"2001:db8:1::{k}").packed)
                   for k in (5, 6)]
            out.append((low[0], low[1]))
    if transport and len(frame) >= ports_at + 4:
        for at in (ports_at, ports_at + 2):
            out.append((frame, _put(frame, at, rng.choice(PORTS).to_bytes(2, "big"))))
    return out


# ------------------------------------------------------------------------ no kernel

@kernel
def test_a_one_line_entry_with_two_count_rules_agrees(one_cpu):
    """``classify_tuning`` ``fc_counts`` 2 (benchmarks: the entry in one 64-byte cache
    line, no padding): a frame that more count rules hold is classified every time,
    the others hit; all agree with the interpreter."""
    counts = ["tcp", "ip dst 10.0.0.0/8", "udp", "ip src 10.0.0.0/8"]
    rules = mixed_policy(150, 28, "pass", redirect=False).split("\n", 1)[1]
    text = "default drop\n" + "".join(f"count {c}\n" for c in counts) + rules
    art, diags = build_artifact(compile_text(text, "fc.pf"), "xdp", extra={
        "flow_cache": 64, "classify_tuning": {"fc_counts": 2}})
    assert art is not None, diags[:3]
    fc = art.meta["classifier"]["flow_cache"]
    assert (fc["counts"], fc["entry_bytes"]) == (2, 64)
    frames = gen.sample(art.policy, 60, seed=11)
    check(art, repeated(frames, 3, seed=2))
    assert entries(art)


def test_the_knob():
    assert classify_plan.flow_cache(None).slots == classify_plan.FLOW_CACHE_SLOTS
    assert classify_plan.flow_cache(0) is None
    assert classify_plan.flow_cache("miss").defeat
    assert classify_plan.flow_cache(8).bits == 3
    assert classify_plan.flow_cache(1).bits == 0
    for bad in (-1, 3, 1 << 25):
        with pytest.raises(ValueError):
            classify_plan.flow_cache(bad)
    art = build(mixed_policy(140, 1, "pass"), "xdp")
    assert art.meta["classifier"]["flow_cache"]["bytes_per_cpu"] == 4096 * 128
    text = art.files["fc.xdp.c"].decode()
    assert "pfc_flow_cache SEC" in text and "| PFC_FC_TAG" in text
    off = build_artifact(compile_text(mixed_policy(140, 1, "pass"), "fc.pf"), "xdp", "c",
                         extra={"flow_cache": 0})[0]
    assert CACHE not in off.text and off.meta["classifier"]["flow_cache"] is None


# ---------------------------------------------------------------------- in the kernel

@kernel
@pytest.mark.parametrize("hook", ["xdp", "tc", "socket"])
def test_repeated_frames_hit_and_agree(hook, one_cpu):
    """300 rules (count and redirect rules, IPv4 and IPv6): 200 frames sent 3 times,
    interleaved: verdicts, rewritten bytes and every counter as the interpreter's."""
    art = build(mixed_policy(300, 21, "pass", redirect=hook != "socket"), hook)
    frames = gen.sample(art.policy, 200, seed=3)
    report = check(art, repeated(frames, 3, seed=1))
    assert report.seen > 500
    assert entries(art)  # the cache was filled


@kernel
@pytest.mark.parametrize(("hook", "cache"), [("xdp", 1), ("tc", 1), ("xdp", 2)])
def test_a_tiny_cache_stays_exact_under_collisions(hook, cache, one_cpu):
    """One or two slots per CPU; each flow followed by a copy with one key field
    changed (an address or a port), then all again shuffled: every lookup finds another
    flow's entry or its own; evictions and overwrites keep every verdict and counter
    exact, a key that differs in any one word misses, and a frame counted by more count
    rules than an entry holds is not cached."""
    rules = mixed_policy(200, 22, "drop").split("\n", 1)[1]
    counts = ["ip6 src 2001:db8:1::5", "ip6 dst 2001:db8:1::5", "ip", "tcp", "tcp dport 1-65535",
              "tcp sport 0-65535", "ip dst 10.0.0.0/8", "ip src 0.0.0.0/8"]  # tcp to 10/8: 5
    art = build("default drop\n" + "".join(f"count {c}\n" for c in counts) + rules, hook,
                cache=cache)
    rng = random.Random(6)
    frames = []
    for f in gen.sample(art.policy, 60, seed=4):
        for pair in neighbours(f, rng):  # side by side: they meet in a slot
            frames += pair
    head = bytes(12) + b"\x08\x00\x45\x00\x00\x14" + bytes(5) + b"\x06"
    frames += [head + bytes(2), head + bytes(6)]  # the source absent, then 0.0.0.0
    check(art, repeated(frames, 2, seed=2))
    assert 1 <= len(entries(art)) <= cache


def fields(value: bytes) -> tuple[list[int], int, list[int]]:
    """An entry's key words, decision and count rules."""
    key = [int.from_bytes(value[8 * i:8 * i + 8], "little") for i in range(5)]
    nc = int.from_bytes(value[NC:NC + 4], "little")
    cs = [int.from_bytes(value[CS + 4 * i:CS + 4 * i + 4], "little") for i in range(nc)]
    return key, int.from_bytes(value[DECIDE:DECIDE + 4], "little"), cs


def poison(value: bytes, checked: bool) -> bytes:
    """The entry with its decision's verdict flipped, and a check word that fits the new
    contents (``checked``: a whole entry another writer could have made) or the old
    one (a write torn between the decision and the check word)."""
    key, decide, cs = fields(value)
    act = decide >> 24
    flipped = (decide & 0xffffff) | ((1 if act != 1 else 0) << 24)
    word = classify_plan.fc_check(key, flipped, cs) if checked else \
        int.from_bytes(value[CHECK:CHECK + 8], "little")
    assert classify_plan.fc_check(key, decide, cs) == \
        int.from_bytes(value[CHECK:CHECK + 8], "little")  # what the program wrote
    return (value[:CHECK] + word.to_bytes(8, "little") + flipped.to_bytes(4, "little")
            + value[DECIDE + 4:])


@kernel
@pytest.mark.parametrize("checked", [True, False])
def test_hits_are_served_from_the_cache_only_when_whole(checked, one_cpu):
    """Poisoned entries (each decision replaced by the other verdict) with a check
    word that fits change what the program returns for their flows: the hits read the
    cache. With the writer's own check word left (a torn write), no poisoned entry is
    ever served: the program classifies and agrees. Emptied, it agrees again."""
    art = build(mixed_policy(200, 23, "pass", redirect=False), "xdp", cache=64)
    frames = gen.sample(art.policy, 40, seed=5)
    check(art, frames)
    cache = ebpf_run.loaded(art).maps[CACHE]
    stored = entries(art)
    assert stored
    for slot, value in stored:
        cache.update(slot, poison(value, checked))
    if checked:
        from pfc import backends
        from pfc.verifier.equiv import compare

        report = compare(art, backends.get("xdp"), frames)
        assert any(m.what == "verdict" for m in report.mismatches)
    else:
        check(art, frames)
    cache.reset()
    check(art, frames)


@kernel
@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_entries_torn_between_two_flows_are_never_served(hook, one_cpu):
    """Two flows' entries in one slot, mixed word by word as two writers that preempt
    each other would leave them: the key of one with the decision, count rules or check
    word of the other, and the reverse. Whatever the mixture, each flow's next packet
    gets the interpreter's verdict and counters (a mixture is a miss)."""
    counts = ["tcp", "ip dst 10.0.0.0/8", "udp", "ip src 10.0.0.0/8"]
    rules = mixed_policy(150, 26, "pass", redirect=False).split("\n", 1)[1]
    art = build("default drop\n" + "".join(f"count {c}\n" for c in counts) + rules, hook,
                cache=1)
    frames = gen.sample(art.policy, 80, seed=9, malformed=False)
    cache = ebpf_run.loaded(art).maps[CACHE]
    whole = []
    for f in frames:
        check(art, [f])
        got = [v for v in cache.lookup(0) if int.from_bytes(v[:8], "little")]
        if got:
            whole.append((f, got[0]))
    pairs = [(a, b) for a, b in zip(whole, whole[1:], strict=False)
             if fields(a[1])[1:] != fields(b[1])[1:]]
    assert len(pairs) >= 5
    cuts = (CHECK, DECIDE, NC, CS, CHECK + 8)  # where a writer may have been preempted
    for (fa, va), (fb, vb) in pairs[:12]:
        for lo, hi in [(c, 128) for c in cuts] + [(CHECK, CHECK + 8), (DECIDE, CS)]:
            for (f, mine), other in (((fa, va), vb), ((fb, vb), va)):
                torn = mine[:lo] + other[lo:hi] + mine[hi:]
                if torn == mine or torn == other:
                    continue
                cache.update(0, torn)
                check(art, [f])


@kernel
@pytest.mark.parametrize("hook", ["xdp", "tc", "socket"])
def test_more_than_four_count_rules_are_cached(hook, one_cpu):
    """A frame that 12 count rules hold is cached on xdp and tc (PFC_FC_K 12; a socket
    filter keeps 8) and its hits count each of them; one that more hold (23 here) is not
    cached, and is counted exactly every time all the same."""
    def nets(addr: str, lengths) -> list[str]:
        return [str(ipaddress.ip_network(f"{addr}/{n}", strict=False)) for n in lengths]

    many = [f"ip dst {n}" for n in nets("10.3.9.9", range(8, 17))]
    many += ["tcp", "ip", "tcp dport 0-1000"]
    more = [f"ip src {n}" for n in nets("172.16.5.1", range(8, 28))]
    rules = mixed_policy(150, 27, "pass", redirect=False).split("\n", 1)[1]
    text = "default pass\n" + "".join(f"count {c}\n" for c in many + more) + rules
    art = build(text, hook, cache=1)
    eth = bytes(12) + b"\x08\x00"

    def tcp(src: str, dst: str) -> bytes:
        from pfc.oracle import framebuild as fb

        s, d = ipaddress.ip_address(src).packed, ipaddress.ip_address(dst).packed
        return eth[:12] + fb.ETH_IP4.to_bytes(2, "big") + fb.ipv4(
            s, d, 6, fb.tcp(s, d, 4000, 80, 0x02, b""))

    cached = tcp("192.0.2.1", "10.3.9.9")      # 9 destination prefixes, tcp, ip, dport
    uncached = tcp("172.16.5.1", "192.0.2.9")  # 20 source prefixes, tcp, ip, dport
    for frame, held in ((cached, 12), (uncached, 23)):
        report = check(art, [frame] * 3)
        assert report.seen == 3
        got = [v for v in ebpf_run.loaded(art).maps[CACHE].lookup(0)
               if int.from_bytes(v[:8], "little")]
        assert art.meta["classifier"]["flow_cache"]["counts"] == (8 if hook == "socket" else 12)
        if held == 12 and hook != "socket":
            assert got and len(fields(got[0])[2]) == held
        else:
            assert not got


@kernel
@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_the_zero_entry_never_hits(hook):
    """A fresh cache is all zeros: an entry whose decision would be rule 0 (a drop).
    Frames whose every field is absent or zero (not IP, runts, truncated headers,
    all-zero addresses and ports) still get the interpreter's verdict: the default."""
    rules = mixed_policy(150, 24, "pass").split("\n", 1)[1]
    art = build("default pass\ndrop tcp dst 10.9.9.9 dport 1\n" + rules, hook)
    eth = bytes(12)
    frames = [eth + b"\x08\x06" + bytes(28),                   # ARP: not IP
              eth + b"\x08\x00",                                 # IPv4, nothing after
              eth + b"\x08\x00" + bytes(9),                      # IPv4, no protocol byte
              eth + b"\x08\x00" + b"\x45" + bytes(19),           # IPv4, proto 0, 0.0.0.0
              eth + b"\x86\xdd" + b"\x60" + bytes(39),           # IPv6, all zero
              eth + b"\x08\x00" + b"\x45\x00\x00\x28" + bytes(5) + b"\x06" + bytes(30)]
    frames = [f for f in frames if len(f) >= 14]
    report = check(art, frames)
    assert report.counters_got.get(art.policy.rules[0].index, (0, 0))[0] == 0


@kernel
def test_pfc_set_on_a_classified_policy_is_seen_by_the_next_packet(tmp_path, monkeypatch):
    """The classifier's maps never change after load (its set is part of its tables), so
    ``pfc set`` replaces the whole program, cache included: a flow cached as passed is
    dropped on its next packet once its source joins the set."""
    from pfc.kernel import netns
    from tests.deploy import test_load as dl
    from tests.deploy.test_sets import STAY, from_

    monkeypatch.setenv("PFC_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "bl.txt").write_text("10.99.0.1\n")
    rules = mixed_policy(150, 25, "pass", redirect=False).split("\n", 1)[1]
    path = tmp_path / "cls.pf"
    path.write_text('default pass\nset bl = file "bl.txt"\ndrop src $bl\n' + rules)
    with netns.lab() as lab:
        code, _, err = dl.pfc("load", path, "--target", "tc", "--dev", lab.dut, "--netns",
                              lab.name)
        assert code == 0, err
        from pfc.frontend.pipeline import compile_path

        assert "classifier" in build_artifact(compile_path(path), "tc", "c")[0].meta
        dl.deliver(lab, [from_(lab, STAY, k) for k in range(3)])  # the flow is cached
        assert dl.counters_of(dl.entry(lab, "tc"))[0][0] == 0
        code, out, err = dl.pfc("set", "add", "bl", STAY, "--dev", lab.dut, "--netns",
                                lab.name)
        assert code == 0 and "policy replaced atomically" in out, (out, err)
        dl.deliver(lab, [from_(lab, STAY, 3)])
        assert dl.counters_of(dl.entry(lab, "tc"))[0][0] == 1  # dropped by rule 0
