"""What every CLI command shares: the :class:`Command` record, usage errors, reading a
policy, printing diagnostics.

Handlers return the exit code and raise :class:`UsageError` for bad usage (exit 2).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

from pfc.frontend.diagnostics import Diagnostic, render_text
from pfc.frontend.pipeline import Compiled, compile_path
from pfc.frontend.source import SourceFile


class UsageError(Exception):
    """Bad usage: unknown target, unreadable file, bad option. Exit code 2."""


@dataclass(frozen=True)
class Command:
    name: str
    summary: str
    doc: str
    arguments: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace], int]


# ------------------------------------------------------------------------ diagnostics

def load(path: str) -> Compiled:
    try:
        return compile_path(path)
    except FileNotFoundError as exc:
        raise UsageError(f"cannot read `{path}`: no such file") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read `{path}`: {exc}") from exc


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
