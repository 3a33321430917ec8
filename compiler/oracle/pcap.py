"""pcap files of raw Ethernet frames, through scapy's raw reader and writer.

``write_pcap`` writes classic pcap (LINKTYPE_ETHERNET, microsecond timestamps, snaplen
65535) with frame *i* stamped *i* microseconds after the epoch, so the same frames give
the same file. ``read_pcap`` reads pcap or pcapng (scapy picks by the magic) and
insists on Ethernet: a frame of another link type would be judged as garbage.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from scapy.data import DLT_EN10MB
from scapy.error import Scapy_Exception
from scapy.utils import RawPcapReader, RawPcapWriter

SNAPLEN = 0xFFFF


class PcapError(Exception):
    """A pcap file that cannot be read as Ethernet frames, or cannot be written."""


def write_pcap(path: str | Path, frames: Iterable[bytes]) -> None:
    """Write ``frames`` (raw Ethernet frames of 0..65535 bytes) to ``path``."""
    try:
        with RawPcapWriter(str(path), linktype=DLT_EN10MB, snaplen=SNAPLEN) as writer:
            writer.write_header(None)
            for i, frame in enumerate(frames):
                if len(frame) > SNAPLEN:
                    raise PcapError(f"{path}: frame {i} is {len(frame)} bytes, more than "
                                    f"the snapshot length {SNAPLEN}")
                writer.write_packet(bytes(frame), sec=i // 1_000_000, usec=i % 1_000_000)
    except OSError as err:
        raise PcapError(f"{path}: cannot write pcap: {err.strerror or err}") from err


def read_pcap(path: str | Path) -> list[bytes]:
    """Every frame in ``path``, as bytes, in file order."""
    try:
        reader = RawPcapReader(str(path))
    except OSError as err:
        raise PcapError(f"{path}: cannot read: {err.strerror or err}") from err
    except Scapy_Exception as err:
        raise PcapError(f"{path}: not a pcap or pcapng file ({err})") from err
    with reader:
        return [_frame(path, data, meta, reader) for data, meta in reader]


def _frame(path: str | Path, data: bytes, meta: object, reader: RawPcapReader) -> bytes:
    linktype = getattr(meta, "linktype", getattr(reader, "linktype", None))
    if linktype != DLT_EN10MB:
        raise PcapError(f"{path}: link type {linktype} is not Ethernet "
                        f"(LINKTYPE_ETHERNET = {DLT_EN10MB}); pfc reads Ethernet frames only")
    caplen = getattr(meta, "caplen", len(data))
    if len(data) < caplen:
        raise PcapError(f"{path}: truncated record ({len(data)} of {caplen} bytes)")
    return bytes(data)
