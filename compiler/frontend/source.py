"""Source files and spans: every diagnostic and every IR node points back into the text."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path


@dataclass(frozen=True)
class Span:
    """A half-open byte range ``[start, end)`` of one source file's text.

    Line and column (both 1-based, columns in characters) are derived from the file,
    so a span stays valid whatever the rendering: caret excerpt, LSP range or JSON.
    """

    file: str
    start: int
    end: int

    def cover(self, other: Span) -> Span:
        """The smallest span holding both (same file)."""
        return Span(self.file, min(self.start, other.start), max(self.end, other.end))


NO_SPAN = Span("<builtin>", 0, 0)


@dataclass(frozen=True)
class SourceFile:
    """The text of one policy (or set) file with offset → line/column lookup."""

    name: str
    text: str

    @classmethod
    def read(cls, path: str | Path) -> SourceFile:
        return cls(str(path), Path(path).read_text(encoding="utf-8"))

    @cached_property
    def line_starts(self) -> tuple[int, ...]:
        starts = [0]
        starts.extend(i + 1 for i, ch in enumerate(self.text) if ch == "\n")
        return tuple(starts)

    def position(self, offset: int) -> tuple[int, int]:
        """(line, column), both 1-based, of a character offset."""
        offset = max(0, min(offset, len(self.text)))
        index = bisect.bisect_right(self.line_starts, offset) - 1
        return index + 1, offset - self.line_starts[index] + 1

    def line_text(self, line: int) -> str:
        """The text of a 1-based line, without its newline."""
        starts = self.line_starts
        if not 1 <= line <= len(starts):
            return ""
        end = starts[line] - 1 if line < len(starts) else len(self.text)
        return self.text[starts[line - 1] : end].rstrip("\r")

    def span(self, start: int, end: int) -> Span:
        return Span(self.name, start, end)
