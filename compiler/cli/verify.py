"""``pfc verify``: the equivalence check as a command, for users' CI."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pfc import api, backends
from pfc.cli.common import Command, UsageError, load, print_diagnostics


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE", help="policy files (.pf)")
    p.add_argument("--targets", default="all", metavar="LIST",
                   help="comma-separated targets, TARGET:HOOK for another hook "
                        "(e.g. xdp,nft:input), or `all` (default). Named targets must "
                        "express every rule; with `all`, rules a target cannot express "
                        "are reported, not failed")
    p.add_argument("--frames", type=int, default=2000, metavar="N",
                   help="generated frames per policy (default 2000)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="random seed (default 0)")
    p.add_argument("--pcap-out", type=Path, metavar="DIR",
                   help="where to write the minimal failing pcap (default: ./pfc-verify)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: a table; json: one object for CI systems")


def _targets(spec: str) -> tuple[list[str], bool]:
    known = [t for t in backends.registry() if t != "ir"]
    if spec == "all":
        return known, False
    chosen = [t.strip() for t in spec.split(",") if t.strip()]
    for t in chosen:
        if t.split(":")[0] not in known:
            raise UsageError(f"unknown target `{t}`; known targets: {', '.join(known)}")
    return chosen, True


def _verify(args: argparse.Namespace) -> int:
    targets, explicit = _targets(args.targets)
    if args.frames < 1:
        raise UsageError("--frames must be at least 1")
    report, failed = [], False
    for path in args.files:
        compiled = load(path)
        if not compiled.ok:
            print_diagnostics(compiled.diagnostics, compiled.sources)
            failed = True
            continue
        results = _run_with_progress(compiled, targets if explicit else None, args,
                                     len(targets))
        failed |= any(r.failed for r in results)
        report.append((path, results))
    if args.format == "json":
        print(json.dumps({"ok": not failed, "files": [
            {"file": p, "targets": [r.to_json() for r in rs]} for p, rs in report]}, indent=2))
    else:
        for path, results in report:
            _print_table(path, results)
    return 1 if failed else 0


def _run_with_progress(compiled, targets: list[str] | None, args: argparse.Namespace,
                       total: int):
    from rich.progress import Progress

    def verify(tick=None):
        return api.verify(compiled, targets, frames=args.frames, seed=args.seed,
                          pcap_dir=args.pcap_out, progress=tick)

    if args.format == "json" or not sys.stderr.isatty():
        return verify()
    path = compiled.source.name
    with Progress(transient=True) as progress:
        task = progress.add_task(f"verify {path}", total=total)

        def tick(target: str) -> None:
            progress.update(task, advance=1, description=f"verify {path}: {target}")

        return verify(tick)


def _print_table(path: str, results) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"pfc verify {path}")
    for col in ("target", "hook", "frames", "agree", "disagree", "skipped-by-hook", "status"):
        table.add_column(col, justify="left" if col in ("target", "hook", "status") else "right")
    for r in results:
        rep = r.report
        table.add_row(r.target, r.hook, *(str(x) for x in (
            (rep.total, rep.agree, len(rep.mismatches), rep.skipped) if rep else ("-",) * 4)),
            _status(r))
    console.print(table)
    for r in results:
        _print_details(console, r)


def _status(r) -> str:
    if r.status == "agree" and r.report and not r.report.counters_agree:
        return "[red]counters differ[/red]"
    return {"agree": "[green]agree[/green]", "disagree": "[red]DISAGREE[/red]",
            "error": "[red]not expressible[/red]", "not-expressible": "not expressible",
            "compiled-only": "[yellow]compiled only[/yellow]"}[r.status]


def _print_details(console, r) -> None:
    """Plain lines (never wrapped): they are meant to be copied into a shell."""
    for line in r.not_expressible:
        print(f"  {r.target}: not expressible: {line}")
    if r.status == "compiled-only":
        print(f"  {r.target}: compiled only, not run: {r.reason}")
    if r.report is not None and not r.report.ok:
        print(f"  {r.target}: " + r.report.summary().replace("\n", "\n    "))
    if r.pcap:
        print(f"  minimal failing frame: {r.pcap}; replay with:")
        for cmd in r.replay:
            print(f"    {cmd}")


VERIFY = Command("verify", "check every target against the reference interpreter, in the kernel",
                 "Compile each policy for every requested target, generate frames from the\n"
                 "policy's constants (malformed ones included), run each target in the kernel\n"
                 "on the frames its hook can see (BPF_PROG_TEST_RUN, a packet socket, a\n"
                 "throw-away namespace), and compare verdicts, rewritten bytes and counters\n"
                 "with the reference interpreter. On a disagreement: exit 1, a minimal failing\n"
                 "pcap (shrunk by hypothesis) and the commands to replay it. Needs root for the\n"
                 "kernel runs; without it, targets are only compiled and the report says so.",
                 _args, _verify)
