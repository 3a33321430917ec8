"""``inline_chains``: ``jump``/``goto`` rules replaced by the rules of their chains.

For targets that print one ordered list per hook (every eBPF hook, classic BPF, and
nft/iptables where they do not keep the chains): ``jump NAME M`` becomes each rule of
chain NAME with the jump's matches ``M`` added (and its protocol and family joined),
in order; ``goto NAME M`` is the same, followed by the hook's default for ``M`` (a
packet the chain does not decide gets the default, nft's and iptables' ``goto``).
Chains that jump are expanded in turn (the checker refused cycles).

What it preserves (the interpreter gives the same verdicts before and after, tested):
the first terminal rule that holds decides, as in the chain; a rule that can never hold
once joined (two different protocols, no common IP version, an empty merged match) is
left out. Copies of a chain rule keep the rule's ``index`` and ``line``: a rule's
counter is one counter wherever the rule was reached from (docs/language.md "Chains").
A join that one match per field cannot say (``flags syn`` beside ``!flags ack,psh``)
is a CompileError at the chain's rule, naming the jump.
"""

from __future__ import annotations

from dataclasses import replace

from pfc.frontend import ir
from pfc.frontend.diagnostics import CompileError, Note, error
from pfc.frontend.merge import merge_fields


def inline_chains(policy: ir.Policy) -> ir.Policy:
    if not policy.chains and not any(isinstance(r.action, ir.Jump) for r in policy.rules):
        return policy
    chains = {c.name: c for c in policy.chains}
    rules = tuple(_expand(policy.rules, chains, policy.default))
    return replace(policy, rules=rules, chains=())


def _expand(rules, chains: dict[str, ir.Chain], default: ir.Verdict):
    for rule in rules:
        if not isinstance(rule.action, ir.Jump):
            yield rule
            continue
        chain = chains[rule.action.chain]
        body = [j for r in chain.rules if (j := _join(rule, r)) is not None]
        yield from _expand(body, chains, default)
        if rule.action.goto:
            verdict = ir.Drop(rule.span) if default is ir.Verdict.DROP else ir.Pass(rule.span)
            yield replace(rule, action=verdict)


def _join(outer: ir.Rule, inner: ir.Rule) -> ir.Rule | None:
    """``inner`` restricted to the packets ``outer``'s matches hold for, or None when
    no packet can satisfy both."""
    if outer.proto is not None and inner.proto is not None and outer.proto != inner.proto:
        return None
    family = _family(outer.family, inner.family)
    if family is None:
        return None
    merged, diags = merge_fields(outer.matches + inner.matches, family)
    if any(d.severity == "error" for d in diags):
        raise CompileError([error(
            f"this rule cannot be joined with the `{outer.action.name}` at line "
            f"{outer.line} into one rule: {diags[0].message}", inner.span,
            notes=(Note(f"the `{outer.action.name}`", outer.span),), code="inline")])
    if any(d.code == "never-matches" for d in diags):
        return None
    proto, name = ((outer.proto, outer.proto_name) if outer.proto is not None
                   else (inner.proto, inner.proto_name))
    if proto is None and outer.proto_name != "all":
        name = outer.proto_name
    return replace(inner, family=family, proto=proto, proto_name=name, matches=merged)


def _family(a: ir.Family, b: ir.Family) -> ir.Family | None:
    if a is ir.Family.ANY:
        return b
    if b is ir.Family.ANY:
        return a
    versions = a.versions & b.versions
    return ir.Family.of_versions(versions) if versions else None
