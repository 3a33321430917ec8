"""The checker of whole firewalls (v2): hook blocks, chains and ``interface`` lines →
a :class:`~pfc.frontend.firewall.ruleset.Ruleset`, every error collected.

:class:`FirewallChecker` is the v1 checker (``pfc.frontend.check.Checker``) with the v2
words added: a v1 file (no hook block, chain or ``interface`` line) is checked exactly
as before and gets an ``ir.Policy``; a v2 word in it is an error saying it belongs in a
hook block. A v2 file gets one list per block, in path order (``hooks.ORDER``).

Decisions (docs/language.md "Whole firewalls"): every rule of a v2 file is in a hook
block or a chain; ``define``, ``set`` and ``interface`` are top-level lines; rule
indexes run over the whole file in source order (chains included); ``ether-type ip``
(``ip6``, or both) says the rule's family and is left out of the IR, like the protocol
keyword it means.
"""

from __future__ import annotations

from dataclasses import replace

from pfc.frontend import ir
from pfc.frontend.check import Checker, ReadSet
from pfc.frontend.diagnostics import Diagnostic, Note, error, suggest, warning
from pfc.frontend.firewall import actions
from pfc.frontend.firewall.allowed import default_error, word_errors
from pfc.frontend.firewall.blocks import STAND_IN, Block, layout
from pfc.frontend.firewall.chains import ChainDef, Chains
from pfc.frontend.firewall.hooks import BLOCKS, ORDER
from pfc.frontend.firewall.host import Host
from pfc.frontend.firewall.matches import (
    ether_type_match,
    given_twice,
    iface_match,
    mac_literals,
    mac_match,
    names_match,
)
from pfc.frontend.firewall.names import device_value
from pfc.frontend.firewall.ruleset import Ruleset
from pfc.frontend.options.check import check_options
from pfc.frontend.source import SourceFile, Span
from pfc.frontend.syntax import (
    BlockClose,
    BlockOpen,
    Default,
    Define,
    InterfaceDecl,
    MatchNode,
    Module,
    RuleNode,
    SetDecl,
)

V1_FIELDS = frozenset(("src", "dst", "sport", "dport", "proto", "icmp-type", "ttl", "len",
                       "flags", "frag", "payload", "ct"))
LIMIT_ACTIONS = frozenset(("drop", "pass", "accept", "reject"))
_WRITTEN = {"ct-status": "ct status", "ct-mark": "ct mark"}
_WORDS = {Define: "define", SetDecl: "set", InterfaceDecl: "interface"}


def is_firewall(module: Module) -> bool:
    """A v2 file: it has a hook block, a chain or an ``interface`` line."""
    return any(isinstance(s, (BlockOpen, InterfaceDecl)) for s in module.statements)


class FirewallChecker(Checker):
    def __init__(self, module: Module, sources: dict[str, SourceFile],
                 read_set: ReadSet | None = None):
        self.v2 = is_firewall(module)
        if not self.v2:  # a stray `}` (a syntax error already) is no statement of v1
            module = replace(module, statements=tuple(
                s for s in module.statements if not isinstance(s, BlockClose)))
        super().__init__(module, sources, read_set)
        self.block = None  # the hooks.Block whose rules are being checked
        self.where: ChainDef | str | None = None  # the chain, or the hook block's name
        every = {s.name: s.name_span for s in module.statements
                 if isinstance(s, BlockOpen) and s.kind == "chain"}
        self.chains = Chains(every, self.diags)
        self.host = Host(self.diags)
        self.iface_uses: list = []
        self.blocks_seen: dict[tuple[str, str], BlockOpen] = {}

    def run_file(self) -> tuple[ir.Policy | None, Ruleset | None]:
        """A v1 file's policy, or a v2 file's ruleset (the other None)."""
        if not self.v2:
            return self.run(), None
        return None, self._firewall()

    # ---------------------------------------------------------------- v2 files

    def _firewall(self) -> Ruleset:
        lists: list[ir.Policy] = []
        chains: list[ir.Chain] = []
        index = 0
        for item in layout(self.module.statements, self.module.broken):
            if isinstance(item, Block) and item.open.kind == STAND_IN:
                _, _, index = self._body(item, index, None, quiet=True)
            elif isinstance(item, Block) and item.open.kind == "chain":
                chain, index = self._chain(item, index)
                chains += [chain] if chain is not None else []
            elif isinstance(item, Block):
                policy, index = self._hook_block(item, index)
                lists += [policy] if policy is not None else []
            else:
                index = self._top(item, index)
        self.chains.finish()
        self._undeclared_interfaces()
        lists.sort(key=lambda p: ORDER.index(p.hook.name))
        lists = [replace(p, chains=tuple(chains)) for p in lists]
        return Ruleset(tuple(lists), tuple(chains), tuple(self.host.interfaces.values()),
                       self.module.source.name)

    def _top(self, stmt, index: int, quiet: bool = False) -> int:
        if quiet and isinstance(stmt, (RuleNode, Default)):
            if isinstance(stmt, RuleNode):
                self._rule(stmt, index)
            return index + isinstance(stmt, RuleNode)
        if isinstance(stmt, InterfaceDecl):
            self.host.declare(stmt)
        elif isinstance(stmt, Default):
            self.diags.append(error("in a whole firewall `default` goes inside a hook "
                                    "block", stmt.span, code="bad-default",
                                    hint="each block has its own: `input {` then "
                                    "`default drop`"))
        elif isinstance(stmt, RuleNode):
            self.diags.append(error("this rule is outside every block: in a whole firewall "
                                    "rules go inside a hook block or a chain",
                                    stmt.action_span, code="outside-block",
                                    hint="put it inside e.g. `input { ... }`"))
            self._rule(stmt, index)
            return index + 1
        elif isinstance(stmt, Define):
            self._define(stmt)
        elif isinstance(stmt, SetDecl):
            self._set(stmt)
        return index

    def _body(self, block: Block, index: int, default_of: str | None, quiet: bool = False):
        """The rules of a block and its ``default`` statement (``quiet``: of a line that
        did not parse, no block)."""
        rules, default = [], None
        for stmt in block.body:
            if quiet:
                index = self._top(stmt, index, quiet=True)
            elif isinstance(stmt, RuleNode):
                rule = self._rule(stmt, index)
                index += 1
                rules += [rule] if rule is not None else []
            elif isinstance(stmt, Default):
                default = self._block_default(stmt, default, default_of, block)
            else:
                word = _WORDS.get(type(stmt), "this")
                self.diags.append(error(f"`{word}` goes at the top of the file, not inside "
                                        "a block", stmt.span, code="inside-block"))
                self._top(stmt, index)
        return rules, default, index

    def _block_default(self, stmt: Default, first: Default | None, block_name: str | None,
                       block: Block) -> Default | None:
        bad = default_error(block_name, stmt.span)
        if bad is not None:
            self.diags.append(bad)
            return first
        if first is not None:
            self.diags.append(error("`default` is given twice", stmt.span, code="redefined",
                                    notes=(Note("first given here", first.span),)))
            return first
        if stmt.verdict not in ("pass", "drop", "accept"):
            hint = ("end the block with a `reject` rule of no matches: it rejects what no "
                    "rule above decided") if stmt.verdict == "reject" else None
            self.diags.append(error(f"`default {stmt.verdict}`: the default is `pass` or "
                                    "`drop`", stmt.verdict_span, code="bad-default",
                                    hint=hint))
            return first
        return stmt

    def _hook_block(self, block: Block, index: int) -> tuple[ir.Policy | None, int]:
        opener = block.open
        spec = BLOCKS[opener.name]
        devices = self._devices(opener, spec)
        self.block, self.where = spec, spec.name
        rules, default, index = self._body(block, index, spec.name)
        self.block = self.where = None
        if devices is None:
            return None, index
        verdict = ir.Verdict.DROP if default and default.verdict == "drop" else ir.Verdict.PASS
        return ir.Policy(tuple(rules), verdict, default.span if default else opener.span,
                         self.module.source.name,
                         hook=ir.Hook(spec.name, devices, opener.span)), index

    def _devices(self, opener: BlockOpen, spec) -> tuple[str, ...] | None:
        """The block's devices, after the checks that it is the only block of its kind
        (per device for ``ingress``/``egress``). None after an error."""
        if opener.devices and not spec.per_device:
            self.diags.append(error(f"only `ingress` and `egress` blocks name devices; "
                                    f"`{spec.name}` sees every device",
                                    opener.devices[0].span, code="bad-device",
                                    hint="match a device in the rules: `iif eth0`"))
            return None
        names = [device_value(v, self.diags) for v in opener.devices]
        if None in names:
            return None
        keys = [(spec.name, n) for n in names] or [(spec.name, "")]
        for key, value in zip(keys, opener.devices or (None,), strict=True):
            first = self.blocks_seen.get(key)
            if first is not None:
                what = (f"device `{key[1]}` already has a block `{spec.name}`" if key[1]
                        else f"block `{spec.name}` is written twice")
                self.diags.append(error(what, value.span if value else opener.name_span,
                                        code="block-twice",
                                        notes=(Note("first written here", first.span),),
                                        hint="each block is written once; put its rules "
                                        "together"))
                return None
            self.blocks_seen[key] = opener
        self.iface_uses += [(n, v.span) for n, v in zip(names, opener.devices, strict=True)]
        return tuple(names)

    def _chain(self, block: Block, index: int) -> tuple[ir.Chain | None, int]:
        chain = self.chains.define(block.open)
        self.where = chain or ChainDef(block.open.name, block.open)
        rules, _, index = self._body(block, index, None)
        self.where = None
        if chain is None:
            return None, index
        return ir.Chain(chain.name, tuple(rules), block.open.span), index

    # ------------------------------------------------------------------- rules

    def _rule(self, node: RuleNode, index: int) -> ir.Rule | None:
        if not self.v2 and not node.reject_with:  # v1: the v1 checker, v2 words refused
            return super()._rule(node, index)
        before = len(self.diags)
        if self.block is not None:
            self.diags.extend(word_errors(node, self.block))
        if isinstance(self.where, ChainDef):
            self.where.rules.append(node)
        stray = actions.stray_with(node)
        if stray is not None:
            self.diags.append(stray)
        rule = super()._rule(node, index)
        if rule is None or any(d.severity == "error" for d in self.diags[before:]):
            return None
        return self._ether_family(rule)

    def _action(self, node: RuleNode) -> ir.Action | None:
        kind, target = node.action, node.target
        port_only = target is not None and target.address is None
        if not self.v2 and (kind in actions.V2_ACTIONS or port_only):
            if port_only:
                return self._v1_refuse("redirect ... to :PORT", target.span, "a nat block",
                                       "nat prerouting")
            return self._v1_refuse(kind, node.action_span)
        in_nat = self.block is not None and self.block.kind == "nat"
        if kind == "redirect" and port_only and self.block is not None and not in_nat:
            self.diags.append(error("`to :PORT` (the host itself) is for `redirect` in a nat "
                                    "block", target.span, code="bad-target",
                                    hint="here `redirect` rewrites the packet: `to "
                                    "ADDRESS[:PORT]`; or write the rule in `nat prerouting`"))
            return None
        if kind == "redirect" and (in_nat or port_only):  # a chain's: checked where reached
            return actions.nat(node, True, self.resolve, self.diags)
        if kind in ("reject", "notrack"):
            if not actions.no_target(node, self.diags):
                return None
            return actions.reject(node, self.diags) if kind == "reject" else \
                ir.Notrack(node.action_span)
        if kind == "mark":
            return actions.mark(node, self.resolve, self.diags)
        if kind in ("dnat", "snat", "masquerade"):
            return actions.nat(node, in_nat, self.resolve, self.diags)
        if kind in ("jump", "goto"):
            jump = actions.jump(node, self.diags)
            if self.where is not None and not self.chains.use(node, self.where):
                return None
            return jump
        return super()._action(node)

    def _v1_refuse(self, word: str, span: Span, where: str = "a hook block",
                   example: str = "input") -> None:
        self.diags.append(error(f"`{word}` is written in {where} of a whole firewall; "
                                "this file is one rule list (v1)", span, code="v2-only",
                                hint=f"put the rule inside a block such as `{example} "
                                "{ ... }` (docs/language.md \"Whole firewalls\")"))

    def _options(self, node: RuleNode) -> tuple[dict, ir.Limit | None]:
        if not self.v2 or node.action in ("drop", "log", "count"):
            return super()._options(node)
        limits = tuple(o for o in node.options if o.kind == "limit")
        rest = replace(node, options=tuple(o for o in node.options if o.kind != "limit"))
        if node.action in ("jump", "goto"):
            return {}, None  # said by actions.jump
        extra, _ = check_options(rest, self.diags)
        if limits and node.action not in LIMIT_ACTIONS:
            self.diags.append(error(f"`limit` belongs to `drop`, `pass` and `reject` "
                                    f"rules, not `{node.action}`", limits[0].keyword_span,
                                    code="stray-option"))
            return extra, None
        _, limit = check_options(replace(node, action="drop", options=limits), self.diags)
        return extra, limit

    def _target_family(self, action, node: RuleNode, fam) -> None:
        if isinstance(action, ir.Nat) and action.address is not None:
            fam.constrain_to(action.address.version, node.target.address.span,
                             f"the `{action.kind}` target")
        elif isinstance(action, ir.Reject) and node.reject_with:
            actions.reject_family(action, node, fam.versions, fam.any, self.diags)
        else:
            super()._target_family(action, node, fam)

    def _match(self, node: MatchNode, rule: RuleNode, proto: int | None) -> ir.Match | None:
        field = node.field
        if field in V1_FIELDS:
            return super()._match(node, rule, proto)
        if not self.v2:
            return self._v1_refuse(_WRITTEN.get(field, field), node.field_span)
        twice = given_twice(node, [m for m in rule.matches if m.span.start < node.span.start])
        if twice is not None:
            self.diags.append(twice)
            return None
        if field in ("ct-status", "dst-type", "src-type"):
            return names_match(node, self.diags)
        if field not in ("iif", "oif", "ether-src", "ether-dst", "ether-type"):
            return super()._match(node, rule, proto)  # icmp-code vlan-id mark ct-mark
        if field == "ether-type" and rule.protocol not in (None, "all"):
            self.diags.append(error(f"`ether-type` on a `{rule.protocol}` rule: the "
                                    "protocol already says the EtherType", node.field_span,
                                    code="needs-protocol"))
            return None
        if field in ("ether-src", "ether-dst") and not mac_literals(node.value, self.diags):
            return None
        atoms = self.resolve(node.value)
        if atoms is None:
            return None
        set_name = node.value.text if node.value.kind == "var" and \
            self._is_list(node.value) else None
        if field in ("iif", "oif"):
            uses: list = []
            match = iface_match(node, atoms, set_name, self.diags, uses)
            self.iface_uses += [(name, atom.span) for name, atom in uses]
            return match
        if field == "ether-type":
            return ether_type_match(node, atoms, set_name, self.diags, self.declared)
        return mac_match(node, atoms, set_name, self.diags, self.declared)

    def _ether_family(self, rule: ir.Rule) -> ir.Rule | None:
        """``ether-type`` on an IP rule is an error; ``ether-type ip`` (``ip6``, both) is
        the rule's family and leaves the IR."""
        match = next((m for m in rule.matches if m.field == "ether-type"), None)
        if match is None:
            return rule
        if rule.family is not ir.Family.ANY:
            self.diags.append(error("`ether-type` on a rule whose other matches need IP",
                                    match.span, code="family-conflict",
                                    hint="leave `ether-type` out: the addresses (or `ip`, "
                                    "`ip6`) say the EtherType"))
            return None
        versions = {ir.ETHER_TYPES["ip"]: 4, ir.ETHER_TYPES["ip6"]: 6}
        if match.negated or not match.ranges or \
                any(lo != hi or lo not in versions for lo, hi in match.ranges):
            return rule
        family = ir.Family.of_versions({versions[lo] for lo, _ in match.ranges})
        return replace(rule, family=family,
                       matches=tuple(m for m in rule.matches if m is not match))

    def _undeclared_interfaces(self) -> None:
        """A name in ``iif``/``oif`` or a block header that no ``interface`` line
        declares, in a file that declares some: a warning (a typo, often)."""
        declared = self.host.interfaces
        if not declared:
            return
        warned = set()
        for name, span in self.iface_uses:
            if name in declared or name == "lo" or name.endswith("*") or name in warned:
                continue
            warned.add(name)
            self.diags.append(warning(
                f"`{name}` is not an interface of this file", span, code="unknown-interface",
                hint=suggest(name, declared) or "declared: " + ", ".join(declared)))


def check_file(module: Module, sources: dict[str, SourceFile], read_set: ReadSet | None = None
               ) -> tuple[ir.Policy | None, Ruleset | None, list[Diagnostic]]:
    """Check a parsed file: (policy, None) for a v1 file, (None, ruleset) for a v2 one,
    and the diagnostics."""
    checker = FirewallChecker(module, sources, read_set)
    policy, ruleset = checker.run_file()
    return policy, ruleset, checker.diags
