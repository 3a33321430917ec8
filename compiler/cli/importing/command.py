"""``pfc import``: an existing firewall (iptables-save, nft, pcap-filter) as a pfc policy.

Exit codes: 0 every rule imported (the policy is written); 1 some rules cannot be said
in pfc (each listed as ``FILE:LINE:COL: cannot import: REASON``, grouped by reason;
the policy is written only with ``--partial``, those rules marked as comments where
they were); 2 bad usage or an input that cannot be read or told apart.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from pfc.cli.common import STDIN_NAME, Command, UsageError, read_stdin
from pfc.cli.output import STDIO, open_output, print_json, shown
from pfc.frontend.diagnostics import Diagnostic, render_text, to_json
from pfc.frontend.source import SourceFile

FORMATS = ("iptables", "nft", "nft-json", "pcap-filter")


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="*", metavar="FILE",
                   help="the ruleset: an iptables-save dump (and, second, its "
                        "ip6tables-save twin), an nft ruleset (`nft list ruleset`, an "
                        "`nft -f` file, `nft -j` JSON) or a pcap-filter expression; `-` "
                        "is standard input")
    p.add_argument("--from", dest="fmt", choices=FORMATS,
                   help="the format (told from the text when not given)")
    p.add_argument("--expr", metavar="EXPR",
                   help="a pcap-filter expression to import (`tcp port 80 and not src "
                        "net 10/8`): the packets tcpdump would capture pass, the rest "
                        "drop")
    p.add_argument("-o", "--output", metavar="OUT.pf",
                   help="write the policy here (set files beside it); default: "
                        "standard output")
    p.add_argument("--root", metavar="DIR",
                   help="read an nft file's absolute includes under DIR (a copy of a "
                        "host's /etc: `include \"/etc/nftables.d/x.nft\"` is "
                        "DIR/etc/nftables.d/x.nft)")
    p.add_argument("--partial", action="store_true",
                   help="write the policy even when rules cannot be imported (they "
                        "stay as comments where they were); the exit code is still 1")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: refusals on stderr; json: one report object on stdout "
                        "(the policy then goes only to -o)")


def _sources(args: argparse.Namespace) -> list[str]:
    if args.expr is not None and args.fmt not in (None, "pcap-filter"):
        raise UsageError("--expr is a pcap-filter expression; it goes with "
                         "`--from pcap-filter`")
    if args.expr is not None:
        args.fmt = "pcap-filter"
    if not args.files and args.expr is None:
        raise UsageError("give a FILE to import (`-` for standard input) or --expr")
    if len(args.files) > 2 or (args.expr is not None and args.files):
        raise UsageError("pfc import takes one ruleset: FILE, or an iptables-save dump "
                         "and its ip6tables-save twin, or --expr")
    if len(args.files) == 2 and args.fmt not in (None, "iptables"):
        raise UsageError("a second FILE is the ip6tables-save twin of an iptables-save "
                         "dump")
    return args.files


def _import(args: argparse.Namespace):
    from pfc.importers.driver import UnknownFormat, import_sources, read_input
    files = _sources(args)
    sources = [SourceFile("<expr>", args.expr)] if args.expr is not None else []
    for path in files:
        sources.append(_read(path, read_input))
    name = Path(args.output).name if args.output and args.output != STDIO else \
        "imported.pf"
    try:
        return import_sources(sources, args.fmt, output_name=name, root=args.root,
                              set_files=args.output not in (None, STDIO))
    except UnknownFormat as exc:
        raise UsageError(shown(str(exc))) from exc


def _read(path: str, read_input) -> SourceFile:
    if path == STDIO:
        return SourceFile.decode(STDIN_NAME, read_stdin("ruleset"))
    try:
        return read_input(path)
    except FileNotFoundError as exc:
        raise UsageError(f"cannot read `{shown(path)}`: no such file") from exc
    except OSError as exc:
        raise UsageError(f"cannot read `{shown(path)}`: {exc.strerror or exc}") from exc


def _run(args: argparse.Namespace) -> int:
    if args.format == "json" and args.output in (None, STDIO) and args.partial:
        raise UsageError("with --format json the report is on standard output: give "
                         "the policy a file (-o OUT.pf)")
    result = _import(args)
    write = result.complete or args.partial
    if write and (args.output not in (None, STDIO) or args.format == "text"):
        _write(result, args.output)
    if args.format == "json":
        print_json(_report(result, args.output if write else None))
    else:
        _print_refusals(result)
    return 0 if result.complete else 1


def _write(result, output: str | None) -> None:
    if output in (None, STDIO):
        sys.stdout.write(result.text)
        return
    with open_output(output) as stream:
        stream.write(result.text.encode())
    folder = Path(output).parent
    for path, text in result.set_files.items():
        with open_output(folder / path) as stream:
            stream.write(text.encode())
    print(f"pfc import: wrote {shown(output)}" + (
        f" and {len(result.set_files)} set file(s)" if result.set_files else ""),
        file=sys.stderr)


def _print_refusals(result) -> None:
    color = sys.stderr.isatty()
    for d in result.remarks:
        print(render_text(d, result.sources, color=color), file=sys.stderr)
    if result.complete:
        return
    groups = _grouped(result.refusals)
    for _reason, diags in groups:
        print(render_text(diags[0], result.sources, color=color), file=sys.stderr)
        for d in diags[1:]:
            print(_line(d, result.sources), file=sys.stderr)
    total = len(result.refusals)
    print(f"pfc import: {total} rule{'s' * (total != 1)} cannot be imported "
          f"({len(groups)} reason{'s' * (len(groups) != 1)}):", file=sys.stderr)
    for reason, diags in groups:
        print(f"  {len(diags):>5}  {shown(reason)}", file=sys.stderr)
    print("pfc import: the policy is not complete; --partial writes it with those rules "
          "as comments", file=sys.stderr)


def _grouped(diags: list[Diagnostic]) -> list[tuple[str, list[Diagnostic]]]:
    by_reason: dict[str, list[Diagnostic]] = defaultdict(list)
    for d in diags:
        by_reason[d.message.removeprefix("cannot import: ")].append(d)
    return sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def _line(d: Diagnostic, sources: dict[str, SourceFile]) -> str:
    src = sources.get(d.span.file)
    line, col = src.position(d.span.start) if src else (0, 0)
    return shown(f"{d.span.file}:{line}:{col}: {d.message}")


def _report(result, output: str | None) -> dict:
    return {"ok": result.complete, "complete": result.complete, "format": result.format,
            "output": output, "rules": result.counts,
            "reasons": [{"reason": r, "count": len(ds)}
                        for r, ds in _grouped(result.refusals)],
            "refusals": [to_json(d, result.sources) for d in result.refusals],
            "remarks": [to_json(d, result.sources) for d in result.remarks]}


IMPORT = Command(
    "import", "import an iptables-save dump, an nft ruleset or a pcap-filter expression",
    "Import an existing firewall as a pfc policy (docs/import.md): iptables-save\n"
    "output (with its ip6tables-save twin as a second FILE), an nft ruleset (text or\n"
    "`nft -j` JSON), or a pcap-filter expression (--expr or a file holding one).\n"
    "Every rule is commented with the source line it came from. A rule pfc cannot\n"
    "say is listed as FILE:LINE:COL: cannot import: REASON (grouped by reason) and\n"
    "nothing is written unless --partial is given (exit 1); exit 0 means every rule\n"
    "was imported.",
    _args, _run)
