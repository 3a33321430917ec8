"""Target ``cbpf``: a policy as one classic BPF program for ``SO_ATTACH_FILTER``.

IR → a DAG of tests (``cbpf_cfg``) → optimised (``cbpf_opt``) → instructions and the
printed forms (``cbpf_asm``). ``pass`` returns 0x40000 (keep the whole frame, libpcap's
snap length), ``drop`` returns 0. ``count`` and ``redirect`` cannot be expressed by a
socket filter: they are left out of ``supports``, so ``capability_errors`` names the
rule, the target and the targets that can.

What a packet socket's filter sees (``view``), measured on Linux 6.18 (docs/cbpf.md):
the frame from its Ethernet header, with the outer VLAN tag already removed
(``skb_vlan_untag`` in ``__netif_receive_skb_core``); nothing shorter than 14 bytes
(``packet_snd`` refuses it: ``dev_validate_header``) and no tagged frame shorter than
20 (``skb_vlan_untag`` frees it): ``packets.l2_input_view``.

Runners: :func:`run_kernel` (the Backend's ``run``: the program attached with
``SO_ATTACH_FILTER`` to a packet socket on a veth in a throw-away namespace) and
:func:`run_libpcap` (libpcap's own ``bpf_filter()``, an independent interpreter).
"""

from __future__ import annotations

import itertools

from pfc.backends.base import Artifact, Backend, Options, artifact_name
from pfc.backends.cbpf import asm as cbpf_asm
from pfc.backends.cbpf import cfg as cbpf_cfg
from pfc.backends.cbpf import match as cbpf_match
from pfc.backends.cbpf import opt as cbpf_opt
from pfc.backends.cbpf.graph import MAX_INSNS
from pfc.frontend import ir
from pfc.frontend.diagnostics import CompileError, Diagnostic, error
from pfc.kernel.observation import Observation
from pfc.oracle import packets

FORMATS = ("asm", "c", "ddd", "bin")
EXTENSIONS = {"asm": "asm", "c": "c", "ddd": "ddd", "bin": "bin"}
SUPPORTS = frozenset(("payload", "ipv6", "non-ip"))
Insn = cbpf_asm.Insn


def compile_policy(policy: ir.Policy, optimise: bool = True) -> list[Insn]:
    """The program's instructions (``(code, jt, jf, k)``); CompileError if the kernel
    could not take it (more than BPF_MAXINSNS = 4096 instructions): at once, before
    any graph is built, when the matches alone need far more (``too_large``)."""
    early = too_large(policy)
    if early is not None:
        raise CompileError([early])
    graph = cbpf_cfg.build(policy)
    if optimise:
        cbpf_opt.optimise(graph, cbpf_cfg.IMPLICATIONS)
    insns = cbpf_asm.assemble(graph)
    if len(insns) > MAX_INSNS:
        raise CompileError([_too_long(policy, len(insns))])
    return insns


def limits(policy: ir.Policy) -> list[Diagnostic]:
    """What ``pfc compile --target cbpf`` refuses for size, as diagnostics (empty when
    the program fits): the ``limits(policy) -> diagnostics`` hook through which
    ``capability_errors`` lets ``pfc check --target cbpf`` say it too. It compiles the
    whole program, since only the optimised, assembled length is exact (a second or
    two at the largest sizes the limit admits, benchmarks/cbpf_vs_libpcap.py --scale)."""
    try:
        compile_policy(policy)
    except CompileError as exc:
        return list(exc.diagnostics)
    return []


def _too_long(policy: ir.Policy, size: int) -> Diagnostic:
    span = policy.rules[0].span if policy.rules else policy.default_span
    count = len(policy.rules)
    return error(f"target `cbpf`: {_rules_need(count)} {size:,} instructions; classic BPF "
                 f"allows {MAX_INSNS} (BPF_MAXINSNS)", span, code="too-large",
                 hint="split the policy, or use an eBPF target (socket, tc, xdp), which "
                 "has no such limit")


def _rules_need(count: int) -> str:
    return "the policy's 1 rule needs" if count == 1 else f"the policy's {count:,} rules need"


def too_large(policy: ir.Policy, margin: int = 2) -> Diagnostic | None:
    """An error on the largest rule when the policy's matches need more than ``margin``
    times BPF_MAXINSNS tests (``cbpf_match.tests_needed``), else None. Classic BPF has
    no maps: a set of N addresses is N to 2N tests, and the optimiser and assembler
    take minutes at 100k (docs/cbpf.md). The margin leaves the cases in between to the
    real count: the optimiser removes tests earlier rules decide."""
    sizes = [(sum(cbpf_match.tests_needed(m, r.family.versions) for m in r.matches), r)
             for r in policy.rules if r.family is not ir.Family.ANY]
    total = sum(n for n, _ in sizes)
    if total <= margin * MAX_INSNS:
        return None
    size, rule = max(sizes, key=lambda pair: pair[0])
    if size <= MAX_INSNS:  # many small rules: name the one that passes the limit
        running = itertools.accumulate(n for n, _ in sizes)
        crossing = next(r for (_, r), sum_ in zip(sizes, running, strict=True)
                        if sum_ > MAX_INSNS)
        return _too_large(f"{_rules_need(len(policy.rules))} about {total:,} "
                          f"instructions (this one passes {MAX_INSNS})", crossing.span)
    return _too_large(f"this rule needs about {size:,} instructions"
                      f"{_biggest_list(rule)}" + (f", the whole policy about {total:,}"
                                                  if len(sizes) > 1 else ""), rule.span)


def _biggest_list(rule: ir.Rule) -> str:
    lists = [(len(m.prefixes), "addresses and prefixes", m.field) if isinstance(
        m, ir.AddrMatch) else (len(m.ranges), "values and ranges", m.field)
        for m in rule.matches if isinstance(m, (ir.AddrMatch, ir.IntMatch))]
    if not lists:
        return ""
    count, what, field = max(lists)
    return f" ({count:,} {what} in `{field}`)"


def _too_large(what: str, span) -> Diagnostic:
    return error(f"target `cbpf`: {what}; classic BPF allows {MAX_INSNS} (BPF_MAXINSNS), "
                 "and has no maps or sets: every entry is a test of its own", span,
                 code="too-large",
                 hint="socket, tc and xdp (eBPF maps), nft and iptables (sets) take large "
                 f"sets; cbpf fits about {MAX_INSNS * 3 // 4:,} addresses (docs/cbpf.md)")


def render(insns: list[Insn], fmt: str) -> str | bytes:
    if fmt == "asm":
        return cbpf_asm.to_asm(insns)
    if fmt == "c":
        return cbpf_asm.to_c(insns)
    if fmt == "ddd":
        return cbpf_asm.to_ddd(insns)
    if fmt == "bin":
        return cbpf_asm.to_bin(insns)
    raise ValueError(f"target `cbpf` has no format `{fmt}`; formats: {', '.join(FORMATS)}")


def emit(policy: ir.Policy, options: Options) -> Artifact:
    fmt = options.format or FORMATS[0]
    insns = compile_policy(policy)
    out = render(insns, fmt)
    name = artifact_name(policy, "cbpf", EXTENSIONS[fmt])
    data = out if isinstance(out, bytes) else out.encode()
    return Artifact("cbpf", "socket", fmt, None if isinstance(out, bytes) else out,
                    {name: data}, policy, {"insns": insns, "length": len(insns),
                                           "kernel_size": cbpf_asm.kernel_size(insns)})


def program(artifact: Artifact) -> list[Insn]:
    """The instructions of a cbpf artifact, whatever its format."""
    return list(artifact.meta["insns"])


def view(hook: str, frame: bytes) -> bytes | None:
    """The frame as a packet socket's filter sees it (module doc)."""
    return packets.l2_input_view(frame)


def verdict(ret: int) -> ir.Verdict:
    return ir.Verdict.DROP if ret == 0 else ir.Verdict.PASS


def run_libpcap(artifact: Artifact, frames: list[bytes]) -> Observation:
    """The program run by libpcap's ``bpf_filter()`` on each frame (as seen)."""
    from pfc.backends.cbpf import pcaplib

    results = pcaplib.Program(program(artifact)).run_all(frames)
    return Observation([verdict(r) for r in results], [None] * len(frames), None)


def run_kernel(artifact: Artifact, frames: list[bytes]) -> Observation:
    """The program attached to a packet socket in the kernel (``cbpf_run``)."""
    from pfc.backends.cbpf import run as cbpf_run

    return cbpf_run.run(program(artifact), frames)


BACKENDS = (Backend(
    name="cbpf", description="classic BPF for SO_ATTACH_FILTER on a packet socket "
    "(tcpdump -d / -dd / -ddd forms, raw sock_filter array)",
    supports=SUPPORTS, formats=FORMATS, hooks=("socket",), emit=emit,
    binary_formats=frozenset(("bin",)), run=run_kernel, view=view),)
