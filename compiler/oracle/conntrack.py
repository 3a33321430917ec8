"""The oracle's connection tracker: what ``ct state`` reads, from the frames before.

A model of Linux netfilter conntrack (``nf_conntrack_core.c``, ``nf_conntrack_proto_tcp.c``,
``_udp.c``, ``_icmp.c``, ``_icmpv6.c``) for frames that reach a hook after conntrack
(nft/iptables input). docs/language.md "Connection state" is the reference; in short:

- A connection is keyed by its original tuple (IP version, protocol, addresses, and the
  ports for TCP/UDP; for ICMP the identifier, type and code, as ``icmp_pkt_to_tuple``)
  and found by that tuple or by its reply tuple (``nf_ct_invert_tuple``: addresses and
  ports swapped; ICMP types mapped request <-> reply by ``invmap``, so an echo reply
  sent in the direction of its request, or a request sent back, is not the reply of
  that connection). A packet of its original direction is ``new`` until a reply was
  seen, then ``established``; a reply-direction packet is ``established``.
- Only a packet the policy lets through creates a connection (the kernel confirms a new
  entry only when the packet leaves the hook; a dropped packet's entry is freed). A
  packet of a known connection advances it whatever its verdict.
- ``invalid``: a fragment (the kernel reassembles before conntrack: the oracle does
  not), a transport header the kernel would not read, a bad TCP/UDP/ICMP checksum
  (conntrack verifies it at PREROUTING), TCP flags ``tcp_valid_flags`` rejects, a TCP
  packet the state table (``tcp_conntracks``) refuses in its state, an ICMP error
  for no known connection or sent to another address than the quoted packet's source
  (``nf_conntrack_inet_error``), an ICMP message that can neither open nor answer one
  (an echo reply without its request: ``valid_new``).
- ``related``: an ICMP/ICMPv6 error (ICMP destination unreachable, source quench,
  redirect, time exceeded, parameter problem; every ICMPv6 type below 128) quoting a
  packet of a known connection. Helpers (FTP ...) are not modelled.
- ICMPv6 neighbour discovery and MLD are untracked: no state, so every ``ct state``
  match is false (its negation true).

Simplifications, stated: no sequence-number window tracking (segments are taken as
in-window), no timeouts (connections live for the whole sequence), ``nf_conntrack_tcp_loose``
is 1 (the kernel default: a lone ACK opens a connection mid-stream).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pfc.oracle.packets import ICMP, ICMP6, TCP, UDP, FrameView, ones_sum, read_frame

# TCP conntrack states and the table of nf_conntrack_proto_tcp.c (tcp_conntracks).
NO, SS, SR, ES, FW, CW, LA, TW, CL, S2 = range(10)
IV, IG = "iv", "ig"  # invalid, ignored
_ORIG = {
    "syn": (SS, SS, IG, IG, IG, IG, IG, SS, SS, S2),
    "synack": (IV, IV, SR, IV, IV, IV, IV, IV, IV, SR),
    "fin": (IV, IV, FW, FW, LA, LA, LA, TW, CL, IV),
    "ack": (ES, IV, ES, ES, CW, CW, TW, TW, CL, IV),
    "rst": (IV, CL, CL, CL, CL, CL, CL, CL, CL, CL),
}
_REPLY = {
    "syn": (IV, S2, IV, IV, IV, IV, IV, SS, IV, S2),
    "synack": (IV, SR, IG, IG, IG, IG, IG, IG, IG, SR),
    "fin": (IV, IV, FW, FW, LA, LA, LA, TW, CL, IV),
    "ack": (IV, IG, SR, ES, CW, CW, TW, TW, CL, IG),
    "rst": (IV, CL, CL, CL, CL, CL, CL, CL, CL, CL),
}
FIN, SYN, RST, PSH, ACK, URG = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
# tcp_valid_flags: the combinations of FIN SYN RST ACK URG conntrack accepts
_VALID_FLAGS = {SYN, SYN | URG, SYN | ACK, RST, RST | ACK, FIN | ACK, FIN | ACK | URG,
                ACK, ACK | URG}
# ICMP (nf_conntrack_proto_icmp.c, _icmpv6.c): the types a tuple inverts to (invmap:
# request <-> reply), the types that can open a connection (valid_new), the errors that
# quote a packet (icmp_is_err; ICMPv6: every type below 128) and the ICMPv6 types
# conntrack leaves untracked (noct_valid_new)
_ICMP_PAIRS = {ICMP: {8: 0, 13: 14, 15: 16, 17: 18}, ICMP6: {128: 129, 139: 140}}
_ICMP_INVERSE = {proto: {**pairs, **{r: q for q, r in pairs.items()}}
                 for proto, pairs in _ICMP_PAIRS.items()}
_ICMP_ERRORS = {ICMP: frozenset((3, 4, 5, 11, 12)), ICMP6: frozenset(range(128))}
_ICMP6_UNTRACKED = {130, 131, 132, 133, 134, 135, 136, 143, 151, 152}  # noct_valid_new

# (version, proto, src, dst, a, b): a, b the ports for TCP/UDP, the identifier and
# bytes((type, code)) for ICMP, empty for another protocol
Tuple = tuple


@dataclass
class Connection:
    original: Tuple
    tcp: int = NO
    seen_reply: bool = False


@dataclass
class Reading:
    """What conntrack made of one packet: its state (None: not IP; "untracked": ND,
    MLD, MRD, in none of the four states), and how to record it once the verdict is
    known."""

    state: str | None
    conn: Connection | None = None
    reply: bool = False
    new: Connection | None = None  # a connection this packet opens if it passes
    tcp_next: int | None = None


@dataclass
class Conntrack:
    """``table``: connections by original tuple; ``replies``: by reply tuple (the
    original inverted, ``_inverted``, or for a NATed connection the translated tuple
    inverted)."""

    table: dict[Tuple, Connection] = field(default_factory=dict)
    replies: dict[Tuple, Connection] = field(default_factory=dict)

    def read(self, view: FrameView) -> Reading:
        """The packet's state; nothing changes until ``commit``."""
        if view.version is None:
            return Reading(None)
        view = transport_view(view)
        if view.l4 is None or not _header_ok(view) or not _checksum_ok(view):
            return Reading("invalid")
        proto = view.l4proto
        if proto in (ICMP, ICMP6):
            if proto != _ICMP_OF[view.version]:  # nf_conntrack_icmp*_packet: wrong family
                return Reading("invalid")
            return self._icmp(view)
        tup = _tuple(view)
        if tup is None:
            return Reading("invalid")
        conn, reply = self._find(tup)
        if proto == TCP:
            return self._tcp(view, tup, conn, reply)
        if conn is None:
            return Reading("new", new=Connection(tup))
        return _known(conn, reply)

    def commit(self, reading: Reading, passed: bool) -> None:
        """Record the packet: a passed opener adds its connection; a packet of a known
        connection advances it (sees the reply, moves the TCP state)."""
        if reading.new is not None:
            if passed:
                if reading.tcp_next is not None:
                    reading.new.tcp = reading.tcp_next
                self.table[reading.new.original] = reading.new
                self.replies[_inverted(reading.new.original)] = reading.new
            return
        conn = reading.conn
        if conn is None or reading.state == "invalid":
            return
        if reading.reply:
            conn.seen_reply = True
        if reading.tcp_next is not None:
            conn.tcp = reading.tcp_next

    def translated(self, conn: Connection, tup: Tuple) -> None:
        """A NATed connection's reply tuple is its translated tuple inverted
        (``nf_nat_setup_info`` alters the reply tuple): the peer's replies are found by
        that, and the original's plain inverse is no longer the connection's."""
        if self.replies.get(_inverted(conn.original)) is conn:
            del self.replies[_inverted(conn.original)]
        reply = _inverted(tup)
        if reply is not None:
            self.replies[reply] = conn

    def _find(self, tup: Tuple) -> tuple[Connection | None, bool]:
        """The connection whose original tuple is ``tup`` (False) or whose reply tuple
        is (True: the packet is a reply)."""
        conn = self.table.get(tup)
        if conn is not None:
            return conn, False
        conn = self.replies.get(tup)
        return conn, conn is not None

    def _tcp(self, view: FrameView, tup: Tuple, conn: Connection | None,
             reply: bool) -> Reading:
        flags = _byte(view, view.l4 + 13)
        if flags is None or flags & (FIN | SYN | RST | ACK | URG) not in _VALID_FLAGS:
            return Reading("invalid")
        kind = _tcp_index(flags)
        if conn is not None and not reply and kind == "syn" and conn.tcp in (TW, CL):
            del self.table[conn.original]  # a SYN reopens a closed connection as new
            self.replies = {k: c for k, c in self.replies.items() if c is not conn}
            conn = None
        if conn is None:
            nxt = _ORIG[kind][NO]
            if nxt == IV:
                return Reading("invalid")
            return Reading("new", new=Connection(tup), tcp_next=nxt)
        nxt = (_REPLY if reply else _ORIG)[kind][conn.tcp]
        if nxt == IV:
            return Reading("invalid", conn)
        reading = _known(conn, reply)
        reading.tcp_next = None if nxt == IG else nxt
        return reading

    def _icmp(self, view: FrameView) -> Reading:
        proto = view.l4proto
        kind = _byte(view, view.l4)
        if view.l4 + 8 > len(view.data):
            return Reading("invalid")
        if proto == ICMP6 and kind in _ICMP6_UNTRACKED:
            return Reading("untracked")  # no state: every `ct state` S is false, `!` true
        if kind in _ICMP_ERRORS[proto]:
            return Reading("related" if self._quotes_known(view) else "invalid")
        tup = _tuple(view)
        conn, reply = self._find(tup)
        if conn is not None:
            return _known(conn, reply)
        if kind in _ICMP_PAIRS[proto]:  # valid_new: only a request opens a connection
            return Reading("new", new=Connection(tup))
        return Reading("invalid")  # a reply without its request, an unknown type

    def _quotes_known(self, view: FrameView) -> bool:
        """``nf_conntrack_inet_error``: the quoted packet's tuple, inverted, is a known
        connection's (either direction), and the error goes to the quoted packet's
        source (the destination of the connection's tuple in that direction)."""
        inner = _quoted_tuple(view)
        inverted = _inverted(inner) if inner is not None else None
        if inverted is None or self._find(inverted)[0] is None:
            return False
        return _addresses(view)[1] == inner[2]


_IPV6_HEADERS = (0, 43, 60, 51)  # hop-by-hop, routing, destination options, AH
_ICMP_OF = {4: ICMP, 6: ICMP6}
# Protocols with a tracker of their own the oracle does not model (SCTP's CRC32c and
# chunk checks, DCCP, UDP-Lite's coverage, GRE's keys): left out of comparisons.
UNMODELLED = frozenset((132, 33, 136, 47))


def transport_view(view: FrameView) -> FrameView:
    """The view with the transport conntrack reads: on IPv6, past the extension
    headers ``ipv6_skip_exthdr`` walks (hop-by-hop, routing, destination options, AH);
    ``l4`` None when the chain runs out of the frame or ends in No Next Header (59)."""
    if view.version != 6 or view.l4 is None:
        return view
    data, kind, at = view.data, view.l4proto, view.l4
    while kind in _IPV6_HEADERS:
        if at + 2 > len(data):
            return FrameView(data, view.l3, view.ethertype, 6, None, kind)
        step = (data[at + 1] + 2) * 4 if kind == 51 else (data[at + 1] + 1) * 8
        kind, at = data[at], at + step
    if kind == 59:
        return FrameView(data, view.l3, view.ethertype, 6, None, kind)
    # past the end is fine for a protocol whose tuple reads nothing of its header
    return FrameView(data, view.l3, view.ethertype, 6, at, kind)


def unmodelled(frame: bytes) -> bool:
    """Whether conntrack reads this IP frame with a tracker the oracle does not model."""
    view = transport_view(read_frame(frame, skip_tag=False))
    return view.version is not None and view.l4proto in UNMODELLED


def _header_ok(view: FrameView) -> bool:
    """tcp_error / udp_error: a TCP data offset of 5 or more within the segment; a UDP
    length of 8 or more within it."""
    data, l4 = view.data, view.l4
    end = _end(view)
    if view.l4proto == TCP:
        return l4 + 13 <= end and 20 <= (data[l4 + 12] >> 4) * 4 <= end - l4
    if view.l4proto == UDP:
        return l4 + 8 <= end and 8 <= ((data[l4 + 4] << 8) | data[l4 + 5]) <= end - l4
    return True


def _end(view: FrameView) -> int:
    data, l3 = view.data, view.l3
    if view.version == 4:
        return l3 + ((data[l3 + 2] << 8) | data[l3 + 3])
    return l3 + 40 + ((data[l3 + 4] << 8) | data[l3 + 5])


def held_for_reassembly(frame: bytes) -> bool:
    """Whether conntrack's defragmentation (nf_defrag_ipv6, priority -400) takes this
    IPv6 frame in to reassemble, so no later hook sees it as it is: a Fragment header
    (44) in its extension header chain. (IPv4 fragments never reach INPUT anyway.)"""
    view = read_frame(frame, skip_tag=False)
    if view.version != 6 or view.l3 is None or len(frame) < view.l3 + 40:
        return False
    kind, at = frame[view.l3 + 6], view.l3 + 40
    while kind in _IPV6_HEADERS and at + 2 <= len(frame):
        kind, at = frame[at], at + (frame[at + 1] + 1) * 8
    return kind == 44


def _known(conn: Connection, reply: bool) -> Reading:
    state = "established" if reply or conn.seen_reply else "new"
    return Reading(state, conn, reply)


def _tcp_index(flags: int) -> str:
    if flags & RST:
        return "rst"
    if flags & SYN:
        return "synack" if flags & ACK else "syn"
    if flags & FIN:
        return "fin"
    return "ack"  # _VALID_FLAGS leaves no flagless segment


def _byte(view: FrameView, at: int) -> int | None:
    return view.data[at] if at < len(view.data) else None


def _addresses(view: FrameView) -> tuple[bytes, bytes]:
    l3, data = view.l3, view.data
    if view.version == 4:
        return data[l3 + 12:l3 + 16], data[l3 + 16:l3 + 20]
    return data[l3 + 8:l3 + 24], data[l3 + 24:l3 + 40]


def _tuple(view: FrameView) -> Tuple | None:
    """The packet's tuple: ports for TCP/UDP, (echo id, request type) for ICMP, nothing
    more for another protocol. None if the ports are not in the frame."""
    src, dst = _addresses(view)
    proto, at, data = view.l4proto, view.l4, view.data
    if proto in (TCP, UDP):
        if at + 4 > len(data):
            return None
        return (view.version, proto, src, dst, data[at:at + 2], data[at + 2:at + 4])
    if proto in (ICMP, ICMP6):  # icmp_pkt_to_tuple: the identifier, type and code
        return (view.version, proto, src, dst, data[at + 4:at + 6], data[at:at + 2])
    return (view.version, proto, src, dst, b"", b"")


def _inverted(tup: Tuple) -> Tuple | None:
    """``nf_ct_invert_tuple``: the tuple of the other direction; None for an ICMP type
    with no inverse (``invmap``: only requests and replies have one)."""
    version, proto, src, dst, a, b = tup
    if proto in (ICMP, ICMP6):
        kind = _ICMP_INVERSE[proto].get(b[0])
        return None if kind is None else (version, proto, dst, src, a, bytes((kind, b[1])))
    return (version, proto, dst, src, b, a)


def _quoted_tuple(view: FrameView) -> Tuple | None:
    """The tuple of the packet an ICMP error quotes (after its 8-byte header), as that
    packet was sent: a connection's tuple in one direction or the other."""
    inner = read_frame(bytes(12) + _ETHERTYPE[view.version] + view.data[view.l4 + 8:],
                       skip_tag=False)
    if inner.version != view.version or inner.l3 is None:
        return None
    l4 = _inner_l4(inner)
    if l4 is None:
        return None
    return _tuple(FrameView(inner.data, inner.l3, inner.ethertype, inner.version, l4,
                            inner.l4proto))


_ETHERTYPE = {4: b"\x08\x00", 6: b"\x86\xdd"}


def _inner_l4(inner: FrameView) -> int | None:
    """A quoted header is cut short: only its first 8 transport bytes are there."""
    data, l3 = inner.data, inner.l3
    if inner.version == 4:
        if len(data) < l3 + 20:
            return None
        at = l3 + (data[l3] & 0x0F) * 4
    else:
        at = l3 + 40
    return at if at + 8 <= len(data) else None


def _checksum_ok(view: FrameView) -> bool:
    """The transport checksum verifies (conntrack checks it at PREROUTING), over the
    bytes the IP length gives; an IPv4 UDP checksum of 0 means none."""
    proto = view.l4proto
    if proto not in (TCP, UDP, ICMP, ICMP6):
        return True
    segment = view.data[view.l4:_end(view)]
    minimum = {TCP: 20, UDP: 8, ICMP: 8, ICMP6: 8}[proto]
    if len(segment) < minimum:
        return False
    if proto == UDP and view.version == 4 and segment[6:8] == b"\0\0":
        return True
    if proto == ICMP:
        return ones_sum(segment) == 0xFFFF if view.version == 4 else True
    if proto == ICMP6 and view.version == 4:
        return True  # icmpv6_error runs for IPv6 only
    src, dst = _addresses(view)
    pseudo = src + dst + len(segment).to_bytes(4, "big") + bytes((0, 0, 0, proto))
    return ones_sum(pseudo + segment) == 0xFFFF
