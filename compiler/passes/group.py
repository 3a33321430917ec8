"""Pass: group runs of rules that differ only in one field's value into one set lookup.

``drop src 10.0.0.1`` / ``drop src 10.0.0.2`` / ... (a blocklist written as rules)
becomes one ``drop src { 10.0.0.1, 10.0.0.2, ... }``, which backends lower to a map or
a named set instead of a chain: per-packet cost stops growing with the rule count.

Meaning kept: only *consecutive* terminal rules with the same action (and redirect
target), protocol and all other matches are merged, and the differing match is a plain
(non-negated) address or integer match. A packet matching any rule of the run is decided
by the first of them with that action; the merged rule decides it with the same action.
The merged rule keeps the first rule's index, line and span: a per-rule report names the
first rule of the run for every packet the run decides. ``count`` rules are never merged
(each keeps its own counter).
"""

from __future__ import annotations

from dataclasses import replace

from pfc.frontend import ir
from pfc.frontend.matches import merge_ranges
from pfc.frontend.source import NO_SPAN

MIN_RUN = 2


def group_runs(policy: ir.Policy) -> ir.Policy:
    out: list[ir.Rule] = []
    run: list[ir.Rule] = []
    key = None
    for rule in policy.rules:
        k = _key(rule)
        if k is not None and k == key:
            run.append(rule)
            continue
        out.extend(_merged(run))
        run, key = ([rule], k) if k is not None else ([], None)
        if k is None:
            out.append(rule)
    out.extend(_merged(run))
    return replace(policy, rules=tuple(out))


def _key(rule: ir.Rule):
    """What must be equal for two rules to merge; None if the rule cannot merge."""
    if not rule.terminal or rule.limit is not None:
        return None  # a limit is one bucket per rule: merged rules would share one
    varying = _varying(rule)
    if varying is None:
        return None
    others = tuple(_strip(m) for m in rule.matches if m is not varying)
    # the protocol as written too: `pass ip6 dst A` and `pass dst B` (IPv4) must not
    # merge, the merged rule would be `ip6` and lose B
    family = rule.family if varying.field not in ("src", "dst") else None
    return (type(rule.action), getattr(rule.action, "audit", False),
            getattr(rule.action, "address", None),
            getattr(rule.action, "port", None), rule.proto, rule.proto_name, family,
            varying.field, others)


def _varying(rule: ir.Rule) -> ir.Match | None:
    """The one match allowed to differ: the first plain address or integer match."""
    for m in rule.matches:
        if isinstance(m, (ir.AddrMatch, ir.IntMatch)) and not m.negated:
            return m
    return None


def _strip(match: ir.Match) -> ir.Match:
    return replace(match, span=NO_SPAN)


def _merged(run: list[ir.Rule]) -> list[ir.Rule]:
    if len(run) < MIN_RUN:
        return run
    first = run[0]
    varying = [_varying(r) for r in run]
    if isinstance(varying[0], ir.AddrMatch):
        prefixes = tuple(dict.fromkeys(p for m in varying for p in m.prefixes))
        merged = replace(varying[0], prefixes=prefixes, set_name=None)
        versions = {p.version for p in prefixes}
        family = ir.Family.of_versions(versions)
    else:
        ranges = merge_ranges([r for m in varying for r in m.ranges])
        merged = replace(varying[0], ranges=ranges, set_name=None)
        family = first.family
    matches = tuple(merged if m is varying[0] else m for m in first.matches)
    return [replace(first, matches=matches, family=_with_rule_family(first, family))]


def _with_rule_family(rule: ir.Rule, family: ir.Family) -> ir.Family:
    """Merging IPv4-only and IPv6-only address rules gives a rule of both families, but
    never wider than the protocol allows (``ip`` stays IPv4)."""
    allowed = ir.PROTOCOLS[rule.proto_name][1].versions
    versions = family.versions & allowed
    return ir.Family.of_versions(versions) if versions else rule.family
