"""``pfc set add|del|replace NAME ADDR... | --file F --dev DEV [--target T]``: change a
loaded policy's address set in place, atomically (docs/operate.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pfc.cli.common import Command, UsageError
from pfc.cli.output import print_json, shown


def _set_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("op", choices=("add", "del", "replace"),
                   help="add entries, delete them, or replace the whole set")
    p.add_argument("name", metavar="NAME", help="the policy's `set NAME = file ...`")
    p.add_argument("entries", nargs="*", metavar="ADDR",
                   help="addresses or prefixes (IPv4 and IPv6 may mix)")
    p.add_argument("--file", "-f", metavar="F",
                   help="read the entries from F (the set file format; `-`: stdin)")
    p.add_argument("--dev", required=True, metavar="DEV", help="network device")
    p.add_argument("--target", "-t", metavar="T",
                   help="xdp, tc, nft or iptables (default: every policy pfc loaded on DEV)")
    p.add_argument("--netns", metavar="NS", help="network namespace (default: current)")
    p.add_argument("--format", choices=("text", "json"), default="text")


def _entries(args: argparse.Namespace) -> list[str]:
    if args.file and args.entries:
        raise UsageError("give entries as arguments or with --file, not both")
    if args.file == "-":
        from pfc.cli.common import read_stdin

        return read_stdin("set entries").decode("utf-8", "replace").split("\n")
    if args.file:
        try:
            return Path(args.file).read_text(encoding="utf-8").split("\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {args.file}: {exc}") from None
    if not args.entries and args.op != "replace":
        raise UsageError(f"`pfc set {args.op}` needs entries (arguments or --file)")
    return args.entries


def _set(args: argparse.Namespace) -> int:
    from pfc import api
    from pfc.deploy.base import LoadError

    entries = _entries(args)
    try:
        changes = api.set_entries(args.op, args.name, entries, args.dev,
                                  target=args.target, netns=args.netns,
                                  label=args.file or "<command line>")
    except LoadError as exc:
        if args.format == "json":
            print_json({"error": shown(exc.cause)})
        print(shown(f"pfc set: error: {exc.cause}"), file=sys.stderr)
        if exc.hint:
            print(shown(f"hint: {exc.hint}"), file=sys.stderr)
        return 2
    if args.format == "json":
        print_json({"changes": [vars(c) for c in changes]})
        return 0
    for note in (n for c in changes for n in c.notes):
        print(shown(note), file=sys.stderr)
    for c in changes:
        print(shown(f"set {c.name} on {c.dev} ({c.target}): {c.size} entries, +{c.added} "
                    f"-{c.removed}, {c.how}, {c.seconds:.3f} s"))
    return 0


SET = Command("set", "add, delete or replace a loaded set's entries in place (atomic)",
              "Change the entries of a `set NAME = file` of the policy pfc loaded on a\n"
              "device, without reloading it: nft one transaction, iptables an ipset\n"
              "swap, xdp/tc a map swapped into its slot (counters kept); sets the\n"
              "backend compiled into the rules (and eBPF sets used twice): an atomic\n"
              "replace of the policy recompiled with the new entries. Every packet sees\n"
              "the old set or the new one; an iptables policy's two families change\n"
              "together or not at all. The change lasts until the policy is loaded\n"
              "again (pfc load, or pfc apply of a changed config): the file's entries\n"
              "then win. A `pfc set` that was interrupted is finished or rolled back\n"
              "by the next pfc command. Exit: 0 done, 2 refused (the error says what\n"
              "the kernel holds).",
              _set_args, _set)
