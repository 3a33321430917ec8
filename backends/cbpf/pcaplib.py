"""libpcap through ctypes: ``pcap_compile`` as the peer pfc's classic BPF is measured
against, and ``bpf_filter`` as an independent classic BPF interpreter.

- :func:`compile_filter` compiles a pcap-filter expression for Ethernet
  (``pcap_open_dead(DLT_EN10MB, 262144)``, optimiser on by default) into a list of
  ``(code, jt, jf, k)`` tuples, as ``tcpdump -ddd`` prints them. A syntax error raises
  :class:`PcapError` with libpcap's own message (``pcap_geterr``).
- :func:`run_filter` runs such a program on one frame with libpcap's ``bpf_filter()``
  (wirelen = buflen = the frame's length) and returns what the program returns: 0
  means drop, anything else the snap length to keep. A load beyond the frame ends the
  program with 0, as in the kernel (semantics.md, kernel fact 9).
- :func:`validate` is libpcap's ``bpf_validate`` (structural checks only: the kernel's
  ``bpf_check_classic`` is stricter about some opcodes, and is the real judge).

Needs ``libpcap.so.0.8`` (Debian ``libpcap0.8``) or ``libpcap.so``. Measured with
libpcap 1.10.3.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Iterable, Sequence
from functools import lru_cache

DLT_EN10MB = 1
SNAPLEN = 262144
PCAP_NETMASK_UNKNOWN = 0xFFFFFFFF

Insn = tuple[int, int, int, int]  # (code, jt, jf, k)


class PcapError(RuntimeError):
    """libpcap refused something; the message is libpcap's own."""


class BpfInsn(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class BpfProgram(ctypes.Structure):
    _fields_ = [("bf_len", ctypes.c_uint), ("bf_insns", ctypes.POINTER(BpfInsn))]


@lru_cache(maxsize=1)
def library() -> ctypes.CDLL:
    """The loaded libpcap, with argument and result types declared."""
    for name in ("libpcap.so.0.8", "libpcap.so", ctypes.util.find_library("pcap")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        raise PcapError("libpcap not found (install libpcap0.8)")
    lib.pcap_open_dead.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.pcap_open_dead.restype = ctypes.c_void_p
    lib.pcap_close.argtypes = [ctypes.c_void_p]
    lib.pcap_compile.argtypes = [ctypes.c_void_p, ctypes.POINTER(BpfProgram),
                                 ctypes.c_char_p, ctypes.c_int, ctypes.c_uint32]
    lib.pcap_compile.restype = ctypes.c_int
    lib.pcap_geterr.argtypes = [ctypes.c_void_p]
    lib.pcap_geterr.restype = ctypes.c_char_p
    lib.pcap_freecode.argtypes = [ctypes.POINTER(BpfProgram)]
    lib.bpf_filter.argtypes = [ctypes.POINTER(BpfInsn), ctypes.c_char_p,
                               ctypes.c_uint, ctypes.c_uint]
    lib.bpf_filter.restype = ctypes.c_uint
    lib.bpf_validate.argtypes = [ctypes.POINTER(BpfInsn), ctypes.c_int]
    lib.bpf_validate.restype = ctypes.c_int
    lib.pcap_lib_version.restype = ctypes.c_char_p
    return lib


def version() -> str:
    """libpcap's version string, e.g. ``libpcap version 1.10.3 (with TPACKET_V3)``."""
    return library().pcap_lib_version().decode()


def compile_filter(expression: str, optimize: bool = True) -> list[Insn]:
    """``pcap_compile`` for Ethernet with snap length 262144; PcapError on any error."""
    lib = library()
    handle = lib.pcap_open_dead(DLT_EN10MB, SNAPLEN)
    if not handle:
        raise PcapError("pcap_open_dead failed")
    program = BpfProgram()
    try:
        status = lib.pcap_compile(handle, ctypes.byref(program), expression.encode(),
                                  int(optimize), PCAP_NETMASK_UNKNOWN)
        if status != 0:
            message = lib.pcap_geterr(handle).decode(errors="replace")
            raise PcapError(f"pcap_compile: {message} (in `{expression}`)")
        try:
            return [(i.code, i.jt, i.jf, i.k)
                    for i in program.bf_insns[:program.bf_len]]
        finally:
            lib.pcap_freecode(ctypes.byref(program))
    finally:
        lib.pcap_close(handle)


class Program:
    """A classic BPF program held in C memory, to run on many frames."""

    def __init__(self, insns: Sequence[Insn]) -> None:
        if not insns:
            raise ValueError("an empty classic BPF program")
        self.insns = list(insns)
        self._array = (BpfInsn * len(insns))(*[BpfInsn(*i) for i in insns])

    def __len__(self) -> int:
        return len(self.insns)

    def run(self, frame: bytes) -> int:
        """What the program returns for ``frame`` (0: drop)."""
        return library().bpf_filter(self._array, bytes(frame), len(frame), len(frame))

    def run_all(self, frames: Iterable[bytes]) -> list[int]:
        lib, array = library(), self._array
        return [lib.bpf_filter(array, f, len(f), len(f)) for f in map(bytes, frames)]


def run_filter(insns: Sequence[Insn] | Program, frame: bytes) -> int:
    """``bpf_filter(insns, frame, len, len)``: the program's return value (0: drop)."""
    program = insns if isinstance(insns, Program) else Program(insns)
    return program.run(frame)


def validate(insns: Sequence[Insn]) -> bool:
    """libpcap's ``bpf_validate``: jumps forward and in range, a return at the end,
    scratch memory indexes in range, no constant division by zero."""
    program = Program(insns)
    return bool(library().bpf_validate(program._array, len(program)))
