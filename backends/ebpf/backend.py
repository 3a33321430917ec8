"""Targets ``socket``, ``tc`` and ``xdp``: one policy as an eBPF C program and object.

One template (``templates/ebpf/prog.c.j2``) prints all three hooks from the plan of
:mod:`pfc.backends.ebpf.plan`; they differ only in how a frame is read (direct packet
access for XDP and tc, a copied window for a socket filter), what is returned, and
how ``redirect`` writes (in place for XDP, through the checksum helpers for tc).

Formats: ``o`` (default; an ELF object libbpf and ``bpftool prog load`` accept, with
the C source and the exact clang command beside it) and ``c`` (the C alone).
Programs are named ``pfc_xdp``, ``pfc_tc``, ``pfc_socket``; the counters of ``count``
rules live in the per-CPU array ``pfc_counters`` indexed by rule index (``meta``).
Large address sets are maps (``LPM_TRIE``, or a /24 bitmap in two arrays for large IPv4
sets) whose contents travel in ``STEM.HOOK.maps.json``
(both formats; ``meta["maps"]``, ``meta["maps_file"]``): loaders fill them with
:func:`pfc.backends.ebpf.maps.open_filled`. ``group_runs`` runs first, so a blocklist
written as rules becomes one set too. A large policy of different rules (from
``classify.plan.MIN_RULES``) is classified instead (:mod:`pfc.backends.ebpf.classify`,
``templates/ebpf/classify.c.j2``): its rules are maps too, the maps file lists them and
``STEM.HOOK.maps.bin`` holds their contents.

What each hook sees (``view``), measured on Linux 6.18 (docs/ebpf.md):

- no hook sees a frame shorter than 14 bytes: ``packet_snd`` refuses them
  (``dev_validate_header``: ``min_header_len`` = ETH_HLEN) and NICs drop runts;
- tc and packet sockets see the frame with its outer VLAN tag removed; a tagged frame
  shorter than 20 bytes is freed by ``skb_vlan_untag`` (``pskb_may_pull(skb,
  VLAN_HLEN + 2)``) before either sees it.
"""

from __future__ import annotations

import re
import struct
from importlib.resources import files

import jinja2

from pfc.backends.base import (
    Artifact,
    Backend,
    Options,
    artifact_name,
    c_comment,
    rule_features,
    v2_features,
)
from pfc.backends.ebpf import counters, ifaces, kernels
from pfc.backends.ebpf import maps as ebpf_maps
from pfc.backends.ebpf import plan as ebpf_plan
from pfc.frontend import ir
from pfc.frontend.diagnostics import CompileError, Diagnostic, Note, Severity, error
from pfc.kernel import toolchain
from pfc.kernel.toolchain import ToolchainError
from pfc.oracle import packets

HOOKS = ("socket", "tc", "xdp")
PROGRAM = {h: f"pfc_{h}" for h in HOOKS} | {"tc-egress": "pfc_tc_egress"}
COUNTERS_MAP = counters.COUNTERS_MAP
SECTIONS = {"tc-egress": "tc", "cgroup-ingress": "cgroup_skb/ingress",
            "cgroup-egress": "cgroup_skb/egress"}  # others: the hook's name (nf-*: netfilter)
ETH_HLEN = 14
ALL_FEATURES = frozenset(("count", "redirect", "payload", "ipv6", "non-ip", "log", "limit",
                          "audit"))
# Whole firewalls (v2), per hook (docs/ebpf.md "Whole firewalls"): XDP runs before
# there is an skb (no mark to read or set); a socket filter can neither send a reply
# nor write the mark.
V2_FEATURES = {
    "xdp": frozenset(("reject", "pass-limit", "iface", "ether", "ether-type", "vlan-id",
                      "icmp-code")),
    "tc": frozenset(("reject", "set-mark", "mark", "pass-limit", "iface", "ether",
                     "ether-type", "vlan-id", "icmp-code")),
    "socket": frozenset(("mark", "pass-limit", "iface", "ether", "ether-type", "vlan-id",
                         "icmp-code")),
}
_STATE = "an eBPF program here sees one packet: no connection state"
REASONS = {"ct": _STATE, "ct-status": _STATE, "ct-mark": _STATE, "nat": _STATE,
           "notrack": _STATE, "addr-type": "no route lookup at this hook"}
HOOK_REASONS = {
    "xdp": {"mark": "XDP runs before the kernel builds an skb: there is no mark",
            "set-mark": "XDP runs before the kernel builds an skb: there is no mark"},
    "tc": {},
    "socket": {"reject": "a socket filter only filters what its socket gets: it cannot "
                         "send a reply",
               "set-mark": "a socket filter cannot write the mark",
               "redirect": "a socket filter cannot rewrite the packet"},
}
DESCRIPTIONS = {
    "socket": "eBPF socket filter (SO_ATTACH_BPF on a packet socket); C and ELF object",
    "tc": "eBPF tc clsact ingress or egress, direct action (cls_bpf); C and ELF object",
    "xdp": "eBPF XDP program (native or generic); C and ELF object",
}


def _environment() -> jinja2.Environment:
    root = files("pfc.templates") / "ebpf"
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(lambda name: (root / name).read_text()),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)


_ENV = _environment()


def render(policy: ir.Policy, hook: str) -> str:
    """The C source of ``policy`` for ``hook``."""
    return render_plan(policy, ebpf_plan.program_plan(policy, hook))


def render_plan(policy: ir.Policy, plan: ebpf_plan.ProgramPlan) -> str:
    source = c_comment(policy.source.rsplit("/", 1)[-1])[:80]
    return _ENV.get_template("prog.c.j2").render(plan=plan, source=source)


# ---------------------------------------------------------------------------- emitting

def _stem(policy: ir.Policy, hook: str) -> str:
    return artifact_name(policy, hook, "o")[:-2]


def _classifier(policy: ir.Policy, hook: str, options: Options):
    """The classifier's plan when the policy takes that path (``options.extra
    ["classify"]``: ``auto``, the default, by size; ``always``; ``never``), else None;
    ``options.extra["flow_cache"]``: its flow cache (``classify.plan.flow_cache``).
    ``options.extra["kernel"]`` (major, minor): a kernel without ``bpf_loop`` (before
    5.17) gets the linear program instead (``auto``), or an error (``always``)."""
    from pfc.backends.ebpf.classify import plan as classify_plan

    mode = options.extra.get("classify", "auto")
    if mode not in ("auto", "always", "never"):
        raise ValueError(f"classify: `{mode}` is not one of auto, always, never")
    if mode == "never" or (mode == "auto" and not classify_plan.wanted(policy, hook)):
        return None
    if hook == "tc-egress" or any(v2_features(r) for r in policy.rules):
        return None  # the classifier reads the five fields of v1 only
    kernel = options.extra.get("kernel")
    if not kernels.classifier_fits(kernel):
        if mode == "auto":  # the linear program: no bpf_loop (docs/kernels.md)
            return None
        raise CompileError([error(kernels.refusal("bpf_loop", kernel, hook),
                                  policy.rules[0].span, code="kernel")])
    cache = classify_plan.flow_cache(options.extra.get("flow_cache"))
    return classify_plan.classify_plan(policy, hook, cache,
                                       options.extra.get("classify_tuning"))


def emit(policy: ir.Policy, options: Options) -> Artifact:
    hook = options.hook or options.target
    classifier = _classifier(policy, hook, options)
    if classifier is not None:
        return emit_classifier(policy, options, classifier)
    return emit_plan(policy, options, hook, ebpf_plan.program_plan(policy, hook))


def emit_plan(policy: ir.Policy, options: Options, hook: str, plan: ebpf_plan.ProgramPlan,
              extra: dict | None = None) -> Artifact:
    """The artifact of a linear program's plan (``extra``: more meta; the netfilter
    target's hook and priority)."""
    text = render_plan(policy, plan)
    stem = _stem(policy, hook)
    meta = {"program": plan.program, "counters": COUNTERS_MAP,
            "counter_slots": plan.slots.meta(),
            "count_rules": [r.index for r in policy.count_rules]}
    if plan.flow is not None and plan.flow.clock:  # token buckets: run.run, a sequence
        meta["clock"] = "pfc_clock"
    data, notes = {}, []
    if plan.sets or plan.ifaces:
        records = [ebpf_maps.map_record(s) for s in plan.sets]
        records += [ifaces.record(plan.ifaces)] if plan.ifaces else []
        meta |= {"maps": ebpf_maps.maps_meta(plan.sets), "maps_file": f"{stem}.maps.json",
                 "ready_map": counters.READY_MAP}
        data = {f"{stem}.maps.json": ebpf_maps.records_file(records)}
        notes = [load_note(policy, plan, stem)]
    if plan.ifaces:
        meta["ifaces"] = [list(names) for names in plan.ifaces]
    if plan.egress and plan.hook == "tc":
        meta["tc_attach"] = "egress"
    return _package(policy, options, hook, text, meta | (extra or {}), data, notes,
                    check_size=True)


def emit_classifier(policy: ir.Policy, options: Options, plan) -> Artifact:
    """The classifier's program (``templates/ebpf/classify.c.j2``) and its maps: the
    maps file lists them, their contents are ``STEM.HOOK.maps.bin``
    (:func:`pfc.backends.ebpf.maps.data_records`)."""
    hook = plan.hook
    stem = _stem(policy, hook)
    source = c_comment(policy.source.rsplit("/", 1)[-1])[:80]
    text = _ENV.get_template("classify.c.j2").render(plan=plan, source=source)
    records, blob = ebpf_maps.data_records(plan.maps, f"{stem}.maps.bin")
    meta = {"program": PROGRAM[hook], "counters": COUNTERS_MAP,
            "counter_slots": plan.slots.meta(),
            "count_rules": [r.index for r in policy.count_rules],
            "maps": ebpf_maps.data_meta(plan.maps), "maps_file": f"{stem}.maps.json",
            "ready_map": counters.READY_MAP, "classifier": plan.stats}
    data = {f"{stem}.maps.json": ebpf_maps.records_file(records), f"{stem}.maps.bin": blob}
    notes = [classifier_note(policy, stem)]
    return _package(policy, options, hook, text, meta, data, notes, check_size=False)


def _package(policy: ir.Policy, options: Options, hook: str, text: str, meta: dict,
             data: dict[str, bytes], notes: list, check_size: bool) -> Artifact:
    """The artifact: the C (format ``c``), or the object clang builds from it, with
    the exact command and the maps files ``data``. ``check_size``: refuse an object
    past the 16-bit jump range (the linear program; the classifier's size is fixed)."""
    stem = _stem(policy, hook)
    kernel = options.extra.get("kernel")
    if options.format == "c" and kernel is None:
        return Artifact(options.target, hook, "c", text, {f"{stem}.c": text.encode()} | data,
                        policy, meta, notes)
    try:
        built = toolchain.compile_c(text, stem)
    except ToolchainError as exc:
        raise CompileError([_clang_diagnostic(policy, text, exc)]) from exc
    section = SECTIONS.get(hook, "netfilter" if hook.startswith("nf-") else hook)
    if check_size and (size := program_insns(built.obj, section)) > MAX_JUMP:
        raise CompileError([_too_long(policy, hook, size)])
    meta = meta | {"kernel_needs": kernel_needs(policy, options.target, built.obj, kernel)}
    if options.format == "c":
        return Artifact(options.target, hook, "c", text, {f"{stem}.c": text.encode()} | data,
                        policy, meta, notes)
    command = (f"# The exact command that built {stem}.o, run in a directory holding the C\n"
               f"# source as {stem}.c (`pfc compile -o` may have renamed both).\n"
               f"{built.command}\n")
    files_ = {f"{stem}.o": built.obj, f"{stem}.c": text.encode(),
              f"{stem}.clang.txt": command.encode()} | data
    return Artifact(options.target, hook, "o", None, files_, policy,
                    meta | {"clang": built.command}, notes)


def kernel_needs(policy: ir.Policy, hook: str, obj: bytes,
                 kernel: tuple[int, ...] | None) -> dict[str, str]:
    """The features the object needs that are newer than Linux 5.10 (``meta
    ["kernel_needs"]``: feature → first release, what ``pfc load`` checks); a
    CompileError, one line per feature, when ``kernel`` lacks some."""
    found = kernels.needs(obj)
    lacking = kernels.missing(found, kernel) if kernel is not None else []
    if lacking:
        raise CompileError([error(kernels.refusal(f, kernel, hook), _user_of(policy, f),
                                  code="kernel") for f in lacking])
    return {f: kernels.shown(kernels.FEATURES[f].since) for f in found}


def _user_of(policy: ir.Policy, feature: str):
    """The span of the first rule that brings ``feature``, else the first rule's."""
    wanted = kernels.FEATURES[feature].language
    for rule in policy.rules:
        if rule_features(rule) & wanted:
            return rule.span
    return policy.rules[0].span if policy.rules else policy.default_span


def classifier_note(policy: ir.Policy, stem: str) -> Diagnostic:
    """The classifier's rules are map contents: the object drops every packet until
    a loader fills them from the maps file and its data file."""
    where = "/sys/fs/bpf/pfc-" + re.sub(r"[^A-Za-z0-9_-]", "_", stem)
    return Diagnostic(
        Severity.NOTE, f"the policy's {len(policy.rules):,} rules are classified: they are "
        f"maps the loader fills from {stem}.maps.json and {stem}.maps.bin; loaded as it is, "
        "the program drops every packet until the maps are filled",
        policy.rules[0].span, code="maps-at-load",
        hint=f"load it with `pfc load`, or by hand: bpftool prog loadall {stem}.o "
        f"{where}/progs pinmaps {where}/maps; python3 -m pfc.backends.ebpf.maps "
        f"{stem}.maps.json {where}/maps > fill.batch; bpftool batch file fill.batch "
        "(docs/ebpf.md)")


# BPF jumps are 16-bit signed instruction offsets. clang 14 (Debian 12) has no 32-bit
# `gotol` and emits out-of-range jumps without an error; every pfc program jumps from
# its first tests to its end, so a longer program never loads ("jump out of range").
MAX_JUMP = 32767


def program_insns(obj: bytes, section: str) -> int:
    """Instructions (8 bytes each) in the ELF64 object's section ``section``; 0 if it
    has none."""
    shoff = struct.unpack_from("<Q", obj, 0x28)[0]
    entsize, count, names = struct.unpack_from("<HHH", obj, 0x3A)

    def header(i: int) -> tuple[int, int, int]:
        name, _, _, _, offset, size = struct.unpack_from("<IIQQQQ", obj, shoff + i * entsize)
        return name, offset, size

    strings = header(names)[1]
    for i in range(count):
        name, _, size = header(i)
        end = obj.index(b"\0", strings + name)
        if obj[strings + name:end].decode("ascii", "replace") == section:
            return size // 8
    return 0


def _too_long(policy: ir.Policy, hook: str, size: int) -> Diagnostic:
    span = policy.rules[0].span if policy.rules else policy.default_span
    return error(f"target `{hook}`: the policy's {len(policy.rules):,} rules compile to "
                 f"{size:,} BPF instructions; the program cannot jump over more than "
                 f"{MAX_JUMP:,} (16-bit jump offsets), so the kernel would refuse it",
                 span, code="too-large",
                 hint="merge rules into lists (a list of addresses is one map lookup), "
                 "split the policy, or use nft or iptables")


def load_note(policy: ir.Policy, plan: ebpf_plan.ProgramPlan, stem: str) -> Diagnostic:
    """A note on the first rule whose list became maps (or that names an interface):
    the object needs them filled before it passes anything (``pfc_ready``), and how to
    load it."""
    owner = next((r.index for r in plan.rules for b in r.branches for m in b.ip_matches
                  if m.setmap is not None), None)
    if owner is None:
        return _iface_note(policy, plan, stem)
    rule = policy.rule(owner)
    where = "/sys/fs/bpf/pfc-" + re.sub(r"[^A-Za-z0-9_-]", "_", stem)
    steps = (f"bpftool prog loadall ./{stem}.o {where}/progs pinmaps {where}/maps; "
             f"python3 -m pfc.backends.ebpf.maps ./{stem}.maps.json {where}/maps > "
             "fill.batch; "
             "bpftool batch file fill.batch")
    return Diagnostic(
        Severity.NOTE, f"the list of the rule at line {rule.line} is a map that the loader "
        f"fills from {stem}.maps.json: loaded as it is (`ip link set ... obj`, `tc filter "
        "... obj`), the program drops every packet until the maps are filled",
        rule.span, hint=f"load it with `pfc load`, or by hand: {steps}, then attach the "
        "pinned program (docs/ebpf.md)", code="maps-at-load")


def _iface_note(policy: ir.Policy, plan: ebpf_plan.ProgramPlan, stem: str) -> Diagnostic:
    rule = policy.rule(next(r.index for r in plan.rules
                            if any(m.kind == "iface" for m in r.meta)))
    return Diagnostic(
        Severity.NOTE, f"the rule at line {rule.line} names interfaces: the loader maps "
        f"their names to the devices present when it loads the object ({stem}.maps.json); "
        "loaded as it is, the program drops every packet until that map is filled, and a "
        "device created after the load matches no name until the next load",
        rule.span, hint="load it with `pfc load` (again after adding a device), or by "
        f"hand with the maps file: python3 -m pfc.backends.ebpf.maps {stem}.maps.json "
        "PIN_DIR > fill.batch (docs/ebpf.md)", code="maps-at-load")


def _clang_diagnostic(policy: ir.Policy, text: str, exc: ToolchainError) -> Diagnostic:
    """clang rejecting generated C is a pfc bug: say so, on the rule it concerns."""
    rule = _rule_at(policy, text, exc.lines[0]) if exc.lines else None
    where = f" for rule at line {rule.line}" if rule else ""
    span = rule.span if rule else policy.default_span
    notes = (Note(f"clang said:\n{exc.output.strip() or exc}"),)
    if exc.command:
        notes += (Note(f"command: {exc.command}"),)
    return error(f"internal error: clang rejected the generated program{where}; "
                 "this is a pfc bug, please report it with the policy", span,
                 code="internal", notes=notes)


def _rule_at(policy: ir.Policy, text: str, line: int) -> ir.Rule | None:
    """The rule whose code holds C line ``line`` (the last ``/* rule N`` above it)."""
    index = None
    for content in text.splitlines()[:line]:
        found = re.match(r"\s*/\* rule (\d+), line", content)
        if found:
            index = int(found.group(1))
    return policy.rule(index) if index is not None else None


# ------------------------------------------------------------------------------ views

def view(hook: str, frame: bytes) -> bytes | None:
    """The frame as ``hook`` sees it; None if the hook never sees it (module doc). tc
    egress sees the frame as the host sends it (a tag in the data stays)."""
    if hook in ("xdp", "tc-egress"):
        return frame if len(frame) >= ETH_HLEN else None
    return packets.l2_input_view(frame)


def _run(artifact: Artifact, frames: list[bytes]):
    from pfc.backends.ebpf import run as ebpf_run

    return ebpf_run.run(artifact, frames)


def _passes() -> tuple:
    """``group_runs``: runs of terminal rules differing in one value become one list
    match (one map lookup when the list is long)."""
    from pfc.passes.group import group_runs

    return (group_runs,)


def _backend(hook: str) -> Backend:
    supports = ALL_FEATURES - ({"redirect"} if hook == "socket" else set())
    hooks, carries = (hook,), {"ingress": hook}
    if hook == "tc":  # a second program on the device's clsact egress
        hooks, carries = ("tc", "tc-egress"), {"ingress": "tc", "egress": "tc-egress"}
    return Backend(name=hook, description=DESCRIPTIONS[hook],
                   supports=supports | V2_FEATURES[hook], formats=("o", "c"), hooks=hooks,
                   emit=emit, passes=_passes(), binary_formats=frozenset(("o",)), run=_run,
                   view=view, carries=carries, reasons=REASONS | HOOK_REASONS[hook])


BACKENDS = tuple(_backend(h) for h in HOOKS)
