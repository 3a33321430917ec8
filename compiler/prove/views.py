"""What each hook sees of a frame, as a constraint on the symbolic frame.

The symbolic frame of a proof is the frame *as the hook sees it* (semantics.md "What
each hook sees", each backend's ``view``); the policy is read from it as ``compare``
reads it, and a witness is turned back into a frame to send (:func:`wire`).

- ``wire`` (XDP): every frame of 14 bytes or more, as on the wire; the policy skips
  one VLAN tag.
- ``l2`` (tc, socket filters, cbpf, nft netdev ingress): every frame of 14 bytes or
  more, the outer tag already removed: a tag still at byte 12 is an inner one, and the
  frame is not IP (``packets.l2_input_view``).
- ``ip`` (nft inet prerouting, iptables raw PREROUTING): exactly the frames
  ``packets.ip_input_view`` gives: untagged; IPv4 with version 4, IHL >= 5, a header
  checksum that verifies and total length = the bytes after the Ethernet header;
  IPv6 with version 6, 40 + payload length = those bytes, no loopback address and no
  multicast source or interface/reserved-scope multicast destination. IPv6 hop-by-hop
  options are not checked (a superset: frames ``ipv6_parse_hopopts`` drops are
  included).
- ``input`` (nft inet input, iptables filter INPUT): ``ip``, and no IPv4 fragment, no
  martian or foreign multicast address (``iplab.delivered``); IPv4 options are not
  checked (a superset: frames with options ``ip_options_compile`` refuses are in).
"""

from __future__ import annotations

import z3

from pfc.prove.frame import Frame, bv, u32
from pfc.prove.rewrite import MASK16, fold

KINDS = {("xdp", "xdp"): "wire", ("tc", "tc"): "l2", ("socket", "socket"): "l2",
         ("cbpf", "socket"): "l2", ("nft", "ingress"): "l2", ("nft", "prerouting"): "ip",
         ("nft", "input"): "input", ("iptables", "raw-prerouting"): "ip",
         ("iptables", "filter-input"): "input"}
OUTER_TAG = b"\x81\x00\x00\x01"  # 802.1Q VLAN 1, removed by the kernel before L2 hooks


def kind(target: str, hook: str) -> str:
    try:
        return KINDS[(target, hook)]
    except KeyError:
        raise ValueError(f"no view for target `{target}` hook `{hook}`") from None


def skip_tag(kind_: str) -> bool:
    """How the policy reads the frame a hook of this kind sees."""
    return kind_ == "wire"


def constraint(kind_: str, f: Frame, checksum: bool = True) -> z3.BoolRef:
    """The frames a hook of this kind sees; without ``checksum``, IPv4 headers whose
    checksum does not verify too (a superset: :func:`repair` makes one verify)."""
    base = z3.And(f.valid(), f.has(0, 14))
    if kind_ == "wire":
        return base
    if kind_ == "l2":  # an inner tag left at byte 12 came from a frame of 20 bytes or more
        tag = z3.Or(f.u16(12) == 0x8100, f.u16(12) == 0x88A8)
        return z3.And(base, z3.Or(z3.Not(tag), f.has(0, 16)))
    ip = z3.Or(_ipv4(f, checksum), _ipv6(f))
    if kind_ == "ip":
        return z3.And(base, ip)
    return z3.And(base, ip, _delivered(f))


def _ipv4(f: Frame, checksum: bool = True) -> z3.BoolRef:
    first = f.byte(14)
    ihl = u32(first & 0x0F) * 4
    total = u32(f.u16(16))
    verifies = _checksum_verifies(f, ihl) if checksum else z3.BoolVal(True)
    return z3.And(f.u16(12) == 0x0800, f.has(14, 20), z3.LShR(first, 4) == 4,
                  z3.UGE(ihl, 20), f.has(14 + ihl, 0), verifies,
                  total == f.length - 14, z3.UGE(total, ihl))


def checked(kind_: str) -> bool:
    """The hook sees only IPv4 headers whose checksum verifies."""
    return kind_ in ("ip", "input")


def repair(kind_: str, seen: bytes) -> bytes:
    """``seen`` with its IPv4 header checksum set so that it verifies (hooks that
    check it; other frames unchanged)."""
    if not checked(kind_) or seen[12:14] != b"\x08\x00" or len(seen) < 34:
        return seen
    ihl = (seen[14] & 0x0F) * 4
    header = seen[14:24] + b"\0\0" + seen[26:14 + ihl]
    total = sum(int.from_bytes(header[i:i + 2], "big") for i in range(0, ihl, 2))
    while total > MASK16:
        total = (total & MASK16) + (total >> 16)
    return seen[:24] + (MASK16 - total).to_bytes(2, "big") + seen[26:]


def _checksum_verifies(f: Frame, ihl: z3.BitVecRef) -> z3.BoolRef:
    """The header's words sum to 0xffff in ones' complement, written as what the
    checksum word must be given the others: ``fold(S + c) == 0xffff`` with S > 0 (the
    version word) holds exactly when ``c == 0xffff - fold(S)``, or ``c == 0xffff``
    where ``fold(S) == 0xffff``. The same set of frames; a solver looking for a frame
    now sets the other bytes and computes ``c`` forward instead of searching through
    an adder backwards (an iptables mutant's witness: 129 s -> ...)."""
    others = bv(0)
    for i in range(30):
        if i == 5:  # the checksum, at byte 10 of the header
            continue
        word = u32(f.u16(14 + 2 * i))
        others = others + z3.If(z3.ULT(bv(2 * i), ihl), word, bv(0))
    return checksum_word_ok(others, u32(f.u16(24)))


def checksum_word_ok(others: z3.BitVecRef, c: z3.BitVecRef) -> z3.BoolRef:
    """``fold(others + c) == 0xffff`` for ``others`` in 1..29 * 0xffff and a 16-bit
    ``c`` (both 32 bits wide), solved for ``c`` (tests/prove: the identity, proved)."""
    folded = fold(others)
    return z3.Or(c == MASK16 - folded, z3.And(folded == MASK16, c == MASK16))


ONE = 1


def _ipv6(f: Frame) -> z3.BoolRef:
    src, dst = f.bytes_(22, 16), f.bytes_(38, 16)
    return z3.And(f.u16(12) == 0x86DD, f.has(14, 40), z3.LShR(f.byte(14), 4) == 6,
                  src != ONE, dst != ONE, f.byte(22) != 0xFF,
                  z3.Or(f.byte(38) != 0xFF, z3.And(f.byte(39) & 0x0F != 0,
                                                   f.byte(39) & 0x0F != 1)),
                  40 + u32(f.u16(18)) == f.length - 14)


ALL_NODES = 0xFF020000000000000000000000000001


def _delivered(f: Frame) -> z3.BoolRef:
    v6 = f.u16(12) == 0x86DD
    dst6 = f.bytes_(38, 16)
    six = z3.If(f.byte(38) == 0xFF, dst6 == ALL_NODES,
                z3.Not(z3.And(f.byte(38) == 0xFE, f.byte(39) & 0xC0 == 0x80)))
    src, dst = f.bytes_(26, 4), f.bytes_(30, 4)
    multicast_src = z3.LShR(f.byte(26), 4) == 0xE
    four = z3.And(
        f.u16(20) & 0x3FFF == 0, z3.Not(multicast_src), src != 0xFFFFFFFF,
        z3.If(dst == 0, src == 0,
              z3.If(src == 0, z3.Or(dst == 0xFFFFFFFF, dst == 0xE0000001),
                    z3.Or(z3.LShR(f.byte(30), 4) != 0xE, dst == 0xE0000001))))
    return z3.If(v6, six, four)


def wire(kind_: str, seen: bytes) -> bytes:
    """A frame to send so that the hook sees ``seen``: an L2 hook's frame with a tag
    at byte 12 gets an outer tag for the kernel to remove."""
    if kind_ == "l2" and seen[12:14] in (b"\x81\x00", b"\x88\xa8"):
        return seen[:12] + OUTER_TAG + seen[12:]
    return seen
