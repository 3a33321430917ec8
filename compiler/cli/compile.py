"""``pfc check``, ``pfc fmt``, ``pfc compile`` and ``pfc targets``: the front end and the
backends as commands."""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path

from pfc import api, backends
from pfc.build import backend, write_artifact
from pfc.cli.common import Command, UsageError, load, print_diagnostics
from pfc.frontend.diagnostics import CompileError, Diagnostic, has_errors, to_json
from pfc.frontend.fmt import format_source
from pfc.frontend.source import SourceFile

# ------------------------------------------------------------------------------ check

def _check_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE", help="policy files (.pf)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: FILE:LINE:COL diagnostics with carets on stderr; "
                        "json: one JSON object on stdout")
    p.add_argument("--target", action="append", default=[], metavar="T",
                   help="also report rules target T cannot express (repeatable)")


def _check(args: argparse.Namespace) -> int:
    all_diags: list[Diagnostic] = []
    report = []
    for path in args.files:
        compiled = load(path)
        diags = api.check(compiled, targets=args.target)
        all_diags += diags
        if args.format == "json":
            report.append({"file": path, "ok": not has_errors(diags),
                           "diagnostics": [to_json(d, compiled.sources) for d in diags]})
        else:
            print_diagnostics(diags, compiled.sources)
    if args.format == "json":
        print(json.dumps({"files": report}, indent=2))
    return 1 if has_errors(all_diags) else 0


CHECK = Command("check", "check policies: syntax, types, shadowed rules (exit 1 on errors)",
                "Check policy files. Prints every error and warning as FILE:LINE:COL with the\n"
                "source line and a caret under the offending text. Warnings (e.g. a rule\n"
                "shadowed by an earlier one) do not change the exit code.",
                _check_args, _check)


# -------------------------------------------------------------------------------- fmt

def _fmt_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE", help="policy files (.pf)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="change nothing; print a diff and exit 1 if a file is not "
                           "formatted")
    mode.add_argument("--stdout", action="store_true",
                      help="print the formatted text instead of rewriting the file")


def _fmt(args: argparse.Namespace) -> int:
    status = 0
    for path in args.files:
        try:
            source = SourceFile.read(path)
        except OSError as exc:
            raise UsageError(f"cannot read `{path}`: {exc.strerror}") from exc
        text, diags = format_source(source)
        if text is None:
            print_diagnostics(diags, {source.name: source})
            status = 1
        elif args.stdout:
            sys.stdout.write(text)
        elif args.check:
            if text != source.text:
                sys.stdout.writelines(difflib.unified_diff(
                    source.text.splitlines(True), text.splitlines(True), path, path))
                status = 1
        elif text != source.text:
            Path(path).write_text(text, encoding="utf-8")
            print(f"formatted {path}", file=sys.stderr)
    return status


FMT = Command("fmt", "format policies canonically (in place; --check only reports)",
              "Rewrite policy files in canonical form: one statement per line, single\n"
              "spaces, lists as `{ a, b }`, comments kept and trailing comments aligned.\n"
              "Idempotent, and the policy means exactly the same after formatting.",
              _fmt_args, _fmt)


# ---------------------------------------------------------------------------- compile

def _compile_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="policy file (.pf)")
    p.add_argument("--target", "-t", required=True, metavar="T",
                   help="target: " + ", ".join(backends.registry()) + " (see `pfc targets`)")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="write the artifact here; OUT/ (a directory) keeps each file's own "
                        "name (STEM.TARGET.EXT); without -o the text form goes to stdout")
    p.add_argument("--format", "-f", metavar="F", help="output format (per target; see "
                   "`pfc targets`)")
    p.add_argument("--hook", metavar="H", help="attach point (per target; see `pfc targets`)")
    p.add_argument("--link", choices=tuple(LINK_HOOKS),
                   help="cbpf: where the program reads packets from, as tcpdump -y: ether "
                        "(the Ethernet header: packet sockets, tc; the default) or ip (the "
                        "IP header: iptables -m bpf, like tcpdump -y RAW); the same as "
                        "--hook socket / --hook xt-bpf")
    p.add_argument("--dev", metavar="DEV", help="network device (nft netdev ingress)")
    p.add_argument("--table", default="pfc", metavar="NAME",
                   help="nftables table / iptables chain prefix owned by pfc (default pfc)")
    p.add_argument("--notrack", action="store_true",
                   help="iptables: also exempt matched traffic from conntrack (NOTRACK)")


LINK_HOOKS = {"ether": "socket", "ip": "xt-bpf"}  # cbpf's hooks by the link they read


def _hook(args: argparse.Namespace) -> str | None:
    """``--hook``, or the cbpf hook ``--link`` names (a usage error if they disagree)."""
    if args.link is None:
        return args.hook
    if args.target != "cbpf":
        raise UsageError(f"--link is for target cbpf, not `{args.target}`")
    hook = LINK_HOOKS[args.link]
    if args.hook not in (None, hook):
        raise UsageError(f"--link {args.link} is hook `{hook}`, not `{args.hook}`")
    return hook


def _compile(args: argparse.Namespace) -> int:
    hook = _hook(args)
    compiled = load(args.file)
    if compiled.diagnostics:
        print_diagnostics(compiled.diagnostics, compiled.sources)
    if not compiled.ok:
        return 1
    try:
        artifact = api.compile(compiled, args.target, format=args.format, hook=hook,
                               dev=args.dev, table=args.table, notrack=args.notrack)
    except CompileError as exc:
        print_diagnostics(exc.diagnostics, compiled.sources)
        return 1
    if hook is None and artifact.hook != backend(args.target).hooks[0]:
        print(f"note: compiled for hook `{artifact.hook}` (`pfc targets` explains the "
              "hooks; --hook chooses)", file=sys.stderr)
    if args.output:
        out = Path(args.output)
        if args.output.endswith("/"):
            out.mkdir(parents=True, exist_ok=True)
        for path in write_artifact(artifact, out):
            print(f"wrote {path}", file=sys.stderr)
    elif artifact.text is None:
        raise UsageError(f"format `{artifact.format}` is binary: write it with -o FILE")
    else:
        sys.stdout.write(artifact.text)
    return 0


COMPILE = Command("compile", "compile a policy for one target",
                  "Compile a policy for one target and print it, or write it with -o.\n"
                  "Rules the target cannot express are errors naming the targets that can;\n"
                  "nothing is dropped silently. `pfc targets` lists targets, hooks, formats.",
                  _compile_args, _compile)


# ---------------------------------------------------------------------------- targets

def _targets(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="pfc targets")
    for column in ("target", "hooks", "formats", "supports", "what"):
        table.add_column(column)
    for b in backends.registry().values():
        table.add_row(b.name, ", ".join(b.hooks), ", ".join(b.formats),
                      ", ".join(sorted(b.supports)), b.description)
    Console().print(table)
    return 0


TARGETS = Command("targets", "list targets with their hooks, formats and features",
                  "List every compilation target: its hooks (first is the default), its\n"
                  "output formats (first is the default) and the features it supports.",
                  lambda p: None, _targets)
