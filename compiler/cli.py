"""``pfc``: the command line. A thin layer over the pipeline, the backends and the oracle.

Exit codes: 0 success; 1 the policy has errors (or ``fmt --check`` found changes, or a
verification disagreed); 2 bad usage (unknown target, unreadable file, bad option).
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import metadata

from pfc import commands

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pfc", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"pfc {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in commands.all_commands():
        p = sub.add_parser(command.name, help=command.summary, description=command.doc,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        command.arguments(p)
        p.set_defaults(handler=command.handler)
    return parser


def _version() -> str:
    try:
        return metadata.version("pfc")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except commands.UsageError as exc:
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
