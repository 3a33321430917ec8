"""The one front door: text → AST → IR, with every diagnostic.

The CLI, the language server, ``pfc verify`` and ``pfc load`` all call
:func:`compile_source` / :func:`compile_path`; nothing else parses or checks.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pfc.frontend import ir
from pfc.frontend.check import ReadSet, check
from pfc.frontend.diagnostics import CompileError, Diagnostic, has_errors, sort_key
from pfc.frontend.parse import parse
from pfc.frontend.shadow import shadowed
from pfc.frontend.source import SourceFile
from pfc.frontend.syntax import Module


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
    module, diags = parse(source)
    policy, check_diags = check(module, sources, read_set)
    diags = diags + check_diags
    if not has_errors(diags):
        diags += shadowed(policy)
    diags.sort(key=sort_key)
    return Compiled(source, module, None if has_errors(diags) else policy, diags, sources)


def compile_path(path: str | Path) -> Compiled:
    return compile_source(SourceFile.read(path))


def compile_text(text: str, name: str = "<policy>") -> Compiled:
    return compile_source(SourceFile(name, text))
