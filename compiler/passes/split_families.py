"""Pass: one rule per IP family. A rule of family ``IP`` (IPv4 and IPv6 alike: ``drop
udp dport 53``, ``drop ttl 1``, a mixed address list) becomes an IPv4 rule followed by an
IPv6 rule, so that backends whose tables, sets and matches are typed by family
(nftables ``ip``/``ip6`` payloads and sets, iptables/ip6tables) print each as it is.

Meaning kept (a frame has one family, so at most one of the two rules can hold on it):

- both rules keep the original ``index``, ``line``, ``span`` and ``proto``: a count rule
  split in two still counts under one index (backends sum the two counters);
- every address match keeps only the prefixes of the rule's family, as the interpreter
  tests an address against the entries of its own family only (``set_name`` is kept:
  backends name a per-family set after it);
- a plain address match with no prefix of a family can never hold on that family: the
  rule is left out for it (it could not match anything there, nothing is weakened);
- a negated address match with no prefix of a family holds on every frame of that
  family that *has* the address: it becomes the match ``ADDR in 0.0.0.0/0`` (``::/0``),
  "the address is present", never "anything";
- rules of family ``IP4``/``IP6`` go through the same filtering (an ``IP4`` rule may hold
  a mixed list: ``drop src { 10.0.0.0/8, 2001:db8::/32 } !dst 10.1.0.0/16``);
- rules of family ``ANY`` (protocol ``all`` with no IP match, which also match non-IP
  frames) are left as they are: no family split can express "every frame".
"""

from __future__ import annotations

import ipaddress
from dataclasses import replace

from pfc.frontend import ir

_FAMILY = {4: ir.Family.IP4, 6: ir.Family.IP6}
_EVERYTHING = {4: ipaddress.ip_network("0.0.0.0/0"), 6: ipaddress.ip_network("::/0")}


def split_families(policy: ir.Policy) -> ir.Policy:
    """Policy → Policy: every IP rule of one family only (module doc)."""
    rules: list[ir.Rule] = []
    for rule in policy.rules:
        rules.extend(split_rule(rule))
    return replace(policy, rules=tuple(rules))


def split_rule(rule: ir.Rule) -> list[ir.Rule]:
    """The rule for each of its families, IPv4 first; ``[rule]`` for family ANY."""
    if rule.family is ir.Family.ANY:
        return [rule]
    out = []
    for version in sorted(rule.family.versions):
        one = for_version(rule, version)
        if one is not None:
            out.append(one)
    return out


def for_version(rule: ir.Rule, version: int) -> ir.Rule | None:
    """``rule`` restricted to IP version ``version``; None if it can never hold there."""
    matches = []
    for match in rule.matches:
        if isinstance(match, ir.AddrMatch):
            match = _addr_for_version(match, version)
            if match is None:
                return None
        matches.append(match)
    return replace(rule, family=_FAMILY[version], matches=tuple(matches))


def _addr_for_version(match: ir.AddrMatch, version: int) -> ir.AddrMatch | None:
    prefixes = tuple(p for p in match.prefixes if p.version == version)
    if prefixes == match.prefixes:
        return match
    if prefixes:
        return replace(match, prefixes=prefixes)
    if not match.negated:
        return None
    # "not in {}" holds whenever the address is there: "in 0.0.0.0/0".
    return replace(match, prefixes=(_EVERYTHING[version],), negated=False, set_name=None)
