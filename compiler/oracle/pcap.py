"""Captures in and out: classic pcap and pcapng, read and written byte by byte.

``write_pcap`` writes classic pcap (LINKTYPE_ETHERNET, microsecond timestamps, snaplen
65535) with frame *i* stamped *i* microseconds after the epoch, so the same frames give
the same file; to a path or to a binary stream (``pfc frames -o -``).

``read_capture`` reads pcap (either byte order, micro- or nanosecond) or pcapng (every
section, every interface) from a path or a binary stream (``pfc run FILE -``), and
gives Ethernet frames, because the interpreter reads Ethernet frames:

- LINKTYPE_ETHERNET (1): as captured.
- LINKTYPE_LINUX_SLL (113) and LINUX_SLL2 (276), ``tcpdump -i any``: an Ethernet header
  is built from the cooked header (source MAC from its address field, destination
  ff:ff:ff:ff:ff:ff / 01:00:5e:00:00:00 / 33:33:00:00:00:00 for broadcast / multicast,
  else zeros; EtherType from its protocol field) in front of the packet. A VLAN tag is
  in the frame only when libpcap put it back (protocol 0x8100); packets the host sent
  (packet type 4, "outgoing") are kept and listed in ``Capture.outgoing``.
- LINKTYPE_RAW (101), IPV4 (228), IPV6 (229): the IP packet behind a zero-MAC Ethernet
  header whose EtherType comes from the version nibble (0 when it is neither 4 nor 6:
  such a packet is not IP to the interpreter).

Other link types are refused with a hint to capture on one Ethernet device. Damaged
files are errors, never a silent short read: a cut record header or body, a pcapng
block cut short, a block length that is not a multiple of 4 or above MAX_BLOCK, a
packet block naming an interface no Interface Description Block defined.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

SNAPLEN = 0xFFFF  # what write_pcap declares and accepts
MAX_BLOCK = 16 << 20  # a record or pcapng block above this is refused, not allocated
CHUNK = 1 << 20

ETHERNET, LINUX_SLL, LINUX_SLL2, RAW, IPV4, IPV6 = 1, 113, 276, 101, 228, 229
LINKTYPES = {ETHERNET: "ETHERNET", LINUX_SLL: "LINUX_SLL", LINUX_SLL2: "LINUX_SLL2",
             RAW: "RAW", IPV4: "IPV4", IPV6: "IPV6"}
_PCAP_MAGIC = {b"\xd4\xc3\xb2\xa1": "<", b"\xa1\xb2\xc3\xd4": ">",
               b"\x4d\x3c\xb2\xa1": "<", b"\xa1\xb2\x3c\x4d": ">"}
_NANO_MAGIC = (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
_SHB, _IDB, _OPB, _SPB, _EPB = 0x0A0D0D0A, 1, 2, 3, 6
_OUTGOING = 4  # SLL packet type PACKET_OUTGOING
_ZERO_MAC = bytes(6)
_DST_MAC = {1: b"\xff" * 6, 2: b"\x01\x00\x5e\x00\x00\x00"}
_ETHERTYPE_BY_VERSION = {4: 0x0800, 6: 0x86DD}


class PcapError(Exception):
    """A capture that cannot be read as frames, or cannot be written. When an OSError
    caused it, it is ``__cause__`` (its errno tells a full disk from a closed pipe)."""


@dataclass
class Capture:
    """What ``read_capture`` found: Ethernet frames in file order, the link types they
    came from, and the indices of frames the host sent (cooked captures only)."""

    frames: list[bytes] = field(default_factory=list)
    linktypes: set[int] = field(default_factory=set)
    outgoing: set[int] = field(default_factory=set)
    times: list[int] = field(default_factory=list)  # each frame's timestamp, in ns

    @property
    def rebuilt(self) -> bool:
        """Whether frames were given an Ethernet header pfc built (not captured)."""
        return bool(self.linktypes - {ETHERNET})


# ----------------------------------------------------------------------------- writing

def write_pcap(target: str | Path | BinaryIO, frames: Iterable[bytes],
               times: Sequence[int] | None = None) -> None:
    """Write ``frames`` (raw Ethernet frames of 0..65535 bytes) to a path or a binary
    stream, stamped ``times`` (nanoseconds, written to the microsecond; frame ``i`` at
    ``i`` µs when not given). PcapError for a frame above the snapshot length or an
    OSError."""
    name = target if isinstance(target, str | Path) else getattr(target, "name", "output")
    try:
        if isinstance(target, str | Path):
            with open(target, "wb") as stream:
                _write(stream, frames, name, times)
        else:
            _write(target, frames, name, times)
            target.flush()
    except OSError as err:
        raise PcapError(f"{name}: cannot write pcap: {err.strerror or err}") from err


def _write(stream: BinaryIO, frames: Iterable[bytes], name: object,
           times: Sequence[int] | None) -> None:
    stream.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, SNAPLEN, ETHERNET))
    for i, frame in enumerate(frames):
        if len(frame) > SNAPLEN:
            raise PcapError(f"{name}: frame {i + 1} is {len(frame)} bytes, more than the "
                            f"snapshot length {SNAPLEN}")
        usec = i if times is None else times[i] // 1000
        stream.write(struct.pack("<IIII", usec // 1_000_000, usec % 1_000_000, len(frame),
                                 len(frame)))
        stream.write(bytes(frame))


# ----------------------------------------------------------------------------- reading

def read_pcap(source: str | Path | BinaryIO) -> list[bytes]:
    """Every frame of a capture (path or binary stream), as Ethernet bytes."""
    return read_capture(source).frames


def read_capture(source: str | Path | BinaryIO) -> Capture:
    """The capture at ``source`` (a path, or a binary stream such as stdin)."""
    if not isinstance(source, str | Path):
        return _Reader(source, "<stdin>").capture()
    try:
        with open(source, "rb") as stream:
            return _Reader(stream, str(source)).capture()
    except OSError as err:
        raise PcapError(f"{source}: cannot read: {err.strerror or err}") from err


class _Reader:
    """One pass over a stream; ``offset`` counts bytes read, for error messages."""

    def __init__(self, stream: BinaryIO, name: str):
        self.stream, self.name, self.offset = stream, name, 0
        self.result = Capture()

    def fail(self, message: str) -> PcapError:
        return PcapError(f"{self.name}: {message}")

    def read(self, n: int, what: str) -> bytes:
        """Exactly ``n`` bytes (in chunks: a lying length never allocates), or
        PcapError saying what was cut short."""
        parts, left = [], n
        while left:
            part = self.stream.read(min(left, CHUNK))
            if not part:
                got = n - left
                raise self.fail(f"truncated {what} at byte {self.offset} ({got} of {n} "
                                "bytes)")
            parts.append(part)
            left -= len(part)
            self.offset += len(part)
        return b"".join(parts)

    def capture(self) -> Capture:
        head = self.stream.read(4)
        self.offset = len(head)
        if len(head) == 4 and head in _PCAP_MAGIC:
            self._nanosecond = head in _NANO_MAGIC
            self._classic(_PCAP_MAGIC[head])
        elif len(head) == 4 and struct.unpack("<I", head)[0] == _SHB:
            self._pcapng()
        else:
            raise self.fail("not a pcap or pcapng file (unknown magic "
                            f"{head.hex() or 'none: the file is empty'})")
        return self.result

    def add(self, linktype: int, data: bytes, ns: int = 0) -> None:
        frame, outgoing = to_ethernet(linktype, data, self.name)
        if outgoing:
            self.result.outgoing.add(len(self.result.frames))
        self.result.frames.append(frame)
        self.result.linktypes.add(linktype)
        self.result.times.append(ns)

    # classic pcap ------------------------------------------------------------------

    def _classic(self, order: str) -> None:
        _, _, _, _, snaplen, network = struct.unpack(order + "HHiIII",
                                                     self.read(20, "file header"))
        linktype = network & 0xFFFF
        check_linktype(linktype, self.name)
        scale = 1 if self._nanosecond else 1000
        while header := self._record_header():
            sec, frac, incl, orig = struct.unpack(order + "IIII", header)
            if incl > MAX_BLOCK:
                raise self.fail(f"record at byte {self.offset - 16} claims {incl} bytes "
                                f"(more than {MAX_BLOCK >> 20} MiB): a damaged file")
            self.add(linktype, self.read(incl, "record"), sec * 1_000_000_000 + frac * scale)

    def _record_header(self) -> bytes | None:
        first = self.stream.read(16)
        self.offset += len(first)
        if not first:
            return None
        if len(first) < 16:
            raise self.fail(f"truncated record header at byte {self.offset - len(first)} "
                            f"({len(first)} of 16 bytes)")
        return first

    # pcapng ------------------------------------------------------------------------

    def _pcapng(self) -> None:
        """Blocks until the end; each Section Header Block sets the byte order and
        starts a new list of interfaces."""
        order, interfaces, block_type = "<", [], _SHB
        while True:
            if block_type == _SHB:
                order = self._section_header()
                interfaces = []
            else:
                self._block(order, block_type, self._block_body(order), interfaces)
            head = self.stream.read(4)
            self.offset += len(head)
            if not head:
                return
            if len(head) < 4:
                raise self.fail(f"truncated block header at byte {self.offset - len(head)}")
            block_type = struct.unpack(order + "I", head)[0]

    def _section_header(self) -> str:
        raw = self.read(8, "section header block")
        bom = raw[4:8]
        order = {b"\x4d\x3c\x2b\x1a": "<", b"\x1a\x2b\x3c\x4d": ">"}.get(bom)
        if order is None:
            raise self.fail(f"section header at byte {self.offset - 12} has no valid "
                            "byte-order magic")
        length = struct.unpack(order + "I", raw[:4])[0]
        self._rest(order, length, 12, "section header block")
        return order

    def _block_body(self, order: str) -> bytes:
        length = struct.unpack(order + "I", self.read(4, "block header"))[0]
        return self._rest(order, length, 8, "block")

    def _rest(self, order: str, length: int, have: int, what: str) -> bytes:
        """The rest of a block of total ``length`` after ``have`` bytes read; checks the
        length and its trailing copy."""
        start = self.offset - have
        if length < 12 or length % 4 or length > MAX_BLOCK:
            raise self.fail(f"{what} at byte {start} has an invalid length {length} "
                            f"(at least 12, a multiple of 4, at most {MAX_BLOCK >> 20} MiB)")
        rest = self.read(length - have, what)
        if struct.unpack(order + "I", rest[-4:])[0] != length:
            raise self.fail(f"{what} at byte {start}: its two length fields differ")
        return rest[:-4]

    def _block(self, order: str, kind: int, body: bytes,
               interfaces: list[tuple[int, int]]) -> None:
        if kind == _IDB:
            if len(body) < 8:
                raise self.fail("interface description block shorter than 8 bytes")
            linktype = struct.unpack(order + "H", body[:2])[0]
            check_linktype(linktype, self.name)
            interfaces.append((linktype, _tsresol(order, body[8:])))
        elif kind in (_EPB, _OPB, _SPB):
            iface, data = self._packet(order, kind, body)
            if iface >= len(interfaces):
                raise self.fail(f"a packet block names interface {iface}, but this "
                                f"section describes {len(interfaces)} (an Interface "
                                "Description Block is missing)")
            linktype, per_second = interfaces[iface]
            ticks = 0
            if kind == _EPB:
                high, low = struct.unpack(order + "II", body[4:12])
                ticks = (high << 32) | low
            self.add(linktype, data, ticks * 1_000_000_000 // per_second)

    def _packet(self, order: str, kind: int, body: bytes) -> tuple[int, bytes]:
        if kind == _SPB:
            if len(body) < 4:
                raise self.fail("simple packet block shorter than 4 bytes")
            orig = struct.unpack(order + "I", body[:4])[0]
            return 0, body[4:4 + orig]
        fixed = 20
        if len(body) < fixed:
            raise self.fail("packet block shorter than its fixed fields")
        if kind == _EPB:
            iface, _, _, caplen, _ = struct.unpack(order + "IIIII", body[:fixed])
        else:
            iface, _, _, _, caplen, _ = struct.unpack(order + "HHIIII", body[:fixed])
        if fixed + caplen > len(body):
            raise self.fail(f"packet block claims {caplen} captured bytes, but holds "
                            f"{len(body) - fixed}")
        return iface, body[fixed:fixed + caplen]


def _tsresol(order: str, options: bytes) -> int:
    """Ticks per second of an interface (its ``if_tsresol`` option, code 9: 10^-n, or
    2^-n with the top bit set); 10^6 without one."""
    at = 0
    while at + 4 <= len(options):
        code, length = struct.unpack(order + "HH", options[at:at + 4])
        if code == 0:
            break
        if code == 9 and length >= 1:
            value = options[at + 4]
            return 2 ** (value & 0x7F) if value & 0x80 else 10 ** min(value, 18)
        at += 4 + length + (-length % 4)
    return 1_000_000


# ------------------------------------------------------------------------- link types

def check_linktype(linktype: int, name: str) -> None:
    if linktype not in LINKTYPES:
        raise PcapError(
            f"{name}: link type {linktype} is not supported: pfc reads Ethernet "
            "(LINKTYPE_ETHERNET), Linux cooked (tcpdump -i any) and raw IP captures; "
            "capture on one Ethernet device instead (tcpdump -i DEV -w FILE)")


def to_ethernet(linktype: int, data: bytes, name: str = "") -> tuple[bytes, bool]:
    """A captured packet as the Ethernet frame the interpreter reads, and whether the
    host sent it (cooked captures' packet type 4). See the module docstring."""
    if linktype == ETHERNET:
        return bytes(data), False
    if linktype in (RAW, IPV4, IPV6):
        version = data[0] >> 4 if data else 0
        ethertype = _ETHERTYPE_BY_VERSION.get(version, 0)
        return _ZERO_MAC + _ZERO_MAC + struct.pack(">H", ethertype) + data, False
    if linktype == LINUX_SLL:
        if len(data) < 16:
            raise PcapError(f"{name}: a LINUX_SLL record of {len(data)} bytes is shorter "
                            "than its 16-byte header")
        pkttype, _, alen = struct.unpack(">HHH", data[:6])
        src, proto = data[6:6 + min(alen, 8)], data[14:16]
        return _cooked(pkttype, src, proto, data[16:]), pkttype == _OUTGOING
    if len(data) < 20:
        raise PcapError(f"{name}: a LINUX_SLL2 record of {len(data)} bytes is shorter "
                        "than its 20-byte header")
    proto, pkttype, alen = data[:2], data[10], data[11]
    return _cooked(pkttype, data[12:12 + min(alen, 8)], proto, data[20:]), \
        pkttype == _OUTGOING


def _cooked(pkttype: int, src: bytes, proto: bytes, payload: bytes) -> bytes:
    mac = src[:6] if len(src) >= 6 else _ZERO_MAC
    dst = _DST_MAC.get(pkttype, _ZERO_MAC)
    if pkttype == 2 and proto == b"\x86\xdd":
        dst = b"\x33\x33\x00\x00\x00\x00"
    return dst + mac + proto + payload


def linktype_name(linktype: int) -> str:
    return LINKTYPES.get(linktype, str(linktype))
