"""The recipes behind ``pfc.oracle.gen``: which frames, in what mix, with what faults.

Every choice goes through a ``Draw`` (hypothesis or a seeded ``random.Random``), so the
strategies and ``sample()`` share this code. Options first in every weighted table are
the simplest, which is where hypothesis shrinks to. The mix (malformed mode):

- IP frames (82%), aimed at one rule about half the time, each with 0-2 faults:
  IPv4 version/IHL/options/total length/header checksum, TCP data offset, UDP length,
  L4 checksum; IPv6 version/payload length/garbage Hop-by-Hop; then 0-2 VLAN tags,
  truncation at any length (12%) or Ethernet padding (25%);
- ARP (4%), runts below 14 bytes (4%), random bytes (10%, often behind an IP or VLAN
  EtherType).

Well-formed mode (``malformed=False``) keeps IP frames with no faults, no tags, no
truncation, and no IPv6 addresses ``ipv6_rcv`` drops before PREROUTING (loopback,
multicast source, multicast destination of scope 0 or 1).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from pfc.oracle import framebuild as fb

if TYPE_CHECKING:
    from ipaddress import IPv4Address, IPv6Address

    from pfc.oracle.draws import Aim, Constants, Draw, Options

T = TypeVar("T")
V4_FAULTS = ("version", "ihl_low", "ihl_high", "options", "total_length", "ip_checksum",
             "l4_checksum", "data_offset", "udp_length")
V6_FAULTS = ("version", "payload_length", "ext_garbage", "l4_checksum", "data_offset",
             "udp_length")
COMMON_FLAGS = (0x02, 0x12, 0x10, 0x18, 0x11, 0x04, 0x14, 0x01, 0x00, 0xFF)
LATER_OFFSETS = (1, 2, 3, 185, 8191)  # in 8-byte units; 185 = 1480 bytes
MTU = 1500  # an IP length a policy names is built for real only up to this
PAYLOAD_END = 1400  # payload values placed only if they end by here (frames fit the MTU)


def _choice(d: Draw, items: Sequence[T]) -> T:
    return items[d.integer(0, len(items) - 1)]


def _weighted(d: Draw, table: Sequence[tuple[int, T]]) -> T:
    roll = d.integer(0, sum(w for w, _ in table) - 1)
    for weight, item in table:
        if roll < weight:
            return item
        roll -= weight
    raise AssertionError("unreachable")


def _pick(d: Draw, pool: Sequence[int], lo: int, hi: int, p: float = 0.75) -> int:
    """A policy constant with probability ``p`` (when there are any), else any value."""
    return _choice(d, pool) if pool and d.chance(p) else d.integer(lo, hi)


def _flip(d: Draw) -> int:
    """A mask that makes a correct checksum wrong (never 0xffff: see framebuild)."""
    return d.integer(1, 0xFFFE)


# ----------------------------------------------------------------------------- frames

def build_frame(d: Draw, aims: Sequence[Aim], whole: Aim, o: Options) -> bytes:
    """One frame: aimed at a rule of ``aims`` or at the ``whole`` policy."""
    table = ((82, "ip"), (4, "arp"), (4, "runt"), (10, "noise")) if o.malformed \
        else ((1, "ip"),)
    kind = _weighted(d, table)
    if kind == "runt":
        return d.blob(d.integer(0, 13))
    if kind == "noise":
        return _noise(d)
    aim = _choice(d, aims) if aims and d.chance(0.5) else whole
    ethertype, l3 = _arp(d, aim.constants, o) if kind == "arp" else _ip(d, aim, o)
    tags = _tags(d) if o.malformed else ()
    frame = fb.ethernet(o.eth_dst, o.eth_src, ethertype, l3, tags)
    if o.malformed and d.chance(0.12):
        return frame[:d.integer(0, len(frame) - 1)]
    return _pad(d, frame) if d.chance(0.25) else frame


def _noise(d: Draw) -> bytes:
    """Random bytes, often behind an EtherType that makes a reader look further."""
    frame = d.blob(d.integer(15, 128))
    if d.chance(0.6):
        ethertype = _choice(d, (fb.ETH_IP4, fb.ETH_IP6, fb.TPID_8021Q, fb.ETH_ARP))
        first = {fb.ETH_IP4: 0x45, fb.ETH_IP6: 0x60}.get(ethertype, frame[14])
        frame = frame[:12] + struct.pack("!HB", ethertype, first) + frame[15:]
    return frame


def _arp(d: Draw, c: Constants, o: Options) -> tuple[int, bytes]:
    op = _choice(d, (1, 2))
    target_mac = o.eth_dst if op == 2 else bytes(6)
    body = fb.arp(op, o.eth_src, _addr(d, c.v4, 4), target_mac, _addr(d, c.v4, 4))
    return fb.ETH_ARP, body


def _tags(d: Draw) -> tuple[tuple[int, int], ...]:
    tpids = _weighted(d, ((80, ()), (6, (fb.TPID_8021Q,)), (6, (fb.TPID_8021AD,)),
                          (6, (fb.TPID_8021AD, fb.TPID_8021Q)),
                          (2, (fb.TPID_8021Q, fb.TPID_8021Q))))
    return tuple((tpid, (d.integer(0, 7) << 13) | d.integer(1, 4094)) for tpid in tpids)


def _pad(d: Draw, frame: bytes) -> bytes:
    """Pad to the 60-byte Ethernet minimum, sometimes beyond, with zeros or garbage."""
    extra = max(0, 60 - len(frame)) + (d.integer(1, 24) if d.chance(0.3) else 0)
    return frame + (bytes(extra) if d.chance(0.5) else d.blob(extra))


def _faults(d: Draw, o: Options, table: Sequence[str]) -> frozenset[str]:
    if not o.malformed:
        return frozenset()
    count = _weighted(d, ((60, 0), (30, 1), (10, 2)))
    return frozenset(_choice(d, table) for _ in range(count))


def _addr(d: Draw, pool: Sequence[IPv4Address] | Sequence[IPv6Address], size: int) -> bytes:
    return _choice(d, pool).packed if pool and d.chance(0.8) else d.blob(size)


def _proto(d: Draw, aim: Aim) -> int:
    if aim.proto is not None and d.chance(0.85):
        return aim.proto
    return _pick(d, aim.constants.protos, 0, 255, 0.85)


def _room(d: Draw, c: Constants, header: int) -> int | None:
    """Bytes left for the transport so that the IP length is a policy constant (one
    that fits in ``header``..MTU), or None for no target."""
    if not c.lens or not d.chance(0.25):
        return None
    length = _choice(d, c.lens)
    return length - header if header <= length <= MTU else None


def _bad_length(d: Draw, c: Constants, low: int, actual: int, base: int) -> int:
    """A length field that lies: below ``low`` (IHL×4), below or beyond the real
    length, a policy constant, or anything."""
    how = d.integer(0, 4)
    if how == 0 and low > 0:
        return d.integer(0, low - 1)
    if how == 1 and actual > 0:
        return d.integer(0, actual - 1)
    if how == 2 and c.lens:
        return max(0, min(0xFFFF, _choice(d, c.lens) - base))
    if how == 3:
        return d.integer(0, 0xFFFF)
    return actual + d.integer(1, 64)


# -------------------------------------------------------------------------------- IPv4

def _ip(d: Draw, aim: Aim, o: Options) -> tuple[int, bytes]:
    if _choice(d, aim.versions) == 4:
        return fb.ETH_IP4, _ipv4(d, aim, o)
    return fb.ETH_IP6, _ipv6(d, aim, o)


def _ipv4(d: Draw, aim: Aim, o: Options) -> bytes:
    c, bad = aim.constants, _faults(d, o, V4_FAULTS)
    src, dst, proto = _addr(d, c.v4, 4), _addr(d, c.v4, 4), _proto(d, aim)
    options = d.blob(4 * d.integer(1, 10)) if "options" in bad else _ip4_options(d)
    more, offset = _ip4_fragment(d, o)
    l4 = _transport(d, c, proto, src, dst, bad, _room(d, c, 20 + len(options)))
    fields = _ip4_fields(d, c, bad, 20 + len(options), len(l4))
    return fb.ipv4(src, dst, proto, l4, options=options, mf=more, frag_offset=offset,
                   **fields)  # type: ignore[arg-type]


def _ip4_fields(d: Draw, c: Constants, bad: frozenset[str], header: int,
                l4_len: int) -> dict[str, int | bool]:
    fields: dict[str, int | bool] = {"ttl": _pick(d, c.ttls, 0, 255),
                                     "ident": d.integer(0, 0xFFFF), "df": d.chance(0.5)}
    if "version" in bad:
        fields["version"] = _choice(d, (6, 6, 0, 5, 7, 15))
    if "ihl_low" in bad:
        fields["ihl"] = d.integer(0, 4)
    elif "ihl_high" in bad and header < 60:
        fields["ihl"] = d.integer(header // 4 + 1, 15)
    if "total_length" in bad:
        fields["total_length"] = _bad_length(d, c, header, header + l4_len, 0)
    if "ip_checksum" in bad:
        fields["flip"] = _flip(d)
    return fields


def _ip4_options(d: Draw) -> bytes:
    """Options the kernel accepts: NOPs then End, or Router Alert then NOPs."""
    if not d.chance(0.1):
        return b""
    words = d.integer(1, 10)
    if d.chance(0.5):
        return b"\x01" * (4 * words - 1) + b"\x00"
    return b"\x94\x04\x00\x00" + b"\x01" * (4 * words - 4)


def _ip4_fragment(d: Draw, o: Options) -> tuple[bool, int]:
    """(more fragments, offset): mostly none, else a first or a later fragment."""
    if not o.fragments or not d.chance(0.12):
        return False, 0
    if d.chance(0.4):
        return True, 0
    return d.chance(0.5), _later_offset(d, o)


def _later_offset(d: Draw, o: Options) -> int:
    """A fragment offset ≠ 0, in 8-byte units; when well-formed, one that leaves room
    for the fragment within 65535 bytes (as reassembly requires)."""
    top = 0x1FFF if o.malformed else 8000
    return min(top, _choice(d, LATER_OFFSETS) if d.chance(0.5) else d.integer(1, top))


# -------------------------------------------------------------------------------- IPv6

def _ipv6(d: Draw, aim: Aim, o: Options) -> bytes:
    c, bad = aim.constants, _faults(d, o, V6_FAULTS)
    src, dst, proto = _addr(d, c.v6, 16), _addr(d, c.v6, 16), _proto(d, aim)
    if not o.malformed:
        src, dst = _v6_unicast(src), _v6_receivable(dst)
    ext, first, proto = _ext_header(d, o, proto, "ext_garbage" in bad)
    l4 = _transport(d, c, proto, src, dst, bad, _room(d, c, 40 + len(ext)))
    fields = {"hop_limit": _pick(d, c.ttls, 0, 255), "flow": d.integer(0, 0xFFFFF)}
    if "version" in bad:
        fields["version"] = _choice(d, (4, 4, 0, 5, 7, 15))
    if "payload_length" in bad:
        fields["payload_length"] = _bad_length(d, c, 0, len(ext) + len(l4), 40)
    return fb.ipv6(src, dst, first, ext + l4, **fields)


def _v6_unicast(addr: bytes) -> bytes:
    """A source ``ipv6_rcv`` keeps: not multicast, not ::1 (made 2000::/8 instead)."""
    if addr[0] == 0xFF or addr == bytes(15) + b"\x01":
        return b"\x20" + addr[1:]
    return addr


def _v6_receivable(addr: bytes) -> bytes:
    """A destination ``ipv6_rcv`` keeps: not ::1, no multicast of scope 0 or 1."""
    if (addr[0] == 0xFF and addr[1] & 0x0F <= 1) or addr == bytes(15) + b"\x01":
        return b"\x20" + addr[1:]
    return addr


def _ext_header(d: Draw, o: Options, proto: int,
                garbage: bool) -> tuple[bytes, int, int]:
    """(extension header bytes, the fixed header's Next Header, the transport's). A
    protocol of 0 or 44 asks for that extension header, and gets it when well-formed
    (else half the time; without ``fragments``, 44 gets Hop-by-Hop)."""
    kind = _weighted(d, ((80, "none"), (15, "hop"), (5, "fragment")))
    if proto in (fb.HOP_BY_HOP, fb.IPV6_FRAGMENT) and (not o.malformed or d.chance(0.5)):
        kind = "fragment" if proto == fb.IPV6_FRAGMENT else "hop"
        proto = _choice(d, fb.BASE_PROTOS)
    if garbage:
        return fb.hop_by_hop(proto, d.blob(d.integer(0, 30))), fb.HOP_BY_HOP, proto
    if kind == "fragment" and o.fragments:
        offset = 0 if d.chance(0.4) else _later_offset(d, o)
        header = fb.ipv6_fragment(proto, offset, d.chance(0.6), d.integer(0, 2**32 - 1))
        return header, fb.IPV6_FRAGMENT, proto
    if kind != "none":
        return fb.hop_by_hop(proto), fb.HOP_BY_HOP, proto
    return b"", proto, proto


# --------------------------------------------------------------------------- transport

def _transport(d: Draw, c: Constants, proto: int, src: bytes, dst: bytes,
               bad: frozenset[str], room: int | None) -> bytes:
    """The bytes after the IP header (also the data of a later fragment, so that it
    looks like a transport header carrying the policy's ports and flags)."""
    if proto == fb.TCP:
        return _tcp(d, c, src, dst, bad, room)
    if proto == fb.UDP:
        return _udp(d, c, src, dst, bad, room)
    if proto in (fb.ICMP, fb.ICMP6):
        return _icmp(d, c, proto, src, dst, bad, room)
    if d.chance(0.3):
        return fb.udp(src, dst, _port(d, c), _port(d, c), d.blob(d.integer(0, 16)))
    return d.blob(_payload_len(d, room))


def _tcp(d: Draw, c: Constants, src: bytes, dst: bytes, bad: frozenset[str],
         room: int | None) -> bytes:
    options = b""
    if d.chance(0.15):  # MSS, then NOPs: data offset 6..9
        options = b"\x02\x04\x05\xb4" + b"\x01" * 4 * d.integer(0, 3)
    payload = _payload(d, c, None if room is None else room - 20 - len(options))
    words = 5 + len(options) // 4
    offset = None
    if "data_offset" in bad:
        offset = d.integer(0, 4) if d.chance(0.7) else d.integer(words + 1, 15)
    return fb.tcp(src, dst, _port(d, c), _port(d, c), _flags(d, c), payload,
                  seq=d.integer(0, 2**32 - 1), ack=d.integer(0, 2**32 - 1),
                  options=options, data_offset=offset, flip=_l4_flip(d, bad))


def _udp(d: Draw, c: Constants, src: bytes, dst: bytes, bad: frozenset[str],
         room: int | None) -> bytes:
    payload = _payload(d, c, None if room is None else room - 8)
    length = None
    if "udp_length" in bad:
        length = _choice(d, (0, 7, 8 + len(payload) + 1, d.integer(0, 0xFFFF)))
    no_checksum = len(src) == 4 and "l4_checksum" not in bad and d.chance(0.1)
    return fb.udp(src, dst, _port(d, c), _port(d, c), payload, length=length,
                  flip=_l4_flip(d, bad), no_checksum=no_checksum)


def _icmp(d: Draw, c: Constants, proto: int, src: bytes, dst: bytes,
          bad: frozenset[str], room: int | None) -> bytes:
    kind = _pick(d, c.icmp_types, 0, 255)
    code = 0 if d.chance(0.8) else d.integer(0, 255)
    rest, body = d.blob(4), d.blob(_payload_len(d, None if room is None else room - 8))
    if proto == fb.ICMP6:
        return fb.icmp6(src, dst, kind, code, rest, body, flip=_l4_flip(d, bad))
    return fb.icmp(kind, code, rest, body, flip=_l4_flip(d, bad))


def _l4_flip(d: Draw, bad: frozenset[str]) -> int:
    return _flip(d) if "l4_checksum" in bad else 0


def _port(d: Draw, c: Constants) -> int:
    return _pick(d, c.ports, 0, 0xFFFF)


def _flags(d: Draw, c: Constants) -> int:
    if c.flag_masks and d.chance(0.7):
        return _choice(d, c.flag_masks)
    return _choice(d, COMMON_FLAGS) if d.chance(0.5) else d.integer(0, 0xFF)


# ----------------------------------------------------------------------------- payload

def _payload_len(d: Draw, want: int | None) -> int:
    """``want`` when there is one, else 0..64 (0 a fifth of the time)."""
    if want is not None and want >= 0:
        return want
    return d.integer(0, 64) if d.chance(0.8) else 0


def _payload(d: Draw, c: Constants, want: int | None) -> bytes:
    """TCP/UDP payload; often one of the policy's payload values at its offset, as is
    (hit), with one bit flipped, one byte off, or cut one byte short (misses)."""
    n = _payload_len(d, want)
    if not c.payloads or not d.chance(0.6):
        return d.blob(n)
    offset, data = _choice(d, c.payloads)
    if not data or offset + len(data) > PAYLOAD_END:
        return d.blob(n)
    how = _weighted(d, ((4, "hit"), (2, "flip"), (1, "shift"), (1, "short")))
    if how == "flip":
        i = d.integer(0, len(data) - 1)
        data = data[:i] + bytes([data[i] ^ (1 << d.integer(0, 7))]) + data[i + 1:]
    elif how == "shift":
        offset = max(0, offset + _choice(d, (-1, 1)))
    elif how == "short":
        return d.blob(offset) + data[:-1]
    body = bytearray(d.blob(max(n, offset + len(data))))
    body[offset:offset + len(data)] = data
    return bytes(body)
