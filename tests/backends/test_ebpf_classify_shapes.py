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
cache, redirects on xdp and tc).
"""

from __future__ import annotations

import itertools
import os
import random
import re
import zlib
from dataclasses import dataclass
from ipaddress import ip_address
from pathlib import Path

import pytest

from pfc.backends.ebpf.classify import tables
from pfc.build import build_artifact
from pfc.frontend.pipeline import compile_path
from pfc.oracle import gen
from tests.backends.test_ebpf import kernel
from tests.backends.test_ebpf_classify import PORTS, V4, V6, check

FIELDS = ("proto", "src", "dst", "sport", "dport")
SHAPES = tuple(frozenset(c) for k in range(len(FIELDS) + 1)
               for c in itertools.combinations(FIELDS, k))
HOOKS = ("xdp", "tc", "socket")
N_RULES = 150
MIXED = ["{ 10.1.2.0/24, 2001:db8:1::/48 }", "{ 192.168.7.9, ::1, 2001:db8::/32 }"]
PROTOS = ["6", "17", "1", "58", "{ 6, 17 }", "1-17", "tcp", "{ 0-5, 200-255 }"]
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

def _negated(field: str, every: str | None, rng: random.Random) -> str:
    return "!" if field == every or rng.random() < 0.2 else ""


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
    own = {f for f in shape if f == must or rng.random() < 0.5}
    if shape and not own:  # a keyword alone would decide a whole protocol
        own = {rng.choice(sorted(shape))}
    ports = own & {"sport", "dport"}
    if "proto" in own and ports:
        if must == "proto" or (must not in ports and rng.random() < 0.5):
            own -= ports
        else:
            own.discard("proto")
    return own


def shape_rule(rng: random.Random, shape: frozenset[str], must: str | None,
               every: str | None, redirect: bool) -> str:
    """One rule of ``shape``: its own fields include ``must``; ``every``: the field
    negated in every rule that names it."""
    weights = [38, 32, 18, 12 if redirect else 0] if shape else [15, 10, 70, 5 if redirect else 0]
    action = rng.choices(["drop", "pass", "count", "redirect"], weights)[0]
    own = _own(rng, shape, must)
    keyword = _keyword(rng, own, action)
    version = _version(rng, keyword, action)
    words = [action] + ([keyword] if keyword else [])
    if "proto" in own:
        words.append(_negated("proto", every, rng) + "proto " + rng.choice(PROTOS))
    for f in ("src", "dst"):
        if f in own:
            words.append(f"{_negated(f, every, rng)}{f} {_addr(rng, version)}")
    for f in ("sport", "dport"):
        if f in own:
            words.append(f"{_negated(f, every, rng)}{f} {_port(rng)}")
    if action == "redirect":
        port = rng.choice(["", ":53"]) if keyword in ("tcp", "udp") else ""
        target = "10.9.0.1" if version == 4 else "[2001:db8::99]" if port else "2001:db8::99"
        words.append("to " + target + port)
    return " ".join(words)


def shape_policy(shape: frozenset[str], v: Variant, seed: int, n: int = N_RULES) -> str:
    """``n`` rules of ``shape`` (every field of it used at least 8 times), one field of
    it (by ``seed``) negated wherever it is named."""
    rng = random.Random(seed)
    fields = sorted(shape)
    every = fields[seed % len(fields)] if fields else None
    musts = [fields[i % len(fields)] if fields and i < 8 * len(fields) else None
             for i in range(n)]
    rng.shuffle(musts)
    head = DEFINES if shape & {"src", "dst", "sport", "dport"} else ""
    head += "".join(f'set {f[:-4]} = file "{f}"\n' for f in SET_FILES
                    if (f == "nets.txt" and shape & {"src", "dst"})
                    or (f == "svc.txt" and shape & {"sport", "dport"}))
    rules = [shape_rule(rng, shape, m, every, v.redirect) for m in musts]
    return f"default {v.default}\n{head}" + "\n".join(rules) + "\n"


def build(shape: frozenset[str], hook: str, v: Variant, where: Path, monkeypatch):
    """The compiled object of the shape's policy for ``hook`` (object and C)."""
    seed = zlib.crc32(f"{name(shape)}/{hook}/{v.default}".encode())
    for f, text in SET_FILES.items():
        (where / f).write_text(text)
    path = where / f"{name(shape).replace('+', '_')}.pf"
    path.write_text(shape_policy(shape, v, seed))
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


def neighbours(frame: bytes, consts: gen.Constants, rng: random.Random) -> list[bytes]:
    """Copies of an untagged IPv4/IPv6 TCP/UDP frame, each with one field of the flow
    cache's key changed to one of the policy's constants: the protocol byte, an
    address, a port."""
    etype = frame[12:14]
    if etype == b"\x08\x00" and len(frame) >= 34:
        proto_at, addrs, hosts, l4 = 23, (26, 30), consts.v4, 14 + (frame[14] & 0xf) * 4
    elif etype == b"\x86\xdd" and len(frame) >= 54:
        proto_at, addrs, hosts, l4 = 20, (22, 38), consts.v6, 54
    else:
        return []
    out = [_put(frame, proto_at, bytes([rng.choice(consts.protos)]))]
    out += [_put(frame, at, ip_address(rng.choice(hosts)).packed) for at in addrs if hosts]
    if frame[proto_at] in (6, 17) and len(frame) >= l4 + 4 and consts.ports:
        out += [_put(frame, at, rng.choice(consts.ports).to_bytes(2, "big"))
                for at in (l4, l4 + 2)]
    return out


def shape_frames(artifact, seed: int) -> list[bytes]:
    """~200 aimed and malformed frames, 40 of them each followed by its neighbours,
    all of it twice (the second time shuffled)."""
    rng = random.Random(seed)
    consts = gen.constants(artifact.policy)
    frames = []
    for k, f in enumerate(gen.sample(artifact.policy, 160, seed=seed)):
        frames.append(f)
        if k % 4 == 0:
            frames += neighbours(f, consts, rng)
    again = frames[:]
    rng.shuffle(again)
    return frames + again


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
            text = shape_policy(shape, variant(default, "xdp"), seed=len(shape))
            named = {f for f in FIELDS if re.search(rf"(^|[ !]){f} ", text, re.MULTILINE)}
            assert named == shape, (name(shape), named)


# ---------------------------------------------------------------------- in the kernel

@kernel
@pytest.mark.parametrize("default", ["pass", "drop"])
@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize("shape", SHAPES, ids=name)
def test_every_shape_agrees_with_the_interpreter(shape, hook, default, tmp_path,
                                                 monkeypatch, one_cpu):
    v = variant(default, hook)
    artifact = build(shape, hook, v, tmp_path, monkeypatch)
    assert_shape(shape, artifact, v)
    frames = shape_frames(artifact, seed=zlib.crc32(name(shape).encode()))
    report = check(artifact, frames)
    assert report.seen > len(frames) // 2
