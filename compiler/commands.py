"""The CLI's commands: each a name, a summary, its arguments and a handler.

Handlers return the exit code and raise :class:`UsageError` for bad usage (exit 2).
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pfc import backends
from pfc.backends.base import Artifact, Options, capability_errors
from pfc.diagnostics import CompileError, Diagnostic, has_errors, render_text, to_json
from pfc.fmt import format_source
from pfc.pipeline import Compiled, compile_path, paused_gc
from pfc.source import SourceFile


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
        diags = list(compiled.diagnostics)
        if compiled.policy is not None:
            for target in args.target:
                diags += capability_errors(compiled.policy, _backend(target),
                                           backends.registry())
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
    p.add_argument("--dev", metavar="DEV", help="network device (nft netdev ingress)")
    p.add_argument("--table", default="pfc", metavar="NAME",
                   help="nftables table / iptables chain prefix owned by pfc (default pfc)")
    p.add_argument("--notrack", action="store_true",
                   help="iptables: also exempt matched traffic from conntrack (NOTRACK)")


def build_artifact(compiled: Compiled, target: str, fmt: str | None = None,
                   **options) -> tuple[Artifact | None, list[Diagnostic]]:
    """Compile a checked policy for one target: capability check, passes, emit."""
    backend = _backend(target)
    policy = compiled.require()
    diags = capability_errors(policy, backend, backends.registry())
    if diags:
        return None, diags
    fmt = fmt or backend.formats[0]
    if fmt not in backend.formats:
        raise UsageError(f"target `{target}` has no format `{fmt}`; formats: "
                         + ", ".join(backend.formats))
    hook = options.pop("hook", None) or backend.hooks[0]
    if hook not in backend.hooks:
        raise UsageError(f"target `{target}` has no hook `{hook}`; hooks: "
                         + ", ".join(backend.hooks))
    try:
        with paused_gc():  # lowering 100k-entry sets makes ~10^6 objects, none in a cycle
            artifact = backend.emit(backend.lower(policy),
                                    Options(target, fmt, hook, **options))
    except CompileError as exc:
        return None, exc.diagnostics
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    return artifact, []


def _backend(target: str):
    try:
        return backends.get(target)
    except KeyError as exc:
        raise UsageError(exc.args[0]) from exc


def _compile(args: argparse.Namespace) -> int:
    compiled = load(args.file)
    if compiled.diagnostics:
        print_diagnostics(compiled.diagnostics, compiled.sources)
    if not compiled.ok:
        return 1
    artifact, diags = build_artifact(compiled, args.target, args.format, hook=args.hook,
                                     dev=args.dev, table=args.table, notrack=args.notrack)
    if artifact is None:
        print_diagnostics(diags, compiled.sources)
        return 1
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


def write_artifact(artifact: Artifact, out: Path) -> list[Path]:
    """Write an artifact's files. ``out`` a directory (existing, or written with a
    trailing ``/``): every file under its own name there. Otherwise the main file to
    ``out`` and the others beside it, named ``out``'s stem + their own tail."""
    names = list(artifact.files)
    if out.is_dir() or str(out).endswith("/"):
        out.mkdir(parents=True, exist_ok=True)
        paths = [out / name for name in names]
    else:
        main_stem = names[0].split(".", 1)[0]
        stem = out.name.split(".", 1)[0]
        paths = [out] + [out.with_name(stem + name[len(main_stem):]) for name in names[1:]]
    for name, path in zip(names, paths, strict=True):
        path.write_bytes(artifact.files[name])
    return paths


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


def all_commands() -> tuple[Command, ...]:
    """Every command, in `pfc --help` order (imported late: they import this module)."""
    from pfc.cmd_bench import BENCH
    from pfc.cmd_load import LOAD, STATUS, UNLOAD
    from pfc.cmd_lsp import LSP
    from pfc.cmd_run import FRAMES, RUN
    from pfc.cmd_verify import VERIFY
    return (CHECK, FMT, COMPILE, RUN, FRAMES, VERIFY, BENCH, LOAD, UNLOAD, STATUS, TARGETS, LSP)

