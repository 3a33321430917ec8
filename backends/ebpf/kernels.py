"""What an eBPF object needs of the kernel, read from the object itself.

pfc's programs load on Linux 5.10 and later (docs/kernels.md: every example on 5.10,
6.1, 6.12 and the host's kernel, checked in the kernel lab), except where a feature is
newer. Those features, found by reading the object's code (helper calls by number,
atomic instructions by their ``imm``), and the first mainline release that has each:

============================  =====  ==================================================
feature                       Linux  used by
============================  =====  ==================================================
``bpf_ringbuf_*``             5.8    log and audit events
``bpf_ktime_get_coarse_ns``   5.11   token buckets (``limit``, log ``rate``)
atomic compare-and-exchange   5.12   token buckets (shared by every CPU)
``bpf_loop``                  5.17   the classifier of large policies (classify.plan)
``bpf_xdp_load_bytes``,       5.18   XDP: event snapshots, payload beyond 0xffff bytes
``bpf_xdp_get_buff_len``
netfilter programs            6.4    target ``nfbpf`` (its section, ``netfilter``)
============================  =====  ==================================================

:func:`needs` lists an object's; :func:`missing` those a kernel lacks; ``pfc compile
--kernel`` and ``pfc verify`` (the running kernel) choose the linear program over the
classifier when ``bpf_loop`` is missing (:func:`classifier_fits`), and refuse with one
line per feature otherwise (:func:`refusal`); ``pfc load`` checks before touching
anything (deploy.bpf).
"""

from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Feature:
    name: str
    since: tuple[int, int]
    used_by: str
    language: frozenset[str]  # rule features (backends.base.rule_features) that bring it

    @property
    def linux(self) -> str:
        return f"Linux {self.since[0]}.{self.since[1]}"


_EVENTS = frozenset(("log", "audit"))
FEATURES = {
    "ringbuf": Feature("BPF ring buffers (bpf_ringbuf_reserve)", (5, 8),
                       "log and audit events", _EVENTS),
    "ktime_coarse": Feature("bpf_ktime_get_coarse_ns", (5, 11),
                            "token buckets (limit, log rate)", frozenset(("limit", "log"))),
    "cmpxchg": Feature("atomic compare-and-exchange", (5, 12),
                       "token buckets (limit, log rate)", frozenset(("limit", "log"))),
    "bpf_loop": Feature("bpf_loop", (5, 17), "the classifier of large policies",
                        frozenset()),
    "xdp_bytes": Feature("bpf_xdp_load_bytes and bpf_xdp_get_buff_len", (5, 18),
                         "XDP event snapshots and far payload",
                         _EVENTS | {"payload"}),
    "netfilter": Feature("netfilter programs (BPF_PROG_TYPE_NETFILTER, bpf_dynptr_from_skb)",
                         (6, 4), "netfilter hook programs", frozenset()),
}
HELPERS = {130: "ringbuf", 131: "ringbuf", 132: "ringbuf", 133: "ringbuf", 160: "ktime_coarse",
           181: "bpf_loop", 188: "xdp_bytes", 189: "xdp_bytes"}
BPF_CALL, BPF_ATOMIC_W, BPF_ATOMIC_DW = 0x85, 0xC3, 0xDB
BPF_FETCH, BPF_CMPXCHG = 0x01, 0xF1


def parse_kernel(text: str) -> tuple[int, ...]:
    """``5.10``, ``6.1.0-37-amd64``, ``6.12.48+deb13`` → (major, minor); ValueError
    otherwise."""
    found = re.match(r"^(\d+)\.(\d+)(?:\.\d+)?(?:[-+~_].*)?$", text.strip())
    if not found:
        raise ValueError(f"`{text}` is not a kernel version: give one like 5.10 or 6.1")
    return int(found.group(1)), int(found.group(2))


def needs(obj: bytes) -> list[str]:
    """The features (keys of :data:`FEATURES`) the object's code uses, oldest first."""
    from elftools.elf.constants import SH_FLAGS
    from elftools.elf.elffile import ELFFile

    found: set[str] = set()
    elf = ELFFile(io.BytesIO(obj))
    for section in elf.iter_sections():
        if not section["sh_flags"] & SH_FLAGS.SHF_EXECINSTR:
            continue
        if section.name == "netfilter":
            found.add("netfilter")
        code = section.data()
        for at in range(0, len(code) - 7, 8):
            op, regs = code[at], code[at + 1]
            imm = int.from_bytes(code[at + 4:at + 8], "little", signed=True)
            if op == BPF_CALL and regs >> 4 == 0 and imm in HELPERS:
                found.add(HELPERS[imm])
            elif op in (BPF_ATOMIC_W, BPF_ATOMIC_DW) and imm & BPF_FETCH:
                found.add("cmpxchg")  # fetching atomics (cmpxchg among them): 5.12
    return sorted(found, key=lambda f: FEATURES[f].since)


def running() -> tuple[int, int]:
    """The running kernel's (major, minor), from ``uname -r``."""
    return parse_kernel(os.uname().release)


def missing(features: list[str], kernel: tuple[int, ...]) -> list[str]:
    return [f for f in features if FEATURES[f].since > tuple(kernel[:2])]


def classifier_fits(kernel: tuple[int, ...] | None) -> bool:
    return kernel is None or FEATURES["bpf_loop"].since <= tuple(kernel[:2])


def shown(kernel: tuple[int, ...]) -> str:
    return ".".join(str(k) for k in kernel[:2])


PROBED_HELPERS = {"ringbuf": 131, "ktime_coarse": 160, "bpf_loop": 181, "xdp_bytes": 189}


def lacking_here(features: list[str], hook: str) -> list[str]:
    """The features the running kernel lacks, asked of the kernel (``pfc.kernel.
    bpf_probe``: a distribution kernel may have what its version predates); by its
    release (``uname -r``) where it cannot be asked."""
    from pfc.kernel import bpf_probe

    release = running()
    lacking = []
    for feature in features:
        if feature == "cmpxchg":
            has = bpf_probe.atomic_fetch()
        elif feature in PROBED_HELPERS:
            has = bpf_probe.helper(hook, PROBED_HELPERS[feature])
        else:  # by the release
            has = None
        if has is False or (has is None and missing([feature], release)):
            lacking.append(feature)
    return lacking


def refusal(feature: str, kernel: tuple[int, ...], hook: str) -> str:
    """One line: what needs the feature, since when, and the kernel that lacks it."""
    f = FEATURES[feature]
    return (f"target `{hook}`: {f.used_by} need {f.name} ({f.linux}); kernel "
            f"{shown(kernel)} does not have it")
