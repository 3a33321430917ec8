"""Does the running kernel have a BPF feature? Asked of the kernel, not of ``uname``.

Distribution kernels carry features their version number predates (RHEL 9's 5.14 has
``bpf_loop``), and a kernel may be built without some: ``pfc load`` asks.

- :func:`helper`: ``libbpf_probe_bpf_helper`` (libbpf loads a two-instruction program
  calling the helper and reads the verifier's answer);
- :func:`atomic_fetch`: a program with one ``BPF_CMPXCHG`` on the stack, loaded with
  ``bpf_prog_load`` (Linux before 5.12: "BPF_STX uses reserved fields", EINVAL).

Both need CAP_BPF (or root); each answers None when the kernel could not be asked
(no privilege, no libbpf), True or False otherwise.
"""

from __future__ import annotations

import ctypes
import errno
import os

from pfc.kernel import bpf

PROG_TYPES = {"socket": 1, "tc": 3, "xdp": 6}  # SOCKET_FILTER, SCHED_CLS, XDP


class _Insn(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("regs", ctypes.c_uint8),
                ("off", ctypes.c_int16), ("imm", ctypes.c_int32)]


_lib = bpf.typed({
    "libbpf_probe_bpf_helper": (ctypes.c_int, [ctypes.c_int, ctypes.c_int,
                                               ctypes.c_void_p]),
    "bpf_prog_load": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p,
                                     ctypes.POINTER(_Insn), ctypes.c_size_t,
                                     ctypes.c_void_p]),
})


def helper(hook: str, helper_id: int) -> bool | None:
    """Whether programs of ``hook``'s type may call helper ``helper_id``."""
    try:
        ret = _lib().libbpf_probe_bpf_helper(PROG_TYPES[hook], helper_id, None)
    except OSError:
        return None
    if ret < 0:
        return None
    return ret == 1


# r1 = 0; *(u64 *)(r10 - 8) = r1; r0 = 0; r2 = 1; r1 = r10; r1 += -8;
# r0 = cmpxchg((u64 *)(r1 + 0), r0, r2); r0 = 0; exit
_CMPXCHG = ((0xB7, 0x01, 0, 0), (0x7B, 0x1A, -8, 0), (0xB7, 0x00, 0, 0),
            (0xB7, 0x02, 0, 1), (0xBF, 0xA1, 0, 0), (0x07, 0x01, 0, -8),
            (0xDB, 0x21, 0, 0xF1), (0xB7, 0x00, 0, 0), (0x95, 0x00, 0, 0))


def atomic_fetch() -> bool | None:
    """Whether the kernel takes fetching atomics (``BPF_CMPXCHG``: Linux 5.12)."""
    insns = (_Insn * len(_CMPXCHG))(*(_Insn(c, r, o, i) for c, r, o, i in _CMPXCHG))
    try:
        fd = _lib().bpf_prog_load(PROG_TYPES["socket"], b"pfc_probe", b"GPL", insns,
                                  len(_CMPXCHG), None)
    except OSError:
        return None
    if fd >= 0:
        os.close(fd)
        return True
    return False if -fd == errno.EINVAL else None
