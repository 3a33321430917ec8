"""Generated whole-firewall blocks and frames for the v2 kernel tests.

Every shape: :func:`shapes` gives one ``count`` rule per subset of the fields a hook
carries (so each rule is judged on every frame, through its counter), each field
negated or not at random, then terminal rules with the hook's actions (``reject``,
``mark ... to N``, ``pass ... limit``, drop, pass) on random subsets; both defaults are
drawn by the callers. Values come from small pools, so frames hit and miss every
match: :func:`shots` mutates generated frames (``pfc.oracle.gen``) into frames of the
pools' MAC addresses, EtherTypes, VLAN ids and ICMP codes, each on a device of the
pools with a mark of the pools.
"""

from __future__ import annotations

import itertools
import random

from pfc.frontend import ir
from pfc.oracle import framebuild as fb
from pfc.oracle import gen
from pfc.oracle.context import iface_matches
from tests.backends.v2judge import DEVICES, Shot

MACS = (bytes.fromhex("020000000002"), bytes.fromhex("020000000001"),
        bytes.fromhex("0a1b2c3d4e5f"), bytes.fromhex("ffffffffffff"))
IFACE_LISTS = (("eth0",), ("eth*",), ("wan1", "ppp0"), ("wan*", "eth1"), ("x*",), ("lo",))
MARKS = (0, 1, 7, 0xFF, 0x1234, 0xFFFFFFFF)
MARK_RANGES = (((1, 1),), ((5, 10),), ((0xFF, 0xFFFF),), ((0, 0),), ((7, 7), (0x1234, 0x1234)))
ETHER_TYPES = (0x0800, 0x86DD, 0x0806, 0x88B5, 0x8100)
ETHER_RANGES = (((0x0800, 0x0800),), ((0x86DD, 0x86DD),), ((0x0806, 0x0806), (0x88B5, 0x88B5)),
                ((0, 0x0600),))
IP_ETHER_RANGES = (((0x0800, 0x0800),), ((0x86DD, 0x86DD),), ((0x0800, 0x86DD),))
VLAN_IDS = (0, 5, 7, 10, 11, 4095)
VLAN_RANGES = (((5, 10),), ((0, 0),), ((7, 7), (4000, 4095)))
ICMP_CODES = (0, 1, 3, 4, 13)
CODE_RANGES = (((3, 3),), ((0, 1),), ((4, 13),))
A4, B4 = bytes([192, 0, 2, 1]), bytes([198, 51, 100, 7])
A6, B6 = bytes.fromhex("20010db8" + "00" * 11 + "01"), bytes.fromhex("20010db8" + "11" * 12)

# The v2 fields each hook carries (iif at ingress, oif at egress; no mark on XDP).
FIELDS = {
    "xdp": ("iif", "ether-src", "ether-dst", "ether-type", "vlan-id", "icmp-code"),
    "tc": ("iif", "mark", "ether-src", "ether-dst", "ether-type", "vlan-id", "icmp-code"),
    "tc-egress": ("oif", "mark", "ether-src", "ether-dst", "ether-type", "vlan-id",
                  "icmp-code"),
    "socket": ("iif", "mark", "ether-src", "ether-dst", "ether-type", "vlan-id", "icmp-code"),
}
# nfbpf: what a test run of a netfilter program can be given: an output device (the
# loopback; no input device: test_nfbpf.loopback) and the mark 0. `iif` is judged on
# real hooks (test_nfbpf_link.py).
NF_FIELDS = {"prerouting": ("mark", "icmp-code"), "input": ("mark", "icmp-code"),
             "forward": ("oif", "mark", "icmp-code"),
             "output": ("oif", "mark", "icmp-code"), "postrouting": ("oif", "mark", "icmp-code")}
FIELDS |= {f"nf-{raw}{h}": NF_FIELDS[h] for h in NF_FIELDS for raw in ("", "raw-")
           if not raw or h in ("prerouting", "output")}
FIELDS |= {"cgroup-ingress": ("iif", "mark", "icmp-code"),
           "cgroup-egress": ("oif", "mark", "icmp-code")}
ACTIONS = {"xdp": ("drop", "pass", "reject", "pass-limit"),
           "tc": ("drop", "pass", "reject", "mark", "pass-limit"),
           "tc-egress": ("drop", "pass", "mark", "pass-limit"),
           "socket": ("drop", "pass", "pass-limit")} | {
               h: ("drop", "pass", "pass-limit") for h in FIELDS if h.startswith("nf-")} | {
               h: ("drop", "pass", "mark", "pass-limit") for h in FIELDS
               if h.startswith("cgroup-")}


def match(field: str, rng: random.Random, family: ir.Family = ir.Family.ANY) -> ir.Match:
    """A match on ``field`` from the pools; on an IP rule, ``ether-type`` of IP types
    (another can never hold there, negated or not: the rule needs IP)."""
    neg = rng.random() < 0.3
    if field == "ether-type" and family is not ir.Family.ANY:
        return ir.IntMatch(field, rng.choice(IP_ETHER_RANGES), neg)
    if field in ("iif", "oif"):
        return ir.IfaceMatch(field, rng.choice(IFACE_LISTS), neg)
    if field in ("ether-src", "ether-dst"):
        return ir.MacMatch(field, tuple(rng.sample(MACS, rng.randint(1, 2))), neg)
    pool = {"mark": MARK_RANGES, "ether-type": ETHER_RANGES, "vlan-id": VLAN_RANGES,
            "icmp-code": CODE_RANGES}[field]
    return ir.IntMatch(field, rng.choice(pool), neg)


class Rules:
    def __init__(self) -> None:
        self.index = itertools.count()

    def rule(self, action: ir.Action, fields: tuple[str, ...], rng: random.Random,
             limit: ir.Limit | None = None) -> ir.Rule:
        """A rule on ``fields``; its protocol: ICMP for ``icmp-code``, else any of
        all/ip/ip6/tcp/udp (a reset needs tcp, a reply of one family that family)."""
        if "icmp-code" in fields:
            proto = rng.choice(("icmp", "icmp6"))
        elif isinstance(action, ir.Reject) and action.kind == "tcp-reset":
            proto = "tcp"
        elif isinstance(action, ir.Reject) and None in ir.REJECTS[action.kind]:
            proto = "ip" if ir.REJECTS[action.kind][0] is not None else "ip6"  # one family's
        else:
            proto = rng.choice(("all", "all", "ip", "ip6", "tcp", "udp"))
        number, family = ir.PROTOCOLS[proto]
        n = next(self.index)
        return ir.Rule(n, action, family, number,
                       tuple(match(f, rng, family) for f in fields),
                       proto_name=proto, line=n + 1, limit=limit)


def _action(kind: str, rng: random.Random) -> tuple[ir.Action, ir.Limit | None]:
    if kind == "reject":
        return ir.Reject(rng.choice(sorted(ir.REJECTS))), None
    if kind == "mark":
        return ir.Mark(rng.choice(MARKS[1:])), None
    if kind == "pass-limit":
        per = rng.choice((None, "src", "dst"))
        return ir.Pass(), ir.Limit(ir.Rate(rng.choice((1, 3)), "second", rng.choice((1, 2))),
                                   per)
    return {"drop": ir.Drop(), "pass": ir.Pass()}[kind], None


def shapes(hook: str, default: str, rng: random.Random, terminals: int = 12) -> ir.Policy:
    """One count rule per subset of the hook's fields, then ``terminals`` rules with
    the hook's actions on random subsets (each action at least once)."""
    fields, rules = FIELDS[hook], Rules()
    subsets = [s for n in range(len(fields) + 1) for s in itertools.combinations(fields, n)]
    out = [rules.rule(ir.Count(), s, rng) for s in subsets]
    kinds = list(ACTIONS[hook]) + [rng.choice(ACTIONS[hook])
                                   for _ in range(terminals - len(ACTIONS[hook]))]
    rng.shuffle(kinds)
    kinds.sort(key=lambda k: k != "mark")  # marks first: later rules read the new mark
    for kind in kinds:
        action, limit = _action(kind, rng)
        chosen = tuple(f for f in fields if rng.random() < 0.3)
        out.append(rules.rule(action, chosen, rng, limit))
    name = "egress" if hook == "tc-egress" else "ingress"
    if hook.startswith("nf-"):  # nf-raw-prerouting: the block `raw prerouting`
        name = hook.removeprefix("nf-").replace("-", " ")
    if hook.startswith("cgroup-"):
        name = "input" if hook == "cgroup-ingress" else "output"
    return ir.Policy(tuple(out), ir.Verdict(default), hook=ir.Hook(name), source="v2gen.pf")


# -------------------------------------------------------------------------- frames

def _icmp(rng: random.Random) -> bytes:
    code, kind = rng.choice(ICMP_CODES), rng.choice((0, 3, 8, 11))
    if rng.random() < 0.5:
        msg = fb.icmp(kind, code, bytes(4), b"payload")
        return fb.ethernet(MACS[0], MACS[1], 0x0800, fb.ipv4(A4, B4, 1, msg))
    msg = fb.icmp6(A6, B6, rng.choice((1, 128, 129)), code, bytes(4), b"payload")
    return fb.ethernet(MACS[0], MACS[1], 0x86DD, fb.ipv6(A6, B6, 58, msg))


def mutate(frame: bytes, rng: random.Random) -> bytes:
    """The frame with the pools' MACs, a VLAN tag of the pools or another EtherType."""
    if len(frame) < 14:
        return frame
    roll = rng.random()
    if roll < 0.3:
        return rng.choice(MACS) + rng.choice(MACS) + frame[12:]
    if roll < 0.55:
        tpid = rng.choice((b"\x81\x00", b"\x88\xa8"))
        return frame[:12] + tpid + rng.choice(VLAN_IDS).to_bytes(2, "big") + frame[12:]
    if roll < 0.65:
        return frame[:12] + rng.choice(ETHER_TYPES).to_bytes(2, "big") + frame[14:]
    return frame


SHOT_DEVICES = (*DEVICES, "x0", None)  # x0: a veth peer, named by `x*` lists


def shots(policy: ir.Policy, n: int, rng: random.Random,
          devices: tuple[str | None, ...] = SHOT_DEVICES, strips: bool = False) -> list[Shot]:
    """``n`` generated frames, mutated, on random devices with random marks; and per
    rule, frames aimed at it (:func:`aimed`; ``strips``: the hook sees frames with the
    outer VLAN tag removed)."""
    base = gen.sample(policy, n, seed=rng.randrange(1 << 30))
    frames = [mutate(f, rng) for f in base] + [mutate(_icmp(rng), rng) for _ in range(n // 4)]
    out = [Shot(f, rng.choice(devices), rng.choice(MARKS)) for f in frames]
    for rule in policy.rules:
        out += [aimed(rule, rng, devices, strips) for _ in range(3)]
    rng.shuffle(out)
    return out


# ------------------------------------------------------------------- aimed frames

def _pick(pool, holds, wanted: bool, rng: random.Random):
    """A value of ``pool`` for which ``holds`` is ``wanted`` (any if none is)."""
    fit = [v for v in pool if bool(holds(v)) == wanted]
    return rng.choice(fit or list(pool))


def _in(ranges) -> callable:
    return lambda v: any(lo <= v <= hi for lo, hi in ranges)


def aimed(rule: ir.Rule, rng: random.Random,
          devices: tuple[str | None, ...] = SHOT_DEVICES, strips: bool = False) -> Shot:
    """A frame, device and mark for which each of the rule's matches holds (or, one
    time in five, fails: the near misses). ``strips``: a VLAN id is aimed at with two
    tags, the wanted id inner (a test run of tc or a socket filter sees the frame
    without the outer tag, and no skb tag; the real hook is judged apart)."""
    want = {m.field: (rng.random() < 0.8) != m.negated for m in rule.matches}
    by = {m.field: m for m in rule.matches}
    code = _pick(ICMP_CODES, _in(by["icmp-code"].ranges), want["icmp-code"], rng) \
        if "icmp-code" in by else rng.choice(ICMP_CODES)
    frame = _base(rule, code, rng)
    if "ether-type" in by and rule.family is ir.Family.ANY:
        etype = _pick(ETHER_TYPES, _in(by["ether-type"].ranges), want["ether-type"], rng)
        frame = frame[:12] + etype.to_bytes(2, "big") + frame[14:]
    macs = [frame[0:6], frame[6:12]]
    for field, at in (("ether-dst", 0), ("ether-src", 1)):
        if field in by:
            macs[at] = _pick(MACS, by[field].macs.__contains__, want[field], rng)
    frame = macs[0] + macs[1] + frame[12:]
    if "vlan-id" in by:
        vid = _pick(VLAN_IDS, _in(by["vlan-id"].ranges), want["vlan-id"], rng)
        frame = frame[:12] + b"\x81\x00" + vid.to_bytes(2, "big") + frame[12:]
        if strips:
            frame = frame[:12] + b"\x88\xa8\x00\x05" + frame[12:]
    dev = rng.choice(devices)
    for field in ("iif", "oif"):
        if field in by:
            dev = _pick(tuple(d or "lo" for d in devices),
                        lambda d, names=by[field].names: any(iface_matches(p, d) for p in names),
                        want[field], rng)
    mark = _pick(MARKS, _in(by["mark"].ranges), want["mark"], rng) if "mark" in by \
        else rng.choice(MARKS)
    return Shot(frame, dev, mark)


def _base(rule: ir.Rule, code: int, rng: random.Random) -> bytes:
    """A well-formed frame of the rule's protocol and family."""
    versions = sorted(rule.family.versions)
    v = rng.choice(versions)
    proto = rule.proto if rule.proto is not None else rng.choice((6, 17, 1 if v == 4 else 58))
    src, dst = (A4, B4) if v == 4 else (A6, B6)
    if proto == 6:
        l4 = fb.tcp(src, dst, 1234, rng.choice((22, 80)), rng.choice((0x02, 0x10, 0x18)),
                    b"data"[:rng.randint(0, 4)])
    elif proto == 17:
        l4 = fb.udp(src, dst, 5353, 53, b"query")
    elif proto == 1:
        l4 = fb.icmp(rng.choice((0, 3, 8)), code, bytes(4), b"ping")
    else:
        l4 = fb.icmp6(src, dst, rng.choice((1, 128)), code, bytes(4), b"ping")
    if v == 4:
        return fb.ethernet(MACS[0], MACS[1], 0x0800, fb.ipv4(src, dst, proto, l4))
    return fb.ethernet(MACS[0], MACS[1], 0x86DD, fb.ipv6(src, dst, proto, l4))
