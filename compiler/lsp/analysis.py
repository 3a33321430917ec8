"""One document, checked: the front end's result plus what the editor asked for.

:func:`analyse` runs the one front door (:func:`pfc.frontend.pipeline.compile_source`), adds the
capability errors of the configured targets (:func:`pfc.backends.base.capability_errors`)
and warnings about the target configuration itself. Nothing here parses or checks on its
own; the language server's features read an :class:`Analysis`.

Targets come from a ``# pfc: targets xdp,nft`` comment among the comments above the
first statement (it wins), else from the editor's ``pfc.targets`` setting. As with
``pfc check --target T``, a target's limits are reported only once the front end finds
no error (a half-typed rule is not yet a rule any target can be asked about).
"""

from __future__ import annotations

import errno
import re
import stat
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from lsprotocol import types
from pygls import uris

from pfc import backends
from pfc.backends.base import capability_errors
from pfc.build import check_ruleset
from pfc.frontend import ir
from pfc.frontend.check import ReadSet
from pfc.frontend.diagnostics import Diagnostic, error, sort_key, warning
from pfc.frontend.firewall.check import check_file, is_firewall
from pfc.frontend.pipeline import Compiled, compile_source
from pfc.frontend.source import SourceFile, Span
from pfc.frontend.syntax import Define, Module, RuleNode, SetDecl, Value
from pfc.lsp.guard import describe
from pfc.lsp.text import UTF16, LineIndex

_TARGETS_COMMENT = re.compile(r"#\s*pfc:\s*targets?\b")
_TARGET_NAME = re.compile(r"[^,\s]+")


@dataclass
class TargetConfig:
    """The targets to check for, where they came from, and names that are not targets."""

    targets: tuple[str, ...] = ()
    origin: str = "none"  # "comment" | "settings" | "none"
    unknown: tuple[tuple[str, Span | None], ...] = ()


@dataclass
class Analysis:
    """A checked document version. ``diagnostics`` = the front end's plus configuration
    warnings plus, when the front end found no error, the capability errors of
    ``config.targets``; sorted."""

    source: SourceFile
    version: int | None
    compiled: Compiled
    config: TargetConfig
    diagnostics: list[Diagnostic]
    read_set: ReadSet | None = None
    encoding: str = UTF16
    elapsed: float = 0.0  # seconds the check took
    settings: tuple[str, ...] = ()  # the editor's targets setting it was checked with
    _partial: ir.Policy | None = field(default=None, repr=False)

    @property
    def module(self) -> Module:
        return self.compiled.module

    @cached_property
    def index(self) -> LineIndex:
        return LineIndex(self.source.text, self.encoding)

    @cached_property
    def policy(self) -> ir.Policy:
        """The checked policy; with errors, the rules that have none (checked again).
        For a whole firewall, every rule of the file (blocks and chains) in one list."""
        if self.compiled.policy is not None:
            return self.compiled.policy
        if self.compiled.ruleset is not None:
            return ir.Policy(self.compiled.ruleset.rules, source=self.source.name)
        if self._partial is None:
            policy, ruleset, _ = check_file(self.module, dict(self.compiled.sources),
                                            self.read_set)
            self._partial = policy if policy is not None else \
                ir.Policy(ruleset.rules, source=self.source.name)
        return self._partial

    @property
    def firewall(self) -> bool:
        """Whether the document is a whole firewall (hook blocks)."""
        return is_firewall(self.module)

    @cached_property
    def rules_by_start(self) -> dict[int, ir.Rule]:
        return {r.span.start: r for r in self.policy.rules}


def analyse(source: SourceFile, version: int | None = None, settings: tuple[str, ...] = (),
            read_set: ReadSet | None = None, encoding: str = UTF16) -> Analysis:
    """Check one document version (``read_set`` defaults to :func:`read_set_file`)."""
    started = time.perf_counter()
    read_set = read_set or read_set_file
    compiled = compile_source(source, read_set=read_set)
    config = target_config(compiled.module, settings)
    analysis = Analysis(source, version, compiled, config, [], read_set, encoding,
                        settings=tuple(settings))
    diags = list(compiled.diagnostics) + _config_warnings(config, source)
    registry = backends.registry()
    if compiled.policy is not None:  # as `pfc check --target T`: errors first, then limits
        for target in config.targets:
            diags += capability_errors(compiled.policy, registry[target], registry)
    elif compiled.ruleset is not None and config.targets:  # the targets as one list
        diags += check_ruleset(compiled.ruleset, list(config.targets))
    diags.sort(key=sort_key)
    analysis.diagnostics = diags
    analysis.elapsed = time.perf_counter() - started
    return analysis


def failed(source: SourceFile, version: int | None, settings: tuple[str, ...],
           exc: Exception, encoding: str = UTF16) -> Analysis:
    """The check of a text on which the front end raised (a pfc bug): one ``internal``
    error at the top of the file, no statements, no rules. The editor shows it instead
    of "Error in server", and the next text is checked as usual."""
    diag = error(f"internal error: pfc could not check this text ({describe(exc)}); "
                 "this is a pfc bug, please report it with the policy",
                 Span(source.name, 0, 0), code="internal")
    compiled = Compiled(source, Module(source, (), ()), None, [diag], {source.name: source})
    return Analysis(source, version, compiled, TargetConfig(), [diag], encoding=encoding,
                    settings=tuple(settings), _partial=ir.Policy((), source=source.name))


# --------------------------------------------------------------------- set files

MAX_SET_BYTES = 256 << 20
_SETS: dict[str, tuple[tuple[int, int], SourceFile]] = {}


def read_set_file(path: Path) -> SourceFile:
    """Read a ``set`` file for the editor: regular files only (a half-typed path such as
    ``/dev/stdin`` or ``/dev/zero`` must not steal the protocol's input or never end),
    at most ``MAX_SET_BYTES``, and cached until the file's mtime or size changes (a
    100k-entry set is not re-read at every keystroke)."""
    st = path.stat()
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, "not a regular file")
    if st.st_size > MAX_SET_BYTES:
        raise OSError(errno.EFBIG, f"larger than {MAX_SET_BYTES} bytes")
    key = (st.st_mtime_ns, st.st_size)
    hit = _SETS.get(str(path))
    if hit is not None and hit[0] == key:
        return hit[1]
    source = SourceFile.read(path)
    if len(_SETS) >= 64:
        _SETS.clear()
    _SETS[str(path)] = (key, source)
    return source


# ------------------------------------------------------------------------ targets

def target_config(module: Module, settings: tuple[str, ...] | list[str] = ()) -> TargetConfig:
    """The comment's targets if there is one, else the settings' (unknown names out)."""
    found = _comment_targets(module)
    origin = "comment" if found is not None else ("settings" if settings else "none")
    named = found if found is not None else [(name, None) for name in settings]
    known = backends.registry()
    targets = tuple(dict.fromkeys(n for n, _ in named if n in known))
    unknown = tuple((n, s) for n, s in named if n not in known)
    return TargetConfig(targets, origin, unknown)


def _comment_targets(module: Module) -> list[tuple[str, Span]] | None:
    first = min((s.span.start for s in module.statements), default=len(module.source.text))
    for comment in module.comments:
        if comment.span.start > first:
            break
        m = _TARGETS_COMMENT.match(comment.text)
        if m is None:
            continue
        base = comment.span.start + m.end()
        return [(n.group(), Span(comment.span.file, base + n.start(), base + n.end()))
                for n in _TARGET_NAME.finditer(comment.text[m.end():])]
    return None


def _config_warnings(config: TargetConfig, source: SourceFile) -> list[Diagnostic]:
    known = ", ".join(backends.registry())
    out = []
    for name, span in config.unknown:
        where = "in the `# pfc: targets` comment" if span else "in the `pfc.targets` setting"
        out.append(warning(f"unknown target `{name}` {where}; it is not checked",
                           span or Span(source.name, 0, 0), hint=f"known targets: {known}",
                           code="unknown-target"))
    return out


# -------------------------------------------------------------------------- names

def definitions(module: Module) -> dict[str, list[Span]]:
    """Every declaration of each name (``define``/``set``), first one first."""
    out: dict[str, list[Span]] = {}
    for stmt in module.statements:
        if isinstance(stmt, (Define, SetDecl)):
            out.setdefault(stmt.name, []).append(stmt.name_span)
    return out


def declarations(module: Module) -> dict[str, Define | SetDecl]:
    """The first declaration of each name."""
    out: dict[str, Define | SetDecl] = {}
    for stmt in module.statements:
        if isinstance(stmt, (Define, SetDecl)):
            out.setdefault(stmt.name, stmt)
    return out


def references(module: Module) -> list[tuple[str, Span]]:
    """Every ``$name`` use, in defines, matches and redirect targets, in text order."""
    out: list[tuple[str, Span]] = []
    for stmt in module.statements:
        for value in _values(stmt):
            _collect_vars(value, out)
    return out


def _values(stmt) -> list[Value]:
    if isinstance(stmt, Define):
        return [stmt.value]
    if not isinstance(stmt, RuleNode):
        return []
    values = [m.value for m in stmt.matches if m.value is not None]
    if stmt.target is not None:
        values += [v for v in (stmt.target.address, stmt.target.port) if v is not None]
    return values


def _collect_vars(value: Value, out: list[tuple[str, Span]]) -> None:
    if value.kind == "var":
        out.append((value.text, value.span))
    for item in value.items:
        _collect_vars(item, out)


def symbol_at(module: Module, offset: int) -> str | None:
    """The name under the cursor: a ``$name`` use or a declared name."""
    for name, span in references(module):
        if span.start <= offset <= span.end:
            return name
    for name, spans in definitions(module).items():
        if any(s.start <= offset <= s.end for s in spans):
            return name
    return None


def set_file_path(module: Module, stmt: SetDecl) -> Path:
    """Where a ``set``'s file is read from (relative to the policy file), as check does."""
    path = Path(stmt.path.text[1:-1])
    return path if path.is_absolute() else Path(module.source.name).parent / path


# --------------------------------------------------------------- LSP diagnostics

_SEVERITY = {"error": types.DiagnosticSeverity.Error,
             "warning": types.DiagnosticSeverity.Warning,
             "note": types.DiagnosticSeverity.Information}


def lsp_diagnostics(analysis: Analysis, uri: str) -> list[types.Diagnostic]:
    """Diagnostics as LSP data: exact ranges, notes as related information (notes
    without a place appended to the message), the hint appended to the message,
    ``source`` "pfc", ``code`` the diagnostic's code. An error inside a set file is
    shown on the ``set`` declaration's path, with the place in the file as related
    information."""
    return [_lsp_diagnostic(d, analysis, uri) for d in analysis.diagnostics]


def _lsp_diagnostic(diag: Diagnostic, analysis: Analysis, uri: str) -> types.Diagnostic:
    message, related = diag.message, []
    span = diag.span
    if span.file != analysis.source.name:
        related.append(types.DiagnosticRelatedInformation(
            _location(span, analysis, uri), f"in {span.file}"))
        line, column = _file_position(span, analysis)
        message = f"{Path(span.file).name}:{line}:{column}: {message}"
        span = _set_decl_span(span.file, analysis)
    for note in diag.notes:
        if note.span is None:
            message += f"\nnote: {note.message}"
        else:
            related.append(types.DiagnosticRelatedInformation(
                _location(note.span, analysis, uri), note.message))
    if diag.hint:
        message += f"\nhint: {diag.hint}"
    tags = [types.DiagnosticTag.Unnecessary] if diag.code == "shadowed" else None
    return types.Diagnostic(analysis.index.range(span), message,
                            severity=_SEVERITY[diag.severity.value], code=diag.code or None,
                            source="pfc", related_information=related or None, tags=tags)


def _location(span: Span, analysis: Analysis, uri: str) -> types.Location:
    if span.file == analysis.source.name:
        return types.Location(uri, analysis.index.range(span))
    other = analysis.compiled.sources.get(span.file)
    index = LineIndex(other.text, analysis.encoding) if other else LineIndex("")
    return types.Location(uris.from_fs_path(span.file) or span.file, index.range(span))


def _file_position(span: Span, analysis: Analysis) -> tuple[int, int]:
    other = analysis.compiled.sources.get(span.file)
    return other.position(span.start) if other else (0, 0)


def _set_decl_span(file: str, analysis: Analysis) -> Span:
    for stmt in analysis.module.statements:
        if isinstance(stmt, SetDecl) and str(set_file_path(analysis.module, stmt)) == file:
            return stmt.path.span
    return Span(analysis.source.name, 0, 0)
