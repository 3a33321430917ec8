"""Ordered frame sequences for the features that remember (``pfc verify``).

Generated frames (``gen``) judge each rule's matches; a stateful policy also needs
frames whose *order* matters: connections opened, answered, closed and refused (for
``ct state``), and bursts that run a bucket dry (for ``limit`` and ``log ... rate``).

- ``connections``: for each TCP/UDP port a ``ct state`` rule names (or 22 and 53), a
  TCP handshake, data and close in both directions with in-window numbers, a UDP
  query and its answer, an ICMP error quoting the UDP query, refused openers (SYN+FIN,
  a lone FIN), and ICMP requests and replies in every direction (``icmp_mixes``);
  IPv6 too when the policy has IPv6;
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
    """A UDP query and answer, an ICMP error quoting the query, refused TCP openers,
    then ``icmp_mixes`` (identifiers from ``sport``)."""
    c, s = HOSTS[version]
    query = _udp(version, c, s, sport, dport)
    out = [query, _udp(version, s, c, dport, sport, b"a"), _error(version, s, c, query)]
    out += [_tcp(version, SYN | FIN, c, s, sport + 1, dport, 7),
            _tcp(version, FIN, c, s, sport + 2, dport, 7)]
    return out + icmp_mixes(version, sport)


# ICMP request -> reply types that conntrack pairs (echo; IPv4 timestamp too)
ECHO = {4: (8, 0), 6: (128, 129)}
TIMESTAMP = (13, 14)
OTHER = {4: bytes((10, 0, 0, 2)), 6: bytes.fromhex("20010db8000000000000000000000003")}


def _icmp(version: int, src: bytes, dst: bytes, kind: int, ident: int, code: int = 0,
          body: bytes = b"ping") -> bytes:
    rest = ident.to_bytes(2, "big") + b"\0\x01"
    if version == 4:
        return _eth(4, fb.ipv4(src, dst, 1, fb.icmp(kind, code, rest, body)))
    return _eth(6, fb.ipv6(src, dst, 58, fb.icmp6(src, dst, kind, code, rest, body)))


def _error(version: int, src: bytes, dst: bytes, quoted: bytes) -> bytes:
    """Port unreachable (ICMPv6: port unreachable too) quoting a frame's IP header and
    first 8 transport bytes."""
    inner = quoted[14:14 + (28 if version == 4 else 48)]
    if version == 4:
        return _eth(4, fb.ipv4(src, dst, 1, fb.icmp(3, 3, bytes(4), inner)))
    return _eth(6, fb.ipv6(src, dst, 58, fb.icmp6(src, dst, 1, 4, bytes(4), inner)))


def icmp_mixes(version: int, ident: int) -> list[bytes]:
    """ICMP requests and replies in every direction, which conntrack keys by identifier,
    type and code (``icmp_pkt_to_tuple``), a reply's type being its request's inverse
    (``invmap``): a request and its reply (established), the request again (established:
    a reply was seen), a reply in the request's own direction (invalid: not the reply
    tuple), a reply with no request (invalid), the request sent back the other way (a
    connection of its own, new) and its reply, a reply of another code (invalid), an
    error quoting the request (related) and the same error sent to a third address
    (invalid: not the quoted packet's source). IPv4 adds a timestamp request and reply.
    Identifiers ``ident`` .. ``ident + 5``."""
    c, s = HOSTS[version]
    req, rep = ECHO[version]
    n = [ident + i for i in range(6)]
    request = _icmp(version, c, s, req, n[0])
    out = [request, _icmp(version, s, c, rep, n[0]), request,
           _icmp(version, c, s, req, n[1]), _icmp(version, c, s, rep, n[1]),
           _icmp(version, s, c, rep, n[2]),
           _icmp(version, c, s, req, n[3]), _icmp(version, s, c, req, n[3]),
           _icmp(version, c, s, rep, n[3]),
           _icmp(version, c, s, req, n[4]), _icmp(version, s, c, rep, n[4], code=1),
           _error(version, s, c, request), _error(version, s, OTHER[version], request)]
    if version == 4:
        out += [_icmp(4, c, s, TIMESTAMP[0], n[5], body=bytes(12)),
                _icmp(4, s, c, TIMESTAMP[1], n[5], body=bytes(12))]
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
