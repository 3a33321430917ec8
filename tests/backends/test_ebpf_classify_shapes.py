"""Every shape of classified policy on every eBPF hook (issues 29 and 30).

The classifier's earlier tests generated ClassBench-shaped rules, which name all five
fields; a policy that reads ``dport`` but never ``sport`` did not compile. Here a
*shape* is the set of matches a policy uses among ``proto``, ``src``, ``dst``,
``sport``, ``dport``: all 32 subsets, the empty one included (rules of an action and
a protocol keyword only). For each shape, hook (xdp, tc, socket) and both defaults, a
policy of :data:`N_RULES` rules (so the classifier is used: checked) whose matches are
exactly the shape's, every field of it used, negated in some rules and in every rule
for one field, over IPv4, IPv6 and mixed lists, ranges, ``define`` lists and set files,
with count rules and (xdp, tc) redirects, is compiled, loaded and judged against the
interpreter by ``pfc.verifier.equiv.compare`` on frames aimed at its constants plus,
side by side, copies of them that differ in one field the flow cache's key holds, all
sent twice (pinned to one CPU, so the second copies can hit the cache).

Two variants per shape and hook, so both defaults, both vector layouts and both cache
sizes meet every shape: ``pass`` (dense vectors, the default cache, no redirect: the
fields read are exactly the shape's) and ``drop`` (compressed vectors, a one-slot
cache, redirects on xdp and tc), marked ``slow`` (``-m "not slow"`` still covers every
shape on every hook). Each is judged on ~1,000-2,000 frames; the whole matrix takes
2.3 min of CPU time (clang included, no object cache; 8.5 min of wall clock at load
average 10 on 2 CPUs).

Also: goldens of two shapes that are not ClassBench's, and ClassBench acl at 1k and
8k rules shaped as the published acl1 sets (no source port), loaded on every hook.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import random
import re
import zlib
from dataclasses import dataclass
from functools import cache
from ipaddress import ip_address
from pathlib import Path

import pytest

from benchmarks import classbench as cb
from pfc.backends.ebpf.classify import plan as classify_plan
from pfc.backends.ebpf.classify import tables
from pfc.build import build_artifact
from pfc.frontend.pipeline import compile_path, compile_text
from pfc.oracle import gen
from pfc.oracle.interp import evaluate
from tests.backends.test_ebpf import kernel
from tests.backends.test_ebpf_classify import PORTS, V4, V6, check
from tests.paths import GOLDEN

FIELDS = ("proto", "src", "dst", "sport", "dport")
SHAPES = tuple(frozenset(c) for k in range(len(FIELDS) + 1)
               for c in itertools.combinations(FIELDS, k))
HOOKS = ("xdp", "tc", "socket")
CACHED_COUNTS = 8  # PFC_FC_K (12 on xdp and tc, 8 on socket): a frame that more count
# rules hold is never cached
N_RULES = 180
MIXED = ["{ 10.1.2.0/24, 2001:db8:1::/48 }", "{ 192.168.7.9, ::1, 2001:db8::/32 }"]
PROTOS = ["17", "1", "58", "icmp", "{ 6, 17 }", "1-17", "{ 0-5, 200-255 }", "47"]
SET_FILES = {"nets.txt": "10.1.0.0/16\n192.168.7.9\n2001:db8:1::5\nfe80::/10\n",
             "svc.txt": "22\n80\n8000-8080\n"}
DEFINES = "define lan = { 10.1.2.0/24, 2001:db8:1:2::/64 }\ndefine web = { 80, 443, 8080 }\n"


def name(shape: frozenset[str]) -> str:
    return "+".join(f for f in FIELDS if f in shape) or "none"


@dataclass(frozen=True)
class Variant:
    default: str
    dense: bool
    cache: int | None  # slots per CPU; None: the default size
    redirect: bool


def variant(default: str, hook: str) -> Variant:
    if default == "pass":
        return Variant("pass", True, None, False)
    return Variant("drop", False, 1, hook != "socket")


# ------------------------------------------------------------------------ policies

def _addr(rng: random.Random, version) -> str:
    roll = rng.random()
    if roll < 0.1:
        return rng.choice(["$nets", "$lan"])
    if version == "mix" or roll < 0.2:
        return rng.choice(MIXED)
    pool = V4 if version == 4 else V6
    if roll < 0.35:
        return "{ " + ", ".join(rng.sample(pool, 2)) + " }"
    return rng.choice(pool)


def _port(rng: random.Random) -> str:
    return rng.choice(["$svc", "$web"]) if rng.random() < 0.1 else rng.choice(PORTS)


def _keyword(rng: random.Random, own: set[str], action: str) -> str:
    if own & {"sport", "dport"}:
        return rng.choice(["tcp", "udp"])
    if action == "redirect":  # a redirect port needs tcp or udp
        return rng.choice(["tcp", "udp", ""]) if "proto" not in own else ""
    if "proto" in own:
        return rng.choice(["", "ip", "ip6", "all"])
    choices = ["tcp", "udp", "icmp", "icmp6", "ip", "ip6"]
    # A terminal rule of a keyword alone decides a whole protocol: keep them rarer.
    return rng.choice(choices + (["", "all"] if own or action == "count" else []))


def _version(rng: random.Random, keyword: str, action: str):
    fixed = {"ip": 4, "icmp": 4, "ip6": 6, "icmp6": 6}.get(keyword)
    if fixed or action == "redirect":
        return fixed or rng.choice([4, 6])
    return rng.choice([4, 4, 6, "mix"])


def _own(rng: random.Random, shape: frozenset[str], must: str | None) -> set[str]:
    """The fields of one rule: ``must`` and each other field of the shape by a coin (at
    least one); ``proto`` and the ports never together (ports need tcp/udp, proto forbids them)."""
    own = {f for f in FIELDS if f in shape and (f == must or rng.random() < 0.5)}
    if shape and not own:  # a keyword alone would decide a whole protocol
        own = {rng.choice(sorted(shape))}
    ports = own & {"sport", "dport"}
    if "proto" in own and ports:
        if must == "proto" or (must not in ports and rng.random() < 0.5):
            own -= ports
        else:
            own.discard("proto")
    return own


def _narrowness(field: str, value: str, negated: str) -> float:
    """How narrow a match is, which orders the rules: 0 a protocol match that holds
    for TCP or UDP (it would hide every port rule after it), 0.3 another negated
    match, 0.6 another protocol, 1 a range, a list, a set or a short prefix, 2 one
    port, 3 a host or a /24 and longer."""
    if field == "proto":
        return 0 if negated or value in ("17", "{ 6, 17 }", "1-17") else 0.6
    if negated:
        return 0.3
    if any(c in value for c in "{-$") or ("/" in value and int(value.split("/")[1]) < 24):
        return 1
    return 3 if field in ("src", "dst") else 2


def shape_rule(rng: random.Random, shape: frozenset[str], must: str | None,
               every: str | None, redirect: bool) -> tuple[float, str]:
    """One rule of ``shape`` and how narrow it is: its own fields include ``must``;
    ``every``: the field negated in every rule that names it."""
    weights = [38, 32, 18, 12 if redirect else 0] if shape else [15, 10, 70, 5 if redirect else 0]
    action = rng.choices(["drop", "pass", "count", "redirect"], weights)[0]
    own = _own(rng, shape, must)
    keyword = _keyword(rng, own, action)
    version = _version(rng, keyword, action)
    words = [action] + ([keyword] if keyword else [])
    score = rng.random()
    for f in FIELDS:
        if f in own:
            value = rng.choice(PROTOS) if f == "proto" else \
                _addr(rng, version) if f in ("src", "dst") else _port(rng)
            neg = "!" if f == every or rng.random() < 0.2 else ""
            words.append(f"{neg}{f} {value}")
            score += _narrowness(f, value, neg)
    if action == "redirect":
        port = rng.choice(["", ":53"]) if keyword in ("tcp", "udp") else ""
        target = "10.9.0.1" if version == 4 else "[2001:db8::99]" if port else "2001:db8::99"
        words.append("to " + target + port)
    return score, " ".join(words)


def negated_everywhere(shape: frozenset[str], hook: str, default: str) -> str | None:
    """The field negated in every rule of the shape's policy for ``hook`` and
    ``default``, or None: over the six policies of a shape, each field once at least
    (and none, at least once); a shape of one or two fields, with both layouts."""
    k = HOOKS.index(hook) + 3 * (default == "drop")
    choices = [f for f in FIELDS if f in shape] + [None]
    return choices[k % len(choices)]


def shape_policy(shape: frozenset[str], v: Variant, seed: int, every: str | None,
                 n: int = N_RULES) -> str:
    """``n`` rules of ``shape`` (every field of it used at least 8 times), the field
    ``every`` negated wherever it is named, others in a fifth of the rules; the
    narrower rules first, roughly (as in real policies: a wide rule first would
    decide most frames)."""
    rng = random.Random(seed)
    fields = sorted(shape)
    musts = [fields[i % len(fields)] if fields and i < 8 * len(fields) else None
             for i in range(n)]
    rng.shuffle(musts)
    head = DEFINES if shape & {"src", "dst", "sport", "dport"} else ""
    head += "".join(f'set {f[:-4]} = file "{f}"\n' for f in SET_FILES
                    if (f == "nets.txt" and shape & {"src", "dst"})
                    or (f == "svc.txt" and shape & {"sport", "dport"}))
    rules = sorted((shape_rule(rng, shape, m, every, v.redirect) for m in musts),
                   key=lambda r: -r[0])
    return f"default {v.default}\n{head}" + "\n".join(text for _, text in rules) + "\n"


def build(shape: frozenset[str], hook: str, v: Variant, where: Path, monkeypatch):
    """The compiled object of the shape's policy for ``hook`` (object and C)."""
    seed = zlib.crc32(f"{name(shape)}/{hook}/{v.default}".encode())
    for f, text in SET_FILES.items():
        (where / f).write_text(text)
    path = where / f"{name(shape).replace('+', '_')}.pf"
    path.write_text(shape_policy(shape, v, seed, negated_everywhere(shape, hook, v.default)))
    monkeypatch.setattr(tables, "DENSE_MAX", tables.DENSE_MAX if v.dense else 0)
    artifact, diags = build_artifact(compile_path(path), hook,
                                     extra={"flow_cache": v.cache})
    assert artifact is not None, [str(d) for d in diags][:3]
    return artifact


def expected_fields(shape: frozenset[str], artifact) -> set[str]:
    """The classifier's fields for ``shape``: ``fp`` (a protocol keyword or family
    in every policy here), the shape's addresses and ports, and ``dst`` when a rule
    redirects (the target's family is a condition on the destination)."""
    redirects = any(r.action.name == "redirect" for r in artifact.policy.rules)
    return {"fp"} | (shape - {"proto"}) | ({"dst"} if redirects else set())


def assert_shape(shape: frozenset[str], artifact, v: Variant) -> None:
    meta = artifact.meta.get("classifier")
    assert meta is not None, "the policy was not classified"
    assert set(meta["classes"]) == expected_fields(shape, artifact)
    assert meta["dense"] is v.dense
    text = next(t.decode() for n, t in artifact.files.items() if n.endswith(".c"))
    for port in {"sport", "dport"} - set(meta["classes"]):
        assert not re.search(rf"\b{port}\b", text), f"{port} is read but no rule names it"


# ------------------------------------------------------------------------- frames

def _put(frame: bytes, at: int, data: bytes) -> bytes:
    return frame[:at] + data + frame[at + len(data):]


def variants(frame: bytes, consts: gen.Constants) -> dict[str, list[bytes]]:
    """Per field of the flow cache's key, copies of an untagged IPv4/IPv6 frame with
    that field set to each of the policy's constants: the protocol byte (``proto``),
    an address, a port (TCP and UDP frames)."""
    etype = frame[12:14]
    if etype == b"\x08\x00" and len(frame) >= 34:
        proto_at, addrs, hosts, l4 = 23, (26, 30), consts.v4, 14 + (frame[14] & 0xf) * 4
    elif etype == b"\x86\xdd" and len(frame) >= 54:
        proto_at, addrs, hosts, l4 = 20, (22, 38), consts.v6, 54
    else:
        return {}
    out = {"proto": [_put(frame, proto_at, bytes([p])) for p in consts.protos]}
    for field, at in zip(("src", "dst"), addrs, strict=True):
        out[field] = [_put(frame, at, ip_address(h).packed) for h in hosts]
    if frame[proto_at] in (6, 17) and len(frame) >= l4 + 4:
        for field, at in (("sport", l4), ("dport", l4 + 2)):
            out[field] = [_put(frame, at, p.to_bytes(2, "big")) for p in consts.ports]
    return out


def beside(f: bytes, consts: gen.Constants, rng: random.Random, judge
           ) -> tuple[list[bytes], set[str]]:
    """Neighbours of ``f``, each followed by ``f`` again (``n1, f, n2, f, ...``: with
    one slot too, each neighbour meets ``f``'s entry): per key field, a copy the
    interpreter judges otherwise (if one of 8 tried is, or of every protocol) and one
    at random. Also the fields told apart so, while ``f``'s entry is kept."""
    base = judge(f)
    out, told = [], set()
    for field, copies in variants(f, consts).items():
        tries = len(copies) if field == "proto" else min(8, len(copies))
        other = next((c for c in rng.sample(copies, tries) if judge(c) != base), None)
        if other is not None:
            out += [other, f]
            if len(base[1]) <= CACHED_COUNTS:
                told.add(field)
        out += [rng.choice(copies), f] if copies else []
    return out, told


def shape_frames(artifact, seed: int) -> tuple[list[bytes], set[str]]:
    """160 aimed and malformed frames, every other one followed by its neighbours
    (:func:`beside`), all of it twice, the second time shuffled; and the fields the
    neighbours tell apart: a key without one of them gives a wrong hit here."""
    rng = random.Random(seed)
    policy = artifact.policy
    consts = gen.constants(policy)

    def judge(frame: bytes) -> tuple:
        out = evaluate(policy, frame)
        return out.rule, out.counted

    frames, told = [], set()
    for k, f in enumerate(gen.sample(policy, 160, seed=seed)):
        frames.append(f)
        if k % 2:
            more, fields = beside(f, consts, rng, judge)
            frames += more
            told |= fields
    again = frames[:]
    rng.shuffle(again)
    return frames + again, told


@pytest.fixture
def one_cpu():
    """The test on one CPU: every test run sees the same per-CPU flow cache."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    yield
    os.sched_setaffinity(0, before)


# ------------------------------------------------------------------------ no kernel

def test_there_are_32_shapes_and_each_policy_has_exactly_its_fields():
    assert len(set(SHAPES)) == 32
    for shape in SHAPES:
        for default in ("pass", "drop"):
            text = shape_policy(shape, variant(default, "xdp"), len(shape),
                                negated_everywhere(shape, "xdp", default))
            named = {f for f in FIELDS if re.search(rf"(^|[ !]){f} ", text, re.MULTILINE)}
            assert named == shape, (name(shape), named)


# ---------------------------------------------------------------------- in the kernel

@kernel
@pytest.mark.parametrize("default", ["pass", pytest.param("drop", marks=pytest.mark.slow)])
@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize("shape", SHAPES, ids=name)
def test_every_shape_agrees_with_the_interpreter(shape, hook, default, tmp_path,
                                                 monkeypatch, one_cpu):
    v = variant(default, hook)
    artifact = build(shape, hook, v, tmp_path, monkeypatch)
    assert_shape(shape, artifact, v)
    frames, told = shape_frames(artifact, seed=zlib.crc32(name(shape).encode()))
    # (a redirect's dst is read for its family only, which fp holds too)
    read = {"proto"} | (shape - {"proto"})
    assert read <= told, f"no frame pair tells {read - told} apart: the key is not tested"
    report = check(artifact, frames)
    assert report.seen > len(frames) // 2


# -------------------------------------------------------------- golden, ClassBench acl1

GOLDEN_SHAPES = {
    # issue 29's reproducer: destinations and destination ports, never a source port
    "dst-dport": lambda i: f"drop tcp dst 10.{i // 256}.{i % 256}.0/24 dport {1000 + i}",
    # protocols alone: no address, no port is read
    "proto": lambda i: ["count tcp", "pass udp", "drop ip6 proto 58", "count icmp",
                        f"drop !proto {i % 256}"][i % 5],
}


@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize("shape", sorted(GOLDEN_SHAPES))
def test_golden_shape(shape, hook, golden):
    """The classifier's C for shapes that are not ClassBench's: only the fields the
    rules read are declared, read and keyed (tests/golden/classifier/SHAPE/HOOK.c);
    clang builds it."""
    text = "default pass\n" + "\n".join(GOLDEN_SHAPES[shape](i) for i in range(140)) + "\n"
    art = build_classified(text, hook)
    assert f"shape.{hook}.o" in art.files
    golden(GOLDEN / "classifier" / shape / f"{hook}.c", art.files[f"shape.{hook}.c"].decode())


def build_classified(text: str, hook: str, fmt: str = "o"):
    artifact, diags = build_artifact(compile_text(text, "shape.pf"), hook, fmt)
    assert artifact is not None and "classifier" in artifact.meta, [str(d) for d in diags][:3]
    return artifact


@cache
def acl1(n: int) -> tuple[cb.RuleSet, object]:
    """ClassBench acl at ``n`` rules shaped as the published acl1 sets are (their
    every source port is ``0 : 65535``): no rule names a source port. With its
    compiled policy."""
    rules = cb.generate("acl", n, seed=1)
    out = list(dict.fromkeys(dataclasses.replace(r, sport=None) for r in rules.rules))
    rules = dataclasses.replace(rules, rules=tuple(out))
    return rules, compile_text(rules.text(), f"acl1-{n}.pf")


@kernel
@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize("n", [1000, pytest.param(8000, marks=pytest.mark.slow)])
def test_classbench_acl1_without_source_ports_loads_and_agrees(n, hook):
    """acl1 at 1k and 8k rules (issue 29's second reproducer) compiles, loads and
    agrees with the interpreter on its trace (aimed and malformed frames)."""
    rules, compiled = acl1(n)
    assert not any(r.sport for r in rules.rules) and len(rules.rules) > 0.95 * n
    artifact, diags = build_artifact(compiled, hook)
    assert artifact is not None, [str(d) for d in diags][:3]
    assert set(artifact.meta["classifier"]["classes"]) == {"fp", "src", "dst", "dport"}
    frames = cb.trace(rules, 400, seed=3, malformed=0.2, policy=compiled.require())
    check(artifact, frames)


@kernel
@pytest.mark.parametrize("hook", HOOKS)
def test_rules_without_any_field_keep_the_linear_program(hook):
    """The empty shape without even a protocol keyword: nothing to classify (every
    rule holds for every frame), so the linear program, which agrees."""
    text = "default drop\n" + "count\ncount all\n" * 80 + "pass\n"
    artifact, diags = build_artifact(compile_text(text, "nothing.pf"), hook)
    assert artifact is not None and "classifier" not in artifact.meta, diags[:3]
    assert len(artifact.policy.rules) >= classify_plan.MIN_RULES
    check(artifact, gen.sample(artifact.policy, 200, seed=1))
