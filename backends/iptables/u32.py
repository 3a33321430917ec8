"""Byte-exact match text for the iptables backend: ``-m u32`` tests and, where u32
cannot be exact, a small classic-BPF program for ``-m bpf``.

Why not ``-p tcp --dport``, ``-m multiport``, ``--tcp-flags`` or ``-m icmp``: measured on
Linux 6.18 with iptables 1.8.9 (docs/iptables.md, quirks 1-3), these matches *hotdrop*
(drop the packet, whatever the rule's target) when the transport header is shorter
than they want: xt_tcpudp's tcp match below 20 bytes and its udp match below 8 (legacy;
iptables-nft translates both to nft payload expressions and does not), multiport below 4
and icmp below 8 (both flavours, through nft_compat). The policy language gives such a
packet a verdict from the fields it does carry, so pfc reads transport fields itself.

What xt_u32 does (net/netfilter/xt_u32.c), and what the builders rely on:

- positions count from the IP header (``skb->data`` at raw PREROUTING and filter
  INPUT), and ``skb->len`` is the IP total length there (``ip_rcv`` trims);
- every read is a 4-byte word: a word that runs past the end of the packet fails the
  whole match, even if the byte tested lies inside it (semantics.md fact 7), so each
  field is read through the word that *ends* at the field's last byte: the word is
  inside the packet exactly when the field is;
- ``A@B`` moves the base by A and then needs 4 bytes at the new base itself
  (``skb->len >= at + 4``) before reading at ``at + B``. IPv4 transport fields are read
  from the base ``IHL×4`` (``0>>22&0x3C@``): exact for every field that ends at least
  4 bytes into the transport header. A rule whose transport fields all end earlier
  (``sport`` or ``icmp-type`` alone) and a TCP payload match ending in the first 3
  payload bytes cannot be read exactly by u32; those use ``-m bpf`` (xt_bpf runs the
  program on the same bytes; a load beyond the packet ends it with "no match");
- libxt_u32 accepts at most 10 ``&&`` tests per match, 10 values per test and 10
  location elements per test (measured): callers split longer lists.

IPv6 has no IHL: v1 reads the fixed header only (transport at byte 40), so every IPv6
position is absolute and u32 is always exact.
"""

from __future__ import annotations

from dataclasses import dataclass

from pfc.frontend.matches import complement_ranges as complement  # noqa: F401 (u.complement)

U32_MAX_TESTS = 10
U32_MAX_VALUES = 10
BPF_MAX_RANGES = 20  # keeps a program well under xt_bpf's 64 instructions

IP4_T = "0>>22&0x3C@"  # base: the IPv4 transport header (IHL × 4)
IP4_PAYLOAD_TCP = IP4_T + "12>>26&0x3C@"  # base: IHL×4 + data offset×4
IP6_PAYLOAD_TCP = "52>>26&0x3C@"  # base: data offset×4; the payload is 40 further on

Ranges = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class U32Test:
    """One ``location=values`` test of ``--u32``."""

    location: str
    ranges: Ranges
    hex: bool = False

    def text(self) -> str:
        def num(v: int) -> str:
            return f"0x{v:X}" if self.hex else str(v)
        return self.location + "=" + ",".join(
            num(lo) if lo == hi else f"{num(lo)}:{num(hi)}" for lo, hi in self.ranges)


def u32_args(tests: tuple[U32Test, ...]) -> list[str]:
    """``-m u32 --u32 "t&&t..."`` arguments, one match per 10 tests."""
    out: list[str] = []
    for i in range(0, len(tests), U32_MAX_TESTS):
        chunk = tests[i:i + U32_MAX_TESTS]
        out += ["-m", "u32", "--u32", '"' + "&&".join(t.text() for t in chunk) + '"']
    return out


# ------------------------------------------------------------------------ ranges

def clip(ranges: Ranges, lo: int, hi: int, shift: int = 0) -> Ranges:
    """``ranges`` moved by ``-shift`` and cut to lo..hi."""
    out = []
    for a, b in ranges:
        a, b = max(a - shift, lo), min(b - shift, hi)
        if a <= b:
            out.append((a, b))
    return tuple(out)


def chunks(ranges: Ranges, size: int) -> list[Ranges]:
    """Disjoint pieces of at most ``size`` ranges (an OR of them is the whole)."""
    return [ranges[i:i + size] for i in range(0, len(ranges), size)] or [()]


# ------------------------------------------------------------------- field reads

# IP-layer fields: (location, largest value, amount subtracted from the values).
IP_FIELDS = {
    (4, "proto"): ("6&0xFF", 0xFF, 0),
    (4, "ttl"): ("8>>24", 0xFF, 0),
    (4, "len"): ("0&0xFFFF", 0xFFFF, 0),
    (6, "proto"): ("4>>8&0xFF", 0xFF, 0),
    (6, "ttl"): ("4&0xFF", 0xFF, 0),
    (6, "len"): ("4>>16", 0xFFFF, 40),  # IPv6 `len` is 40 + payload length
}

# Transport fields read from the word that covers them: (location, largest value).
# IPv4 words start at the transport header (so the packet must hold its first 4 bytes).
TRANSPORT_FIELDS = {
    (4, "sport"): (IP4_T + "0>>16", 0xFFFF),
    (4, "dport"): (IP4_T + "0&0xFFFF", 0xFFFF),
    (4, "icmp-type"): (IP4_T + "0>>24", 0xFF),
    (4, "icmp-code"): (IP4_T + "0>>16&0xFF", 0xFF),
    (6, "sport"): ("38&0xFFFF", 0xFFFF),
    (6, "dport"): ("40&0xFFFF", 0xFFFF),
    (6, "icmp-type"): ("37&0xFF", 0xFF),
    (6, "icmp-code"): ("38&0xFF", 0xFF),
}
FLAGS_WORD = {4: IP4_T + "10", 6: "50"}  # the word whose last byte is TCP byte 13
# Where each transport field ends, in bytes from the transport header.
FIELD_END = {"sport": 2, "dport": 4, "icmp-type": 1, "icmp-code": 2, "flags": 14}
FIELD_START = {"icmp-code": 1}  # where a field starts, when not at 0
NEXT_HEADER = {4: None, 6: "4>>8&0xFF"}


def flags_test(family: int, mask: int, ranges: Ranges) -> U32Test:
    return U32Test(f"{FLAGS_WORD[family]}&0x{mask:X}", ranges, hex=True)


# ----------------------------------------------------------------------- payload

@dataclass(frozen=True)
class Word:
    """One 4-byte read of a payload match: position, mask and expected value."""

    pos: int
    mask: int
    value: int


def payload_words(start: int, data: bytes) -> list[Word]:
    """Words covering ``data`` at ``start`` (relative to some base), each ending at or
    before the last data byte, first word first. Positions may be negative: the caller
    decides whether its base allows that."""
    words, end = [], start + len(data)
    while end > start:
        pos = end - 4
        mask = value = 0
        for i in range(4):
            at = pos + i
            mask <<= 8
            value <<= 8
            if start <= at < end:
                mask |= 0xFF
                value |= data[at - start]
        words.append(Word(pos, mask, value))
        end = pos
    return words[::-1]


def payload_base(family: int, proto: int) -> tuple[str, int, U32Test | None]:
    """(location prefix, offset of payload byte 0 from that base, guard test).

    The guard asks for a TCP data offset of at least 5 (below 5 there is no payload).
    """
    if proto == 17:
        return (IP4_T, 8, None) if family == 4 else ("", 48, None)
    if family == 4:
        return IP4_PAYLOAD_TCP, 0, U32Test(IP4_T + "12>>28", ((5, 15),))
    return IP6_PAYLOAD_TCP, 40, U32Test("52>>28", ((5, 15),))


def word_test(prefix: str, word: Word, ranges: Ranges | None = None) -> U32Test:
    mask = "" if word.mask == 0xFFFFFFFF else f"&0x{word.mask:X}"
    return U32Test(f"{prefix}{word.pos}{mask}", ranges or ((word.value, word.value),),
                   hex=True)


def differs(word: Word) -> Ranges:
    """Masked values other than the word's own (the masked value is at most the mask)."""
    return complement(((word.value, word.value),), word.mask)


# ------------------------------------------------------------------ classic BPF

LDX_MSH, LDB_IND, LDH_IND = 0xB1, 0x50, 0x48
JEQ, JGT, JGE = 0x15, 0x25, 0x35
RET, RSH, LSH, ADD_X, TAX = 0x06, 0x74, 0x64, 0x0C, 0x07


def _assemble(program: list[tuple]) -> str:
    """``xt_bpf --bytecode`` text from (code, k) and (code, k, true_label, false_label)
    instructions and ("label", name) markers; a label None means "next"."""
    labels, insns = {}, []
    for item in program:
        if item[0] == "label":
            labels[item[1]] = len(insns)
        else:
            insns.append(item)
    out = []
    for n, insn in enumerate(insns):
        code, k, *jumps = insn
        jt, jf = (0 if lab is None else labels[lab] - n - 1 for lab in (jumps + [None, None])[:2])
        out.append(f"{code} {jt} {jf} {k}")
    return f"{len(out)}," + ",".join(out)


def _in_ranges(ranges: Ranges) -> list[tuple]:
    """Jump to "yes" when A lies in one of ``ranges``, else fall to "no"."""
    program: list[tuple] = []
    for n, (lo, hi) in enumerate(ranges):
        nxt = f"r{n + 1}"
        if lo == hi:
            program.append((JEQ, lo, "yes", nxt))
        else:
            program += [(JGE, lo, None, nxt), (JGT, hi, nxt, "yes")]
        program.append(("label", nxt))
    return program + [(RET, 0), ("label", "yes"), (RET, 1)]


def bpf_ip4_field(offset: int, size: int, ranges: Ranges) -> str:
    """IPv4: the ``size``-byte field at ``offset`` into the transport header lies in
    ``ranges``. The load fails (no match) when the packet does not hold the field."""
    load = LDB_IND if size == 1 else LDH_IND
    return _assemble([(LDX_MSH, 0), (load, offset)] + _in_ranges(ranges))


def bpf_ip4_tcp_payload(offset: int, data: bytes, negated: bool) -> str:
    """IPv4 TCP: ``payload[offset:len(data)]`` equals (or, negated, differs from)
    ``data``; false when the data offset is below 5 or the bytes are not all there."""
    same, diff = (0, 1) if negated else (1, 0)
    program: list[tuple] = [
        (LDX_MSH, 0), (LDB_IND, 12), (RSH, 4), (JGE, 5, None, "fail"), (LSH, 2),
        (ADD_X, 0), (TAX, 0)]
    if len(data) > 1:  # the packet must hold every byte, even when an earlier one differs
        program.append((LDB_IND, offset + len(data) - 1))
    for i, byte in enumerate(data):
        program += [(LDB_IND, offset + i), (JEQ, byte, None, "diff")]
    return _assemble(program + [(RET, same), ("label", "diff"), (RET, diff),
                                ("label", "fail"), (RET, 0)])
