"""The published ClassBench filter sets and traces (acl1, fw1, ipc1 at 10k), as pfc
policies and frames, and as the files ``dpdk-test-acl`` reads.

The sets are ClassBench's (D. E. Taylor and J. S. Turner, "ClassBench: A Packet
Classification Benchmark", INFOCOM 2005): ``acl1_10k``, ``fw1_10k``, ``ipc1_10k`` and
their traces, as packet-classification papers and tools redistribute them (these
copies: the test data of the HyperSplit classifier's public repository), stored
gzipped in ``benchmarks/data/classbench/``.

Formats. A filter line is ``@SRC/LEN DST/LEN SPLO : SPHI DPLO : DPHI PROTO/MASK``
(mask 0xFF: one protocol, 0x00: any); a trace line ``SRC DST SPORT DPORT PROTO ID``
(addresses as unsigned decimals, ID the first filter that matches, 1-based). DPDK's
``dpdk-test-acl`` reads both as they are (``--rulesf``, ``--tracef``).

As pfc rules (:func:`policy_text`): filter *i* (0-based) is ``drop`` when *i* is even,
``pass`` when odd (so neighbouring filters never merge into one rule), ``default
drop``; ``/0`` and ``0 : 65535`` are not written; protocol 6, 17, 1 are ``tcp``,
``udp``, ``icmp``, another one ``ip proto P``, any protocol ``ip`` (the sets are IPv4).
No filter in these sets names ports with a protocol other than TCP or UDP (pfc reads
ports only behind those), which :func:`rules` checks.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

from pfc.oracle import framebuild as fb

DATA = Path(__file__).resolve().parent / "data" / "classbench"
SETS = ("acl1", "fw1", "ipc1")
PROTO_WORD = {6: "tcp", 17: "udp", 1: "icmp"}
DUT_MAC = bytes.fromhex("027066630010")  # pfc.bench.measure.DUT_MAC
SEND_MAC = bytes.fromhex("027066630002")


@dataclass(frozen=True)
class Filter:
    src: tuple[int, int]  # address, prefix length
    dst: tuple[int, int]
    sport: tuple[int, int]
    dport: tuple[int, int]
    proto: int | None  # None: any

    def text(self, action: str) -> str:
        words = [action, PROTO_WORD.get(self.proto, "ip") if self.proto is not None
                 else "ip"]
        if self.proto is not None and self.proto not in PROTO_WORD:
            words.append(f"proto {self.proto}")
        for name, (addr, plen) in (("src", self.src), ("dst", self.dst)):
            if plen:
                words.append(f"{name} {_ip(addr)}" + (f"/{plen}" if plen < 32 else ""))
        for name, (lo, hi) in (("sport", self.sport), ("dport", self.dport)):
            if (lo, hi) != (0, 65535):
                words.append(f"{name} {lo}" + (f"-{hi}" if hi != lo else ""))
        return " ".join(words)


def _ip(addr: int) -> str:
    return ".".join(str(addr >> s & 255) for s in (24, 16, 8, 0))


def _prefix(text: str) -> tuple[int, int]:
    addr, plen = text.split("/")
    a = 0
    for part in addr.split("."):
        a = a << 8 | int(part)
    n = int(plen)
    return (a & ((0xFFFFFFFF << (32 - n)) & 0xFFFFFFFF), n)


def parse_filter(line: str) -> Filter:
    f = line.lstrip("@").split()
    proto, mask = (int(x, 16) for x in f[8].split("/"))
    return Filter(_prefix(f[0]), _prefix(f[1]), (int(f[2]), int(f[4])),
                  (int(f[5]), int(f[7])), proto if mask == 0xFF else None)


def rule_lines(name: str) -> list[str]:
    with gzip.open(DATA / f"{name}_10k.gz", "rt") as fh:
        return [ln.rstrip("\n") for ln in fh if ln.startswith("@")]


def rules(name: str, n: int | None = None) -> list[Filter]:
    """The first ``n`` filters of set ``name`` (all when None)."""
    out = [parse_filter(ln) for ln in rule_lines(name)[:n]]
    for i, f in enumerate(out):
        if f.proto not in (6, 17) and (f.sport, f.dport) != ((0, 65535), (0, 65535)):
            raise ValueError(f"{name} filter {i + 1}: ports without tcp or udp")
    return out


def policy_text(name: str, filters: list[Filter]) -> str:
    head = (f"# ClassBench {name}: the first {len(filters)} filters of {name}_10k "
            "(benchmarks/cbsets.py)\ndefault drop\n")
    return head + "".join(f.text("drop" if i % 2 == 0 else "pass") + "\n"
                          for i, f in enumerate(filters))


Header = tuple[int, int, int, int, int]


def trace(name: str, distinct: bool = True) -> list[Header]:
    """The set's trace as (src, dst, sport, dport, proto); with ``distinct``, each
    header once, in the order of its first appearance."""
    out: list[Header] = []
    seen: set[Header] = set()
    with gzip.open(DATA / f"{name}_10k_trace.gz", "rt") as fh:
        for ln in fh:
            f = ln.split()
            if len(f) < 5:
                continue
            h = (int(f[0]), int(f[1]), int(f[2]), int(f[3]), int(f[4]))
            if distinct and h in seen:
                continue
            seen.add(h)
            out.append(h)
    return out


def trace_text(headers: list[Header]) -> str:
    """``dpdk-test-acl --tracef`` input (the five fields)."""
    return "".join(f"{s}\t{d}\t{sp}\t{dp}\t{p}\n" for s, d, sp, dp, p in headers)


def rules_text(name: str, n: int) -> str:
    """``dpdk-test-acl --rulesf`` input: the first ``n`` filters as published."""
    return "".join(ln + "\n" for ln in rule_lines(name)[:n])


def frame(h: Header) -> bytes:
    """The header as an Ethernet frame to the bench lab's device: TCP or UDP with its
    ports, another protocol with 8 bytes carrying the ports where a transport header
    would (pfc reads none there)."""
    src, dst, sport, dport, proto = h
    s, d = src.to_bytes(4, "big"), dst.to_bytes(4, "big")
    if proto == 6:
        l4 = fb.tcp(s, d, sport, dport, 0x02, b"")
    elif proto == 17:
        l4 = fb.udp(s, d, sport, dport, b"")
    else:
        l4 = sport.to_bytes(2, "big") + dport.to_bytes(2, "big") + bytes(4)
    return fb.ethernet(DUT_MAC, SEND_MAC, fb.ETH_IP4, fb.ipv4(s, d, proto, l4))
