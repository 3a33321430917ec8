"""``pfc bench``: per-packet cost of one policy on every hook, with baselines."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime
from pathlib import Path

from pfc.cli.common import Command, UsageError, load, print_diagnostics, read_capture_arg
from pfc.cli.output import (
    OutputError,
    cell,
    check_output_dir,
    print_json,
    shown,
    with_progress,
)


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="policy file (.pf)")
    p.add_argument("--targets", default="all", metavar="LIST",
                   help="comma-separated: xdp,tc,cbpf,socket,nft,iptables,nfmod,u32,"
                        "userspace,userspace+ct, or `all` (default; targets that cannot "
                        "express the policy, or that this kernel cannot load, are then "
                        "skipped). A "
                        "whole firewall: loads to compare, each a target or A+B as "
                        "compile's A,B (default: nft, iptables, and xdp+nft, tc+nft when "
                        "it has an ingress block)")
    p.add_argument("--baselines", default="all", metavar="LIST",
                   help="comma-separated: none,nft-naive,iptables-naive,xdp-filter, "
                        "`all` (default) or `none`")
    p.add_argument("--duration", type=float, default=2.0, metavar="S",
                   help="seconds of traffic per target and baseline (default 2)")
    p.add_argument("--packets", type=int, metavar="N",
                   help="send at most N frames per target and baseline")
    p.add_argument("--repeat", type=int, default=100_000, metavar="N",
                   help="BPF_PROG_TEST_RUN repetitions per frame (default 100000)")
    p.add_argument("--pcap", type=Path, metavar="FILE",
                   help="send these frames instead of the ones picked from the policy "
                        "(`-`: standard input)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: a table; json: one object on stdout (docs/json.md)")
    p.add_argument("--plot", type=Path, metavar="OUT.png",
                   help="write bar charts (PNG); the directory must exist")
    p.add_argument("--seed", type=int, default=0, metavar="S",
                   help="seed for picking frames (default 0)")
    p.add_argument("--rounds", type=int, default=3, metavar="N",
                   help="whole firewalls, and --kernel: rounds, the median reported "
                        "(default 3)")
    p.add_argument("--kernel", metavar="SERIES",
                   help="run the bench inside a kernel-lab guest (5.10, 6.1, 6.12: "
                        "docs/kernels.md), where nfmod and u32 load; ratios to xdp")


def _list(spec: str, known: tuple[str, ...], what: str) -> tuple[list[str], bool]:
    if spec == "all":
        return list(known), False
    chosen = [t.strip() for t in spec.split(",") if t.strip()]
    for t in chosen:
        if t not in known:
            raise UsageError(f"unknown {what} `{t}`; known: {', '.join(known)}")
    return chosen, True


def _bench(args: argparse.Namespace) -> int:
    from pfc.bench import measure as bench

    if args.duration <= 0 or (args.packets is not None and args.packets < 1) \
            or args.repeat < 1:
        raise UsageError("--duration, --packets and --repeat must be positive")
    if args.plot:
        check_output_dir(args.plot, "--plot")
    compiled = load(args.file)
    if not compiled.ok:
        print_diagnostics(compiled.diagnostics, compiled.sources)
        return 1
    if compiled.ruleset is not None:
        from pfc.cli.firewall.bench import bench_firewall

        return bench_firewall(args, compiled)
    targets, explicit = _list(args.targets, bench.TARGETS, "target")
    baselines, _ = _list(args.baselines, bench.BASELINES, "baseline")
    if args.kernel:
        return _bench_in_lab(args, compiled, targets)
    why = bench.missing_privileges()
    if why:
        raise UsageError(why)
    frames = _pcap(args.pcap) if args.pcap else None
    req = bench.Request(args.file, compiled, targets, baselines, args.duration,
                        args.packets, args.repeat, args.seed, frames)
    try:
        notes = bench.compile_targets(req, explicit)
        result = _measure(req, args.format == "json")
    except bench.BenchError as exc:
        print(f"pfc bench: {shown(str(exc))}", file=sys.stderr)
        return 1
    result["notes"] = notes
    if args.format == "json":
        print_json(result)
    else:
        print_table(result, notes)
    if args.plot:
        _plot(result, args.plot)
    return 0


def _bench_in_lab(args: argparse.Namespace, compiled, targets: list[str]) -> int:
    """``--kernel SERIES``: the same command in a lab guest (``pfc.bench.lab``)."""
    from pfc.bench import lab as bench_lab
    from pfc.bench import measure as bench
    from pfc.bench import report as bench_report

    if args.pcap is not None and str(args.pcap) == "-":
        raise UsageError("--kernel reads --pcap from a file (the guest sees the host's "
                         "files), not from standard input")
    if args.rounds < 1:
        raise UsageError("--rounds must be positive")
    argv = ["--targets", ",".join(targets), "--baselines", args.baselines,
            "--duration", str(args.duration), "--repeat", str(args.repeat),
            "--seed", str(args.seed)]
    argv += ["--packets", str(args.packets)] if args.packets else []
    argv += ["--pcap", str(args.pcap.resolve())] if args.pcap else []
    try:
        result = with_progress(
            lambda _, tick=None: bench_lab.run(compiled, args.file, args.kernel, argv,
                                               args.rounds, targets, tick),
            None, args.format == "json", f"bench in {args.kernel}")
    except bench.BenchError as exc:
        print(f"pfc bench: {shown(str(exc))}", file=sys.stderr)
        return 1
    if args.format == "json":
        print_json(result)
    else:
        print_table(result, result.get("notes", []))
        for line in bench_report.ratio_lines(result):
            print(shown(line))
    if args.plot:
        _plot(result, args.plot)
    return 0


def _measure(req, quiet: bool) -> dict:
    from pfc.bench import report as bench_report

    started, clock = datetime.now(), time.monotonic()
    result = _run_with_progress(req, quiet)
    return bench_report.stamp(result, started, time.monotonic() - clock)


def _plot(result: dict, path: Path) -> None:
    from pfc.bench import report as bench_report

    try:
        bench_report.plot(result, path)
    except OSError as exc:
        raise OutputError(f"`{shown(str(path))}`", exc) from exc
    print(f"wrote {shown(str(path))}", file=sys.stderr)


def _pcap(path: Path) -> list[bytes]:
    capture = read_capture_arg(str(path))
    if not capture.frames:
        raise UsageError(f"`{shown(str(path))}` holds no frames")
    return capture.frames


def _run_with_progress(req, quiet: bool) -> dict:
    from pfc.bench import measure as bench

    return with_progress(bench.run, req, quiet)


# ------------------------------------------------------------------------- rendering

def renderable(report: dict, width: int):
    """The table when it fits ``width`` columns without cutting a word (an 80-column
    terminal does not fit nine columns); otherwise one block per row, label and value,
    so no number is ever cut or broken."""
    from rich.console import Console, Group
    from rich.measure import Measurement
    from rich.table import Table

    from pfc.bench.report import COLUMNS, table_rows

    title = cell(f"pfc bench {report['file']} ({report['duration']} s of traffic per "
                 f"row, test runs ×{report['repeat']})")
    rows = [tuple(cell(c) for c in row) for row in table_rows(report)]
    table = Table(title=title)
    for i, col in enumerate(COLUMNS):
        table.add_column(col, justify="left" if i < 2 else "right", overflow="fold")
    for row in rows:
        table.add_row(*row)
    wide = Console(width=10_000)
    if Measurement.get(wide, wide.options, table).minimum <= width:
        return table
    blocks = [title]
    for row in rows:
        grid = Table(show_header=False, box=None, padding=(0, 1))
        grid.add_column(style="dim")
        grid.add_column(overflow="fold")
        for label, value in zip(COLUMNS[1:], row[1:], strict=True):
            if value.plain:
                grid.add_row(label, value)
        blocks += [cell(""), cell(row[0].plain, "bold"), grid]
    return Group(*blocks)


def print_table(report: dict, notes: list[str], console=None) -> None:
    """The table (or blocks), then each row's full status, the frames sent (hex) and
    the notes; piped, 200 columns wide."""
    from rich.console import Console

    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=200)
    console.print(renderable(report, console.width))
    lines = [f"  {r['name']}: {r['status']}" for r in report["rows"] if r["status"] != "ok"]
    lines += [f"  frame ({f['verdict']}): {f['hex']}" for f in report["frames"]]
    lines += [f"  note: {note}" for note in notes]
    for line in lines:
        console.print(cell(line))


BENCH = Command("bench", "measure per-packet cost of a policy on every hook, with baselines",
                "Attach the policy for each target in a throw-away namespace (a veth pair)\n"
                "and measure it the same way for every hook: BPF_PROG_TEST_RUN ns/packet\n"
                "for the eBPF targets, and real traffic through the veth for all: packets/s,\n"
                "packets dropped by the policy (checked against the interpreter), CPU time\n"
                "per packet including softirq (and the user-space filter's process), latency\n"
                "of passing probes. The user-space rows: a process reading an AF_PACKET\n"
                "ring runs the policy's classic BPF, without and with a connection table.\n"
                "Baselines in the same run: no filter, a naive per-rule nft chain and\n"
                "iptables chain, and xdp-filter where installed. Needs root. See\n"
                "docs/bench.md.",
                _args, _bench)
