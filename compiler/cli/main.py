"""``pfc``: the command line. A thin layer over the pipeline, the backends and the oracle.

Exit codes: 0 success; 1 the policy has errors (or ``fmt --check`` found changes, or a
verification disagreed); 2 bad usage (unknown target, unreadable file, bad option).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from importlib import metadata

from pfc.build import OptionError
from pfc.cli.bench import BENCH
from pfc.cli.common import Command, UsageError
from pfc.cli.compile import CHECK, COMPILE, FMT, TARGETS
from pfc.cli.load import LOAD, STATUS, UNLOAD
from pfc.cli.lsp import LSP
from pfc.cli.prove import DIFF, PROVE
from pfc.cli.run import FRAMES, RUN
from pfc.cli.verify import VERIFY

# Every command, in `pfc --help` order.
COMMANDS: tuple[Command, ...] = (CHECK, FMT, COMPILE, RUN, FRAMES, VERIFY, DIFF, PROVE, BENCH,
                                 LOAD, UNLOAD, STATUS, TARGETS, LSP)

DESCRIPTION = """\
pfc compiles one packet-filter policy language to every Linux hook (classic BPF, eBPF
socket filters, tc and XDP programs, nftables rulesets, iptables scripts) and proves
that the copies agree with a reference interpreter.

A policy is a file of rules, one per line, tried top to bottom:

    define dut = 192.168.0.79
    default pass
    drop udp dst $dut dport 12345
    count icmp
    redirect udp dst 192.168.64.2 dport 8080 to 10.0.1.2:8083
"""

EPILOG = """\
examples:
  pfc check examples/*.pf                 check every example
  pfc compile edge.pf --target cbpf --format asm
  pfc compile edge.pf --target xdp -o edge.o
  pfc frames edge.pf -n 1000 -o frames.pcap && pfc run edge.pf frames.pcap

`pfc COMMAND --help` explains each command. Docs: README.md and docs/ in the source tree.
"""


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with ``argv``, only the command it names gets its options (some
    import heavy modules: ``lsp``'s load the LSP types, ~0.25 s), the others their names
    and summaries for ``pfc --help``."""
    wanted = _command_word(argv)
    parser = argparse.ArgumentParser(
        prog="pfc", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"pfc {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.summary, description=command.doc,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        if wanted in (None, command.name):
            command.arguments(p)
        p.set_defaults(handler=command.handler)
    return parser


def _command_word(argv: list[str] | None) -> str | None:
    """The command ``argv`` names (its first word that is not an option), or None."""
    if argv is None:
        return None
    words = [a for a in argv if not a.startswith("-")]
    names = {c.name for c in COMMANDS}
    return words[0] if words and words[0] in names else None


def _version() -> str:
    try:
        return metadata.version("pfc")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def main(argv: list[str] | None = None) -> int:
    """The program (``argv`` None: ``sys.argv``). As the program, the objects left at
    exit are frozen out of the collector: interpreter shutdown would otherwise walk them
    again and again (1.2 s after a 100k-entry compile)."""
    if argv is None:
        try:
            return _main(sys.argv[1:])
        finally:
            gc.freeze()
    return _main(argv)


def _main(argv: list[str]) -> int:
    args = build_parser(argv).parse_args(argv)
    try:
        return args.handler(args)
    except (UsageError, OptionError) as exc:
        _fail(args, str(exc))
        return 2
    except KeyboardInterrupt:
        print("pfc: interrupted", file=sys.stderr)
        return 130


def _fail(args: argparse.Namespace, message: str) -> None:
    if getattr(args, "format", None) == "json" and args.command in ("check", "run"):
        print(json.dumps({"error": message}))
    else:
        print(f"pfc {args.command}: error: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
