"""Large address sets of the eBPF targets: LPM_TRIE maps filled at load time.

What the plan builds (collapsed, disjoint prefixes; one map per rule, match and family),
what the artifact carries (``STEM.HOOK.maps.json``, ``meta["maps"]``), that the object
stays small whatever the set's size, that every loader fills the maps (test runs
against the interpreter on all three hooks, ``pfc load``, ``bpftool batch``), and that
``group_runs`` turns a blocklist written as rules into one map.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import secrets
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from pfc.backends.ebpf import backend as ebpf
from pfc.backends.ebpf import maps as ebpf_maps
from pfc.backends.ebpf import plan as ebpf_plan
from pfc.build import build_artifact, write_artifact
from pfc.frontend.pipeline import compile_path
from pfc.kernel import bpf
from pfc.oracle import framebuild as fb
from pfc.oracle import gen
from tests.backends.test_ebpf import HEADER_EDGES, _ip4, build, check, kernel
from tests.deploy import test_load
from tests.deploy.test_load import counters_of, deliver, entry, load, policy_file

isolated = test_load.isolated  # autouse: own state and pin directories
lab = test_load.lab  # a throw-away namespace with a veth pair

HOOKS = ebpf.HOOKS


def _nets(n: int, seed: int) -> list[str]:
    """n prefixes, IPv4 (2/3) and IPv6 (1/3): hosts and shorter prefixes, with nested,
    overlapping and adjacent ones."""
    rng = random.Random(seed)
    nets = {str(ipaddress.ip_network((rng.getrandbits(32), rng.choice([32, 32, 24, 30, 16])),
                                     strict=False)) for _ in range(n * 2 // 3)}
    nets |= {str(ipaddress.ip_network((rng.getrandbits(128), rng.choice([128, 64, 48])),
                                      strict=False)) for _ in range(n // 3)}
    nets |= {"10.0.0.0/24", "10.0.1.0/24", "10.0.0.128/25", "10.0.0.7",  # adjacent, nested
             "2001:db8::/32", "2001:db8:1::/48", "2001:db9::1"}
    return sorted(nets)


def _define(name: str, nets: list[str]) -> str:
    return f"define {name} = {{ " + ", ".join(nets) + " }\n"


def _edges(nets) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    out = []
    for net in nets:
        top = 2 ** net.max_prefixlen - 1
        for addr in (int(net.network_address), int(net.broadcast_address)):
            out += [a for a in (addr - 1, addr, addr + 1) if 0 <= a <= top]
    return [ipaddress.ip_address(a) if net.version == 4 else ipaddress.IPv6Address(a)
            for a in out]


def _frame(addr, field: str) -> bytes:
    """A UDP (IPv4) or IPv6 frame with ``addr`` as source or destination."""
    if addr.version == 4:
        base, off = _ip4(), 26 if field == "src" else 30
        return base[:off] + addr.packed + base[off + 4:]
    six = HEADER_EDGES["IPv6 plain"]
    off = 22 if field == "src" else 38
    return six[:off] + addr.packed + six[off + 16:]


# ------------------------------------------------------------------------ no kernel

def test_collapse_is_ipaddress_collapse_on_integers():
    rng = random.Random(5)
    for _ in range(500):
        bits = rng.choice([32, 128])
        cls = ipaddress.IPv4Network if bits == 32 else ipaddress.IPv6Network
        nets = [cls((rng.getrandbits(4) << (bits - 4) if rng.random() < 0.5
                     else rng.getrandbits(bits), rng.choice([0, 1, 3, bits - 1, bits, 24])),
                    strict=False) for _ in range(rng.randint(1, 30))]
        got = [cls(p) for p in ebpf_plan.collapse(nets)]
        assert got == list(ipaddress.collapse_addresses(nets))


def test_short_lists_stay_inline_long_ones_become_maps():
    small = [f"10.0.{i}.1" for i in range(ebpf_plan.INLINE_PREFIXES_MAX)]
    art = build(_define("s", small) + "drop src $s\n", "xdp", "c")
    assert "LPM_TRIE" not in art.text and "maps" not in art.meta
    assert list(art.files) == ["gen.xdp.c"]
    big = small + ["10.1.0.1"]
    art = build(_define("s", big) + "drop src $s\ndrop dst $s\n", "xdp", "c")
    assert art.text.count("BPF_MAP_TYPE_ARRAY_OF_MAPS") == 2
    assert "pfc_r0_src4" in art.text and "pfc_r1_dst4" in art.text
    assert art.meta["maps"]["pfc_r0_src4i"] == {"type": "lpm_trie", "family": 4,
                                                "key_size": 8, "value_size": 1,
                                                "entries": 33}
    assert art.meta["maps"]["pfc_r0_src4"]["type"] == "array_of_maps"
    assert list(art.files) == ["gen.xdp.c", "gen.xdp.maps.json"]


def test_a_long_list_that_merges_into_few_prefixes_is_tested_inline():
    """1,000 adjacent hosts are 15 prefixes once merged: word tests, no map."""
    hosts = [str(ipaddress.IPv4Address(0x0A000001 + i)) for i in range(1000)]
    art = build(_define("s", hosts) + "drop src $s\n", "xdp", "c")
    assert "maps" not in art.meta and "LPM_TRIE" not in art.text
    merged = ebpf_plan.collapse([ipaddress.ip_network(h) for h in hosts])
    assert len(merged) == 15


def test_maps_file_holds_the_collapsed_prefixes_of_each_family():
    nets = _nets(300, 1)
    art = build(_define("a", nets) + "drop src $a\n", "tc", "c")
    records = {r["name"]: r for r in ebpf_maps.maps_of(art)}
    assert set(records) == {"pfc_r0_src4", "pfc_r0_src6"}
    for version, record in ((4, records["pfc_r0_src4"]), (6, records["pfc_r0_src6"])):
        mine = [ipaddress.ip_network(n) for n in nets]
        want = list(ipaddress.collapse_addresses(n for n in mine if n.version == version))
        assert [ipaddress.ip_network(p) for p in record["prefixes"]] == want
        assert record["max_entries"] == len(want) == art.meta["maps"][record["inner"]]["entries"]
        assert record["key_size"] == (8 if version == 4 else 20)
    assert len(ebpf_maps.lpm_keys(records["pfc_r0_src6"])) == 20 * len(
        records["pfc_r0_src6"]["prefixes"])
    assert "10.0.0.0/23" in records["pfc_r0_src4"]["prefixes"]  # adjacent, nested merged


def test_a_field_given_twice_is_one_map_of_the_intersection():
    """The checker merges ``src $a src $b`` into one match (both must hold)."""
    a = [f"10.0.{i}.0/24" for i in range(80)] + [f"10.{i}.0.0/16" for i in range(2, 40)]
    b = [f"10.0.{i}.1" for i in range(120)] + [f"10.1.{i}.0/24" for i in range(40)]
    art = build(_define("a", a) + _define("b", b) + "drop src $a src $b\n", "xdp", "c")
    assert set(art.meta["maps"]) == {"pfc_r0_src4", "pfc_r0_src4i"}
    [record] = ebpf_maps.maps_of(art)
    assert [ipaddress.ip_network(p) for p in record["prefixes"]] == [
        ipaddress.ip_network(f"10.0.{i}.1/32") for i in range(80)]


def test_object_stays_small_whatever_the_set_size(tmp_path):
    rng = random.Random(20)
    nets = sorted({str(ipaddress.ip_network((rng.getrandbits(32), rng.choice([32, 24])),
                                            strict=False)) for _ in range(20000)})
    (tmp_path / "block.txt").write_text("\n".join(nets) + "\n")
    (tmp_path / "big.pf").write_text('set block = file "block.txt"\ndrop src $block\n')
    for hook in HOOKS:
        art, diags = build_artifact(compile_path(tmp_path / "big.pf"), hook)
        assert art is not None, diags
        assert len(art.files[f"big.{hook}.o"]) < 24_000
        assert len(art.files[f"big.{hook}.c"]) < 8_000
        data = json.loads(art.files[f"big.{hook}.maps.json"])
        (record,) = data["maps"]
        assert data["format"] == ebpf_maps.FORMAT and record["type"] == "ipv4_bitmap"
        assert len(record["prefixes"]) > 19_000
    (tmp_path / "out").mkdir()
    paths = [p.name for p in write_artifact(art, tmp_path / "out")]
    assert paths == [f"big.{hook}.o", f"big.{hook}.c", f"big.{hook}.clang.txt",
                     f"big.{hook}.maps.json"]


def test_a_blocklist_written_as_rules_is_one_map():
    lines = "".join(f"drop src 10.{i // 250}.{i % 250}.9\n" for i in range(1000))
    art = build(lines + "count udp\ndrop src 192.0.2.1\n", "xdp", "c")
    assert len(art.policy.rules) == 3  # the run, the count, the last drop
    assert art.meta["maps"] == {"pfc_r0_src4": {"type": "array_of_maps", "family": 4,
                                                "key_size": 4, "value_size": 4,
                                                "entries": 1},
                                "pfc_r0_src4i": {"type": "lpm_trie", "family": 4,
                                                 "key_size": 8, "value_size": 1,
                                                 "entries": 1000}}
    assert "(1000 entries)" in art.text and "10.3.249.9" not in art.text


# --------------------------------------------------------------------------- kernel

POLICY = """count dst $a
drop udp src $a
pass tcp !dst $b
count !src $a
drop src $b src $a
drop dst $b
default drop
"""


@kernel
@pytest.mark.parametrize("hook", HOOKS)
def test_large_sets_agree_with_the_interpreter(hook):
    """Maps on both families, src and dst, negated, a set in several rules, a field
    given twice (merged by the checker into the few prefixes both sets hold: inline):
    the edges of every collapsed prefix (±1) and generated frames."""
    a, b = _nets(400, 2), _nets(120, 3)
    artifact = build(_define("a", a) + _define("b", b) + POLICY, hook)
    assert len(artifact.meta["maps"]) == 20  # 5 rules × 2 families × (slot, set);
    # `src $b src $a` inline
    assert not any(name.startswith("pfc_r4_") for name in artifact.meta["maps"])
    check(artifact, edge_frames(artifact, 5) + gen.sample(artifact.policy, 400, seed=21))


def edge_frames(artifact, every: int) -> list[bytes]:
    """Frames at ±1 of the edges of every ``every``-th collapsed prefix of each map."""
    frames = []
    for record in ebpf_maps.maps_of(artifact):
        nets = [ipaddress.ip_network(p) for p in record["prefixes"]]
        field = "dst" if "_dst" in record["name"] else "src"
        frames += [_frame(x, field) for x in _edges(nets[::every])]
    return frames


def _mixed_v4(n: int, seed: int) -> list[str]:
    """n IPv4 prefixes of every length class the bitmap stores differently: hosts and
    long prefixes (partial /24s), /24 and shorter (whole /24s, several top words)."""
    rng = random.Random(seed)
    lengths = [32, 32, 31, 29, 25, 24, 24, 23, 20, 16, 11]
    return sorted({str(ipaddress.ip_network((rng.getrandbits(32), rng.choice(lengths)),
                                            strict=False)) for _ in range(n)}
                  | {"10.0.0.0/24", "10.0.1.0/24", "10.0.0.128/25", "10.0.0.7"})


@kernel
@pytest.mark.parametrize("hook", HOOKS)
def test_bitmap_sets_agree_with_the_interpreter(hook, tmp_path):
    """IPv4 sets above BITMAP_MIN_PREFIXES use the /24 bitmap (IPv6 stays LPM): every
    kind of prefix, edges ±1 of every collapsed prefix sampled, src/dst, negated."""
    v4 = _mixed_v4(3000, 7)
    (tmp_path / "a.txt").write_text("\n".join(v4 + _nets(120, 8)) + "\n")
    (tmp_path / "p.pf").write_text('set a = file "a.txt"\ncount dst $a\ndrop udp src $a\n'
                                   "pass tcp !dst $a\ndefault drop\n")
    artifact, diags = build_artifact(compile_path(tmp_path / "p.pf"), hook)
    assert artifact is not None, diags
    kinds = {r["name"]: r["type"] for r in ebpf_maps.maps_of(artifact)}
    assert kinds["pfc_r1_src4"] == "ipv4_bitmap" and kinds["pfc_r1_src6"] == "lpm_trie"
    check(artifact, edge_frames(artifact, 9) + gen.sample(artifact.policy, 300, seed=22))


@kernel
def test_update_batch_and_one_by_one_fill_the_same_trie():
    art = build(_define("a", _nets(200, 4)) + "drop src $a\n", "xdp")
    (record, _six) = ebpf_maps.maps_of(art)
    keys = ebpf_maps.lpm_keys(record)
    n = len(record["prefixes"])
    elf = art.files["gen.xdp.o"]
    with bpf.Object(elf, "pfc_xdp") as one, bpf.Object(elf, "pfc_xdp") as batch:
        for i in range(n):
            one.maps[record["inner"]].update_bytes(keys[8 * i:8 * i + 8], b"\1")
        batch.maps[record["inner"]].update_batch(keys, b"\1" * n)
        with pytest.raises(bpf.BpfError):  # full: max_entries is the prefix count
            batch.maps[record["inner"]].update_bytes(bytes([32, 0, 0, 0, 1, 2, 3, 4]), b"\1")
        prog_a, prog_b = one.programs["pfc_xdp"], batch.programs["pfc_xdp"]
        for x in _edges([ipaddress.ip_network(p) for p in record["prefixes"][::3]]):
            frame = _frame(x, "src")
            assert prog_a.test_run(frame).retval == prog_b.test_run(frame).retval


@kernel
@pytest.mark.parametrize("size", [90, 1500])
def test_bpftool_batch_fills_an_object_loaded_by_hand(tmp_path, size):
    """docs/ebpf.md: `bpftool prog loadall OBJ DIR pinmaps MAPS`, then the batch text
    of `python -m pfc.backends.ebpf.maps`; `bpftool prog run` drops a member and
    passes a non-member (90 prefixes: LPM_TRIE; 1500: the IPv4 bitmap)."""
    nets = _mixed_v4(size, 6)
    art = build(_define("a", nets) + "drop src $a\n", "xdp")
    assert len(art.meta["maps"]) == 2  # the slot and the set (a trie or a bitmap array)
    obj = tmp_path / "x.o"
    obj.write_bytes(art.files["gen.xdp.o"])
    (tmp_path / "x.maps.json").write_bytes(art.files["gen.xdp.maps.json"])
    pins = Path("/sys/fs/bpf") / f"pfc-test-{os.getpid()}-{secrets.token_hex(4)}"
    pins.mkdir()
    try:
        subprocess.run(["bpftool", "prog", "loadall", str(obj), str(pins / "progs"),
                        "pinmaps", str(pins / "maps")], check=True, capture_output=True)
        text = subprocess.run([sys.executable, "-m", "pfc.backends.ebpf.maps",
                               str(tmp_path / "x.maps.json"), str(pins / "maps")],
                              check=True, capture_output=True, text=True).stdout
        assert text == ebpf_maps.bpftool_batch(ebpf_maps.maps_of(art), str(pins / "maps"))
        (tmp_path / "fill.batch").write_text(text)
        subprocess.run(["bpftool", "batch", "file", str(tmp_path / "fill.batch")],
                       check=True, capture_output=True)
        member = ipaddress.ip_network(nets[len(nets) // 2])
        for addr, want in ((member[-1], 1), (ipaddress.ip_address("127.0.0.9"), 2)):
            (tmp_path / "in").write_bytes(_frame(addr, "src"))
            shown = subprocess.run(["bpftool", "prog", "run", "pinned",
                                    str(pins / "progs" / "pfc_xdp"), "data_in",
                                    str(tmp_path / "in")], check=True, capture_output=True,
                                   text=True).stdout
            assert f"Return value: {want}" in shown, shown
    finally:
        subprocess.run(["rm", "-rf", str(pins)], check=False)


def _udp_from(lab, src: str, seq: int) -> bytes:
    s, d = ipaddress.ip_address(src).packed, bytes([10, 1, 0, 1])
    udp = fb.udp(s, d, 9, 4000, struct.pack("!Q", seq))
    return fb.ethernet(lab.dut_mac, lab.inj_mac, fb.ETH_IP4, fb.ipv4(s, d, 17, udp))


@kernel
@pytest.mark.parametrize("target", ["xdp", "tc"])
def test_pfc_load_fills_the_maps_before_attaching(lab, tmp_path, target):
    """A 5000-entry blocklist loaded on a device: members are dropped (counted by the
    count rule before the drop), non-members reach the last rule."""
    rng = random.Random(9)
    nets = sorted({f"{rng.randrange(11, 200)}.{rng.randrange(256)}.{rng.randrange(256)}."
                   + ("0/24" if i % 3 else str(rng.randrange(256))) for i in range(5000)})
    (tmp_path / "block.txt").write_text("\n".join(nets + ["10.9.0.0/16"]) + "\n")
    path = policy_file(tmp_path, 'set block = file "block.txt"\ncount src $block\n'
                       "drop src $block\ncount udp\n")
    extra = ["--mode", "generic"] if target == "xdp" else []
    code, out, err = load(lab, target, extra, path)
    assert code == 0, err
    members = ["10.9.0.1", "10.9.255.255", nets[7].split("/")[0]]
    others = ["10.8.255.255", "10.10.0.0"]
    deliver(lab, [_udp_from(lab, a, i) for i, a in enumerate(members + others)])
    counters = counters_of(entry(lab, target))
    assert counters[0][0] == len(members) and counters[2][0] == len(others)
