"""Target ``cbpf``: a policy as one classic BPF program.

IR → a DAG of tests (``cbpf_cfg``) → optimised (``cbpf_opt``) → instructions and the
printed forms (``cbpf_asm``). ``pass`` returns 0x40000 (keep the whole frame, libpcap's
snap length), ``drop`` returns 0. ``count`` and ``redirect`` cannot be expressed by a
classic BPF filter: they are left out of ``supports``, so ``capability_errors`` names
the rule, the target and the targets that can.

Two hooks, one per link type (``--link``, as libpcap's DLT_EN10MB and DLT_RAW):

- ``socket`` (``--link ether``, the default): ``SO_ATTACH_FILTER`` on a packet socket.
  The filter sees (``view``, measured on Linux 6.18, docs/cbpf.md) the frame from its
  Ethernet header, with the outer VLAN tag already removed (``skb_vlan_untag`` in
  ``__netif_receive_skb_core``); nothing shorter than 14 bytes (``packet_snd`` refuses
  it: ``dev_validate_header``) and no tagged frame shorter than 20 (``skb_vlan_untag``
  frees it): ``packets.l2_input_view``.
- ``xt-bpf`` (``--link ip``): iptables' and ip6tables' ``-m bpf --bytecode`` (xt_bpf),
  which runs the program on the packet from its IP header: no Ethernet header, no VLAN
  tag, only IP packets ``ip_rcv``/``ipv6_rcv`` accepted (trimmed to their length),
  and in filter INPUT only those delivered locally (``iplab.hook_view``). The family
  is the IP version nibble (there is no EtherType); a rule for ``all`` matches every
  packet (every one is IP). A nonzero return is a match (``bpf_mt``).

Runners: :func:`run_kernel` (the Backend's ``run``: ``SO_ATTACH_FILTER`` on a packet
socket, or an ``iptables -m bpf`` rule, on a veth in a throw-away namespace) and
:func:`run_libpcap` (libpcap's own ``bpf_filter()``, an independent interpreter).
"""

from __future__ import annotations

import itertools

from pfc.backends.base import Artifact, Backend, Options, artifact_name
from pfc.backends.cbpf import asm as cbpf_asm
from pfc.backends.cbpf import cfg as cbpf_cfg
from pfc.backends.cbpf import match as cbpf_match
from pfc.backends.cbpf import opt as cbpf_opt
from pfc.backends.cbpf import tree as cbpf_tree
from pfc.backends.cbpf.graph import ETHER, LINKS, MAX_INSNS, Link
from pfc.frontend import ir
from pfc.frontend.diagnostics import CompileError, Diagnostic, error
from pfc.kernel.observation import Observation
from pfc.oracle import packets

FORMATS = ("asm", "c", "ddd", "bin")
EXTENSIONS = {"asm": "asm", "c": "c", "ddd": "ddd", "bin": "bin"}
SUPPORTS = frozenset(("payload", "ipv6", "non-ip"))
HOOKS = {"socket": "ether", "xt-bpf": "ip"}  # hook -> the link its programs read
# The most instructions each hook takes: the kernel's BPF_MAXINSNS
# (include/uapi/linux/bpf_common.h) for SO_ATTACH_FILTER; xt_bpf's fixed array of
# XT_BPF_MAX_NUM_INSTR (include/uapi/linux/netfilter/xt_bpf.h), which iptables 1.8.9
# checks too ("bpf: number of instructions exceeds maximum"; measured: 64 load, 65 not).
LIMITS = {"socket": (MAX_INSNS, f"classic BPF allows {MAX_INSNS} (BPF_MAXINSNS)"),
          "xt-bpf": (64, "iptables -m bpf (xt_bpf) allows 64 (XT_BPF_MAX_NUM_INSTR)")}
Insn = cbpf_asm.Insn


def compile_policy(policy: ir.Policy, optimise: bool = True, link: Link = ETHER,
                   hook: str = "socket") -> list[Insn]:
    """The program's instructions (``(code, jt, jf, k)``) for packets that start at
    ``link``; CompileError if ``hook`` could not take it (``LIMITS``): at once, before
    any graph is built, when the matches alone need far more than 4096 (``too_large``).
    """
    if cbpf_tree.applies(policy):
        return _tree(policy, link, hook, optimise)
    early = too_large(policy)
    if early is not None:
        raise CompileError([early])
    graph = cbpf_cfg.build(policy, link)
    if optimise:
        cbpf_opt.optimise(graph, cbpf_cfg.implications(link))
    insns = cbpf_asm.assemble(graph)
    if len(insns) > LIMITS[hook][0]:
        raise CompileError([_too_long(policy, len(insns), hook)])
    return insns


# The tree's estimate counts compares, not loads: 0.63-0.99 times the exact count
# (ClassBench acl/fw/ipc, port rules of both families: docs/cbpf.md).
TREE_MARGIN = 1.15


def _tree(policy: ir.Policy, link: Link, hook: str, optimise: bool) -> list[Insn]:
    """A large policy by ``cbpf_tree``: with binary searches (fewer tests per packet),
    else, when that is too long, as chains (the smaller program). Refused at once when
    one rule alone, or the estimate, passes BPF_MAXINSNS (``TREE_MARGIN``)."""
    early = too_large(policy, rules_only=True)
    if early is not None:
        raise CompileError([early])
    size = None
    for groups in (True, False):
        plan = cbpf_tree.plan(policy, link.l3, groups)
        if plan.size > TREE_MARGIN * LIMITS[hook][0]:
            continue
        graph = cbpf_tree.build(policy, link, plan)
        if optimise:
            cbpf_opt.optimise(graph, cbpf_cfg.implications(link))
        insns = cbpf_asm.assemble(graph)
        if len(insns) <= LIMITS[hook][0]:
            return insns
        size = len(insns) if size is None else min(size, len(insns))
    if size is not None or hook != "socket":
        raise CompileError([_too_long(policy, size or plan.size, hook)])
    raise CompileError([_too_large(
        f"{_rules_need(len(policy.rules))} about {plan.size:,} instructions",
        policy.rules[0].span, MANY_RULES)])


def limits(policy: ir.Policy) -> list[Diagnostic]:
    """What ``pfc compile --target cbpf`` refuses for size, as diagnostics (empty when
    the program fits): the ``limits(policy) -> diagnostics`` hook through which
    ``capability_errors`` lets ``pfc check --target cbpf`` say it too. It compiles the
    whole program, since only the optimised, assembled length is exact (2.6 s CPU for
    1,000 rules that do not fit: benchmarks/cbpf_vs_libpcap.py --scale)."""
    try:
        compile_policy(policy)
    except CompileError as exc:
        return list(exc.diagnostics)
    return []


def _too_long(policy: ir.Policy, size: int, hook: str = "socket") -> Diagnostic:
    span = policy.rules[0].span if policy.rules else policy.default_span
    count = len(policy.rules)
    hint = ("split the policy, or use an eBPF target (socket, tc, xdp), which has no "
            "such limit") if hook == "socket" else (
            "split the policy over several -m bpf rules, or use target iptables or nft, "
            "which filter in netfilter without classic BPF")
    return error(f"target `cbpf`: {_rules_need(count)} {size:,} instructions; "
                 f"{LIMITS[hook][1]}", span, code="too-large", hint=hint)


def _rules_need(count: int) -> str:
    return "the policy's 1 rule needs" if count == 1 else f"the policy's {count:,} rules need"


def too_large(policy: ir.Policy, margin: int = 2,
              rules_only: bool = False) -> Diagnostic | None:
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
    if rules_only and size <= MAX_INSNS:  # the tree is sized on its own (cbpf_tree)
        return None
    if size <= MAX_INSNS:  # many small rules: name the one that passes the limit
        running = itertools.accumulate(n for n, _ in sizes)
        crossing = next(r for (_, r), sum_ in zip(sizes, running, strict=True)
                        if sum_ > MAX_INSNS)
        return _too_large(f"{_rules_need(len(policy.rules))} about {total:,} "
                          f"instructions (this one passes {MAX_INSNS})", crossing.span,
                          MANY_RULES)
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


MANY_RULES = ("cbpf fits about 400-600 rules of addresses and ports (ClassBench-style; "
              "docs/cbpf.md); the eBPF hooks socket, tc and xdp, and nft (verdict maps), "
              "take thousands (docs/scale.md)")


def _too_large(what: str, span, hint: str | None = None) -> Diagnostic:
    return error(f"target `cbpf`: {what}; classic BPF allows {MAX_INSNS} (BPF_MAXINSNS), "
                 "and has no maps or sets: every entry is a test of its own", span,
                 code="too-large",
                 hint=hint or "socket, tc and xdp (eBPF maps), nft and iptables (sets) take "
                 f"large sets; cbpf fits about {MAX_INSNS * 3 // 4:,} addresses "
                 "(docs/cbpf.md)")


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
    """The program for ``options.hook``, which says what link it reads (``HOOKS``)."""
    fmt = options.format or FORMATS[0]
    hook = options.hook or "socket"
    link = LINKS[HOOKS[hook]]
    insns = compile_policy(policy, link=link, hook=hook)
    out = render(insns, fmt)
    name = artifact_name(policy, "cbpf", EXTENSIONS[fmt])
    data = out if isinstance(out, bytes) else out.encode()
    return Artifact("cbpf", hook, fmt, None if isinstance(out, bytes) else out,
                    {name: data}, policy, {"insns": insns, "length": len(insns),
                                           "kernel_size": cbpf_asm.kernel_size(insns),
                                           "link": link.name})


def program(artifact: Artifact) -> list[Insn]:
    """The instructions of a cbpf artifact, whatever its format."""
    return list(artifact.meta["insns"])


def view(hook: str, frame: bytes) -> bytes | None:
    """The frame as the hook shows it to the program (module doc), with its Ethernet
    header (the interpreter reads frames); an ``xt-bpf`` program reads from byte 14."""
    if hook == "xt-bpf":
        from pfc.kernel import iplab

        return iplab.hook_view(True, frame)
    return packets.l2_input_view(frame)


def packet(artifact: Artifact, frame: bytes) -> bytes:
    """What the program reads of a frame seen by its hook: from the IP header on for
    ``--link ip``."""
    return frame[ETHER.l3:] if artifact.meta.get("link") == "ip" else frame


def verdict(ret: int) -> ir.Verdict:
    return ir.Verdict.DROP if ret == 0 else ir.Verdict.PASS


def run_libpcap(artifact: Artifact, frames: list[bytes]) -> Observation:
    """The program run by libpcap's ``bpf_filter()`` on each frame (as seen)."""
    from pfc.backends.cbpf import pcaplib

    results = pcaplib.Program(program(artifact)).run_all(packet(artifact, f) for f in frames)
    return Observation([verdict(r) for r in results], [None] * len(frames), None)


def run_kernel(artifact: Artifact, frames: list[bytes]) -> Observation:
    """The program in the kernel: attached to a packet socket (``cbpf_run``), or for
    ``--link ip`` in an ``iptables``/``ip6tables -m bpf`` rule (``cbpf_xt``)."""
    if artifact.meta.get("link") == "ip":
        from pfc.backends.cbpf import xt as cbpf_xt

        return cbpf_xt.run(program(artifact), frames)
    from pfc.backends.cbpf import run as cbpf_run

    return cbpf_run.run(program(artifact), frames)


BACKENDS = (Backend(
    name="cbpf", description="classic BPF for SO_ATTACH_FILTER on a packet socket, or "
    "with --link ip for iptables -m bpf (tcpdump -d / -dd / -ddd forms, raw "
    "sock_filter array)",
    supports=SUPPORTS, formats=FORMATS, hooks=tuple(HOOKS), emit=emit,
    carries={"ingress": "socket"},
    binary_formats=frozenset(("bin",)), run=run_kernel, view=view),)
