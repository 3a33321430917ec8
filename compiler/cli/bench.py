"""``pfc bench``: per-packet cost of one policy on every hook, with baselines."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pfc.cli.common import Command, UsageError, load, print_diagnostics


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="policy file (.pf)")
    p.add_argument("--targets", default="all", metavar="LIST",
                   help="comma-separated: xdp,tc,socket,nft,iptables, or `all` (default; "
                        "targets that cannot express the policy are then skipped)")
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
                   help="send these frames instead of the ones picked from the policy")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: a table; json: one object on stdout")
    p.add_argument("--plot", type=Path, metavar="OUT.png", help="write a bar chart (PNG)")
    p.add_argument("--seed", type=int, default=0, metavar="S",
                   help="seed for picking frames (default 0)")


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
    from pfc.bench import report as bench_report

    targets, explicit = _list(args.targets, bench.TARGETS, "target")
    baselines, _ = _list(args.baselines, bench.BASELINES, "baseline")
    if args.duration <= 0 or (args.packets is not None and args.packets < 1) \
            or args.repeat < 1:
        raise UsageError("--duration, --packets and --repeat must be positive")
    compiled = load(args.file)
    if not compiled.ok:
        print_diagnostics(compiled.diagnostics, compiled.sources)
        return 1
    frames = _pcap(args.pcap) if args.pcap else None
    req = bench.Request(args.file, compiled, targets, baselines, args.duration,
                        args.packets, args.repeat, args.seed, frames)
    try:
        why = bench.missing_privileges()
        if why:
            raise bench.BenchError(why)
        notes = bench.compile_targets(req, explicit)
        result = _run_with_progress(req, args.format == "json")
    except bench.BenchError as exc:
        print(f"pfc bench: {exc}", file=sys.stderr)
        return 1
    if args.format == "json":
        print(bench_report.to_json(dict(result, notes=notes)))
    else:
        bench_report.print_table(result, notes)
    if args.plot:
        path = bench_report.plot(result, args.plot)
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _pcap(path: Path) -> list[bytes]:
    from pfc.oracle.pcap import PcapError, read_pcap

    try:
        frames = read_pcap(path)
    except (OSError, PcapError) as exc:
        raise UsageError(f"cannot read `{path}`: {exc}") from exc
    if not frames:
        raise UsageError(f"`{path}` holds no frames")
    return frames


def _run_with_progress(req, quiet: bool) -> dict:
    from rich.console import Console
    from rich.progress import Progress

    from pfc.bench import measure as bench

    if quiet or not sys.stderr.isatty():
        return bench.run(req)
    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("bench", total=1.0)

        def tick(name: str, fraction: float) -> None:
            progress.update(task, completed=fraction, description=f"bench: {name}")

        return bench.run(req, tick)


BENCH = Command("bench", "measure per-packet cost of a policy on every hook, with baselines",
                "Attach the policy for each target in a throw-away namespace (a veth pair)\n"
                "and measure it the same way for every hook: BPF_PROG_TEST_RUN ns/packet\n"
                "for the eBPF targets, and real traffic through the veth for all: packets/s,\n"
                "packets dropped by the policy (checked against the interpreter), CPU time\n"
                "per packet including softirq, latency of passing probes. Baselines in the\n"
                "same run: no filter, a naive per-rule nft chain and iptables chain, and\n"
                "xdp-filter where installed. Needs root. See docs/bench.md.",
                _args, _bench)
