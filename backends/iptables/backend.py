"""Target ``iptables``: ``iptables-restore`` and ``ip6tables-restore`` files (+ ipset).

Hooks: ``raw-prerouting`` (default; table raw, chain PREROUTING, before conntrack) and
``filter-input`` (table filter, chain INPUT: only packets addressed to this host).

Layout, chosen so a load never disturbs the user's own rules (``--noflush``):

- the rules live in one pfc-owned chain (``PFC``, from ``--table``), declared with
  ``:PFC - [0:0]``, which under ``--noflush`` creates the chain or flushes it (measured,
  both flavours): each load replaces pfc's rules atomically;
- the jump from the base chain: iptables-restore has no "add if missing", and every
  rule command changes the base chain by exactly one rule whatever it holds, so no
  single file can leave exactly one jump both when there is none and when there is one.
  The main file therefore deletes the jump and inserts it again at position 1 (a reload
  keeps one jump; a first load fails loudly, atomically, with nothing applied), and a
  small ``.init`` file, loaded once, creates the chain and the first jump;
- ``pass`` is ``RETURN`` (later rules of the base chain still apply, so pfc's ``pass``
  is "pfc does not drop it", like its default); ``drop`` is ``DROP``; ``count`` is a rule
  with no target, whose counters are the rule's (``iptables-save -c``);
- both families are always written, so a reload also replaces a previous policy's
  IPv6 rules; a rule of family ``any`` (``drop`` alone) is in both: non-IP frames never
  reach these hooks (``view``), which is not something the rule could express;
- ``redirect`` is not supported (left out of ``supports``): iptables' DNAT lives in the
  nat table, behind conntrack, rewrites only the first packet of a connection's tuple
  and changes conntrack state, so it cannot give the interpreter's stateless rewrite.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pfc.backends.base import (
    Artifact,
    Backend,
    Options,
    artifact_name,
    check_dev,
    printable,
)
from pfc.backends.describe import describe
from pfc.backends.iptables import files as fl
from pfc.backends.iptables import ipt_tree as tr
from pfc.backends.iptables import lower as low
from pfc.backends.iptables import queue
from pfc.backends.iptables import stateful as st
from pfc.backends.iptables.ruleset import emit_ruleset
from pfc.frontend import ir
from pfc.frontend.diagnostics import CompileError, Diagnostic
from pfc.frontend.firewall.hooks import BLOCKS

if TYPE_CHECKING:  # jinja2 loads on first render
    pass

HOOKS = {"raw-prerouting": ("raw", "PREROUTING"), "filter-input": ("filter", "INPUT")}
FLAVOURS = ("nft", "legacy")


@dataclass(frozen=True)
class Entry:
    index: int
    line: int
    text: str
    note: str
    lines: tuple[str, ...]


def target(rule: ir.Rule, chain: str, notrack: bool) -> str | None:
    if isinstance(rule.action, ir.Drop) and rule.action.audit:
        return f"-g {chain}-notrack" if notrack else "-j RETURN"  # a would-be drop passes
    if isinstance(rule.action, ir.Drop):
        return "-j DROP"
    if isinstance(rule.action, ir.Pass):
        return f"-g {chain}-notrack" if notrack else "-j RETURN"
    if isinstance(rule.action, (ir.Count, ir.Log)):
        return None
    if isinstance(rule.action, ir.Queue):
        return queue.target(rule.action)
    raise ValueError(f"iptables cannot express `{rule.action.name}`")  # capability check


def entries(policy: ir.Policy, family: int, lowering: low.Lowering, chain: str,
            notrack: bool) -> tuple[list[Entry], list[int | str | None]]:
    """The rules of one family, and for each ``-A CHAIN`` line the rule it belongs to
    (``stateful.LOG_OWNER`` for an audited drop's NFLOG line)."""
    out, owners = [], []
    for rule in policy.rules:
        if family not in rule.family.versions:
            continue
        alts = lowering.rule(rule, family)
        pairs = st.rule_lines(rule, family, [a.argv() for a in alts],
                              target(rule, chain, notrack), lowering.set_prefix,
                              policy.default)
        lines = tuple(line for line, _ in pairs)
        note = "" if alts else f" (never matches {fl.FAMILIES[family][1]}: left out)"
        out.append(Entry(rule.index, rule.line, printable(describe(rule)), note, lines))
        owners += [owner for _, owner in pairs]
    return out, owners


def default_line(policy: ir.Policy, chain: str, notrack: bool) -> str:
    """The chain's last rule: the default verdict, and its counter (the packets no rule
    decided). ``default pass`` without ``--notrack`` is a rule with no target: it
    counts, then the packet leaves the chain (RETURN)."""
    if policy.default is ir.Verdict.DROP and not policy.default_audit:
        return "-j DROP"
    return f"-g {chain}-notrack" if notrack else ""


def default_logs(policy: ir.Policy) -> list[str]:
    """The lines before the default's: an audited default drop's NFLOG."""
    if policy.default is ir.Verdict.DROP and policy.default_audit:
        return [st.audit_log(0)]
    return []


@dataclass(frozen=True)
class Setup:
    """The checked options: where the rules go and how they are reached."""

    hook: str
    table: str
    base: str
    chain: str
    dev: str | None
    notrack: bool
    flavour: str

    @property
    def jump(self) -> str:
        return (f"-i {self.dev} " if self.dev else "") + f"-j {self.chain}"


def setup(options: Options) -> Setup:
    """Options → Setup; ValueError (a usage error) for anything not allowed."""
    hook = options.hook or "raw-prerouting"
    table, base = HOOKS[hook]
    if options.notrack and table != "raw":
        raise ValueError("--notrack needs hook raw-prerouting (CT --notrack works in the "
                         "raw table only)")
    flavour = options.extra.get("flavour", "nft")
    if flavour not in FLAVOURS:
        raise ValueError(f"unknown iptables flavour `{flavour}`: {', '.join(FLAVOURS)}")
    return Setup(hook, table, base, fl.chain_name(options.table),
                 check_dev(options.dev) if options.dev else None, options.notrack, flavour)


def family_files(policy: ir.Policy, s: Setup, lowering: low.Lowering) -> dict[int, dict]:
    """Per family: the entries to print, file names, and each line's rule index; for a
    large policy (``pfc.passes.classify`` made blocks) the tree's chains too
    (``ipt_tree``)."""
    out = {}
    items = _items(policy)
    named = notes(policy) if items is not None else {}
    for family, (tool, name, _) in fl.FAMILIES.items():
        default = default_line(policy, s.chain, s.notrack)
        logs = default_logs(policy)
        out[family] = {"tool": tool, "name": name, "default": default,
                       "default_logs": logs, "tree": None, "subchains": {},
                       "main": artifact_name(policy, tool, "restore"),
                       "init": artifact_name(policy, tool, "init")}
        if items is not None:
            tail = [(line, st.LOG_OWNER) for line in logs] + [(default, None)]
            out[family] |= tr.tree_family(items, family, s.chain,
                                          functools.partial(pairs, policy, lowering, s), tail)
            out[family]["notes"] = named
            continue
        found, owners = entries(policy, family, lowering, s.chain, s.notrack)
        out[family] |= {"entries": found,
                        "owners": owners + [st.LOG_OWNER] * len(logs) + [None]}
    return out


def notes(policy: ir.Policy) -> dict[int, str]:
    """A large policy's comment per rule (``# rule N, line L: TEXT``), printed before
    each run of a rule's lines in the tree's chains (both families' files): a rule
    met in several leaves is named in each."""
    return {r.index: f"rule {r.index}, line {r.line}: {printable(describe(r))}"
            for r in policy.rules}


def _items(policy: ir.Policy) -> list | None:
    """The classified policy when it has a block, else None (the ordered chain)."""
    from pfc.passes.classify import MIN_RULES, Block, classify
    if len(policy.rules) < MIN_RULES:
        return None
    items = classify(policy, regions=False)
    return items if any(isinstance(i, Block) for i in items) else None


def pairs(policy: ir.Policy, lowering: low.Lowering, s: Setup, rule: ir.Rule,
          family: int) -> list[tuple[str, int | str]]:
    """One rule's iptables lines in one family (without ``-A CHAIN``), with owners."""
    alts = lowering.rule(rule, family)
    return st.rule_lines(rule, family, [a.argv() for a in alts],
                         target(rule, s.chain, s.notrack), lowering.set_prefix,
                         policy.default)


def emit(policy: ir.Policy, options: Options) -> Artifact:
    s = setup(options)
    diags = st.hook_errors(policy, s.hook) + st.limits(policy)
    if diags:
        raise CompileError(diags)
    lowering = low.Lowering(options.table.lower())
    fams = family_files(policy, s, lowering)
    ipset = artifact_name(policy, "iptables", "ipset") if lowering.sets else None
    env = fl.environment()
    macros = env.get_template("iptables.j2").make_module({
        "source": printable(policy.source), "table": s.table, "base": s.base, "chain": s.chain,
        "dev": s.dev, "jump": s.jump, "notrack": s.notrack, "ipset": ipset,
        "default": policy.default.value})
    files = {f["main"]: str(macros.main(f)) for f in fams.values()}
    files |= {f["init"]: str(macros.init(f)) for f in fams.values()}
    if ipset:
        files[ipset] = fl.ipset_text(env, policy, lowering, ipset)
    tools = {f[k]: f["tool"] for f in fams.values() for k in ("main", "init")}
    text = printed(str(macros.first(fams[4])), files, tools | {ipset: "ipset"})
    meta = {"table": s.table, "base": s.base, "chain": s.chain, "dev": s.dev,
            "flavour": s.flavour, "notrack": s.notrack, "sets": sorted(lowering.sets),
            "lines": {f["name"]: f["owners"] for f in fams.values()},
            "chains": {f["name"]: {c: [o for _, o in ls] for c, ls in f["subchains"].items()}
                       for f in fams.values()},
            "files": {"ipv4": fams[4]["main"], "ipv6": fams[6]["main"],
                      "init4": fams[4]["init"], "init6": fams[6]["init"], "ipset": ipset}}
    return Artifact("iptables", s.hook, options.format or "restore", text,
                    {k: v.encode() for k, v in files.items()}, policy, meta)


def printed(first: str, files: dict[str, str], tools: dict[str | None, str]) -> str:
    """What ``pfc compile`` prints: the IPv4 *first-load* form (``first`` in
    iptables.j2: ``-N`` the chain, fill it, insert the jump; it refuses, changing
    nothing, where pfc's chain exists), then every file ``-o`` writes with each line
    commented out. Piped whole into ``iptables-restore --noflush`` on a system without
    pfc's policy it loads the IPv4 rules and nothing else: the IPv6 rules are not valid
    IPv4 rules (their u32 offsets are IPv6's), so they must never reach iptables by
    accident.

    Why not a form that also replaces a loaded policy: iptables-restore has no
    conditional, ``-D``/``-C``/``-R`` fail when their rule is absent and ``-N`` when the
    chain exists, and ``-I``/``-A``/``-D`` move the number of jumps in the built-in chain
    by a fixed amount; the commands that adapt to what exists (``:CHAIN``, ``-F``) act
    on whole chains, and the built-in chain holds the user's rules. So no input leaves
    exactly one jump both where there is none and where there is one."""
    out = ["# ==== IPv4, first load: iptables-restore --noflush ====\n" + first]
    for name, text in files.items():
        how = "ipset restore" if tools[name] == "ipset" else f"{tools[name]}-restore --noflush"
        lines = "".join(f"# {line}".rstrip() + "\n" for line in text.splitlines())
        out.append(f"# ==== {name}: {how} (commented out here) ====\n{lines}")
    return "\n".join(out)


def view(hook: str, frame: bytes) -> bytes | None:
    """What the hook sees: the IP packet as ``ip_rcv``/``ipv6_rcv`` leave it (none for
    non-IP frames or packets they drop); INPUT also needs local delivery."""
    from pfc.backends.iptables import run as iptrun
    return iptrun.view(hook, frame)


def run(artifact: Artifact, frames: list[bytes]):
    from pfc.backends.iptables import run as iptrun
    return iptrun.run(artifact, frames)


def limits(policy: ir.Policy) -> list[Diagnostic]:
    """``Backend.limits``: every rule ``emit`` would refuse (more than
    ``lower.MAX_ALTERNATIVES`` iptables rules for one policy rule, a field that would
    need two ``-s``/``-d``), on the lowered policy, each rule once."""
    lowering = low.Lowering("pfc")
    out: list[Diagnostic] = st.limits(policy)
    for rule in policy.rules:
        for family in fl.FAMILIES:
            try:
                lowering.rule(rule, family)
            except CompileError as exc:
                out += [d for d in exc.diagnostics if d not in out]  # split halves: once
                break
    return out


def _passes() -> tuple:
    """IR passes before emission: ``group_runs`` (runs of rules differing in one value
    become one list: one ipset or u32 value list instead of a rule each), then
    ``split_families`` (a rule of family IP becomes an IPv4 and an IPv6 rule, same
    index). ``emit`` lowers each rule per family anyway, so the output means the same
    with or without the latter; it is used once it exists."""
    from pfc.passes.group import group_runs
    try:
        from pfc.passes.split_families import split_families
    except ImportError:
        return (group_runs,)
    return (group_runs, split_families)


BACKENDS = (Backend(
    name="iptables",
    description="iptables-restore + ip6tables-restore files (raw PREROUTING or filter "
                "INPUT), ipset for lists",
    supports=frozenset({"count", "payload", "ipv6", "non-ip", "log", "limit", "audit", "ct",
                        "queue"}),
    formats=("restore",), hooks=tuple(HOOKS), emit=emit, passes=_passes(), run=run,
    carries={b: b for b, info in BLOCKS.items() if not info.per_device},
    emit_ruleset=emit_ruleset,
    view=view, limits=limits),)
