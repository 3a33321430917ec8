"""Name resolution and typing: AST → IR, every error collected.

Enforces language.md: names defined once and before use, every "requires" of the match
table, value ranges, the redirect target's form, and the rule's family (protocol,
addresses and redirect target must agree on IPv4/IPv6).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from pfc.frontend import ir
from pfc.frontend.diagnostics import MAX_ERRORS, Diagnostic, Note, error, suggest
from pfc.frontend.matches import address_match, flags_match, int_match, payload_match
from pfc.frontend.merge import merge_fields
from pfc.frontend.options.check import check_options, ct_match
from pfc.frontend.parse import KEYWORDS
from pfc.frontend.source import SourceFile, Span, read_set_source
from pfc.frontend.syntax import Default, Define, MatchNode, Module, RuleNode, SetDecl, Target, Value
from pfc.frontend.text import shorten, visible
from pfc.frontend.values import Atom, at_declaration, decode_string, literal_atom, read_set_file

ReadSet = Callable[[Path], SourceFile]


@dataclass
class Binding:
    name: str
    span: Span  # the name in its declaration
    atoms: list[Atom] | None  # None: the declaration had errors (uses stay quiet)
    kind: str  # "define" | "set"
    is_list: bool = False


class Checker:
    """One run over a module. ``sources`` receives every set file read."""

    def __init__(self, module: Module, sources: dict[str, SourceFile],
                 read_set: ReadSet | None = None):
        self.module = module
        self.sources = sources
        self.read_set = read_set or read_set_source
        self.diags: list[Diagnostic] = []
        self.names: dict[str, Binding] = {}
        self.default: Default | None = None
        self.declared: dict[str, Span] = {}  # every declaration's first name span
        for stmt in module.statements:
            if isinstance(stmt, (Define, SetDecl)):
                self.declared.setdefault(stmt.name, stmt.name_span)
        self.hints_left = MAX_ERRORS  # "did you mean" over the names: only while shown

    def run(self) -> ir.Policy:
        rules = []
        index = 0
        for stmt in self.module.statements:
            if isinstance(stmt, Define):
                self._define(stmt)
            elif isinstance(stmt, SetDecl):
                self._set(stmt)
            elif isinstance(stmt, Default):
                self._default(stmt)
            else:
                rule = self._rule(stmt, index)
                index += 1
                if rule is not None:
                    rules.append(rule)
        verdict = ir.Verdict.PASS
        if self.default is not None:
            verdict = ir.Verdict.DROP if self.default.verdict == "drop" else ir.Verdict.PASS
        return ir.Policy(tuple(rules), verdict,
                         self.default.span if self.default else Span(self.module.source.name, 0, 0),
                         self.module.source.name)

    # ------------------------------------------------------------------ declarations

    def _declare(self, name: str, span: Span) -> bool:
        if name in KEYWORDS:
            self.diags.append(error(f"`{name}` is a keyword and cannot be a name", span,
                                    code="keyword-name"))
            return False
        first = self.names.get(name)
        if first is not None:
            self.diags.append(error(f"`{shorten(name)}` is already defined", span,
                                    code="redefined",
                                    notes=(Note("first defined here", first.span),)))
            return False
        return True

    def _define(self, stmt: Define) -> None:
        if not self._declare(stmt.name, stmt.name_span):
            return
        atoms = self.resolve(stmt.value)
        atoms = None if atoms is None else [_via(a, stmt.name) for a in atoms]
        self.names[stmt.name] = Binding(stmt.name, stmt.name_span, atoms, "define",
                                        self._is_list(stmt.value))

    def _is_list(self, value: Value) -> bool:
        if value.kind == "var":
            binding = self.names.get(value.text)
            return binding is not None and binding.is_list
        return value.kind == "list"

    def _set(self, stmt: SetDecl) -> None:
        if not self._declare(stmt.name, stmt.name_span):
            return
        atoms = self._read_set(stmt)
        self.names[stmt.name] = Binding(stmt.name, stmt.name_span, atoms, "set", True)

    def _set_path(self, stmt: SetDecl) -> tuple[Path, str] | None:
        """The set file's path: the string with its escapes decoded (``"q\\"b.txt"``
        names ``q"b.txt``), relative to the policy's folder, and as written (decoded);
        None after an error."""
        data = decode_string(stmt.path, self.diags)
        if data is None:
            return None
        if b"\0" in data:
            self.diags.append(error("a file name cannot hold a NUL byte", stmt.path.span,
                                    code="set-file"))
            return None
        written = os.fsdecode(data)
        path = Path(written)
        if not path.is_absolute():
            path = Path(self.module.source.name).parent / path
        return path, written

    def _read_set(self, stmt: SetDecl) -> list[Atom] | None:
        found = self._set_path(stmt)
        if found is None:
            return None
        path, written = found
        try:
            src = self.read_set(path)
        except (OSError, UnicodeDecodeError) as exc:
            self.diags.append(error(f"cannot read set file `{visible(str(path))}`: "
                                    f"{getattr(exc, 'strerror', None) or exc}",
                                    stmt.path.span, code="set-file"))
            return None
        src = replace(src, echo=False)  # any file may be named: never show its lines
        self.sources[src.name] = src
        if src.bad_byte is not None:
            self.diags += at_declaration([encoding_error(src)], src, stmt.path.span,
                                         written)
            return None
        atoms, diags = read_set_file(src, stmt.name)
        self.diags += at_declaration(diags, src, stmt.path.span, written)
        if not atoms and not diags:
            self.diags.append(error(f"set file `{path}` has no entries", stmt.path.span,
                                    hint="an empty set would match nothing; comment the "
                                    "rules out instead", code="empty-set"))
        return None if diags or not atoms else atoms

    def _default(self, stmt: Default) -> None:
        if self.default is not None:
            self.diags.append(error("`default` is given twice", stmt.span, code="redefined",
                                    notes=(Note("first given here", self.default.span),)))
            return
        if stmt.verdict not in ("pass", "drop", "accept"):
            self.diags.append(error(f"`default {stmt.verdict}`: the default is `pass` or "
                                    "`drop`", stmt.verdict_span, code="bad-default"))
            return
        self.default = stmt

    # ------------------------------------------------------------------------ values

    def resolve(self, value: Value) -> list[Atom] | None:
        """A value → flat list of atoms ($names and lists expanded), or None."""
        if value.kind == "list":
            out: list[Atom] = []
            ok = True
            for item in value.items:
                atoms = self.resolve(item)
                ok = ok and atoms is not None
                out.extend(atoms or [])
            return out if ok else None
        if value.kind == "var":
            return self._lookup(value)
        atom = literal_atom(value, self.diags)
        return None if atom is None else [atom]

    def _lookup(self, value: Value) -> list[Atom] | None:
        binding = self.names.get(value.text)
        if binding is None:
            later = self.declared.get(value.text)
            if later is not None:
                self.diags.append(error(f"`${shorten(value.text)}` is used before it is "
                                        "defined", value.span, code="use-before-define",
                                        notes=(Note("defined later, here", later),),
                                        hint="move the definition above its first use"))
                return None
            self.hints_left -= 1
            hint = _did_you_mean(value.text, self.names) if self.hints_left > 0 else None
            self.diags.append(error(f"`${shorten(value.text)}` is not defined", value.span,
                                    hint=hint, code="unknown-name"))
            return None
        if binding.atoms is None:
            return None
        return [Atom(a.kind, a.value, value.span, a.text, a.origin, a.defined_at or a.span)
                for a in binding.atoms]

    # ------------------------------------------------------------------------- rules

    def _rule(self, node: RuleNode, index: int) -> ir.Rule | None:
        before = len(self.diags)
        action = self._action(node)
        proto_name = node.protocol or "all"
        proto, family = ir.PROTOCOLS[proto_name]
        fam = _Family(family, node.protocol_span or node.action_span, proto_name, self.diags)
        matches = []
        for m in node.matches:
            match = self._match(m, node, proto)
            if match is not None:
                matches.append(match)
                fam.constrain_by(match)
        extra, limit = self._options(node)
        action = _with_options(action, extra)
        if limit is not None and limit.per is not None:
            fam.any = False  # `per src` reads an address: IP frames only
        self._target_family(action, node, fam)
        if len(self.diags) > before and any(d.severity == "error" for d in self.diags[before:]):
            return None
        merged, diags = merge_fields(matches, fam.result())
        self.diags.extend(diags)
        if any(d.severity == "error" for d in diags):
            return None
        line = self.module.source.position(node.span.start)[0]
        return ir.Rule(index, action, fam.result(), proto, merged, node.span,
                       proto_name, line, limit)

    def _options(self, node: RuleNode) -> tuple[dict, ir.Limit | None]:
        return check_options(node, self.diags)

    def _target_family(self, action: ir.Action | None, node: RuleNode, fam: _Family) -> None:
        """A target's address fixes the rule's family (``redirect ... to ADDR``)."""
        if isinstance(action, ir.Redirect):
            fam.constrain_to(action.address.version, node.target.address.span,
                             "the redirect target")

    def _action(self, node: RuleNode) -> ir.Action | None:
        span = node.action_span
        if node.target is not None and node.action != "redirect":
            self.diags.append(error(f"`to` belongs to `redirect`, not `{node.action}`",
                                    node.target.span, code="stray-to",
                                    hint="to match the destination, write `dst ADDRESS` "
                                    "(and `dport PORT`)"))
        if node.action == "drop":
            return ir.Drop(span)
        if node.action in ("pass", "accept"):
            return ir.Pass(span)
        if node.action == "count":
            return ir.Count(span)
        if node.action == "log":
            return ir.Log(span=span)
        if node.action == "queue":
            return ir.Queue(span=span)
        if node.target is None:
            self.diags.append(error("`redirect` needs a target: `to ADDRESS[:PORT]`",
                                    node.span, hint="e.g. `redirect udp dport 8080 to "
                                    "10.0.1.2:8083`", code="no-target"))
            return None
        return self._redirect(node.target, node.protocol, span)

    def _redirect(self, target: Target, protocol: str | None, span: Span) -> ir.Redirect | None:
        atoms = self.resolve(target.address)
        if atoms is None:
            return None
        if len(atoms) != 1 or atoms[0].kind != "addr" or atoms[0].value.num_addresses != 1:
            self.diags.append(error("a redirect target is one address, not a prefix or list",
                                    target.address.span, code="bad-target"))
            return None
        address = atoms[0].value.network_address
        port = self._target_port(target, protocol)
        if port is False:
            return None
        return ir.Redirect(address, port, span.cover(target.span))

    def _target_port(self, target: Target, protocol: str | None) -> int | None | bool:
        if target.port is None:
            return None
        if protocol not in ("tcp", "udp"):
            self.diags.append(error("a redirect port needs `tcp` or `udp` in the rule",
                                    target.port.span, hint="write `redirect udp ... to "
                                    "ADDR:PORT`", code="needs-protocol"))
            return False
        atoms = self.resolve(target.port)
        if atoms is None:
            return False
        if len(atoms) != 1 or atoms[0].kind != "int" or atoms[0].value > 65535:
            self.diags.append(error("a redirect port is one number 0-65535",
                                    target.port.span, code="bad-target"))
            return False
        return atoms[0].value

    def _match(self, node: MatchNode, rule: RuleNode, proto: int | None) -> ir.Match | None:
        info = ir.FIELDS[node.field]
        if not self._requires(node, info, rule, proto):
            return None
        if node.field == "flags":
            return flags_match(node, self.diags)
        if node.field == "frag":
            return ir.FragMatch(node.negated, node.span)
        if node.field == "ct":
            if any(m.field == "ct" for m in rule.matches if m.span.start < node.span.start):
                self.diags.append(error("`ct state` is given twice", node.field_span,
                                        hint="write one list: `ct state new,established`",
                                        code="ct-twice"))
                return None
            return ct_match(node, self.diags)
        atoms = self.resolve(node.value)
        if atoms is None:
            return None
        set_name = node.value.text if self._is_list(node.value) and \
            node.value.kind == "var" else None
        if node.field in ("src", "dst"):
            return address_match(node, atoms, set_name, self.diags, self.declared)
        if node.field == "payload":
            return payload_match(node, atoms, self.diags)
        return int_match(node, atoms, proto, set_name, self.diags, self.declared)

    def _requires(self, node: MatchNode, info: ir.FieldInfo, rule: RuleNode,
                  proto: int | None) -> bool:
        if node.field == "proto" and rule.protocol not in (None, "all", "ip", "ip6"):
            self.diags.append(error(f"`proto` on a `{rule.protocol}` rule: the protocol is "
                                    "already given", node.field_span, code="needs-protocol"))
            return False
        if info.protocols is None or proto in info.protocols:
            return True
        names = " or ".join(f"`{n}`" for n, (p, _) in ir.PROTOCOLS.items()
                            if p in info.protocols)
        hint = f"write e.g. `{rule.action} {names.split(' or ')[0].strip('`')} " \
               f"{node.field} ...`"
        has = f"this rule is `{rule.protocol}`" if rule.protocol else "this rule names no protocol"
        self.diags.append(error(f"`{node.field}` needs {names}; {has}", node.field_span,
                                hint=hint, code="needs-protocol"))
        return False


_ANY_FRAME = frozenset(f for f, info in ir.FIELDS.items() if info.families is ir.Family.ANY)


class _Family:
    """The set of IP versions a rule can still match, narrowed match by match."""

    def __init__(self, family: ir.Family, span: Span, proto_name: str,
                 diags: list[Diagnostic]):
        self.any = family is ir.Family.ANY
        self.versions = set(family.versions)
        self.reason = (span, f"`{proto_name}`")
        self.diags = diags

    def constrain_by(self, match: ir.Match) -> None:
        if match.field not in _ANY_FRAME:
            self.any = False  # but iif, oif, mark, ether-*: any frame, IP or not
        if isinstance(match, ir.AddrMatch):
            versions = {p.version for p in match.prefixes}
            what = "IPv4" if versions == {4} else "IPv6"
            self.constrain(versions, match.span, f"{what} addresses")
        elif isinstance(match, ir.FragMatch):
            self.constrain({4}, match.span, "`frag` (IPv4 only)")

    def constrain_to(self, version: int, span: Span, what: str) -> None:
        self.any = False
        self.constrain({version}, span, f"{what} (IPv{version})")

    def constrain(self, versions: set[int], span: Span, what: str) -> None:
        narrowed = self.versions & versions
        if not narrowed:
            have = " and ".join(f"IPv{v}" for v in sorted(self.versions))
            self.diags.append(error(f"{what} cannot match in a rule that is {have} only",
                                    span, code="family-conflict",
                                    notes=(Note(f"{have} because of {self.reason[1]}",
                                                self.reason[0]),)))
            return
        if narrowed != self.versions:
            self.reason = (span, what)
        self.versions = narrowed

    def result(self) -> ir.Family:
        return ir.Family.ANY if self.any else ir.Family.of_versions(self.versions)


def _with_options(action: ir.Action | None, extra: dict) -> ir.Action | None:
    """``log``'s and ``queue``'s options into the action; ``audit`` into a drop (``check_options``
    refused them on any other action)."""
    if isinstance(action, ir.Log) and extra:
        return ir.Log(span=action.span, **extra)
    if isinstance(action, ir.Drop) and extra.get("audit"):
        return ir.Drop(action.span, audit=True)
    if isinstance(action, ir.Queue) and extra:
        return ir.Queue(span=action.span, **extra)
    return action


def encoding_error(source: SourceFile) -> Diagnostic:
    """"not UTF-8" at the first bad byte of a file read with ``bad_byte`` set."""
    offset, byte = source.bad_byte or (0, 0)
    return error(f"not UTF-8: byte 0x{byte:02x}", source.span(offset, offset + 1),
                 hint="pfc reads UTF-8 (ASCII is fine); convert the file, e.g. "
                 "`iconv -f latin1 -t utf-8`", code="encoding")


def _via(atom: Atom, name: str) -> Atom:
    return Atom(atom.kind, atom.value, atom.span, atom.text, atom.origin or name,
                atom.defined_at)


def _did_you_mean(name: str, names: dict[str, Binding]) -> str | None:
    return suggest(name, names) or (None if names else "define it first: `define "
                                    f"{shorten(name)} = ...`")


def check(module: Module, sources: dict[str, SourceFile],
          read_set: ReadSet | None = None) -> tuple[ir.Policy, list[Diagnostic]]:
    checker = Checker(module, sources, read_set)
    policy = checker.run()
    return policy, checker.diags

