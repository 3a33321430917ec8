"""``pfc prove`` of the eBPF classifier (docs/ebpf.md "Large policies": class tables,
bit vectors in maps, ``bpf_loop``, BPF-to-BPF calls) and of /24-bitmap sets (issue
19): the maps' contents read from the artifact as the loader reads them, so a byte
changed in the maps data is a difference confirmed in the kernel, not a crash.

The classifier is forced (``classify=always``) on small ClassBench policies: the
proof's time grows fast with the rule count (docs/prove.md).
"""

from __future__ import annotations

import ipaddress
import random
from dataclasses import replace

import pytest
import z3

from benchmarks import classbench as cb
from pfc.build import build_artifact
from pfc.frontend.pipeline import compile_path, compile_text
from pfc.prove import proof
from pfc.prove.targets import ebpf, ebpf_calls, ebpf_values

pytestmark = pytest.mark.kernel


def classified(n: int, hook: str, seed: int = 3):
    rules = cb.generate("acl", n, seed=seed, default="drop")
    compiled = compile_text(rules.text(), "c.pf")
    built, diags = build_artifact(compiled, hook, extra={"classify": "always"})
    assert built is not None and "classifier" in built.meta, diags
    return compiled, built


@pytest.mark.parametrize("hook", ["xdp", "tc", "socket"])
def test_a_classifier_is_proved(hook) -> None:
    compiled, built = classified(30, hook)
    result = proof.prove(built, compiled.require())
    assert result.equal, (result.expected, result.modelled, result.witness.hex(), result.note)


def _with_blob(built, change):
    name = next(n for n in built.files if n.endswith(".maps.bin"))
    blob = bytearray(built.files[name])
    change(blob)
    return replace(built, files=dict(built.files) | {name: bytes(blob)})


def _rules_slice(built) -> tuple[int, int]:
    import json
    doc = json.loads(built.files[built.meta["maps_file"]])
    record = next(r for r in doc["maps"] if r["name"] == "pfc_c_rules")
    return tuple(record["values"])


def test_a_changed_rule_action_in_the_maps_data_is_caught_in_the_kernel() -> None:
    """One byte of the maps data (the action of a rule in ``pfc_c_rules``: drop <->
    pass) changed: the proof finds a witness and the kernel run confirms it."""
    compiled, built = classified(30, "tc")
    off, _ = _rules_slice(built)
    policy = compiled.require()
    first = next(i for i, r in enumerate(policy.rules) if r.action.name in ("drop", "pass"))

    def flip(blob):
        blob[off + 4 * first + 3] ^= 1  # the action byte (slot | action << 24)
    result = proof.prove(_with_blob(built, flip), policy)
    assert not result.equal and result.status == "differs", (result.status, result.note)


def test_a_cleared_vector_word_is_caught_in_the_kernel() -> None:
    """A bit vector word of a class zeroed in the maps data (its rules no longer
    match that class): caught, confirmed in the kernel, or proved equal when that
    word's rules decide nothing (then no witness)."""
    compiled, built = classified(30, "xdp")
    import json
    doc = json.loads(built.files[built.meta["maps_file"]])
    pool = next(r for r in doc["maps"] if r["name"].endswith("pool")
                and r["values"][1] >= 8)
    off, size = pool["values"]

    def clear(blob):
        for i in range(0, size, 8):
            if any(blob[off + i:off + i + 8]):
                blob[off + i:off + i + 8] = bytes(8)
                return
    result = proof.prove(_with_blob(built, clear), compiled.require())
    assert result.equal or result.status == "differs", (result.status, result.note)


def _bitmap_policy(tmp_path):
    rng = random.Random(5)
    nets = sorted({str(ipaddress.ip_network((rng.getrandbits(32), rng.choice(
        [32, 32, 28, 24, 22, 16])), strict=False)) for _ in range(1300)})
    (tmp_path / "bl.txt").write_text("\n".join(nets) + "\n")
    (tmp_path / "p.pf").write_text('set bl = file "bl.txt"\ndrop src $bl\n'
                                   "pass tcp dport 22\ndefault pass\n")
    return compile_path(tmp_path / "p.pf")


def test_a_bitmap_set_is_proved_and_a_flipped_bit_caught(tmp_path) -> None:
    compiled = _bitmap_policy(tmp_path)
    built, diags = build_artifact(compiled, "tc")
    assert built is not None, diags
    assert '"ipv4_bitmap"' in built.files[built.meta["maps_file"]].decode()
    result = proof.prove(built, compiled.require())
    assert result.equal, (result.expected, result.modelled, result.note)
    # a /24 wholly in the set no more: the first top entry's `full` word loses a bit
    import json

    from pfc.backends.ebpf import maps as ebpf_maps
    doc = json.loads(built.files[built.meta["maps_file"]])
    record = next(r for r in doc["maps"] if r["type"] == "ipv4_bitmap")
    top, _ = ebpf_maps.bitmap_tables(ebpf_maps.int_prefixes(record))
    word = next(w for w, raw in top.items() if int.from_bytes(raw[:8], "little"))
    full = int.from_bytes(top[word][:8], "little")
    bit = (full & -full).bit_length() - 1
    net = ipaddress.ip_network(((word << 6 | bit) << 8, 24))
    record["prefixes"] = [p for p in record["prefixes"]
                          if not ipaddress.ip_network(p).subnet_of(net)]
    data = ebpf_maps.records_file(doc["maps"])
    mutant = replace(built, files=dict(built.files) | {built.meta["maps_file"]: data})
    result = proof.prove(mutant, compiled.require())
    assert not result.equal and result.status == "differs", (result.status, result.note)


def test_the_flow_cache_reads_as_zeros_and_ignores_stores() -> None:
    """``pfc_flow_cache`` (the classifier's memo, added beside this work): modelled as
    all-zero memory whose stores are ignored, declared or not."""
    info = ebpf.MapInfo(ebpf.FLOW_CACHE, "percpu_array", 4, 16, 1024,
                        {bytes(4): b"\1" * 16})
    maps = {ebpf.FLOW_CACHE: info}
    # maps_of clears whatever the artifact says it holds, and adds it when absent
    assert not info.counts
    art_maps = ebpf.maps_of(classified(30, "tc")[1])
    assert art_maps[ebpf.FLOW_CACHE].contents == {}
    assert not art_maps[ebpf.FLOW_CACHE].counts
    from pfc.prove.targets import ebpf_tables
    info.contents.clear()
    key = z3.BitVec("k", 32)
    assert z3.is_true(z3.simplify(ebpf_tables.read(maps[ebpf.FLOW_CACHE], key, 0, 8) == 0))


def test_loop_bounds_relate_uses_of_one_word() -> None:
    """A popcount of a word of a few known values is bounded by the largest count,
    not by the product of its uses' value sets (the bpf_loop bound)."""
    c = z3.Bool("c")
    m = z3.If(c, z3.BitVecVal(0b101, 64), z3.BitVecVal(0b11, 64))
    x = m - (z3.LShR(m, 1) & 0x5555555555555555)
    x = (x & 0x3333333333333333) + (z3.LShR(x, 2) & 0x3333333333333333)
    x = (x + z3.LShR(x, 4)) & 0x0F0F0F0F0F0F0F0F
    count = z3.LShR(x * 0x0101010101010101, 56)
    assert ebpf_values.Values().bound(count) == 2
    assert ebpf_calls.MAX_DEPTH == 8


def test_a_classifier_with_a_redirect_is_proved() -> None:
    """``redirect`` runs in a global function (a BPF-to-BPF call): the rewritten bytes,
    checksums included, are proved (tc; xdp takes about 45 s, docs/prove.md)."""
    lines = cb.generate("acl", 30, seed=3, default="drop").text().splitlines()
    lines.insert(3, "redirect udp dst 192.168.64.2 dport 8080 to 10.0.1.2:8083")
    compiled = compile_text("\n".join(lines) + "\n", "r.pf")
    built, diags = build_artifact(compiled, "tc", extra={"classify": "always"})
    assert built is not None and "classifier" in built.meta, diags
    result = proof.prove(built, compiled.require())
    assert result.equal, (result.expected, result.modelled, result.witness.hex(), result.note)


def test_instruction_mutants_of_a_classifier_are_judged_in_the_kernel() -> None:
    """One-change mutants of the classifier's object (jump targets, constants, load
    offsets, swapped branches, a removed rule), judged as tests/prove/test_prove.py
    judges the linear programs': a difference is confirmed in the kernel, a mutant
    proved equal agrees with the interpreter on samples, the models refuse nothing the
    kernel loads."""
    from pfc.prove import mutate
    compiled, built = classified(30, "tc")
    policy = compiled.require()
    seen: dict[str, list] = {k: [] for k in mutate.OUTCOMES}
    with mutate.lab("tc"):
        for m in mutate.mutants(compiled, built, 10, seed=1):
            judged = mutate.judge(m, policy)
            seen[judged.outcome].append(f"{m.what}: {judged.note}")
            if judged.outcome == "proved":
                assert mutate.disagreement(m.artifact, policy) is None, m.what
    assert not seen["unconfirmed"], seen["unconfirmed"]
    assert not seen["models refuse"], seen["models refuse"]


def test_a_maps_file_the_loader_cannot_read_is_refused_not_a_crash() -> None:
    _, built = classified(30, "tc")
    broken = replace(built, files=dict(built.files) | {built.meta["maps_file"]: b"{"})
    with pytest.raises(ebpf.Unsupported, match="not a maps file"):
        ebpf.maps_of(broken)


def test_a_classifier_with_count_rules_is_proved() -> None:
    """Count rules go through the classifier's count scan (summary words, a bit scan:
    loops clang keeps) and the flow cache's record of them: every count rule's
    counter is part of the proof (tc; xdp takes minutes at 30 rules)."""
    lines, drops = [], 0
    for line in cb.generate("acl", 30, seed=5, default="pass").text().splitlines():
        drops += line.startswith("drop ")
        lines.append("count " + line[5:] if line.startswith("drop ") and drops % 3 == 0
                     else line)
    lines[3:3] = ["count udp dport 53", "count src 10.0.0.0/8"]
    compiled = compile_text("\n".join(lines) + "\n", "k.pf")
    policy = compiled.require()
    assert sum(r.action.name == "count" for r in policy.rules) >= 5
    built, diags = build_artifact(compiled, "tc", extra={"classify": "always"})
    assert built is not None and "classifier" in built.meta, diags
    result = proof.prove(built, policy)
    assert result.equal, (result.expected, result.modelled, result.note)
