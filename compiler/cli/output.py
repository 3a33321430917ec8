"""Where command output goes, and what reaches a terminal.

- Standard output is guarded (:func:`guarded_stdout`): a reader that went away (``pfc
  ... | head``) raises :class:`OutputError` with ``closed`` set, which the top of the
  program turns into a quiet exit 0, as other Unix tools do; any other write error
  (``> /dev/full``) into one line and exit 2.
- Output files (``-o FILE``, ``--plot``) are opened by :func:`open_output`: ``-`` is
  standard output, a missing directory is never created, and an error is one line
  naming the path.
- ``--format json`` objects go through :func:`print_json`, which stamps
  ``"version": JSON_VERSION`` first (docs/json.md).
- User text (rule text, file names, messages) shown on a terminal goes through
  :func:`shown` (control characters escaped) and is given to rich as ``Text``, never
  as markup (:func:`cell`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from pfc.frontend.text import escaped

JSON_VERSION = 1
STDIO = "-"
# Unicode categories escaped by shown(): controls, format characters (bidi overrides,
# zero-width joiners, a BOM), line/paragraph separators, surrogates.
_ESCAPED = frozenset(("Cc", "Cf", "Zl", "Zp", "Cs"))


class UsageError(Exception):
    """Bad usage: unknown target, unreadable input, bad option. One line, exit 2.
    (Re-exported by ``cli.common``, where commands import it from.)"""


class OutputError(Exception):
    """Writing an output failed. ``closed``: the reader went away (EPIPE), which is a
    quiet exit 0; anything else is one line and exit 2."""

    def __init__(self, where: str, exc: OSError):
        self.closed = exc.errno == errno.EPIPE
        reason = exc.strerror or str(exc)
        super().__init__(f"cannot write {where}: {reason}")


# ----------------------------------------------------------------------- standard output

class _Guarded:
    """A stream whose write errors become :class:`OutputError`. Everything else (
    ``isatty``, ``encoding``, ``fileno`` ...) is the wrapped stream's."""

    def __init__(self, stream: IO, where: str = "to standard output"):
        self._stream = stream
        self._where = where

    def write(self, data):
        try:
            return self._stream.write(data)
        except OSError as exc:
            raise OutputError(self._where, exc) from exc

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise OutputError(self._where, exc) from exc

    @property
    def buffer(self) -> _Guarded:
        return _Guarded(self._stream.buffer, self._where)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def guarded_stdout() -> Iterator[None]:
    """``sys.stdout`` guarded inside; flushed before leaving, so a full disk is
    reported here and not by the interpreter at exit."""
    real = sys.stdout
    sys.stdout = _Guarded(real)
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            real.flush()  # after an error exit already reported: nothing more to say
        sys.stdout = real


def tolerant_encoding() -> None:
    """A character the terminal's encoding lacks (`→` under a Latin-1 locale) is
    written as an escape, never raised (as the program only: tests keep their
    streams)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.reconfigure(errors="backslashreplace")


def silence_stdout() -> None:
    """After the reader went away: point file descriptor 1 at /dev/null, so the
    interpreter's own flush at exit cannot complain (the recipe of Python's signal
    docs, "Note on SIGPIPE"). Does nothing for a stream without a descriptor."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def refuse_terminal(what: str) -> None:
    """Binary output never goes to a terminal (gzip's rule): a usage error instead."""
    if sys.stdout.isatty():
        raise UsageError(f"{what} is binary: not writing it to a terminal; redirect "
                         "standard output or give -o FILE")


# ------------------------------------------------------------------------ output files

@contextlib.contextmanager
def open_output(path: str | Path) -> Iterator[IO[bytes]]:
    """A binary stream for an output path: ``-`` is standard output (refused on a
    terminal), anything else a file created or truncated there. Never creates a
    directory. Errors (opening, writing, closing) are :class:`OutputError`."""
    if str(path) == STDIO:
        refuse_terminal("this output")
        sys.stdout.flush()
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    where = f"`{shown(str(path))}`"
    try:
        stream = open(path, "wb")  # noqa: SIM115 (closed below, errors translated)
    except OSError as exc:
        raise OutputError(where, exc) from exc
    try:
        yield _Guarded(stream, where)
    finally:
        try:
            stream.close()
        except OSError as exc:
            raise OutputError(where, exc) from exc


def check_output_dir(path: str | Path, option: str) -> None:
    """Before a long run: the directory an output file goes into exists (pfc does not
    create it) — otherwise a usage error, not a lost run."""
    parent = Path(path).parent
    if not parent.is_dir():
        raise UsageError(f"{option} {shown(str(path))}: directory `{shown(str(parent))}` "
                         "does not exist (pfc does not create it)")


# ------------------------------------------------------------------------------- JSON

def versioned(obj: dict) -> dict:
    """``obj`` with ``"version"`` first: the JSON of every ``--format json``."""
    return {"version": JSON_VERSION, **obj}


def print_json(obj: dict, indent: int | None = 2, file: IO | None = None) -> None:
    print(json.dumps(versioned(obj), indent=indent), file=file or sys.stdout, flush=True)


# ------------------------------------------------------------------------ terminal text

def shown(text: str) -> str:
    """``text`` safe for a terminal: control and format characters (ESC, CR, a bidi
    override, a BOM ...) as ``\\xNN`` / ``\\uNNNN`` escapes, a backslash left as it is.
    Printable text, any script, is unchanged."""
    if text.isprintable():
        return text
    return "".join(_escape(ch) if unicodedata.category(ch) in _ESCAPED else ch
                   for ch in text)


def _escape(ch: str) -> str:
    return {"\t": "\\t", "\n": "\\n", "\r": "\\r"}.get(ch) or escaped(ch)


def cell(text: str, style: str = ""):
    """A rich ``Text`` holding ``text`` exactly (escaped by :func:`shown`): rich never
    reads user text as markup (``[/]`` in a rule would otherwise crash it)."""
    from rich.text import Text

    return Text(shown(text), style=style)


def cell_lines(items) -> object:
    """A rich ``Text`` of ``items`` one per line, each escaped."""
    from rich.text import Text

    return Text("\n".join(shown(str(item)) for item in items))


def with_progress(run, request, quiet: bool, label: str = "bench"):
    """``run(request)``, or on a terminal ``run(request, tick)`` under a transient
    progress bar on stderr (``tick(name, fraction)`` names the step)."""
    from rich.console import Console
    from rich.progress import Progress

    if quiet or not sys.stderr.isatty():
        return run(request)
    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(label, total=1.0)

        def tick(name: str, fraction: float) -> None:
            progress.update(task, completed=fraction, description=f"{label}: {name}")

        return run(request, tick)



# ------------------------------------------------------------- prove, diff, apply

WITNESS_SHOWN = 48  # bytes of a witness printed in text output


def hex_witness(data: bytes) -> str:
    shown = data[:WITNESS_SHOWN].hex()
    return shown + (f"... ({len(data)} bytes)" if len(data) > WITNESS_SHOWN else "")


def why(s) -> str:
    """One side of a diff region: the rule deciding (``line N `text```), or the default."""
    return s.text if s.line is None else f"line {s.line} `{s.text}`"


def write_witnesses(path: str | None, frames: list[bytes]) -> None:
    """The witness frames to a pcap file (``-w``; nothing without one)."""
    if not path:
        return
    from pfc.oracle.pcap import PcapError, write_pcap
    try:
        write_pcap(path, frames)
    except PcapError as exc:
        raise UsageError(str(exc)) from exc
