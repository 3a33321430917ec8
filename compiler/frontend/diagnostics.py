"""Diagnostics are data; rendering them is separate.

A :class:`Diagnostic` has a severity, a message, a span, an optional hint and notes.
The same list is rendered as a caret excerpt for terminals (``render_text``), as JSON
for ``--format json`` (``to_json``) and as LSP ranges by the language server.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from pfc.frontend.source import SourceFile, Span
from pfc.frontend.text import visible


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"


@dataclass(frozen=True)
class Note:
    message: str
    span: Span | None = None


@dataclass(frozen=True)
class Diagnostic:
    severity: Severity
    message: str
    span: Span
    hint: str | None = None
    notes: tuple[Note, ...] = ()
    code: str = ""  # stable short id, e.g. "unknown-name"; used by tests and the LSP


def error(message: str, span: Span, hint: str | None = None, code: str = "",
          notes: tuple[Note, ...] = ()) -> Diagnostic:
    return Diagnostic(Severity.ERROR, message, span, hint, notes, code)


def warning(message: str, span: Span, hint: str | None = None, code: str = "",
            notes: tuple[Note, ...] = ()) -> Diagnostic:
    return Diagnostic(Severity.WARNING, message, span, hint, notes, code)


def has_errors(diags: Iterable[Diagnostic]) -> bool:
    return any(d.severity is Severity.ERROR for d in diags)


# A word longer than this gets no "did you mean": no keyword or sensible name is that
# long, and the edit distance is quadratic in the length (a 100,000-character name
# took 8 s against the keywords).
SUGGEST_MAX_LEN = 40


def suggest(word: str, candidates: Iterable[str]) -> str | None:
    """A "did you mean" hint for a misspelt word, or None.

    Closest by edit distance with transpositions (``dprot`` → ``dport``), at most 2
    edits (1 for words of 4 letters or fewer); ties go to difflib's similarity. Cheap
    on any input: words over ``SUGGEST_MAX_LEN`` characters get none, and only
    candidates whose length is within the edit limit are compared (each comparison is
    at most 40 × 42 steps)."""
    if not word or len(word) > SUGGEST_MAX_LEN:
        return None
    limit = 1 if len(word) <= 4 else 2
    near = [c for c in candidates if abs(len(c) - len(word)) <= limit]
    scored = [(d, -difflib.SequenceMatcher(None, word, c).ratio(), c)
              for c in near if (d := _distance(word, c)) <= limit]
    return f"did you mean `{visible(min(scored)[2])}`?" if scored else None


def _distance(a: str, b: str, limit: int = 2) -> int:
    """Optimal-string-alignment distance: insert, delete, substitute, swap neighbours.
    Stops early (returning ``limit + 1``) once every alignment costs more than ``limit``."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        if min(cur) > limit:
            return limit + 1
        prev2, prev = prev, cur
    return prev[len(b)]


class CompileError(Exception):
    """Raised by APIs that cannot go on; carries the diagnostics that stopped them."""

    def __init__(self, diagnostics: list[Diagnostic],
                 sources: Mapping[str, SourceFile] | None = None):
        self.diagnostics = diagnostics
        self.sources = dict(sources or {})
        first = next((d for d in diagnostics if d.severity is Severity.ERROR), None)
        super().__init__(first.message if first else "compile error")

    def render(self) -> str:
        """Every diagnostic as ``pfc check`` prints it (FILE:LINE:COL, source, caret)."""
        return "\n".join(render_text(d, self.sources) for d in self.diagnostics)


# ---------------------------------------------------------------------------- rendering

def render_text(diag: Diagnostic, sources: Mapping[str, SourceFile], color: bool = False) -> str:
    """``FILE:LINE:COL: error: MESSAGE``, the source line, a caret line, hint and notes.

    Safe for a terminal whatever the policy holds: every control or invisible character
    of the file name, the message, the source line and the hint is shown escaped
    (``\\x1b``, ``\\u200b``; a tab as one space), and the carets are placed under the
    line as shown. A note without a place may span lines (clang's output): each is
    shown on its own, indented."""
    out = [_headline(diag.severity.value, diag.message, diag.span, sources, color)]
    out.extend(_excerpt(diag.span, sources))
    if diag.hint:
        out.append(f"  = hint: {visible(diag.hint)}")
    for note in diag.notes:
        if note.span is not None:
            out.append(_headline("note", note.message, note.span, sources, color))
            out.extend(_excerpt(note.span, sources))
        else:
            out.extend(_note_lines(note.message))
    return "\n".join(out)


def _note_lines(message: str) -> list[str]:
    """A note without a place (a tool's output, a command): its lines one under the
    other, indented so that none can pass for a ``FILE:LINE:COL`` line."""
    first, *rest = message.split("\n")
    return [f"  = note: {visible(first)}"] + [f"    {visible(line)}" for line in rest]


_COLORS = {"error": "\033[1;31m", "warning": "\033[1;33m", "note": "\033[1;36m"}


def _headline(kind: str, message: str, span: Span, sources: Mapping[str, SourceFile],
              color: bool) -> str:
    src = sources.get(span.file)
    line, col = src.position(span.start) if src else (0, 0)
    label = f"{_COLORS[kind]}{kind}\033[0m" if color else kind
    return f"{visible(span.file)}:{line}:{col}: {label}: {visible(message)}"


EXCERPT_MAX = 200  # characters of a source line shown around the caret


def _excerpt(span: Span, sources: Mapping[str, SourceFile]) -> list[str]:
    src = sources.get(span.file)
    if src is None or not src.echo:
        return []  # no source, or one whose lines are never shown (a set file)
    line, col = src.position(span.start)
    end_line, end_col = src.position(max(span.start, span.end))
    text = src.line_text(line)
    if not text.strip():
        return []  # a caret under an empty line shows nothing
    end_col = end_col if end_line == line else len(text) + 1
    first = max(0, col - 1 - EXCERPT_MAX // 2)  # a 100,000-character line is cut
    cut = text[first:first + EXCERPT_MAX]
    before = visible(cut[:col - 1 - first])
    marked = visible(cut[col - 1 - first:end_col - 1 - first])
    shown = ("…" if first else "") + visible(cut) + ("…" if first + EXCERPT_MAX < len(text) else "")
    gutter = f"{line:>4} | "
    marker = "^" + "~" * max(0, len(marked) - 1)
    return [gutter + shown, " " * (len(gutter) + len(before) + bool(first)) + marker]


def to_json(diag: Diagnostic, sources: Mapping[str, SourceFile]) -> dict:
    """The JSON form of ``--format json``: positions 1-based, ends exclusive."""
    return {
        "severity": diag.severity.value,
        "code": diag.code,
        "message": diag.message,
        "hint": diag.hint,
        **_json_span(diag.span, sources),
        "notes": [
            {"message": n.message, **(_json_span(n.span, sources) if n.span else {})}
            for n in diag.notes
        ],
    }


def _json_span(span: Span, sources: Mapping[str, SourceFile]) -> dict:
    src = sources.get(span.file)
    line, col = src.position(span.start) if src else (0, 0)
    end_line, end_col = src.position(span.end) if src else (0, 0)
    return {"file": span.file, "line": line, "column": col,
            "end_line": end_line, "end_column": end_col}


MAX_ERRORS = 100  # errors reported per compile; the rest are counted in one last error


def capped(diags: list[Diagnostic], limit: int = MAX_ERRORS) -> list[Diagnostic]:
    """``diags`` (sorted) up to and including the ``limit``-th error, then one error at
    the first one left out saying how many errors and warnings were not reported."""
    errors = 0
    for i, d in enumerate(diags):
        if d.severity is Severity.ERROR:
            errors += 1
            if errors > limit:
                return diags[:i] + [_more(diags[i:], limit)]
    return diags


def _more(rest: list[Diagnostic], limit: int) -> Diagnostic:
    errors = sum(d.severity is Severity.ERROR for d in rest)
    others = len(rest) - errors
    also = f" and {others:,} more warning{'s' * (others != 1)}" if others else ""
    return error(f"{errors:,} more error{'s' * (errors != 1)}{also} not reported: pfc "
                 f"stops after {limit} errors", rest[0].span,
                 hint="fix the errors above first; is this really a policy file?",
                 code="too-many-errors")


def sort_key(diag: Diagnostic) -> tuple:
    return (diag.span.file, diag.span.start, diag.severity != Severity.ERROR)
