"""What every CLI command shares: the :class:`Command` record, usage errors, reading a
policy (``-`` is standard input), printing diagnostics.

Handlers return the exit code and raise :class:`UsageError` for bad usage (exit 2).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

from pfc.cli.output import STDIO, UsageError, shown
from pfc.frontend.diagnostics import Diagnostic, render_text
from pfc.frontend.pipeline import Compiled, compile_path, compile_source
from pfc.frontend.source import SourceFile

__all__ = ["STDIN_NAME", "Command", "UsageError", "load", "print_diagnostics",
           "read_capture_arg", "read_stdin", "shown", "stdin_source", "target_specs"]

STDIN_NAME = "<stdin>"  # the file name diagnostics give a policy read from `-`
MAX_STDIN = 64 << 20  # bytes: more on standard input is refused (`pfc check - < /dev/zero`)


@dataclass(frozen=True)
class Command:
    name: str
    summary: str
    doc: str
    arguments: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace], int]


class _Context:
    """What the running command is reading: the policy file an internal error names,
    and whether standard input was already read (it can be read once)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.file: str | None = None
        self.stdin_used_for: str | None = None


CONTEXT = _Context()


def claim_stdin(what: str) -> None:
    """Standard input is read for ``what`` (``policy``, ``capture``); a usage error
    when something else already read it (`pfc run - -`)."""
    if CONTEXT.stdin_used_for is not None:
        raise UsageError(f"standard input (`-`) can be read once; it already held the "
                         f"{CONTEXT.stdin_used_for}")
    CONTEXT.stdin_used_for = what


def read_stdin(what: str) -> bytes:
    """All of standard input, for ``what``; a usage error when it was read already or
    holds more than MAX_STDIN bytes."""
    claim_stdin(what)
    data = sys.stdin.buffer.read(MAX_STDIN + 1)
    if len(data) > MAX_STDIN:
        raise UsageError(f"standard input holds more than {MAX_STDIN >> 20} MiB; "
                         f"a {what} that large is not read from `-`")
    return data


def stdin_source() -> SourceFile:
    """The policy on standard input, named ``<stdin>``."""
    data = read_stdin("policy")
    try:
        return SourceFile(STDIN_NAME, data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise UsageError(f"cannot read {STDIN_NAME}: not UTF-8 (byte "
                         f"0x{data[exc.start]:02x} on line {line})") from None


def target_specs(values: list[str]) -> list[str]:
    """``--target`` values as ``pfc check`` (and verify/prove's ``--targets``) take
    them: each ``T``, ``T:HOOK`` or a comma list of those; every target and hook known
    (a UsageError naming the known ones otherwise), duplicates dropped."""
    from pfc import backends

    known = backends.registry()
    out: list[str] = []
    for value in values:
        for spec in (s.strip() for s in value.split(",")):
            if not spec:
                raise UsageError(f"--target {shown(value)}: an empty target in the list")
            name, colon, hook = spec.partition(":")
            if name not in known:
                raise UsageError(f"unknown target `{shown(name)}`; known targets: "
                                 + ", ".join(known))
            if colon and hook not in known[name].hooks:
                raise UsageError(f"target `{name}` has no hook `{shown(hook)}`; hooks: "
                                 + ", ".join(known[name].hooks))
            if spec not in out:
                out.append(spec)
    return out


def load(path: str) -> Compiled:
    """The front end's result for a policy file, or for standard input when ``path``
    is ``-`` (named ``<stdin>`` in diagnostics; set files relative to the current
    directory). An unreadable file is a :class:`UsageError` naming it."""
    CONTEXT.file = STDIN_NAME if path == STDIO else path
    if path == STDIO:
        return compile_source(stdin_source())
    try:
        return compile_path(path)
    except FileNotFoundError as exc:
        raise UsageError(f"cannot read `{shown(path)}`: no such file") from exc
    except OSError as exc:
        raise UsageError(f"cannot read `{shown(path)}`: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read `{shown(path)}`: {exc}") from exc


def print_diagnostics(diags: list[Diagnostic], sources: dict[str, SourceFile]) -> None:
    color = sys.stderr.isatty()
    for d in diags:
        print(render_text(d, sources, color=color), file=sys.stderr)
    errors = sum(d.severity == "error" for d in diags)
    warnings = len(diags) - errors
    if errors:
        print(f"{errors} error{'s' * (errors != 1)}"
              + (f", {warnings} warning{'s' * (warnings != 1)}" if warnings else ""),
              file=sys.stderr)


def read_capture_arg(path: str):
    """The capture a PCAP argument names (`-`: standard input); a UsageError if it
    cannot be read."""
    from pfc.oracle.pcap import PcapError, read_capture

    try:
        if path == STDIO:
            claim_stdin("capture")
            return read_capture(sys.stdin.buffer)
        return read_capture(path)
    except PcapError as exc:
        raise UsageError(shown(str(exc))) from exc
