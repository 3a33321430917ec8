"""The rules of one nft chain: IR rules → ordered ``NftRule`` lines (with their
comments), the default, the redirect fix-up chains, the named counters; and the
Jinja2 environment and set printing every nft form shares. Used by the v1 backend
(``backend``, one chain) and whole firewalls (``ruleset``, a chain per block)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

from pfc.backends.base import printable
from pfc.backends.describe import describe
from pfc.backends.nft import expr as x
from pfc.backends.nft import firewall as fw
from pfc.backends.nft import lower as low
from pfc.backends.nft import maps
from pfc.backends.nft import queue as nftq
from pfc.backends.nft import redirect as redir
from pfc.backends.nft import stateful as stf
from pfc.frontend import ir
from pfc.frontend.diagnostics import Diagnostic, error

if TYPE_CHECKING:  # jinja2 loads on first render
    import jinja2

ELEMENTS_PER_LINE = 8


@dataclass(frozen=True)
class Entry:
    index: int
    line: int
    text: str
    note: str
    rules: tuple[low.NftRule, ...]


def entries(policy: ir.Policy, lowering: low.Lowering,
            mapped: maps.MapLowering | None = None) -> list[Entry]:
    """One entry per rule of the ordered chain; with ``mapped``, one per block of
    ``classify`` (a jump to its chain of verdict maps)."""
    from pfc.passes.classify import classify  # numpy: only when compiling for nft

    items = classify(policy) if mapped is not None else list(policy.rules)
    out = []
    for n, rule in enumerate(items):
        if not isinstance(rule, ir.Rule):
            first, last = rule.rules[0], rule.rules[-1]
            text = (f"rules {first.index}-{last.index} (lines {first.line}-{last.line}), "
                    f"{len(rule.rules)} IPv{rule.version} rules: verdict maps")
            out.append(Entry(first.index, first.line, text, "", (mapped.block(n, rule),)))
            continue
        try:
            rules, note = tuple(nft_rules(rule, lowering, policy.default)), ""
        except low.Impossible:
            rules, note = (), " (never matches this family: left out)"
        out.append(Entry(rule.index, rule.line, printable(describe(rule)), note, rules))
    return out


def nft_rules(rule: ir.Rule, lowering: low.Lowering,
              default: ir.Verdict = ir.Verdict.PASS) -> list[low.NftRule]:
    if rule.family is ir.Family.ANY and stf.bucketed(rule):  # a bucket per family
        matches = lowering.matches(rule)  # (iif, mark, ct status ...: found by pfc prove)
        return [r for gate in stf.family_gates(lowering.hook_family)
                for r in _rules(rule, lowering, default, [gate, *matches])]
    return _rules(rule, lowering, default, lowering.matches(rule))


def _rules(rule: ir.Rule, lowering: low.Lowering, default: ir.Verdict,
           base: list[x.Node]) -> list[low.NftRule]:
    action, tag = rule.action, f"pfc rule {rule.index}"
    if isinstance(action, ir.Log):
        return [low.NftRule(rule.index, (*base, *stf.log_terms(rule, default)))]
    if rule.limit is not None:
        version = None if rule.family is ir.Family.ANY else low.version_of(rule)
        base = [*base, *stf.limit_terms(rule, version)]
    if isinstance(action, ir.Drop) and action.audit:
        return [low.NftRule(rule.index, (*base, *stf.audit_terms(rule.line)), tag)]
    if isinstance(action, ir.Count):
        return [low.NftRule(rule.index, (*base, x.counter(counter_name(rule.index))))]
    if isinstance(action, ir.Redirect):
        return [low.NftRule(rule.index, (*unique(terms), x.counter(), verdict(v)), tag)
                for terms, v in redir.variants(rule, low.version_of(rule), base)]
    if isinstance(action, ir.Queue):
        return [low.NftRule(rule.index, terms, tag) for terms in nftq.rules(rule, base)]
    v2 = _v2_statement(rule)
    if v2 is not None:
        return [low.NftRule(rule.index, (*base, *v2), tag if action.terminal else None)]
    name = "drop" if isinstance(action, ir.Drop) else "accept"
    return [low.NftRule(rule.index, (*base, x.counter(), x.verdict(name)), tag)]


def _v2_statement(rule: ir.Rule) -> list[x.Node] | None:
    """``reject``, NAT, ``mark`` and ``notrack`` statements (None for other actions);
    a deciding one carries the rule's counter, as ``drop`` and ``accept`` do."""
    action = rule.action
    version = None if rule.family is ir.Family.ANY else low.version_of(rule)
    if isinstance(action, ir.Reject):
        return [x.counter(), fw.reject(action.kind, version)]
    if isinstance(action, ir.Nat):
        return [x.counter(), fw.nat(action, version)]
    if isinstance(action, ir.Mark):
        return [fw.mark(action.value)]
    if isinstance(action, ir.Notrack):
        return [fw.notrack()]
    return None


def unique(terms: list[x.Node]) -> list[x.Node]:
    """The terms without a match repeated (a guard the rule's own matches already
    hold); statements are kept as they are, in order."""
    seen, out = set(), []
    for t in terms:
        if isinstance(t.json, dict) and "match" in t.json:
            if t.text in seen:
                continue
            seen.add(t.text)
        out.append(t)
    return out


def verdict(name: str) -> x.Node:
    """``accept``, ``drop`` or ``jump CHAIN`` (a chain this backend declares)."""
    if name in redir.FIX_CHAINS:
        return x.Node(f"jump {name}", {"jump": {"target": name}})
    return x.verdict(name)


def counter_name(index: int) -> str:
    return f"rule_{index}"


def default_rule(policy: ir.Policy) -> low.NftRule:
    if policy.default is ir.Verdict.DROP and policy.default_audit:
        return low.NftRule(None, tuple(stf.audit_terms(0)), "pfc default")
    name = "drop" if policy.default is ir.Verdict.DROP else "accept"
    return low.NftRule(None, (x.counter(), x.verdict(name)), "pfc default")


def fix_chains(found: list[Entry]) -> dict[str, list[low.NftRule]]:
    """The regular chains the rules jump to, with their rules (``nft_redirect``)."""
    used = {t.text.split()[1] for e in found for r in e.rules for t in r.terms
            if t.text.startswith("jump ")}
    return {name: [low.NftRule(None, tuple(terms)) for terms in
                   redir.fix_chain(4 if name == "fix4" else 6)]
            + [low.NftRule(None, (x.verdict("accept"),))]
            for name in redir.FIX_CHAINS if name in used}


def refused(policy: ir.Policy) -> list[Diagnostic]:
    """Rules nft cannot express with their meaning (``nft_redirect``); also the
    backend's ``limits`` hook, so ``pfc check --target nft`` says it."""
    out = []
    for rule in policy.rules:
        reason = redir.unsupported_reason(rule)
        if reason:
            out.append(error(f"target `nft` cannot express this `redirect` (rule at line "
                             f"{rule.line}): {reason}", rule.span,
                             hint="restrict the rule to `tcp` or `udp`, or add "
                             "`!proto { 58, 136 }`", code="unsupported"))
    return out


def element_lines(st: low.NftSet) -> list[str]:
    texts = [e.text for e in st.elements]
    lines = [", ".join(texts[i:i + ELEMENTS_PER_LINE])
             for i in range(0, len(texts), ELEMENTS_PER_LINE)]
    return [line + ("," if i < len(lines) - 1 else "") for i, line in enumerate(lines)]


@functools.cache
def environment() -> jinja2.Environment:
    import jinja2

    root = resources.files("pfc.templates")
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(lambda n: (root / n).read_text()),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)


