"""pcap round trips through scapy, tcpdump reads what pfc writes, bad files fail
clearly."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import PcapNgWriter, wrpcap

from pfc.oracle import gen
from pfc.oracle.pcap import PcapError, read_pcap, write_pcap


def test_round_trip_keeps_every_byte(tmp_path: Path) -> None:
    frames = [b"", b"\x01"] + gen.sample(None, 500, seed=7)
    path = tmp_path / "frames.pcap"
    write_pcap(path, iter(frames))
    assert read_pcap(path) == frames
    write_pcap(tmp_path / "again.pcap", frames)
    assert (tmp_path / "again.pcap").read_bytes() == path.read_bytes()  # deterministic


def test_empty_file_round_trips(tmp_path: Path) -> None:
    write_pcap(tmp_path / "empty.pcap", [])
    assert read_pcap(tmp_path / "empty.pcap") == []


@pytest.mark.skipif(shutil.which("tcpdump") is None, reason="tcpdump not installed")
def test_tcpdump_reads_the_file(tmp_path: Path) -> None:
    frame = bytes(Ether() / IP(src="10.0.0.1", dst="192.168.0.79") / UDP(dport=12345))
    path = tmp_path / "one.pcap"
    write_pcap(path, [frame] + gen.sample(None, 50, seed=1))
    out = subprocess.run(["tcpdump", "-r", str(path), "-nn", "-c", "1"],
                         capture_output=True, text=True, timeout=30, check=True)
    assert "10.0.0.1" in out.stdout and "192.168.0.79.12345" in out.stdout, out


def test_scapy_written_files_read(tmp_path: Path) -> None:
    frame = bytes(Ether() / IP() / UDP())
    wrpcap(str(tmp_path / "s.pcap"), [Ether(frame)])
    assert read_pcap(tmp_path / "s.pcap") == [frame]
    with PcapNgWriter(str(tmp_path / "s.pcapng")) as writer:
        writer.write(Ether(frame))
    assert read_pcap(tmp_path / "s.pcapng") == [frame]


def test_raw_ip_captures_are_read_behind_an_ethernet_header(tmp_path: Path) -> None:
    path = tmp_path / "raw-ip.pcap"
    packet = IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=5353, dport=53)
    wrpcap(str(path), [packet])  # LINKTYPE_RAW
    [frame] = read_pcap(path)
    assert frame == bytes(12) + b"\x08\x00" + bytes(packet)


def test_other_link_type_is_refused_with_a_hint(tmp_path: Path) -> None:
    path = tmp_path / "wifi.pcap"
    path.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 105))
    with pytest.raises(PcapError, match=f"{path}.*link type 105.*tcpdump -i DEV"):
        read_pcap(path)


def test_unreadable_files_name_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "missing.pcap"
    with pytest.raises(PcapError, match=str(missing)):
        read_pcap(missing)
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"not a capture at all")
    with pytest.raises(PcapError, match=f"{junk}.*not a pcap"):
        read_pcap(junk)
    cut = tmp_path / "cut.pcap"
    write_pcap(cut, [bytes(100)])
    cut.write_bytes(cut.read_bytes()[:-10])
    with pytest.raises(PcapError, match="truncated record"):
        read_pcap(cut)
    with pytest.raises(PcapError, match="cannot write"):
        write_pcap(tmp_path / "no-such-dir" / "x.pcap", [b""])
    with pytest.raises(PcapError, match="snapshot length"):
        write_pcap(tmp_path / "big.pcap", [bytes(70000)])


def test_header_is_classic_ethernet_pcap(tmp_path: Path) -> None:
    write_pcap(tmp_path / "h.pcap", [b"abc"])
    magic, major, minor, _, _, snaplen, linktype = struct.unpack(
        "=IHHiIII", (tmp_path / "h.pcap").read_bytes()[:24])
    assert (magic, major, minor, snaplen, linktype) == (0xA1B2C3D4, 2, 4, 65535, 1)


def test_a_frame_too_large_is_named_by_its_1_based_number(tmp_path: Path) -> None:
    """Frames are numbered from 1 in every message, as `pfc run` and tcpdump do."""
    with pytest.raises(PcapError, match=r": frame 2 is 65536 bytes"):
        write_pcap(tmp_path / "big.pcap", [bytes(60), bytes(0x10000)])
