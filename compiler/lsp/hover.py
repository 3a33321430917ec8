"""Hover text (Markdown) for the token under the cursor.

- a match keyword (``dport``, ``flags`` ...): what it matches (``FIELDS[...].doc``), its
  values, what it needs, and which targets can compile it (from the registry's
  ``supports`` and :data:`pfc.backends.base.FEATURES`);
- a protocol: its number and family, and the targets that can compile it;
- a rule's action keyword: the rule in plain English and its compiled form on each
  configured target (every registered target when none is configured);
- ``$name``: its declaration; flag, ICMP type and protocol names: their numbers.
"""

from __future__ import annotations

from pfc import backends
from pfc.backends.base import FEATURES, FIELD_FEATURES
from pfc.frontend import ir
from pfc.frontend.firewall.check import V1_FIELDS
from pfc.frontend.firewall.hooks import blocks_allowing
from pfc.frontend.fmt import statement
from pfc.frontend.syntax import RuleNode, SetDecl
from pfc.lsp.analysis import Analysis, declarations
from pfc.lsp.firewall import chain_definitions, enclosing
from pfc.lsp.forms import forms, render
from pfc.lsp.reading import reading
from pfc.lsp.text import Tok, lex, token_at
from pfc.lsp.words import V2_ACTIONS, V2_KEYWORDS, block_doc, value_names

ACTIONS = {
    "drop": ("discard the packet", set()),
    "pass": ("let the packet through", set()),
    "accept": ("alias of `pass`: let the packet through", set()),
    "count": ("add 1 packet and its bytes to this rule's counter, then go on with the "
              "next rule", {"count"}),
    "redirect": ("rewrite the destination address (and port), fix the IP and L4 "
                 "checksums, then pass", {"redirect"}),
    "log": ("send a log event (rule line, verdict so far, interface, the first `snap` "
            "bytes), then go on with the next rule; `pfc log` shows them", {"log"}),
    "queue": ("hand the packet to a user-space decider (`pfc decide`; NFQUEUE): `queue "
              "tcp|udp ... [num N] [first K] [bypass]`: the decider sees a flow's first K "
              "packets, its verdict is then kept in the kernel; without a decider "
              "listening the packet is dropped, or passed with `bypass` (docs/queue.md)",
              {"queue"}),
}
OPTIONS = {
    "prefix": ('`log ... prefix "TEXT"`: a tag in every event of the rule (1 to 32 '
               "letters, digits, space and `_ . , : = / + -`)", {"log"}),
    "rate": ("`rate N/second` (or `/minute`): at most N events (or packets) per unit, "
             "beyond a burst; a token bucket per rule and IP version, as nft's `limit`",
             set()),
    "snap": ("`log ... snap N`: how many bytes of the packet each event carries "
             "(0 to 256, default 128)", {"log"}),
    "limit": ("`drop ... limit rate N/UNIT [burst B] [per src|dst]`: the rule matches "
              "only the packets over the rate; the rest go on to the next rule", {"limit"}),
    "burst": ("`burst B`: the bucket's size: how many packets may come at once "
              "(default 5, as nft and iptables)", {"limit"}),
    "per": ("`per src` / `per dst`: one bucket per address (nft meters, iptables "
            "hashlimit, eBPF LRU maps)", {"limit"}),
    "audit": ("`drop ... audit`: a would-be drop: the packet passes, counted and logged "
              "(`pfc load --audit` does it to every drop)", {"audit"}),
    "state": ("`ct state new,established,related,invalid`: the connection tracker's "
              "state of the packet", {"ct"}),
}
KEYWORDS = {
    "define": "`define NAME = VALUE`: a named value, prefix, range or list, used as `$NAME`",
    "set": "`set NAME = file \"PATH\"`: a large list read from a file (one address, prefix "
           "or port per line), used as `$NAME`; relative paths resolve against the policy",
    "file": "`set NAME = file \"PATH\"`: the file a set is read from",
    "default": "`default pass` / `default drop`: the verdict for packets no terminal rule "
               "matched (`pass` when omitted)",
    "to": "`redirect ... to ADDR[:PORT]`: the new destination",
}
PROTOCOL_DOCS = {
    "all": ("any frame, IP or not (the default)", {"non-ip"}),
    "ip": ("IPv4 packets (EtherType 0x0800)", set()),
    "ip6": ("IPv6 packets (EtherType 0x86DD)", {"ipv6"}),
    "tcp": ("TCP: IPv4 protocol 6 or IPv6 Next Header 6", set()),
    "udp": ("UDP: IPv4 protocol 17 or IPv6 Next Header 17", set()),
    "icmp": ("ICMP: IPv4 protocol 1", set()),
    "icmp6": ("ICMPv6: IPv6 Next Header 58", {"ipv6"}),
}
_ACTION_TOKENS = frozenset(("DROP", "PASS", "ACCEPT", "COUNT", "REDIRECT", "LOG", "REJECT",
                            "NOTRACK", "DNAT", "SNAT", "MASQUERADE", "JUMP", "GOTO"))
_HOOK_TOKENS = frozenset(("INGRESS", "EGRESS", "PREROUTING", "INPUT", "FORWARD", "OUTPUT",
                          "POSTROUTING"))
_OPTION_TOKENS = frozenset(("PREFIX", "RATE", "SNAP", "LIMIT", "BURST", "PER", "AUDIT",
                            "STATE"))
_PROTOCOL_TOKENS = frozenset(("ALL", "IP", "IP6", "TCP", "UDP", "ICMP", "ICMP6"))
_FIELD_TOKENS = frozenset(("FIELD", "FLAGS", "FRAG", "PAYLOAD"))


def hover(analysis: Analysis, offset: int) -> str | None:
    """Markdown for the token at ``offset``, or None."""
    line = analysis.index.line_of(offset)
    start = analysis.index.starts[line]
    tokens = lex(analysis.index.line_text(line), start)
    tok = token_at(tokens, offset)
    if tok is None:
        return None
    v2 = _v2_hover(analysis, tokens, tok)
    if v2 is not None:
        return v2
    if tok.type in _ACTION_TOKENS or (tok.text == "mark" and tok is tokens[0]):
        node = next((n for n in analysis.module.statements if isinstance(n, RuleNode)
                     and n.action_span.start == tok.start), None)
        return rule_hover(analysis, node) if node else action_doc(tok.text)
    if tok.type in _FIELD_TOKENS or tok.type == "V2FIELD":
        return field_doc(tok.text)
    if tok.type == "CT":
        return field_doc("ct")
    if tok.type in _OPTION_TOKENS:
        return option_doc(tok.text)
    if tok.type in _PROTOCOL_TOKENS:
        return protocol_doc(tok.text)
    if tok.type == "VARREF" or (tok.type == "NAME" and _declares(tokens, tok)):
        return name_doc(analysis, tok.text.lstrip("$"))
    if tok.type == "NAME":
        return value_doc(tok.text)
    return KEYWORDS.get(tok.text)


def _v2_hover(analysis: Analysis, tokens: list[Tok], tok: Tok) -> str | None:
    """Hook block words, ``chain``/``interface``/``with``/``status``, ``ct mark``, chain
    names after ``jump``/``goto``/``chain``, and the v2 value names."""
    i = tokens.index(tok)
    before = tokens[i - 1] if i > 0 else None
    if tok.type in _HOOK_TOKENS and i == (1 if before and before.type in ("RAW", "NAT") else 0):
        return block_doc(f"{before.text} {tok.text}" if i else tok.text)
    if tok.text == "mark" and before is not None and before.type == "CT":
        return field_doc("ct-mark")
    if tok.type == "STATUS":
        return field_doc("ct-status")
    if tok.type in ("RAW", "NAT", "CHAIN", "INTERFACE", "ADDRESS", "GATEWAY", "WITH"):
        return f"**{tok.text}** — {V2_KEYWORDS[tok.text]}"
    if tok.type == "NAME" and before is not None and before.type in ("JUMP", "GOTO", "CHAIN"):
        return chain_doc(analysis, tok.text)
    if value_names(tok.text) and before is not None \
            and before.type in ("WITH", "STATUS", "V2FIELD", "COMMA", "LBRACE"):
        return "\n\n".join(value_names(tok.text))
    return None


def chain_doc(analysis: Analysis, name: str) -> str:
    spans = chain_definitions(analysis.module).get(name)
    if not spans:
        return f"chain `{name}` is not defined"
    line = analysis.source.position(spans[0].start)[0]
    return f"**chain {name}** (line {line}) — {V2_KEYWORDS['chain']}"


def _declares(tokens: list[Tok], tok: Tok) -> bool:
    i = tokens.index(tok)
    return i > 0 and tokens[i - 1].type in ("DEFINE", "SET")


# ---------------------------------------------------------------------------- docs

def support_line(needs: set[str]) -> str:
    """Which registered targets can compile something needing ``needs``."""
    registry = {n: b for n, b in backends.registry().items() if n != "ir"}
    able = [n for n, b in registry.items() if needs <= b.supports]
    unable = [n for n in registry if n not in able]
    if not unable:
        return "Targets: every target (" + ", ".join(able) + ")"
    what = ", ".join(FEATURES[f] for f in sorted(needs))
    return (f"Targets: {', '.join(able) or 'none'}; not {', '.join(unable)} "
            f"(they cannot express {what})")


def field_doc(name: str) -> str | None:
    info = ir.FIELDS.get(name)
    if info is None:
        return None
    if name not in V1_FIELDS:
        return _v2_field_doc(name, info)
    if info.layer is ir.Layer.STATE:
        needs, layer = "an IP rule", ("the connection tracker's state, from the frames "
                                      "before; states: " + ", ".join(ir.CT_STATES))
    elif info.protocols is None:
        needs = "IPv4 only" if info.families is ir.Family.IP4 else "an IP rule (IPv4 or IPv6)"
        layer = "read where it lies once the EtherType says IPv4/IPv6"
    else:
        protos = [p for p, (n, _) in ir.PROTOCOLS.items() if n in info.protocols]
        needs = " or ".join(f"`{p}`" for p in protos)
        layer = ("needs an IP header the kernel accepts, a first fragment and no IPv6 "
                 "extension headers")
    feats = {"payload": {"payload"}, "ct": {"ct"}}.get(name, set())
    return "\n\n".join([f"**{name}** — {info.doc}", f"Values: {info.values}. "
                        f"Needs: {needs}; {layer}. `!{name}` negates it (the field must "
                        "still be there).", support_line(feats), _ipv6_line(feats)]).strip()


def _v2_field_doc(name: str, info: ir.FieldInfo) -> str:
    written = {"ct-status": "ct status", "ct-mark": "ct mark"}.get(name, name)
    needs = "any frame (IP or not)" if info.families is ir.Family.ANY else "an IP rule"
    if info.protocols is not None:
        needs = " or ".join(f"`{p}`" for p, (n, _) in ir.PROTOCOLS.items()
                            if n in info.protocols)
    return "\n\n".join([
        f"**{written}** — {info.doc}", f"Values: {info.values}. Needs: {needs}. "
        f"`!{written}` negates it.", "In blocks: " + ", ".join(blocks_allowing(field=name)),
        support_line({FIELD_FEATURES[name]})])


def _ipv6_line(feats: set[str]) -> str:
    registry = {n: b for n, b in backends.registry().items() if n != "ir"}
    if all("ipv6" in b.supports for b in registry.values()):
        return ""
    return "On IPv6 rules: " + support_line(feats | {"ipv6"})


def protocol_doc(name: str) -> str:
    doc, needs = PROTOCOL_DOCS[name]
    extra = ("\n\nWith an IP match (`src`, `ttl` ...) an `all` rule matches IP packets "
             "only, and needs no non-IP support." if name == "all" else "")
    return f"**{name}** — {doc}{extra}\n\n{support_line(needs)}"


def option_doc(name: str) -> str:
    doc, needs = OPTIONS[name]
    return f"**{name}** — {doc}\n\n{support_line(needs)}"


def action_doc(name: str) -> str:
    doc, needs = ACTIONS[name] if name in ACTIONS else V2_ACTIONS[name]
    terminal = "not terminal" if name in ("count", "log", "notrack", "mark") else \
        "decided by the chain" if name in ("jump", "goto") else "terminal"
    return f"**{name}** ({terminal}) — {doc}\n\n{support_line(needs)}"


def value_doc(name: str) -> str | None:
    lines = []
    if name in ir.TCP_FLAGS:
        lines.append(f"TCP flag **{name.upper()}** (0x{ir.TCP_FLAGS[name]:02x}); "
                     f"`!{name}` means clear")
    if name in ir.ICMP_TYPES:
        lines.append(f"ICMP type **{name}** = {ir.ICMP_TYPES[name]}")
    if name in ir.ICMP6_TYPES:
        lines.append(f"ICMPv6 type **{name}** = {ir.ICMP6_TYPES[name]}")
    if name in ir.PROTO_NUMBERS:
        lines.append(f"IP protocol **{name}** = {ir.PROTO_NUMBERS[name]}")
    if name in ir.CT_STATES:
        lines.append(f"connection state **{name}** (`ct state {name}`)")
    lines += value_names(name)
    return "\n\n".join(lines) or None


def name_doc(analysis: Analysis, name: str) -> str | None:
    decl = declarations(analysis.module).get(name)
    if decl is None:
        return f"`${name}` is not defined"
    line = analysis.source.position(decl.span.start)[0]
    what = "set, read from a file" if isinstance(decl, SetDecl) else "define"
    return f"**${name}** ({what}, line {line})\n```pfc\n{statement(decl)}\n```"


# ---------------------------------------------------------------------------- rules

def rule_hover(analysis: Analysis, node: RuleNode) -> str:
    line = analysis.source.position(node.span.start)[0]
    rule = analysis.rules_by_start.get(node.span.start)
    head = f"**rule at line {line}**"
    if rule is None:
        first = next((d for d in analysis.diagnostics if d.severity == "error"
                      and node.span.start <= d.span.start <= node.span.end), None)
        why = f": {first.message}" if first else ""
        return f"{head} — has errors{why}\n\n{action_doc(node.action)}"
    if analysis.firewall:
        return f"{head} — {reading(rule)}\n\n---\n\n{_block_line(analysis, node)}"
    targets = analysis.config.targets or tuple(n for n in backends.registry() if n != "ir")
    where = {"comment": "targets from `# pfc: targets`",
             "settings": "targets from the `pfc.targets` setting"}.get(
        analysis.config.origin, "all targets (none configured)")
    compiled = render(forms(rule, analysis.policy, targets))
    return f"{head} — {reading(rule)}\n\n---\n\nCompiled ({where}):\n\n{compiled}"


def _block_line(analysis: Analysis, node: RuleNode) -> str:
    """Where a rule of a whole firewall runs, and the targets that carry its block."""
    block = enclosing(analysis.source.text, node.span.start)
    if block is None or block == "chain":
        return "In a chain: it runs in the blocks that `jump` to it." if block else \
            "Outside every block."
    able = [n for n, b in backends.registry().items() if block in b.carries and n != "ir"]
    return (f"In block `{block}`; targets that carry it: {', '.join(able) or 'none yet'} "
            "(`pfc compile FILE --target T1,T2`).")
