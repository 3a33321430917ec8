"""ClassBench-style rule sets and traces for pfc (issue 16): large policies of many
different 5-tuple rules, seeded and deterministic.

What ClassBench is, and what this copies of it. ClassBench (D. E. Taylor and J. S.
Turner, "ClassBench: A Packet Classification Benchmark", IEEE INFOCOM 2005 and IEEE/ACM
ToN 15(3), 2007; tech report WUCSE-2004-28, section 4 "Parameter Files") generates filter
sets from *seed* files measured on real ones, in three families: ``acl`` (access control
lists), ``fw`` (firewalls) and ``ipc`` (IP chains). A seed holds, as its own published
``acl1_seed`` shows and Andy Fingerhut's notes on the format describe (``-prots``,
``-flags``, ``-spar``/``-spem``/``-dpar``/``-dpem``, the 25 port-pair sections ``-wc_wc``
.. ``-em_em``, ``-snest``/``-dnest``, ``-sskew``/``-dskew``, ``-pcorr``):

- the protocol mix (``acl1``: TCP 87%, wildcard 8%, ICMP 3%, UDP 1%), and per protocol
  the share of each *port-pair class*: source and destination port each one of WC
  (any), HI (1024-65535), LO (0-1023), AR (an arbitrary range) or EM (one port);
- per port-pair class, the joint distribution of (source, destination) prefix lengths
  (``acl1``'s ``wc_em``: 85% of rules are /32 to /32; ``fw1``'s ``wc_wc`` is dominated
  by a wildcard source with a /24-/32 destination or a /13-/16 source);
- lists of the exact ports and ranges that occur (``acl1``: 1521, 1526, 1433, 135, 80,
  ...; ranges 1600-1649, 1300-1349, 1025-65535, 5001-65535, 8000-8100, ...);
- prefix nesting thresholds (``acl1``: 4 nested source and destination prefixes at most)
  and address-tree skew.

The tables below are this module's own, shaped after those descriptions, not copies of
the seed files: ``acl`` has mostly host (/32) destinations, sources either wildcard or
a host or subnet, destination ports mostly exact (WC-EM, WC-AR); ``fw`` has wide
prefixes, wildcard sources, HI/AR port ranges and more UDP; ``ipc`` is mixed, with
source-port classes and both-sides-exact rules. Addresses come from a small set of
Zipf-weighted base blocks; a new prefix often extends an earlier, shorter one (nesting,
capped at the flavour's threshold) or repeats one (several rules on one host), so rules
overlap and nest as real ones do. Rules are ordered roughly most specific first, exact
duplicates are dropped.

pfc additions (what ClassBench has no notion of, but pfc's meaning must keep):
a fraction of rules with one negated match (``!src``, ``!dport``, ...), a fraction of
``count`` rules (non-terminal), and the default (``default pass`` or ``default drop``).

Traces (:func:`trace`): ClassBench's trace generator picks a filter (Pareto-skewed for
locality) and emits a header at a corner of it; :func:`trace` does the same with
:mod:`pfc.oracle.framebuild` (each field at its low end, high end, inside, or just
outside), plus uniform random headers and, optionally, the malformed mix of
:func:`pfc.oracle.gen.sample` (fragments, bad headers, VLAN tags, IPv6, ARP, runts).

Limits: IPv4 rules only (like ClassBench's own v4 seeds); ports only with tcp/udp.
Usage: ``python benchmarks/classbench.py acl 8000 --seed 1 > acl-8k.pf``.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Network

from pfc.oracle import framebuild as fb

FLAVOURS = ("acl", "fw", "ipc")
WC, HI, LO, AR, EM = "wc", "hi", "lo", "ar", "em"
PORT_CLASS = {HI: (1024, 65535), LO: (0, 1023)}
PROTO_NUMBER = {"tcp": fb.TCP, "udp": fb.UDP, "icmp": fb.ICMP}
Weighted = Sequence[tuple[float, object]]

# Exact ports and ranges that rule sets name; the head of each list is the most common.
COMMON_PORTS = (80, 443, 1521, 53, 22, 25, 1433, 135, 21, 23, 110, 8080, 3389, 445,
                1526, 161, 123, 389, 3306, 5060, 143, 993, 137, 139, 1723, 5432, 6000,
                20, 5555, 8443)
COMMON_RANGES = ((1600, 1649), (1300, 1349), (1025, 65535), (5001, 65535), (8000, 8100),
                 (7500, 7599), (2200, 2210), (20, 23), (137, 139), (109, 110),
                 (161, 162), (6000, 6063), (49152, 65535), (33434, 33534), (1645, 1646))
# Base blocks (first octet, second octet) that addresses are drawn inside, Zipf-weighted.
BASE_BLOCKS = ((10, 0), (172, 16), (192, 168), (130, 85), (198, 51), (203, 0), (62, 14),
               (84, 12), (151, 101), (24, 5), (66, 220), (212, 58), (147, 229), (89, 31))


@dataclass(frozen=True)
class Flavour:
    """One family's parameters: weights, not probabilities (they need not sum to 1)."""

    name: str
    protos: Weighted  # "tcp" | "udp" | "icmp" | None (any protocol)
    port_pairs: Weighted  # (source class, destination class)
    prefix_pairs: Weighted  # (source length, destination length); 0 = wildcard
    nest: int  # most prefixes of one side that may contain each other
    random_ports: float  # share of exact ports drawn at random instead of from the list
    default: str  # the default when the caller names none


FLAVOUR = {
    "acl": Flavour(
        "acl", ((80, "tcp"), (7, "udp"), (3, "icmp"), (10, None)),
        ((55, (WC, EM)), (25, (WC, AR)), (10, (WC, WC)), (5, (WC, HI)), (3, (HI, EM)),
         (2, (LO, EM))),
        ((40, (32, 32)), (14, (0, 32)), (12, (24, 32)), (6, (28, 32)), (4, (16, 32)),
         (5, (32, 24)), (4, (0, 24)), (3, (8, 32)), (3, (24, 24)), (2, (23, 31)),
         (2, (0, 16)), (2, (32, 0)), (1, (16, 16)), (1, (0, 0)), (1, (30, 32))),
        nest=4, random_ports=0.25, default="drop"),
    "fw": Flavour(
        "fw", ((55, "tcp"), (25, "udp"), (5, "icmp"), (15, None)),
        ((30, (WC, WC)), (15, (WC, HI)), (10, (HI, WC)), (25, (WC, EM)), (12, (WC, AR)),
         (5, (HI, HI)), (3, (HI, EM))),
        ((18, (0, 32)), (14, (0, 24)), (10, (0, 16)), (6, (0, 0)), (8, (16, 32)),
         (6, (13, 32)), (8, (24, 32)), (6, (32, 32)), (5, (24, 24)), (5, (8, 0)),
         (4, (16, 16)), (4, (32, 0)), (3, (27, 27)), (3, (0, 8))),
        nest=8, random_ports=0.4, default="drop"),
    "ipc": Flavour(
        "ipc", ((45, "tcp"), (30, "udp"), (10, "icmp"), (15, None)),
        ((25, (WC, WC)), (30, (WC, EM)), (10, (EM, WC)), (10, (WC, AR)), (5, (AR, AR)),
         (5, (EM, EM)), (5, (LO, HI)), (5, (HI, LO)), (5, (AR, WC))),
        ((16, (32, 32)), (10, (24, 32)), (10, (32, 24)), (10, (0, 32)), (8, (32, 0)),
         (8, (24, 24)), (6, (16, 24)), (6, (0, 24)), (5, (0, 0)), (5, (16, 16)),
         (4, (8, 32)), (4, (28, 28)), (4, (20, 32)), (4, (32, 20))),
        nest=6, random_ports=0.3, default="pass"),
}


@dataclass(frozen=True)
class Rule:
    """One generated rule; ``None`` fields are wildcards (not written)."""

    action: str  # drop | pass | count
    proto: str | None
    src: IPv4Network | None = None
    dst: IPv4Network | None = None
    sport: tuple[int, int] | None = None
    dport: tuple[int, int] | None = None
    negated: frozenset[str] = frozenset()

    def text(self) -> str:
        words = [self.action] + ([self.proto] if self.proto else [])
        for name in ("src", "dst", "sport", "dport"):
            value = getattr(self, name)
            if value is None:
                continue
            bang = "!" if name in self.negated else ""
            words.append(f"{bang}{name} {_value_text(value)}")
        return " ".join(words)

    @property
    def specificity(self) -> int:
        """Bits the rule fixes (prefix lengths, about log2 of each port range's size
        below 16): the sort key that puts specific rules first."""
        bits = sum(n.prefixlen for n in (self.src, self.dst) if n is not None)
        for r in (self.sport, self.dport):
            if r is not None:
                bits += 16 - (r[1] - r[0] + 1).bit_length() + 1
        return bits + (4 if self.proto else 0)


def _value_text(value: IPv4Network | tuple[int, int]) -> str:
    if isinstance(value, IPv4Network):
        return str(value.network_address) if value.prefixlen == 32 else str(value)
    lo, hi = value
    return str(lo) if lo == hi else f"{lo}-{hi}"


@dataclass(frozen=True)
class RuleSet:
    flavour: str
    seed: int
    default: str
    rules: tuple[Rule, ...]

    def text(self) -> str:
        """The policy as pfc source text."""
        head = (f"# ClassBench-style {self.flavour} policy: {len(self.rules)} rules, "
                f"seed {self.seed} (benchmarks/classbench.py)\ndefault {self.default}\n")
        return head + "".join(r.text() + "\n" for r in self.rules)


# ---------------------------------------------------------------------- rule generation

@dataclass
class _Side:
    """The prefixes drawn so far on one side (source or destination), for nesting and
    reuse; ``depth`` counts the prefixes of this side that contain a prefix, itself
    included."""

    nest: int
    by_len: dict[int, list[IPv4Network]] = field(default_factory=dict)
    depth: dict[IPv4Network, int] = field(default_factory=dict)

    def add(self, net: IPv4Network, depth: int) -> IPv4Network:
        if net not in self.depth:
            self.by_len.setdefault(net.prefixlen, []).append(net)
            self.depth[net] = depth
        return net


def _pick(rng: random.Random, table: Weighted):
    total = sum(w for w, _ in table)
    roll = rng.random() * total
    for weight, item in table:
        roll -= weight
        if roll < 0:
            return item
    return table[-1][1]


def _zipf_index(rng: random.Random, n: int, s: float = 1.1) -> int:
    weights = [1 / (i + 1) ** s for i in range(n)]
    return _pick(rng, list(zip(weights, range(n), strict=True)))


def _fresh_prefix(rng: random.Random, length: int) -> IPv4Network:
    a, b = BASE_BLOCKS[_zipf_index(rng, len(BASE_BLOCKS))]
    addr = (a << 24) | (b << 16) | rng.getrandbits(16)
    if length < 16:  # a wide prefix: anywhere in the first octet's neighbourhood
        addr = (a << 24) | rng.getrandbits(24)
    mask = (0xFFFFFFFF << (32 - length)) & 0xFFFFFFFF
    return IPv4Network((addr & mask, length))


def _prefix(rng: random.Random, side: _Side, length: int) -> IPv4Network | None:
    """A prefix of ``length`` (None for 0): repeated (20%), nested inside an earlier
    shorter one whose chain is not yet ``nest`` deep (40%), or fresh."""
    if length == 0:
        return None
    same = side.by_len.get(length)
    if same and rng.random() < 0.2:
        return same[rng.randrange(len(same))]
    if rng.random() < 0.4:
        parents = [p for n, ps in side.by_len.items() if n < length for p in ps[-64:]
                   if side.depth[p] < side.nest]
        if parents:
            parent = parents[rng.randrange(len(parents))]
            bits = rng.getrandbits(length - parent.prefixlen)
            addr = int(parent.network_address) | (bits << (32 - length))
            return side.add(IPv4Network((addr, length)), side.depth[parent] + 1)
    return side.add(_fresh_prefix(rng, length), 1)


def _port(rng: random.Random, cls: str, flavour: Flavour) -> tuple[int, int] | None:
    if cls == WC:
        return None
    if cls in PORT_CLASS:
        return PORT_CLASS[cls]
    if cls == EM:
        if rng.random() < flavour.random_ports:
            p = rng.randrange(1, 65536)
        else:
            p = COMMON_PORTS[_zipf_index(rng, len(COMMON_PORTS))]
        return (p, p)
    if rng.random() < 0.5:
        return COMMON_RANGES[_zipf_index(rng, len(COMMON_RANGES))]
    lo = rng.randrange(1, 65000)
    return (lo, min(65535, lo + rng.choice((1, 2, 9, 15, 49, 99, 255, 1023))))


def _negate(rng: random.Random, rule: Rule) -> Rule:
    present = [n for n in ("src", "dst", "sport", "dport") if getattr(rule, n) is not None]
    if not present:
        return rule
    return Rule(rule.action, rule.proto, rule.src, rule.dst, rule.sport, rule.dport,
                frozenset((rng.choice(present),)))


def _one_rule(rng: random.Random, flavour: Flavour, sides: tuple[_Side, _Side],
              action: str) -> Rule:
    proto = _pick(rng, flavour.protos)
    src_len, dst_len = _pick(rng, flavour.prefix_pairs)
    src, dst = _prefix(rng, sides[0], src_len), _prefix(rng, sides[1], dst_len)
    sport = dport = None
    if proto in ("tcp", "udp"):
        s_cls, d_cls = _pick(rng, flavour.port_pairs)
        sport, dport = _port(rng, s_cls, flavour), _port(rng, d_cls, flavour)
    return Rule(action, proto, src, dst, sport, dport)


def generate(flavour: str, n: int, seed: int = 0, *, default: str | None = None,
             negated: float = 0.03, count: float = 0.03, drop: float = 0.5) -> RuleSet:
    """``n`` distinct rules of ``flavour`` (acl, fw, ipc), the same for the same
    arguments. ``negated``: share of rules with one negated match; ``count``: share of
    ``count`` rules; ``drop``: share of drops among the terminal rules."""
    if flavour not in FLAVOUR:
        raise ValueError(f"unknown flavour {flavour!r}; one of {', '.join(FLAVOURS)}")
    if n < 1:
        raise ValueError("a rule set has at least one rule")
    f, rng = FLAVOUR[flavour], random.Random(f"{flavour}:{n}:{seed}")
    sides = (_Side(f.nest), _Side(f.nest))
    seen: set[Rule] = set()
    rules: list[Rule] = []
    while len(rules) < n:
        roll = rng.random()
        action = "count" if roll < count else "drop" if rng.random() < drop else "pass"
        rule = _one_rule(rng, f, sides, action)
        if rng.random() < negated:
            rule = _negate(rng, rule)
        if rule not in seen and (rule.proto or rule.src or rule.dst):
            seen.add(rule)
            rules.append(rule)
    # Most specific first, with noise so that equal keys do not sort into blocks.
    order = sorted(range(n), key=lambda i: -rules[i].specificity - 6 * rng.random())
    return RuleSet(flavour, seed, default or f.default, tuple(rules[i] for i in order))


# ------------------------------------------------------------------------------ traces

@dataclass(frozen=True)
class Header:
    """A 5-tuple a trace frame carries; ``aim`` is the rule it was aimed at (or None)."""

    proto: int
    src: int
    dst: int
    sport: int
    dport: int
    aim: int | None

    def frame(self) -> bytes:
        s, d = self.src.to_bytes(4, "big"), self.dst.to_bytes(4, "big")
        if self.proto == fb.TCP:
            l4 = fb.tcp(s, d, self.sport, self.dport, 0x18, b"classbench")
        elif self.proto == fb.UDP:
            l4 = fb.udp(s, d, self.sport, self.dport, b"classbench")
        else:
            l4 = fb.icmp(8, 0, b"\0\1\0\1", b"classbench")
        ip = fb.ipv4(s, d, self.proto, l4)
        return fb.ethernet(bytes.fromhex("020000000002"), bytes.fromhex("020000000001"),
                           fb.ETH_IP4, ip)


def _corner(rng: random.Random, lo: int, hi: int, top: int, negated: bool) -> int:
    """A value at an edge of [lo, hi] or inside it; one in eight just outside an edge.
    A negated match is aimed outside the range: next to an edge or anywhere."""
    outside = [v for v in (lo - 1, hi + 1) if 0 <= v <= top]
    if negated and outside:
        if rng.random() < 0.5:
            return rng.choice(outside)
        v = rng.randrange(top + 1 - (hi - lo + 1))
        return v if v < lo else v + (hi - lo + 1)
    if outside and rng.random() < 0.125:
        return rng.choice(outside)
    return rng.choice((lo, hi, lo + rng.randrange(hi - lo + 1)))


def _aimed(rng: random.Random, rule: Rule, index: int) -> Header:
    proto = PROTO_NUMBER[rule.proto] if rule.proto else rng.choice((fb.TCP, fb.UDP, fb.ICMP))
    values = []
    for name, top in (("src", 2**32 - 1), ("dst", 2**32 - 1), ("sport", 65535),
                      ("dport", 65535)):
        value = getattr(rule, name)
        if value is None:
            values.append(rng.randrange(top + 1))
            continue
        if isinstance(value, IPv4Network):
            value = (int(value.network_address), int(value.broadcast_address))
        values.append(_corner(rng, value[0], value[1], top, name in rule.negated))
    return Header(proto, *values, aim=index)


def _uniform(rng: random.Random) -> Header:
    proto = rng.choice((fb.TCP, fb.TCP, fb.UDP, fb.ICMP))
    a, b = BASE_BLOCKS[_zipf_index(rng, len(BASE_BLOCKS))], BASE_BLOCKS[rng.randrange(14)]
    src = (a[0] << 24) | (a[1] << 16) | rng.getrandbits(16) if rng.random() < 0.7 \
        else rng.getrandbits(32)
    dst = (b[0] << 24) | (b[1] << 16) | rng.getrandbits(16)
    return Header(proto, src, dst, rng.randrange(65536), rng.randrange(65536), None)


def headers(rules: RuleSet, n: int, seed: int = 0, *, aimed: float = 0.8,
            pareto: float = 1.0) -> list[Header]:
    """``n`` headers: a share ``aimed`` at a rule's corners (the rule picked uniformly,
    as ClassBench's trace generator does), the rest uniform; each header repeated a
    Pareto-distributed number of times (shape ``pareto``; locality of reference)."""
    rng = random.Random(f"trace:{rules.flavour}:{len(rules.rules)}:{seed}")
    out: list[Header] = []
    while len(out) < n:
        if rules.rules and rng.random() < aimed:
            i = rng.randrange(len(rules.rules))
            header = _aimed(rng, rules.rules[i], i)
        else:
            header = _uniform(rng)
        burst = min(n - len(out), int(rng.paretovariate(pareto)) if pareto else 1)
        out.extend([header] * burst)
    return out


def trace(rules: RuleSet, n: int, seed: int = 0, *, malformed: float = 0.0,
          policy=None) -> list[bytes]:
    """``n`` Ethernet frames: corner and uniform headers (:func:`headers`) and a share
    ``malformed`` from :func:`pfc.oracle.gen.sample` on the compiled ``policy``
    (needed then): fragments, bad headers, VLAN tags, IPv6, ARP, runts."""
    bad = round(n * malformed)
    frames = [h.frame() for h in headers(rules, n - bad, seed)]
    if bad:
        from pfc.oracle import gen

        if policy is None:
            raise ValueError("malformed frames need the compiled policy")
        extra = gen.sample(policy, bad, seed=seed)
        step = max(1, len(frames) // max(1, bad))
        for k, frame in enumerate(extra):  # spread through the trace
            frames.insert(min(len(frames), k * (step + 1)), frame)
    return frames


def counts(rules: RuleSet) -> dict[str, int]:
    """How many rules have each property: the mix, for reports and tests."""
    out = {"rules": len(rules.rules)}
    for r in rules.rules:
        for key in (r.action, f"proto:{r.proto or 'any'}",
                    *(f"{n}" for n in ("src", "dst", "sport", "dport") if getattr(r, n)),
                    *(f"!{n}" for n in r.negated)):
            out[key] = out.get(key, 0) + 1
    return out


def prefix_lengths(rules: RuleSet, side: str) -> dict[int, int]:
    """Histogram of one side's prefix lengths (0 for a wildcard)."""
    out: dict[int, int] = {}
    for r in rules.rules:
        net = getattr(r, side)
        n = net.prefixlen if net is not None else 0
        out[n] = out.get(n, 0) + 1
    return dict(sorted(out.items()))


def _main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("flavour", choices=FLAVOURS)
    ap.add_argument("rules", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--default", choices=("pass", "drop"))
    args = ap.parse_args(argv)
    sys.stdout.write(generate(args.flavour, args.rules, args.seed, default=args.default).text())
    return 0


if __name__ == "__main__":
    sys.exit(_main())

__all__ = ["FLAVOURS", "Header", "Rule", "RuleSet", "counts", "generate", "headers",
           "prefix_lengths", "trace"]
