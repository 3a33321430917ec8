"""``pfc bench`` of a whole firewall (v2): the loads side by side with no firewall
(:mod:`pfc.bench.firewall`)."""

from __future__ import annotations

import argparse
import time
from datetime import datetime

from pfc.cli.common import UsageError
from pfc.cli.output import cell, print_json, shown, with_progress


def bench_firewall(args: argparse.Namespace, compiled) -> int:
    from pfc.bench import firewall as fwbench
    from pfc.bench import measure
    from pfc.bench import report as bench_report

    _refuse_v1_options(args)
    try:
        loads = fwbench.default_loads(compiled.ruleset) if args.targets == "all" \
            else fwbench.parse_loads(args.targets)
    except ValueError as exc:
        raise UsageError(f"--targets: {shown(str(exc))}") from None
    why = measure.missing_privileges()
    if why:
        raise UsageError(why)
    req = fwbench.Request(compiled.ruleset, args.file, compiled.source.text,
                          compiled.rule_text, loads, args.duration, args.rounds,
                          seed=args.seed)
    started, clock = datetime.now(), time.monotonic()
    result = with_progress(fwbench.run, req, args.format == "json")
    result = bench_report.stamp(result, started, time.monotonic() - clock)
    if args.format == "json":
        print_json(result)
    else:
        print_table(result)
    return 0


def _refuse_v1_options(args: argparse.Namespace) -> None:
    given = [name for name, value in (("--pcap", args.pcap), ("--plot", args.plot),
                                      ("--packets", args.packets)) if value is not None]
    if args.baselines not in ("all", "none"):
        given.append("--baselines")
    if given:
        raise UsageError(f"{', '.join(given)}: not for a whole firewall (it is measured "
                         "against no firewall, with the frames `pfc verify` sends)")
    if args.rounds < 1:
        raise UsageError("--rounds must be positive")


def print_table(report: dict, console=None) -> None:
    """One row per load (``none`` first), per interface ns/frame and the ratio to no
    firewall; then each row that did not run, with why."""
    from rich.console import Console
    from rich.table import Table

    from pfc.bench.firewall import table_rows

    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=200)
    columns, rows = table_rows(report)
    table = Table(title=cell(f"pfc bench {report['file']} (whole firewall; "
                             f"{report['seconds']} s per interface and load, median of "
                             f"{report['rounds']} rounds)"))
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i == 0 else "right", overflow="fold")
    for row in rows:
        table.add_row(*(cell(c) for c in row))
    console.print(table)
    frames = ", ".join(f"{n} on {p}" for p, n in report["frames"].items())
    console.print(cell(f"  frames: {frames} (what `pfc verify` sends), sent in a cycle"))
    for row in report["rows"]:
        if row["status"] != "ok":
            console.print(cell(f"  {row['name']}: {row['status']}"))
