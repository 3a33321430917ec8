"""``pfc verify`` of a whole firewall: each target list through the host lab, as a
table (text) or an entry of verify's JSON report (docs/verify.md "Whole firewalls")."""

from __future__ import annotations

import argparse
import sys

from rich.markup import escape

from pfc import api
from pfc.cli.common import print_diagnostics
from pfc.cli.output import cell, shown

DEFAULT_PACKETS = 300  # generated packets per list (conversations come on top)


def lists(args: argparse.Namespace) -> list[str]:
    """The target lists for a whole firewall: each ``--target LIST``; else each target
    ``--targets`` names, alone (``all``: nft and iptables); else nft."""
    if args.target:
        return list(args.target)
    if args.targets in (None, ""):
        return []
    if args.targets == "all":
        return ["nft", "iptables"]
    return [t.strip() for t in args.targets.split(",") if t.strip()]


def verify(args: argparse.Namespace, compiled):
    """Every list's result for one file (a progress bar on a terminal)."""
    if args.pcap is not None:
        from pfc.cli.common import UsageError

        raise UsageError(f"`{shown(compiled.source.name)}` is a whole firewall: it is "
                         "verified on traffic built for its host; --pcap is for one rule "
                         "list (`pfc run FILE PCAP --iif DEV` walks a capture through it)")
    chosen = lists(args)
    packets = args.frames or DEFAULT_PACKETS

    def run(progress=None, tick=None):
        return api.verify_firewall(compiled, chosen, packets=packets, seed=args.seed,
                                   progress=progress, tick=tick)

    if args.format == "json" or not sys.stderr.isatty():
        return run()
    from rich.console import Console
    from rich.progress import Progress

    path = shown(compiled.source.name)
    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(escape(f"verify {path}"), total=None)
        return run(lambda t: bar.update(task, description=escape(f"verify {path}: {t}")),
                   lambda n: bar.update(task, completed=n + 1))


def to_json(compiled, results, packets: int) -> dict:
    return {"file": compiled.source.name, "firewall": True, "generated_packets": packets,
            "targets": [r.to_json(compiled.sources) for r in results]}


def show(compiled, results) -> None:
    """The table, then plain lines: the differences, the reasons, the diagnostics."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=cell(f"pfc verify {compiled.source.name} (whole firewall)"),
                  show_edge=False)
    for col in ("target", "packets", "agree", "disagree", "status"):
        table.add_column(col, overflow="fold",
                         justify="left" if col in ("target", "status") else "right")
    for r in results:
        rep = r.report
        counts = (rep.items, rep.agree, rep.items - rep.agree) if rep else ("-",) * 3
        table.add_row(cell(r.target), *(str(x) for x in counts), _status(r))
    Console().print(table)
    for r in results:
        _details(compiled, r)


def _status(r):
    text, style = {"agree": ("agree", "green"), "disagree": ("DISAGREE", "red"),
                   "not-expressible": ("not expressible", "red"),
                   "compiled-only": ("compiled only", "yellow")}[r.status]
    return cell(text, style)


def _details(compiled, r) -> None:
    if r.status == "compiled-only":
        print(f"  {r.target}: compiled only, not run: {shown(r.reason)}")
    if r.diagnostics:
        print_diagnostics(r.diagnostics, compiled.sources)
    if r.report is not None and r.report.differences:
        diffs = r.report.differences
        print(f"  {r.target}: {len(diffs)} difference{'s' * (len(diffs) != 1)} with the "
              "path interpreter; the first:")
        for d in diffs[:5]:
            print(f"    {shown(d.describe())}")
