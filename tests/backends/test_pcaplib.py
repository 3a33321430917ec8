"""libpcap through ctypes: pcap_compile, bpf_filter, bpf_validate (no kernel needed)."""

from __future__ import annotations

import pytest

from pfc.backends.cbpf import pcaplib
from pfc.oracle import framebuild as fb

DUT = bytes([192, 168, 0, 79])
SRC = bytes([10, 0, 0, 1])
MACS = (bytes.fromhex("020000000002"), bytes.fromhex("020000000001"))

# Seed 000 §5.3: the array the energy study attached by hand (`tcpdump -dd` output).
SEED_PROGRAM = [
    (0x28, 0, 0, 0x0000000C), (0x15, 0, 10, 0x00000800),
    (0x20, 0, 0, 0x0000001E), (0x15, 0, 8, 0xC0A8004F),
    (0x30, 0, 0, 0x00000017), (0x15, 0, 6, 0x00000011),
    (0x28, 0, 0, 0x00000014), (0x45, 4, 0, 0x00001FFF),
    (0xB1, 0, 0, 0x0000000E), (0x48, 0, 0, 0x00000010),
    (0x15, 0, 1, 0x00003039), (0x06, 0, 0, 0x00040000),
    (0x06, 0, 0, 0x00000000),
]


def udp_frame(dport: int, dst: bytes = DUT, payload: bytes = b"hello") -> bytes:
    segment = fb.udp(SRC, dst, 40000, dport, payload)
    return fb.ethernet(*MACS, 0x0800, fb.ipv4(SRC, dst, 17, segment))


def test_the_seed_program_is_what_pcap_compile_gives() -> None:
    assert pcaplib.compile_filter("ip dst host 192.168.0.79 and ip proto 17 and "
                                  "udp dst port 12345") == SEED_PROGRAM


def test_compile_counts_with_and_without_the_optimiser() -> None:
    expression = "udp and dst host 192.168.0.79 and dst port 12345"
    assert len(pcaplib.compile_filter(expression)) == 13
    assert len(pcaplib.compile_filter(expression, optimize=False)) > 13


def test_syntax_errors_carry_libpcap_message() -> None:
    with pytest.raises(pcaplib.PcapError, match="syntax error"):
        pcaplib.compile_filter("udp and and")


def test_bpf_filter_runs_a_program() -> None:
    program = pcaplib.Program(SEED_PROGRAM)
    assert program.run(udp_frame(12345)) == 0x40000
    assert program.run(udp_frame(12346)) == 0
    assert program.run(udp_frame(12345, dst=SRC)) == 0
    assert pcaplib.run_filter(SEED_PROGRAM, udp_frame(12345)) == 0x40000


def test_a_load_beyond_the_frame_returns_zero() -> None:
    """Kernel fact 9: the out-of-bounds load ends the program with 0, whatever follows."""
    program = [(0x20, 0, 0, 100), (0x06, 0, 0, 1)]  # ld [100]; ret #1
    assert pcaplib.run_filter(program, bytes(104)) == 1
    assert pcaplib.run_filter(program, bytes(103)) == 0
    ind = [(0x01, 0, 0, 50), (0x48, 0, 0, 50), (0x06, 0, 0, 1)]  # ldx #50; ldh [x+50]
    assert pcaplib.run_filter(ind, bytes(102)) == 1
    assert pcaplib.run_filter(ind, bytes(101)) == 0


def test_ldx_pktlen_is_understood() -> None:
    """``ldx #pktlen`` (0x81) runs in bpf_filter, though bpf_image prints it unimp."""
    program = [(0x81, 0, 0, 0), (0x87, 0, 0, 0), (0x16, 0, 0, 0)]  # ldx len; txa; ret a
    assert pcaplib.run_filter(program, bytes(77)) == 77


def test_validate() -> None:
    assert pcaplib.validate(SEED_PROGRAM)
    assert not pcaplib.validate([(0x15, 5, 0, 1), (0x06, 0, 0, 0)])  # jump past the end
    assert not pcaplib.validate([(0x28, 0, 0, 12)])  # no return at the end


def test_version() -> None:
    assert pcaplib.version().startswith("libpcap version")
