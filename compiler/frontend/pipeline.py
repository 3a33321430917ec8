"""The one front door: text → AST → IR, with every diagnostic.

The CLI, the language server, ``pfc verify`` and ``pfc load`` all call
:func:`compile_source` / :func:`compile_path`; nothing else parses or checks.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pfc.frontend import ir
from pfc.frontend.check import ReadSet, check, encoding_error
from pfc.frontend.diagnostics import (
    CompileError,
    Diagnostic,
    capped,
    error,
    has_errors,
    sort_key,
    warning,
)
from pfc.frontend.parse import parse
from pfc.frontend.shadow import shadowed
from pfc.frontend.source import MAX_POLICY_BYTES, SourceFile
from pfc.frontend.syntax import Default, Module
from pfc.frontend.text import describe_char


@dataclass
class Compiled:
    """The front end's result. ``policy`` is None when there are errors."""

    source: SourceFile
    module: Module
    policy: ir.Policy | None
    diagnostics: list[Diagnostic]
    sources: dict[str, SourceFile] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.policy is not None

    def require(self) -> ir.Policy:
        """The policy, or CompileError carrying the diagnostics."""
        if self.policy is None:
            raise CompileError(self.diagnostics, self.sources)
        return self.policy

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
    policy, check_diags = check(module, sources, read_set)
    diags = diags + check_diags
    if not has_errors(diags):
        diags += shadowed(policy) + _no_rules(policy, module)
    diags.sort(key=sort_key)
    diags = capped(diags)
    return Compiled(source, module, None if has_errors(diags) else policy, diags, sources)


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
