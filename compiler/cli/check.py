"""``pfc check`` and ``pfc fmt``: the front end as commands. ``-`` is standard input."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from pfc import api
from pfc.cli.common import (
    Command,
    UsageError,
    load,
    print_diagnostics,
    stdin_source,
    target_specs,
)
from pfc.cli.output import STDIO, OutputError, print_json, shown
from pfc.frontend.diagnostics import has_errors, to_json
from pfc.frontend.fmt import format_source
from pfc.frontend.source import SourceFile

# ------------------------------------------------------------------------------ check


def _check_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="policy files (.pf); `-` reads standard input")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: FILE:LINE:COL diagnostics with carets on stderr; "
                        "json: one JSON object on stdout (docs/json.md)")
    p.add_argument("--target", action="append", default=[], metavar="T",
                   help="also report what `pfc compile --target T` refuses (the same "
                        "checks, compile's default hook): T, T:HOOK or a comma list "
                        "(xdp,nft:input); repeatable. For a whole firewall a list is one "
                        "assignment, as compile takes it: blocks none of it carries, rules "
                        "the carrying target cannot express")
    p.add_argument("--dev", metavar="DEV",
                   help="with --target: the device, as compile's --dev (nft:ingress "
                        "needs one)")


def _check(args: argparse.Namespace) -> int:
    """Every file is checked, readable or not: exit 2 if any could not be read, else 1
    if any has errors, else 0."""
    targets = target_specs(args.target)  # bad ones: a usage error before any file
    report, errors, unreadable = [], False, 0
    for path in args.files:
        try:
            compiled = load(path)
        except UsageError as exc:
            unreadable += 1
            if args.format == "json":
                report.append({"file": path, "ok": False, "error": str(exc),
                               "diagnostics": []})
            else:
                print(f"pfc check: error: {exc}", file=sys.stderr)
            continue
        # a whole firewall takes each --target list as one assignment of its blocks
        diags = api.check(compiled, targets=targets if compiled.ruleset is None
                          else args.target, dev=args.dev)
        errors |= has_errors(diags)
        if args.format == "json":
            report.append({"file": compiled.source.name, "ok": not has_errors(diags),
                           "error": None,
                           "diagnostics": [to_json(d, compiled.sources) for d in diags]})
        else:
            print_diagnostics(diags, compiled.sources)
    if args.format == "json":
        print_json({"ok": not (errors or unreadable), "files": report})
    return 2 if unreadable else 1 if errors else 0


CHECK = Command("check", "check policies: syntax, types, shadowed rules (exit 1 on errors)",
                "Check policy files. Prints every error and warning as FILE:LINE:COL with the\n"
                "source line and a caret under the offending text. Warnings (e.g. a rule\n"
                "shadowed by an earlier one) do not change the exit code. Every file is\n"
                "checked: one that cannot be read is reported (one line; in JSON an entry\n"
                "with \"error\") and makes the exit code 2.",
                _check_args, _check)


# -------------------------------------------------------------------------------- fmt

def _fmt_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="policy files (.pf); `-` formats standard input to standard output")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="change nothing; print a diff and exit 1 if a file is not "
                           "formatted")
    mode.add_argument("--stdout", action="store_true",
                      help="print the formatted text instead of rewriting the file")


def _read(path: str) -> SourceFile:
    if path == STDIO:
        return stdin_source()
    try:
        return SourceFile.read(path)
    except OSError as exc:
        raise UsageError(f"cannot read `{shown(path)}`: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read `{shown(path)}`: {exc}") from exc


def _fmt(args: argparse.Namespace) -> int:
    """Every file is formatted (or checked), readable or not, as ``check`` does: exit 2
    if any could not be read, else 1 if any has errors or (``--check``) would change,
    else 0."""
    status, unreadable = 0, 0
    for path in args.files:
        try:
            source = _read(path)
        except UsageError as exc:
            unreadable += 1
            print(f"pfc fmt: error: {exc}", file=sys.stderr)
            continue
        text, diags = format_source(source)
        if text is None:
            print_diagnostics(diags, {source.name: source})
            status = 1
        elif args.check:
            if text != source.text:
                sys.stdout.writelines(difflib.unified_diff(
                    source.text.splitlines(True), text.splitlines(True), source.name,
                    source.name))
                status = 1
        elif args.stdout or path == STDIO:
            sys.stdout.write(text)
        elif text != source.text:
            _rewrite(path, text)
            print(f"formatted {shown(path)}", file=sys.stderr)
    return 2 if unreadable else status


def _rewrite(path: str, text: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise OutputError(f"`{shown(path)}`", exc) from exc


FMT = Command("fmt", "format policies canonically (in place; --check only reports)",
              "Rewrite policy files in canonical form: one statement per line, single\n"
              "spaces, lists as `{ a, b }`, comments kept and trailing comments aligned.\n"
              "Idempotent, and the policy means exactly the same after formatting.\n"
              "`pfc fmt -` reads standard input and writes the result to standard output.\n"
              "Every file is formatted: one that cannot be read is reported (one line)\n"
              "and makes the exit code 2.",
              _fmt_args, _fmt)
