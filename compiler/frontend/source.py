"""Source files and spans: every diagnostic and every IR node points back into the text."""

from __future__ import annotations

import bisect
import errno
import os
import stat
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

MAX_POLICY_BYTES = 64 << 20  # a policy file (100k rules are about 3 MiB)
MAX_SET_BYTES = 256 << 20  # a set file (10^6 entries are about 20 MiB)
BOM = "\ufeff"


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
    """The text of one policy (or set) file with offset → line/column lookup.

    ``bad_byte`` is set when the file was not UTF-8: (character offset in ``text``,
    byte value) of the first bad byte; ``text`` then holds U+FFFD for each bad
    sequence, and the front end reports the file instead of reading it.

    ``echo`` False: no diagnostic shows the file's lines (set files: a policy may name
    any readable file, ``/etc/shadow`` too, and pfc may run with more privilege than
    the policy's author). Spans into it keep their line and column.
    """

    name: str
    text: str
    bad_byte: tuple[int, int] | None = None
    echo: bool = True

    @classmethod
    def read(cls, path: str | Path, *, limit: int = MAX_POLICY_BYTES,
             regular_only: bool = False) -> SourceFile:
        """Read a file as UTF-8 (a leading byte-order mark is dropped, as Python's
        ``utf-8-sig`` does). OSError if it cannot be read, is larger than ``limit``
        bytes, or (``regular_only``) is not a regular file; never blocks on a FIFO then.
        Bytes that are not UTF-8 give ``bad_byte``, not an exception."""
        return cls.decode(str(path), read_bytes(path, limit, regular_only))

    @classmethod
    def decode(cls, name: str, data: bytes) -> SourceFile:
        """UTF-8 bytes → SourceFile (see ``read``)."""
        if data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]
        try:
            return cls(name, data.decode("utf-8"))
        except UnicodeDecodeError as exc:
            offset = len(data[:exc.start].decode("utf-8"))
            return cls(name, data.decode("utf-8", errors="replace"),
                       (offset, data[exc.start]))

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


def read_bytes(path: str | Path, limit: int, regular_only: bool = False) -> bytes:
    """At most ``limit`` bytes of a file, or OSError (EFBIG past ``limit``; EINVAL for
    something that is not a regular file when ``regular_only``: a FIFO, a device such
    as ``/dev/zero`` or ``/dev/stdin``, a directory). The file is opened non-blocking
    and checked with ``fstat``, so a FIFO without a writer is refused, not waited on."""
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
    if regular_only:
        flags |= os.O_NONBLOCK
    try:
        fd = os.open(path, flags)
    except (ValueError, UnicodeError) as exc:  # a NUL or a lone surrogate in the name
        raise OSError(errno.EINVAL, "not a valid file name", str(path)) from exc
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise OSError(errno.EISDIR, "is a directory", str(path))
        if regular_only and not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"not a regular file ({_kind(st.st_mode)})",
                          str(path))
        too_big = OSError(errno.EFBIG, f"larger than {limit >> 20} MiB, pfc's limit",
                          str(path))
        if stat.S_ISREG(st.st_mode) and st.st_size > limit:
            raise too_big
        data = f.read(limit + 1)
    if len(data) > limit:
        raise too_big
    return data


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a plain file"


def read_set_source(path: Path) -> SourceFile:
    """A ``set NAME = file`` file: regular files only, at most ``MAX_SET_BYTES``."""
    return SourceFile.read(path, limit=MAX_SET_BYTES, regular_only=True)
