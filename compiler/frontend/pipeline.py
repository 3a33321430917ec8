"""The one front door: text → AST → IR, with every diagnostic.

The CLI, the language server, ``pfc verify`` and ``pfc load`` all call
:func:`compile_source` / :func:`compile_path`; nothing else parses or checks.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from pfc.frontend import ir
from pfc.frontend.check import ReadSet, encoding_error
from pfc.frontend.diagnostics import (
    CompileError,
    Diagnostic,
    capped,
    error,
    has_errors,
    sort_key,
    warning,
)
from pfc.frontend.firewall.check import check_file
from pfc.frontend.firewall.ruleset import Ruleset
from pfc.frontend.parse import parse
from pfc.frontend.shadow import shadowed
from pfc.frontend.source import MAX_POLICY_BYTES, SourceFile
from pfc.frontend.syntax import BlockOpen, Default, InterfaceDecl, Module
from pfc.frontend.text import describe_char

# The command the front end serves (``pfc run`` ...), set by the CLI: named in the
# error of a command that takes one rule list and was given a whole firewall.
COMMAND: ContextVar[str | None] = ContextVar("pfc_command", default=None)
WHOLE_FIREWALL_COMMANDS = ("`pfc check`, `pfc fmt`, `pfc compile`, `pfc verify`, `pfc run`, "
                           "`pfc load`, `pfc apply`, `pfc bench` and the language server")


@dataclass
class Compiled:
    """The front end's result: ``policy`` for a v1 file (one rule list), ``ruleset``
    for a v2 file (a whole firewall); both None when there are errors."""

    source: SourceFile
    module: Module
    policy: ir.Policy | None
    diagnostics: list[Diagnostic]
    sources: dict[str, SourceFile] = field(default_factory=dict)
    ruleset: Ruleset | None = None

    @property
    def ok(self) -> bool:
        return self.policy is not None or self.ruleset is not None

    def require(self) -> ir.Policy:
        """The policy (one rule list), or CompileError carrying the diagnostics; for a
        whole firewall, one error saying which commands take it."""
        if self.policy is None and self.ruleset is not None:
            raise CompileError([self._whole_firewall()], self.sources)
        if self.policy is None:
            raise CompileError(self.diagnostics, self.sources)
        return self.policy

    def require_ruleset(self) -> Ruleset:
        """The whole firewall, or CompileError: the diagnostics, or (for a v1 file) one
        error saying it is one rule list."""
        if self.ruleset is not None:
            return self.ruleset
        if self.policy is not None:
            raise CompileError([error(
                f"`{self.source.name}` is one rule list (v1), not a whole firewall (hook "
                "blocks)", self.source.span(0, 0), code="not-a-firewall",
                hint="write its rules in hook blocks, e.g. `input { ... }`")], self.sources)
        raise CompileError(self.diagnostics, self.sources)

    def _whole_firewall(self) -> Diagnostic:
        first = next((s for s in self.module.statements if isinstance(s, BlockOpen)),
                     next((s for s in self.module.statements
                           if isinstance(s, InterfaceDecl)), None))
        span = first.span if first is not None else self.source.span(0, 0)
        command = f"`pfc {COMMAND.get()}`" if COMMAND.get() else "this command"
        return error(f"`{self.source.name}` is a whole firewall (hook blocks); {command} "
                     f"takes one rule list: {WHOLE_FIREWALL_COMMANDS} take whole firewalls "
                     "so far", span, code="whole-firewall",
                     hint="compile it with `pfc compile FILE --target T` (a block per "
                     "target it carries)")

    def rule_text(self, rule: ir.Rule) -> str:
        """The rule's source text on one line (continuations joined)."""
        text = self.source.text[rule.span.start:rule.span.end]
        return " ".join(text.replace("\\\n", " ").split())


@contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection inside: a 100k-entry set allocates ~10^6 objects,
    none in a cycle, and every full collection would walk all of them again (a third
    of the front end's time at 100k). Nests; restores the collector as it found it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def compile_source(source: SourceFile, read_set: ReadSet | None = None) -> Compiled:
    with paused_gc():
        return _compile_source(source, read_set)


def _compile_source(source: SourceFile, read_set: ReadSet | None) -> Compiled:
    sources = {source.name: source}
    unreadable = text_errors(source)
    if unreadable:
        return Compiled(source, Module(source, (), ()), None, unreadable, sources)
    module, diags = parse(source)
    policy, ruleset, check_diags = check_file(module, sources, read_set)
    diags = diags + check_diags
    if not has_errors(diags):
        diags += _warnings(policy, ruleset, module)
    diags.sort(key=sort_key)
    diags = capped(diags)
    if has_errors(diags):
        policy = ruleset = None
    return Compiled(source, module, policy, diags, sources, ruleset)


def _warnings(policy: ir.Policy | None, ruleset: Ruleset | None,
              module: Module) -> list[Diagnostic]:
    """Shadowed rules (per list: each block and each chain) and the "no rules" one."""
    if policy is not None:
        return shadowed(policy) + _no_rules(policy, module)
    out: list[Diagnostic] = []
    for rules in [p.rules for p in ruleset.lists] + [c.rules for c in ruleset.chains]:
        out += shadowed(ir.Policy(rules, source=ruleset.source))
    end = len(module.source.text)
    if not ruleset.lists:
        out.append(warning("no hook blocks: this file filters nothing",
                           module.source.span(end, end), code="no-rules",
                           hint="rules go in hook blocks such as `input { ... }`"))
    elif not ruleset.rules:
        out.append(warning("no rules: every packet gets each block's default verdict",
                           ruleset.lists[0].hook.span, code="no-rules",
                           hint="add rules such as `drop udp dport 53` inside a block"))
    return out


_SURROGATE = re.compile("[\ud800-\udfff]")


def text_errors(source: SourceFile) -> list[Diagnostic]:
    """Why a text cannot be read as a policy at all: not UTF-8 (a file), a lone
    surrogate (text handed over in-process, e.g. by an editor), or more than
    ``MAX_POLICY_BYTES`` characters. Empty when it can."""
    if source.bad_byte is not None:
        return [encoding_error(source)]
    if len(source.text) > MAX_POLICY_BYTES:
        return [error(f"the policy is {len(source.text):,} characters long; pfc reads at "
                      f"most {MAX_POLICY_BYTES >> 20} MiB", source.span(0, 0),
                      code="too-large")]
    bad = _SURROGATE.search(source.text)
    if bad is not None:
        return [error(f"{describe_char(bad.group())} in the text", source.span(
            bad.start(), bad.start() + 1), hint="the text is not valid Unicode",
            code="encoding")]
    return []


def _no_rules(policy: ir.Policy, module: Module) -> list[Diagnostic]:
    """A policy without rules passes (or drops) everything: say so, at its `default`
    or else at the end of the file (where a rule would go)."""
    if policy.rules:
        return []
    default = next((s for s in module.statements if isinstance(s, Default)), None)
    end = len(module.source.text)
    span = default.span if default else module.source.span(end, end)
    return [warning(f"no rules: every packet gets the default verdict `{policy.default}`",
                    span, hint="add rules such as `drop udp dport 53`", code="no-rules")]


def compile_path(path: str | Path) -> Compiled:
    """Compile a policy file (OSError if it cannot be read: see ``SourceFile.read``)."""
    return compile_source(SourceFile.read(path))


def compile_text(text: str, name: str = "<policy>") -> Compiled:
    return compile_source(SourceFile(name, text))
