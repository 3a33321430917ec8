"""Ordered frame sequences for the features that remember (``pfc verify``).

Generated frames (``gen``) judge each rule's matches; a stateful policy also needs
frames whose *order* matters: connections opened, answered, closed and refused (for
``ct state``), and bursts that run a bucket dry (for ``limit`` and ``log ... rate``).

- ``connections``: for each TCP/UDP port a ``ct state`` rule names (or 22 and 53), a
  TCP handshake, data and close in both directions with in-window numbers, a UDP
  query and its answer, an ICMP echo and its reply, an ICMP error quoting the UDP
  query, and refused openers (SYN+FIN, a lone FIN); IPv6 too when the policy has IPv6;
- ``bursts``: for each rule with a bucket, frames of the sample the rule's matches hold
  on, each repeated ``burst + 2`` times back to back (two sources for ``per``).

``slowed(policy)``: the policy with every rate made 1/minute (bucket sizes kept). A
kernel run of thousands of frames takes seconds, during which a fast bucket refills
while the interpreter judges them at one instant; at 1/minute the refill is nil, so
the comparison is exact on which packets reach a bucket, its key, and its size. The
rates themselves are measured with timed sends (tests/backends/test_stateful_nf.py).
"""

from __future__ import annotations

from dataclasses import replace

from pfc.frontend import ir
from pfc.oracle import framebuild as fb
from pfc.oracle.interp import rule_matches
from pfc.oracle.packets import read_frame

MAC = b"\x02\x00\x00\x00\x00\x01"
HOSTS = {4: (bytes((10, 0, 0, 1)), bytes((192, 168, 0, 79))),
         6: (bytes.fromhex("20010db8000000000000000000000001"),
             bytes.fromhex("20010db8000000000000000000000002"))}
SYN, ACK, FIN, RST, PSH = 0x02, 0x10, 0x01, 0x04, 0x08
SLOW = 1 / 60  # packets per second a slowed bucket refills


def _eth(version: int, packet: bytes) -> bytes:
    return fb.ethernet(MAC, MAC, 0x0800 if version == 4 else 0x86DD, packet)


def _ip(version: int, src: bytes, dst: bytes, proto: int, segment: bytes) -> bytes:
    if version == 4:
        return _eth(4, fb.ipv4(src, dst, proto, segment))
    return _eth(6, fb.ipv6(src, dst, proto, segment))


def _tcp(version: int, flags: int, src, dst, sport, dport, seq, ack=0) -> bytes:
    return _ip(version, src, dst, 6, fb.tcp(src, dst, sport, dport, flags, b"", seq=seq,
                                             ack=ack))


def _udp(version: int, src, dst, sport, dport, data=b"q") -> bytes:
    return _ip(version, src, dst, 17, fb.udp(src, dst, sport, dport, data))


def handshake(version: int, sport: int, dport: int) -> list[bytes]:
    c, s = HOSTS[version]
    return [_tcp(version, SYN, c, s, sport, dport, 1000),
            _tcp(version, SYN | ACK, s, c, dport, sport, 5000, 1001),
            _tcp(version, ACK, c, s, sport, dport, 1001, 5001),
            _tcp(version, PSH | ACK, c, s, sport, dport, 1001, 5001),
            _tcp(version, FIN | ACK, s, c, dport, sport, 5001, 1001),
            _tcp(version, ACK, c, s, sport, dport, 1001, 5002),
            _tcp(version, FIN | ACK, c, s, sport, dport, 1001, 5002),
            _tcp(version, ACK, s, c, dport, sport, 5002, 1002)]


def exchange(version: int, sport: int, dport: int) -> list[bytes]:
    """A UDP query and answer, an ICMP error quoting the query, an echo and its reply,
    refused TCP openers."""
    c, s = HOSTS[version]
    query = _udp(version, c, s, sport, dport)
    out = [query, _udp(version, s, c, dport, sport, b"a")]
    quoted = query[14:14 + (28 if version == 4 else 48)]
    if version == 4:
        out.append(_eth(4, fb.ipv4(s, c, 1, fb.icmp(3, 3, bytes(4), quoted))))
        out += [_eth(4, fb.ipv4(c, s, 1, fb.icmp(8, 0, b"\0\x07\0\x01", b"ping"))),
                _eth(4, fb.ipv4(s, c, 1, fb.icmp(0, 0, b"\0\x07\0\x01", b"ping")))]
    else:
        out.append(_eth(6, fb.ipv6(s, c, 58, fb.icmp6(s, c, 1, 4, bytes(4), quoted))))
        out += [_eth(6, fb.ipv6(c, s, 58, fb.icmp6(c, s, 128, 0, b"\0\x07\0\x01", b"p"))),
                _eth(6, fb.ipv6(s, c, 58, fb.icmp6(s, c, 129, 0, b"\0\x07\0\x01", b"p")))]
    out += [_tcp(version, SYN | FIN, c, s, sport + 1, dport, 7),
            _tcp(version, FIN, c, s, sport + 2, dport, 7)]
    return out


def _ports(policy: ir.Policy) -> list[int]:
    ports = {lo for r in policy.rules if any(isinstance(m, ir.CtMatch) for m in r.matches)
             for m in r.matches if isinstance(m, ir.IntMatch) and m.field == "dport"
             and not m.negated for lo, _ in m.ranges[:2]}
    return sorted(ports)[:4] or [22, 53]


def connections(policy: ir.Policy) -> list[bytes]:
    if not any(isinstance(m, ir.CtMatch) for r in policy.rules for m in r.matches):
        return []
    versions = [4] + ([6] if any(6 in r.family.versions for r in policy.rules
                                 if r.family is not ir.Family.ANY) else [])
    out = []
    for n, port in enumerate(_ports(policy)):
        for version in versions:
            out += handshake(version, 41000 + 10 * n, port)
            out += exchange(version, 42000 + 10 * n, port)
    return out


def bursts(policy: ir.Policy, sample: list[bytes]) -> list[bytes]:
    out = []
    for rule in policy.rules:
        rate = rule.limit.rate if rule.limit else getattr(rule.action, "rate", None)
        if rate is None:
            continue
        hits = [f for f in sample if rule_matches(rule, read_frame(f))][:2]
        for frame in hits:
            out += [frame] * (rate.burst + 2)
    return out


def slowed(policy: ir.Policy) -> ir.Policy:
    """Every rate 1/minute, bucket sizes kept (module doc)."""
    def slow(rate: ir.Rate | None) -> ir.Rate | None:
        return None if rate is None else replace(rate, count=1, unit="minute")

    rules = []
    for r in policy.rules:
        if r.limit is not None:
            r = replace(r, limit=replace(r.limit, rate=slow(r.limit.rate)))
        if isinstance(r.action, ir.Log) and r.action.rate is not None:
            r = replace(r, action=replace(r.action, rate=slow(r.action.rate)))
        rules.append(r)
    return replace(policy, rules=tuple(rules))


def fast(policy: ir.Policy) -> bool:
    """Whether a bucket refills faster than ``SLOW`` (``slowed`` changes something)."""
    rates = [r.limit.rate for r in policy.rules if r.limit] + \
        [r.action.rate for r in policy.rules if isinstance(r.action, ir.Log) and r.action.rate]
    return any(rate.count / rate.seconds > SLOW for rate in rates)
