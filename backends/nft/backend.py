"""Target ``nft``: an nftables ruleset in its own table, as ``nft -f`` text or JSON.

Hooks: ``ingress`` (default; family netdev, needs ``--dev``: every frame the device
receives, after the kernel removed the outer VLAN tag, before IP input), ``prerouting``
(family inet, priority -300: before conntrack, like raw PREROUTING) and ``input``
(family inet, priority 0: packets addressed to this host).

Layout: ``table FAMILY TABLE`` / ``delete table FAMILY TABLE`` / ``table FAMILY TABLE
{...}`` in one file, one transaction: a load creates or replaces pfc's table and never
touches another (nft 1.0.6 has no ``destroy``). One base chain with ``policy accept``;
the default is its last rule. ``pass`` is ``accept`` (pfc does not drop it; later base
chains on the hook still see it), ``drop`` is ``drop``, ``count`` a named counter
``rule_INDEX`` (one per count rule, shared by the rule's per-family halves), and every
terminal rule carries an anonymous counter and the comment ``pfc rule INDEX``.
``redirect`` is payload statements (``nft_redirect``), stateless, at every hook; its
rules jump to the regular chains ``fix4``/``fix6`` when nft may have written a
checksum as 0xffff. The text and the JSON (libnftables-json) are printed from the same
lowered rules (``nft_lower``), so both load the same ruleset.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pfc.backends.base import (
    Artifact,
    Backend,
    Options,
    artifact_name,
    check_dev,
    check_name,
    printable,
)
from pfc.backends.nft import chain as ch
from pfc.backends.nft import lower as low
from pfc.backends.nft import maps
from pfc.backends.nft import stateful as stf
from pfc.backends.nft.ruleset import emit_ruleset
from pfc.frontend import ir
from pfc.frontend.diagnostics import CompileError, Diagnostic, error
from pfc.frontend.firewall.hooks import BLOCKS

if TYPE_CHECKING:  # jinja2 loads on first render
    pass

# hook -> (family, chain name, priority)
HOOKS = {"ingress": ("netdev", "ingress", 0), "prerouting": ("inet", "prerouting", -300),
         "input": ("inet", "input", 0)}
ELEMENTS_PER_LINE = 8


@dataclass(frozen=True)
class Setup:
    hook: str
    family: str
    table: str
    chain: str
    priority: int
    dev: str | None


def pick_hook(options: Options) -> str:
    """The hook when none is asked for: netdev ``ingress`` on the device given, else
    ``prerouting`` (inet, every device; like iptables' default raw PREROUTING)."""
    return "ingress" if options.dev else "prerouting"


def setup(policy: ir.Policy, options: Options) -> Setup:
    """Options → Setup. A bad name, or ``ingress`` without a device, is a ValueError
    (a usage error: the policy is fine, the options are not)."""
    hook = options.hook or pick_hook(options)
    family, chain, priority = HOOKS[hook]
    table = check_name(options.table, "table")
    dev = check_dev(options.dev) if options.dev else None
    if family == "netdev" and dev is None:
        raise ValueError("target `nft`: hook `ingress` needs a device: pass --dev DEV "
                         "(or --hook prerouting / --hook input, which need no device)")
    return Setup(hook, family, table, chain, priority, dev if family == "netdev" else None)


# ------------------------------------------------------------------------ lowering

# ------------------------------------------------------------------------ printing

@dataclass(frozen=True)
class Lowered:
    setup: Setup
    entries: list[ch.Entry]
    default: low.NftRule
    counters: list[str]
    sets: list[low.NftSet]
    chains: dict[str, list[low.NftRule]]
    maps: list[maps.NftMap]
    map_chains: dict[str, list[low.NftRule]]


# nft_payload's inner-header base (``@ih``, payload matches): Linux 5.16; 5.10 answers
# "Operation not supported" (measured in the kernel lab, docs/kernels.md)
INNER_HEADER_SINCE = (5, 16)


def kernel_errors(policy: ir.Policy, options: Options) -> list[Diagnostic]:
    """One error per payload rule when ``options.extra["kernel"]`` predates ``@ih``."""
    kernel = options.extra.get("kernel")
    if kernel is None or tuple(kernel[:2]) >= INNER_HEADER_SINCE:
        return []
    shown = ".".join(str(k) for k in kernel[:2])
    return [error("target `nft`: payload matches need nft_payload's inner header "
                  f"(`@ih`, Linux 5.16); kernel {shown} does not have it", rule.span,
                  code="kernel")
            for rule in policy.rules
            if any(isinstance(m, ir.PayloadMatch) for m in rule.matches)]


def lower(policy: ir.Policy, options: Options) -> Lowered:
    s = setup(policy, options)
    diags = ch.refused(policy) + stf.hook_errors(policy, s.hook) + kernel_errors(policy, options)
    if diags:
        raise CompileError(diags)
    lowering = low.Lowering(s.family)
    mapped = maps.MapLowering(lowering, functools.partial(rule_lines, lowering), [], {})
    found = ch.entries(policy, lowering, mapped)
    return Lowered(s, found, ch.default_rule(policy),
                   list(dict.fromkeys(ch.counter_name(r.index) for r in policy.count_rules)),
                   list(lowering.sets.values()), ch.fix_chains(found), mapped.maps,
                   mapped.chains)


def rule_lines(lowering: low.Lowering, rule: ir.Rule) -> list[low.NftRule]:
    """The rule as ordered-chain rules (none when it never matches)."""
    try:
        return ch.nft_rules(rule, lowering)
    except low.Impossible:
        return []


def emit(policy: ir.Policy, options: Options) -> Artifact:
    lowered = lower(policy, options)
    s = lowered.setup
    fmt = options.format or "nft"
    forms = {"text": functools.partial(render_text, policy, lowered),
             "json": functools.partial(json_text, lowered)}
    main = forms.pop("text" if fmt == "nft" else "json")()
    files = {artifact_name(policy, "nft", "nft" if fmt == "nft" else "json"): main.encode()}
    meta = LazyMeta({"family": s.family, "table": s.table, "chain": s.chain,
                     "hook": s.hook, "dev": s.dev, "priority": s.priority,
                     "counters": {r.index: ch.counter_name(r.index) for r in policy.count_rules},
                     "sets": sorted(st.name for st in lowered.sets),
                     "chains": sorted(lowered.chains),
                     "text" if fmt == "nft" else "json": main}, forms)
    return Artifact("nft", s.hook, fmt, main, files, policy, meta)


class LazyMeta(dict):
    """``meta`` whose other form (``text`` or ``json``: the one not asked for) is
    rendered on first use (``meta["json"]`` in ``load_nft``): at 100k set elements each
    form costs about a second."""

    def __init__(self, data: dict, lazy: dict) -> None:
        super().__init__(data)
        self._lazy = lazy

    def __missing__(self, key: str) -> object:
        if key not in self._lazy:
            raise KeyError(key)
        value = self[key] = self._lazy.pop(key)()
        return value

    def get(self, key: str, default: object = None) -> object:
        return self[key] if key in self else default

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or key in self._lazy


def render_text(policy: ir.Policy, lowered: Lowered) -> str:
    s = lowered.setup
    sets = [{"name": st.name, "type": st.type, "interval": st.interval,
             "lines": ch.element_lines(st)} for st in lowered.sets]
    entries_ = [{"index": e.index, "line": e.line, "text": e.text, "note": e.note,
                 "lines": [r.text for r in e.rules]} for e in lowered.entries]
    chains = {name: [r.text for r in rules] for name, rules in lowered.chains.items()}
    map_chains = {name: [r.text for r in rules]
                  for name, rules in lowered.map_chains.items()}
    vmaps = [{"name": m.name, "type": m.type,
              "lines": [f"{k.text} : jump {c}," for k, c in m.elements]}
             for m in lowered.maps]
    return ch.environment().get_template("nft.j2").render(
        source=printable(policy.source), family=s.family, hook=s.hook, dev=s.dev, table=s.table,
        chain=s.chain, priority=s.priority, counters=lowered.counters, sets=sets,
        entries=entries_, chains=chains, maps=vmaps, map_chains=map_chains,
        default=policy.default.value,
        default_line=lowered.default.text)


def json_text(lowered: Lowered) -> str:
    return json.dumps(render_json(lowered), indent=1) + "\n"


def render_json(lowered: Lowered) -> dict:
    """The same ruleset as libnftables JSON commands (``nft -j -f``)."""
    s = lowered.setup
    where = {"family": s.family, "table": s.table}
    table = {"family": s.family, "name": s.table}
    chain = {**where, "name": s.chain, "type": "filter", "hook": s.hook,
             "prio": s.priority, "policy": "accept"}
    if s.dev:
        chain["dev"] = s.dev
    cmds = [{"add": {"table": table}}, {"delete": {"table": table}},
            {"add": {"table": table}}]
    cmds += [{"add": {"counter": {**where, "name": c}}} for c in lowered.counters]
    for st in lowered.sets:
        one = {**where, "name": st.name, "type": st.type,
               "elem": [e.json for e in st.elements]}
        if st.interval:
            one["flags"] = ["interval"]
        cmds.append({"add": {"set": one}})
    cmds += [{"add": {"chain": {**where, "name": name}}}
             for name in [*lowered.chains, *lowered.map_chains]]
    for m in lowered.maps:
        cmds.append({"add": {"map": {
            **where, "name": m.name, "type": list(m.types) if len(m.types) > 1
            else m.types[0], "map": "verdict", "flags": ["interval"],
            "elem": [[k.json, {"jump": {"target": c}}] for k, c in m.elements]}}})
    cmds.append({"add": {"chain": chain}})
    for name, rules in [*lowered.chains.items(), *lowered.map_chains.items()]:
        cmds += [{"add": {"rule": r.json(s.family, s.table, name)}} for r in rules]
    for rule in [r for e in lowered.entries for r in e.rules] + [lowered.default]:
        cmds.append({"add": {"rule": rule.json(s.family, s.table, s.chain)}})
    return {"nftables": [{"metainfo": {"json_schema_version": 1}}] + cmds}


# ------------------------------------------------------------------------ kernel

def view(hook: str, frame: bytes) -> bytes | None:
    """What the hook sees: netdev ingress the frame with its outer tag removed
    (``packets.l2_input_view``: runts and broken tags never arrive); prerouting the IP
    packet as ``ip_rcv``/``ipv6_rcv`` leave it; input only what the lab delivers
    locally (``iplab.hook_view``)."""
    from pfc.kernel import iplab
    from pfc.oracle import packets
    if hook == "ingress":
        return packets.l2_input_view(frame)
    return iplab.hook_view(hook == "input", frame)


def run(artifact: Artifact, frames: list[bytes]):
    from pfc.backends.nft import run as nftrun
    return nftrun.run(artifact, frames)


def _passes() -> tuple:
    """``group_runs`` (runs of rules differing in one value become one set), then
    ``split_families`` (nft's fields and sets are typed by family)."""
    from pfc.passes.group import group_runs
    from pfc.passes.split_families import split_families
    return (group_runs, split_families)


BACKENDS = (Backend(
    name="nft",
    description="nftables ruleset in its own table (netdev ingress with --dev, else inet "
                "prerouting; or inet input), text or libnftables JSON",
    supports=frozenset({"count", "redirect", "payload", "ipv6", "non-ip", "log", "limit",
                        "audit", "ct", "queue"}),
    formats=("nft", "json"), hooks=tuple(HOOKS), emit=emit, passes=_passes(), run=run,
    carries={name: name for name in BLOCKS}, emit_ruleset=emit_ruleset,
    view=view, pick_hook=pick_hook, limits=ch.refused),)
